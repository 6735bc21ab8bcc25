//go:build (!linux || bifrost_portable) && unix

package listener

import (
	"net"
	"syscall"
)

// The portable engine's writes without waiting, on unix: Go's sockets there are
// non-blocking, so one write(2) on the descriptor takes what the socket has room for and
// returns.

// socketFD returns nc's descriptor, or -1 if it cannot be had (then every write goes
// through the write goroutine).
func socketFD(nc *net.TCPConn) int32 {
	rc, err := nc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := int32(-1)
	_ = rc.Control(func(s uintptr) { fd = int32(s) })
	return fd
}

// writeNow writes b to the non-blocking socket fd with one write(2) and returns how many
// bytes the socket took: fewer than len(b) (even 0) when its buffer is full. err is set
// only for errors that end the connection (EPIPE, ECONNRESET...).
func writeNow(fd int32, b []byte) (int, error) {
	if fd < 0 {
		return 0, nil
	}
	for {
		n, err := syscall.Write(int(fd), b)
		switch err {
		case nil:
			return n, nil
		case syscall.EINTR:
		case syscall.EAGAIN:
			return 0, nil
		default:
			return 0, err
		}
	}
}
