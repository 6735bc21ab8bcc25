package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// A Report holds a run's figures with the parameters that produced them. It is printed as
// one JSON line; its keys are read by bench/compare.sh: add keys, never rename them.
type Report struct {
	Params  Params         `json:"params"`
	Conns   *ConnsResult   `json:"conns,omitempty"`
	Traffic *TrafficResult `json:"traffic,omitempty"`
	Churn   *ChurnResult   `json:"churn,omitempty"`
	Broker  *BrokerUsage   `json:"broker,omitempty"` // with a pid only
	ToolCPU float64        `json:"tool_cpu_s"`       // CPU seconds of this process (and its workers)
	Errors  []string       `json:"errors,omitempty"` // what went wrong, the first few of each kind
}

// ConnsResult holds the figures of an idle-connections run.
type ConnsResult struct {
	Connected   int     `json:"connected"`
	Failed      int     `json:"failed"`
	Procs       int     `json:"procs"`        // processes holding the connections
	ConnectS    float64 `json:"connect_s"`    // from the first dial to the last CONNACK (or SUBACK)
	ConnectRate float64 `json:"connect_rate"` // connections per second
}

// TrafficResult holds the figures of a fanin, fanout or pair run.
type TrafficResult struct {
	Sent     int64   `json:"sent"`     // PUBLISHes written
	Expected int64   `json:"expected"` // deliveries due: sent × subscribers of each message
	Received int64   `json:"received"` // deliveries due that the subscribers read, each once
	Lost     int64   `json:"lost"`     // expected - received; for QoS 1 and 2 it must be 0
	Acked    int64   `json:"acked"`    // QoS 1/2 PUBLISHes the broker acknowledged (PUBACK, PUBCOMP)
	Stalls   int64   `json:"stalls"`   // closed-loop windows written off (see the package doc)
	SendS    float64 `json:"send_s"`   // from the first PUBLISH to the last
	RecvS    float64 `json:"recv_s"`   // from the first PUBLISH to the last delivery
	SentRate float64 `json:"sent_rate"`
	RecvRate float64 `json:"recv_rate"`

	// Duplicates are deliveries of a message its subscriber had already; Reordered, the
	// ones that came after a later message of the same publisher: the subscribers check
	// every publisher's sequence numbers. Without reconnects QoS 1 must have no
	// duplicates either, and none may be out of order (spec 4.6).
	Duplicates int64 `json:"duplicates"`
	Reordered  int64 `json:"reordered"`

	Latency Latency `json:"latency_us"`
}

// Latency holds delivery latency percentiles in microseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func latencyOf(h *Histogram) Latency {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	return Latency{P50: us(h.Quantile(0.5)), P99: us(h.Quantile(0.99)), P999: us(h.Quantile(0.999)),
		Max: us(h.Max()), Mean: us(h.Mean())}
}

// BrokerUsage holds what the broker process used during a run.
type BrokerUsage struct {
	RSSBefore int64   `json:"rss_before"` // bytes
	RSSAfter  int64   `json:"rss_after"`
	PSSBefore int64   `json:"pss_before"`
	PSSAfter  int64   `json:"pss_after"`
	CPUS      float64 `json:"cpu_s"` // user + system seconds over the run (conns: connecting and settling)

	RSSPerConn float64 `json:"rss_per_conn,omitempty"` // conns: (after - before) / connected
	PSSPerConn float64 `json:"pss_per_conn,omitempty"`
	// conns: RSS 3 s after the last CONNACK (SUBACK), before the burst's garbage has gone
	// back, and per connection as RSSPerConn; the CPU from the first dial to the last
	// CONNACK, and per connection in µs.
	RSS3s        int64   `json:"rss_3s,omitempty"`
	RSSPerConn3s float64 `json:"rss_per_conn_3s,omitempty"`
	ConnectCPUS  float64 `json:"connect_cpu_s,omitempty"`
	CPUPerConnUS float64 `json:"cpu_per_conn_us,omitempty"`
	// HeapBefore and HeapAfter are the live heap after a forced GC (conns with -metrics).
	HeapBefore  int64   `json:"heap_before,omitempty"`
	HeapAfter   int64   `json:"heap_after,omitempty"`
	HeapPerConn float64 `json:"heap_per_conn,omitempty"`

	MsgsPerCPUS float64 `json:"msgs_per_cpu_s,omitempty"` // traffic: deliveries per broker CPU-second

	GC *GCUsage `json:"gc,omitempty"` // traffic with -metrics
}

// GCUsage is what the broker's garbage collector did over a traffic run, from its
// runtime/metrics (read through /metrics).
type GCUsage struct {
	Cycles      float64 `json:"cycles"`
	PerS        float64 `json:"per_s"`        // cycles per second of the run
	CPUS        float64 `json:"cpu_s"`        // CPU seconds the GC used
	CPUFraction float64 `json:"cpu_fraction"` // of the CPU available (GOMAXPROCS × time)
}

// brokerProbe samples the broker's memory and CPU before and after a run; it does nothing
// without a pid.
type brokerProbe struct {
	proc   Process
	on     bool
	before Memory
	cpu0   time.Duration
	errs   *errorLog
}

func newBrokerProbe(pid int, errs *errorLog) *brokerProbe {
	return &brokerProbe{proc: ProcessOf(pid), on: pid > 0, errs: errs}
}

// start takes the "before" sample.
func (b *brokerProbe) start() {
	if !b.on {
		return
	}
	var err error
	if b.before, err = b.proc.Memory(); err != nil {
		b.errs.add("broker", err)
	}
	if b.cpu0, err = b.proc.CPU(); err != nil {
		b.errs.add("broker", err)
	}
}

