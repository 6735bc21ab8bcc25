// Package crash kills the bifrost binary with SIGKILL while clients publish to it, again
// and again on the same store, and checks that nothing it acknowledged is lost
// (docs/durability.md, "Sync policies and what a crash loses").
package crash

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Environment:
//
//	BIFROST_CRASH_CYCLES  kill cycles (default 20; a longer run sets more)
//	BIFROST_CRASH_SYNC    store.sync: always (default) fails on any loss; interval and none
//	                      measure the loss per kill instead of failing
//	BIFROST_CRASH_SEED    the random seed, to replay a run (logged at start)
//	BIFROST_CRASH_ENGINE  store.engine: pebble or log (default: each in turn)
const (
	publishers     = 4  // even: 3.1.1, odd: 5.0; each alternates QoS 1 and QoS 2
	window         = 16 // unacknowledged PUBLISHes per publisher
	retainedTopics = 4
	startLimit     = 20 * time.Second // a broker must listen within this
	cycleLimit     = 15 * time.Second // a cycle's clients must be done within this after the kill
)

// TestCrash runs the broker with sync: always, persistent subscribers offline (QoS 1 and
// QoS 2, 3.1.1 and 5.0) and online (resuming after every restart), and publishers
// sending QoS 1 and QoS 2 and updating retained topics; it kills the broker at a random
// moment, restarts it on the same store, and repeats. A message counts as acknowledged
// only once its PUBACK or PUBCOMP arrived. After every restart a subscriber created for
// the cycle must find every message acknowledged in it, and the retained topics must hold
// their last acknowledged value or a later one; at the end every subscriber must have
// every acknowledged message, a QoS 2 one exactly once.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts a broker process 20 times per engine")
	}
	engines := []string{conf.EnginePebble, conf.EngineLog}
	if s := os.Getenv("BIFROST_CRASH_ENGINE"); s != "" {
		engines = []string{s}
	}
	for _, engine := range engines {
		t.Run("Engine="+engine, func(t *testing.T) { testCrash(t, engine) })
	}
}

func testCrash(t *testing.T, engine string) {
	cycles := 20
	if s := os.Getenv("BIFROST_CRASH_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("BIFROST_CRASH_CYCLES=%q", s)
		}
		cycles = n
	}
	policy := "always"
	if s := os.Getenv("BIFROST_CRASH_SYNC"); s != "" {
		policy = s
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("BIFROST_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("engine %s, cycles %d, sync %s, seed %d (BIFROST_CRASH_SEED replays the kill moments)", engine, cycles, policy, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	r := &run{t: t, sync: policy, led: newLedger()}
	path := configEngine(t, filepath.Join(t.TempDir(), "store"), policy, engine)
	r.offline = []*subscriber{newSubscriber("off-311-q1", packet.V311, 1), newSubscriber("off-5-q2", packet.V5, 2)}
	r.online = []*subscriber{newSubscriber("on-311-q2", packet.V311, 2), newSubscriber("on-5-q1", packet.V5, 1)}
	for i := range publishers {
		v := packet.V311
		if i%2 == 1 {
			v = packet.V5
		}
		r.pubs = append(r.pubs, &publisher{id: i, v: v})
	}

	var maxRestore time.Duration
	for cycle := range cycles {
		p := startBroker(t, path, startLimit)
		maxRestore = max(maxRestore, p.restore)
		if cycle == 0 {
			for _, s := range r.offline {
				c, err := s.connect(p.addr, true)
				if err != nil {
					t.Fatal(err)
				}
				_ = c.write(&packet.Disconnect{})
				c.close()
			}
		} else {
			r.checkCycle(p.addr, cycle-1)
			r.checkRetained(p.addr)
		}
		r.newChecker(p.addr, cycle)
		r.runCycle(p, cycle, time.Duration(30+rng.IntN(400))*time.Millisecond)
		if t.Failed() {
			t.Fatalf("cycle %d failed; broker log:\n%s", cycle, p.Log())
		}
	}

	p := startBroker(t, path, startLimit)
	maxRestore = max(maxRestore, p.restore)
	r.checkCycle(p.addr, cycles-1)
	r.checkRetained(p.addr)
	r.drainAll(p.addr)
	r.checkFinal()
	p.stop(t, 10*time.Second)
	t.Logf("%d messages acknowledged (%d QoS 2) over %d kills; longest restore %v",
		r.led.count(0), r.led.count(2), cycles, maxRestore)
	if policy != "always" {
		t.Logf("sync %s: %d acknowledged messages lost in all; worst kill lost %d, acknowledged up to %v before it; "+
			"retained topics behind their acknowledged value %d times", policy, r.lostTotal, r.lostMax, r.windowMax, r.retainedLost)
	}
}

// run is the state of one TestCrash.
type run struct {
	t       *testing.T
	sync    string
	led     *ledger
	pubs    []*publisher
	offline []*subscriber // subscribe at the start, then stay away until the end
	online  []*subscriber // resume after every restart
	checker *subscriber   // the current cycle's
	kills   []time.Time   // when each cycle's broker was killed

	lostTotal, lostMax int
	windowMax          time.Duration
	retainedLost       int // retained topics found behind their last acknowledged value
}

// newChecker creates the cycle's checker: a persistent 5.0 session subscribed at QoS 1,
// offline until the next restart, when it must find every message acknowledged in this
// cycle (checkCycle).
func (r *run) newChecker(addr string, cycle int) {
	s := newSubscriber(fmt.Sprintf("check-%d", cycle), packet.V5, 1)
	c, err := s.connect(addr, true)
	if err != nil {
		r.t.Fatal(err)
	}
	_ = c.write(&packet.Disconnect{})
	c.close()
	r.checker = s
}

// runCycle lets the online subscribers and the publishers loose, kills the broker after
// d, and waits for them to notice.
func (r *run) runCycle(p *proc, cycle int, d time.Duration) {
	var wg sync.WaitGroup
	for _, s := range r.online {
		c, err := s.connect(p.addr, cycle == 0)
		if err != nil {
			r.t.Fatal(err)
		}
		wg.Go(func() { _ = s.serve(c, nil) })
	}
	for _, pub := range r.pubs {
		wg.Go(func() { pub.run(p.addr, cycle, r.led) })
	}
	wg.Go(func() { publishRetained(p.addr, cycle, r.led) })
	time.Sleep(d)
	p.kill()
	r.kills = append(r.kills, time.Now())
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cycleLimit):
		r.t.Fatalf("cycle %d: clients still running %v after the kill", cycle, cycleLimit)
	}
}

