package broker

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/invariants"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// logBuf is a log sink safe for the broker's goroutines.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// lines returns the lines logged that contain every one of want.
func (l *logBuf) lines(want ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.Lines(l.buf.String()) {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// logBroker is a broker without listeners whose session queues hold 3 messages, logging
// into the returned buffer; tune, if not nil, changes its config.
func logBroker(t *testing.T, tune func(c *conf.Config)) (*Broker, *logBuf) {
	t.Helper()
	return logBrokerWith(t, nil, Security{}, tune)
}

// logBrokerWith is logBroker restored from st (nil: an empty store), with sec.
func logBrokerWith(t *testing.T, st store.Store, sec Security, tune func(c *conf.Config)) (*Broker, *logBuf) {
	t.Helper()
	if st == nil {
		st = store.NewMemory()
	}
	cfg := conf.Default()
	cfg.Listeners = nil
	cfg.SysInterval = new(conf.Duration)
	cfg.Queue.OfflineMessages = 3
	if tune != nil {
		tune(cfg)
	}
	cfg.EnsureDefaults()
	logs := &logBuf{}
	b, err := New(Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(logs, nil)), Security: sec})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, logs
}

// window1 makes a 5.0 CONNECT state a Receive Maximum of 1: one message in flight, the
// rest in the queue.
func window1(c *packet.Connect) { c.Props.ReceiveMaximum = packet.Some[uint16](1) }

// publishN publishes QoS 1 messages seq from..to-1 on topic from c, each "id/seq".
func publishN(c *tclient, topic, id string, from, to int) {
	for i := from; i < to; i++ {
		c.publish(uint16(i+1), 1, false, topic, fmt.Sprintf("%s/%d", id, i))
	}
}

var suppressedRE = regexp.MustCompile(`suppressed=(\d+)`)

