package packet

import "github.com/bifrost-mqtt/bifrost/internal/bufpool"

// errTooLarge: a client must not send a packet above the server's Maximum Packet Size
// [MQTT-3.2.2-15]; one that does gets DISCONNECT 0x95 (spec 3.2.2.3.6, 4.13). (The
// server's own limit the other way, [MQTT-3.1.2-24], is the session's to keep.)
var errTooLarge = &Error{PacketTooLarge, "MQTT-3.2.2-15", "packet larger than the maximum packet size"}

// A Reader splits a byte stream into packets. It accepts the stream in pieces of any size,
// down to one byte at a time, and yields each complete packet as its header and body.
//
// A packet that lies whole inside the fed input is returned in place, as a slice of that
// input: no copy. Only a packet split across inputs is copied, into a pooled buffer the
// Reader holds until the packet is complete and then gives back, so a connection between
// packets holds no buffer at all. The buffer grows with the bytes that actually arrive,
// never ahead of them, and a packet whose header announces more than MaxSize is refused
// before any of its body is buffered.
//
// The usual loop:
//
//	r.Feed(data)
//	for {
//		h, body, ok, err := r.Next()
//		if err != nil { /* close with the error's reason code */ }
//		if !ok { break } // data may be reused now
//		handle(h, body)  // body is valid until the next call to Next
//	}
//
// A Reader is not safe for concurrent use.
type Reader struct {
	// MaxSize is the largest packet accepted, fixed header included; 0 means MaxPacketSize.
	MaxSize int
	// Version selects the version-specific header checks; 0 until CONNECT is decoded.
	Version Version

	in    []byte  // unread input
	carry *[]byte // pooled: the start of a packet split across inputs
	owned *[]byte // pooled: input copied by Hold, which in points into
	done  bool    // the packet returned last lives in carry: reset it on the next call
}

// Feed gives the reader the next bytes of the stream. The reader refers to p until Next
// reports ok == false, or until Hold.
func (r *Reader) Feed(p []byte) { r.in = p }

// Next returns the next complete packet. It returns ok == false when the input holds no
// complete packet any more; the reader has then copied what is left of a partial packet
// and no longer refers to the fed input. The body is valid until the next call to Next.
func (r *Reader) Next() (h Header, body []byte, ok bool, err error) {
	if r.done {
		r.done = false
		r.releaseCarry()
	}
	if r.carry != nil {
		return r.fromCarry()
	}
	h, n, err := ParseHeader(r.in, r.Version)
	if err != nil {
		return h, nil, false, err
	}
	if n > 0 {
		if err := r.checkSize(h); err != nil {
			return h, nil, false, err
		}
		if size := h.Size(); size <= len(r.in) {
			body, r.in = r.in[n:size:size], r.in[size:]
			return h, body, true, nil
		}
	}
	if len(r.in) > 0 {
		r.stash()
	}
	if r.owned != nil {
		bufpool.Put(r.owned)
		r.owned = nil
	}
	return Header{}, nil, false, nil
}

// Pending reports whether the reader holds part of a packet (or held input).
func (r *Reader) Pending() bool { return (r.carry != nil && !r.done) || len(r.in) > 0 }

// Hold copies the unread input into the reader's own buffer, so the caller may reuse the
// buffer it fed while packets remain unread: a connection under backpressure stops
// calling Next, holds its input and goes on later.
func (r *Reader) Hold() {
	if r.done {
		r.done = false
		r.releaseCarry()
	}
	if len(r.in) == 0 {
		return
	}
	var prefix []byte
	if r.carry != nil {
		prefix = *r.carry
	}
	ob := bufpool.Get(len(prefix) + len(r.in))
	*ob = append(append(*ob, prefix...), r.in...)
	r.releaseCarry()
	if r.owned != nil {
		bufpool.Put(r.owned)
	}
	r.owned, r.in = ob, *ob
}

// Keep adds p to the unread input and holds all of it, as Hold does: for a connection
// that goes on receiving while it may not handle packets yet (its CONNECT is being
// authenticated). The caller bounds what it keeps with Held.
func (r *Reader) Keep(p []byte) {
	if len(p) == 0 {
		return
	}
	if r.done {
		r.done = false
		r.releaseCarry()
	}
	var prefix []byte
	if r.carry != nil {
		prefix = *r.carry
	}
	ob := bufpool.Get(len(prefix) + len(r.in) + len(p))
	*ob = append(append(append(*ob, prefix...), r.in...), p...)
	r.releaseCarry()
	if r.owned != nil {
		bufpool.Put(r.owned) // after the copy: r.in may point into it
	}
	r.owned, r.in = ob, *ob
}

// Held is the number of bytes the reader holds: a partial packet and unread input.
func (r *Reader) Held() int {
	n := len(r.in)
	if r.carry != nil && !r.done {
		n += len(*r.carry)
	}
	return n
}

// Release gives back any buffer the reader holds; call it when the connection closes.
func (r *Reader) Release() {
	r.releaseCarry()
	if r.owned != nil {
		bufpool.Put(r.owned)
		r.owned = nil
	}
	r.in, r.done = nil, false
}

func (r *Reader) checkSize(h Header) error {
	max := r.MaxSize
	if max <= 0 {
		max = MaxPacketSize
	}
	if h.Size() > max {
		return errTooLarge
	}
	return nil
}

// stash copies the unread input, the start of a packet, into a carry buffer sized for
// what arrived so far.
func (r *Reader) stash() {
	b := bufpool.Get(len(r.in))
	*b = append(*b, r.in...)
	r.carry, r.in = b, nil
}

// fromCarry completes the packet whose start is in the carry buffer.
func (r *Reader) fromCarry() (Header, []byte, bool, error) {
	c := *r.carry
	h, n, err := ParseHeader(c, r.Version)
	for n == 0 && err == nil { // the header itself was split: at most 5 bytes
		if len(r.in) == 0 {
			return Header{}, nil, false, nil
		}
		c = r.grow(c, len(c)+1, 1<<30)
		c, r.in = append(c, r.in[0]), r.in[1:]
		*r.carry = c
		h, n, err = ParseHeader(c, r.Version)
	}
	if err != nil {
		return h, nil, false, err
	}
	if err := r.checkSize(h); err != nil {
		return h, nil, false, err
	}
	size := h.Size()
	take := min(size-len(c), len(r.in))
	c = r.grow(c, len(c)+take, size)
	c, r.in = append(c, r.in[:take]...), r.in[take:]
	*r.carry = c
	if len(c) < size {
		if r.owned != nil && len(r.in) == 0 {
			bufpool.Put(r.owned)
			r.owned = nil
		}
		return Header{}, nil, false, nil
	}
	r.done = true
	return h, c[n:size:size], true, nil
}

// grow makes sure the carry buffer holds need bytes, moving to a larger pooled buffer by
// doubling, capped at limit (the packet's size), so memory follows the bytes received.
func (r *Reader) grow(c []byte, need, limit int) []byte {
	if need <= cap(c) {
		return c
	}
	nb := bufpool.Get(min(max(need, 2*cap(c)), limit))
	*nb = append(*nb, c...)
	bufpool.Put(r.carry)
	r.carry = nb
	return *nb
}

func (r *Reader) releaseCarry() {
	if r.carry != nil {
		bufpool.Put(r.carry)
		r.carry = nil
	}
}
