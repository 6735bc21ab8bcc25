// Package packettest reads MQTT packets off a stream for tests that play a raw client
// against the broker (test/interop, test/hostile): one packet at a time, without the
// broker's buffering Reader, so that a test sees exactly what was sent and when.
package packettest

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// ReadPacket reads one packet of version v: the fixed header byte by byte, then the body
// it announces. A close between packets returns io.EOF; a close inside one,
// io.ErrUnexpectedEOF. A 5.0 CONNACK of two bytes is decoded as 3.1.1: that is how a
// broker refuses a protocol version it does not support.
func ReadPacket(br *bufio.Reader, v packet.Version) (packet.Packet, error) {
	hdr := make([]byte, 0, 5)
	b, err := br.ReadByte()
	if err != nil {
		return nil, err
	}
	hdr = append(hdr, b)
	for {
		b, err := br.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("fixed header: %w", noEOF(err))
		}
		hdr = append(hdr, b)
		if b&0x80 == 0 || len(hdr) == 5 {
			break
		}
	}
	h, _, err := packet.ParseHeader(hdr, v)
	if err != nil {
		return nil, fmt.Errorf("broker sent %x: %w", hdr, err)
	}
	body := make([]byte, h.Remaining)
	if _, err := io.ReadFull(br, body); err != nil {
		return nil, fmt.Errorf("%v body: %w", h.Type, noEOF(err))
	}
	if h.Type == packet.CONNACK && v == packet.V5 && h.Remaining == 2 {
		v = packet.V311
	}
	p, err := packet.Decode(h, body, v)
	if err != nil {
		return nil, fmt.Errorf("broker sent a %v that does not decode (%x): %w", h.Type, body, err)
	}
	return p, nil
}

// noEOF turns an end of stream inside a packet into io.ErrUnexpectedEOF, so that only a
// close between packets reads as a graceful io.EOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
