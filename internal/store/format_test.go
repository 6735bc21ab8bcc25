package store

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// The records of the format, each with the function that encodes it and the one that
// decodes it back; TestRecordRoundTrip, TestRecordTruncated and FuzzDecode share them.
var records = []struct {
	name   string
	encode func() []byte
	decode func(v []byte) (any, error)
}{
	{"session", func() []byte {
		return appendSession(nil, &SessionRecord{Version: 5, Expiry: 3600, DisconnectedAt: -1, Subscriptions: []SubRecord{
			{Filter: "a/+/c", QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 2, ID: 1 << 27},
			{Filter: "", QoS: 0},
		}, Owned: true, Username: "alice", Realm: "tls"})
	}, func(v []byte) (any, error) {
		var r SessionRecord
		err := decodeSession(v, &r)
		return r, err
	}},
	{"message", func() []byte {
		return appendMessage(nil, &MessageRecord{Topic: []byte("t"), Payload: []byte("p"), Props: []byte{1, 1}, QoS: 2, Retain: true, Expiry: 1 << 62})
	}, func(v []byte) (any, error) {
		var r MessageRecord
		err := decodeMessage(v, &r)
		return r, err
	}},
	{"queued", func() []byte {
		return appendQueued(nil, &QueuedRecord{MessageID: 1<<64 - 1, SubIDs: []uint32{1, 1 << 20}, PacketID: 7, QoS: 1, Retain: true, State: StateReleased})
	}, func(v []byte) (any, error) {
		var r QueuedRecord
		err := decodeQueued(v, &r)
		return r, err
	}},
	{"retained", func() []byte { return appendRetained(nil, 42) }, func(v []byte) (any, error) {
		return decodeRetained(v)
	}},
	{"inbound", func() []byte { return []byte{recordVersion} }, func(v []byte) (any, error) {
		return nil, decodeInbound(v)
	}},
	{"will", func() []byte {
		return appendWill(nil, &WillRecord{Topic: []byte("w"), Payload: []byte("bye"), QoS: 1, Delay: 5, MessageExpiry: 9, Deadline: 123})
	}, func(v []byte) (any, error) {
		var r WillRecord
		err := decodeWill(v, &r)
		return r, err
	}},
}

// TestRecordRoundTrip decodes what the encoders write into what they were given.
func TestRecordRoundTrip(t *testing.T) {
	want := map[string]any{
		"session": SessionRecord{Version: 5, Expiry: 3600, DisconnectedAt: -1, Subscriptions: []SubRecord{
			{Filter: "a/+/c", QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 2, ID: 1 << 27},
			{Filter: "", QoS: 0},
		}, Owned: true, Username: "alice", Realm: "tls"},
		"message":  MessageRecord{Topic: []byte("t"), Payload: []byte("p"), Props: []byte{1, 1}, QoS: 2, Retain: true, Expiry: 1 << 62},
		"queued":   QueuedRecord{MessageID: 1<<64 - 1, SubIDs: []uint32{1, 1 << 20}, PacketID: 7, QoS: 1, Retain: true, State: StateReleased},
		"retained": uint64(42),
		"inbound":  nil,
		"will":     WillRecord{Topic: []byte("w"), Payload: []byte("bye"), Props: []byte{}, QoS: 1, Delay: 5, MessageExpiry: 9, Deadline: 123},
	}
	for _, r := range records {
		t.Run(r.name, func(t *testing.T) {
			got, err := r.decode(r.encode())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want[r.name]) {
				t.Errorf("got  %+v\nwant %+v", got, want[r.name])
			}
		})
	}
}

// TestRecordTruncated rejects every truncation of a record and an unknown record version.
func TestRecordTruncated(t *testing.T) {
	for _, r := range records {
		t.Run(r.name, func(t *testing.T) {
			v := r.encode()
			for n := range len(v) {
				if r.name == "message" || r.name == "will" {
					// The payload runs to the end: cutting into it is undetectable
					// here (Pebble checksums its blocks).
					if n >= len(v)-len("p") && r.name == "message" || n >= len(v)-len("bye") && r.name == "will" {
						continue
					}
				}
				if _, err := r.decode(v[:n]); err == nil {
					t.Errorf("decoding %d of %d bytes succeeded", n, len(v))
				}
			}
			if _, err := r.decode(append(bytes.Clone(v[:len(v):len(v)]), 0)); err == nil && r.name != "message" && r.name != "will" {
				t.Error("a trailing byte was accepted")
			}
			v[0] = recordVersion + 1
			if _, err := r.decode(v); err == nil {
				t.Error("an unknown record version was accepted")
			}
		})
	}
}

// TestSessionOwner: a session record keeps its owner, or that it has none; one of record
// version 1 (format 1) decodes without an owner.
func TestSessionOwner(t *testing.T) {
	for _, r := range []SessionRecord{
		{Version: 4, Expiry: 60, Owned: true, Username: "", Realm: ""},
		{Version: 4, Expiry: 60, Owned: true, Username: "bob", Realm: ""},
		{Version: 4, Expiry: 60},
	} {
		var got SessionRecord
		if err := decodeSession(appendSession(nil, &r), &got); err != nil {
			t.Fatal(err)
		}
		got.Subscriptions = nil
		if !reflect.DeepEqual(got, r) {
			t.Errorf("got %+v, want %+v", got, r)
		}
	}
	// Version 1: ver | protocol | expiry | disconnectedAt | one subscription.
	v1 := []byte{1, 4, 0, 0, 0, 60, 0, 0, 0, 0, 0, 0, 0, 9, 1, 3, 'a', '/', 'b', 1, 0}
	got := SessionRecord{Owned: true, Username: "stale"}
	if err := decodeSession(v1, &got); err != nil {
		t.Fatal(err)
	}
	if got.Owned || got.Username != "" || got.Expiry != 60 || len(got.Subscriptions) != 1 || got.Subscriptions[0].Filter != "a/b" {
		t.Errorf("version 1 record decoded as %+v", got)
	}
	bad := appendSession(nil, &SessionRecord{Version: 4, Owned: true})
	bad[len(bad)-3] = 2 // the owned flag
	if err := decodeSession(bad, &got); err == nil {
		t.Error("an owned flag of 2 was accepted")
	}
}

