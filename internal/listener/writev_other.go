//go:build unix && !linux

package listener

import "syscall"

// writev takes nothing: the caller queues every buffer in nbio, in order, which writes
// them one by one. Vectored writes are Linux-only for now.
func writev(int, []byte, [][]byte) (int, error) { return 0, nil }

// shutdownWrite half-closes the socket fd: the peer reads EOF after what was sent.
func shutdownWrite(fd int) error { return syscall.Shutdown(fd, syscall.SHUT_WR) }
