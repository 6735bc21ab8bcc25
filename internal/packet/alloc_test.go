package packet

import (
	"fmt"
	"testing"
)

// Hot-path packets used by the allocation tests and the benchmarks.
var (
	benchPublishV5 = &Publish{Topic: []byte("sensors/building-1/floor-2/temperature"), QoS: 1, PacketID: 42,
		Payload: make([]byte, 128), Props: Properties{MessageExpiry: Some[uint32](60),
			User: []UserProperty{{[]byte("trace"), []byte("abc123")}}}}
	benchPublishV311 = &Publish{Topic: []byte("sensors/building-1/floor-2/temperature"), QoS: 1, PacketID: 42,
		Payload: make([]byte, 128)}
	benchPuback    = &Ack{PacketType: PUBACK, PacketID: 42}
	benchSubscribe = &Subscribe{PacketID: 7, Props: Properties{SubscriptionIDs: []uint32{9}}, Subscriptions: []Subscription{
		{Filter: []byte("sensors/+/floor-2/#"), QoS: 1}, {Filter: []byte("$share/g/jobs/#"), QoS: 2}}}
)

func split(t testing.TB, raw []byte, v Version) (Header, []byte) {
	h, n, err := ParseHeader(raw, v)
	if err != nil || n == 0 {
		t.Fatalf("ParseHeader: %v", err)
	}
	return h, raw[n:]
}

// TestHotPathAllocatesNothing keeps the promise of the package doc: decoding into a reused
// value and encoding into a reused buffer allocate nothing.
func TestHotPathAllocatesNothing(t *testing.T) {
	for _, v := range []Version{V311, V5} {
		pub := benchPublishV311
		if v == V5 {
			pub = benchPublishV5
		}
		buf := make([]byte, 0, 1024)
		cases := []struct {
			name string
			fn   func()
		}{
			{"decode/publish", decodeFn(t, pub, v, new(Publish))},
			{"decode/puback", decodeFn(t, benchPuback, v, new(Ack))},
			{"decode/subscribe", decodeFn(t, benchSubscribe, v, new(Subscribe))},
			{"encode/publish", func() { buf = pub.AppendTo(buf[:0], v) }},
			{"encode/publish-head", func() { buf = pub.AppendHead(buf[:0], v) }},
			{"encode/puback", func() { buf = benchPuback.AppendTo(buf[:0], v) }},
			{"size/publish", func() { _ = pub.Size(v) }},
			{"reader/publish", readerFn(t, pub, v)},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%s", v, c.name), func(t *testing.T) {
				if a := testing.AllocsPerRun(200, c.fn); a != 0 {
					t.Fatalf("%.1f allocs per run", a)
				}
			})
		}
	}
}

func decodeFn(t testing.TB, p Packet, v Version, into Packet) func() {
	raw := p.AppendTo(nil, v)
	h, body := split(t, raw, v)
	return func() {
		if err := into.Decode(h, body, v); err != nil {
			t.Fatal(err)
		}
	}
}

func readerFn(t testing.TB, p Packet, v Version) func() {
	raw := p.AppendTo(nil, v)
	r := &Reader{Version: v}
	var pub Publish
	return func() {
		r.Feed(raw)
		for {
			h, body, ok, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return
			}
			if err := pub.Decode(h, body, v); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, v := range []Version{V311, V5} {
		pub := benchPublishV311
		if v == V5 {
			pub = benchPublishV5
		}
		for _, c := range []struct {
			name string
			p    Packet
			into Packet
		}{
			{"Publish", pub, new(Publish)},
			{"Puback", benchPuback, new(Ack)},
			{"Subscribe", benchSubscribe, new(Subscribe)},
		} {
			b.Run(fmt.Sprintf("Pkt=%s/V=%s", c.name, v), func(b *testing.B) {
				fn := decodeFn(b, c.p, v, c.into)
				b.SetBytes(int64(c.p.Size(v)))
				b.ReportAllocs()
				for b.Loop() {
					fn()
				}
			})
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, v := range []Version{V311, V5} {
		pub := benchPublishV311
		if v == V5 {
			pub = benchPublishV5
		}
		for _, c := range []struct {
			name string
			p    Packet
		}{{"Publish", pub}, {"Puback", benchPuback}} {
			b.Run(fmt.Sprintf("Pkt=%s/V=%s", c.name, v), func(b *testing.B) {
				buf := make([]byte, 0, 1024)
				b.SetBytes(int64(c.p.Size(v)))
				b.ReportAllocs()
				for b.Loop() {
					buf = c.p.AppendTo(buf[:0], v)
				}
			})
		}
	}
}

// BenchmarkReader measures splitting a stream of PUBLISH packets read 4 KiB at a time,
// as a connection's read loop sees them, including the copies of split packets.
func BenchmarkReader(b *testing.B) {
	for _, size := range []int{16, 128, 1024} {
		b.Run(fmt.Sprintf("MsgSz=%db", size), func(b *testing.B) {
			p := &Publish{Topic: []byte("a/b/c"), QoS: 1, PacketID: 1, Payload: make([]byte, size)}
			var stream []byte
			for len(stream) < 64<<10 {
				stream = p.AppendTo(stream, V311)
			}
			r := &Reader{Version: V311}
			var pub Publish
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				for off := 0; off < len(stream); off += 4096 {
					r.Feed(stream[off:min(off+4096, len(stream))])
					for {
						h, body, ok, err := r.Next()
						if err != nil {
							b.Fatal(err)
						}
						if !ok {
							break
						}
						_ = pub.Decode(h, body, V311)
					}
				}
			}
		})
	}
}
