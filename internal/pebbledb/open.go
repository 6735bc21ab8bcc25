package pebbledb

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime/pprof"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/bifrost-mqtt/bifrost/internal/diskspace"
)

// Pebble on a full disk.
//
// Pebble retries a flush or a compaction that failed at once, and forever, and waits for
// them without a timeout: on a full disk pebble.Open, which flushes the write-ahead log it
// replays into a table before it returns, never returns, and a commit that needs room in
// the memtables waits for a flush that cannot be written ("write stall"). The retries log
// hundreds of errors a second and leave their garbage to the GC. So both databases:
//
//   - refuse to open with less than OpenRoom free, and to reopen with less than that
//     beside the write-ahead log to replay (NoRoom): Pebble would write a new MANIFEST,
//     whose failed write on its flush goroutine stops the process;
//   - run pebble.Open on a goroutine of its own (FlushWatch.Open) and stop waiting as soon
//     as Open's flush has failed on the file system (Open.Wait): the open then fails with
//     an error naming the directory, the space the replay needs (the write-ahead log's
//     size: the flush writes its records into a table) and the space there is
//     (StuckError), and the open left behind goes on in the background until space
//     returns (Open.Abandon closes it then);
//   - pace Pebble's retries of table writes to one per backoff (TableWatch);
//   - refuse their own writes while Pebble cannot write its tables (FlushWatch.Failing,
//     TableWatch.FailedWithin), instead of handing Pebble one that it may stall until
//     space returns.

// An Open is one pebble.Open on a goroutine of its own.
type Open struct {
	done   chan struct{} // closed once Open has returned, with db and err set
	db     *pebble.DB
	err    error
	failed chan error // the error of the first flush that failed on the file system during Open
}

// A FlushWatch watches the flushes of a database, through its event listener: it tells
// the Open under way that its flush failed, and the database's writer whether the last
// flush failed. Its methods are safe for concurrent use.
type FlushWatch struct {
	mu  sync.Mutex
	cur *Open // the open under way; nil when none
	err error // the failure of the last flush, on the file system; nil if it succeeded
}

// Listener returns the event listener of a database whose flushes w watches. Its
// BackgroundError is Pebble's default: Errorf on the (limited) Logger.
func (w *FlushWatch) Listener() *pebble.EventListener {
	return &pebble.EventListener{FlushEnd: w.flushEnd}
}

// flushEnd runs on Pebble's flush goroutine, with the database's mutex held: it must not
// block.
func (w *FlushWatch) flushEnd(info pebble.FlushInfo) {
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

// Opened forgets the flushes of the databases before the one just opened (whose Open
// flushed what it replayed).
func (w *FlushWatch) Opened() {
	w.mu.Lock()
	w.err = nil
	w.mu.Unlock()
}

// Failing returns the error of the last flush if it failed on the file system.
func (w *FlushWatch) Failing() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Open starts pebble.Open of dir with opts, whose event listener is w's, on a goroutine
// labelled label (a goroutine profile shows bifrost=label).
func (w *FlushWatch) Open(label, dir string, opts *pebble.Options) *Open {
	o := &Open{done: make(chan struct{}), failed: make(chan error, 1)}
	w.mu.Lock()
	w.cur = o
	w.mu.Unlock()
	goLabelled(label, func() {
		db, err := OpenDB(dir, opts)
		w.mu.Lock()
		w.cur = nil
		w.mu.Unlock()
		o.db, o.err = db, err
		close(o.done)
	})
	return o
}

// Wait waits for Open to return, or for its flush to fail: then stuck is true and err is
// the flush's error, and Open goes on in the background.
func (o *Open) Wait() (db *pebble.DB, err error, stuck bool) {
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

// Opened reports whether Open has returned, and what.
func (o *Open) Opened() (db *pebble.DB, err error, ok bool) {
	select {
	case <-o.done:
		return o.db, o.err, true
	default:
		return nil, nil, false
	}
}

// Abandon leaves o to finish in the background: once Open returns, the database is
// closed and release (if not nil) is called.
func (o *Open) Abandon(label string, release func()) {
	goLabelled(label, func() {
		<-o.done
		if o.db != nil {
			_ = CloseDB(o.db)
		}
		if release != nil {
			release()
		}
	})
}

// OpenDB is pebble.Open, turning a fatal error of Pebble's (a MANIFEST it could not
// write) into an error.
func OpenDB(dir string, opts *pebble.Options) (db *pebble.DB, err error) {
	defer Recover(&err)
	return pebble.Open(dir, opts)
}

// CloseDB closes db, turning a fatal error of Pebble's into an error.
func CloseDB(db *pebble.DB) (err error) {
	defer Recover(&err)
	return db.Close()
}

// StuckError is the error of an open (op: "store: open") of dir whose flush of the
// replayed write-ahead log failed with cause: a diskspace.Error matching kind, naming the
// space the replay needs, when cause is a full disk. advice says what to do.
func StuckError(kind error, op, dir, advice string, cause error) error {
	need := diskspace.FilesSize(dir, ".log")
	err := diskspace.NoSpace(kind, op, dir, fmt.Sprintf("replaying the write-ahead log (%s) writes its records into a table, which",
		diskspace.Bytes(need)), need, advice, cause)
	if err != cause {
		return err
	}
	return fmt.Errorf("%s %s: writing the replayed write-ahead log into a table failed (and is retried in the background): %w", op, dir, cause)
}

// goLabelled runs f on a goroutine labelled name (a goroutine profile shows bifrost=name).
func goLabelled(name string, f func()) {
	go pprof.Do(context.Background(), pprof.Labels("bifrost", name), func(context.Context) { f() })
}
