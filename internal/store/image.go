package store

import (
	"encoding/binary"
	"fmt"
)

// An Image is one session's records in one byte string, in the order Load visits them:
// its messages, the session record, its queue entries in order, its inbound packet ids
// and its will. A cluster node hands a session to another in this form when its client
// moves (internal/cluster, handover.go); the receiver reads it with LoadImage through the
// same Visitor as Load. Message ids are the image's own, not a store's.
//
//	image  = imageVersion record* end
//	record = kind body-length(uvarint) body
//	body   = message:  id(uvarint) value        session: client-id(length, bytes) value
//	         queued:   seq(uvarint) value       inbound: pid(uvarint)
//	         will:     value
//
// where each value is encoded as the store encodes that record (format.go).
type Image struct {
	b []byte
}

// imageVersion is the first byte of every image.
const imageVersion = 1

// Record kinds of an image. Append values, never renumber.
const (
	imageMessage = 1
	imageSession = 2
	imageQueued  = 3
	imageInbound = 4
	imageWill    = 5
	imageEnd     = 6 // the last record, empty: an image cut short is refused
)

func (im *Image) record(kind byte, body func([]byte) []byte) {
	if len(im.b) == 0 {
		im.b = append(im.b, imageVersion)
	}
	im.b = append(im.b, kind)
	n := len(im.b)
	im.b = append(im.b, make([]byte, binary.MaxVarintLen32)...) // room for the length
	start := len(im.b)
	im.b = body(im.b)
	size := binary.AppendUvarint(nil, uint64(len(im.b)-start))
	copy(im.b[n:], size)
	im.b = append(im.b[:n+len(size)], im.b[start:]...)
}

// Message adds the message with the image's id id.
func (im *Image) Message(id uint64, r *MessageRecord) {
	im.record(imageMessage, func(b []byte) []byte { return appendMessage(binary.AppendUvarint(b, id), r) })
}

// Session adds the session record.
func (im *Image) Session(r *SessionRecord) {
	im.record(imageSession, func(b []byte) []byte { return appendSession(appendString(b, r.ClientID), r) })
}

// Queued adds the queue entry seq.
func (im *Image) Queued(seq uint64, r *QueuedRecord) {
	im.record(imageQueued, func(b []byte) []byte { return appendQueued(binary.AppendUvarint(b, seq), r) })
}

// Inbound adds an inbound QoS 2 packet id awaiting PUBREL.
func (im *Image) Inbound(pid uint16) {
	im.record(imageInbound, func(b []byte) []byte { return binary.AppendUvarint(b, uint64(pid)) })
}

// Will adds the will.
func (im *Image) Will(r *WillRecord) {
	im.record(imageWill, func(b []byte) []byte { return appendWill(b, r) })
}

// Bytes returns the image, ended.
func (im *Image) Bytes() []byte {
	b := im.b
	if len(b) == 0 {
		b = []byte{imageVersion}
	}
	return append(b[:len(b):len(b)], imageEnd, 0)
}

// LoadImage visits the records of an image with v, as Load would visit them in a store
// that held only that session (Retained is never called). Slices given to v alias data.
func LoadImage(data []byte, v Visitor) error {
	if len(data) == 0 || data[0] != imageVersion {
		return fmt.Errorf("%w: not a session image this build reads", ErrCorrupt)
	}
	d := decoder{b: data[1:]}
	clientID := ""
	seen, ended := false, false
	for len(d.b) > 0 && !ended {
		kind := d.byte()
		body := d.bytes()
		if d.err != nil {
			break
		}
		bd := decoder{b: body}
		var err error
		switch kind {
		case imageMessage:
			id := bd.uvarint()
			var r MessageRecord
			if err = decodeMessage(bd.rest(), &r); err == nil && bd.err == nil {
				err = v.Message(id, r)
			}
		case imageSession:
			var r SessionRecord
			r.ClientID = string(bd.bytes())
			if err = decodeSession(bd.rest(), &r); err == nil && bd.err == nil {
				clientID, seen = r.ClientID, true
				err = v.Session(r)
			}
		case imageQueued:
			seq := bd.uvarint()
			var r QueuedRecord
			if err = decodeQueued(bd.rest(), &r); err == nil && bd.err == nil && seen {
				err = v.Queued(clientID, seq, r)
			}
		case imageInbound:
			pid := bd.uvarint()
			switch err = bd.done(); {
			case err == nil && pid > 0xffff:
				err = fmt.Errorf("packet id %d", pid)
			case err == nil && seen:
				err = v.Inbound(clientID, uint16(pid))
			}
		case imageWill:
			var r WillRecord
			if err = decodeWill(body, &r); err == nil && seen {
				err = v.Will(clientID, r)
			}
		case imageEnd:
			ended = true
			if len(body) > 0 || len(d.b) > 0 {
				err = fmt.Errorf("bytes after the end")
			}
		default:
			err = fmt.Errorf("record kind %d", kind)
		}
		if err == nil && bd.err != nil {
			err = bd.err
		}
		if err == nil && !seen && kind != imageMessage && kind != imageEnd {
			err = fmt.Errorf("record kind %d before the session", kind)
		}
		if err != nil {
			return fmt.Errorf("%w: session image: %v", ErrCorrupt, err)
		}
	}
	if d.err != nil {
		return fmt.Errorf("%w: session image: %v", ErrCorrupt, d.err)
	}
	if !seen || !ended {
		return fmt.Errorf("%w: session image without a session record or its end", ErrCorrupt)
	}
	return nil
}
