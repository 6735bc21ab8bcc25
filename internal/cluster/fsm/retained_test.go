package fsm

import (
	"bytes"
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// mapStore is a RetainedStore in a map, as the broker's index would hold it.
type mapStore struct {
	m        map[string]*session.Message
	replaced int
}

func (s *mapStore) ApplyRetained(topic []byte, m *session.Message) {
	if s.m == nil {
		s.m = map[string]*session.Message{}
	}
	if m == nil {
		delete(s.m, string(topic))
		return
	}
	s.m[string(topic)] = m
}

func (s *mapStore) ReplaceRetained(each func(func([]byte, *session.Message) bool)) {
	s.replaced++
	s.m = map[string]*session.Message{}
	each(func(topic []byte, m *session.Message) bool {
		s.m[string(topic)] = m
		return true
	})
}

func set(topic, payload string, qos uint8, expiry int64) RetainOp {
	return RetainOp{Topic: []byte(topic), Payload: []byte(payload), Props: []byte{0x03, 0, 2, 't', 'x'}, QoS: qos, Expiry: expiry}
}

func clearOp(topic string) RetainOp { return RetainOp{Topic: []byte(topic)} }

func expireOp(topic string, at int64) RetainOp {
	return RetainOp{Topic: []byte(topic), Expiry: at, Expire: true}
}

// wantSet checks that the store holds exactly want: topic → payload.
func wantSet(t *testing.T, got map[string]*session.Message, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("store holds %d topics %v; want %v", len(got), slicesKeys(got), want)
	}
	for topic, p := range want {
		m, ok := got[topic]
		if !ok || string(m.Payload()) != p || string(m.Topic()) != topic || !m.Retain {
			t.Fatalf("topic %q: %v; want payload %q", topic, m, p)
		}
	}
}

func slicesKeys(m map[string]*session.Message) []string {
	var ks []string
	for k := range maps.Keys(m) {
		ks = append(ks, k)
	}
	return ks
}

func TestRetainsEncoding(t *testing.T) {
	in := Retains{Ops: []RetainOp{set("a/b", "x", 1, 1_700_000_000_123_456_789), clearOp("a/c"),
		expireOp("a/d", 42), set("e", "", 2, 0)}}
	data := Encode(in)
	c, err := decodeCommand(data)
	if err != nil {
		t.Fatal(err)
	}
	out := c.(Retains)
	if len(out.Ops) != len(in.Ops) {
		t.Fatalf("%d ops; want %d", len(out.Ops), len(in.Ops))
	}
	for i := range in.Ops {
		a, b := in.Ops[i], out.Ops[i]
		if !bytes.Equal(a.Topic, b.Topic) || !bytes.Equal(a.Payload, b.Payload) || !bytes.Equal(a.Props, b.Props) ||
			a.QoS != b.QoS || a.Expiry != b.Expiry || a.Expire != b.Expire {
			t.Fatalf("op %d: %+v; want %+v", i, b, a)
		}
	}
	// One op of a short topic and payload costs a few bytes beyond them.
	one := Encode(Retains{Ops: []RetainOp{{Topic: []byte("s/1"), Payload: []byte("on"), QoS: 1}}})
	if len(one) != 2+1+1+1+3+1+2+1 {
		t.Errorf("a retain entry of topic s/1, payload on is %d bytes; want 12", len(one))
	}
	for _, bad := range [][]byte{
		{entryVersion, byte(kindRetain), 1, 0x10, 0, 0, 0},   // unknown flag
		{entryVersion, byte(kindRetain), 1, 0x03, 0, 0, 0},   // QoS 3
		{entryVersion, byte(kindRetain), 200, 0x01, 0, 0, 0}, // more ops than bytes
		{entryVersion, byte(kindRetain), 1, 0x04, 0, 0, 0},   // expiry missing
		{entryVersion, byte(kindRetain), 1, 0x08, 0, 0, 0},   // an expire op without its deadline
	} {
		if _, err := decodeCommand(bad); err == nil {
			t.Errorf("% x decoded", bad)
		}
	}
}

