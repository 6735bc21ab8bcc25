//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package store

import (
	"io"
	"os"
	"syscall"
)

// lockHolder reports whether another process holds the POSIX record lock Pebble takes
// on path (vfs.Default's Lock: F_SETLK, F_WRLCK, the whole file), and its pid as F_GETLK
// tells it: 0 when the holder is in a PID namespace this process cannot see. A lock of
// this process is not reported (F_GETLK ignores the caller's own locks), and the caller
// must not hold one on path: closing any descriptor of a file drops the process's record
// locks on it, and lockHolder opens and closes one.
func lockHolder(path string) (pid int, held bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK {
		return 0, false
	}
	return int(lk.Pid), true
}

// lockFile takes the POSIX record lock that Pebble takes on its LOCK file, on path,
// creating it, so that lockHolder names the holder of a log engine's directory as it
// names a Pebble database's. release closes the file, which drops the lock.
func lockFile(path string) (release func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}
