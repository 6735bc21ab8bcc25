package packet

import (
	"bytes"
	"errors"
	"testing"
)

// stream concatenates the corpus packets of one version into one byte stream.
func stream(v Version) (all []byte, sizes []int) {
	for _, tc := range corpus {
		if tc.v != v || tc.pkt == nil {
			continue
		}
		all = append(all, tc.raw...)
		sizes = append(sizes, len(tc.raw))
	}
	return all, sizes
}

// readAll feeds the stream in chunks of the given sizes (cycled) and collects every
// packet, re-encoded as header+body bytes.
func readAll(t *testing.T, r *Reader, data []byte, chunk func(i int) int) [][]byte {
	t.Helper()
	var got [][]byte
	for i := 0; len(data) > 0; i++ {
		n := min(chunk(i), len(data))
		in := append([]byte(nil), data[:n]...) // a fresh slice, scribbled over below
		data = data[n:]
		r.Feed(in)
		for {
			h, body, ok, err := r.Next()
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if !ok {
				break
			}
			pkt := appendHeader(nil, byte(h.Type)<<4|h.Flags, h.Remaining)
			got = append(got, append(pkt, body...))
		}
		for j := range in {
			in[j] = 0xee // the reader must not refer to input it said it was done with
		}
	}
	if r.Pending() {
		t.Fatalf("reader still holds a partial packet at the end of the stream")
	}
	return got
}

func checkPackets(t *testing.T, data []byte, sizes []int, got [][]byte) {
	t.Helper()
	if len(got) != len(sizes) {
		t.Fatalf("got %d packets, want %d", len(got), len(sizes))
	}
	for i, p := range got {
		want := data[:sizes[i]]
		data = data[sizes[i]:]
		if !bytes.Equal(p, want) {
			t.Fatalf("packet %d:\n% x\nwant\n% x", i, p, want)
		}
	}
}

func TestReaderAnySplit(t *testing.T) {
	for _, v := range []Version{V311, V5} {
		data, sizes := stream(v)
		t.Run(v.String()+"/one-byte-at-a-time", func(t *testing.T) {
			r := &Reader{Version: v}
			checkPackets(t, data, sizes, readAll(t, r, data, func(int) int { return 1 }))
		})
		t.Run(v.String()+"/whole", func(t *testing.T) {
			r := &Reader{Version: v}
			checkPackets(t, data, sizes, readAll(t, r, data, func(int) int { return len(data) }))
		})
		t.Run(v.String()+"/every-two-way-split", func(t *testing.T) {
			for cut := 1; cut < len(data); cut++ {
				r := &Reader{Version: v}
				got := readAll(t, r, data, func(i int) int {
					if i == 0 {
						return cut
					}
					return len(data)
				})
				checkPackets(t, data, sizes, got)
			}
		})
		t.Run(v.String()+"/uneven-chunks", func(t *testing.T) {
			for _, step := range []int{2, 3, 5, 7, 13, 64} {
				r := &Reader{Version: v}
				checkPackets(t, data, sizes, readAll(t, r, data, func(i int) int { return 1 + (i*step)%11 }))
			}
		})
	}
}

func TestReaderLargePacketSplit(t *testing.T) {
	p := &Publish{Topic: []byte("big"), QoS: 1, PacketID: 1, Payload: bytes.Repeat([]byte("x"), 300_000)}
	data := p.AppendTo(nil, V311)
	r := &Reader{Version: V311}
	got := readAll(t, r, data, func(int) int { return 4096 })
	checkPackets(t, data, []int{len(data)}, got)
}

func TestReaderMaxSize(t *testing.T) {
	p := &Publish{Topic: []byte("t"), Payload: make([]byte, 100)}
	data := p.AppendTo(nil, V311)
	for _, split := range []int{2, 3, len(data)} {
		r := &Reader{Version: V311, MaxSize: 50}
		r.Feed(data[:split])
		_, _, _, err := r.Next()
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != PacketTooLarge || pe.Rule != "MQTT-3.2.2-15" {
			t.Fatalf("split %d: err %v, want packet too large naming MQTT-3.2.2-15", split, err)
		}
		if r.carry != nil && cap(*r.carry) > 256 {
			t.Fatalf("split %d: buffered %d bytes of a refused packet", split, cap(*r.carry))
		}
	}
}

