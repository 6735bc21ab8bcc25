package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The log engine's file, store.log in the store's directory:
//
//	file    = header record*
//	header  = "BIFROSTL" | logVersion(1) | formatVersion(1)
//	record  = length(4) | crc(4) | synced(8) | payload(length)
//	payload = op*, as a Batch encodes them (batch.go):
//	          op(1) keyLen(4) key [valueLen(4) value]
//
// Integers are little-endian. crc is the CRC-32C (Castagnoli) of length, synced and the
// payload. A committed batch is one record, so a batch is atomic on disk; a compaction
// writes the live records as sets, up to 64 KiB of them per record. synced is the
// length of the file that was durable (fsynced) when the record was written: the
// records that claim more than an offset prove that the bytes there had been
// acknowledged under sync: always, which is how open tells corruption of acknowledged
// data (an error) from the torn tail of a write that power loss cut short (cut away).
//
// Open reads the records in order. At the first one that is short, has a length of 0 or
// beyond the file, or a crc that does not match, it looks for proof further on: a whole
// record (crc and all) whose synced lies past the bad offset. With proof, open fails
// with ErrCorrupt naming the file and the offset; without, the file is cut at the last
// whole record and open goes on, logging what it cut. Corruption of the last records
// written, beyond every later claim, is indistinguishable from a torn write and is cut
// the same way; everything an acknowledged group was followed by a later group's claim
// is protected.

// logName and logTmpName are the log engine's files in the store's directory; lockName
// is the file its lock (lock.go) is taken on, as Pebble's is.
const (
	logName    = "store.log"
	logTmpName = "store.log.tmp"
	lockName   = "LOCK"
)

// logMagic, logVersion: the header. logVersion rises when the framing changes; the
// records' own format is formatVersion (format.go).
const (
	logMagic      = "BIFROSTL"
	logVersion    = 1
	logHeaderSize = len(logMagic) + 2
	recHeaderSize = 16
)

// logChunk is the most the engine hands to the OS in one write, and the largest
// record a compaction writes: flash's erase blocks favour large writes, and the
// article bifrost grew from wrote in 64 KB buffered chunks.
const logChunk = 64 << 10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func logHeader() []byte {
	return append([]byte(logMagic), logVersion, formatVersion)
}

// appendRecord appends the record of payload to dst.
func appendRecord(dst []byte, synced int64, payload []byte) []byte {
	var h [recHeaderSize]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(h[8:], uint64(synced))
	binary.LittleEndian.PutUint32(h[4:], recordCRC(h[:], payload))
	return append(append(dst, h[:]...), payload...)
}

func recordCRC(h, payload []byte) uint32 {
	c := crc32.Update(0, castagnoli, h[0:4])
	c = crc32.Update(c, castagnoli, h[8:16])
	return crc32.Update(c, castagnoli, payload)
}

// checkHeader checks the header of the log file at path.
func checkHeader(h []byte, path string) error {
	switch {
	case len(h) < logHeaderSize || string(h[:len(logMagic)]) != logMagic:
		return fmt.Errorf("%w: %s is not a bifrost log (header %q)", ErrForeign, path, h)
	case h[len(logMagic)] != logVersion:
		return fmt.Errorf("%w: %s is a log of version %d; this build reads version %d",
			ErrVersion, path, h[len(logMagic)], logVersion)
	case h[len(logMagic)+1] > formatVersion || h[len(logMagic)+1] < oldestFormat:
		return fmt.Errorf("%w: %s holds a store of format %d; this build reads format %d",
			ErrVersion, path, h[len(logMagic)+1], formatVersion)
	}
	return nil
}

// scanLog reads the records of the log file f of size bytes, header excluded, and
// calls fn with each payload, valid until fn returns, and its offset in the file. It returns the offset after the last whole record: size, unless the
// tail is torn. A corrupt record that a later one proves was acknowledged fails with
// ErrCorrupt naming path and its offset.
func scanLog(f io.ReaderAt, size int64, path string, fn func(payload []byte, off int64) error) (end int64, err error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), logChunk)
	if _, err := r.Discard(logHeaderSize); err != nil {
		return 0, fmt.Errorf("store: read %s: %w", path, err)
	}
	var h [recHeaderSize]byte
	var payload []byte
	off := int64(logHeaderSize)
	for off < size {
		bad := ""
		n := int64(0)
		if _, err := io.ReadFull(r, h[:]); err != nil {
			bad = "a short record header"
		} else if n = int64(binary.LittleEndian.Uint32(h[0:])); n == 0 || off+recHeaderSize+n > size {
			bad = fmt.Sprintf("a record length of %d", n)
		} else {
			payload = grow(payload, int(n))
			if _, err := io.ReadFull(r, payload); err != nil {
				return off, fmt.Errorf("store: read %s: %w", path, err)
			}
			if binary.LittleEndian.Uint32(h[4:]) != recordCRC(h[:], payload) {
				bad = "a checksum mismatch"
			}
		}
		if bad != "" {
			proof, err := provedSynced(f, off, size)
			if err != nil {
				return off, fmt.Errorf("store: read %s: %w", path, err)
			}
			if proof >= 0 {
				return off, fmt.Errorf("%w: %s: %s at offset %d, before the record at offset %d that was written after it was made durable",
					ErrCorrupt, path, bad, off, proof)
			}
			return off, nil
		}
		if err := fn(payload, off+recHeaderSize); err != nil {
			return off, fmt.Errorf("%s at offset %d: %w", path, off, err)
		}
		off += recHeaderSize + n
	}
	return off, nil
}

// grow returns b resized to n bytes, reallocated only if too small.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// provedSynced looks in (bad, size) for a whole record claiming that the file was
// durable past bad, and returns its offset, or -1 if there is none. It reads a window
// at a time and checks the crc only where the header's synced is in range, which
// random bytes almost never are.
func provedSynced(f io.ReaderAt, bad, size int64) (int64, error) {
	const window = 1 << 20
	buf := make([]byte, window+recHeaderSize)
	var payload []byte
	for start := bad + 1; start+recHeaderSize <= size; start += window {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-start)], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return -1, err
		}
		for i := 0; i+recHeaderSize <= n && i < window; i++ {
			p := start + int64(i)
			h := buf[i : i+recHeaderSize]
			length := int64(binary.LittleEndian.Uint32(h[0:]))
			synced := int64(binary.LittleEndian.Uint64(h[8:]))
			if synced <= bad || synced > p || length == 0 || p+recHeaderSize+length > size {
				continue
			}
			payload = grow(payload, int(length))
			if _, err := f.ReadAt(payload, p+recHeaderSize); err != nil {
				return -1, err
			}
			if binary.LittleEndian.Uint32(h[4:]) == recordCRC(h, payload) {
				return p, nil
			}
		}
	}
	return -1, nil
}
