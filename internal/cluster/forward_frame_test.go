package cluster

import (
	"bytes"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// TestFrameRoundTrip: a batch of frames reads back as written, and every cut of it is
// refused, never misread.
func TestFrameRoundTrip(t *testing.T) {
	var b []byte
	var ins []*outMsg
	for i, c := range []struct {
		topic, payload string
		qos            uint8
		retain, off    bool
		share          string
		ms             uint64
	}{
		{topic: "a/b", payload: "x", qos: 0},
		{topic: "a", payload: "", qos: 1, retain: true, ms: 1500},
		{topic: "s/t", payload: "yy", qos: 2, share: "$share/g/s/#", off: true},
	} {
		o := newOutMsg(session.NewLocalMessage(c.topic, []byte(c.payload), c.qos, c.retain))
		o.seq, o.share, o.offlineOK = uint64(i+1)<<40, c.share, c.off
		b = appendFrame(b, o, c.ms)
		ins = append(ins, o)
		defer o.free()
	}
	rest := b
	for i, o := range ins {
		var f frame
		var err error
		if rest, err = readFrame(rest, &f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.seq != o.seq || f.qos != o.qos || f.retain != o.retain || f.offlineOK != o.offlineOK ||
			string(f.topic) != string(o.topic()) || !bytes.Equal(f.payload, o.payload()) ||
			!bytes.Equal(f.props, o.props()) || string(f.share) != o.share {
			t.Fatalf("frame %d: %+v", i, f)
		}
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left", len(rest))
	}
	one := appendFrame(nil, ins[2], 0)
	for cut := range len(one) {
		var f frame
		if _, err := readFrame(one[:cut], &f); err == nil {
			t.Fatalf("a frame cut at %d of %d was read", cut, len(one))
		}
	}
}

// FuzzReadFrame: no input makes readFrame panic or read past its buffer.
func FuzzReadFrame(f *testing.F) {
	o := newOutMsg(session.NewLocalMessage("a/b", []byte("x"), 1, true))
	o.share = "$share/g/a/#"
	f.Add(appendFrame(nil, o, 10))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr frame
		for len(b) > 0 {
			var err error
			if b, err = readFrame(b, &fr); err != nil {
				return
			}
		}
	})
}