// drain resumes s and receives until the marker published after it connected arrives:
// everything queued before it has then been delivered.
func (r *run) drain(addr string, s *subscriber, first bool) {
	r.t.Helper()
	c, err := s.connect(addr, first)
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.close()
	marker := fmt.Sprintf("marker-%s-%d", s.id, time.Now().UnixNano())
	pub, _, err := dial(addr, packet.V5, &packet.Connect{ClientID: []byte("marker"), CleanStart: true})
	if err != nil {
		r.t.Fatal(err)
	}
	defer pub.close()
	if err := pub.write(&packet.Publish{Topic: []byte("crash/q1/marker"), Payload: []byte(marker), QoS: 1, PacketID: 1}); err != nil {
		r.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.serve(c, func(p string) bool { return p == marker }) }()
	select {
	case err := <-done:
		if err != nil {
			r.t.Fatalf("%s: %v before the marker", s.id, err)
		}
	case <-time.After(30 * time.Second):
		c.close()
		r.t.Fatalf("%s: no marker after 30s", s.id)
	}
}

// checkCycle has the checker of cycle find what was acknowledged during it, then ends
// its session.
func (r *run) checkCycle(addr string, cycle int) {
	s := r.checker
	r.drain(addr, s, false)
	var lost []acked
	for _, a := range r.led.inCycle(cycle) {
		if s.count(a.payload) == 0 {
			lost = append(lost, a)
		}
	}
	if len(lost) > 0 {
		before := r.kills[cycle].Sub(lost[0].at)
		for _, a := range lost {
			before = max(before, r.kills[cycle].Sub(a.at))
		}
		r.lostTotal += len(lost)
		r.lostMax = max(r.lostMax, len(lost))
		r.windowMax = max(r.windowMax, before)
		if r.sync == "always" {
			r.t.Errorf("cycle %d: %d acknowledged messages lost by the kill (the first %q, acknowledged %v before it)",
				cycle, len(lost), lost[0].payload, r.kills[cycle].Sub(lost[0].at))
		}
	}
	// End the checker's session: DISCONNECT with session expiry 0.
	c, _, err := dial(addr, packet.V5, persistentConnect(s.id, packet.V5))
	if err != nil {
		r.t.Fatal(err)
	}
	d := &packet.Disconnect{}
	d.Props.SessionExpiry = packet.Some[uint32](0)
	_ = c.write(d)
	c.close()
}

