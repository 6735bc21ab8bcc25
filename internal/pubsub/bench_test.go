package pubsub

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Benchmarks build their 1M-entry index once, outside the timer, and report with the time
// per operation the index's heap per subscription (B/sub, the HeapAlloc delta after a GC),
// the part of it the GC scans for pointers (scan-B/sub), and the median time of a full
// runtime.GC() with the index live (gc-ms; on a quiet 2-core machine an empty heap takes
// 0.3–4 ms).
//
//	go test -run '^$' -bench . -benchmem ./internal/pubsub/

const benchSubs = 1_000_000

// benchFilter appends filter number i of a kind: "exact" is 1M "devices/{i}/cmd";
// "wildcard" is 1,000 sites of 1,000 devices, "site/{s}/dev/{d}/cmd", with one filter in
// ten a wildcard one: "site/{s}/+/{d}/cmd" or "site/{s}/dev/{d}/#".
func benchFilter(b []byte, kind string, i int) []byte {
	if kind == "exact" {
		b = append(b[:0], "devices/"...)
		b = strconv.AppendInt(b, int64(i), 10)
		return append(b, "/cmd"...)
	}
	s, d := i/1000, i%1000
	b = append(b[:0], "site/"...)
	b = strconv.AppendInt(b, int64(s), 10)
	switch i % 20 {
	case 0:
		b = append(b, "/+/"...)
		b = strconv.AppendInt(b, int64(d), 10)
		return append(b, "/cmd"...)
	case 1:
		b = append(b, "/dev/"...)
		b = strconv.AppendInt(b, int64(d), 10)
		return append(b, "/#"...)
	}
	b = append(b, "/dev/"...)
	b = strconv.AppendInt(b, int64(d), 10)
	return append(b, "/cmd"...)
}

// benchTopic returns a topic of a kind that some filter matches.
func benchTopic(kind string, i int) []byte {
	if kind == "exact" {
		return fmt.Appendf(nil, "devices/%d/cmd", i)
	}
	return fmt.Appendf(nil, "site/%d/dev/%d/cmd", i/1000, i%1000)
}

type benchIndex struct {
	x       *Index
	topics  [][]byte
	perSub  float64 // heap bytes per subscription
	scan    float64 // scannable heap bytes per subscription: what the GC must mark through
	gcMs    float64 // one runtime.GC() with the index live
	buildNs float64 // Subscribe while building, per subscription
	oldest  int     // BenchmarkChurn: the oldest filter still subscribed
}

// gcTime returns the median time of a full runtime.GC(), in milliseconds.
func gcTime() float64 {
	var d [9]time.Duration
	for i := range d {
		start := time.Now()
		runtime.GC()
		d[i] = time.Since(start)
	}
	slices.Sort(d[:])
	return float64(d[len(d)/2].Microseconds()) / 1000
}

// scannable returns the bytes of heap the GC scans for pointers, after a GC.
func scannable() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func buildBench(kind string) benchIndex {
	var bi benchIndex
	r := rand.New(rand.NewPCG(1, 1))
	for range 4096 {
		bi.topics = append(bi.topics, benchTopic(kind, r.IntN(benchSubs)))
	}
	before, scan := heapAlloc(), scannable()
	bi.x = NewIndex()
	var buf []byte
	start := time.Now()
	for i := range benchSubs {
		buf = benchFilter(buf, kind, i)
		bi.x.Subscribe(buf, Sub{Subscriber: SubscriberID(i + 1), QoS: 1})
	}
	bi.buildNs = float64(time.Since(start).Nanoseconds()) / benchSubs
	bi.perSub = float64(heapAlloc()-before) / benchSubs
	bi.scan = float64(int64(scannable())-int64(scan)) / benchSubs
	bi.gcMs = gcTime()
	return bi
}

func (bi *benchIndex) report(b *testing.B) {
	b.ReportMetric(bi.perSub, "B/sub")
	b.ReportMetric(bi.scan, "scan-B/sub")
	b.ReportMetric(bi.gcMs, "gc-ms")
}

func BenchmarkMatch(b *testing.B) {
	for _, kind := range []string{"exact", "wildcard"} {
		bi := buildBench(kind)
		b.Run("Subs=1M/Kind="+kind, func(b *testing.B) {
			var m Matches
			matched := 0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				m.Reset()
				bi.x.Match(bi.topics[i%len(bi.topics)], &m)
				matched += len(m.Subs)
			}
			b.ReportMetric(float64(matched)/float64(b.N), "subs/op")
			b.ReportMetric(bi.buildNs, "subscribe-ns")
			bi.report(b)
		})
		runtime.KeepAlive(bi.x)
	}
}

// BenchmarkChurn slides a window of 1M filters: each op unsubscribes the oldest and
// subscribes a new one (new devices, or devices on new sites).
func BenchmarkChurn(b *testing.B) {
	for _, kind := range []string{"exact", "wildcard"} {
		bi := buildBench(kind)
		b.Run("Subs=1M/Kind="+kind, func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				old := bi.oldest
				buf = benchFilter(buf, kind, old)
				if !bi.x.Unsubscribe(buf, SubscriberID(old+1)) {
					b.Fatalf("filter %s was not there", buf)
				}
				buf = benchFilter(buf, kind, old+benchSubs)
				bi.x.Subscribe(buf, Sub{Subscriber: SubscriberID(old + benchSubs + 1)})
				bi.oldest++
			}
			bi.report(b)
		})
		runtime.KeepAlive(bi.x)
	}
}

func BenchmarkRetained(b *testing.B) {
	r := NewRetained[*[64]byte]()
	msg := new([64]byte)
	var buf []byte
	before, scan := heapAlloc(), scannable()
	for i := range benchSubs {
		buf = append(buf[:0], benchTopic("wildcard", i)...)
		r.Set(buf, msg)
	}
	perTopic := float64(heapAlloc()-before) / benchSubs
	scanPerTopic := float64(int64(scannable())-int64(scan)) / benchSubs
	gc := gcTime()
	rnd := rand.New(rand.NewPCG(2, 2))
	b.Run("Topics=1M/Op=Get", func(b *testing.B) {
		topics := make([][]byte, 4096)
		for i := range topics {
			topics[i] = benchTopic("wildcard", rnd.IntN(benchSubs))
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			r.Get(topics[i%len(topics)])
		}
		b.ReportMetric(perTopic, "B/topic")
		b.ReportMetric(scanPerTopic, "scan-B/topic")
		b.ReportMetric(gc, "gc-ms")
	})
	b.Run("Topics=1M/Op=Match/Matched=1K", func(b *testing.B) {
		filters := make([][]byte, 64)
		for i := range filters {
			filters[i] = fmt.Appendf(nil, "site/%d/dev/+/cmd", rnd.IntN(benchSubs/1000))
		}
		n := 0
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			r.Match(filters[i%len(filters)], func(string, *[64]byte) bool { n++; return true })
		}
		b.ReportMetric(float64(n)/float64(b.N), "topics/op")
	})
	runtime.KeepAlive(r)
}