// sample returns the broker's memory now and the CPU it used since start; ok is false
// without a pid or when /proc could not be read.
func (b *brokerProbe) sample() (m Memory, cpu time.Duration, ok bool) {
	if !b.on {
		return Memory{}, 0, false
	}
	m, err := b.proc.Memory()
	if err != nil {
		b.errs.add("broker", err)
		return Memory{}, 0, false
	}
	c, err := b.proc.CPU()
	if err != nil {
		b.errs.add("broker", err)
		return Memory{}, 0, false
	}
	return m, c - b.cpu0, true
}

// stop takes the "after" sample and returns the usage, nil without a pid.
func (b *brokerProbe) stop() *BrokerUsage {
	if !b.on {
		return nil
	}
	after, err := b.proc.Memory()
	if err != nil {
		b.errs.add("broker", err)
	}
	cpu1, err := b.proc.CPU()
	if err != nil {
		b.errs.add("broker", err)
	}
	return &BrokerUsage{RSSBefore: b.before.RSS, RSSAfter: after.RSS, PSSBefore: b.before.PSS,
		PSSAfter: after.PSS, CPUS: (cpu1 - b.cpu0).Seconds()}
}

// writeJSON writes r as one line.
func (r *Report) writeJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// writeText writes r for people, a few lines.
func (r *Report) writeText(w io.Writer) {
	p := r.Params
	if c := r.Churn; c != nil {
		fmt.Fprintf(w, "churn: %d connections opened and closed in %.1fs, %.0f/s, %d failed (MQTT %s, %d at once)\n",
			c.Cycles, c.RunS, c.CycleRate, c.Failed, p.Version, p.Concurrency)
		if c.RSSBefore > 0 {
			fmt.Fprintf(w, "broker RSS: %s before, %s at peak, %s after settling\n",
				mib(c.RSSBefore), mib(c.RSSPeak), mib(c.RSSAfter))
		}
		if c.GoroutinesBefore > 0 {
			fmt.Fprintf(w, "broker goroutines: %.0f before, %.0f at peak, %.0f after settling\n",
				c.GoroutinesBefore, c.GoroutinesPeak, c.GoroutinesAfter)
		}
	}
	if c := r.Conns; c != nil {
		sub := "no subscription"
		if p.Subscribe {
			sub = fmt.Sprintf("one QoS %d subscription each", p.QoS)
		}
		fmt.Fprintf(w, "conns: %d connected, %d failed (MQTT %s, %s; %d process(es))\n",
			c.Connected, c.Failed, p.Version, sub, c.Procs)
		fmt.Fprintf(w, "connect: %.2fs, %.0f conns/s\n", c.ConnectS, c.ConnectRate)
	}
	if t := r.Traffic; t != nil {
		fmt.Fprintf(w, "%s: %d publisher(s), %d subscriber(s), MQTT %s, QoS %d, %d-byte payloads, ",
			p.Mode, p.Publishers, p.Subscribers, p.Version, p.QoS, p.Size)
		if p.Rate > 0 {
			fmt.Fprintf(w, "%.0f msg/s per publisher\n", p.Rate)
		} else {
			fmt.Fprintf(w, "closed loop, window %d\n", p.Inflight)
		}
		fmt.Fprintf(w, "sent:     %d in %.2fs, %.0f msg/s\n", t.Sent, t.SendS, t.SentRate)
		fmt.Fprintf(w, "received: %d of %d in %.2fs, %.0f msg/s; lost %d", t.Received, t.Expected, t.RecvS, t.RecvRate, t.Lost)
		if p.QoS > 0 && t.Lost != 0 {
			fmt.Fprintf(w, " (QoS %d must lose none)", p.QoS)
		}
		fmt.Fprintf(w, "; %d duplicate(s), %d out of order\n", t.Duplicates, t.Reordered)
		l := t.Latency
		fmt.Fprintf(w, "latency:  p50 %s  p99 %s  p99.9 %s  max %s  mean %s\n",
			us(l.P50), us(l.P99), us(l.P999), us(l.Max), us(l.Mean))
	}
	if b := r.Broker; b != nil {
		fmt.Fprintf(w, "broker:   RSS %s -> %s, PSS %s -> %s, CPU %.2fs\n",
			mib(b.RSSBefore), mib(b.RSSAfter), mib(b.PSSBefore), mib(b.PSSAfter), b.CPUS)
		if r.Conns != nil {
			fmt.Fprintf(w, "per connection: RSS %.0f B, PSS %.0f B\n", b.RSSPerConn, b.PSSPerConn)
			if b.RSS3s > 0 {
				fmt.Fprintf(w, "3s after the last CONNACK: RSS %s, %.0f B per connection\n", mib(b.RSS3s), b.RSSPerConn3s)
			}
			if b.ConnectCPUS > 0 {
				fmt.Fprintf(w, "connect phase: broker CPU %.2fs, %.1f µs per connection\n", b.ConnectCPUS, b.CPUPerConnUS)
			}
			if b.HeapAfter > 0 {
				fmt.Fprintf(w, "live heap: %s -> %s, %.0f B per connection\n",
					mib(b.HeapBefore), mib(b.HeapAfter), b.HeapPerConn)
			}
		}
		if r.Traffic != nil {
			fmt.Fprintf(w, "broker efficiency: %.0f deliveries per broker CPU-second\n", b.MsgsPerCPUS)
			if g := b.GC; g != nil {
				fmt.Fprintf(w, "broker GC: %.0f cycles (%.2f/s), %.2f CPU-s, %.1f%% of the CPU available\n",
					g.Cycles, g.PerS, g.CPUS, 100*g.CPUFraction)
			}
		}
	}
	fmt.Fprintf(w, "tool CPU: %.2fs\n", r.ToolCPU)
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
}

func us(v float64) string { return time.Duration(v * 1e3).Round(time.Microsecond).String() }

func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }
