//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package store

// lockHolder cannot tell who holds a lock here: Open reports Pebble's own error.
func lockHolder(string) (pid int, held bool) { return 0, false }
