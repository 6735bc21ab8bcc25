//go:build linux && !bifrost_portable

package listener

// TLS on the epoll engine (tls.go says how crypto/tls is driven): the poller hands the
// ciphertext it reads to the connection's tlsConn with its own pump buffers.

// tlsData hands bytes read from a tls or wss connection to its TLS pump, with the
// poller's pump buffers (made by its first TLS bytes: a server without TLS listeners
// never has them). Only this poller's goroutine uses them.
func (p *poller) tlsData(c *conn, data []byte) {
	if p.tls == nil {
		p.tls = newPumpBufs(len(p.buf))
		p.tls.loop = p.idx
	}
	c.tls().received(data, p.tls)
}