// TestRetainedApply: set, replace, clear; an expire op clears only the message whose
// deadline it names; the node's store sees every change, including the clear of a
// topic the set never had (the broker may hold it from its own store).
func TestRetainedApply(t *testing.T) {
	var f FSM
	st := &mapStore{m: map[string]*session.Message{"stale": nil}}
	st.m["stale"] = &session.Message{}
	f.setRetainedStore(st, nil)
	apply := func(i uint64, ops ...RetainOp) {
		t.Helper()
		if r := applyEntry(&f, i, Encode(Retains{Ops: ops})); r.err != nil {
			t.Fatal(r.err)
		}
	}
	apply(1, set("a/1", "one", 1, 0), set("a/2", "two", 0, 100), set("a/3", "three", 2, 200), clearOp("stale"))
	wantSet(t, st.m, map[string]string{"a/1": "one", "a/2": "two", "a/3": "three"})
	if m, _ := f.retained("a/3"); m.QoS != 2 || m.Expiry != 200 || string(m.Props()) != "\x03\x00\x02tx" {
		t.Fatalf("a/3 is %+v", m)
	}
	if ops := f.ExpiredRetained(150, 10); len(ops) != 1 || string(ops[0].Topic) != "a/2" || ops[0].Expiry != 100 {
		t.Fatalf("expired at 150: %+v; want a/2 at 100", ops)
	}
	// a/3 was replaced after the sweep saw its deadline 200: the old deadline clears nothing.
	apply(2, set("a/3", "three again", 1, 300), clearOp("a/1"))
	apply(3, expireOp("a/2", 100), expireOp("a/3", 200))
	wantSet(t, st.m, map[string]string{"a/3": "three again"})
	if f.RetainedLen() != 1 {
		t.Fatalf("the set holds %d topics; want 1", f.RetainedLen())
	}
	if ops := f.ExpiredRetained(250, 10); len(ops) != 0 {
		t.Fatalf("expired at 250: %+v; want none (a/3 expires at 300)", ops)
	}
	apply(4, expireOp("a/3", 300))
	wantSet(t, st.m, nil)
	if len(f.s.ret.exp) != 0 {
		t.Fatalf("expiry index keeps %v", f.s.ret.exp)
	}
}

// TestRetainedRefused: an op with an invalid topic name refuses the entry whole.
func TestRetainedRefused(t *testing.T) {
	var f FSM
	r := applyEntry(&f, 1, Encode(Retains{Ops: []RetainOp{set("ok", "x", 0, 0), set("a/+", "x", 0, 0)}}))
	if r.err == nil || !strings.Contains(r.err.Error(), `retained topic "a/+"`) {
		t.Fatalf("err = %v", r.err)
	}
	if f.RetainedLen() != 0 {
		t.Fatal("a refused entry changed the set")
	}
}

