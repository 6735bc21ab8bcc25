package listener

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// maskedFrame builds a client frame: masked with a fixed key, as RFC 6455 section 5.3 asks.
func maskedFrame(fin bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var f []byte
	switch n := len(payload); {
	case n < 126:
		f = []byte{b0, 0x80 | byte(n)}
	case n <= 0xFFFF:
		f = binary.BigEndian.AppendUint16([]byte{b0, 0x80 | 126}, uint16(n))
	default:
		f = binary.BigEndian.AppendUint64([]byte{b0, 0x80 | 127}, uint64(n))
	}
	mask := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	f = append(f, mask[:]...)
	for i, c := range payload {
		f = append(f, c^mask[i%4])
	}
	return f
}

// wsEvents is what a decoding run saw: message bytes are joined; control frames are listed.
type wsEvents struct {
	data    []byte
	control []string // "ping:payload", "pong:payload", "close:payload"
}

// decode runs w over the stream cut at the given points, as the engine's reader does with reads
// (start, next until wsNeedMore or the end, keep), and stops at the first error.
func decode(w *wsStream, stream []byte, cuts []int) (wsEvents, error) {
	var ev wsEvents
	prev := 0
	for _, at := range append(cuts, len(stream)) {
		read := append([]byte(nil), stream[prev:at]...) // a read buffer of its own
		prev = at
		data := w.start(read)
		for len(data) > 0 {
			kind, p, n, err := w.next(data)
			if err != nil {
				return ev, err
			}
			if kind == wsNeedMore {
				break
			}
			data = data[n:]
			switch kind {
			case wsPayload:
				ev.data = append(ev.data, p...)
			case wsPing:
				ev.control = append(ev.control, "ping:"+string(p))
			case wsPongFrame:
				ev.control = append(ev.control, "pong:"+string(p))
			case wsCloseFrame:
				ev.control = append(ev.control, "close:"+string(p))
			}
		}
		w.keep(data)
	}
	return ev, nil
}

// TestWSStreamCuts decodes the same frames cut at every point, and at random points: the
// message bytes and the control frames come out the same, and nothing is held at the end.
func TestWSStreamCuts(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80,000 bytes: a 64-bit length
	var stream []byte
	stream = append(stream, maskedFrame(true, wsBinary, []byte("hello"))...)
	stream = append(stream, maskedFrame(false, wsBinary, []byte(" fragmented"))...)
	stream = append(stream, maskedFrame(true, wsPing0, []byte("in between"))...)
	stream = append(stream, maskedFrame(false, wsContinuation, bytes.Repeat([]byte("x"), 300))...) // 16-bit length
	stream = append(stream, maskedFrame(true, wsContinuation, nil)...)
	stream = append(stream, maskedFrame(true, wsPong, nil)...)
	stream = append(stream, maskedFrame(true, wsBinary, big)...)
	stream = append(stream, maskedFrame(true, wsClose, []byte{0x03, 0xE8, 'b', 'y', 'e'})...)
	want := wsEvents{
		data:    append(append([]byte("hello fragmented"), bytes.Repeat([]byte("x"), 300)...), big...),
		control: []string{"ping:in between", "pong:", "close:\x03\xe8bye"},
	}
	check := func(name string, cuts []int) {
		t.Helper()
		var w wsStream
		got, err := decode(&w, stream, cuts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.data, want.data) || strings.Join(got.control, "|") != strings.Join(want.control, "|") {
			t.Fatalf("%s: %d data bytes (want %d), control %q (want %q)", name, len(got.data), len(want.data), got.control, want.control)
		}
		if !w.idle() {
			t.Fatalf("%s: state left after the last frame: %+v", name, w)
		}
	}
	check("whole", nil)
	for at := 1; at < 400; at++ { // every cut through the small frames
		check("cut", []int{at})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var cuts []int
		for at := rng.IntN(50) + 1; at < len(stream); at += rng.IntN(3000) + 1 {
			cuts = append(cuts, at)
		}
		check("random cuts", cuts)
	}
}

// TestWSStreamViolations: each breach of RFC 6455 framing, or of MQTT's binding (a text
// message, [MQTT-6.0.0-1]), is an error with the status the close frame carries.
func TestWSStreamViolations(t *testing.T) {
	unmasked := maskedFrame(true, wsBinary, []byte("x"))
	unmasked[1] &^= 0x80
	hugeLength := append([]byte{0x82, 0x80 | 127}, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4)
	for _, tc := range []struct {
		name   string
		stream []byte
		want   *wsError
	}{
		{"unmasked", unmasked, errWSUnmasked},
		{"reserved bit", append([]byte{0x82 | 0x40}, maskedFrame(true, wsBinary, nil)[1:]...), errWSReserved},
		{"text", maskedFrame(true, wsText, []byte("hi")), errWSText},
		{"reserved data opcode", maskedFrame(true, 0x3, nil), errWSOpcode},
		{"reserved control opcode", maskedFrame(true, 0xB, nil), errWSOpcode},
		{"long ping", maskedFrame(true, wsPing0, make([]byte, 126)), errWSControl},
		{"fragmented ping", maskedFrame(false, wsPing0, nil), errWSControl},
		{"lone continuation", maskedFrame(true, wsContinuation, []byte("x")), errWSContinuation},
		{"interleaved", append(maskedFrame(false, wsBinary, []byte("a")), maskedFrame(true, wsBinary, []byte("b"))...), errWSInterleaved},
		{"length top bit", hugeLength, errWSLength},
		{"close of one byte", maskedFrame(true, wsClose, []byte{3}), errWSCloseLength},
	} {
		var w wsStream
		_, err := decode(&w, tc.stream, nil)
		var we *wsError
		if !errors.As(err, &we) || we != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestUnmask checks the word-at-a-time unmasking against the byte rule, from every
// position of the key and for lengths around the word size.
func TestUnmask(t *testing.T) {
	mask := [4]byte{1, 2, 3, 250}
	for pos := range uint8(4) {
		for n := range 40 {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i * 31)
			}
			want := bytes.Clone(p)
			for i := range want {
				want[i] ^= mask[(int(pos)+i)%4]
			}
			if end := unmask(p, mask, pos); end != uint8((int(pos)+n)%4) || !bytes.Equal(p, want) {
				t.Fatalf("pos %d, %d bytes: got %x (end %d), want %x", pos, n, p, end, want)
			}
		}
	}
}

// FuzzWSStream feeds arbitrary bytes, whole and cut in two: never a panic, and the same
// outcome either way.
func FuzzWSStream(f *testing.F) {
	f.Add(maskedFrame(true, wsBinary, []byte("hello")), 3)
	f.Add(append(maskedFrame(false, wsBinary, []byte("a")), maskedFrame(true, wsContinuation, []byte("b"))...), 7)
	f.Add(maskedFrame(true, wsPing0, []byte("p")), 1)
	f.Add(maskedFrame(true, wsBinary, make([]byte, 300)), 100)
	f.Fuzz(func(t *testing.T, stream []byte, cut int) {
		var w1, w2 wsStream
		whole, err1 := decode(&w1, stream, nil)
		at := 0
		if len(stream) > 0 {
			at = int(uint(cut) % uint(len(stream)+1))
		}
		parts, err2 := decode(&w2, stream, []int{at})
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("whole: %v; cut at %d: %v", err1, at, err2)
		}
		if err1 == nil && (!bytes.Equal(whole.data, parts.data) || strings.Join(whole.control, "|") != strings.Join(parts.control, "|")) {
			t.Fatalf("cut at %d changed the outcome", at)
		}
	})
}
