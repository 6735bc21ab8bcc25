package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// A Bridge is one configured bridge: the local tap, the queue for the remote, and the
// loop that keeps a connection to the remote open.
type Bridge struct {
	cfg     conf.Bridge
	version packet.Version
	log     *slog.Logger
	routes  []route
	tap     *broker.Tap
	filters []string // the tap's subscriptions, for Close
	q       queue
	wake    chan struct{} // capacity 1: the writer has work (a push, an ack)
	// noPrivate: the remote refused the 3.1.1 bridge marker; Run's goroutine only.
	noPrivate bool
	// inbound holds the packet ids of the remote's QoS 2 messages published here and not
	// yet released, each with the generation its PUBREC waits for; awaitGen is the last
	// generation AwaitDurable gave. The connections' readers only, one after the other.
	inbound  map[uint16]uint64
	awaitGen uint64
	// ackDone and ackFailed are the last generation the store reported, and the last
	// that failed (inbound.go); durable (capacity 1) tells a writer waiting for one
	// (awaitSent), whose last generation is sendGen (the writers' only).
	ackDone, ackFailed atomic.Uint64
	durable            chan struct{}
	sendGen            uint64

	up                           atomic.Bool
	in, out, dropped, dropped0   atomic.Uint64
	expired, restored            atomic.Uint64
	resent, reconnects, tooLarge atomic.Uint64
}

// Stats are a bridge's figures, as its metrics show them.
type Stats struct {
	Up          bool   // connected to the remote
	In, Out     uint64 // messages carried in (published locally) and out (sent to the remote)
	Dropped     uint64 // QoS 1 messages dropped by a full queue (queue_full)
	DroppedQoS0 uint64 // QoS 0 messages dropped by a full queue, or to make room
	Restored    uint64 // found in the store at start, and queued again
	Expired     uint64 // their message expiry ran out while queued
	TooLarge    uint64 // above the remote's Maximum Packet Size
	Resent      uint64 // sent again after a connection broke before their PUBACK
	Reconnects  uint64 // connections to the remote after the first
	Depth       int    // messages queued or in flight
	Stored      int    // of those, the messages kept in the store
}

// New builds the bridge c describes on broker b: its tap subscribes at once, so messages
// for the remote are queued from now on, before the first connection.
func New(c conf.Bridge, b *broker.Broker, log *slog.Logger) (*Bridge, error) {
	br := &Bridge{cfg: c, version: packet.V5, log: log.With("bridge", c.Name), routes: newRoutes(c.Topics),
		wake: make(chan struct{}, 1), inbound: make(map[uint16]uint64),
		durable: make(chan struct{}, 1)}
	if c.Protocol == conf.BridgeV311 {
		br.version = packet.V311
	}
	br.q = queue{maxMsgs: c.QueueMessages, maxBytes: int(c.QueueBytes), dropOldest: c.QueueFull == conf.BridgeDropOldest}
	if c.TLS != nil {
		if _, err := tlsConfig(&c); err != nil {
			return nil, fmt.Errorf("bridge %s: %w", c.Name, err)
		}
	}
	tap, err := b.NewTap(br.onLocal)
	if err != nil {
		return nil, err
	}
	br.tap = tap
	for _, r := range br.routes {
		if !r.out {
			continue
		}
		if err := tap.Subscribe(r.localFilter, r.qos); err != nil {
			tap.Close(br.filters)
			return nil, fmt.Errorf("bridge %s: local filter %q: %w", c.Name, r.localFilter, err)
		}
		br.filters = append(br.filters, r.localFilter)
	}
	if j := b.Journal(); j != nil {
		// Before the first message arrives through the tap: the queue's stored entries
		// come first, and the tap's new ones number after them.
		br.q.j, br.q.cid = j, ownedID(c.Name)
		kept, dropped := br.q.restore(b.TakeOwned(br.q.cid))
		j.StageOwner(br.q.cid)
		b.OnResync(br.q.rewrite)
		br.q.commit()
		br.restored.Store(uint64(kept))
		br.dropped.Add(uint64(dropped))
		if kept+dropped > 0 {
			br.log.Info("bridge: stored queue restored", "messages", kept, "dropped_queue_full", dropped)
		}
	}
	return br, nil
}

