package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/bifrost-mqtt/bifrost/internal/diskspace"
	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
)

// pebbleFormat is the Pebble format a new database is created with and an older one
// raised to: FormatNewest of Pebble v2.1.7, named so that upgrading Pebble never changes
// the files silently. It includes the WAL sync chunks that tell a torn tail (a crash
// mid-write, which recovery drops) from corruption (which it refuses).
const pebbleFormat = pebble.FormatValueSeparation

// Pebble's sizes for the Raft log: its entries are small (a CONNECT's claim is tens of
// bytes) and recent, read back from the memtable by replication; only a follower catching
// up reads tables. Pebble starts with a memtable of 256 KiB and doubles it up to
// memTableSize as writes demand.
const (
	memTableSize = 4 << 20
	cacheSize    = 1 << 20
)

// reopenBackoff is the least time between two reopens after a failed write, and between
// two tries of a table write that failed (pebbledb.TableWatch): on a full disk a try a
// second.
const reopenBackoff = time.Second

// ErrForeign is returned by Open for a directory that holds a Pebble database that is not
// a bifrost Raft log.
var ErrForeign = errors.New("raftstore: not a bifrost Raft log")

// ErrVersion is returned by Open for a Raft log of a newer format than this build reads.
var ErrVersion = errors.New("raftstore: unsupported format version")

// ErrNoSpace marks the errors of a full disk (they match syscall.ENOSPC too): an Open
// that cannot write the write-ahead log it replays into a table, and the writes that
// fail or are refused while the disk is full (package doc, Failures).
var ErrNoSpace = errors.New("raftstore: no space left on device")

// watches are what a Store's database is opened with, again at every reopen: its file
// system under a TableWatch, its flushes under a FlushWatch, its write stalls told to
// its committer (not started).
type watches struct {
	opts    *pebble.Options
	tables  *pebbledb.TableWatch
	flushes *pebbledb.FlushWatch
	c       *committer
}

// tablesFailing returns the error of the last flush if it failed on the file system, or
// of a table write that failed within the last two backoffs (a flush may be waiting for
// its paced retry).
func (w *watches) tablesFailing() error {
	if err := w.flushes.Failing(); err != nil {
		return err
	}
	return w.tables.FailedWithin(2 * w.tables.Backoff)
}

// openPebble opens or creates the database in dir on fs, with memtables of up to
// memTable bytes (memTableSize; smaller in tests), and checks its format record. An open
// that cannot write the write-ahead log it replays into a table (a full disk) fails at
// once with ErrNoSpace instead of waiting for space; it goes on in the background and
// closes the database once space lets it complete.
func openPebble(fs vfs.FS, dir string, log *slog.Logger, memTable uint64) (*pebble.DB, *watches, error) {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	}
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return nil, nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
	}
	if err := pebbledb.NoRoom(ErrNoSpace, "raftstore: open", dir, "the Raft log", pebbledb.OpenRoom, noSpaceAdvice("open")); err != nil {
		return nil, nil, err
	}
	w := &watches{tables: &pebbledb.TableWatch{FS: fs, Backoff: reopenBackoff}, flushes: new(pebbledb.FlushWatch), c: newCommitter()}
	w.opts = &pebble.Options{
		CacheSize:          cacheSize,
		MemTableSize:       memTable,
		FormatMajorVersion: pebbleFormat,
		Logger:             pebbledb.NewLogger(log),
		EventListener:      w.flushes.Listener(),
		FS:                 w.tables,
	}
	w.c.listen(w.opts.EventListener)
	// Pebble's default today, pinned: zstd is never used (internal/store's package doc,
	// Build).
	for i := range w.opts.Levels {
		w.opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.SnappyCompression }
	}
	if desc.Exists {
		// Open an existing database at its own format: if it turns out not to be ours,
		// it must leave as it came. Ours is raised to pebbleFormat after the check.
		w.opts.FormatMajorVersion = pebble.FormatMinSupported
	}
	o := w.flushes.Open("raftstore.open", dir, w.opts)
	db, err, stuck := o.Wait()
	if stuck {
		o.Abandon("raftstore.open.abandoned", nil)
		return nil, nil, stuckError("open", dir, err)
	}
	if err != nil {
		return nil, nil, openError(dir, "opening the Raft log", err)
	}
	if err := checkFormat(fs, db, dir); err != nil {
		_ = pebbledb.CloseDB(db)
		return nil, nil, err
	}
	w.opts.FormatMajorVersion = pebbleFormat
	return db, w, nil
}

