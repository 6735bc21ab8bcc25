package store

import (
	"encoding/binary"
	"fmt"
)

// The on-disk format is drawn in the package doc; this file is its only encoder and
// decoder. Every constant below is written to disk: append values, never change or reuse
// one.

// Key prefixes, one per record kind. Their order is the order Load visits the kinds in.
const (
	prefixMeta     = 0x00 // the format-version record
	prefixMessage  = 0x01 // messages, by id
	prefixClient   = 0x02 // everything of one client: session, queue, inbound ids, will
	prefixRetained = 0x03 // retained messages, by topic
	prefixEnd      = 0x04 // above every key
)

// Kinds of client record: the byte after the client id. The session record sorts first,
// so Load meets a client's session before the rest of its records.
const (
	kindSession = 0x01
	kindQueued  = 0x02
	kindInbound = 0x03
	kindWill    = 0x04
	kindEnd     = 0xff // above every kind: the end of a client's range
)

// recordVersion is the first byte of every value. A build reads every record version up
// to its own and writes its own; formatVersion rises when a build writes something an
// older build cannot read.
const recordVersion = 2

// formatMagic and formatVersion make the value of the format-version record;
// oldestFormat is the oldest format this build reads (and marks as formatVersion at Open).
const (
	formatMagic   = "bifrost"
	formatVersion = 2
	oldestFormat  = 1
)

// metaKey is the key of the format-version record.
var metaKey = []byte{prefixMeta, 'f', 'o', 'r', 'm', 'a', 't'}

// Key bounds of the kinds, for iterators.
var (
	messageLower  = []byte{prefixMessage}
	clientLower   = []byte{prefixClient}
	retainedLower = []byte{prefixRetained}
	keysUpper     = []byte{prefixEnd}
)

// Bit fields of the flags byte of messages, queue entries and wills.
const (
	flagQoS    = 0x03 // bits 0-1
	flagRetain = 0x04
)

// Bit fields of a subscription's options byte: the layout of the MQTT 5 SUBSCRIBE
// options byte.
const (
	subQoS               = 0x03 // bits 0-1
	subNoLocal           = 0x04
	subRetainAsPublished = 0x08
	subRetainHandling    = 0x30 // bits 4-5
)

// maxClientID is the longest client id a key can hold: its length is 2 bytes, as on the
// wire.
const maxClientID = 0xffff

func appendMessageKey(dst []byte, id uint64) []byte {
	dst = append(dst, prefixMessage)
	return binary.BigEndian.AppendUint64(dst, id)
}

// appendClientPrefix appends the prefix shared by every record of clientID. The length
// makes it unique: no client's prefix is a prefix of another's. It panics for an id
// longer than maxClientID, which MQTT cannot carry.
func appendClientPrefix(dst []byte, clientID string) []byte {
	if len(clientID) > maxClientID {
		panic(fmt.Sprintf("store: client id of %d bytes", len(clientID)))
	}
	dst = append(dst, prefixClient)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(clientID)))
	return append(dst, clientID...)
}

func appendQueuedKey(dst []byte, clientID string, seq uint64) []byte {
	dst = append(appendClientPrefix(dst, clientID), kindQueued)
	return binary.BigEndian.AppendUint64(dst, seq)
}

func appendInboundKey(dst []byte, clientID string, pid uint16) []byte {
	dst = append(appendClientPrefix(dst, clientID), kindInbound)
	return binary.BigEndian.AppendUint16(dst, pid)
}

func appendRetainedKey(dst []byte, topic string) []byte {
	return append(append(dst, prefixRetained), topic...)
}

func appendSession(dst []byte, r *SessionRecord) []byte {
	dst = append(dst, recordVersion, r.Version)
	dst = binary.BigEndian.AppendUint32(dst, r.Expiry)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.DisconnectedAt))
	dst = binary.AppendUvarint(dst, uint64(len(r.Subscriptions)))
	for i := range r.Subscriptions {
		s := &r.Subscriptions[i]
		dst = appendString(dst, s.Filter)
		opts := s.QoS&subQoS | s.RetainHandling<<4&subRetainHandling
		if s.NoLocal {
			opts |= subNoLocal
		}
		if s.RetainAsPublished {
			opts |= subRetainAsPublished
		}
		dst = append(dst, opts)
		dst = binary.AppendUvarint(dst, uint64(s.ID))
	}
	if !r.Owned {
		return append(dst, 0) // a session of format 1: its owner is unknown
	}
	dst = append(dst, 1)
	dst = appendString(dst, r.Username)
	return appendString(dst, r.Realm)
}

