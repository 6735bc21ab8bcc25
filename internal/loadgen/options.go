package loadgen

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// The kinds of run: the values of Options.Mode.
const (
	ModeConns  = "conns"  // idle connections and the broker's memory per connection
	ModeFanIn  = "fanin"  // P publishers, S subscribers (default 1), one topic
	ModeFanOut = "fanout" // 1 publisher, S subscribers, one topic
	ModePair   = "pair"   // K publishers and K subscribers, a topic per pair
	ModeChurn  = "churn"  // connect and disconnect as fast as possible, then the broker's leftovers
)

// headerSize is the part of every payload the load generator uses itself: the send time
// (8 bytes), the publisher's index (4) and the sequence number (4), big-endian.
const headerSize = 16

// Options describe one run. Zero means the default noted next to a field, except where
// the field says otherwise; EnsureDefaults fills them in.
type Options struct {
	Mode string // ModeConns, ModeFanIn, ModeFanOut or ModePair
	Addr string // the broker's MQTT address, IP:port on loopback; default 127.0.0.1:1883
	// PubAddr, if set, is where the publishers of fanin, fanout and pair connect (another
	// node of a cluster); the subscribers connect to Addr. Empty: Addr.
	PubAddr string
	Version packet.Version // default 3.1.1
	PID     int            // the broker's process id; 0: no broker figures
	// Metrics is a bifrost broker's HTTP address (http://127.0.0.1:8080): conns then also
	// reports its live heap per connection. Empty: not read.
	Metrics  string
	SrcAddrs int // source addresses 127.0.0.2... to spread connections over; -1: none; default 4
	// WSPath, if set, makes every connection MQTT over WebSocket (subprotocol mqtt, binary
	// messages) to ws://Addr/WSPath instead of plain TCP.
	WSPath string

	// Timeout bounds the whole run, whatever else is set; default 10m.
	Timeout time.Duration

	// conns
	Conns       int           // connections to open; default 1000
	Subscribe   bool          // one subscription each, to a topic of its own, at QoS
	Settle      time.Duration // idle time between the last connection and the measurement; default 5s
	Hold        time.Duration // time to keep the connections open after the last one; at least Settle
	PerProcess  int           // connections per process at most; default 9000
	Concurrency int           // connections being opened at once, over all processes; default 64
	KeepAlive   int           // CONNECT keep alive, seconds (conns pings at half of it); 0: none

	// fanin, fanout, pair
	QoS         byte          // QoS of the PUBLISHes and the subscriptions
	Size        int           // payload bytes, at least 16; default 64
	Rate        float64       // messages per second per publisher; 0: closed loop (see the package doc)
	Inflight    int           // window per publisher (see the package doc); default 32
	Duration    time.Duration // sending time; default 10s unless Count is set
	Count       int           // messages per publisher at most; 0: no limit but Duration
	Publishers  int           // fanin; default 10
	Subscribers int           // fanout, default 10; fanin, default 1
	Pairs       int           // pair; default 10
	RecvMax     int           // 5.0 subscribers' Receive Maximum; 0: not sent (the spec's 65535)
	// SessionExpiry makes the subscribers' sessions persistent, so that the broker stores
	// what it queues for them: 3.1.1 clean session 0, 5.0 clean start 0 with this Session
	// Expiry Interval (seconds). The sessions outlive the run (in 3.1.1 until a client
	// with the same id cleans them). 0: clean sessions.
	SessionExpiry int

	// Log receives the human-readable progress and result lines; nil: none.
	Log io.Writer
}

