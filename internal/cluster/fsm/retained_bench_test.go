package fsm

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// benchOps returns n set ops of distinct topics ("sensors/<building>/<i>/temp", about 25
// bytes) with payloads of size bytes and a user property.
func benchOps(n, size, from int) []RetainOp {
	payload := []byte(strings.Repeat("p", size))
	props := []byte{0x26, 0, 4, 'u', 'n', 'i', 't', 0, 1, 'C'}
	ops := make([]RetainOp, n)
	for i := range ops {
		ops[i] = RetainOp{Topic: fmt.Appendf(nil, "sensors/b%d/%d/temp", (from+i)%97, from+i), Payload: payload, Props: props, QoS: 1}
	}
	return ops
}

// BenchmarkRetainEncode: one retains entry (Ops changes) encoded for the log.
func BenchmarkRetainEncode(b *testing.B) {
	for _, size := range []int{16, 256} {
		for _, n := range []int{1, 64} {
			b.Run(fmt.Sprintf("MsgSz=%db/Ops=%d", size, n), func(b *testing.B) {
				c := Retains{Ops: benchOps(n, size, 0)}
				b.ReportAllocs()
				var data []byte
				for b.Loop() {
					data = Encode(c)
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
					entries = append(entries, Encode(Retains{Ops: benchOps(n, size, i)}))
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
					e := Encode(Retains{Ops: benchOps(1000, size, i)})
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
