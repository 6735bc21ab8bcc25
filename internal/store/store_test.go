package store

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// fullState writes one of every record kind, with every field set, and returns what
// Load must give back.
func fullState(b *Batch) *collector {
	want := newCollector()
	future := time.Now().Add(time.Hour).UnixNano()
	msgs := map[uint64]MessageRecord{
		1:       {Topic: []byte("a/b"), Payload: []byte("hello"), Props: []byte{0x03, 0, 4, 't', 'e', 'x', 't'}, QoS: 1},
		2:       {Topic: []byte("r/x"), Payload: []byte("retained"), QoS: 2, Retain: true, Expiry: future},
		1 << 40: {Topic: []byte("big/id"), Payload: make([]byte, 70000), QoS: 2},
	}
	for id, m := range msgs {
		b.PutMessage(id, m)
		want.messages[id] = m
	}
	sessions := []SessionRecord{
		{ClientID: "c1", Expiry: NeverExpire, DisconnectedAt: 1_700_000_000_000_000_000, Version: 5,
			Subscriptions: []SubRecord{
				{Filter: "a/#", QoS: 1, ID: 7},
				{Filter: "$share/g/r/+", QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 2, ID: 268435455},
			}},
		{ClientID: "c2", Expiry: 60, Version: 4},
		{ClientID: "", Expiry: 1, Version: 3}, // an empty id is a valid key
		{ClientID: strings.Repeat("é", 300), Expiry: 2, Version: 5, Subscriptions: []SubRecord{{Filter: "x"}}},
	}
	for _, s := range sessions {
		b.PutSession(s)
		want.sessions[s.ClientID] = s
	}
	queued := []struct {
		client string
		seq    uint64
		r      QueuedRecord
	}{
		{"c1", 1, QueuedRecord{MessageID: 1, QoS: 1, SubIDs: []uint32{7, 268435455}}},
		{"c1", 2, QueuedRecord{MessageID: 1 << 40, QoS: 2, PacketID: 65535, State: StateSent}},
		{"c1", 1 << 50, QueuedRecord{MessageID: 2, QoS: 1, Retain: true, PacketID: 9, State: StateReleased}},
		{"c2", 1, QueuedRecord{MessageID: 1, QoS: 1}},
	}
	for _, q := range queued {
		b.PutQueued(q.client, q.seq, q.r)
		want.queued[fmt.Sprintf("%s/%d", q.client, q.seq)] = q.r
	}
	for _, pid := range []uint16{1, 256, 65535} {
		b.PutInbound("c1", pid)
		want.inbound[fmt.Sprintf("c1/%d", pid)] = true
	}
	w := WillRecord{Topic: []byte("will/c1"), Payload: []byte("gone"), Props: []byte{1, 1}, QoS: 1, Retain: true,
		Delay: 30, MessageExpiry: 3600, Deadline: future}
	b.PutWill("c1", w)
	want.wills["c1"] = w
	b.PutRetained("r/x", 2)
	want.retained["r/x"] = 2
	return want
}

// checkState compares what Load gave with want.
func checkState(t *testing.T, got, want *collector) {
	t.Helper()
	if got.err != nil {
		t.Errorf("visit order: %v\n%s", got.err, strings.Join(got.log, "\n"))
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"messages", got.messages, want.messages},
		{"sessions", got.sessions, want.sessions},
		{"queued", got.queued, want.queued},
		{"inbound", got.inbound, want.inbound},
		{"wills", got.wills, want.wills},
		{"retained", got.retained, want.retained},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, c.got, c.want)
		}
	}
}

// normalize makes want's empty slices nil, as the collector does.
func normalize(c *collector) *collector {
	for id, m := range c.messages {
		m.Topic, m.Payload, m.Props = clone(m.Topic), clone(m.Payload), clone(m.Props)
		c.messages[id] = m
	}
	for k, w := range c.wills {
		w.Topic, w.Payload, w.Props = clone(w.Topic), clone(w.Payload), clone(w.Props)
		c.wills[k] = w
	}
	return c
}

func TestRoundTrip(t *testing.T) { forEngines(t, testRoundTrip) }

