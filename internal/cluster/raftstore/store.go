package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
)

// ErrClosed is returned by every method of a closed Store.
var ErrClosed = errors.New("raftstore: closed")

// ErrBroken marks the error of every write after a write that failed in Pebble's commit
// pipeline, until the database is reopened (package doc, Failures). A write that failed
// on a full disk, and the writes after it, match ErrNoSpace instead.
var ErrBroken = errors.New("raftstore: a write failed; the Raft log reopens before a later write")

// A Store is raft's log store, on a Pebble database, and its stable store, in the stable
// file beside it (stable.go). Its methods may be called concurrently, as raft does (its
// main loop writes, replication goroutines read with GetLog, the snapshot goroutine calls
// DeleteRange); writes are serialised.
type Store struct {
	dir     string
	log     *slog.Logger
	stable  *stable       // Set and Get, apart from the database and its failures
	w       *watches      // what db is opened with, again at a reopen
	backoff time.Duration // reopenBackoff; shorter in tests

	// closeMu is held shared by every method while it uses db, and exclusively by Close
	// and a reopen, which replace it. Lock order: writeMu, then closeMu.
	closeMu sync.RWMutex
	db      *pebble.DB // nil once closed, and while a reopen waits for space
	gone    error      // why db is nil: ErrClosed, or the reopen's error
	closed  bool       // written under writeMu and closeMu both

	// writeMu serialises writes, so that the cached indexes follow the order of the
	// commits and no write enters Pebble after one has failed.
	writeMu  sync.Mutex
	batch    *pebble.Batch  // reused from write to write
	broken   error          // the failed write or reopen; nil while db can be written
	retryAt  time.Time      // the earliest reopen
	pending  *pebbledb.Open // a reopen whose flush failed, waiting for space; nil if none
	refusing bool           // refuse refuses writes
	wedgedBy error          // the table write failure for which a stalled write was given up

	// first and last are the lowest and highest index in the log, 0 when it is empty.
	// Writers update them under writeMu once their commit is durable.
	first, last atomic.Uint64
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// Open opens the store in dir, creating both if need be. dir holds this database only;
// the cluster gives it a directory of its own under its data directory. log receives
// Pebble's messages (nil: slog.Default()).
func Open(dir string, log *slog.Logger) (*Store, error) {
	return openFS(vfs.Default, dir, log)
}

// openFS is Open on fs: the tests' file systems fail writes or lose what was not synced.
func openFS(fs vfs.FS, dir string, log *slog.Logger) (*Store, error) {
	return openSized(fs, dir, log, memTableSize)
}

// openSized is openFS with memtables of up to memTable bytes: the tests' fill a small
// disk with flushes.
func openSized(fs vfs.FS, dir string, log *slog.Logger, memTable uint64) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	db, w, err := openPebble(fs, dir, log, memTable)
	if err != nil {
		return nil, err
	}
	st, err := openStable(fs, dir, log)
	if err != nil {
		_ = pebbledb.CloseDB(db)
		return nil, err
	}
	s := &Store{dir: dir, log: log, stable: st, w: w, backoff: reopenBackoff, db: db, batch: db.NewBatch()}
	first, last, err := s.bounds()
	if err != nil {
		_ = errors.Join(st.close(), pebbledb.CloseDB(db))
		return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
	}
	w.c.start()
	s.first.Store(first)
	s.last.Store(last)
	warnLowSpace(log, dir)
	return s, nil
}

// Close closes the database. Every later call returns ErrClosed; Close itself returns
// nil. A reopen waiting for space is left to finish in the background, and closes the
// database then.
func (s *Store) Close() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed, s.gone = true, ErrClosed
	if err := s.stable.close(); err != nil {
		s.log.Warn("raftstore: closing the file of Raft's term and vote", slog.String("dir", s.dir), slog.String("err", err.Error()))
	}
	if s.pending != nil {
		s.log.Warn("raftstore: closed while reopening on a full disk: the database closes once space is freed",
			slog.String("dir", s.dir))
		s.pending.Abandon("raftstore.open.abandoned", nil)
		s.pending = nil
	}
	db := s.db
	s.db = nil
	if db != nil && s.w.c.busy {
		s.log.Warn("raftstore: closed while a write waits for space: the database closes once it has returned",
			slog.String("dir", s.dir))
		s.w.c.stop(func() { _ = pebbledb.CloseDB(db) })
		return nil
	}
	s.w.c.stop(nil)
	if db == nil {
		return nil
	}
	return pebbledb.CloseDB(db)
}

// FirstIndex returns the lowest index in the log, 0 when it is empty. It reads a cached
// value.
func (s *Store) FirstIndex() (uint64, error) { return s.first.Load(), nil }

// LastIndex returns the highest index in the log, 0 when it is empty. It reads a cached
// value.
func (s *Store) LastIndex() (uint64, error) { return s.last.Load(), nil }

// GetLog reads the entry at index into l, or returns raft.ErrLogNotFound. l owns the
// slices it is given.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.db == nil {
		return s.gone
	}
	var k [logKeyLen]byte
	putLogKey(k[:], index)
	v, closer, err := s.db.Get(k[:])
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftstore: get log %d: %w", index, err)
	}
	defer closer.Close()
	return decodeLog(index, v, l)
}

// StoreLog stores l, durably.
func (s *Store) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

