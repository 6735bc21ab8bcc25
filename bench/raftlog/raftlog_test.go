package raftlog

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/raftstore"
)

// stores are the log stores compared, each opened in a directory of its own and closed
// when the benchmark ends. Each syncs every StoreLogs (raft-boltdb: one transaction,
// raft-wal: one segment write and fsync); InmemStore is the floor.
var stores = []struct {
	name string
	open func(b *testing.B) raft.LogStore
}{
	{"Pebble", func(b *testing.B) raft.LogStore {
		s, err := raftstore.Open(b.TempDir(), slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"RaftWAL", func(b *testing.B) raft.LogStore {
		s, err := wal.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"BoltDB", func(b *testing.B) raft.LogStore {
		s, err := raftboltdb.NewBoltStore(filepath.Join(b.TempDir(), "raft.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}},
	{"Inmem", func(*testing.B) raft.LogStore { return raft.NewInmemStore() }},
}

// BenchmarkStoreLogs stores batches of Entries entries of Size bytes of data each, at
// rising indexes, as a leader or follower appends: one op is one StoreLogs call.
// (internal/cluster/raftstore's bench_test.go is the same table for bifrost's module.)
func BenchmarkStoreLogs(b *testing.B) {
	for _, st := range stores {
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
	for _, st := range stores {
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