func appendMessage(dst []byte, r *MessageRecord) []byte {
	dst = append(dst, recordVersion, flags(r.QoS, r.Retain))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Expiry))
	dst = appendBytes(dst, r.Topic)
	dst = appendBytes(dst, r.Props)
	return append(dst, r.Payload...)
}

func appendQueued(dst []byte, r *QueuedRecord) []byte {
	dst = append(dst, recordVersion)
	dst = binary.BigEndian.AppendUint64(dst, r.MessageID)
	dst = append(dst, flags(r.QoS, r.Retain), byte(r.State))
	dst = binary.BigEndian.AppendUint16(dst, r.PacketID)
	dst = binary.AppendUvarint(dst, uint64(len(r.SubIDs)))
	for _, id := range r.SubIDs {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	return dst
}

func appendRetained(dst []byte, messageID uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, recordVersion), messageID)
}

func appendWill(dst []byte, r *WillRecord) []byte {
	dst = append(dst, recordVersion, flags(r.QoS, r.Retain))
	dst = binary.BigEndian.AppendUint32(dst, r.Delay)
	dst = binary.BigEndian.AppendUint32(dst, r.MessageExpiry)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Deadline))
	dst = appendBytes(dst, r.Topic)
	dst = appendBytes(dst, r.Props)
	return append(dst, r.Payload...)
}

