package broker

import (
	"bytes"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// limits are conf.Limits, and queue.when_full and max_pause, as the broker enforces them
// (see those types for each one's meaning and default): an immutable snapshot that
// Reconfigure swaps, taking effect for every connection at its next CONNECT, SUBSCRIBE or
// PUBLISH.
type limits struct {
	maxConns    int64 // 0: no cap
	fileConns   int64 // the open-file limit's room (openfiles.go); 0: no cap
	perListener map[string]int64
	open        *atomic.Int64 // connections open, all listeners; shared by every snapshot
	connect     *connectLimiter
	topicLen    int
	topicLevels int
	maxSubs     int
	pubRate     float64 // PUBLISHes per second per client; 0: no limit
	pubBurst    float64
	auth        authBudget // the failure budget of each source (authfailures.go)
	// backpressure: queue.when_full is backpressure (backpressure.go), bounded by maxPause.
	backpressure bool
	maxPause     time.Duration
}

// newLimits returns the limits of c, counting open connections in open. prev, the
// snapshot replaced, lends its connect buckets when the connect rate is unchanged, so a
// reload does not give every source a full burst again.
func newLimits(c *conf.Config, open *atomic.Int64, prev *limits) *limits {
	l := &limits{
		open:         open,
		maxConns:     int64(*c.Limits.MaxConnections),
		fileConns:    fileCap(),
		perListener:  make(map[string]int64),
		topicLen:     c.Limits.MaxTopicLength,
		topicLevels:  c.Limits.MaxTopicLevels,
		maxSubs:      *c.Limits.MaxSubscriptions,
		pubRate:      float64(c.Limits.PublishRate),
		pubBurst:     float64(c.Limits.PublishBurst),
		auth:         newAuthBudget(&c.Limits.AuthFailures),
		backpressure: c.Queue.WhenFull == conf.QueueBackpressure,
		maxPause:     time.Duration(c.Queue.MaxPause),
	}
	for _, lc := range c.Listeners {
		if lc.MaxConnections > 0 {
			l.perListener[lc.Name] = int64(lc.MaxConnections)
		}
	}
	if r := *c.Limits.ConnectRate; r > 0 {
		if p := prev; p != nil && p.connect != nil && p.connect.rate == float64(r) && p.connect.burst == float64(max(c.Limits.ConnectBurst, 1)) {
			l.connect = p.connect
			return l
		}
		l.connect = &connectLimiter{rate: float64(r), burst: float64(max(c.Limits.ConnectBurst, 1)),
			buckets: make(map[netip.Addr]bucket)}
	}
	return l
}

// admit decides a new connection: within the connection caps (its source's connect rate
// was checked at accept, connectRateOK). It counts the connection open when it admits it.
func (l *limits) admit(c listener.Conn, nowNs int64) (ok bool, reason string) {
	n := l.open.Add(1)
	switch {
	case l.maxConns > 0 && n > l.maxConns:
		reason = "max_connections"
	case l.fileConns > 0 && n > l.fileConns:
		reason = "open_files"
	}
	if reason != "" {
		l.open.Add(-1)
		return false, reason
	}
	if max, ok := l.perListener[c.Listener().Name()]; ok && int64(c.Listener().Conns()) > max {
		l.open.Add(-1)
		return false, "listener_max_connections"
	}
	return true, ""
}

// connectRateOK reports whether a connection from remote may proceed under the
// per-address connect rate. The listener asks before the TLS handshake or WebSocket
// upgrade (listener.Options.Admit), so that a flood from one address costs an accept and
// a close.
func (l *limits) connectRateOK(remote netip.Addr, nowNs int64) bool {
	if l.connect == nil || !remote.IsValid() {
		return true
	}
	return l.connect.allow(remote, nowNs)
}

// topicOK checks a topic name or filter against the length and level limits.
func (l *limits) topicOK(t []byte) bool {
	return len(t) <= l.topicLen && bytes.Count(t, []byte{'/'}) < l.topicLevels
}

// connectLimiter is a token bucket per source address. One map of small values rather
// than a golang.org/x/time/rate.Limiter per address: a limiter is a mutex and 80 bytes
// behind a pointer, and this table can hold tens of thousands of addresses during a
// flood. It is bounded: past maxBuckets, full buckets (idle sources) are dropped, and if
// that frees nothing the table starts over, which errs on the side of admitting.
type connectLimiter struct {
	mu      sync.Mutex
	rate    float64 // tokens per second
	burst   float64
	buckets map[netip.Addr]bucket
}

type bucket struct {
	tokens float64
	last   int64 // unix nanoseconds of the last refill
}

const maxBuckets = 1 << 16

// allow takes a token for ip, unless ip is loopback (the host's own programs and load
// tests are not the flood this guards against).
func (l *connectLimiter) allow(ip netip.Addr, nowNs int64) bool {
	if ip.IsLoopback() || !ip.IsValid() {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[ip]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.sweep(nowNs)
		}
		b = bucket{tokens: l.burst, last: nowNs}
	}
	b.tokens = min(l.burst, b.tokens+float64(nowNs-b.last)/1e9*l.rate)
	b.last = nowNs
	if b.tokens < 1 {
		l.buckets[ip] = b
		return false
	}
	b.tokens--
	l.buckets[ip] = b
	return true
}

// sweep drops the buckets that have refilled (their sources were idle long enough).
func (l *connectLimiter) sweep(nowNs int64) {
	for ip, b := range l.buckets {
		if b.tokens+float64(nowNs-b.last)/1e9*l.rate >= l.burst {
			delete(l.buckets, ip)
		}
	}
	if len(l.buckets) >= maxBuckets {
		clear(l.buckets)
	}
}

// publishAllowed takes a token from cl's publish bucket. The bucket lives in the client
// as 8 bytes: tokens and the refill time in milliseconds since the broker started.
func (b *Broker) publishAllowed(cl *client, nowNs int64) bool {
	l := b.live.limits.Load()
	if l.pubRate == 0 {
		return true
	}
	ms := uint32((nowNs-b.start.UnixNano())/1e6) + 1 // never 0: 0 marks a new bucket
	if cl.pubLast == 0 {
		cl.pubTokens = float32(l.pubBurst)
	} else {
		cl.pubTokens = float32(min(l.pubBurst, float64(cl.pubTokens)+float64(ms-cl.pubLast)/1e3*l.pubRate))
	}
	cl.pubLast = ms
	if cl.pubTokens < 1 {
		return false
	}
	cl.pubTokens--
	return true
}

var (
	errPublishRate = &packet.Error{Code: packet.MessageRateTooHigh, Text: "publish rate above limits.publish_rate"}
	errTopicLimits = &packet.Error{Code: packet.TopicNameInvalid, Text: "topic beyond limits.max_topic_length or max_topic_levels"}
)
