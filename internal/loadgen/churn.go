package loadgen

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ChurnResult holds the figures of a churn run: clients connecting and disconnecting as
// fast as they can, and what that left in the broker once it settled.
type ChurnResult struct {
	Cycles    int64   `json:"cycles"` // CONNECT, CONNACK, DISCONNECT, close: completed
	Failed    int64   `json:"failed"`
	RunS      float64 `json:"run_s"`
	CycleRate float64 `json:"cycles_per_s"`
	// Broker figures (with -pid and -metrics): RSS before the run, its peak during it
	// (sampled every second) and after the settle time; goroutines likewise.
	RSSBefore        int64   `json:"rss_before,omitempty"`
	RSSPeak          int64   `json:"rss_peak,omitempty"`
	RSSAfter         int64   `json:"rss_after,omitempty"`
	GoroutinesBefore float64 `json:"goroutines_before,omitempty"`
	GoroutinesPeak   float64 `json:"goroutines_peak,omitempty"`
	GoroutinesAfter  float64 `json:"goroutines_after,omitempty"`
}

// goroutinesMetric is the Go collector's goroutine count.
const goroutinesMetric = "go_goroutines"

// runChurn runs Options.Workers loops, each connecting (clean start), waiting for the
// CONNACK, sending DISCONNECT and closing, over and over for Duration; then it lets the
// broker settle for Settle and reads its RSS and goroutines again. A broker that leaks per
// connection shows it here: after tens of thousands of short connections its goroutines
// and RSS should be back near where they started.
func runChurn(ctx context.Context, o *Options, errs *errorLog) (*Report, error) {
	d, err := newDialer(o.Addr, o.SrcAddrs, o.WSPath)
	if err != nil {
		return nil, err
	}
	res := &ChurnResult{}
	proc := ProcessOf(o.PID)
	sample := func() (rss int64, gor float64) {
		if o.PID > 0 {
			m, err := proc.Memory()
			if err != nil {
				errs.add("broker", err)
			}
			rss = m.RSS
		}
		if o.Metrics != "" {
			v, err := metricsGauges(ctx, o.Metrics, goroutinesMetric)
			if err != nil {
				errs.add("broker", err)
			} else {
				gor = v[0]
			}
		}
		return rss, gor
	}
	res.RSSBefore, res.GoroutinesBefore = sample()
	res.RSSPeak, res.GoroutinesPeak = res.RSSBefore, res.GoroutinesBefore
	probe := newBrokerProbe(o.PID, errs)
	probe.start()

	runCtx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var (
		cycles, failed, next atomic.Int64
		wg                   sync.WaitGroup
	)
	start := time.Now()
	for w := range o.Concurrency {
		wg.Go(func() {
			id := fmt.Sprintf("churn-%s-%d", runID(), w)
			// The run is over at its deadline: a dial that failed for the deadline (the
			// context's own timer may not have fired yet) is no failure.
			over := func() bool {
				dl, _ := runCtx.Deadline()
				return runCtx.Err() != nil || !time.Now().Before(dl)
			}
			for !over() {
				i := int(next.Add(1))
				c, err := dialConnect(runCtx, d, i, connectOptions{version: o.Version, clientID: id})
				if err != nil {
					if !over() {
						failed.Add(1)
						errs.add("connect", err)
					}
					continue
				}
				c.close(time.Now().Add(closeWait))
				cycles.Add(1)
			}
		})
	}
	tick := time.NewTicker(time.Second)
	func() {
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
				rss, gor := sample()
				res.RSSPeak, res.GoroutinesPeak = max(res.RSSPeak, rss), max(res.GoroutinesPeak, gor)
			}
		}
	}()
	wg.Wait()
	res.RunS = time.Since(start).Seconds()
	res.Cycles, res.Failed = cycles.Load(), failed.Load()
	if res.RunS > 0 {
		res.CycleRate = float64(res.Cycles) / res.RunS
	}
	fmt.Fprintf(o.Log, "churn: %d connections opened and closed in %.1fs (%.0f/s), %d failed; settling %v\n",
		res.Cycles, res.RunS, res.CycleRate, res.Failed, o.Settle)
	select {
	case <-ctx.Done():
	case <-time.After(o.Settle):
	}
	res.RSSAfter, res.GoroutinesAfter = sample()
	return &Report{Churn: res, Broker: probe.stop()}, nil
}
