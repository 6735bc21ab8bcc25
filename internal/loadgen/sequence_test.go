package loadgen

import (
	"encoding/binary"
	"slices"
	"sync/atomic"
	"testing"
)

// TestSeqSet: a missing message is seen as missing even when a duplicate makes the count
// of deliveries come out right, and a late one as out of order.
func TestSeqSet(t *testing.T) {
	var s seqSet
	for _, seq := range []uint32{0, 1, 2, 4, 5, 5, 3, 70, 130, 200} {
		s.add(seq)
	}
	n, first := s.missing(201, 3)
	// 6..69, 71..129, 131..199 are missing: 64 + 59 + 69.
	if n != 192 || !slices.Equal(first, []uint32{6, 7, 8}) {
		t.Fatalf("missing %d, first %v; want 192, [6 7 8]", n, first)
	}
	if s.dups != 1 || s.reordered != 1 {
		t.Fatalf("dups %d, reordered %d; want 1, 1", s.dups, s.reordered)
	}
	// Only the numbers sent count: 200 is not below 64.
	if n, _ := s.missing(64, 3); n != 58 {
		t.Fatalf("missing below 64: %d, want 58", n)
	}
	if n, first := s.missing(0, 3); n != 0 || first != nil {
		t.Fatalf("missing of none sent: %d %v", n, first)
	}
}

// TestSubscriberSequences: deliveries are credited once per message, a duplicate and a
// publisher not due here are told apart, and the missing ones named.
func TestSubscriberSequences(t *testing.T) {
	pubs := []*publisher{{}, {}, {}}
	for _, p := range pubs {
		p.recv = make([]atomic.Int64, 1)
		p.wakeAt.Store(1 << 62)
	}
	s := newSubscriber(nil, pubs, 1, 1, 0) // due publisher 1 only, as in pair
	payload := func(pub, seq uint32) []byte {
		b := make([]byte, headerSize)
		binary.BigEndian.PutUint64(b, uint64(now()))
		binary.BigEndian.PutUint32(b[8:], pub)
		binary.BigEndian.PutUint32(b[12:], seq)
		return b
	}
	got := []bool{s.deliver(payload(1, 0)), s.deliver(payload(1, 2)), s.deliver(payload(1, 2)),
		s.deliver(payload(0, 1)), s.deliver(payload(2, 1)), s.deliver([]byte("short"))}
	if want := []bool{true, true, false, false, false, false}; !slices.Equal(got, want) {
		t.Fatalf("deliver reported %v, want %v", got, want)
	}
	if d := pubs[1].received(); d != 2 || s.foreign != 3 {
		t.Fatalf("publisher credited %d, foreign %d; want 2, 3", d, s.foreign)
	}
	pubs[1].sent.Store(3)
	r := &TrafficResult{}
	errs := &errorLog{}
	checkSequences(r, pubs, []*subscriber{s}, 1, errs)
	lines := errs.lines()
	if r.Duplicates != 1 || len(lines) != 2 {
		t.Fatalf("duplicates %d, errors %q; want 1 and a line each for missing and duplicates", r.Duplicates, lines)
	}
	if want := "missing: 1 error(s), e.g. subscriber 0: message 1 of publisher 1 (of 1 missing there; the publisher has 0 of 3 acknowledged)"; lines[0] != want {
		t.Fatalf("error %q, want %q", lines[0], want)
	}
}
