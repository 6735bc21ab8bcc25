//go:build linux && !bifrost_portable

package listener

import (
	"syscall"
	"unsafe"
)

// maxIovecs bounds one writev; what does not fit is queued by the caller like bytes the
// socket did not take. The iovecs live on the stack, so a write allocates nothing.
const maxIovecs = 64

// writev writes head and then bufs to the non-blocking socket fd with one writev(2) and
// returns how many bytes the socket took: less than all of them (even 0) when its buffer
// is full. err is set only for errors that end the connection (EPIPE, ECONNRESET...).
func writev(fd int, head []byte, bufs [][]byte) (int, error) {
	var iov [maxIovecs]syscall.Iovec
	k := 0
	if len(head) > 0 {
		iov[k].Base = &head[0]
		iov[k].SetLen(len(head))
		k++
	}
	for _, b := range bufs {
		if k == maxIovecs {
			break
		}
		if len(b) > 0 {
			iov[k].Base = &b[0]
			iov[k].SetLen(len(b))
			k++
		}
	}
	if k == 0 {
		return 0, nil
	}
	for {
		n, _, e := syscall.Syscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(k))
		switch e {
		case 0:
			return int(n), nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, nil
		default:
			return 0, e
		}
	}
}
