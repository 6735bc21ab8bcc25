package raftstore

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// The comparison with hashicorp/raft-wal and raft-boltdb is a module of its own,
// bench/raftlog, so that their dependencies stay out of bifrost's go.mod; its table is
// this one.

// benchStores are the log stores the benchmarks compare: the Store, and raft's
// InmemStore as the floor (no disk, no encoding).
var benchStores = []struct {
	name string
	open func(b *testing.B) raft.LogStore
}{
	{"Pebble", func(b *testing.B) raft.LogStore { return openTest(b, b.TempDir()) }},
	{"Inmem", func(*testing.B) raft.LogStore { return raft.NewInmemStore() }},
}

// BenchmarkStoreLogs stores batches of Entries entries of Size bytes of data each, at
// rising indexes, as a leader or follower appends: one op is one StoreLogs call.
func BenchmarkStoreLogs(b *testing.B) {
	for _, st := range benchStores {
		for _, size := range []int{100, 1024} {
			for _, n := range []int{1, 64} {
				b.Run(fmt.Sprintf("Store=%s/Entries=%d/Size=%dB", st.name, n, size), func(b *testing.B) {
					s := st.open(b)
					logs := make([]*raft.Log, n)
					for i := range logs {
						logs[i] = &raft.Log{Term: 1, Type: raft.LogCommand, Data: make([]byte, size)}
					}
					b.SetBytes(int64(n * size))
					index := uint64(1)
					for b.Loop() {
						for _, l := range logs {
							l.Index = index
							index++
						}
						if err := s.StoreLogs(logs); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkGetLog reads entries of Size bytes of data from a log of 4,096, spread over
// it, as replication reads back recent entries.
func BenchmarkGetLog(b *testing.B) {
	const count = 4096
	for _, st := range benchStores {
		for _, size := range []int{100, 1024} {
			b.Run(fmt.Sprintf("Store=%s/Size=%dB", st.name, size), func(b *testing.B) {
				s := st.open(b)
				logs := make([]*raft.Log, 0, 64)
				for i := uint64(1); i <= count; i++ {
					logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: make([]byte, size)})
					if len(logs) == cap(logs) {
						if err := s.StoreLogs(logs); err != nil {
							b.Fatal(err)
						}
						logs = logs[:0]
					}
				}
				b.SetBytes(int64(size))
				var l raft.Log
				i := uint64(0)
				for b.Loop() {
					i = (i + 7919) % count // a prime stride: every entry, out of order
					if err := s.GetLog(i+1, &l); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
