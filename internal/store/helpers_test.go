package store

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// testConfig is the edge profile's store settings in dir: the smallest sizes, so the
// tests also cover memtable flushes and chunked groups.
func testConfig(dir, sync string) conf.Store {
	return conf.Store{
		Dir:          dir,
		Sync:         sync,
		SyncInterval: conf.Duration(10 * time.Millisecond),
		CacheSize:    256 << 10,
		MemtableSize: 256 << 10,
	}
}

// testConfigEngine is testConfig for engine.
func testConfigEngine(engine, dir, sync string) conf.Store {
	c := testConfig(dir, sync)
	c.Engine = engine
	return c
}

// testEngines are the engines on disk of this build: log, and pebble unless built with
// -tags bifrost_nopebble.
func testEngines() []string {
	if pebbleBuilt {
		return []string{conf.EnginePebble, conf.EngineLog}
	}
	return []string{conf.EngineLog}
}

// forEngines runs f as a subtest for each engine on disk.
func forEngines(t *testing.T, f func(t *testing.T, engine string)) {
	for _, engine := range testEngines() {
		t.Run("Engine="+engine, func(t *testing.T) { f(t, engine) })
	}
}

// openTest opens a store of engine on disk in dir, its log files watched by h if not
// nil, closing it at the end of the test if the test has not.
func openTest(t testing.TB, engine, dir, sync string, h *hooks) *store {
	t.Helper()
	cfg := testConfig(dir, sync)
	cfg.Engine = engine
	s, err := openHooked(cfg, testLogger(t), h)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openHooked opens the store of cfg.Engine, its log files watched by h if not nil.
func openHooked(cfg conf.Store, log *slog.Logger, h *hooks) (*store, error) {
	if cfg.Engine != conf.EngineLog {
		return openPebbleHooked(cfg, log, h)
	}
	var wrap func(logFile) logFile
	if h != nil {
		wrap = func(f logFile) logFile { return &hookFile{f, h} }
	}
	return openLog(cfg, log, wrap)
}

// hooks watch the files an engine logs commits to (Pebble's WAL, the log engine's
// store.log): they count fsyncs, and fail writes and fsyncs while full is set, as a
// full disk does.
type hooks struct {
	syncs atomic.Int64
	full  atomic.Bool
}

func (h *hooks) sync() error {
	h.syncs.Add(1)
	return h.check()
}

func (h *hooks) check() error {
	if h.full.Load() {
		return syscall.ENOSPC
	}
	return nil
}

// hookFile is a log engine's file under hooks.
type hookFile struct {
	logFile
	h *hooks
}

func (f *hookFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.h.check(); err != nil {
		return 0, err
	}
	return f.logFile.WriteAt(p, off)
}

func (f *hookFile) Sync() error {
	if err := f.h.sync(); err != nil {
		return err
	}
	return f.logFile.Sync()
}

// setBackoff sets the least time between repairs of a broken engine.
func setBackoff(s *store, d time.Duration) {
	switch e := s.eng.(type) {
	case *logEngine:
		e.backoff = d
	default:
		setPebbleBackoff(s.eng, d)
	}
}

// commit commits b and waits for its done.
func commit(t testing.TB, s Store, b *Batch) {
	t.Helper()
	ch := make(chan error, 1)
	s.Commit(b, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// load loads s into a new collector.
func load(t testing.TB, s Store) *collector {
	t.Helper()
	c := newCollector()
	if err := s.Load(c); err != nil {
		t.Fatalf("load: %v", err)
	}
	return c
}

// A collector is a Visitor that keeps copies of what it visits, and checks the order
// Load promises.
type collector struct {
	messages map[uint64]MessageRecord
	sessions map[string]SessionRecord
	queued   map[string]QueuedRecord // by clientID/seq
	expired  map[string]bool         // by clientID/seq (ExpiryVisitor)
	inbound  map[string]bool         // by clientID/pid
	wills    map[string]WillRecord
	retained map[string]uint64
	log      []string // what was visited, in order

	phase  int // 0 messages, 1 clients, 2 retained
	client string
	err    error // the first broken promise
}

func newCollector() *collector {
	return &collector{
		messages: map[uint64]MessageRecord{},
		sessions: map[string]SessionRecord{},
		queued:   map[string]QueuedRecord{},
		expired:  map[string]bool{},
		inbound:  map[string]bool{},
		wills:    map[string]WillRecord{},
		retained: map[string]uint64{},
	}
}

func (c *collector) check(phase int, client, what string) {
	c.log = append(c.log, what)
	switch {
	case phase < c.phase:
		c.fail("%s visited after a later kind", what)
	case client != "" && client != c.client:
		c.fail("%s visited outside its client's session", what)
	}
	c.phase = phase
}

func (c *collector) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

func (c *collector) Message(id uint64, r MessageRecord) error {
	c.check(0, "", fmt.Sprintf("message %d", id))
	r.Topic, r.Payload, r.Props = clone(r.Topic), clone(r.Payload), clone(r.Props)
	c.messages[id] = r
	return nil
}

func (c *collector) Session(r SessionRecord) error {
	c.client = ""
	c.check(1, "", "session "+r.ClientID)
	c.client = r.ClientID
	r.Subscriptions = slices.Clone(r.Subscriptions)
	if len(r.Subscriptions) == 0 {
		r.Subscriptions = nil
	}
	c.sessions[r.ClientID] = r
	return nil
}

func (c *collector) Queued(clientID string, seq uint64, r QueuedRecord) error {
	c.check(1, clientID, fmt.Sprintf("queued %s/%d", clientID, seq))
	if _, ok := c.messages[r.MessageID]; !ok && r.State != StateReleased {
		c.fail("queued %s/%d refers to message %d, not visited", clientID, seq, r.MessageID)
	}
	r.SubIDs = slices.Clone(r.SubIDs)
	if len(r.SubIDs) == 0 {
		r.SubIDs = nil
	}
	c.queued[fmt.Sprintf("%s/%d", clientID, seq)] = r
	return nil
}

func (c *collector) Expired(clientID string, seq uint64) error {
	k := fmt.Sprintf("%s/%d", clientID, seq)
	c.check(1, clientID, "expired "+k)
	if c.expired[k] {
		c.fail("expired %s told twice", k)
	}
	c.expired[k] = true
	return nil
}

func (c *collector) Inbound(clientID string, pid uint16) error {
	c.check(1, clientID, fmt.Sprintf("inbound %s/%d", clientID, pid))
	c.inbound[fmt.Sprintf("%s/%d", clientID, pid)] = true
	return nil
}

func (c *collector) Will(clientID string, r WillRecord) error {
	c.check(1, clientID, "will "+clientID)
	r.Topic, r.Payload, r.Props = clone(r.Topic), clone(r.Payload), clone(r.Props)
	c.wills[clientID] = r
	return nil
}

func (c *collector) Retained(topic string, id uint64) error {
	c.check(2, "", "retained "+topic)
	if _, ok := c.messages[id]; !ok {
		c.fail("retained %s refers to message %d, not visited", topic, id)
	}
	c.retained[topic] = id
	return nil
}

// clone copies b, nil for empty, so that records compare with reflect.DeepEqual.
func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// testLogger logs to the test's log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
