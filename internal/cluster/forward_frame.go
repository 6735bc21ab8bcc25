package cluster

import (
	"encoding/binary"
	"errors"
)

// A frame is one forwarded message in a ForwardBatch's frames, read in place by the
// receiving node (the topic, payload and properties alias the batch's buffer):
//
//	seq        uvarint   the sender's sequence number (de-duplication, acknowledgements)
//	flags      byte      bits 0-1 QoS, 0x04 retain, 0x08 offline_ok, 0x10 a share follows
//	expiry_ms  uvarint   message expiry left when sent, milliseconds; 0: none
//	topic      uvarint length, bytes
//	payload    uvarint length, bytes
//	props      uvarint length, bytes: the publisher's pass-through v5 properties, encoded
//	share      uvarint length, bytes: "$share/{group}/{filter}", only with flag 0x10: one
//	           member of that group takes it, or the receiver answers none online
//
// Flags are added, never reused: nodes of neighbouring versions talk during an upgrade.

const (
	frameQoS       = 0x03
	frameRetain    = 0x04
	frameOfflineOK = 0x08
	frameShare     = 0x10
)

var errFrame = errors.New("cluster: a forwarded frame is cut short")

// frame is a decoded frame; its byte slices alias the batch.
type frame struct {
	seq       uint64
	expiryMS  uint64
	topic     []byte
	payload   []byte
	props     []byte
	share     []byte
	qos       uint8
	retain    bool
	offlineOK bool
}

// appendFrame appends o's frame, with expiryMS left, to b.
func appendFrame(b []byte, o *outMsg, expiryMS uint64) []byte {
	b = binary.AppendUvarint(b, o.seq)
	flags := o.qos & frameQoS
	if o.retain {
		flags |= frameRetain
	}
	if o.offlineOK {
		flags |= frameOfflineOK
	}
	if o.share != "" {
		flags |= frameShare
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, expiryMS)
	for _, f := range [...][]byte{o.topic(), o.payload(), o.props()} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	if o.share != "" {
		b = binary.AppendUvarint(b, uint64(len(o.share)))
		b = append(b, o.share...)
	}
	return b
}

// readFrame decodes the frame at the start of b into f and returns the rest of b.
func readFrame(b []byte, f *frame) ([]byte, error) {
	var ok bool
	if f.seq, b, ok = uvarint(b); !ok || len(b) == 0 {
		return nil, errFrame
	}
	flags := b[0]
	b = b[1:]
	f.qos, f.retain, f.offlineOK = flags&frameQoS, flags&frameRetain != 0, flags&frameOfflineOK != 0
	if f.expiryMS, b, ok = uvarint(b); !ok {
		return nil, errFrame
	}
	fields := [...]*[]byte{&f.topic, &f.payload, &f.props, &f.share}
	n := 3
	if flags&frameShare != 0 {
		n = 4
	}
	f.share = nil
	for _, p := range fields[:n] {
		var l uint64
		if l, b, ok = uvarint(b); !ok || l > uint64(len(b)) {
			return nil, errFrame
		}
		*p, b = b[:l:l], b[l:]
	}
	return b, nil
}

func uvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}
