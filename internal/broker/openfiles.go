package broker

// A connection is an open file, and so is everything else the broker needs to stay
// manageable: the store's files, the HTTP endpoint's connections, a cluster's gossip,
// Raft and gRPC connections. Clients that take the last descriptors leave accept
// failing for all of them (EMFILE): /metrics goes dark, a cluster node stops answering
// its peers' probes and is declared dead by a cluster it still serves. So the broker
// holds at most the process's open-file limit less a reserve, and refuses the
// connections past it at once, as it does past limits.max_connections.

// fileReserve is what the broker keeps of limit open files for everything but client
// connections: a twentieth, at least 256 and at most 4,096 (a store keeps a few tens of
// files open, a cluster node a few per peer, each HTTP request one).
func fileReserve(limit int64) int64 {
	return min(max(limit/20, 256), 4096)
}

// fileCap is the most client connections the process's open-file limit leaves room for;
// 0 when it sets none (no limit, or a system without one).
func fileCap() int64 {
	limit := openFileLimit()
	if limit <= 0 {
		return 0
	}
	return max(limit-fileReserve(limit), 1)
}

// ConnectionCap is the most connections the broker holds at once: limits.max_connections
// or the open-file limit's room (fileCap), the lower; 0 when neither caps them.
func ConnectionCap(maxConnections int64) int64 {
	files := fileCap()
	switch {
	case maxConnections <= 0:
		return files
	case files <= 0:
		return maxConnections
	}
	return min(maxConnections, files)
}
