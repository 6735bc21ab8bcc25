package loadgen

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// burstRSSAfter is when, after the last CONNACK, conns reads the broker's RSS for its
// rss_3s figure (DESIGN.md: "3 s after the last CONNACK").
const burstRSSAfter = 3 * time.Second

// fdReserve is the number of open files a process keeps for itself (its binary, pipes,
// the /proc files it reads) beside its connections.
const fdReserve = 64

// A connGroup is the idle connections one process holds.
type connGroup struct {
	clients   []*client // nil where a connection failed
	connected int
	failed    int
	start     time.Time // the first dial
	end       time.Time // the last CONNACK or SUBACK
}

// groupSpec says which connections a group opens: the ones numbered offset to offset+n-1,
// so that client ids and topics stay unique across processes.
type groupSpec struct {
	run         string
	offset, n   int
	concurrency int
}

// openGroup opens the connections of spec, concurrency at a time. A connection that fails
// is counted and logged in errs; when more than a tenth of them fail (the broker refuses
// or is gone) the group stops opening more.
func openGroup(ctx context.Context, o *Options, spec groupSpec, errs *errorLog) (*connGroup, error) {
	d, err := newDialer(o.Addr, o.SrcAddrs, o.WSPath)
	if err != nil {
		return nil, err
	}
	g := &connGroup{clients: make([]*client, spec.n), start: time.Now()}
	var failed atomic.Int64
	limit := int64(max(10, spec.n/10))
	err = parallel(ctx, spec.n, min(spec.concurrency, spec.n), func(i int) error {
		id := spec.offset + i
		c, err := dialConnect(ctx, d, id, connectOptions{version: o.Version,
			clientID: fmt.Sprintf("lg-%s-c%d", spec.run, id), keepAlive: uint16(o.KeepAlive)})
		if err == nil && o.Subscribe {
			if err = c.subscribe(fmt.Sprintf("lg/%s/idle/%d", spec.run, id), o.QoS); err != nil {
				c.nc.Close()
			}
		}
		if err != nil {
			errs.add("connect", err)
			if failed.Add(1) > limit {
				return fmt.Errorf("loadgen: more than %d of %d connections failed", limit, spec.n)
			}
			return nil
		}
		g.clients[i] = c
		return nil
	})
	g.end = time.Now()
	for _, c := range g.clients {
		if c != nil {
			g.connected++
		}
	}
	g.failed = spec.n - g.connected
	return g, err
}

// keepAlive sends PINGREQ on every connection every half keep-alive period until stop,
// as an idle client does. The PINGRESPs stay unread in the socket buffers: two bytes each.
func (g *connGroup) keepAlive(period time.Duration, stop <-chan struct{}) {
	if period <= 0 {
		return
	}
	ping := []byte{byte(packet.PINGREQ) << 4, 0}
	t := time.NewTicker(period / 2)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, c := range g.clients {
			if c != nil {
				_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
				_ = c.write(ping)
			}
		}
	}
}

// close disconnects every connection of the group.
func (g *connGroup) close() { closeAll(g.clients) }