func testRoundTrip(t *testing.T, engine string) {
	for _, sync := range []string{conf.SyncAlways, conf.SyncInterval, conf.SyncNone} {
		t.Run("Sync="+sync, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, engine, dir, sync, nil)
			var b Batch
			want := normalize(fullState(&b))
			commit(t, s, &b)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, engine, dir, sync, nil)
			got := load(t, s)
			checkState(t, got, want)
			// The visit order is the promised one, in full.
			wantLog := []string{"message 1", "message 2", "message 1099511627776",
				"session ", // the empty client id sorts first: its length is 0
				"session c1", "queued c1/1", "queued c1/2", "queued c1/1125899906842624",
				"inbound c1/1", "inbound c1/256", "inbound c1/65535", "will c1",
				"session c2", "queued c2/1",
				"session " + strings.Repeat("é", 300),
				"retained r/x"}
			if !reflect.DeepEqual(got.log, wantLog) {
				t.Errorf("visit order:\n got %q\nwant %q", got.log, wantLog)
			}
		})
	}
}

func TestMemoryRoundTrip(t *testing.T) {
	s := NewMemory()
	defer s.Close()
	var b Batch
	want := normalize(fullState(&b))
	commit(t, s, &b)
	checkState(t, load(t, s), want)
}

func TestOverwriteAndDelete(t *testing.T) { forEngines(t, testOverwriteAndDelete) }

func testOverwriteAndDelete(t *testing.T, engine string) {
	dir := t.TempDir()
	s := openTest(t, engine, dir, conf.SyncAlways, nil)
	var b Batch
	fullState(&b)
	commit(t, s, &b)

	b.Reset()
	b.PutSession(SessionRecord{ClientID: "c2", Expiry: 99, Version: 5})
	b.DeleteQueued("c1", 1)
	b.DeleteInbound("c1", 256)
	b.DeleteWill("c1")
	b.DeleteRetained("r/x")
	b.DeleteQueued("c1", 1<<50)
	b.DeleteMessage(2)
	commit(t, s, &b)
	s.Close()

	got := load(t, openTest(t, engine, dir, conf.SyncAlways, nil))
	if got.sessions["c2"].Expiry != 99 {
		t.Errorf("session c2 not replaced: %+v", got.sessions["c2"])
	}
	for _, k := range []string{"c1/1", "c1/1125899906842624"} {
		if _, ok := got.queued[k]; ok {
			t.Errorf("queued %s not deleted", k)
		}
	}
	if _, ok := got.queued["c1/2"]; !ok {
		t.Error("queued c1/2 deleted")
	}
	if got.inbound["c1/256"] || !got.inbound["c1/1"] {
		t.Errorf("inbound: %v", got.inbound)
	}
	if len(got.wills) != 0 || len(got.retained) != 0 {
		t.Errorf("wills %v, retained %v: want none", got.wills, got.retained)
	}
	if _, ok := got.messages[2]; ok {
		t.Error("message 2 not deleted")
	}
}

// TestDeleteSession deletes a whole client with one range deletion, and only that
// client, whatever ids sort next to it.
func TestDeleteSession(t *testing.T) {
	for _, name := range append(testEngines(), "memory") {
		t.Run(name, func(t *testing.T) {
			var s Store
			if name != "memory" {
				s = openTest(t, name, t.TempDir(), conf.SyncAlways, nil)
			} else {
				s = NewMemory()
				defer s.Close()
			}
			// Neighbours: a prefix of the id, an extension of it, the id with a last
			// byte one higher, and ids of the same length.
			clients := []string{"c", "c1", "c1x", "c2", "c0", "c1\xff", "b1"}
			var b Batch
			b.PutMessage(1, MessageRecord{Topic: []byte("t")})
			for _, c := range clients {
				b.PutSession(SessionRecord{ClientID: c, Version: 5})
				b.PutQueued(c, 1, QueuedRecord{MessageID: 1, QoS: 1})
				b.PutInbound(c, 1)
				b.PutWill(c, WillRecord{Topic: []byte("w")})
			}
			commit(t, s, &b)

			b.Reset()
			b.DeleteSession("c1")
			if b.Len() != 1 {
				t.Fatalf("DeleteSession wrote %d operations, want 1 range deletion", b.Len())
			}
			commit(t, s, &b)
			got := load(t, s)
			for _, c := range clients {
				_, session := got.sessions[c]
				_, queued := got.queued[c+"/1"]
				_, will := got.wills[c]
				inbound := got.inbound[c+"/1"]
				want := c != "c1"
				if session != want || queued != want || will != want || inbound != want {
					t.Errorf("client %q: session %v queued %v inbound %v will %v; want all %v",
						c, session, queued, inbound, will, want)
				}
			}
		})
	}
}