// TestRetainedSnapshot: a node that restores a snapshot (joining late, or restarted)
// holds the same set, expiry deadlines and properties included, and its store is
// replaced by it: a topic it held that the snapshot lacks is gone.
func TestRetainedSnapshot(t *testing.T) {
	var f FSM
	var ops []RetainOp
	for i := range 100 {
		ops = append(ops, set("s/"+string(rune('a'+i%26))+"/"+string(rune('0'+i/26)), strings.Repeat("p", i), uint8(i%3), int64(i*7)))
	}
	applyEntry(&f, 1, Encode(Retains{Ops: ops}))
	applyEntry(&f, 2, Encode(Retains{Ops: []RetainOp{clearOp("s/a/0")}}))
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Applied after the snapshot was taken: not in it.
	applyEntry(&f, 3, Encode(Retains{Ops: []RetainOp{set("late", "x", 0, 0)}}))
	data := persist(t, snap)

	var g FSM
	st := &mapStore{m: map[string]*session.Message{"gone": {}}}
	g.setRetainedStore(st, nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if st.replaced != 1 || len(st.m) != 99 || g.RetainedLen() != 99 {
		t.Fatalf("restored %d topics into the set, %d into the store (replaced %d times); want 99", g.RetainedLen(), len(st.m), st.replaced)
	}
	for topic, m := range f.s.ret.msgs {
		if topic == "late" {
			continue
		}
		r, ok := st.m[topic]
		if !ok || !sameRetained(m, r) {
			t.Fatalf("topic %q restored as %+v; want %+v", topic, r, m)
		}
	}
	if _, ok := st.m["gone"]; ok {
		t.Fatal("a topic the snapshot lacks stayed in the store")
	}
	// The store stays connected after the restore.
	applyEntry(&g, 4, Encode(Retains{Ops: []RetainOp{set("after", "y", 0, 0)}}))
	if _, ok := st.m["after"]; !ok {
		t.Fatal("an entry applied after the restore did not reach the store")
	}
	if len(g.s.ret.exp) != 99 { // every message but s/a/0 (i=0: expiry 0, and cleared)
		t.Fatalf("restored expiry index has %d topics; want 99", len(g.s.ret.exp))
	}
}

// TestRetainedConverge: nodes that apply the same log, one from the start, one from a
// snapshot taken midway, hold the same set.
func TestRetainedConverge(t *testing.T) {
	var log [][]byte
	for i := range 50 {
		var ops []RetainOp
		for j := range 5 {
			topic := "c/" + string(rune('a'+(i*j)%7))
			if (i+j)%4 == 0 {
				ops = append(ops, clearOp(topic))
			} else {
				ops = append(ops, set(topic, strings.Repeat("v", i+j), uint8(j%3), 0))
			}
		}
		log = append(log, Encode(Retains{Ops: ops}))
	}
	var a, b FSM
	for i, e := range log[:20] {
		applyEntry(&a, uint64(i+1), e)
	}
	snap, _ := a.Snapshot()
	if err := b.Restore(io.NopCloser(bytes.NewReader(persist(t, snap)))); err != nil {
		t.Fatal(err)
	}
	for i, e := range log[20:] {
		applyEntry(&a, uint64(i+21), e)
		applyEntry(&b, uint64(i+21), e)
	}
	if len(a.s.ret.msgs) != len(b.s.ret.msgs) || len(a.s.ret.msgs) == 0 {
		t.Fatalf("%d and %d topics", len(a.s.ret.msgs), len(b.s.ret.msgs))
	}
	for topic, m := range a.s.ret.msgs {
		if n, ok := b.s.ret.msgs[topic]; !ok || !sameRetained(m, n) {
			t.Fatalf("topic %q differs", topic)
		}
	}
}

// sameRetained reports whether a and b are the same message: what a node serves.
func sameRetained(a, b *session.Message) bool {
	return a.QoS == b.QoS && a.Expiry == b.Expiry && bytes.Equal(a.Topic(), b.Topic()) &&
		bytes.Equal(a.Payload(), b.Payload()) && bytes.Equal(a.Props(), b.Props())
}

// FuzzRetains: any entry body either fails to decode or decodes to ops that apply
// without panicking, leave the set consistent with the store, and encode back to what
// decodes to the same ops; any snapshot section either fails or restores.
func FuzzRetains(f *testing.F) {
	f.Add(Encode(Retains{Ops: []RetainOp{set("a/b", "x", 1, 1_700_000_000_000_000_000), clearOp("a/c"), expireOp("a/b", 5)}})[2:])
	f.Add(Encode(Retains{})[2:])
	f.Add([]byte{1, 0x04, 1, 'a', 1, 'b', 0, 0x80})
	f.Fuzz(func(t *testing.T, body []byte) {
		data := append([]byte{entryVersion, byte(kindRetain)}, body...)
		c, err := decodeCommand(data)
		if err == nil {
			var fsm FSM
			st := &mapStore{}
			fsm.setRetainedStore(st, nil)
			r := applyEntry(&fsm, 1, data)
			if r.err == nil && len(st.m) != fsm.RetainedLen() {
				t.Fatalf("store %d topics, set %d", len(st.m), fsm.RetainedLen())
			}
			again, err := decodeCommand(Encode(c))
			if err != nil {
				t.Fatalf("re-encoded entry: %v", err)
			}
			a, b := c.(Retains).Ops, again.(Retains).Ops
			if len(a) != len(b) {
				t.Fatalf("%d ops, %d after a round trip", len(a), len(b))
			}
			for i := range a {
				if !bytes.Equal(a[i].Topic, b[i].Topic) || !bytes.Equal(a[i].Payload, b[i].Payload) ||
					!bytes.Equal(a[i].Props, b[i].Props) || a[i].QoS != b[i].QoS || a[i].Expiry != b[i].Expiry || a[i].Expire != b[i].Expire {
					t.Fatalf("op %d: %+v, %+v after a round trip", i, a[i], b[i])
				}
			}
		}
		var s state
		r := &reader{b: body}
		restoreRetained(&s, r)
	})
}
