//go:build !bifrost_nopebble

package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
)

// Pebble on a full disk.
//
// Pebble retries a flush or a compaction that failed at once, and forever, and waits for
// them without a timeout: on a full disk pebble.Open, which flushes the write-ahead log it
// replays before it returns, never returns, and a commit that needs room in the
// memtables waits for a flush that cannot be written ("write stall"). The retries log
// tens of errors a second and leave their garbage to the GC. So:
//
//   - the engine runs pebble.Open on a goroutine of its own (dbOpen), and stops waiting
//     as soon as Open's flush has failed on the file system: the store then fails to open
//     with an error naming the directory, the space the replay needs (the write-ahead
//     log's size: the flush writes its records into a table) and the space there is;
//   - tableWatch paces the retries of flushes and compactions to one per backoff;
//   - while Pebble cannot write its tables (the last flush failed on the file system, or
//     a table write failed within the last two backoffs, so a flush may be waiting for its
//     paced retry), the committer refuses commits (pebbleEngine.refuse), failing them as
//     a full disk, instead of handing Pebble one that it may stall until space returns.
//
// Once space returns the retries succeed: commits are accepted again, and an open left
// waiting completes, and then the engine adopts it (a reopen while the broker runs,
// pebbleEngine.reopen) or it closes itself and lets the directory go (a start, which has
// failed; and a Close meanwhile). A commit accepted before the first failure may still
// stall until space returns: that needs the memtables to fill while a flush is being
// written, and that flush to fail.

// A dbOpen is one pebble.Open on a goroutine of its own.
type dbOpen struct {
	done   chan struct{} // closed once Open has returned, with db and err set
	db     *pebble.DB
	err    error
	failed chan error // the error of the first flush that failed on the file system during Open
}

// A flushWatch watches the flushes of a database, through its event listener: it tells
// the dbOpen under way that its flush failed, and the committer whether the last flush
// failed.
type flushWatch struct {
	mu  sync.Mutex
	cur *dbOpen // the open under way; nil when none
	err error   // the failure of the last flush, on the file system; nil if it succeeded
}

// listener returns the event listener of a database whose flushes w watches. Its
// BackgroundError is Pebble's default: Errorf on the (limited) logger.
func (w *flushWatch) listener() *pebble.EventListener {
	return &pebble.EventListener{FlushEnd: w.flushEnd}
}

// flushEnd runs on Pebble's flush goroutine, with the database's mutex held: it must not
// block.
func (w *flushWatch) flushEnd(info pebble.FlushInfo) {
	var pathErr *fs.PathError
	failed := info.Err != nil && errors.As(info.Err, &pathErr) // Err is also set for an empty flush
	w.mu.Lock()
	defer w.mu.Unlock()
	if !failed {
		w.err = nil
		return
	}
	w.err = info.Err
	if w.cur != nil {
		select {
		case w.cur.failed <- info.Err:
		default: // told already
		}
	}
}

// opened forgets the flushes of the databases before the one just opened (whose Open
// flushed what it replayed).
func (w *flushWatch) opened() {
	w.mu.Lock()
	w.err = nil
	w.mu.Unlock()
}

// failing returns the error of the last flush if it failed on the file system.
func (w *flushWatch) failing() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// open starts pebble.Open of dir with opts, whose event listener is w's.
func (w *flushWatch) open(dir string, opts *pebble.Options) *dbOpen {
	o := &dbOpen{done: make(chan struct{}), failed: make(chan error, 1)}
	w.mu.Lock()
	w.cur = o
	w.mu.Unlock()
	goLabelled("store.open", func() {
		db, err := openRecovered(dir, opts)
		w.mu.Lock()
		w.cur = nil
		w.mu.Unlock()
		o.db, o.err = db, err
		close(o.done)
	})
	return o
}

// wait waits for Open to return, or for its flush to fail: then stuck is true and err is
// the flush's error, and Open goes on in the background.
func (o *dbOpen) wait() (db *pebble.DB, err error, stuck bool) {
	select {
	case <-o.done:
		return o.db, o.err, false
	case err := <-o.failed:
		select {
		case <-o.done: // returned meanwhile
			return o.db, o.err, false
		default:
			return nil, err, true
		}
	}
}

