//go:build unix

package loadgen

import "syscall"

// raiseOpenFiles raises the soft limit on open files to the hard one, which any process
// may do, and returns the soft limit now in force. Root cannot go past the hard limit
// either where the container or VM fixes it, hence the worker processes.
func raiseOpenFiles() (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = want.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			lim = want
		}
	}
	return int(min(lim.Cur, 1<<30)), nil
}