// Name is the bridge's configured name.
func (br *Bridge) Name() string { return br.cfg.Name }

// Stats returns the bridge's figures now.
func (br *Bridge) Stats() Stats {
	depth, stored := br.q.depths()
	return Stats{Up: br.up.Load(), In: br.in.Load(), Out: br.out.Load(), Dropped: br.dropped.Load(),
		DroppedQoS0: br.dropped0.Load(), Restored: br.restored.Load(), Expired: br.expired.Load(),
		TooLarge: br.tooLarge.Load(), Resent: br.resent.Load(), Reconnects: br.reconnects.Load(),
		Depth: depth, Stored: stored}
}

// Run keeps a connection to the remote until ctx is cancelled: it connects, serves the
// connection until it breaks, then waits restart_timeout (jittered up to
// restart_timeout_max) and connects again.
func (br *Bridge) Run(ctx context.Context) {
	bo := backoff{base: time.Duration(br.cfg.RestartTimeout), cap: time.Duration(br.cfg.RestartTimeoutMax)}
	connected := false
	br.setUp(false) // the state is known from the start
	for ctx.Err() == nil {
		c, err := br.connect(ctx)
		if err == nil {
			if connected {
				br.reconnects.Add(1)
			}
			connected = true
			bo.reset()
			br.log.Info("bridge connected", "remote", br.cfg.Address, "protocol", br.version.String(),
				"session_present", c.present)
			br.setUp(true)
			err = c.serve(ctx)
			br.setUp(false)
		}
		if ctx.Err() != nil {
			return
		}
		wait := bo.next()
		br.log.Warn("bridge down", "remote", br.cfg.Address, "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// setUp records the connection state and, with notifications, publishes it locally,
// retained: "1" connected, "0" not, as Mosquitto does.
func (br *Bridge) setUp(up bool) {
	br.up.Store(up)
	if !*br.cfg.Notifications {
		return
	}
	state := []byte("0")
	if up {
		state = []byte("1")
	}
	p := packet.Publish{Topic: []byte(br.cfg.NotificationTopic), Payload: state, QoS: 1, Retain: true}
	if _, err := br.tap.Publish(&p); err != nil {
		br.log.Debug("bridge notification not published", "err", err)
	}
}

// Close ends the tap's subscriptions. Call it after Run has returned.
func (br *Bridge) Close() {
	br.tap.Close(br.filters)
}

// A Set runs the configured bridges of a broker.
type Set struct {
	bridges []*Bridge
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
}

// Start builds every bridge in cs on b and starts each one's loop through goFn (the
// embedding broker's counted goroutines; nil: the go statement). Call Close before the
// broker's.
func Start(cs []conf.Bridge, b *broker.Broker, log *slog.Logger, goFn func(string, func(context.Context)) bool) (*Set, error) {
	s := &Set{}
	for _, c := range cs {
		br, err := New(c, b, log)
		if err != nil {
			for _, o := range s.bridges {
				o.Close()
			}
			return nil, err
		}
		s.bridges = append(s.bridges, br)
	}
	DropStale(b, log)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, br := range s.bridges {
		s.wg.Add(1)
		run := func(context.Context) {
			defer s.wg.Done()
			br.Run(ctx)
		}
		if goFn == nil {
			go run(ctx)
		} else if !goFn("bridge", run) {
			s.wg.Done()
		}
	}
	return s, nil
}

// Bridges returns the bridges, in config order.
func (s *Set) Bridges() []*Bridge { return s.bridges }

// Close disconnects every bridge from its remote (DISCONNECT, so that the remote drops
// no will) and ends its local subscriptions; it returns once every loop has ended.
// Later calls do nothing.
func (s *Set) Close() {
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		for _, br := range s.bridges {
			br.Close()
		}
	})
}