// runConns runs an idle-connections benchmark: it opens the connections, in this process
// or, past the per-process bound, in worker processes; lets them idle; measures the broker;
// holds them; and closes them.
func runConns(ctx context.Context, o *Options, self []string, errs *errorLog) (*Report, error) {
	soft, err := raiseOpenFiles()
	if err != nil {
		return nil, fmt.Errorf("loadgen: open files limit: %w", err)
	}
	perProc := min(o.PerProcess, soft-fdReserve)
	if perProc < 1 {
		return nil, fmt.Errorf("loadgen: the open files limit (%d) leaves no room for connections", soft)
	}
	procs := (o.Conns + perProc - 1) / perProc
	run := runID()
	fmt.Fprintf(o.Log, "conns: opening %d connection(s) to %s in %d process(es) (open files limit %d)\n",
		o.Conns, o.Addr, procs, soft)

	probe := newBrokerProbe(o.PID, errs)
	probe.start()
	var heapBefore int64
	if o.Metrics != "" {
		// After the RSS baseline: a forced GC before it would leave freed pages resident
		// for the connections to reuse, and flatter them. What the scrape itself leaves
		// (little: it is asked for uncompressed text) counts against the broker.
		if heapBefore, err = liveHeap(ctx, o.Metrics); err != nil {
			return nil, err
		}
	}

	var holder holder
	if procs == 1 {
		g, err := openGroup(ctx, o, groupSpec{run: run, n: o.Conns, concurrency: o.Concurrency}, errs)
		if g == nil {
			return nil, err
		}
		if err != nil {
			errs.add("connect", err)
		}
		holder = &localHolder{g: g, stop: make(chan struct{}), period: time.Duration(o.KeepAlive) * time.Second}
	} else {
		ws, err := startWorkers(ctx, o, self, run, procs, perProc, errs)
		if err != nil {
			return nil, err
		}
		holder = ws
	}
	connected, failed, start, end := holder.result()
	res := &ConnsResult{Connected: connected, Failed: failed, Procs: procs, ConnectS: end.Sub(start).Seconds()}
	if res.ConnectS > 0 {
		res.ConnectRate = float64(connected) / res.ConnectS
	}
	fmt.Fprintf(o.Log, "conns: %d connected, %d failed in %.2fs (%.0f conns/s); settling %v\n",
		connected, failed, res.ConnectS, res.ConnectRate, o.Settle)

	idle := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	// The connect phase's CPU, read as soon as the last handshake is reported (the
	// workers' reports come a few milliseconds after it), and RSS 3 s after it: what the
	// burst left resident before a memory policy has had time to give anything back.
	_, connectCPU, sampled := probe.sample()
	idle(time.Until(end.Add(burstRSSAfter)))
	mem3, _, sampled3 := probe.sample()
	idle(time.Until(end.Add(max(o.Settle, burstRSSAfter))))
	usage := probe.stop()
	if usage != nil && connected > 0 {
		usage.RSSPerConn = float64(usage.RSSAfter-usage.RSSBefore) / float64(connected)
		usage.PSSPerConn = float64(usage.PSSAfter-usage.PSSBefore) / float64(connected)
		if sampled {
			usage.ConnectCPUS = connectCPU.Seconds()
			usage.CPUPerConnUS = connectCPU.Seconds() * 1e6 / float64(connected)
		}
		if sampled3 {
			usage.RSS3s = mem3.RSS
			usage.RSSPerConn3s = float64(mem3.RSS-usage.RSSBefore) / float64(connected)
		}
	}
	// After RSS is read: the forced GC would otherwise flatter it.
	if o.Metrics != "" {
		after, err := liveHeap(ctx, o.Metrics)
		switch {
		case err != nil:
			errs.add("broker", err)
		case usage == nil:
			usage = &BrokerUsage{}
			fallthrough
		default:
			usage.HeapBefore, usage.HeapAfter = heapBefore, after
			if connected > 0 {
				usage.HeapPerConn = float64(after-heapBefore) / float64(connected)
			}
		}
	}
	if rest := o.Hold - o.Settle; rest > 0 {
		fmt.Fprintf(o.Log, "conns: holding for %v more\n", rest)
		idle(rest)
	}
	toolCPU := holder.release()
	return &Report{Conns: res, Broker: usage, ToolCPU: toolCPU}, nil
}

// A holder keeps a run's idle connections open until release: in this process or in
// worker processes.
type holder interface {
	// result reports the connections opened and when the first dial and the last
	// handshake happened.
	result() (connected, failed int, start, end time.Time)
	// release closes the connections and returns the CPU seconds the worker processes
	// used, if any.
	release() (toolCPU float64)
}

// localHolder holds a group in this process.
type localHolder struct {
	g      *connGroup
	stop   chan struct{}
	period time.Duration
	wg     sync.WaitGroup
}

func (h *localHolder) result() (int, int, time.Time, time.Time) {
	h.wg.Go(func() { h.g.keepAlive(h.period, h.stop) })
	return h.g.connected, h.g.failed, h.g.start, h.g.end
}

func (h *localHolder) release() float64 {
	close(h.stop)
	h.wg.Wait()
	h.g.close()
	return 0 // this process's CPU is added by the caller
}
