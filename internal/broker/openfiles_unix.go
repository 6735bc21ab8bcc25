//go:build unix

package broker

import "syscall"

// openFileLimit is the soft RLIMIT_NOFILE, which the Go runtime raises to the hard limit
// at start; 0 when it is unlimited (RLIM_INFINITY, whatever its encoding) or unknown.
func openFileLimit() int64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	cur := uint64(lim.Cur) // int64 on some systems
	if cur > 1<<40 {
		return 0
	}
	return int64(cur)
}
