//go:build !unix

package cluster

// stop and cont need SIGSTOP and SIGCONT: the tests that pause a node skip here.
func (nd *node) stop() { nd.t.Skip("no SIGSTOP on this platform") }
func (nd *node) cont() {}
