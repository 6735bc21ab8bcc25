//go:build !linux || bifrost_portable

package listener

// What the tests expect of the portable engine where the engines differ (the epoll
// engine's: loop_linux_test.go).

// goroutinesPerConn is the goroutines an idle connection holds: its reader.
const goroutinesPerConn = 1

// engineGoroutines returns the goroutines of ours the engine runs for s with conns
// connections open and idle: their readers (no write goroutine stays).
func engineGoroutines(_ *Server, conns int) int32 { return int32(conns) }

// upgradesHeld returns the ws connections whose decoder state the engine still holds once
// the Server is closed: on the portable engine that state lives in its reader's frame
// and goes with it, and Close has waited for every reader.
func upgradesHeld(*Server) int { return 0 }
