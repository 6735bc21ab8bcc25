//go:build !unix

package loadgen

// raiseOpenFiles reports a limit of open files large enough not to matter where there is
// no RLIMIT_NOFILE.
func raiseOpenFiles() (int, error) { return 1 << 20, nil }