// checkFormat checks the format record of db and raises an older log to pebbleFormat,
// turning a fatal error of Pebble's (a write that a full disk stopped) into an error. A
// new log, and one of format 1, get a stable file first (moveStable).
func checkFormat(fs vfs.FS, db *pebble.DB, dir string) error {
	f := format
	f.Upgrade = func(db *pebble.DB, _ byte, b *pebble.Batch) error { return moveStable(fs, db, dir, b) }
	if err := recovered(func() error { return f.Check(db, dir) }); err != nil {
		var full *diskspace.Error
		if errors.As(err, &full) {
			return err
		}
		return noSpace("open", dir, "writing the Raft log's format record", 0, err)
	}
	if db.FormatMajorVersion() < pebbleFormat {
		if err := recovered(func() error { return db.RatchetFormatMajorVersion(pebbleFormat) }); err != nil {
			return openError(dir, "raising the Raft log's Pebble format", err)
		}
	}
	return nil
}

// moveStable creates the stable file of a new log (empty) or of one of format 1 (with the
// stable values in db), replacing any that an interrupted open left, and adds to b the
// deletion of those values: b commits them with the format record that makes the file
// the values' home, so a crash before leaves db as it was, and the next open starts
// again.
func moveStable(fs vfs.FS, db *pebble.DB, dir string, b *pebble.Batch) error {
	vals, err := pebbleStable(db)
	if err != nil {
		return fmt.Errorf("raftstore: open %s: reading the stable values: %w", dir, err)
	}
	if err := createStable(fs, dir, vals); err != nil {
		if e := noSpace("open", dir, "creating the file of Raft's term and vote ("+stableName+")", stableSize, err); e != err {
			return e
		}
		return fmt.Errorf("raftstore: open %s: creating the file of Raft's term and vote: %w", dir, err)
	}
	if len(vals) == 0 {
		return nil
	}
	return b.DeleteRange(stableLower, stableUpper, nil)
}

// recovered calls f, turning a fatal error of Pebble's into an error.
func recovered(f func() error) (err error) {
	defer pebbledb.Recover(&err)
	return f()
}

// openError is the error of an open of dir that failed with err while doing (an "-ing"
// phrase).
func openError(dir, doing string, err error) error {
	if e := noSpace("open", dir, doing, 0, err); e != err {
		return e
	}
	return fmt.Errorf("raftstore: open %s: %w", dir, err)
}

// noSpace returns the error of op (open, write, reopen) in dir, where doing (an "-ing"
// phrase) needed about need bytes (0: unknown) and failed with cause: a diskspace.Error
// matching ErrNoSpace, or cause as it is unless it is a full disk.
func noSpace(op, dir, doing string, need uint64, cause error) error {
	return diskspace.NoSpace(ErrNoSpace, "raftstore: "+op, dir, doing, need, noSpaceAdvice(op), cause)
}

// stuckError is the error of an open or a reopen (op) of dir whose flush of the replayed
// write-ahead log failed with cause.
func stuckError(op, dir string, cause error) error {
	return pebbledb.StuckError(ErrNoSpace, "raftstore: "+op, dir, noSpaceAdvice(op), cause)
}

// noSpaceAdvice says what to do after op failed on a full disk.
func noSpaceAdvice(op string) string {
	if op == "open" {
		return "free space there or move cluster.dir, then start again"
	}
	return "writes fail until space is freed there, and then work again by themselves"
}
