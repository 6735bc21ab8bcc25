//go:build !linux || bifrost_portable

package listener

import "testing"

// What the tests expect of the portable engine where the engines differ (the epoll
// engine's: epoll_loop_linux_test.go).

// connSize is the size of a conn on 64-bit platforms: the epoll engine's, and the
// descriptor writeNow writes to.
const connSize = 96

// goroutinesPerConn is the goroutines an idle connection holds: its reader.
const goroutinesPerConn = 1

// engineGoroutines returns the goroutines of ours the engine runs for s with conns
// connections open and idle: their readers (no write goroutine stays).
func engineGoroutines(_ *Server, conns int) int32 { return int32(conns) }

// upgradesHeld returns the ws connections whose decoder state the engine still holds once
// the Server is closed: on the portable engine that state lives in its reader's frame
// and goes with it, and Close has waited for every reader.
func upgradesHeld(*Server) int { return 0 }

// TestNextReadSize: a connection's read buffer grows 4x when a read fills it, up to the
// limit, and goes back to readMin when a read would have fitted that.
func TestNextReadSize(t *testing.T) {
	const limit = 32 << 10
	for _, tc := range []struct{ size, n, want int }{
		{readMin, 10, readMin},
		{readMin, readMin, 4 * readMin},
		{16 << 10, 16 << 10, limit}, // capped
		{limit, limit, limit},
		{limit, 5000, limit}, // traffic still larger than readMin: keep
		{limit, readMin, readMin},
		{4 * readMin, 3, readMin},
	} {
		if got := nextReadSize(tc.size, tc.n, limit); got != tc.want {
			t.Errorf("nextReadSize(%d, %d) = %d, want %d", tc.size, tc.n, got, tc.want)
		}
	}
}
