package listener

import (
	"encoding/binary"
	"strconv"
)

// The receiving side of RFC 6455 framing, for ws and wss on both engines: a decoder that
// turns the bytes a client sends into the MQTT bytes they carry, without buffering
// messages. MQTT over WebSocket is a byte stream cut into binary messages anywhere (MQTT
// 5.0 section 6.0: a message may hold part of a packet or several), so the payload of
// every binary frame is handed on as it arrives, unmasked in place in the reader's buffer;
// message boundaries only matter for checking the sequence of frames. What a connection
// keeps between reads is a wsStream, and an idle connection, between two complete frames,
// keeps none on the epoll engine (epoll_ws_linux.go holds one only while a frame is cut by
// the end of a read).

// wsStream is the decoder's state between reads.
type wsStream struct {
	remaining uint64  // payload bytes of the current data frame still to come
	mask      [4]byte // its masking key
	maskPos   uint8   // index into mask of the next payload byte
	inMessage bool    // a fragmented binary message is open: continuation frames come next
	held      []byte  // the start of a frame cut by the end of a read (header or control frame)
}

// idle reports whether the stream is between two frames with nothing held: the state a
// connection need not keep.
func (w *wsStream) idle() bool { return w.remaining == 0 && !w.inMessage && len(w.held) == 0 }

// start returns the bytes to decode after a read of data: data itself, or what was held
// from the last read followed by data.
func (w *wsStream) start(data []byte) []byte {
	if len(w.held) == 0 {
		return data
	}
	w.held = append(w.held, data...)
	return w.held
}

// keep holds rest, the tail of what start returned that could not be decoded yet, for the
// next read (rest may be the tail of w.held: the copy moves it to the front).
func (w *wsStream) keep(rest []byte) {
	if len(rest) == 0 {
		w.held = nil // it may have grown by a whole read
		return
	}
	w.held = append(w.held[:0], rest...)
}

// What next found.
const (
	wsNeedMore = iota // an incomplete frame start: hold the bytes and wait for more
	wsPayload         // message bytes (possibly none: a frame header was consumed)
	wsPing
	wsPongFrame
	wsCloseFrame
)

// RFC 6455 section 5.2 opcodes we receive (wsBinary, wsClose and wsPong are in ws.go).
const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsPing0        = 0x9
)

// wsMaxControl is the largest control frame payload (RFC 6455 section 5.5).
const wsMaxControl = 125

// A wsError is a violation of the framing: the connection is closed with its status code
// (RFC 6455 section 7.4.1) in the close frame.
type wsError struct {
	code uint16
	msg  string
}

func (e *wsError) Error() string {
	return "listener: WebSocket " + strconv.Itoa(int(e.code)) + ": " + e.msg
}

var (
	errWSReserved     = &wsError{1002, "reserved bits set"}
	errWSUnmasked     = &wsError{1002, "client frame not masked"}
	errWSOpcode       = &wsError{1002, "reserved opcode"}
	errWSControl      = &wsError{1002, "control frame fragmented or over 125 bytes"}
	errWSContinuation = &wsError{1002, "continuation frame outside a message"}
	errWSInterleaved  = &wsError{1002, "new message before the end of a fragmented one"}
	errWSLength       = &wsError{1002, "frame length with the top bit set"}
	errWSCloseLength  = &wsError{1002, "close frame with a one-byte payload"}
	// Spec [MQTT-6.0.0-1]: a text message closes the connection.
	errWSText = &wsError{1003, "text message: MQTT needs binary messages"}
)

// next decodes from data, which starts where the last call left off, and reports what it
// found and how many bytes of data it consumed:
//   - wsPayload: payload is message bytes, unmasked in place (empty when only a data
//     frame's header was consumed);
//   - wsPing, wsPongFrame, wsCloseFrame: a whole control frame, payload unmasked;
//   - wsNeedMore: data (not empty) starts a frame header or control frame that it does
//     not hold whole; nothing is consumed: call again with more bytes after these.
//
// It allocates nothing. An error is a violation; the stream is then unusable.
func (w *wsStream) next(data []byte) (kind int, payload []byte, n int, err error) {
	if w.remaining > 0 {
		k := min(uint64(len(data)), w.remaining)
		p := data[:k]
		w.maskPos = unmask(p, w.mask, w.maskPos)
		w.remaining -= k
		return wsPayload, p, int(k), nil
	}
	if len(data) < 2 {
		return wsNeedMore, nil, 0, nil
	}
	b0, b1 := data[0], data[1]
	fin, op := b0&0x80 != 0, b0&0x0F
	if b0&0x70 != 0 {
		return 0, nil, 0, errWSReserved
	}
	if b1&0x80 == 0 {
		return 0, nil, 0, errWSUnmasked // RFC 6455 section 5.1
	}
	hl := 2 + 4
	switch b1 & 0x7F {
	case 126:
		hl += 2
	case 127:
		hl += 8
	}
	if len(data) < hl {
		return wsNeedMore, nil, 0, nil
	}
	var length uint64
	switch b1 & 0x7F {
	case 126:
		length = uint64(binary.BigEndian.Uint16(data[2:]))
	case 127:
		length = binary.BigEndian.Uint64(data[2:])
		if length>>63 != 0 {
			return 0, nil, 0, errWSLength
		}
	default:
		length = uint64(b1 & 0x7F)
	}
	var mask [4]byte
	copy(mask[:], data[hl-4:hl])

	if op >= 0x8 { // control
		if !fin || length > wsMaxControl {
			return 0, nil, 0, errWSControl
		}
		end := hl + int(length)
		if len(data) < end {
			return wsNeedMore, nil, 0, nil
		}
		p := data[hl:end]
		unmask(p, mask, 0)
		switch op {
		case wsPing0:
			return wsPing, p, end, nil
		case wsPong:
			return wsPongFrame, p, end, nil
		case wsClose:
			if length == 1 {
				return 0, nil, 0, errWSCloseLength
			}
			return wsCloseFrame, p, end, nil
		}
		return 0, nil, 0, errWSOpcode
	}
	switch op {
	case wsContinuation:
		if !w.inMessage {
			return 0, nil, 0, errWSContinuation
		}
	case wsBinary:
		if w.inMessage {
			return 0, nil, 0, errWSInterleaved
		}
	case wsText:
		return 0, nil, 0, errWSText
	default:
		return 0, nil, 0, errWSOpcode
	}
	w.inMessage = !fin
	w.remaining, w.mask, w.maskPos = length, mask, 0
	return wsPayload, nil, hl, nil
}

// unmask XORs p with the masking key from position pos and returns the position after it.
func unmask(p []byte, mask [4]byte, pos uint8) uint8 {
	i := 0
	// Eight bytes at a time once aligned with the key.
	for ; pos&3 != 0 && i < len(p); i++ {
		p[i] ^= mask[pos&3]
		pos++
	}
	if len(p)-i >= 8 {
		k := uint64(binary.LittleEndian.Uint32(mask[:]))
		k |= k << 32
		for ; len(p)-i >= 8; i += 8 {
			binary.LittleEndian.PutUint64(p[i:], binary.LittleEndian.Uint64(p[i:])^k)
		}
	}
	for ; i < len(p); i++ {
		p[i] ^= mask[pos&3]
		pos++
	}
	return pos & 3
}
