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
// once the peers have it (the table is the broker's index: nothing is kept here but the
// changes in flight, and the filter's bytes are the subscribing session's) and a filter
// of a peer's table, exact
// ("devices/{n}/cmd": a hash in the peer's exact set) or with a wildcard
// ("devices/{n}/cmd/#": its entry in the remote index), 100,000 of them.
//
//	go test -run XXX -bench BenchmarkRouteMemory -benchtime 1x ./internal/cluster
func BenchmarkRouteMemory(b *testing.B) {
	const n = 100_000
	filters := func(format string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(format, i)
		}
		return out
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	b.Run("Side=local", func(b *testing.B) {
		fs := filters("devices/%d/cmd/#") // the sessions' strings
		for range b.N {
			r := newRoutes(&Cluster{})
			before := heap()
			for _, f := range fs {
				r.add(f, true) // as AddRoute gets it from the broker: the session's string
			}
			r.mu.Lock()
			r.raiseFloorLocked(nil) // as settle does once every live peer has them
			r.mu.Unlock()
			b.ReportMetric(float64(heap()-before)/n, "B/route")
			runtime.KeepAlive(r)
		}
	})
	for _, k := range []struct{ name, format string }{{"exact", "devices/%d/cmd"}, {"wildcard", "devices/%d/cmd/#"}} {
		fs := filters(k.format)
		b.Run("Side=remote/Filter="+k.name, func(b *testing.B) {
			for range b.N {
				r := newRoutes(&Cluster{})
				r.own("p", 1, nil)
				before := heap()
				r.apply("p", 1, true, fs, nil, 1)
				b.ReportMetric(float64(heap()-before)/n, "B/route")
				runtime.KeepAlive(r)
			}
		})
	}
}

// BenchmarkForward is the sending node's cost of a message that crosses to one peer
// through a wildcard route or an exact one: matching the remote index and the exact
// sets, the pooled copy, queueing (the link's goroutine is replaced by taking the message
// off the queue and freeing it, as it does once sent). At QoS 1 the message carries a
// done, and the peer's acknowledgement is settled (settle) as the link's readAcks does;
// the broker's hold that done belongs to is broker.TestPublishPathAllocs's.
//
//	go test -run XXX -bench BenchmarkForward -benchmem ./internal/cluster
func BenchmarkForward(b *testing.B) {
	for _, route := range []string{"devices/+/state", "devices/42/state"} {
		for _, size := range []int{64, 1024} {
			for _, qos := range []byte{0, 1} {
				b.Run(fmt.Sprintf("Route=%s/MsgSz=%db/QoS=%d", route, size, qos), func(b *testing.B) { benchForward(b, route, size, qos) })
			}
		}
	}
}

func benchForward(b *testing.B, route string, size int, qos byte) {
	c := &Cluster{ctx: context.Background()}
	c.routes = newRoutes(c)
	c.fwd = newForwarder(c)
	r := c.routes
	r.own("p", 1, nil)
	r.apply("p", 1, true, []string{route, "other/#", "other/1"}, nil, 1)
	l := newFwdLink(c.fwd, "p") // not started
	c.fwd.mu.Lock()
	c.fwd.links["p"] = l
	c.fwd.setByIDLocked(l.id, l)
	c.fwd.mu.Unlock()
	m := session.NewLocalMessage("devices/42/state", make([]byte, size), qos, false)
	o := &broker.Outbound{Msg: m}
	var acked int
	var done func()
	if qos > 0 {
		done = func() { acked++ }
	}
	b.ReportAllocs()
	for b.Loop() {
		if c.fwd.Forward(o, done) != 1 {
			b.Fatal("not forwarded")
		}
		l.mu.Lock()
		q := l.queue[l.head]
		l.queue, l.head, l.qBytes = l.queue[:0], 0, 0
		l.mu.Unlock()
		if qos > 0 {
			c.fwd.settle(l, q, true)
		} else {
			q.free()
		}
	}
	if qos > 0 && acked != b.N {
		b.Fatalf("%d dones for %d messages", acked, b.N)
	}
}
