package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	iofs "io/fs"
	"log/slog"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The stable file holds what raft keeps in its StableStore: its current term and its last
// vote (CurrentTerm, LastVoteTerm, LastVoteCand), and any other key a caller sets.
// hashicorp/raft stops the process when it cannot save its term, so that write must not
// need space: the file has a fixed size, written whole when it is created, and each
// later write overwrites one of its two slots in place, which takes no new block on a
// file system that writes in place (ext4, XFS, tmpfs). The slots take turns, so a write
// cut short leaves the other one intact. Its format is drawn in the package doc.

// Sizes of the stable file: two slots of a page each, so that a torn write of one never
// reaches the other.
const (
	stableName   = "stable" // in the Raft log's directory, beside Pebble's files (it ignores others)
	stableSlot   = 4096
	stableSize   = 2 * stableSlot
	stableHeader = 32
)

// stableMagic and stableVersion begin every slot written.
const (
	stableMagic   = "bifrost-stable"
	stableVersion = 1
)

// errStableFull is the error of a Set whose values would not fit in a slot: raft's take
// a few dozen bytes.
var errStableFull = errors.New("raftstore: the stable values would take more than a slot of the stable file")

// errSlotTorn marks a slot that does not hold an intact write (a write cut short),
// errSlotEmpty one never written, errSlotNewer one of a newer version than this build
// reads.
var (
	errSlotTorn  = errors.New("torn")
	errSlotEmpty = errors.New("never written")
	errSlotNewer = errors.New("a slot of a newer format")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// stable is the stable file of a Store: its values in memory, read by get, and the file
// that set writes. Its methods are safe for concurrent use.
type stable struct {
	path string
	mu   sync.RWMutex // held shared by get, exclusively by set and close
	f    vfs.File     // opened for writing; nil once closed
	seq  uint64       // of the newest intact slot
	cur  int          // the newest intact slot: set writes the other
	vals map[string][]byte
	buf  []byte // a slot, reused by every set
}

// createStable creates the stable file in dir on fs holding vals, replacing any there,
// and syncs it and dir. It writes a temporary file and renames it: a crash leaves the
// older file, or none, or the new one whole.
func createStable(fs vfs.FS, dir string, vals map[string][]byte) error {
	b := make([]byte, stableSize) // slot 0 zeros: never written, but its blocks are the file's
	if err := putSlot(b[stableSlot:], 1, vals); err != nil {
		return err
	}
	tmp := fs.PathJoin(dir, stableName+".tmp")
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err == nil {
		err = fs.Rename(tmp, fs.PathJoin(dir, stableName))
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// openStable opens the stable file in dir on fs and reads its newest intact slot. A
// missing file, a file of another size, one without an intact slot and one with a slot
// whose values do not decode despite its checksum are errors matching ErrCorrupt; one
// with a slot of a newer version is ErrVersion: the node must not start without its term
// and vote, nor with older ones. A torn slot beside an intact one is logged: a write cut
// short, never acknowledged.
func openStable(fs vfs.FS, dir string, log *slog.Logger) (*stable, error) {
	path := fs.PathJoin(dir, stableName)
	fi, err := fs.Stat(path)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s: the file of Raft's term and vote is missing (a node without it could vote twice in a term: restore the directory from a backup)", ErrCorrupt, path)
	case err != nil:
		return nil, fmt.Errorf("raftstore: open %s: %w", path, err)
	case fi.Size() != stableSize:
		return nil, fmt.Errorf("%w: %s: the file of Raft's term and vote is %d bytes, not %d", ErrCorrupt, path, fi.Size(), stableSize)
	}
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open %s: %w", path, err)
	}
	b := make([]byte, stableSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("raftstore: read %s: %w", path, err)
	}
	s := &stable{path: path, f: f, buf: make([]byte, stableSlot)}
	var errs [2]error
	found := false
	for i := range 2 {
		seq, vals, err := readSlot(b[i*stableSlot : (i+1)*stableSlot])
		if errs[i] = err; err == nil && (!found || seq > s.seq) {
			s.seq, s.cur, s.vals, found = seq, i, vals, true
		}
	}
	for _, err := range errs {
		switch {
		case errors.Is(err, errSlotNewer):
			_ = f.Close()
			return nil, fmt.Errorf("%w: %s: the file of Raft's term and vote: %w", ErrVersion, path, err)
		case errors.Is(err, ErrCorrupt): // its checksum matched: not a write cut short
			_ = f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if !found {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s: neither slot of the file of Raft's term and vote is intact (%v, %v)", ErrCorrupt, path, errs[0], errs[1])
	}
	if other := errs[1-s.cur]; other != nil && !errors.Is(other, errSlotEmpty) {
		log.Warn("raftstore: a slot of the file of Raft's term and vote does not hold an intact write (one cut short, never acknowledged); the other holds the term and vote",
			slog.String("file", path), slog.Int("slot", 1-s.cur), slog.String("err", other.Error()), slog.Uint64("seq", s.seq))
	}
	return s, nil
}

// get returns a copy of the value of key, and whether there is one.
func (s *stable) get(key []byte) ([]byte, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.f == nil {
		return nil, false, ErrClosed
	}
	v, ok := s.vals[string(key)]
	if !ok {
		return nil, false, nil
	}
	return append(make([]byte, 0, len(v)), v...), true, nil
}

// set stores val under key: it writes every value into the slot that does not hold the
// newest, syncs it, and only then makes it the newest. A failed write leaves the newest
// slot as it was, and the values too; the next set writes the same slot again.
func (s *stable) set(key, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return ErrClosed
	}
	next := make(map[string][]byte, len(s.vals)+1)
	for k, v := range s.vals {
		next[k] = v
	}
	next[string(key)] = append(make([]byte, 0, len(val)), val...)
	if err := putSlot(s.buf, s.seq+1, next); err != nil {
		return err
	}
	slot := 1 - s.cur
	if _, err := s.f.WriteAt(s.buf, int64(slot*stableSlot)); err != nil {
		return err
	}
	if err := s.f.SyncData(); err != nil {
		return err
	}
	s.seq, s.cur, s.vals = s.seq+1, slot, next
	return nil
}

// close closes the file; get and set return ErrClosed from then on.
func (s *stable) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// putSlot writes the slot of sequence number seq holding vals into b, stableSlot long:
// the header, the values in key order, zeros to the end.
func putSlot(b []byte, seq uint64, vals map[string][]byte) error {
	clear(b)
	copy(b, stableMagic)
	b[len(stableMagic)] = stableVersion
	binary.BigEndian.PutUint64(b[16:], seq)
	p := b[stableHeader:stableHeader]
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := vals[k]
		n := uvarintLen(uint64(len(k))) + len(k) + uvarintLen(uint64(len(v))) + len(v)
		if len(p)+n > stableSlot-stableHeader {
			return fmt.Errorf("%w (%d bytes with %q)", errStableFull, len(p)+n, k)
		}
		p = binary.AppendUvarint(p, uint64(len(k)))
		p = append(p, k...)
		p = binary.AppendUvarint(p, uint64(len(v)))
		p = append(p, v...)
	}
	binary.BigEndian.PutUint32(b[24:], uint32(len(p)))
	crc := crc32.Update(crc32.Checksum(b[:28], castagnoli), castagnoli, p)
	binary.BigEndian.PutUint32(b[28:], crc)
	return nil
}

// readSlot returns the sequence number and the values of slot b. A slot of zeros is
// errSlotEmpty, one whose header or checksum does not match errSlotTorn, one of a newer
// version errSlotNewer; one whose values do not decode despite its checksum ErrCorrupt.
func readSlot(b []byte) (seq uint64, vals map[string][]byte, err error) {
	switch {
	case !bytes.HasPrefix(b, []byte(stableMagic)):
		if !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
			return 0, nil, errSlotEmpty
		}
		return 0, nil, fmt.Errorf("%w: no header", errSlotTorn)
	case b[len(stableMagic)] > stableVersion:
		return 0, nil, fmt.Errorf("%w: version %d; this build reads %d", errSlotNewer, b[len(stableMagic)], stableVersion)
	case b[len(stableMagic)] == 0 || b[len(stableMagic)+1] != 0:
		return 0, nil, fmt.Errorf("%w: header %x", errSlotTorn, b[:stableHeader])
	}
	seq = binary.BigEndian.Uint64(b[16:])
	n := binary.BigEndian.Uint32(b[24:])
	if n > stableSlot-stableHeader {
		return 0, nil, fmt.Errorf("%w: length %d", errSlotTorn, n)
	}
	p := b[stableHeader : stableHeader+n]
	if crc := crc32.Update(crc32.Checksum(b[:28], castagnoli), castagnoli, p); crc != binary.BigEndian.Uint32(b[28:]) {
		return 0, nil, fmt.Errorf("%w: checksum mismatch (seq %d)", errSlotTorn, seq)
	}
	vals = make(map[string][]byte)
	for len(p) > 0 {
		var k, v []byte
		if k, p, err = uvarintBytes(p); err == nil {
			v, p, err = uvarintBytes(p)
		}
		if err != nil {
			return 0, nil, fmt.Errorf("%w: stable file slot of seq %d: %w", ErrCorrupt, seq, err)
		}
		vals[string(k)] = append(make([]byte, 0, len(v)), v...)
	}
	return seq, vals, nil
}

// uvarintBytes splits a length-prefixed field off p.
func uvarintBytes(p []byte) (field, rest []byte, err error) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return nil, nil, errors.New("bad length")
	}
	return p[k : k+int(n)], p[k+int(n):], nil
}

// pebbleStable returns the stable values a Raft log of format 1 holds in db.
func pebbleStable(db *pebble.DB) (map[string][]byte, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: stableLower, UpperBound: stableUpper})
	if err != nil {
		return nil, err
	}
	vals := make(map[string][]byte)
	for ok := it.First(); ok && err == nil; ok = it.Next() {
		key := it.Key()[1:]
		var v []byte
		if v, err = decodeStable(key, it.Value()); err == nil {
			vals[string(key)] = append(make([]byte, 0, len(v)), v...)
		}
	}
	if err := errors.Join(err, it.Error(), it.Close()); err != nil {
		return nil, err
	}
	return vals, nil
}
