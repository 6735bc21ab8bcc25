package broker

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// The failure budget
//
// A password check costs a bcrypt hash (about 70 ms of a core) by design, so that a
// stolen password file is slow to crack; online, the same cost makes every failed
// CONNECT a way to burn the broker's CPU and, without a bound, an unlimited supply of
// guesses. Each source of CONNECTs (an IPv4 address, an IPv6 /64: what one host or site
// holds) has a budget of failed checks (conf.AuthFailures): past it, the source is
// blocked for 1s, then twice as long after each further failure, up to backoff_max, and
// while blocked its CONNECTs that would need a check are refused at once, without one:
// v5 0x9F connection rate exceeded (3.1.1 return code 3, server unavailable). A guesser
// learns it is being held back, never whether a guess was right; a client with the right
// password behind the same address is told to come back later, not that its password is
// wrong (which many clients take as final). Logins decided without a check (the login
// cache, anonymous access, a client certificate) are never refused: they cost nothing
// and a cache hit proves the password was already known.
//
// Checks in flight count against the budget: the auth pool starts a source's next check
// only while its failures plus its running checks are below max, and once over it, one
// at a time (authFailures.verdict), so 32 connections guessing at once get max checks,
// not 32, and after each block one. A success does not give the budget back: an attacker
// with one valid account must not reset it between guesses at another.
//
// Nothing is kept per connection. The table holds one entry per source that failed (40
// bytes of key and value, 94 measured with the map's overhead when full), forgotten a
// window after its last failure once its block is over, and at most maxFailureSources
// of them (1.5 MiB measured, during a spray from that many sources): when full,
// forgotten entries go first, then the unblocked ones, then, all blocked, a quarter of
// them at random. Eviction gives a source a fresh budget: it errs on the side of
// admitting, and a spray that fills the table has paid max checks per source to do it.
//
// Alternatives rejected: a delay before each refusal or each check (a tarpit) holds the
// connection, and a timer or a goroutine per waiting connection, while a parallel
// attacker just opens more; refusing at accept would also turn away a blocked source's
// cached logins and certificates, and the connect rate already bounds what its
// connections cost before their CONNECT.

// maxFailureSources bounds the failure table.
const maxFailureSources = 1 << 14

// A source is where CONNECTs come from: the key of the failure budget and of the auth
// pool's lanes (pool.go).
type source struct {
	prefix [16]byte // the address (IPv4 as v4-mapped), an IPv6 one cut to its /64
	budget bool     // the failure budget applies (not an exempt loopback, not unknown)
}

// sourceOf is the source of a connection from addr under the budget bg.
func sourceOf(addr netip.Addr, bg *authBudget) source {
	addr = addr.Unmap()
	if !addr.IsValid() {
		return source{}
	}
	s := source{prefix: addr.As16(), budget: bg.max > 0 && !(bg.exemptLoopback && addr.IsLoopback())}
	if addr.Is6() {
		clear(s.prefix[8:])
	}
	return s
}

// remoteAddr is a connection's remote address, or the zero Addr. A system call and an
// allocation on the epoll engine: only for a CONNECT that needs a check.
func remoteAddr(c listener.Conn) netip.Addr {
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr()
	case nil:
		return netip.Addr{}
	default:
		ap, _ := netip.ParseAddrPort(a.String())
		return ap.Addr()
	}
}

// authBudget is conf.AuthFailures as the broker applies it, part of the limits snapshot.
type authBudget struct {
	max            int   // failures; 0: no budget
	window         int64 // nanoseconds
	backoffMax     int64 // nanoseconds
	exemptLoopback bool
}

func newAuthBudget(c *conf.AuthFailures) authBudget {
	return authBudget{max: *c.Max, window: int64(c.Window), backoffMax: int64(c.BackoffMax),
		exemptLoopback: *c.ExemptLoopback}
}

// firstBlock is how long a source is blocked when it first runs out of budget.
const firstBlock = int64(time.Second)

// errThrottled refuses a CONNECT (or an AUTH step) from a blocked source, unchecked.
var errThrottled = &packet.Error{Code: packet.ConnectionRateExceeded,
	Text: "source over its authentication failure budget (limits.auth_failures)"}

// A verdict is what the budget lets a source's next check do.
type verdict uint8

const (
	verdictCheck verdict = iota // run it
	verdictWait                 // wait for one of the source's running checks to end
	verdictBlock                // refuse it unchecked: the source is blocked
)