// TestSweep checks what Load deletes: orphans a crash can leave, and expired messages;
// an ExpiryVisitor is told of each queue entry whose message expired unsent, and of
// nothing else Load deletes.
func TestSweep(t *testing.T) { forEngines(t, testSweep) }

func testSweep(t *testing.T, engine string) {
	dir := t.TempDir()
	s := openTest(t, engine, dir, conf.SyncAlways, nil)
	past := time.Now().Add(-time.Minute).UnixNano()
	future := time.Now().Add(time.Hour).UnixNano()
	var b Batch
	b.PutSession(SessionRecord{ClientID: "s", Version: 5})
	// 1: referenced by a queue entry: kept.
	b.PutMessage(1, MessageRecord{Topic: []byte("t/1")})
	b.PutQueued("s", 1, QueuedRecord{MessageID: 1, QoS: 1})
	// 2: referenced by nothing: swept.
	b.PutMessage(2, MessageRecord{Topic: []byte("t/2")})
	// 3: expired, queued unsent: swept with the entry.
	b.PutMessage(3, MessageRecord{Topic: []byte("t/3"), Expiry: past})
	b.PutQueued("s", 3, QueuedRecord{MessageID: 3, QoS: 1})
	// 4: expired, but one delivery has begun: kept for it; the unsent entry and the
	// retained topic go.
	b.PutMessage(4, MessageRecord{Topic: []byte("t/4"), Expiry: past})
	b.PutQueued("s", 4, QueuedRecord{MessageID: 4, QoS: 1, PacketID: 4, State: StateSent})
	b.PutQueued("s", 5, QueuedRecord{MessageID: 4, QoS: 1})
	b.PutRetained("t/4", 4)
	// 5: retained, unexpired: kept.
	b.PutMessage(5, MessageRecord{Topic: []byte("t/5"), Expiry: future, Retain: true})
	b.PutRetained("t/5", 5)
	// Entries referring to messages that are gone: swept, except a released one, which
	// needs only its packet id.
	b.PutQueued("s", 6, QueuedRecord{MessageID: 99, QoS: 1, PacketID: 6, State: StateSent})
	b.PutQueued("s", 7, QueuedRecord{MessageID: 99, QoS: 2, PacketID: 7, State: StateReleased})
	b.PutRetained("t/99", 99)
	// A client without a session: all its records swept, and message 6, which only it
	// refers to.
	b.PutMessage(6, MessageRecord{Topic: []byte("t/6")})
	b.PutQueued("orphan", 1, QueuedRecord{MessageID: 6, QoS: 1})
	b.PutQueued("orphan", 3, QueuedRecord{MessageID: 3, QoS: 1})
	b.PutInbound("orphan", 1)
	b.PutWill("orphan", WillRecord{Topic: []byte("w")})
	commit(t, s, &b)

	check := func(got *collector, wantExpired []string) {
		t.Helper()
		if got.err != nil {
			t.Error(got.err)
		}
		var msgs []uint64
		for id := range got.messages {
			msgs = append(msgs, id)
		}
		var queued, expired, retained []string
		for k := range got.queued {
			queued = append(queued, k)
		}
		for k := range got.expired {
			expired = append(expired, k)
		}
		for k := range got.retained {
			retained = append(retained, k)
		}
		for _, c := range []struct {
			name      string
			got, want any
		}{
			{"messages", sorted(msgs), []uint64{1, 4, 5}},
			{"queued", sorted(queued), []string{"s/1", "s/4", "s/7"}},
			{"expired", sorted(expired), wantExpired},
			{"retained", sorted(retained), []string{"t/5"}},
			{"sessions", len(got.sessions), 1},
			{"inbound", len(got.inbound), 0},
			{"wills", len(got.wills), 0},
		} {
			if !reflect.DeepEqual(c.got, c.want) {
				t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
			}
		}
	}
	check(load(t, s), []string{"s/3", "s/5"})
	s.Close()

	// The sweep is on disk: a raw look finds none of the swept keys.
	s = openTest(t, engine, dir, conf.SyncAlways, nil)
	it, err := s.eng.iter(messageLower, keysUpper)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	it.Close()
	// messages 1 4 5; session, queued 1 4 7; retained t/5
	if n != 8 {
		t.Errorf("%d keys on disk after the sweep, want 8", n)
	}
	check(load(t, s), nil) // told once: the entries are gone
}

func sorted[T cmp.Ordered](s []T) []T {
	slices.Sort(s)
	return s
}

func TestOpenErrors(t *testing.T) { forEngines(t, testOpenErrors) }

