package admin

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// The live dashboard: one page (dashboard/index.html, embedded: nothing is fetched from
// the internet) that reads /api/v1/stream, a server-sent event of the broker's figures
// every second. The figures are gathered for each open stream only, so the dashboard
// costs nothing when nobody watches; maxStreams bounds what watchers can cost.

//go:embed dashboard
var dashboardFiles embed.FS

// Dashboard settings, with their reasons.
const (
	// streamEvery is a stream's period: what a person watching reads.
	streamEvery = time.Second
	// maxStreams bounds the streams open at once: each gathers the metrics once a tick.
	maxStreams = 8
	// topQueues is how many of the deepest backlogs the dashboard shows.
	topQueues = 10
)

// Source is what the dashboard reads of the broker besides Broker.
type Source interface {
	ClientsByProtocol() map[string]int64
	QueueScan(cursor uint32, n int, top []broker.QueueInfo) (uint32, []broker.QueueInfo)
}

// snapshot is one event of the stream: totals and current values; the page turns the
// totals into rates.
type snapshot struct {
	Time        int64              `json:"t"` // Unix milliseconds
	Connections map[string]float64 `json:"connections_by_listener"`
	Protocols   map[string]int64   `json:"connections_by_protocol"`
	Received    float64            `json:"received"`
	Sent        float64            `json:"sent"`
	BytesIn     float64            `json:"bytes_in"`
	BytesOut    float64            `json:"bytes_out"`
	Dropped     map[string]float64 `json:"dropped"`
	Refused     map[string]float64 `json:"refused"`
	Subs        float64            `json:"subscriptions"`
	Retained    float64            `json:"retained"`
	Load        float64            `json:"load"`
	Memory      memorySnapshot     `json:"memory"`
	Store       *storeSnapshot     `json:"store,omitempty"`
	TopQueues   []broker.QueueInfo `json:"top_queues"`
	Nodes       []metrics.NodeLoad `json:"nodes,omitempty"`
}

type memorySnapshot struct {
	RSS       uint64  `json:"rss"`
	HeapLive  uint64  `json:"heap_live"`    // after the last GC; 0 before the first
	HeapInUse uint64  `json:"heap_objects"` // the heap's objects now, garbage included
	Limit     uint64  `json:"limit"`
	GCCycles  uint64  `json:"gc_cycles"`
	GCCPU     float64 `json:"gc_cpu_seconds"`
	CPU       float64 `json:"cpu_seconds"`
	Goroutine uint64  `json:"goroutines"`
}

type storeSnapshot struct {
	Commits    float64 `json:"commits"`
	CommitSum  float64 `json:"commit_seconds_sum"`
	CommitN    float64 `json:"commit_count"`
	DiskBytes  float64 `json:"disk_bytes"`
	Messages   float64 `json:"messages"`
	QueueDepth float64 `json:"queue,omitempty"`
}

// registerDashboard adds the page; its stream is a route of the API.
func (a *api) registerDashboard(mux Mux) {
	page, _ := fs.Sub(dashboardFiles, "dashboard")
	files := http.StripPrefix("/dashboard/", http.FileServerFS(page))
	mux.Handle("GET /dashboard/", a.guard(func(w http.ResponseWriter, r *http.Request, _ string) {
		w.Header().Set("Cache-Control", "no-store")
		files.ServeHTTP(w, r)
	}))
}

// streams counts the open streams.
var streams atomic.Int32

func (a *api) stream(w http.ResponseWriter, r *http.Request, _ string) {
	if a.o.Metrics == nil || a.o.Source == nil {
		fail(w, http.StatusNotImplemented, "not_implemented", "no figures to stream")
		return
	}
	if streams.Add(1) > maxStreams {
		streams.Add(-1)
		fail(w, http.StatusServiceUnavailable, "busy", fmt.Sprintf("%d dashboards are open already", maxStreams))
		return
	}
	defer streams.Add(-1)
	flusher, ok := w.(http.Flusher)
	if !ok {
		fail(w, http.StatusInternalServerError, "internal", "the connection cannot stream")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	var cursor uint32
	var scanning, shown []broker.QueueInfo
	t := time.NewTicker(streamEvery)
	defer t.Stop()
	for {
		// The deepest queues: a bounded part of the sessions each tick; the list shown is
		// that of the last complete walk (or the walk so far, until the first completes).
		cursor, scanning = a.o.Source.QueueScan(cursor, topQueues, scanning)
		if cursor == 0 {
			shown, scanning = scanning, nil
		}
		s := a.snapshot()
		s.TopQueues = shown
		if s.TopQueues == nil {
			s.TopQueues = append([]broker.QueueInfo{}, scanning...)
		}
		data, _ := json.Marshal(s)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// snapshot gathers the figures now.
func (a *api) snapshot() snapshot {
	m := a.o.Metrics.Sums()
	total := func(name string) float64 {
		v := 0.0
		for _, x := range m[name] {
			v += x
		}
		return v
	}
	s := snapshot{Time: time.Now().UnixMilli(), Connections: m["bifrost_connections_current"],
		Protocols: a.o.Source.ClientsByProtocol(),
		Received:  total("bifrost_messages_received_total"), Sent: total("bifrost_messages_sent_total"),
		BytesIn: total("bifrost_bytes_received_total"), BytesOut: total("bifrost_bytes_sent_total"),
		Dropped: m["bifrost_messages_dropped_total"], Refused: m["bifrost_connects_refused_total"],
		Subs: total("bifrost_subscriptions_current"), Retained: total("bifrost_retained_messages_current"),
		Load: a.o.Metrics.Load().Load, Memory: readMemory()}
	if _, ok := m["bifrost_store_commits_total"]; ok {
		s.Store = &storeSnapshot{Commits: total("bifrost_store_commits_total"),
			CommitSum: total("bifrost_store_commit_duration_seconds_sum"), CommitN: total("bifrost_store_commit_duration_seconds_count"),
			DiskBytes: total("bifrost_store_disk_bytes"), Messages: total("bifrost_store_messages")}
	}
	if a.o.Nodes != nil {
		s.Nodes = a.o.Nodes()
	}
	return s
}

// readMemory reads the runtime's figures and the resident set size.
func readMemory() memorySnapshot {
	samples := []rtmetrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/gomemlimit:bytes"}, {Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/total:cpu-seconds"},
		{Name: "/sched/goroutines:goroutines"}, {Name: "/memory/classes/heap/objects:bytes"},
	}
	rtmetrics.Read(samples)
	u := func(i int) uint64 {
		if samples[i].Value.Kind() == rtmetrics.KindUint64 {
			return samples[i].Value.Uint64()
		}
		return 0
	}
	f := func(i int) float64 {
		if samples[i].Value.Kind() == rtmetrics.KindFloat64 {
			return samples[i].Value.Float64()
		}
		return 0
	}
	ms := memorySnapshot{HeapLive: u(0), GCCycles: u(2), GCCPU: f(3), CPU: f(4), Goroutine: u(5), HeapInUse: u(6), RSS: rss()}
	if l := u(1); l < 1<<62 {
		ms.Limit = l
	}
	return ms
}

// rss is the resident set size from /proc/self/statm (0 where there is none).
func rss() uint64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}
