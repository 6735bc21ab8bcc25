package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
	"github.com/hashicorp/raft"
)

// The on-disk format is drawn in the package doc; this file is its only encoder and
// decoder. Every constant below is written to disk: append values, never change or reuse
// one.

// Key prefixes, one per record kind.
const (
	prefixMeta   = 0x00 // the format-version record
	prefixLog    = 0x01 // log entries, by index
	prefixStable = 0x02 // stable-store values, by key, in format 1 (format 2 keeps them in the stable file)
)

// recordVersion is the first byte of every log and stable value. A build reads every
// record version up to its own and writes its own; formatVersion rises when a build
// writes something an older build cannot read.
const recordVersion = 1

// formatMagic and formatVersion make the value of the format-version record. Format 2
// keeps the stable values in the stable file (stable.go); Open moves those of a log of
// format 1 there.
const (
	formatMagic   = "bifrost-raft"
	formatVersion = 2
	oldestFormat  = 1
)

// Bits of a log record's flags byte. A record with a bit not named here is corrupt.
const (
	flagAppendedAt = 0x01 // an appendedAt field follows the term
	flagsKnown     = flagAppendedAt
)

// metaKey is the key of the format-version record.
var metaKey = []byte{prefixMeta, 'f', 'o', 'r', 'm', 'a', 't'}

// format is the format-version record, checked by every open.
var format = pebbledb.Format{Key: metaKey, Magic: formatMagic, Version: formatVersion, Oldest: oldestFormat,
	What: "Raft log", Foreign: ErrForeign, Newer: ErrVersion}

// Key bounds of the log, for iterators: every log key is in [logLower, logUpper).
var (
	logLower = []byte{prefixLog}
	logUpper = []byte{prefixLog + 1}
)

// Key bounds of the stable values of format 1.
var (
	stableLower = []byte{prefixStable}
	stableUpper = []byte{prefixStable + 1}
)

// logKeyLen is the length of a log entry's key: the prefix and the index.
const logKeyLen = 1 + 8

// ErrCorrupt marks a record that does not decode.
var ErrCorrupt = errors.New("raftstore: corrupt record")

// putLogKey writes the key of the entry at index into k, which is logKeyLen long.
func putLogKey(k []byte, index uint64) {
	k[0] = prefixLog
	binary.BigEndian.PutUint64(k[1:], index)
}

// logKeyAfter returns the smallest key above every log key up to index: the exclusive
// upper bound of a range that ends at index.
func logKeyAfter(index uint64) []byte {
	if index == ^uint64(0) {
		return logUpper
	}
	k := make([]byte, logKeyLen)
	putLogKey(k, index+1)
	return k
}

// logKeyIndex returns the index of a log key.
func logKeyIndex(k []byte) (uint64, error) {
	if len(k) != logKeyLen || k[0] != prefixLog {
		return 0, fmt.Errorf("%w: log key %x", ErrCorrupt, k)
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

func appendStableKey(dst, key []byte) []byte {
	return append(append(dst, prefixStable), key...)
}

// logLen returns the length of l's record: what appendLog appends.
func logLen(l *raft.Log) int {
	n := 3 + uvarintLen(l.Term) + uvarintLen(uint64(len(l.Extensions))) + len(l.Extensions) + len(l.Data)
	if !l.AppendedAt.IsZero() {
		n += 8
	}
	return n
}

// appendLog appends the record of l; its index is in the key. A zero AppendedAt is
// written as absent; any other is Unix nanoseconds, which hold the years 1678 to 2262.
func appendLog(dst []byte, l *raft.Log) []byte {
	var flags byte
	if !l.AppendedAt.IsZero() {
		flags |= flagAppendedAt
	}
	dst = append(dst, recordVersion, byte(l.Type), flags)
	dst = binary.AppendUvarint(dst, l.Term)
	if flags&flagAppendedAt != 0 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(l.AppendedAt.UnixNano()))
	}
	dst = binary.AppendUvarint(dst, uint64(len(l.Extensions)))
	dst = append(dst, l.Extensions...)
	return append(dst, l.Data...)
}

// decodeLog decodes the record of the entry at index into l. Data and Extensions are
// copied out of v, into one allocation, so l owns them; each is nil when empty. A record
// that does not decode is an error matching ErrCorrupt, and l is left as it was.
func decodeLog(index uint64, v []byte, l *raft.Log) error {
	corrupt := func(what string) error {
		return fmt.Errorf("%w: log %d: %s (%d bytes)", ErrCorrupt, index, what, len(v))
	}
	if len(v) < 3 {
		return corrupt("short record")
	}
	if v[0] == 0 || v[0] > recordVersion {
		return corrupt(fmt.Sprintf("record version %d", v[0]))
	}
	typ, flags := raft.LogType(v[1]), v[2]
	if flags&^flagsKnown != 0 {
		return corrupt(fmt.Sprintf("flags %#x", flags))
	}
	rest := v[3:]
	term, n := binary.Uvarint(rest)
	if n <= 0 {
		return corrupt("bad term")
	}
	rest = rest[n:]
	var appendedAt time.Time
	if flags&flagAppendedAt != 0 {
		if len(rest) < 8 {
			return corrupt("short appendedAt")
		}
		appendedAt = time.Unix(0, int64(binary.BigEndian.Uint64(rest)))
		rest = rest[8:]
	}
	extLen, n := binary.Uvarint(rest)
	if n <= 0 || extLen > uint64(len(rest)-n) {
		return corrupt("bad extensions length")
	}
	rest = rest[n:]
	var ext, data []byte
	if len(rest) > 0 {
		buf := make([]byte, len(rest))
		copy(buf, rest)
		ext, data = buf[:extLen:extLen], buf[extLen:]
		if extLen == 0 {
			ext = nil
		}
		if len(data) == 0 {
			data = nil
		}
	}
	*l = raft.Log{Index: index, Term: term, Type: typ, Data: data, Extensions: ext, AppendedAt: appendedAt}
	return nil
}

// appendStable appends the record of a stable value.
func appendStable(dst, val []byte) []byte {
	return append(append(dst, recordVersion), val...)
}

// decodeStable returns the value in a stable record, aliasing v.
func decodeStable(key, v []byte) ([]byte, error) {
	if len(v) < 1 || v[0] == 0 || v[0] > recordVersion {
		return nil, fmt.Errorf("%w: stable value %q: %x", ErrCorrupt, key, v)
	}
	return v[1:], nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