// A header announcing 256 MB must not make the reader allocate for it before the bytes come.
func TestReaderDoesNotTrustRemainingLength(t *testing.T) {
	r := &Reader{Version: V311}
	r.Feed([]byte{0x30, 0xff, 0xff, 0xff, 0x7f, 0, 1, 't'})
	if _, _, ok, err := r.Next(); ok || err != nil {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	if cap(*r.carry) > 256 {
		t.Fatalf("reader reserved %d bytes for a packet it has 8 bytes of", cap(*r.carry))
	}
	r.Release()
}

func TestReaderHold(t *testing.T) {
	data, sizes := stream(V5)
	r := &Reader{Version: V5}
	in := append([]byte(nil), data...)
	r.Feed(in[:len(in)-3])
	var got [][]byte
	h, body, ok, err := r.Next()
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	got = append(got, append(appendHeader(nil, byte(h.Type)<<4|h.Flags, h.Remaining), body...))
	r.Hold() // backpressure: stop here, keep the rest
	for i := range in {
		in[i] = 0xee
	}
	for {
		h, body, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, append(appendHeader(nil, byte(h.Type)<<4|h.Flags, h.Remaining), body...))
	}
	r.Feed(append([]byte(nil), data[len(data)-3:]...))
	for {
		h, body, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, append(appendHeader(nil, byte(h.Type)<<4|h.Flags, h.Remaining), body...))
	}
	checkPackets(t, data, sizes, got)
	if r.Pending() || r.carry != nil || r.owned != nil {
		t.Fatalf("reader holds a buffer after the stream ended")
	}
}

func TestReaderIdleHoldsNoBuffer(t *testing.T) {
	data, _ := stream(V311)
	r := &Reader{Version: V311}
	readAll(t, r, data, func(int) int { return 3 })
	r.Feed(nil)
	if _, _, ok, _ := r.Next(); ok {
		t.Fatal("packet from nothing")
	}
	if r.carry != nil || r.owned != nil {
		t.Fatal("an idle reader holds a buffer")
	}
}

// TestReaderKeep pauses the reader after its first packet, keeps every later chunk
// (scribbling over each one after Keep, as a network layer reuses its buffer) and then
// reads on: the stream must come out whole and the reader must end holding nothing.
func TestReaderKeep(t *testing.T) {
	data, sizes := stream(V5)
	for _, chunk := range []int{1, 2, 7, 64, len(data)} {
		r := &Reader{Version: V5}
		var got [][]byte
		read := func() {
			for {
				h, body, ok, err := r.Next()
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					return
				}
				got = append(got, append(appendHeader(nil, byte(h.Type)<<4|h.Flags, h.Remaining), body...))
			}
		}
		paused := false
		for off := 0; off < len(data); off += chunk {
			in := append([]byte(nil), data[off:min(off+chunk, len(data))]...)
			if paused {
				r.Keep(in)
			} else {
				r.Feed(in)
				h, body, ok, err := r.Next()
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					got = append(got, append(appendHeader(nil, byte(h.Type)<<4|h.Flags, h.Remaining), body...))
					r.Hold()
					paused = true
				}
			}
			for i := range in {
				in[i] = 0xee
			}
		}
		if want := len(data) - len(got[0]); r.Held() != want {
			t.Fatalf("chunk %d: Held = %d, want %d", chunk, r.Held(), want)
		}
		read()
		checkPackets(t, data, sizes, got)
		if r.Pending() || r.carry != nil || r.owned != nil || r.Held() != 0 {
			t.Fatalf("chunk %d: reader holds a buffer after the stream ended", chunk)
		}
	}
}
