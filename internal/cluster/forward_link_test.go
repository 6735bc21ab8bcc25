package cluster

import (
	"testing"
	"time"
)

// TestRTTProbe: one batch is timed at a time, from its send to the first acknowledgement
// that covers it; a batch sent meanwhile is not, and the next one after is.
func TestRTTProbe(t *testing.T) {
	var p rttProbe
	sent := time.Now()
	p.start(5, sent)
	p.start(9, time.Now()) // a probe is out
	if _, ok := p.done(4); ok {
		t.Fatal("an acknowledgement below the probed batch ended the probe")
	}
	d, ok := p.done(9)
	if !ok || d < 0 || d > time.Since(sent) {
		t.Fatalf("round trip %v, %v; want one between 0 and %v", d, ok, time.Since(sent))
	}
	if _, ok := p.done(9); ok {
		t.Fatal("the probe ended twice")
	}
	p.start(12, time.Now())
	if _, ok := p.done(12); !ok {
		t.Fatal("no probe after the first ended")
	}
}
