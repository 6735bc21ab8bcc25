// Package raftlog compares raft log stores: bifrost's internal/cluster/raftstore (Pebble)
// with hashicorp/raft-wal, hashicorp/raft-boltdb and raft's InmemStore. It is a module of
// its own so that raft-wal's and raft-boltdb's dependencies stay out of bifrost's go.mod;
// it has benchmarks only. Run from this directory:
//
//	go test -run '^$' -bench . -benchmem
package raftlog
