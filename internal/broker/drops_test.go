package broker

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
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
	cfg := conf.Default()
	cfg.Listeners = nil
	cfg.SysInterval = new(conf.Duration)
	cfg.Queue.OfflineMessages = 3
	if tune != nil {
		tune(cfg)
	}
	cfg.EnsureDefaults()
	logs := &logBuf{}
	b, err := New(Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(store.NewMemory()); err != nil {
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
