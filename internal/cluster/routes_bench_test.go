package cluster

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// BenchmarkRouteMemory reports the heap a route costs: a filter of this node's table
// (its key, refcount and version) and a filter of a peer's table (its entry in the
// remote index, the only place it is kept). Filters like
// "devices/{n}/cmd/#", 100,000 of them.
//
//	go test -run XXX -bench BenchmarkRouteMemory -benchtime 1x ./internal/cluster
func BenchmarkRouteMemory(b *testing.B) {
	const n = 100_000
	filters := make([]string, n)
	for i := range filters {
		filters[i] = fmt.Sprintf("devices/%d/cmd/#", i)
	}
	raw := make([][]byte, n)
	for i, f := range filters {
		raw[i] = []byte(f)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	b.Run("Side=local", func(b *testing.B) {
		for range b.N {
			r := newRoutes(&Cluster{})
			before := heap()
			for _, f := range raw {
				r.add(string(f)) // as AddRoute gets it from the broker
			}
			b.ReportMetric(float64(heap()-before)/n, "B/route")
			runtime.KeepAlive(r)
		}
	})
	b.Run("Side=remote", func(b *testing.B) {
		for range b.N {
			r := newRoutes(&Cluster{})
			r.own("p", 1, nil)
			before := heap()
			r.apply("p", 1, true, filters, nil, 1)
			b.ReportMetric(float64(heap()-before)/n, "B/route")
			runtime.KeepAlive(r)
		}
	})
}

// BenchmarkForward is the sending node's cost of a message that crosses to one peer:
// matching the remote index, the pooled copy, queueing (the link's goroutine is replaced
// by taking the message off the queue and freeing it, as it does once sent).
//
//	go test -run XXX -bench BenchmarkForward -benchmem ./internal/cluster
func BenchmarkForward(b *testing.B) {
	for _, size := range []int{64, 1024} {
		b.Run(fmt.Sprintf("MsgSz=%db", size), func(b *testing.B) {
			c := &Cluster{ctx: context.Background()}
			c.routes = newRoutes(c)
			c.fwd = newForwarder(c)
			r := c.routes
			r.own("p", 1, nil)
			r.apply("p", 1, true, []string{"devices/+/state", "other/#"}, nil, 1)
			l := newFwdLink(c.fwd, "p") // not started
			c.fwd.links["p"] = l
			m := session.NewLocalMessage("devices/42/state", make([]byte, size), 0, false)
			o := &broker.Outbound{Msg: m}
			b.ReportAllocs()
			for b.Loop() {
				if c.fwd.Forward(o) != 1 {
					b.Fatal("not forwarded")
				}
				l.mu.Lock()
				q := l.queue[l.head]
				l.queue, l.head, l.qBytes = l.queue[:0], 0, 0
				l.mu.Unlock()
				q.free()
			}
		})
	}
}
