package loadgen

import "math/bits"

// A seqSet is what one subscriber received of one publisher's messages: a bit per
// sequence number, so that a run tells a message missing from one delivered twice (a
// count of deliveries cannot: a duplicate hides a loss), and sees one that overtook
// another. It costs a bit per message sent, and only the subscriber's recvLoop touches it.
type seqSet struct {
	bits      []uint64
	next      uint32 // one past the highest sequence number received
	dups      int64  // deliveries of a sequence number received already
	reordered int64  // deliveries below next that were not duplicates: they came late
}

// add records a delivery of seq and reports whether it was the first.
func (s *seqSet) add(seq uint32) bool {
	w, b := int(seq>>6), uint64(1)<<(seq&63)
	if w >= len(s.bits) {
		s.bits = append(s.bits, make([]uint64, w+1-len(s.bits)+len(s.bits)/2)...)
	}
	if s.bits[w]&b != 0 {
		s.dups++
		return false
	}
	s.bits[w] |= b
	if seq < s.next {
		s.reordered++
	} else {
		s.next = seq + 1
	}
	return true
}

// has reports whether seq was received.
func (s *seqSet) has(seq uint32) bool {
	w := int(seq >> 6)
	return w < len(s.bits) && s.bits[w]&(1<<(seq&63)) != 0
}

// missing returns how many of the sequence numbers 0 to sent-1 were not received, and
// the first few of them (up to max).
func (s *seqSet) missing(sent int64, max int) (n int64, first []uint32) {
	got := int64(0)
	for w, v := range s.bits {
		if int64(w)<<6 >= sent {
			break
		}
		if end := int64(w+1) << 6; end > sent {
			v &= 1<<(sent&63) - 1 // only the numbers below sent
		}
		got += int64(bits.OnesCount64(v))
	}
	n = sent - got
	for seq := int64(0); seq < sent && n > 0 && len(first) < max; seq++ {
		if !s.has(uint32(seq)) {
			first = append(first, uint32(seq))
		}
	}
	return n, first
}
