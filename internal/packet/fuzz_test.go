package packet

import (
	"bytes"
	"testing"
)

var fuzzVersions = [...]Version{V31, V311, V5}

func addCorpusSeeds(f *testing.F) {
	for _, tc := range corpus {
		if tc.pkt != nil {
			f.Add(byte(tc.v), tc.raw)
		}
	}
	for _, tc := range badCases {
		f.Add(byte(tc.v), tc.raw)
	}
}

// FuzzDecode decodes arbitrary bytes as one packet. Whatever decodes must survive the
// round trip decode(encode(p)) == p, and Size must match the encoding.
func FuzzDecode(f *testing.F) {
	addCorpusSeeds(f)
	f.Fuzz(func(t *testing.T, vb byte, data []byte) {
		v := fuzzVersions[int(vb)%len(fuzzVersions)]
		h, n, err := ParseHeader(data, v)
		if err != nil || n == 0 || h.Size() > len(data) {
			return
		}
		p, err := Decode(h, data[n:h.Size()], v)
		if err != nil {
			return
		}
		if c, ok := p.(*Connect); ok {
			v = c.Version // CONNECT carries its own version
		}
		enc := p.AppendTo(nil, v)
		if len(enc) != p.Size(v) {
			t.Fatalf("Size %d, encoded %d bytes", p.Size(v), len(enc))
		}
		h2, n2, err := ParseHeader(enc, v)
		if err != nil || n2 == 0 || h2.Size() != len(enc) {
			t.Fatalf("re-encoded header: n=%d err=%v\n% x", n2, err, enc)
		}
		p2, err := Decode(h2, enc[n2:], v)
		if err != nil {
			t.Fatalf("re-decode: %v\nfirst % x\nthen  % x", err, data[:h.Size()], enc)
		}
		if !equalPackets(p, p2) {
			t.Fatalf("round trip differs\n%#v\n%#v", p, p2)
		}
	})
}

// FuzzReader feeds arbitrary bytes to a Reader in pieces whose sizes come from the input
// itself, and checks that it yields exactly the packets (or the error) that feeding the
// same bytes whole yields: splitting must never change what is read.
func FuzzReader(f *testing.F) {
	for _, v := range []Version{V311, V5} {
		data, _ := stream(v)
		f.Add(byte(v), []byte{1}, data)
		f.Add(byte(v), []byte{3, 1, 7}, data)
	}
	f.Fuzz(func(t *testing.T, vb byte, cuts []byte, data []byte) {
		v := fuzzVersions[int(vb)%len(fuzzVersions)]
		want, wantErr := readStream(v, data, func(int) int { return len(data) })
		if len(cuts) == 0 {
			cuts = []byte{1}
		}
		got, gotErr := readStream(v, data, func(i int) int { return 1 + int(cuts[i%len(cuts)]) })
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("whole: err %v; split: err %v", wantErr, gotErr)
		}
		if len(got) != len(want) {
			t.Fatalf("whole: %d packets, split: %d", len(want), len(got))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("packet %d differs", i)
			}
		}
	})
}

func readStream(v Version, data []byte, chunk func(int) int) ([][]byte, error) {
	r := &Reader{Version: v, MaxSize: 1 << 16}
	defer r.Release()
	var out [][]byte
	for i := 0; len(data) > 0; i++ {
		n := min(chunk(i), len(data))
		in := append([]byte(nil), data[:n]...)
		data = data[n:]
		r.Feed(in)
		for {
			h, body, ok, err := r.Next()
			if err != nil {
				return out, err
			}
			if !ok {
				break
			}
			out = append(out, append([]byte{byte(h.Type)<<4 | h.Flags}, body...))
		}
		clear(in)
	}
	return out, nil
}