func testOpenErrors(t *testing.T, engine string) {
	cfg := func(dir, sync string) conf.Store {
		c := testConfig(dir, sync)
		c.Engine = engine
		return c
	}
	t.Run("ForeignFiles", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(cfg(dir, ""), testLogger(t))
		if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Open = %v, want ErrForeign naming %s", err, dir)
		}
		t.Log(err)
		// Nothing was written there.
		if names, _ := os.ReadDir(dir); len(names) != 1 {
			t.Errorf("Open left %d files in a foreign directory", len(names))
		}
	})
	t.Run("NewerFormat", func(t *testing.T) {
		dir := t.TempDir()
		s := openTest(t, engine, dir, "", nil)
		var b Batch
		rawSet(&b, metaKey, []byte(formatMagic+string(rune(formatVersion+1))))
		commit(t, s, &b)
		s.Close()
		_, err := Open(cfg(dir, ""), testLogger(t))
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Open = %v, want ErrVersion naming %s", err, dir)
		}
		t.Log(err)
	})
	t.Run("OlderFormat", func(t *testing.T) {
		// A store of format 1: its session record has no owner. This build reads it,
		// and marks it with its own format before it writes anything.
		dir := t.TempDir()
		s := openTest(t, engine, dir, "", nil)
		var b Batch
		rawSet(&b, metaKey, []byte(formatMagic+"\x01"))
		v1 := []byte{1, 4, 0, 0, 0, 60, 0, 0, 0, 0, 0, 0, 0, 9, 0}
		rawSet(&b, append(appendClientPrefix(nil, "old"), kindSession), v1)
		commit(t, s, &b)
		s.Close()
		if engine == conf.EngineLog {
			setLogFormat(t, dir, 1)
		}
		s2, err := Open(cfg(dir, ""), testLogger(t))
		if err != nil {
			t.Fatalf("Open of a store of format 1: %v", err)
		}
		c := load(t, s2)
		if r, ok := c.sessions["old"]; !ok || r.Owned || r.Expiry != 60 {
			t.Fatalf("the session of format 1 loaded as %+v (found %v)", r, ok)
		}
		s2.Close()
		var got byte
		if engine == conf.EngineLog {
			got = logFormat(t, dir)
		} else {
			got = storeFormatRecord(t, dir)
		}
		if got != formatVersion {
			t.Fatalf("the store says format %d after the open, want %d: a build of format 1 would read it", got, formatVersion)
		}
	})
	t.Run("LostAndFound", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o700); err != nil {
			t.Fatal(err)
		}
		openTest(t, engine, dir, "", nil)
	})
	t.Run("ForeignLog", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "app.log"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(cfg(dir, ""), testLogger(t)); !errors.Is(err, ErrForeign) {
			t.Fatalf("Open = %v, want ErrForeign", err)
		}
	})
	t.Run("BadSync", func(t *testing.T) {
		_, err := Open(cfg(t.TempDir(), "sometimes"), testLogger(t))
		if err == nil || !strings.Contains(err.Error(), "sometimes") {
			t.Fatalf("Open = %v, want an unknown sync policy error", err)
		}
	})
}

func TestClosed(t *testing.T) { forEngines(t, testClosed) }

func testClosed(t *testing.T, engine string) {
	s := openTest(t, engine, t.TempDir(), "", nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	ch := make(chan error, 1)
	var b Batch
	b.PutInbound("c", 1)
	s.Commit(&b, func(err error) { ch <- err })
	if err := <-ch; !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close: %v, want ErrClosed", err)
	}
}

// TestVisitorError stops Load at the visitor's first error.
func TestVisitorError(t *testing.T) {
	s := NewMemory()
	defer s.Close()
	var b Batch
	fullState(&b)
	commit(t, s, &b)
	stop := errors.New("stop")
	if err := s.Load(stopAt{newCollector(), stop}); !errors.Is(err, stop) {
		t.Fatalf("Load = %v, want the visitor's error", err)
	}
}

type stopAt struct {
	*collector
	err error
}

func (s stopAt) Session(SessionRecord) error { return s.err }

// setLogFormat writes format into the header of the log engine's file in dir.
func setLogFormat(t *testing.T, dir string, format byte) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, logName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{format}, int64(len(logMagic)+1)); err != nil {
		t.Fatal(err)
	}
}

// logFormat reads the format of the log engine's file in dir from its header.
func logFormat(t *testing.T, dir string) byte {
	t.Helper()
	h, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	return h[len(logMagic)+1]
}
