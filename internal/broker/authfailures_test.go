package broker

import (
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// sourceConn is an authTestConn from a remote address of the test's.
type sourceConn struct {
	authTestConn
	remote *net.TCPAddr
}

func (c *sourceConn) RemoteAddr() net.Addr { return c.remote }

// turnAuth is an Authenticator whose checks each wait until the test has received them
// on calls and answered on done: it admits alice with password secret and refuses
// everyone else.
type turnAuth struct {
	calls chan *auth.Request
	done  chan struct{}
}

func (g *turnAuth) Authenticate(r *auth.Request) (auth.Result, error) {
	g.calls <- r
	<-g.done
	if r.Username == "alice" && string(r.Password) == "secret" {
		return auth.Result{Username: "alice"}, nil
	}
	return auth.Result{}, auth.ErrBadCredentials
}

// TestAuthAttackerFromOneSource: 32 connections from one address guess a password at
// once while a client from another address logs in. The guesser gets the failure
// budget's 5 checks (limits.auth_failures.max) and its other CONNECTs are refused
// unchecked (0x9F); the other client's check waits behind at most one of the guesser's
// queued checks (besides those already running when it came), not behind all of them.
func TestAuthAttackerFromOneSource(t *testing.T) {
	const guessers = 32
	g := &turnAuth{calls: make(chan *auth.Request), done: make(chan struct{})}
	b := authBroker(t, Security{Authenticator: g})
	max := b.live.limits.Load().auth.max
	open := func(ip string, user, pass string) *sourceConn {
		c := &sourceConn{remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
		b.OnOpen(c)
		b.OnData(c, connectPacket(packet.V5, "", user, pass)) // queued for a check when it returns
		return c
	}
	// The checks wait on calls, which nobody receives yet: every guess is queued, or
	// running (on each of the pool's workers), before the other client comes.
	var attack []*sourceConn
	for range guessers {
		attack = append(attack, open("192.0.2.1", "guesser", "wrong"))
	}
	good := open("198.51.100.7", "alice", "secret")

	var mu sync.Mutex
	var order []string // the user names of the checks, in the order they ran
	go func() {
		for r := range g.calls {
			mu.Lock()
			order = append(order, r.Username)
			mu.Unlock()
			g.done <- struct{}{}
		}
	}()
	t.Cleanup(func() { close(g.calls) })
	answered := func(c *sourceConn) packet.ReasonCode {
		ps := c.waitPackets(t, packet.V5, 1)
		return ps[0].(*packet.Connack).Code
	}
	if rc := answered(good); rc != packet.Success {
		t.Fatalf("the other client's CONNACK: %v", rc)
	}
	codes := map[packet.ReasonCode]int{}
	for _, c := range attack {
		codes[answered(c)]++
	}

	mu.Lock()
	defer mu.Unlock()
	before := 0
	for _, u := range order {
		if u == "alice" {
			break
		}
		before++
	}
	checked := len(order) - 1
	t.Logf("checks in order: %v; guesses answered %v", order, codes)
	if limit := poolWorkers() + 1; before > limit {
		t.Errorf("the other client's check ran after %d of the guesser's, want at most %d (the %d running, and one queued)",
			before, limit, poolWorkers())
	}
	if checked != max || codes[packet.BadUserNameOrPassword] != max || codes[packet.ConnectionRateExceeded] != guessers-max {
		t.Errorf("the guesser's %d CONNECTs got %d checks and the answers %v; want %d checks (0x86) and the rest refused unchecked (0x9F)",
			guessers, checked, codes, max)
	}
	if f, th := b.stats.authFailures.Load(), b.stats.authThrottled.Load(); f != uint64(max) || th != uint64(guessers-max) {
		t.Errorf("counted %d failures and %d throttled, want %d and %d", f, th, max, guessers-max)
	}
}

// TestAuthBudgetAfterBlock: once a blocked source's block is over it gets one check at a
// time, however many of its connections wait: a failure blocks it again, for twice as
// long, up to backoff_max; a window after its block, it is forgotten. Addresses of one
// IPv6 /64 are one source; loopback is exempt if so configured.
func TestAuthBudgetAfterBlock(t *testing.T) {
	bg := &authBudget{max: 3, window: 60e9, backoffMax: 30e9}
	var f authFailures
	src := sourceOf(netip.MustParseAddr("2001:db8:1:2:3:4:5:6"), bg)
	if other := sourceOf(netip.MustParseAddr("2001:db8:1:2:ffff::1"), bg); other != src {
		t.Fatalf("two addresses of one /64 are sources %v and %v", src, other)
	}
	now := int64(1e12)
	for i := range 3 {
		if v := f.verdict(src, 0, bg, now); v != verdictCheck {
			t.Fatalf("check %d: verdict %d, want check", i, v)
		}
		if d := f.failed(src, bg, now); (d != 0) != (i == 2) {
			t.Fatalf("failure %d blocks for %v", i+1, d)
		}
	}
	if v := f.verdict(src, 0, bg, now+1e9-1); v != verdictBlock {
		t.Fatalf("within the first block: verdict %d, want block", v)
	}
	now += 1e9
	if v := f.verdict(src, 0, bg, now); v != verdictCheck {
		t.Fatalf("after the block: verdict %d, want one check", v)
	}
	if v := f.verdict(src, 1, bg, now); v != verdictWait {
		t.Fatalf("after the block, one check running: verdict %d, want wait", v)
	}
	if d := f.failed(src, bg, now); d != 2e9 {
		t.Fatalf("the probe's failure blocks for %v, want 2s", d)
	}
	for range 10 { // each just after the last block, within the window
		now += 31e9
		f.failed(src, bg, now)
	}
	if v := f.verdict(src, 0, bg, now+30e9-1); v != verdictBlock {
		t.Fatalf("blocks are capped at backoff_max, and last it: verdict %d", v)
	}
	if v := f.verdict(src, 0, bg, now+30e9+60e9); v != verdictCheck || f.sources() != 0 {
		t.Fatalf("a window after its block: verdict %d, %d sources kept; want forgotten", v, f.sources())
	}
	loop := sourceOf(netip.MustParseAddr("127.0.0.2"), &authBudget{max: 3, exemptLoopback: true})
	if loop.budget {
		t.Fatal("a loopback source counted with exempt_loopback")
	}
}

// TestAuthFailureTableBounded: a spray of failures from more sources than the table
// holds keeps it at its bound.
func TestAuthFailureTableBounded(t *testing.T) {
	bg := &authBudget{max: 5, window: 60e9, backoffMax: 30e9}
	var f authFailures
	for i := range maxFailureSources + 1000 {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		f.failed(sourceOf(a, bg), bg, 1e12)
	}
	if n := f.sources(); n > maxFailureSources {
		t.Fatalf("%d sources kept, bound %d", n, maxFailureSources)
	}
}
