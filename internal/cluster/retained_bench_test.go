package cluster

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/hashicorp/raft"
)

// benchOps returns n set ops of distinct topics ("sensors/<building>/<i>/temp", about 25
// bytes) with payloads of size bytes and a user property.
func benchOps(n, size, from int) []retainOp {
	payload := []byte(strings.Repeat("p", size))
	props := []byte{0x26, 0, 4, 'u', 'n', 'i', 't', 0, 1, 'C'}
	ops := make([]retainOp, n)
	for i := range ops {
		ops[i] = retainOp{topic: fmt.Appendf(nil, "sensors/b%d/%d/temp", (from+i)%97, from+i), payload: payload, props: props, qos: 1}
	}
	return ops
}

// BenchmarkRetainEncode: one retains entry (Ops changes) encoded for the log.
func BenchmarkRetainEncode(b *testing.B) {
	for _, size := range []int{16, 256} {
		for _, n := range []int{1, 64} {
			b.Run(fmt.Sprintf("MsgSz=%db/Ops=%d", size, n), func(b *testing.B) {
				c := retains{ops: benchOps(n, size, 0)}
				b.ReportAllocs()
				var data []byte
				for b.Loop() {
					data = encodeCommand(c)
				}
				b.ReportMetric(float64(len(data))/float64(n), "B/change")
			})
		}
	}
}

// BenchmarkRetainApply: one retains entry decoded and applied by a node's FSM (no broker
// behind it), each change a set of a topic among 10,000, so that the map stays its size.
func BenchmarkRetainApply(b *testing.B) {
	for _, size := range []int{16, 256} {
		for _, n := range []int{1, 64} {
			b.Run(fmt.Sprintf("MsgSz=%db/Ops=%d", size, n), func(b *testing.B) {
				const topics = 10000
				var entries [][]byte
				for i := 0; i < topics; i += n {
					entries = append(entries, encodeCommand(retains{ops: benchOps(n, size, i)}))
				}
				var f FSM
				l := &raft.Log{Type: raft.LogCommand}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					l.Index++
					l.Data = entries[i%len(entries)]
					if r := f.Apply(l).(applied); r.err != nil {
						b.Fatal(r.err)
					}
					i++
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/change")
			})
		}
	}
}

// BenchmarkRetainedSetBytes: the heap a node's replicated set takes per retained topic,
// message included (the broker's index shares that message: on a node its bytes are held
// once), for 100,000 topics of about 25 bytes.
func BenchmarkRetainedSetBytes(b *testing.B) {
	const topics = 100_000
	for _, size := range []int{16, 256} {
		b.Run(fmt.Sprintf("MsgSz=%db/Topics=%d", size, topics), func(b *testing.B) {
			var perTopic float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				f := new(FSM)
				for i := 0; i < topics; i += 1000 {
					e := encodeCommand(retains{ops: benchOps(1000, size, i)})
					f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: e})
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if f.RetainedLen() != topics {
					b.Fatalf("%d topics", f.RetainedLen())
				}
				perTopic = float64(after.HeapAlloc-before.HeapAlloc) / topics
				runtime.KeepAlive(f)
			}
			b.ReportMetric(perTopic, "B/topic")
			b.ReportMetric(perTopic-float64(size), "B/topic-overhead")
		})
	}
}

// BenchmarkRetainedChanges: retained changes handed to a node of three in-process nodes
// on loopback (Raft's log on Pebble), InFlight at a time, each waited for until applied
// on that node (what a publisher's PUBACK waits for), on the leader and on a follower.
func BenchmarkRetainedChanges(b *testing.B) {
	for _, on := range []string{"leader", "follower"} {
		for _, inflight := range []int{1, 64} {
			b.Run(fmt.Sprintf("On=%s/InFlight=%d", on, inflight), func(b *testing.B) {
				nodes := benchRetainedCluster(b)
				var n *Cluster
				for _, c := range nodes {
					if c.IsLeader() == (on == "leader") {
						n = c
					}
				}
				entries := n.ret.entriesNow()
				sem := make(chan struct{}, inflight)
				msg := session.NewLocalMessage("bench/t", []byte(strings.Repeat("p", 64)), 1, true)
				b.ResetTimer()
				for range b.N {
					sem <- struct{}{}
					seq := n.Retain(msg)
					go func() {
						n.ret.waitDone(seq)
						<-sem
					}()
				}
				for range inflight {
					sem <- struct{}{}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "changes/s")
				b.ReportMetric(float64(b.N)/float64(max(n.ret.entriesNow()-entries, 1)), "changes/entry")
			})
		}
	}
}

func (r *retainer) entriesNow() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entries
}

// waitDone waits until the change numbered seq is done here (polling: a benchmark's
// helper; the broker waits with a Gate).
func (r *retainer) waitDone(seq uint64) {
	for {
		r.mu.Lock()
		done := r.done >= seq
		r.mu.Unlock()
		if done {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// benchRetainedCluster starts three formed nodes with retained stores; the benchmark
// closes them.
func benchRetainedCluster(b *testing.B) []*Cluster {
	b.Helper()
	nodes := benchNodes(b, func(c *Cluster, _ string) { c.SetRetainedStore(&syncStore{}) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		leaders := 0
		for _, c := range nodes {
			if c.IsLeader() {
				leaders++
			}
		}
		if leaders == 1 {
			return nodes
		}
		if ctx.Err() != nil {
			b.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond) // polling: leadership has no notice here
	}
}
