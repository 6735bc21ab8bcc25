package conf

import "time"

// Limits bound what clients may take from the broker (limits), so that one client, or a
// flood of them, cannot starve the others. Each has a default; the ones a well-behaved
// deployment could outgrow can be set to 0 to switch them off, as noted per field.
type Limits struct {
	// MaxConnections (limits.max_connections) is the most open MQTT connections of the
	// whole broker; a listener may have its own cap too (listeners[i].max_connections).
	// Past it a new connection is closed at once. 0..2147483647. nil: 1000000 (edge
	// 10000); 0 = no cap. Either way the broker holds no more than the process's
	// open-file limit less a reserve for its store, HTTP endpoint and cluster (a
	// twentieth of the limit, 256 to 4096 files).
	MaxConnections *int `yaml:"max_connections"`
	// ConnectRate (limits.connect_rate) is how many new connections per second one
	// source address may open, with ConnectBurst of them at once; past it they are
	// closed at accept. Loopback addresses are exempt (the host's own programs and load
	// tests). 0..2147483647. nil: 100/s, which a NAT gateway's devices reconnecting
	// after an outage pass and a single host hammering the port does not; 0 = no limit.
	ConnectRate *int `yaml:"connect_rate"`
	// ConnectBurst (limits.connect_burst) is how many connections one source address may
	// open at once within ConnectRate: 1..2147483647; default 500.
	ConnectBurst int `yaml:"connect_burst"`
	// MaxTopicLength (limits.max_topic_length) is the longest topic name or filter
	// accepted, in bytes: 1..65535. Default 4096: far beyond real topics, far below the
	// protocol's 65535.
	MaxTopicLength int `yaml:"max_topic_length"`
	// MaxTopicLevels (limits.max_topic_levels) is the most levels ('/'-separated) a topic
	// name or filter may have: 1..65535. Default 128 (as EMQX): deep enough for any
	// hierarchy, shallow enough to bound a match's walk.
	MaxTopicLevels int `yaml:"max_topic_levels"`
	// MaxSubscriptions (limits.max_subscriptions) is the most subscriptions one session
	// may hold: 0..2147483647. nil: 1000 (edge 100); 0 = no cap.
	MaxSubscriptions *int `yaml:"max_subscriptions"`
	// PublishRate (limits.publish_rate) is how many PUBLISH packets per second one client
	// may send, with PublishBurst at once; a client that goes on faster is disconnected
	// (v5 0x96, message rate too high). 0..2147483647. Default 0 = no limit: a broker's
	// job is to carry messages, and the inflight window (mqtt.receive_maximum) already
	// paces QoS 1 and 2.
	PublishRate int `yaml:"publish_rate"`
	// PublishBurst (limits.publish_burst) is how many PUBLISH packets one client may send
	// at once within PublishRate: 0..2147483647. Default 0: one second's worth,
	// PublishRate.
	PublishBurst int `yaml:"publish_burst"`
	// MaxTLSHandshakes (limits.max_tls_handshakes) is the most TLS handshakes (tls and
	// wss listeners) in progress at once. Each runs on a goroutine of its own, from the
	// client's ClientHello until its Finished, and holds about 20 KiB meanwhile
	// (measured: 12 KiB of heap, 8 KiB of stack); a flood of ClientHellos that never
	// finish must not turn into as many goroutines. Past the cap a connection waits for a
	// slot, holding no goroutine, in a queue of up to 4 times the cap; past that it is
	// closed at once (counted in bifrost_tls_handshakes_refused_total). The connect
	// timeout, counted from the accept, bounds the wait. 1..1048576; default 256 (edge
	// 32): a slot is held for a round trip and about a millisecond of CPU, so 256 slots
	// keep 1,000+ handshakes a second going even over 200 ms links, more than a few cores
	// compute, for about 5 MiB at most; there is no "no cap".
	MaxTLSHandshakes int `yaml:"max_tls_handshakes"`
	// AuthFailures (limits.auth_failures) is the failure budget of each source of
	// CONNECTs.
	AuthFailures AuthFailures `yaml:"auth_failures"`
}