// opened reports whether Open has returned, and what.
func (o *dbOpen) opened() (db *pebble.DB, err error, ok bool) {
	select {
	case <-o.done:
		return o.db, o.err, true
	default:
		return nil, nil, false
	}
}

// abandon leaves o to finish in the background: once Open returns, the database is
// closed and release is called.
func (o *dbOpen) abandon(release func()) {
	goLabelled("store.open.abandoned", func() {
		<-o.done
		if o.db != nil {
			_ = closeDB(o.db)
		}
		release()
	})
}

// openRecovered is pebble.Open, turning a fatal error of Pebble's (a MANIFEST it could
// not write) into an error.
func openRecovered(dir string, opts *pebble.Options) (db *pebble.DB, err error) {
	defer pebbledb.Recover(&err)
	return pebble.Open(dir, opts)
}

// stuckError is the error of an open whose flush of the replayed write-ahead log failed
// with cause.
func stuckError(op, dir string, cause error) error {
	err := noSpace(op, dir, fmt.Sprintf("replaying the write-ahead log (%s) writes its records into a table, which",
		sizeString(filesSize(dir, ".log"))), filesSize(dir, ".log"), cause)
	if err != cause {
		return err
	}
	return fmt.Errorf("store: %s %s: writing the replayed write-ahead log into a table failed (and is retried in the background): %w", op, dir, cause)
}

// goLabelled runs f on a goroutine labelled name (a goroutine profile shows bifrost=name).
func goLabelled(name string, f func()) {
	go pprof.Do(context.Background(), pprof.Labels("bifrost", name), func(context.Context) { f() })
}

// tableWatch is the file system under Pebble's tables (.sst and .blob files). After a
// write of one failed, it holds the next creation of one until backoff has passed, so
// that Pebble, which retries a failed flush or compaction at once and forever, retries
// at most once per backoff: on a full disk a try (its garbage, its log line) a second. It
// holds no lock of Pebble's meanwhile: Pebble creates tables with its database mutex
// released.
type tableWatch struct {
	vfs.FS
	backoff time.Duration

	mu       sync.Mutex
	failedAt time.Time // of the last failed write; zero if none
	err      error     // the last failed write's
}

// Unwrap returns the file system underneath, as vfs.FS requires.
func (w *tableWatch) Unwrap() vfs.FS { return w.FS }

func (w *tableWatch) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if !isTable(name) {
		return w.FS.Create(name, c)
	}
	w.mu.Lock()
	wait := time.Until(w.failedAt.Add(w.backoff))
	w.mu.Unlock()
	if wait > 0 {
		time.Sleep(wait)
	}
	f, err := w.FS.Create(name, c)
	if err != nil {
		w.fail(err)
		return nil, err
	}
	return &tableFile{f, w}, nil
}

func (w *tableWatch) fail(err error) {
	w.mu.Lock()
	w.failedAt, w.err = time.Now(), err
	w.mu.Unlock()
}

// failedWithin returns the error of the last failed table write if it was less than d
// ago.
func (w *tableWatch) failedWithin(d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil || time.Since(w.failedAt) >= d {
		return nil
	}
	return w.err
}

func isTable(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

// tableFile is a table being written under tableWatch.
type tableFile struct {
	vfs.File
	w *tableWatch
}

func (f *tableFile) check(err error) error {
	if err != nil {
		f.w.fail(err)
	}
	return err
}

func (f *tableFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.check(err)
}

func (f *tableFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.check(err)
}

func (f *tableFile) Sync() error     { return f.check(f.File.Sync()) }
func (f *tableFile) SyncData() error { return f.check(f.File.SyncData()) }

func (f *tableFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.check(err)
}

// filesSize returns the total size of the files in dir whose names end with suffix.
func filesSize(dir, suffix string) uint64 {
	names, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, d := range names {
		if !strings.HasSuffix(d.Name(), suffix) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, d.Name())); err == nil {
			n += uint64(fi.Size())
		}
	}
	return n
}
