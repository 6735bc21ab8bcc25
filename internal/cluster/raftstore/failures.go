package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/bifrost-mqtt/bifrost/internal/diskspace"
	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
)

// What a Store does after a failed write and while its disk is full (package doc,
// Failures). Every function here runs with writeMu held.

// fail marks the database broken after a write that failed in Pebble's commit pipeline
// (a WAL write or fsync), which cannot be used after it: writes fail until a reopen,
// tried once the backoff has passed. Reads go on meanwhile.
func (s *Store) fail(cause error) {
	s.batch = nil // Pebble forbids reusing a batch whose commit failed
	s.broken = noSpace("write", s.dir, "writing the write-ahead log", 0, cause)
	if s.broken == cause {
		s.broken = fmt.Errorf("%w: %s: %w", ErrBroken, s.dir, cause)
	}
	s.retryAt = time.Now().Add(s.backoff)
	s.log.Error("raftstore: write failed; writes fail until the Raft log is reopened (tried once a second, once its file system has room)",
		slog.String("dir", s.dir), slog.String("err", cause.Error()))
}

// repair reopens the database after a failed write, once the backoff has passed and the
// file system has room for what the reopen writes (the write-ahead log it replays goes
// into a table). A reopen whose flush fails anyway is left pending, and adopted by the
// first write after it has completed: until then reads fail too, since the database is
// closed.
func (s *Store) repair() error {
	if s.broken == nil {
		return nil
	}
	if s.pending != nil {
		db, err, ok := s.pending.Opened()
		if !ok {
			return s.broken // still waiting for space
		}
		s.pending = nil
		s.closeMu.Lock()
		defer s.closeMu.Unlock()
		return s.adoptLocked(db, err)
	}
	if time.Now().Before(s.retryAt) {
		return s.broken
	}
	s.retryAt = time.Now().Add(s.backoff)
	if free, ok := diskspace.Free(s.dir); ok && free < s.reopenNeeds() {
		return s.broken
	}

	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.db != nil {
		if err := pebbledb.CloseDB(s.db); err != nil {
			s.log.Debug("raftstore: closing after a failed write", slog.String("err", err.Error()))
		}
		s.db, s.gone = nil, s.broken
	}
	o := s.w.flushes.Open("raftstore.reopen", s.dir, s.w.opts)
	db, err, stuck := o.Wait()
	if stuck {
		s.pending = o
		s.broken = stuckError("reopen", s.dir, err)
		s.gone = s.broken
		s.log.Error("raftstore: the Raft log cannot reopen until space is freed; reads and writes fail meanwhile",
			slog.String("dir", s.dir), slog.String("err", s.broken.Error()))
		return s.broken
	}
	return s.adoptLocked(db, err)
}

// reopenNeeds returns about the room a reopen needs: the live write-ahead log, which it
// writes into a table, and pebbledb.OpenRoom.
func (s *Store) reopenNeeds() uint64 {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.db == nil { // a reopen failed: every log file may be live
		return pebbledb.ReopenRoom(s.dir)
	}
	return s.db.Metrics().WAL.Size + pebbledb.OpenRoom
}

// adoptLocked makes db, which a reopen returned with err, the Store's database. The cached
// indexes stay what they were: what the failed write held is not acknowledged, even if
// the reopen found it in the write-ahead log. closeMu is held exclusively.
func (s *Store) adoptLocked(db *pebble.DB, err error) error {
	if err != nil {
		s.broken = noSpace("reopen", s.dir, "reopening the Raft log", 0, err)
		if s.broken == err {
			s.broken = fmt.Errorf("%w: reopen %s: %w", ErrBroken, s.dir, err)
		}
		s.gone = s.broken
		s.retryAt = time.Now().Add(s.backoff)
		return s.broken
	}
	s.w.flushes.Opened()
	s.db, s.gone, s.batch, s.broken = db, nil, db.NewBatch(), nil
	s.log.Info("raftstore: reopened after a failed write; writes are accepted", slog.String("dir", s.dir))
	return nil
}

// refuse returns an error while Pebble cannot write its tables (the last flush failed on
// the file system, or a table write failed within the last two backoffs, so a flush may
// be waiting for its paced retry), logging when that starts and ends: Pebble may stall a
// write until a flush succeeds, and raft's main loop would wait with it. Once space
// returns Pebble's retries succeed and writes are accepted again.
func (s *Store) refuse() error {
	err := s.w.tablesFailing()
	switch {
	case err != nil && !s.refusing:
		s.log.Error("raftstore: Pebble cannot write its tables; writes are refused until it can (it tries again once a second)",
			slog.String("dir", s.dir), slog.String("err", err.Error()))
	case err == nil && s.refusing:
		s.log.Info("raftstore: Pebble writes its tables again; writes are accepted", slog.String("dir", s.dir))
	}
	s.refusing = err != nil
	if err == nil {
		return nil
	}
	if e := noSpace("write", s.dir, "writing the Raft log's tables", 0, err); e != err {
		return e
	}
	return fmt.Errorf("raftstore: write %s: refused while Pebble cannot write its tables: %w", s.dir, err)
}

// wedged returns an error while a write that Pebble stalled on the full disk, given up,
// is still in Pebble (committer), and handles its result once it has returned.
func (s *Store) wedged() error {
	if !s.w.c.busy {
		return nil
	}
	err, ok := s.w.c.returned()
	if !ok {
		return noSpace("write", s.dir, "writing the Raft log's tables", 0, fmt.Errorf("%w: %w", errWedged, s.wedgedBy))
	}
	s.log.Info("raftstore: the write that Pebble stalled on the full disk has returned; writes are accepted", slog.String("dir", s.dir))
	var fatal *pebbledb.Fatal
	if errors.As(err, &fatal) {
		s.fail(err)
	}
	return nil
}

// giveUp is what write returns for a write that Pebble stalled while its table writes
// failed with cause: the commit stays in Pebble, and writes fail until it returns.
func (s *Store) giveUp(cause error) error {
	s.batch = nil // the commit's
	s.wedgedBy = cause
	s.log.Error("raftstore: a write that Pebble stalled on the full disk is given up, not acknowledged; writes fail until Pebble can write its tables",
		slog.String("dir", s.dir), slog.String("err", cause.Error()))
	return noSpace("write", s.dir, "writing the Raft log's tables", 0, cause)
}

// warnLowSpace logs a warning when dir's file system has less room than a memtable's
// flush may need: the node serves, and says what happens once the disk is full.
func warnLowSpace(log *slog.Logger, dir string) {
	free, ok := diskspace.Free(dir)
	if !ok || free >= memTableSize {
		return
	}
	log.Warn("raftstore: little space left: Raft's log writes fail while the disk is full (its term and vote are saved in place, and do not)",
		slog.String("dir", dir), slog.String("free", diskspace.Bytes(free)), slog.String("needs", diskspace.Bytes(memTableSize)+" (a memtable flush)"))
}
