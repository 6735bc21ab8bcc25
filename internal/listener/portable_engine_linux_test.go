//go:build bifrost_portable

package listener

// What the Linux-only tests (memory_linux_test.go, fork_linux_test.go) expect of the
// portable engine, which they run on when built with -tags bifrost_portable.

// idleHeapBudget returns the most live heap an idle connection of type typ may cost the
// listener, and whether that is checked: on the portable engine it is reported, not
// checked (a goroutine and a read buffer per connection; see the package doc).
func idleHeapBudget(string) (float64, bool) { return 0, false }

// sockFD returns the descriptor of c's socket.
func sockFD(c *conn) int { return int(c.fd) }
