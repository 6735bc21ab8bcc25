package cluster

import (
	"fmt"
	"runtime"
	"testing"
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
			r.own("p", 1)
			before := heap()
			r.apply("p", 1, true, filters, nil, 1)
			b.ReportMetric(float64(heap()-before)/n, "B/route")
			runtime.KeepAlive(r)
		}
	})
}