// EnsureDefaults sets every zero field to its default.
func (o *Options) EnsureDefaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:1883"
	}
	if o.Version == 0 {
		o.Version = packet.V311
	}
	def(&o.SrcAddrs, 4)
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	def(&o.Conns, 1000)
	if o.Settle == 0 {
		o.Settle = 5 * time.Second
	}
	o.Hold = max(o.Hold, o.Settle)
	def(&o.PerProcess, 9000)
	def(&o.Concurrency, 64)
	def(&o.Size, 64)
	def(&o.Inflight, 32)
	if o.Duration == 0 && o.Count == 0 {
		o.Duration = 10 * time.Second
	}
	def(&o.Publishers, 10)
	if o.Mode == ModeFanIn {
		def(&o.Subscribers, 1)
	}
	def(&o.Subscribers, 10)
	def(&o.Pairs, 10)
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Validate reports every field out of range at once.
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch o.Mode {
	case ModeConns, ModeFanIn, ModeFanOut, ModePair, ModeChurn:
	default:
		bad("mode %q: want conns, fanin, fanout, pair or churn", o.Mode)
	}
	if o.Version != packet.V311 && o.Version != packet.V5 {
		bad("version %v: want 3.1.1 or 5.0", o.Version)
	}
	if o.QoS > 2 {
		bad("qos %d: want 0, 1 or 2", o.QoS)
	}
	if o.Size < headerSize {
		bad("size %d: payloads carry a %d-byte header, so at least %d", o.Size, headerSize, headerSize)
	}
	if o.Size > 1<<20 {
		bad("size %d: at most 1MiB", o.Size)
	}
	if o.Rate < 0 {
		bad("rate %v: want ≥ 0", o.Rate)
	}
	if o.Inflight < 1 || o.Inflight > 65535 {
		bad("inflight %d: want 1..65535", o.Inflight)
	}
	if o.RecvMax < 0 || o.RecvMax > 65535 {
		bad("recv-max %d: want 0..65535", o.RecvMax)
	}
	if o.SessionExpiry < 0 || int64(o.SessionExpiry) > math.MaxUint32 {
		bad("session-expiry %d: want 0..%d seconds", o.SessionExpiry, uint32(math.MaxUint32))
	}
	if o.KeepAlive < 0 || o.KeepAlive > 65535 {
		bad("keepalive %d: want 0..65535 seconds", o.KeepAlive)
	}
	if o.Metrics != "" {
		if err := checkMetricsURL(o.Metrics); err != nil {
			errs = append(errs, err)
		}
	}
	if o.Duration < 0 || o.Count < 0 || o.Settle < 0 || o.Hold < 0 || o.Timeout < 0 {
		bad("durations and counts must not be negative")
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"conns", o.Conns}, {"pubs", o.Publishers}, {"subs", o.Subscribers}, {"pairs", o.Pairs},
		{"per-proc", o.PerProcess}, {"concurrency", o.Concurrency}} {
		if n.v < 1 {
			bad("%s %d: want ≥ 1", n.name, n.v)
		}
	}
	if o.Mode != ModeConns && o.Mode != ModeChurn && o.Mode != "" {
		if n := o.trafficConns(); n > o.PerProcess {
			bad("%s needs %d connections, more than -per-proc %d in one process", o.Mode, n, o.PerProcess)
		}
	}
	return errors.Join(errs...)
}

// trafficConns is the number of connections a traffic run opens.
func (o *Options) trafficConns() int {
	switch o.Mode {
	case ModeFanIn:
		return o.Publishers + o.Subscribers
	case ModeFanOut:
		return o.Subscribers + 1
	case ModePair:
		return 2 * o.Pairs
	}
	return 0
}

// Params is the JSON form of the options that shaped a run, reported with its figures.
type Params struct {
	Mode        string  `json:"mode"`
	Addr        string  `json:"addr"`
	PubAddr     string  `json:"pub_addr,omitempty"`
	Version     string  `json:"version"`
	PID         int     `json:"pid,omitempty"`
	SrcAddrs    int     `json:"src_addrs"`
	WSPath      string  `json:"ws_path,omitempty"`
	Conns       int     `json:"conns,omitempty"`
	Subscribe   bool    `json:"subscribe,omitempty"`
	SettleS     float64 `json:"settle_s,omitempty"`
	HoldS       float64 `json:"hold_s,omitempty"`
	PerProcess  int     `json:"per_proc,omitempty"`
	KeepAlive   int     `json:"keepalive,omitempty"`
	QoS         byte    `json:"qos"`
	Size        int     `json:"size,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Inflight    int     `json:"inflight,omitempty"`
	DurationS   float64 `json:"duration_s,omitempty"`
	Count       int     `json:"count,omitempty"`
	Publishers  int     `json:"pubs,omitempty"`
	Subscribers int     `json:"subs,omitempty"`
	RecvMax     int     `json:"recv_max,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"` // churn
	SessionExp  int     `json:"session_expiry,omitempty"`
}

func (o *Options) params() Params {
	p := Params{Mode: o.Mode, Addr: o.Addr, PubAddr: o.PubAddr, Version: o.Version.String(), PID: o.PID,
		SrcAddrs: max(o.SrcAddrs, 0), WSPath: o.WSPath, QoS: o.QoS}
	if o.Mode == ModeChurn {
		p.Concurrency, p.DurationS, p.SettleS = o.Concurrency, o.Duration.Seconds(), o.Settle.Seconds()
	}
	if o.Mode == ModeConns {
		p.Conns, p.Subscribe, p.PerProcess, p.KeepAlive = o.Conns, o.Subscribe, o.PerProcess, o.KeepAlive
		p.SettleS, p.HoldS = o.Settle.Seconds(), o.Hold.Seconds()
		return p
	}
	p.Size, p.Rate, p.Inflight, p.Count, p.RecvMax = o.Size, o.Rate, o.Inflight, o.Count, o.RecvMax
	p.SessionExp = o.SessionExpiry
	p.DurationS = o.Duration.Seconds()
	p.Publishers, p.Subscribers = o.topology()
	return p
}

// topology returns the numbers of publishers and subscribers of a traffic run.
func (o *Options) topology() (pubs, subs int) {
	switch o.Mode {
	case ModeFanIn:
		return o.Publishers, o.Subscribers
	case ModeFanOut:
		return 1, o.Subscribers
	case ModePair:
		return o.Pairs, o.Pairs
	}
	return 0, 0
}