// checkRetained reads the retained topics: each holds its last acknowledged value or a
// later one that was sent.
func (r *run) checkRetained(addr string) {
	c, _, err := dial(addr, packet.V5, &packet.Connect{ClientID: []byte("retained-check"), CleanStart: true})
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.close()
	if err := c.write(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("crash/ret/+"), QoS: 1}}}); err != nil {
		r.t.Fatal(err)
	}
	want := r.led.retainedAcked()
	got := map[int]int{}
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(got) < len(want) {
		p, err := c.read()
		if err != nil {
			r.t.Fatalf("retained: %v after %d of %d topics", err, len(got), len(want))
		}
		if p, ok := p.(*packet.Publish); ok {
			var k, seq int
			if _, err := fmt.Sscanf(string(p.Payload), "r%d-%d", &k, &seq); err != nil {
				r.t.Fatalf("retained payload %q", p.Payload)
			}
			got[k] = seq
			if p.QoS == 1 {
				_ = c.write(&packet.Ack{PacketType: packet.PUBACK, PacketID: p.PacketID})
			}
		}
	}
	sent := r.led.retainedSent()
	for k, seq := range want {
		switch {
		case got[k] > sent[k]:
			r.t.Errorf("retained topic %d holds %d, never sent (sent up to %d)", k, got[k], sent[k])
		case got[k] < seq && r.sync == "always":
			r.t.Errorf("retained topic %d holds %d; acknowledged up to %d", k, got[k], seq)
		case got[k] < seq:
			r.retainedLost++ // measured, not a failure, without fsync
		}
	}
}

// drainAll resumes every subscriber for the last time.
func (r *run) drainAll(addr string) {
	for _, s := range r.offline {
		r.drain(addr, s, false)
	}
	for _, s := range r.online {
		r.drain(addr, s, false)
	}
}

// checkFinal: every subscriber has every acknowledged message, a QoS 2 subscriber each
// QoS 2 message exactly once (a publisher never sends one twice), and every session was
// found again after every restart.
func (r *run) checkFinal() {
	all := r.led.inCycle(-1)
	for _, s := range append(append([]*subscriber(nil), r.offline...), r.online...) {
		missing := 0
		for _, a := range all {
			if s.count(a.payload) == 0 && r.sync == "always" {
				if missing < 5 {
					r.t.Errorf("%s: acknowledged %q (QoS %d, cycle %d) never delivered", s.id, a.payload, a.qos, a.cycle)
				}
				missing++
			}
		}
		if missing > 0 {
			r.t.Errorf("%s: %d of %d acknowledged messages never delivered", s.id, missing, len(all))
		}
		if s.qos == 2 {
			s.mu.Lock()
			var dups []string
			for p, n := range s.got {
				if n > 1 && strings.Contains(p, "-q2-") {
					dups = append(dups, fmt.Sprintf("%s×%d", p, n))
				}
			}
			s.mu.Unlock()
			sort.Strings(dups)
			switch {
			case len(dups) > 0 && r.sync == "always":
				r.t.Errorf("%s: %d QoS 2 messages delivered more than once: %v", s.id, len(dups), dups[:min(5, len(dups))])
			case len(dups) > 0:
				// Without fsync a sent QoS 2 message's packet id can be lost with the rest,
				// and the message is then sent again under another: measured, not failed.
				r.t.Logf("sync %s: %s got %d QoS 2 messages twice", r.sync, s.id, len(dups))
			}
		}
		if s.notPres > 0 {
			r.t.Errorf("%s: session not present after %d restarts", s.id, s.notPres)
		}
	}
}

// acked is one acknowledged message.
type acked struct {
	payload string
	qos     byte
	cycle   int
	at      time.Time
}

// ledger records what the publishers were told.
type ledger struct {
	mu      sync.Mutex
	acked   []acked
	retAck  map[int]int // retained topic → last acknowledged value
	retSent map[int]int // retained topic → last value sent
}

func newLedger() *ledger { return &ledger{retAck: map[int]int{}, retSent: map[int]int{}} }

func (l *ledger) ack(a acked) {
	l.mu.Lock()
	l.acked = append(l.acked, a)
	l.mu.Unlock()
}

