package broker

import (
	"sync"
	"sync/atomic"

	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// counter counts in an atomic, which $SYS reads, and in its twin of the metrics
// registry, which /metrics exports; both cost an atomic add.
type counter struct {
	n    atomic.Uint64
	prom *metrics.Counter
}

// Add implements session.Counter.
func (c *counter) Add(n uint64) {
	c.n.Add(n)
	if c.prom != nil {
		c.prom.Add(n)
	}
}

func (c *counter) Load() uint64 { return c.n.Load() }

// stats are the broker's running totals.
type stats struct {
	sentC     [3]counter
	sent      [3]session.Counter // &sentC[i], as session.Limits wants them
	received  [3]counter
	bytesSent counter
	bytesRecv counter
	dropped   [session.NumDrops]counter // by session.Drop; counted by Broker.dropped (drops.go)
	connects  counter
	// The failure budget (authfailures.go): failed checks, and CONNECTs or AUTH steps
	// refused unchecked.
	authFailures  counter
	authThrottled counter
	subs          atomic.Int64
	byProto       [3]atomic.Int64 // connections that completed CONNECT, by protocol: 3.1, 3.1.1, 5.0
	conns         sync.Map        // listener name → *connMetrics
	m             *metrics.Registry
}

func (st *stats) init(m *metrics.Registry) {
	st.m = m
	for i := range st.sentC {
		st.sent[i] = &st.sentC[i]
	}
	if m == nil {
		return
	}
	for q := range 3 {
		st.sentC[q].prom = m.MessagesSent[q]
		st.received[q].prom = m.MessagesReceived[q]
	}
	st.bytesSent.prom = m.BytesSent
	st.bytesRecv.prom = m.BytesReceived
	st.authFailures.prom, st.authThrottled.prom = m.AuthFailures, m.AuthThrottled
	for d := session.DropQueueFull; int(d) < len(st.dropped); d++ {
		st.dropped[d].prom = m.MessagesDropped.WithLabelValues(d.String())
	}
}

// journal exports the number of messages j counts as stored (one record each, however
// many queue entries and retained topics refer to it).
func (st *stats) journal(j *session.Journal) error {
	if st.m == nil {
		return nil
	}
	return st.m.Register(metrics.NewGaugeFunc("bifrost_store_messages",
		"Messages kept in the store for persistent sessions' queues and retained topics.",
		func() float64 { return float64(j.StoredMessages()) }))
}

func (st *stats) subscriptions(delta int) {
	n := st.subs.Add(int64(delta))
	if st.m != nil {
		st.m.Subscriptions.Set(n)
	}
}

// connMetrics are one listener's connection series, resolved once (metrics package doc:
// WithLabelValues hashes and locks, so it stays off the accept and close paths).
type connMetrics struct {
	current *metrics.Gauge
	total   *metrics.Counter
}

// connection counts a connection opening (+1) or closing (-1) on the named listener.
func (st *stats) connection(listener string, delta int) {
	if st.m == nil {
		return
	}
	v, ok := st.conns.Load(listener)
	if !ok {
		v, _ = st.conns.LoadOrStore(listener, &connMetrics{
			current: st.m.ConnectionsCurrent.WithLabelValues(listener),
			total:   st.m.ConnectionsTotal.WithLabelValues(listener),
		})
	}
	cm := v.(*connMetrics)
	cm.current.Add(int64(delta))
	if delta > 0 {
		cm.total.Inc()
	}
}

// refusedCode counts a CONNECT refused with rc.
func (st *stats) refusedCode(rc packet.ReasonCode) {
	st.refused(rc.String())
}

// refused counts a connection refused for reason.
func (st *stats) refused(reason string) {
	if st.m != nil {
		st.m.ConnectsRefused.WithLabelValues(reason).Inc()
	}
}

// denied counts an operation the ACL or a limit refused.
func (st *stats) denied(action string) {
	if st.m != nil {
		st.m.Denied.WithLabelValues(action).Inc()
	}
}