// AuthFailures is the failure budget of a source of CONNECTs (limits.auth_failures): one
// IPv4 address, or one IPv6 /64 (what a single host or site holds). After Max failed
// password checks (a wrong password or unknown user, a refused enhanced authentication,
// an authenticator's refusal) with less than Window between one and the next, the source
// is blocked: for 1s, then twice as long after each further failure, up to BackoffMax.
// While blocked, its CONNECTs that need a check are refused at once without one (v5 0x9F
// connection rate exceeded, 3.1.1 return code 3); checks already running count against
// the budget, so a burst of connections gets Max of them, and after a block one. Logins
// decided without a check (the login cache, anonymous access, a client certificate) are
// never refused by it. A source with no failure for Window is forgotten. Defaults: 5,
// 1m, 30s, loopback exempt: a guesser gets 5 tries, then one every 30s.
type AuthFailures struct {
	// Max (limits.auth_failures.max) is how many failures, each less than Window after
	// the one before, block the source: 0..65535. nil: 5; 0 = no budget.
	Max *int `yaml:"max"`
	// Window (limits.auth_failures.window) is how long a failure counts: the next one
	// within it adds to the budget's count, and a source with none for this long is
	// forgotten. Above 0; default 1m.
	Window Duration `yaml:"window"`
	// BackoffMax (limits.auth_failures.backoff_max) is the longest a block lasts. Above
	// 0; default 30s.
	BackoffMax Duration `yaml:"backoff_max"`
	// ExemptLoopback (limits.auth_failures.exempt_loopback) leaves loopback sources
	// uncounted: the host's own programs, and every client at once behind a proxy on the
	// host. nil: true.
	ExemptLoopback *bool `yaml:"exempt_loopback"`
}

// ensureDefaults fills l from the profile's d.
func (l *Limits) ensureDefaults(d *Limits) {
	nilDefault(&l.MaxConnections, d.MaxConnections)
	nilDefault(&l.ConnectRate, d.ConnectRate)
	orDefault(&l.ConnectBurst, d.ConnectBurst)
	orDefault(&l.MaxTopicLength, d.MaxTopicLength)
	orDefault(&l.MaxTopicLevels, d.MaxTopicLevels)
	nilDefault(&l.MaxSubscriptions, d.MaxSubscriptions)
	orDefault(&l.MaxTLSHandshakes, d.MaxTLSHandshakes)
	nilDefault(&l.AuthFailures.Max, d.AuthFailures.Max)
	orDefault(&l.AuthFailures.Window, d.AuthFailures.Window)
	orDefault(&l.AuthFailures.BackoffMax, d.AuthFailures.BackoffMax)
	nilDefault(&l.AuthFailures.ExemptLoopback, d.AuthFailures.ExemptLoopback)
	if l.PublishRate > 0 && l.PublishBurst == 0 {
		l.PublishBurst = l.PublishRate // one second's worth
	}
}

// limitsDefaults are the profile-independent defaults.
func limitsDefaults() Limits {
	return Limits{ConnectRate: ptr(100), ConnectBurst: 500, MaxTopicLength: 4096, MaxTopicLevels: 128,
		AuthFailures: AuthFailures{Max: ptr(5), Window: Duration(time.Minute), BackoffMax: Duration(30 * time.Second),
			ExemptLoopback: ptr(true)}}
}

// validate reports the out-of-range limits.
func (l *Limits) validate(errs *errorList) {
	const maxInt32 = 1<<31 - 1
	between(errs, "limits.max_connections", valueOr(l.MaxConnections), 0, maxInt32)
	between(errs, "limits.connect_rate", valueOr(l.ConnectRate), 0, maxInt32)
	between(errs, "limits.connect_burst", l.ConnectBurst, 0, maxInt32)
	between(errs, "limits.max_topic_length", l.MaxTopicLength, 1, 65535)
	between(errs, "limits.max_topic_levels", l.MaxTopicLevels, 1, 65535)
	between(errs, "limits.max_subscriptions", valueOr(l.MaxSubscriptions), 0, maxInt32)
	between(errs, "limits.publish_rate", l.PublishRate, 0, maxInt32)
	between(errs, "limits.publish_burst", l.PublishBurst, 0, maxInt32)
	between(errs, "limits.max_tls_handshakes", l.MaxTLSHandshakes, 0, 1<<20)
	between(errs, "limits.auth_failures.max", valueOr(l.AuthFailures.Max), 0, 65535)
	if l.AuthFailures.Window != 0 { // unset before EnsureDefaults
		positive(errs, "limits.auth_failures.window", l.AuthFailures.Window)
	}
	if l.AuthFailures.BackoffMax != 0 {
		positive(errs, "limits.auth_failures.backoff_max", l.AuthFailures.BackoffMax)
	}
}

// valueOr is *p, or 0 for an unset field (Validate before EnsureDefaults).
func valueOr(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
