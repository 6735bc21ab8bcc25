package store

import "encoding/binary"

// A Batch is a set of changes that Commit applies atomically: after a crash either all of
// them are on disk or none is. The zero Batch is empty and ready to use.
//
// Each method encodes its record into the batch at once, so the caller may reuse the
// slices it passed as soon as the method returns. Methods taking a client id panic if it
// is longer than 65535 bytes, which MQTT cannot carry. A Batch is not safe for concurrent
// use. Once passed to Commit it belongs to the store until done is called; then the
// caller may Reset and reuse it.
type Batch struct {
	// data holds the operations, each as
	//
	//	op(1) keyLen(4, LE) key [valueLen(4, LE) value]
	//
	// where op is opSet (with a value), opDelete, or opDeleteRange (the value is the end
	// key). Lengths are fixed-size so a key or value can be encoded in place and its
	// length filled in after.
	data []byte
	n    int // operations in data
	mark int // offset in data of the length field being written
}

// Operations of a Batch.
const (
	opSet         = 1
	opDelete      = 2
	opDeleteRange = 3
)

// maxRetainedBatch is the largest buffer Reset keeps: a spike's buffer is handed back.
const maxRetainedBatch = 64 << 10

// Reset empties b, keeping its buffer unless a spike made it large.
func (b *Batch) Reset() {
	if cap(b.data) > maxRetainedBatch {
		b.data = nil
	}
	b.data, b.n = b.data[:0], 0
}

// Len returns the number of operations in b.
func (b *Batch) Len() int { return b.n }

// Size returns the bytes b holds, about what it adds to the write-ahead log.
func (b *Batch) Size() int { return len(b.data) }

// PutSession writes a session record, replacing any with the same client id. It leaves
// the client's other records alone.
func (b *Batch) PutSession(r SessionRecord) {
	b.data = appendClientPrefix(b.begin(opSet), r.ClientID)
	b.data = append(b.data, kindSession)
	b.value()
	b.data = appendSession(b.data, &r)
	b.end()
}

// DeleteSession deletes every record of clientID: its session, queue and inflight
// entries, inbound packet ids and will, with one range deletion. The messages its queue
// referred to stay: the caller deletes those it no longer needs in the same batch.
func (b *Batch) DeleteSession(clientID string) {
	b.data = appendClientPrefix(b.begin(opDeleteRange), clientID)
	b.value()
	b.data = append(appendClientPrefix(b.data, clientID), kindEnd)
	b.end()
}

// PutMessage writes the message with id, which queue entries and retained topics refer
// to. Ids are the caller's; the store never reuses or allocates them.
func (b *Batch) PutMessage(id uint64, r MessageRecord) {
	b.data = appendMessageKey(b.begin(opSet), id)
	b.value()
	b.data = appendMessage(b.data, &r)
	b.end()
}

// DeleteMessage deletes the message with id.
func (b *Batch) DeleteMessage(id uint64) {
	b.data = appendMessageKey(b.begin(opDelete), id)
	b.end()
}

// PutQueued writes entry seq of clientID's outbound queue: a message waiting to be sent
// or in flight. Load returns a client's entries in seq order.
func (b *Batch) PutQueued(clientID string, seq uint64, r QueuedRecord) {
	b.data = appendQueuedKey(b.begin(opSet), clientID, seq)
	b.value()
	b.data = appendQueued(b.data, &r)
	b.end()
}

// DeleteQueued deletes entry seq of clientID's outbound queue.
func (b *Batch) DeleteQueued(clientID string, seq uint64) {
	b.data = appendQueuedKey(b.begin(opDelete), clientID, seq)
	b.end()
}

// PutInbound records that clientID's QoS 2 PUBLISH with packet id pid was received and
// awaits its PUBREL.
func (b *Batch) PutInbound(clientID string, pid uint16) {
	b.data = appendInboundKey(b.begin(opSet), clientID, pid)
	b.value()
	b.data = append(b.data, recordVersion)
	b.end()
}

// DeleteInbound deletes the inbound packet id pid of clientID (its PUBREL arrived).
func (b *Batch) DeleteInbound(clientID string, pid uint16) {
	b.data = appendInboundKey(b.begin(opDelete), clientID, pid)
	b.end()
}

// PutRetained makes the message with messageID the retained message of topic.
func (b *Batch) PutRetained(topic string, messageID uint64) {
	b.data = appendRetainedKey(b.begin(opSet), topic)
	b.value()
	b.data = appendRetained(b.data, messageID)
	b.end()
}

// DeleteRetained clears the retained message of topic.
func (b *Batch) DeleteRetained(topic string) {
	b.data = appendRetainedKey(b.begin(opDelete), topic)
	b.end()
}

// PutWill writes clientID's will, replacing any.
func (b *Batch) PutWill(clientID string, r WillRecord) {
	b.data = appendClientPrefix(b.begin(opSet), clientID)
	b.data = append(b.data, kindWill)
	b.value()
	b.data = appendWill(b.data, &r)
	b.end()
}

// DeleteWill deletes clientID's will.
func (b *Batch) DeleteWill(clientID string) {
	b.data = appendClientPrefix(b.begin(opDelete), clientID)
	b.data = append(b.data, kindWill)
	b.end()
}

// deleteKey and deleteRange are the raw operations of Load's sweep.
func (b *Batch) deleteKey(k []byte) {
	b.data = append(b.begin(opDelete), k...)
	b.end()
}

func (b *Batch) deleteRange(start, end []byte) {
	b.data = append(b.begin(opDeleteRange), start...)
	b.value()
	b.data = append(b.data, end...)
	b.end()
}

// The encoding of one operation: begin writes op and a placeholder key length and
// returns data for the key to be appended; value fills in the key's length and opens the
// value; end fills in the length of the last field.
func (b *Batch) begin(op byte) []byte {
	b.data = append(b.data, op, 0, 0, 0, 0)
	b.mark = len(b.data) - 4
	return b.data
}

func (b *Batch) value() {
	b.closeField()
	b.data = append(b.data, 0, 0, 0, 0)
	b.mark = len(b.data) - 4
}

func (b *Batch) end() {
	b.closeField()
	b.n++
}

func (b *Batch) closeField() {
	binary.LittleEndian.PutUint32(b.data[b.mark:], uint32(len(b.data)-b.mark-4))
}

// op decodes the operation at offset off of b.data and returns the offset of the next;
// key and value alias b. Iterate with
//
//	for off := 0; off < len(b.data); { op, key, value, off = b.op(off) ... }
func (b *Batch) op(off int) (op byte, key, value []byte, next int) {
	d := b.data[off:]
	op = d[0]
	n := int(binary.LittleEndian.Uint32(d[1:]))
	key, next = d[5:5+n:5+n], off+5+n
	if op != opDelete {
		d = b.data[next:]
		n = int(binary.LittleEndian.Uint32(d))
		value, next = d[4:4+n:4+n], next+4+n
	}
	return op, key, value, next
}