// StoreLogs stores logs in one Pebble batch and returns once it is synced: one fsync
// however many entries. An entry replaces any at its index. Indexes need not follow the
// log's last (raft.LogStore allows gaps).
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	lo, hi := logs[0].Index, logs[0].Index
	return s.write(func(b *pebble.Batch) error {
		for _, l := range logs {
			op := b.SetDeferred(logKeyLen, logLen(l))
			putLogKey(op.Key, l.Index)
			appendLog(op.Value[:0], l)
			if err := op.Finish(); err != nil {
				return err
			}
			lo, hi = min(lo, l.Index), max(hi, l.Index)
		}
		return nil
	}, func() error {
		if first := s.first.Load(); first == 0 || lo < first {
			s.first.Store(lo)
		}
		if hi > s.last.Load() {
			s.last.Store(hi)
		}
		return nil
	})
}

// DeleteRange deletes the entries from lo to hi, both included, with one range deletion,
// and returns once it is synced. raft deletes at the front when it compacts the log
// after a snapshot, and at the tail when a new leader's entries conflict with a
// follower's.
func (s *Store) DeleteRange(lo, hi uint64) error {
	if lo > hi {
		return nil
	}
	start := make([]byte, logKeyLen)
	putLogKey(start, lo)
	return s.write(func(b *pebble.Batch) error {
		return b.DeleteRange(start, logKeyAfter(hi), nil)
	}, func() error {
		first, last := s.first.Load(), s.last.Load()
		switch {
		case first == 0 || hi < first || lo > last: // nothing of the log
			return nil
		case lo <= first && hi >= last: // all of it
			s.first.Store(0)
			s.last.Store(0)
			return nil
		case lo > first && hi < last: // the middle: no bound moves
			return nil
		}
		// The front or the tail: the log may have gaps, so the bound is read back.
		first, last, err := s.bounds()
		if err != nil {
			return err
		}
		s.first.Store(first)
		s.last.Store(last)
		return nil
	})
}

// Set stores val under key, durably, in the stable file: a write in place, which a full
// disk does not stop (stable.go). Set and SetUint64 share one key space, whose values
// take up to about 4 KiB in all.
func (s *Store) Set(key, val []byte) error {
	err := s.stable.set(key, val)
	switch {
	case err == nil, errors.Is(err, ErrClosed), errors.Is(err, errStableFull):
		return err
	}
	if e := noSpace("write", s.dir, "writing Raft's term and vote ("+stableName+")", 0, err); e != err {
		return e
	}
	return fmt.Errorf("raftstore: write %s: %w", s.stable.path, err)
}

// Get returns the value stored under key by Set, or nil and no error when there is
// none, as raft.StableStore says. (raft also accepts an error reading "not found", as
// raft-boltdb returns; it treats any other error as a failure, and refuses to start
// when the current term cannot be read.)
func (s *Store) Get(key []byte) ([]byte, error) {
	v, _, err := s.stable.get(key)
	return v, err
}

// SetUint64 stores val under key, durably, as 8 big-endian bytes.
func (s *Store) SetUint64(key []byte, val uint64) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], val)
	err := s.Set(key, v[:])
	if err != nil && string(key) == raftCurrentTerm {
		s.log.Error("raftstore: the Raft term cannot be saved, and hashicorp/raft stops the process when it cannot: repair the disk and start the node again",
			slog.String("dir", s.dir), slog.Uint64("term", val), slog.String("err", err.Error()))
	}
	return err
}

// raftCurrentTerm is the stable-store key of raft's current term, which raft panics when
// it cannot save.
const raftCurrentTerm = "CurrentTerm"

// GetUint64 returns the value stored under key by SetUint64, or 0 and no error when
// there is none, as raft.StableStore says. A value of another length is an error.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	switch {
	case err != nil:
		return 0, err
	case v == nil:
		return 0, nil
	case len(v) != 8:
		return 0, fmt.Errorf("%w: stable value %q is %d bytes, not a uint64", ErrCorrupt, key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// write fills the reused batch with fill, commits it synced, and then calls done (if
// not nil) to update the cached indexes, all under writeMu. After a failed write it
// reopens the database first (repair), and while Pebble cannot write its tables it
// refuses (refuse): either way it fails at once rather than wait for space.
func (s *Store) write(fill func(*pebble.Batch) error, done func() error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.wedged(); err != nil {
		return err
	}
	if err := s.repair(); err != nil {
		return err
	}
	if err := s.refuse(); err != nil {
		return err
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.batch == nil {
		s.batch = s.db.NewBatch()
	}
	b := s.batch
	b.Reset()
	if err := fill(b); err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	err, givenUp := s.w.c.commit(s.db, b, s.w.tablesFailing)
	if givenUp {
		return s.giveUp(err)
	}
	if err != nil {
		var fatal *pebbledb.Fatal
		if errors.As(err, &fatal) {
			s.fail(err)
			return s.broken
		}
		s.batch = s.db.NewBatch()
		return fmt.Errorf("raftstore: %w", err)
	}
	if done == nil {
		return nil
	}
	if err := done(); err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	return nil
}

// bounds reads the lowest and highest index of the log from the database.
func (s *Store) bounds() (first, last uint64, err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logLower, UpperBound: logUpper})
	if err != nil {
		return 0, 0, err
	}
	if it.First() {
		if first, err = logKeyIndex(it.Key()); err == nil && it.Last() {
			last, err = logKeyIndex(it.Key())
		}
	}
	if err := errors.Join(err, it.Error(), it.Close()); err != nil {
		return 0, 0, err
	}
	return first, last, nil
}