// TestDropsLogged: a QoS 1 message dropped at a full queue, after its publisher had its
// PUBACK, is logged as a warning naming the subscriber, the topic, the QoS and the
// publisher, at once; the drops that follow within the second are counted, and the second
// ends with the line again and suppressed=N, so that every drop is in the log once. A drop
// the protocol asks for (QoS 0 for an offline session) is logged as information.
func TestDropsLogged(t *testing.T) {
	b, logs := logBroker(t, nil)
	sub := dialT(t, b, packet.V5, "sub", func(c *packet.Connect) { persist(300)(c); window1(c) })
	sub.subscribe(1, 1, "t/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	publishN(pub, "t/x", "pub", 0, 4) // the window and the queue
	if l := logs.lines("message dropped"); len(l) != 0 {
		t.Fatalf("logged before any drop: %q", l)
	}
	dropLines := func() []string {
		return logs.lines("level=WARN", `msg="message dropped"`, "reason=queue_full", "client=sub", "topic=t/x", "qos=1", "from=pub")
	}
	pub.publish(10, 1, false, "t/x", "over")
	lines := dropLines()
	if len(lines) != 1 || suppressedRE.MatchString(lines[0]) {
		t.Fatalf("after the first drop: %q, want one line without a count", lines)
	}
	// Dropped until the second's line comes: each is counted, not logged.
	n := 1
	testenv.WaitFor(t, "the second's line of drops", func() bool {
		pub.publish(uint16(n%60000+10), 1, false, "t/x", "over")
		n++
		return len(dropLines()) >= 2
	})
	// Every drop is in the log once: the first line, and the counts of those after it
	// (the last drops may be in the next second's line).
	logged := func() int {
		k := 0
		for _, l := range dropLines() {
			k++
			if m := suppressedRE.FindStringSubmatch(l); m != nil {
				c, _ := strconv.Atoi(m[1])
				k += c - 1
			}
		}
		return k
	}
	testenv.WaitFor(t, fmt.Sprintf("the %d drops in the log", n), func() bool { return logged() == n })
	if l := dropLines(); len(l) > 3 {
		t.Fatalf("%d drops logged in %d lines:\n%q", n, len(l), l)
	}
	if got := b.stats.dropped[session.DropQueueFull].Load(); got != uint64(n) {
		t.Fatalf("%d drops counted, want %d", got, n)
	}

	sub.drop()
	pub.publish(0, 0, false, "t/x", "qos 0")
	if l := logs.lines("level=INFO", `msg="message dropped"`, "reason=offline_qos0", "client=sub", "qos=0"); len(l) != 1 {
		t.Fatalf("offline QoS 0 drop lines: %q", l)
	}
}

// TestDropAllocs: a message dropped at a full queue whose line is not logged (its
// reason's line of the second is out) allocates nothing; the publisher's PUBACK is sent
// all the same.
func TestDropAllocs(t *testing.T) {
	if testenv.Race {
		t.Skip("sync.Pool drops items at random under the race detector: allocation counts mean nothing")
	}
	if invariants.Enabled {
		t.Skip("built with invariants, released messages stay out of the pools")
	}
	b := benchBrokerStore(t, nil)
	b.log = slog.New(slog.NewTextHandler(io.Discard, nil)) // warnings are built when logged
	v := packet.V311
	sub := connect(t, b, "sub", v) // 3.1.1: the broker's window of 1024, and the queue's 1000
	subscribe(t, b, sub, "t", 1, v)
	pub := connect(t, b, "pub", v)
	publish := (&packet.Publish{Topic: []byte("t"), QoS: 1, PacketID: 1, Payload: make([]byte, 64)}).AppendTo(nil, v)
	for range 1024 + 1000 + 1 { // the window, the queue, and one dropped: the line logged
		b.OnData(pub, publish)
	}
	drops := b.stats.dropped[session.DropQueueFull].Load()
	if drops != 1 {
		t.Fatalf("%d drops, want 1", drops)
	}
	const runs = 1000
	got := allocsPerOp(runs, func() { b.OnData(pub, publish) })
	if n := b.stats.dropped[session.DropQueueFull].Load() - drops; n < 3*runs {
		t.Fatalf("%d drops measured, want the %d messages published", n, 3*runs)
	}
	if got != 0 {
		t.Errorf("%.3f allocations per dropped message, want 0", got)
	}
}

// maxPacket makes a 5.0 CONNECT state a Maximum Packet Size of n.
func maxPacket(n uint32) func(c *packet.Connect) {
	return func(c *packet.Connect) { c.Props.MaximumPacketSize = packet.Some(n) }
}

// TestDropsLoggedOnResume: a subscriber that comes back with a Maximum Packet Size
// smaller than the messages waiting for it has them dropped as too_large
// [MQTT-3.1.2-25], the one in flight resent and the queued ones alike: each is counted,
// once, and logged as a warning naming the client.
func TestDropsLoggedOnResume(t *testing.T) {
	b, logs := logBroker(t, nil)
	sub := dialT(t, b, packet.V5, "sub", func(c *packet.Connect) { persist(300)(c); window1(c) })
	sub.subscribe(1, 1, "t/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	big := strings.Repeat("x", 200)
	for i := range 3 { // one in flight, two queued
		pub.publish(uint16(i+1), 1, false, "t/x", big)
	}
	sub.packets()
	sub.drop()

	sub = dialT(t, b, packet.V5, "sub", func(c *packet.Connect) { persist(300)(c); maxPacket(100)(c) })
	if got := sub.lines(); len(got) != 0 {
		t.Errorf("sent %q after the CONNACK, want nothing: every message is too large", got)
	}
	if got := b.stats.dropped[session.DropTooLarge].Load(); got != 3 {
		t.Errorf("%d drops counted as too_large, want 3", got)
	}
	if l := logs.lines("level=WARN", `msg="message dropped"`, "reason=too_large", "client=sub"); len(l) != 1 {
		t.Errorf("too_large lines %q, want one", l)
	}
}

// TestDeniedLogged: with the ACL reloaded to deny what waits for a subscriber, the
// messages dropped as they leave (the window sent again on a reconnect, the queue pumped
// by it and by a PUBACK) are counted as acl_denied, each once, and logged as information
// naming the client: each in the log once, the first line's as messages=N, those after
// it in the second's suppressed=N.
func TestDeniedLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acl")
	write := func(rules string) {
		if err := os.WriteFile(path, []byte(rules), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("topic readwrite t/#\n")
	a, err := auth.New(conf.Auth{ACLFile: path}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	b, logs := logBrokerWith(t, nil, Security{Authorizer: a}, func(c *conf.Config) { c.Queue.OfflineMessages = 10 })
	sub := dialT(t, b, packet.V5, "sub", func(c *packet.Connect) { persist(300)(c); window1(c) })
	sub.subscribe(1, 1, "t/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	for i, topic := range []string{"t/deny/1", "t/deny/2", "t/ok/3", "t/deny/4", "t/deny/5"} { // one in flight, four queued
		pub.publish(uint16(i+1), 1, false, topic, "m")
	}
	sub.packets()
	sub.drop()
	write("topic readwrite t/ok/#\ntopic write t/#\n") // the subscriber may no longer read t/deny/#
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}

	sub = dialT(t, b, packet.V5, "sub", func(c *packet.Connect) { persist(300)(c); window1(c) })
	ps := sub.packets()
	if len(ps) != 1 || describeP(ps[0]) != `PUBLISH t/ok/3 q1 "m"` {
		t.Fatalf("resumed: %v, want t/ok/3 alone", ps)
	}
	if got := b.stats.dropped[session.DropDenied].Load(); got != 2 {
		t.Errorf("%d drops counted as acl_denied after the reconnect, want 2: t/deny/1 resent, t/deny/2 pumped", got)
	}
	denied := func() []string {
		return logs.lines("level=INFO", `msg="message dropped"`, "reason=acl_denied", "client=sub")
	}
	if l := denied(); len(l) != 1 || !strings.Contains(l[0], "messages=2") {
		t.Fatalf("acl_denied lines %q, want one with messages=2", l)
	}
	sub.ack(packet.PUBACK, ps[0].(*packet.Publish).PacketID)
	if got := b.stats.dropped[session.DropDenied].Load(); got != 4 {
		t.Errorf("%d drops counted as acl_denied after the PUBACK, want 4: t/deny/4 and 5 pumped", got)
	}
	// The PUBACK's drops came within the second of the first line: its line ends the
	// second, with their count.
	testenv.WaitFor(t, "the second's acl_denied line", func() bool { return len(denied()) == 2 })
	if l := denied(); !strings.Contains(l[1], "suppressed=2") {
		t.Errorf("the second's line %q, want suppressed=2", l[1])
	}
}

// TestRestoreDropsLogged: what a restart drops is counted and logged in one line by
// reason, however many sessions it comes from: the queued messages that expired while the
// broker was down (swept by Load), and the queues cut to lowered bounds. A message whose
// delivery had begun is sent again all the same [MQTT-3.3.2-5].
func TestRestoreDropsLogged(t *testing.T) {
	st := store.NewMemory()
	var bt store.Batch
	past := time.Now().Add(-time.Minute).UnixNano()
	bt.PutMessage(1, store.MessageRecord{Topic: []byte("t/old"), Payload: []byte("old"), QoS: 1, Expiry: past})
	bt.PutMessage(2, store.MessageRecord{Topic: []byte("t/sent"), Payload: []byte("sent"), QoS: 1, Expiry: past})
	bt.PutMessage(3, store.MessageRecord{Topic: []byte("t/new"), Payload: []byte("new"), QoS: 1})
	for _, cid := range []string{"a", "b", "c"} {
		bt.PutSession(store.SessionRecord{ClientID: cid, Expiry: store.NeverExpire, Version: 5, Owned: true,
			Subscriptions: []store.SubRecord{{Filter: "t/#", QoS: 1}}})
		bt.PutQueued(cid, 1, store.QueuedRecord{MessageID: 2, QoS: 1, PacketID: 1, State: store.StateSent})
		bt.PutQueued(cid, 2, store.QueuedRecord{MessageID: 1, QoS: 1, State: store.StateQueued})
		bt.PutQueued(cid, 3, store.QueuedRecord{MessageID: 1, QoS: 1, State: store.StateQueued})
		for seq := range uint64(4) { // a queue of 4, one beyond the bound
			bt.PutQueued(cid, 4+seq, store.QueuedRecord{MessageID: 3, QoS: 1, State: store.StateQueued})
		}
	}
	done := make(chan error, 1)
	st.Commit(&bt, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	b, logs := logBrokerWith(t, st, Security{}, nil) // queues of 3
	if got := b.stats.dropped[session.DropExpired].Load(); got != 6 {
		t.Errorf("%d drops counted as expired, want 6: two unsent entries of each session", got)
	}
	if got := b.stats.dropped[session.DropQueueFull].Load(); got != 3 {
		t.Errorf("%d drops counted as queue_full, want 3: one entry of each session", got)
	}
	if l := logs.lines(`msg="store: messages dropped at restore"`); len(l) != 1 ||
		!strings.Contains(l[0], "level=WARN") || !strings.Contains(l[0], "expired=6") || !strings.Contains(l[0], "queue_full=3") {
		t.Errorf("restore lines %q, want one warning with expired=6 queue_full=3", l)
	}
	if l := logs.lines("message dropped"); len(l) != 0 {
		t.Errorf("drops logged one by one at restore: %q", l)
	}
	c := dialT(t, b, packet.V5, "a", persist(300))
	equalLines(t, "resumed", c.lines(), []string{`PUBLISH t/sent q1 "sent" dup`,
		`PUBLISH t/new q1 "new"`, `PUBLISH t/new q1 "new"`, `PUBLISH t/new q1 "new"`})
}

// TestSessionEndedLogged: what a session holds when it ends, its message in flight and
// those queued behind it, is counted as session_ended and logged as information naming
// the client: at a clean start that discards it, and when its expiry runs out.
func TestSessionEndedLogged(t *testing.T) {
	for _, how := range []string{"clean start", "expiry"} {
		t.Run(how, func(t *testing.T) {
			b, logs := logBroker(t, nil)
			expiry := uint32(300)
			if how == "expiry" {
				expiry = 1
			}
			sub := dialT(t, b, packet.V5, "sub", func(c *packet.Connect) { persist(expiry)(c); window1(c) })
			sub.subscribe(1, 1, "t/#")
			pub := dialT(t, b, packet.V5, "pub", nil)
			for i := range 3 { // one in flight, two queued
				pub.publish(uint16(i+1), 1, false, "t/x", "m")
			}
			sub.packets()
			sub.drop()
			if how == "clean start" {
				sub = dialT(t, b, packet.V5, "sub", nil)
				if got := sub.lines(); len(got) != 0 {
					t.Errorf("sent %q after the CONNACK of a clean start, want nothing", got)
				}
			}
			testenv.WaitFor(t, "the session's messages counted as session_ended", func() bool {
				return b.stats.dropped[session.DropSessionEnded].Load() >= 3
			})
			if got := b.stats.dropped[session.DropSessionEnded].Load(); got != 3 {
				t.Errorf("%d drops counted as session_ended, want 3", got)
			}
			if l := logs.lines("level=INFO", `msg="message dropped"`, "reason=session_ended", "client=sub", "messages=3"); len(l) != 1 {
				t.Errorf("session_ended lines %q, want one", l)
			}
		})
	}
}
