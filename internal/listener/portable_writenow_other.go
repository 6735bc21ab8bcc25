//go:build !unix

package listener

import "net"

// Where Go's sockets are not unix descriptors (Windows: overlapped I/O), the portable
// engine cannot write without waiting: every write goes through the connection's write
// goroutine (portable_conn.go), and Buffered counts what it has not handed to the socket
// yet, even bytes the socket would take at once.

// socketFD returns -1: there is no descriptor to write to.
func socketFD(*net.TCPConn) int32 { return -1 }

// writeNow takes nothing: the write goroutine sends it all.
func writeNow(int32, []byte) (int, error) { return 0, nil }