func flags(qos byte, retain bool) byte {
	f := qos & flagQoS
	if retain {
		f |= flagRetain
	}
	return f
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

func appendBytes(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

// A decoder reads one value. The first failure sticks: decoding goes on with zero values
// and err reports it, so the decode functions check once at the end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errShort
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uint16() uint16 {
	if len(d.b) < 2 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *decoder) uint32() uint32 {
	if len(d.b) < 4 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) uint64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns a length-prefixed field, aliasing the value.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// rest returns what is left, aliasing the value.
func (d *decoder) rest() []byte {
	v := d.b
	d.b = nil
	return v
}

// version reads the record version and fails on one this build does not know.
func (d *decoder) version() byte {
	v := d.byte()
	if d.err == nil && (v == 0 || v > recordVersion) {
		d.err = fmt.Errorf("record version %d", v)
	}
	return v
}

// done reports the first failure, or trailing bytes.
func (d *decoder) done() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	return d.err
}

var errShort = errorString("truncated")

type errorString string

func (e errorString) Error() string { return string(e) }

// flags reads a flags byte, failing on QoS 3 or bits that mean nothing yet.
func (d *decoder) flags() (qos byte, retain bool) {
	f := d.byte()
	if d.err == nil && (f&^(flagQoS|flagRetain) != 0 || f&flagQoS == 3) {
		d.err = fmt.Errorf("flags %#x", f)
	}
	return f & flagQoS, f&flagRetain != 0
}

// decodeSession decodes a session value into r, reusing r.Subscriptions' array.
func decodeSession(v []byte, r *SessionRecord) error {
	d := decoder{b: v}
	ver := d.version()
	r.Version = d.byte()
	r.Expiry = d.uint32()
	r.DisconnectedAt = int64(d.uint64())
	n := d.uvarint()
	if n > uint64(len(d.b)) { // each subscription takes at least 3 bytes
		d.fail()
	}
	r.Subscriptions = r.Subscriptions[:0]
	for i := uint64(0); i < n && d.err == nil; i++ {
		filter := d.bytes()
		opts := d.byte()
		id := d.uvarint()
		if d.err == nil && (opts&0xc0 != 0 || opts&subQoS == 3 || opts&subRetainHandling == 0x30 || id > 1<<32-1) {
			d.err = fmt.Errorf("subscription options %#x, id %d", opts, id)
		}
		r.Subscriptions = append(r.Subscriptions, SubRecord{
			Filter:            string(filter),
			ID:                uint32(id),
			QoS:               opts & subQoS,
			NoLocal:           opts&subNoLocal != 0,
			RetainAsPublished: opts&subRetainAsPublished != 0,
			RetainHandling:    opts & subRetainHandling >> 4,
		})
	}
	r.Owned, r.Username, r.Realm = false, "", ""
	if ver >= 2 {
		switch owned := d.byte(); {
		case d.err != nil:
		case owned == 1:
			r.Owned = true
			r.Username = string(d.bytes())
			r.Realm = string(d.bytes())
		case owned != 0:
			d.err = fmt.Errorf("session owner flag %d", owned)
		}
	}
	return d.done()
}

// decodeMessage decodes a message value into r; its slices alias v.
func decodeMessage(v []byte, r *MessageRecord) error {
	d := decoder{b: v}
	d.version()
	r.QoS, r.Retain = d.flags()
	r.Expiry = int64(d.uint64())
	r.Topic = d.bytes()
	r.Props = d.bytes()
	r.Payload = d.rest()
	return d.done()
}

// messageExpiry reads only the expiry of a message value.
func messageExpiry(v []byte) (int64, error) {
	d := decoder{b: v}
	d.version()
	d.byte()
	e := int64(d.uint64())
	return e, d.err
}

// decodeQueued decodes a queue entry into r, reusing r.SubIDs' array.
func decodeQueued(v []byte, r *QueuedRecord) error {
	d := decoder{b: v}
	d.version()
	r.MessageID = d.uint64()
	r.QoS, r.Retain = d.flags()
	r.State = QueuedState(d.byte())
	r.PacketID = d.uint16()
	n := d.uvarint()
	if n > uint64(len(d.b)) { // each id takes at least a byte
		d.fail()
	}
	r.SubIDs = r.SubIDs[:0]
	for i := uint64(0); i < n && d.err == nil; i++ {
		id := d.uvarint()
		if id > 1<<32-1 {
			d.err = fmt.Errorf("subscription id %d", id)
		}
		r.SubIDs = append(r.SubIDs, uint32(id))
	}
	if d.err == nil && r.State > StateReleased {
		d.err = fmt.Errorf("queue state %d", r.State)
	}
	return d.done()
}

func decodeRetained(v []byte) (uint64, error) {
	d := decoder{b: v}
	d.version()
	id := d.uint64()
	return id, d.done()
}

func decodeInbound(v []byte) error {
	d := decoder{b: v}
	d.version()
	return d.done()
}

// decodeWill decodes a will value into r; its slices alias v.
func decodeWill(v []byte, r *WillRecord) error {
	d := decoder{b: v}
	d.version()
	r.QoS, r.Retain = d.flags()
	r.Delay = d.uint32()
	r.MessageExpiry = d.uint32()
	r.Deadline = int64(d.uint64())
	r.Topic = d.bytes()
	r.Props = d.bytes()
	r.Payload = d.rest()
	return d.done()
}

// clientKey is a decoded client record key.
type clientKey struct {
	prefix []byte // the client's prefix, aliasing the key
	id     []byte // the client id, aliasing the key
	kind   byte
	seq    uint64 // kindQueued
	pid    uint16 // kindInbound
}

// parseClientKey splits a key under prefixClient.
func parseClientKey(k []byte) (clientKey, error) {
	if len(k) < 4 || k[0] != prefixClient {
		return clientKey{}, errShort
	}
	n := int(binary.BigEndian.Uint16(k[1:3]))
	if len(k) < 3+n+1 {
		return clientKey{}, errShort
	}
	c := clientKey{prefix: k[:3+n], id: k[3 : 3+n], kind: k[3+n]}
	rest := k[3+n+1:]
	switch c.kind {
	case kindSession, kindWill:
		if len(rest) != 0 {
			return c, errShort
		}
	case kindQueued:
		if len(rest) != 8 {
			return c, errShort
		}
		c.seq = binary.BigEndian.Uint64(rest)
	case kindInbound:
		if len(rest) != 2 {
			return c, errShort
		}
		c.pid = binary.BigEndian.Uint16(rest)
	default:
		return c, fmt.Errorf("record kind %#x", c.kind)
	}
	return c, nil
}

func parseMessageKey(k []byte) (uint64, error) {
	if len(k) != 9 || k[0] != prefixMessage {
		return 0, errShort
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

// clientUpper returns the end of the range of the client whose prefix is p: every record
// of the client sorts below it, every other key outside [p, clientUpper(p)).
func clientUpper(dst, prefix []byte) []byte {
	return append(append(dst, prefix...), kindEnd)
}