// inCycle returns the messages acknowledged in cycle, or in every cycle if it is -1.
func (l *ledger) inCycle(cycle int) []acked {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []acked
	for _, a := range l.acked {
		if cycle < 0 || a.cycle == cycle {
			out = append(out, a)
		}
	}
	return out
}

// count returns the number acknowledged at qos (0: all).
func (l *ledger) count(qos byte) int {
	n := 0
	for _, a := range l.inCycle(-1) {
		if qos == 0 || a.qos == qos {
			n++
		}
	}
	return n
}

func (l *ledger) retainedAcked() map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]int{}
	for k, v := range l.retAck {
		out[k] = v
	}
	return out
}

func (l *ledger) retainedSent() map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]int{}
	for k, v := range l.retSent {
		out[k] = v
	}
	return out
}

// publisher sends numbered messages, alternating QoS 1 and QoS 2, with up to window
// unacknowledged, on a clean session, until its connection fails. Its numbers go on
// across cycles, so every message is unique.
type publisher struct {
	id   int
	v    packet.Version
	next int
}

func (p *publisher) run(addr string, cycle int, led *ledger) {
	c, _, err := dial(addr, p.v, &packet.Connect{ClientID: []byte(fmt.Sprintf("pub-%d", p.id)), CleanStart: true, KeepAlive: 60})
	if err != nil {
		return // killed before we connected
	}
	defer c.close()
	var mu sync.Mutex
	inflight := map[uint16]acked{}
	slots := make(chan struct{}, window)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			pk, err := c.read()
			if err != nil {
				return
			}
			a, ok := pk.(*packet.Ack)
			if !ok {
				continue
			}
			mu.Lock()
			m, known := inflight[a.PacketID]
			mu.Unlock()
			if !known {
				continue
			}
			finish := func(ok bool) {
				mu.Lock()
				delete(inflight, a.PacketID)
				mu.Unlock()
				if ok {
					m.at = time.Now()
					led.ack(m)
				}
				<-slots
			}
			switch a.PacketType {
			case packet.PUBACK:
				finish(!a.Code.IsError())
			case packet.PUBREC:
				if a.Code.IsError() {
					finish(false)
					continue
				}
				if err := c.write(&packet.Ack{PacketType: packet.PUBREL, PacketID: a.PacketID}); err != nil {
					return
				}
			case packet.PUBCOMP:
				finish(a.Code == packet.Success)
			}
		}
	}()
	for {
		select {
		case slots <- struct{}{}:
		case <-readerDone:
			return
		}
		n := p.next
		p.next++
		qos := byte(1 + n%2)
		m := acked{payload: fmt.Sprintf("p%d-q%d-%d", p.id, qos, n), qos: qos, cycle: cycle}
		pid := uint16(n%65000 + 1)
		mu.Lock()
		inflight[pid] = m
		mu.Unlock()
		pub := &packet.Publish{Topic: []byte(fmt.Sprintf("crash/q%d/p%d", qos, p.id)), Payload: []byte(m.payload), QoS: qos, PacketID: pid}
		if err := c.write(pub); err != nil {
			<-readerDone
			return
		}
	}
}

// publishRetained updates the retained topics one after the other at QoS 1, one at a
// time, until its connection fails.
func publishRetained(addr string, cycle int, led *ledger) {
	c, _, err := dial(addr, packet.V5, &packet.Connect{ClientID: []byte("pub-retained"), CleanStart: true, KeepAlive: 60})
	if err != nil {
		return
	}
	defer c.close()
	for i := 0; ; i++ {
		k := i % retainedTopics
		led.mu.Lock()
		seq := led.retSent[k] + 1
		led.retSent[k] = seq
		led.mu.Unlock()
		pid := uint16(i%65000 + 1)
		pub := &packet.Publish{Topic: []byte(fmt.Sprintf("crash/ret/%d", k)), Payload: []byte(fmt.Sprintf("r%d-%d", k, seq)),
			QoS: 1, Retain: true, PacketID: pid}
		if err := c.write(pub); err != nil {
			return
		}
		for {
			p, err := c.read()
			if err != nil {
				return
			}
			if a, ok := p.(*packet.Ack); ok && a.PacketType == packet.PUBACK && a.PacketID == pid {
				if !a.Code.IsError() {
					led.mu.Lock()
					led.retAck[k] = seq
					led.mu.Unlock()
				}
				break
			}
		}
	}
}