func TestParseClientKey(t *testing.T) {
	for _, c := range []struct {
		key  []byte
		want clientKey
		ok   bool
	}{
		{appendQueuedKey(nil, "abc", 5), clientKey{kind: kindQueued, seq: 5}, true},
		{appendInboundKey(nil, "", 9), clientKey{kind: kindInbound, pid: 9}, true},
		{append(appendClientPrefix(nil, "x"), kindSession), clientKey{kind: kindSession}, true},
		{append(appendClientPrefix(nil, "x"), kindWill, 0), clientKey{}, false},
		{append(appendClientPrefix(nil, "x"), 9), clientKey{}, false},
		{[]byte{prefixClient, 0, 5, 'a'}, clientKey{}, false},
		{[]byte{prefixMessage}, clientKey{}, false},
	} {
		k, err := parseClientKey(c.key)
		if (err == nil) != c.ok {
			t.Errorf("parseClientKey(%x) error %v, want ok %v", c.key, err, c.ok)
			continue
		}
		if c.ok && (k.kind != c.want.kind || k.seq != c.want.seq || k.pid != c.want.pid) {
			t.Errorf("parseClientKey(%x) = %+v, want %+v", c.key, k, c.want)
		}
	}
}

// TestClientIDTooLong panics rather than writing a key whose length field wraps.
func TestClientIDTooLong(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for a client id of 65536 bytes")
		}
	}()
	var b Batch
	b.PutInbound(string(make([]byte, maxClientID+1)), 1)
}

// TestBatchAllocs proves that filling a reused Batch allocates nothing.
func TestBatchAllocs(t *testing.T) {
	var b Batch
	msg := MessageRecord{Topic: []byte("a/b"), Payload: make([]byte, 100), QoS: 1}
	q := QueuedRecord{MessageID: 1, QoS: 1, SubIDs: []uint32{3}}
	fill := func() {
		b.Reset()
		b.PutMessage(1, msg)
		b.PutQueued("client", 1, q)
		b.PutRetained("a/b", 1)
		b.DeleteSession("other")
	}
	fill()
	if n := testing.AllocsPerRun(100, fill); n != 0 {
		t.Errorf("%v allocations per filled batch, want 0", n)
	}
}

// FuzzDecode feeds any bytes to every decoder: none may panic, and what one accepts
// must encode to bytes that decode to the same record.
func FuzzDecode(f *testing.F) {
	for _, r := range records {
		f.Add(r.encode())
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		for _, r := range records {
			got, err := r.decode(v)
			if err != nil || r.name == "inbound" {
				continue
			}
			again, err := r.decode(encodeAny(got))
			if err != nil || !reflect.DeepEqual(normalizeAny(again), normalizeAny(got)) {
				t.Errorf("%s %x: decoded %+v, re-encoded and decoded %+v (%v)", r.name, v, got, again, err)
			}
		}
		if k, err := parseClientKey(v); err == nil && !bytes.HasPrefix(v, k.prefix) {
			t.Errorf("client key %x: prefix %x", v, k.prefix)
		}
		_, _ = parseMessageKey(v)
		_, _ = messageExpiry(v)
	})
}

func encodeAny(r any) []byte {
	switch r := r.(type) {
	case SessionRecord:
		return appendSession(nil, &r)
	case MessageRecord:
		return appendMessage(nil, &r)
	case QueuedRecord:
		return appendQueued(nil, &r)
	case WillRecord:
		return appendWill(nil, &r)
	case uint64:
		return appendRetained(nil, r)
	}
	panic("unknown record")
}

// normalizeAny makes empty slices nil, for reflect.DeepEqual.
func normalizeAny(r any) any {
	switch r := r.(type) {
	case SessionRecord:
		if len(r.Subscriptions) == 0 {
			r.Subscriptions = nil
		}
		return r
	case MessageRecord:
		r.Topic, r.Payload, r.Props = clone(r.Topic), clone(r.Payload), clone(r.Props)
		return r
	case QueuedRecord:
		if len(r.SubIDs) == 0 {
			r.SubIDs = nil
		}
		return r
	case WillRecord:
		r.Topic, r.Payload, r.Props = clone(r.Topic), clone(r.Payload), clone(r.Props)
		return r
	}
	return r
}

// TestCorruptRecord fails Load with ErrCorrupt naming the record.
func TestCorruptRecord(t *testing.T) {
	s := NewMemory()
	defer s.Close()
	var b Batch
	b.PutSession(SessionRecord{ClientID: "c", Version: 5})
	rawSet(&b, appendQueuedKey(nil, "c", 1), []byte{1, 2, 3}) // a queue entry of garbage
	commit(t, s, &b)
	err := s.Load(newCollector())
	if !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(`"c"`)) {
		t.Fatalf("Load = %v, want ErrCorrupt naming client c", err)
	}
	t.Log(err)
}

// rawSet adds the setting of key to value to b, bypassing the record encoders.
func rawSet(b *Batch, key, value []byte) {
	b.data = append(b.begin(opSet), key...)
	b.value()
	b.data = append(b.data, value...)
	b.end()
}