// authFailures is the failure table: the sources that failed recently. Its lock is a
// leaf, taken under the auth pool's.
type authFailures struct {
	mu sync.Mutex
	m  map[[16]byte]failures
}

// failures is one source's record.
type failures struct {
	count uint32 // failed checks since the source was last forgotten
	level uint32 // blocks so far: the next lasts firstBlock << level, capped
	last  int64  // unix nanoseconds of the last failure
	until int64  // unix nanoseconds when the current block ends; 0: never blocked
}

// stale reports whether e is to be forgotten at now: its block is over and its last
// failure a window old.
func (e *failures) stale(bg *authBudget, now int64) bool {
	return now >= e.until && now-e.last >= bg.window
}

// verdict says whether src may start a check now with running of its checks in flight.
func (f *authFailures) verdict(src source, running int, bg *authBudget, now int64) verdict {
	if !src.budget || bg.max == 0 {
		return verdictCheck
	}
	f.mu.Lock()
	e, ok := f.m[src.prefix]
	if ok && e.stale(bg, now) {
		delete(f.m, src.prefix)
		if len(f.m) == 0 {
			f.m = nil // a map keeps its size: after a spray, give it back
		}
		ok = false
	}
	f.mu.Unlock()
	switch {
	case ok && now < e.until:
		return verdictBlock
	case int(e.count)+running < bg.max, int(e.count) >= bg.max && running == 0:
		return verdictCheck
	}
	return verdictWait
}

// blocked reports whether src is blocked now: its CONNECTs are refused before they are
// queued for a check.
func (f *authFailures) blocked(src source, bg *authBudget, now int64) bool {
	return src.budget && f.verdict(src, 0, bg, now) == verdictBlock
}

// failed records a failed check of src at now, and returns how long the source is now
// blocked for (0: not blocked).
func (f *authFailures) failed(src source, bg *authBudget, now int64) time.Duration {
	if !src.budget || bg.max == 0 {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.m[src.prefix]
	if !ok || e.stale(bg, now) {
		if !ok && len(f.m) >= maxFailureSources {
			f.evict(bg, now)
		}
		e = failures{}
	}
	if f.m == nil {
		f.m = make(map[[16]byte]failures)
	}
	e.count++
	e.last = now
	var d int64
	if int(e.count) >= bg.max {
		d = min(firstBlock<<min(e.level, 32), bg.backoffMax)
		e.until = now + d
		e.level++
	}
	f.m[src.prefix] = e
	return time.Duration(d)
}

// evict makes room in a full table: forgotten entries first, then those not blocked now,
// then a quarter of the blocked ones. Lock held.
func (f *authFailures) evict(bg *authBudget, now int64) {
	for k, e := range f.m {
		if e.stale(bg, now) {
			delete(f.m, k)
		}
	}
	if len(f.m) < maxFailureSources {
		return
	}
	for k, e := range f.m {
		if now >= e.until {
			delete(f.m, k)
		}
	}
	if len(f.m) < maxFailureSources {
		return
	}
	n := len(f.m) / 4
	for k := range f.m { // in the map's random order
		if n == 0 {
			break
		}
		delete(f.m, k)
		n--
	}
}

// sources returns the number of sources in the table.
func (f *authFailures) sources() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}

// clientSource is the source of cl's CONNECTs under the budget in force.
func (b *Broker) clientSource(cl *client) source {
	return sourceOf(remoteAddr(cl.conn), &b.live.limits.Load().auth)
}

// admitCheck is the auth pool's admit: the budget's verdict on src's next check.
func (b *Broker) admitCheck(src source, running int) verdict {
	return b.auth.failures.verdict(src, running, &b.live.limits.Load().auth, now())
}

// authFailed records a failed check from src, and logs (rate-limited) when it blocks the
// source.
func (b *Broker) authFailed(src source) {
	b.stats.authFailures.Add(1)
	d := b.auth.failures.failed(src, &b.live.limits.Load().auth, now())
	if d == 0 {
		return
	}
	b.auth.budgetLog.Log(b.log, slog.LevelInfo, "blocked", "auth: source blocked after failed logins",
		"source", src.String(), "for", d.String())
}

// throttled counts a CONNECT or AUTH step refused unchecked, its source blocked.
func (b *Broker) throttled() { b.stats.authThrottled.Add(1) }

// String is the source as an address, or an IPv6 /64 prefix.
func (s source) String() string {
	a := netip.AddrFrom16(s.prefix).Unmap()
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).String()
}
