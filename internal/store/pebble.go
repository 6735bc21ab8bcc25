//go:build !bifrost_nopebble

package store

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
)

// pebbleBuilt: this build has the pebble engine.
const pebbleBuilt = true

// format is the format-version record, checked by every open.
var format = pebbledb.Format{Key: metaKey, Magic: formatMagic, Version: formatVersion, Oldest: oldestFormat, What: "store",
	Foreign: ErrForeign, Newer: ErrVersion}

// openPebbleEngine opens the pebble engine's store in cfg.Dir (store.engine: pebble).
func openPebbleEngine(cfg conf.Store, log *slog.Logger) (*store, error) {
	return openPebble(cfg, log, nil)
}

// pebbleFormat is the Pebble format a new store is created with and an older one raised
// to: FormatNewest of Pebble v2.1.7, named so that upgrading Pebble never changes the
// files silently. It includes the WAL sync chunks that tell a torn tail from corruption.
const pebbleFormat = pebble.FormatValueSeparation

// openPebble opens the store in cfg.Dir on fs (vfs.Default if nil).
func openPebble(cfg conf.Store, log *slog.Logger, fs vfs.FS) (*store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("store: no directory configured (store.dir)")
	}
	if log == nil {
		log = slog.Default()
	}
	if fs == nil {
		fs = vfs.Default
	}
	policy, err := parseSync(cfg.Sync)
	if err != nil {
		return nil, err
	}
	dir := cfg.Dir
	c := conf.Config{Store: cfg}
	c.EnsureDefaults()
	cfg = c.Store

	existing, err := checkDir(fs, dir)
	if err != nil {
		return nil, err
	}
	release := func() {}
	if fs == vfs.Default { // the directory is the OS's: lock.go
		if release, err = claimDir(dir); err != nil {
			return nil, err
		}
	}
	if err := pebbledb.NoRoom(ErrNoSpace, "store: open", dir, "the store", pebbledb.OpenRoom, noSpaceAdvice("open")); err != nil {
		release()
		return nil, err
	}
	tables := &pebbledb.TableWatch{FS: fs, Backoff: reopenBackoff}
	wal := &walWatch{FS: tables}
	flushes := new(pebbledb.FlushWatch)
	opts := pebbleOptions(cfg, wal, log)
	opts.EventListener = flushes.Listener()
	if existing {
		// Open an existing database at its own format: if it turns out not to be ours,
		// it must leave as it came. Ours is raised to pebbleFormat after the check.
		opts.FormatMajorVersion = pebble.FormatMinSupported
	}
	o := flushes.Open("store.open", dir, opts)
	db, err, stuck := o.Wait()
	if stuck {
		err = stuckError("open", dir, err)
		o.Abandon("store.open.abandoned", release) // it lets the directory go once space lets it complete
		return nil, err
	}
	if err != nil {
		release()
		if fs == vfs.Default {
			if held := inUse(dir); held != nil {
				return nil, held
			}
		}
		return nil, openError(dir, err)
	}
	if err := checkFormat(db, dir); err != nil {
		_ = pebbledb.CloseDB(db)
		release()
		return nil, err
	}
	opts.FormatMajorVersion = pebbleFormat

	e := &pebbleEngine{dir: dir, opts: opts, log: log, wal: wal, tables: tables, flushes: flushes, db: db, release: release,
		chunkBytes: int(cfg.MemtableSize / 4), backoff: reopenBackoff}
	maxQueue := max(int(cfg.MemtableSize/2), 256<<10)
	warnLowSpace(log, dir, uint64(cfg.MemtableSize), "a memtable flush writes up to store.memtable_size")
	s := newStore(e, policy, time.Duration(cfg.SyncInterval), maxQueue, log)
	s.dir = dir
	return s, nil
}

// openError is the error of a pebble.Open of dir that failed with err.
func openError(dir string, err error) error {
	if e := noSpace("open", dir, "opening the store", 0, err); e != err {
		return e
	}
	return fmt.Errorf("store: open %s: %w", dir, err)
}

// checkFormat checks the format record of db (pebbledb.Format.Check) and raises an older
// store to pebbleFormat, turning a fatal error of Pebble's (a write that a full disk
// stopped) into an error.
func checkFormat(db *pebble.DB, dir string) (err error) {
	defer pebbledb.Recover(&err)
	if err := format.Check(db, dir); err != nil {
		return noSpace("open", dir, "writing the store's format record", 0, err)
	}
	if db.FormatMajorVersion() < pebbleFormat {
		if err := db.RatchetFormatMajorVersion(pebbleFormat); err != nil {
			return openError(dir, err)
		}
	}
	return nil
}

// pebbleOptions sizes Pebble from cfg. Everything else is Pebble's default, which suits
// a store this small: one compaction at a time, WAL files recycled.
func pebbleOptions(cfg conf.Store, fs vfs.FS, log *slog.Logger) *pebble.Options {
	opts := &pebble.Options{
		FS:                 fs,
		CacheSize:          int64(cfg.CacheSize),
		MemTableSize:       uint64(cfg.MemtableSize),
		FormatMajorVersion: pebbleFormat,
		Logger:             pebbledb.NewLogger(log),
	}
	// Pebble's default today, pinned: zstd is never used (package doc, Build).
	for i := range opts.Levels {
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.SnappyCompression }
	}
	return opts
}

// checkDir creates dir if need be and reports whether it holds a Pebble database. A
// directory that holds anything else is refused before Pebble writes there: Pebble
// deletes files that look like its own obsolete ones.
func checkDir(fs vfs.FS, dir string) (existing bool, err error) {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("store: create %s: %w", dir, err)
	}
	if _, err := fs.Stat(fs.PathJoin(dir, logName)); err == nil {
		return false, fmt.Errorf("%w: %s holds a store written by the log engine (%s) and this configuration has store.engine: %s; set store.engine: %s to open it, or point store.dir at an empty or new directory",
			ErrOtherEngine, dir, logName, conf.EnginePebble, conf.EngineLog)
	}
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return false, fmt.Errorf("store: open %s: %w", dir, err)
	}
	if desc.Exists {
		return true, nil
	}
	names, err := fs.List(dir)
	if err != nil {
		return false, fmt.Errorf("store: open %s: %w", dir, err)
	}
	for _, name := range names {
		if !leftover(name) {
			return false, fmt.Errorf("%w: %s holds %q and no store; point store.dir at an empty or new directory",
				ErrForeign, dir, name)
		}
	}
	return false, nil
}

// pebbleEngine is the engine on disk. The committer calls write and flush; Load calls
// iter. After a failed write or flush the database is closed and reopened by the next
// write (package doc, Failures); while Pebble cannot write its tables, commits are
// refused (refuse).
type pebbleEngine struct {
	dir        string
	opts       *pebble.Options
	log        *slog.Logger
	wal        *walWatch
	tables     *pebbledb.TableWatch
	flushes    *pebbledb.FlushWatch
	chunkBytes int           // the most one Pebble batch takes (commit.go, invariant 4)
	backoff    time.Duration // reopenBackoff; shorter in tests
	release    func()        // lets go of the directory's claim (lock.go); nil once closed

	// mu is held shared while db is used and exclusively to replace it.
	mu      sync.RWMutex
	db      *pebble.DB     // nil while broken
	broken  error          // why db is nil
	retryAt time.Time      // the earliest reopen
	pending *pebbledb.Open // a reopen waiting for space, whose flush failed; nil if none
	pb      *pebble.Batch  // the committer's, reused from group to group

	refusing bool // refuse refuses commits; the committer's
}

func (e *pebbleEngine) write(group []*Batch, sync bool) error {
	if err := e.reopen(); err != nil {
		return err
	}
	if err := e.refuse(); err != nil {
		return err
	}
	e.mu.RLock()
	err := e.apply(group, sync)
	e.mu.RUnlock()
	if err != nil {
		e.fail(err)
	}
	return err
}

// refuse returns an error while Pebble cannot write its tables (the last flush failed on
// the file system, or a table write failed within the last two backoffs, so a flush may
// be waiting for its paced retry), logging when that starts and ends: Pebble may stall a
// commit until a flush succeeds, so none is handed to it meanwhile (internal/pebbledb,
// open.go). Once space returns the retries succeed and commits are accepted again. A
// commit accepted before the first failure may still stall until space returns: that
// needs the memtables to fill while a flush is being written, and that flush to fail.
// The committer is the only caller.
func (e *pebbleEngine) refuse() error {
	err := e.flushes.Failing()
	if err == nil {
		err = e.tables.FailedWithin(2 * e.tables.Backoff)
	}
	switch {
	case err != nil && !e.refusing:
		e.log.Error("store: Pebble cannot write its tables; commits are refused until it can (it tries again once a second)",
			slog.String("dir", e.dir), slog.Any("err", err))
	case err == nil && e.refusing:
		e.log.Info("store: Pebble writes its tables again; commits are accepted", slog.String("dir", e.dir))
	}
	e.refusing = err != nil
	return err
}

// apply merges group into Pebble batches of at most chunkBytes and applies them, the last
// with sync. mu is held shared.
func (e *pebbleEngine) apply(group []*Batch, sync bool) error {
	if e.db == nil {
		return e.broken
	}
	if e.pb == nil {
		e.pb = e.db.NewBatch()
	}
	pb := e.pb
	for _, b := range group {
		if !pb.Empty() && pb.Len()+b.Size() > e.chunkBytes {
			if err := e.commit(pb, pebble.NoSync); err != nil {
				return err
			}
			pb.Reset()
		}
		for off := 0; off < len(b.data); {
			var op byte
			var k, v []byte
			op, k, v, off = b.op(off)
			var err error
			switch op {
			case opSet:
				err = pb.Set(k, v, nil)
			case opDelete:
				err = pb.Delete(k, nil)
			case opDeleteRange:
				err = pb.DeleteRange(k, v, nil)
			}
			if err != nil {
				return err
			}
		}
	}
	if pb.Empty() { // empty batches: nothing to write, but a sync may be due
		if sync {
			return e.logSync()
		}
		return nil
	}
	o := pebble.NoSync
	if sync {
		o = pebble.Sync
	}
	err := e.commit(pb, o)
	pb.Reset()
	return err
}

// commit applies pb, turning Pebble's fatal commit error (see pebbledb) into an
// error.
func (e *pebbleEngine) commit(pb *pebble.Batch, o *pebble.WriteOptions) (err error) {
	if err := e.wal.failed(); err != nil {
		return err
	}
	defer pebbledb.Recover(&err)
	return e.db.Apply(pb, o)
}

func (e *pebbleEngine) flush() error {
	e.mu.RLock()
	var err error
	if e.db != nil {
		err = e.logSync()
	}
	e.mu.RUnlock()
	if err != nil {
		e.fail(err)
	}
	return err
}

func (e *pebbleEngine) logSync() (err error) {
	if err := e.wal.failed(); err != nil {
		return err
	}
	defer pebbledb.Recover(&err)
	return e.db.LogData(nil, pebble.Sync)
}

// fail closes the database after a failed write: Pebble's WAL writer keeps its first
// error, so the database cannot write again until reopened.
func (e *pebbleEngine) fail(cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pb = nil // Pebble forbids reusing a batch whose commit failed
	if e.db == nil {
		return
	}
	e.log.Error("store: write failed; the database reopens before the next commit",
		slog.String("dir", e.dir), slog.Any("err", cause))
	if err := pebbledb.CloseDB(e.db); err != nil {
		e.log.Debug("store: closing after a failed write", slog.Any("err", err))
	}
	e.db, e.broken = nil, cause
	e.retryAt = time.Now().Add(e.backoff)
}

// reopen opens the database again if a failure closed it, the backoff has passed and the
// file system has room for what the reopen writes (pebbledb.ReopenRoom). A reopen whose
// flush fails anyway (a full disk) is kept pending, retried by Pebble once per backoff,
// and adopted by the first reopen after it has completed.
func (e *pebbleEngine) reopen() error {
	e.mu.RLock()
	ok := e.db != nil
	e.mu.RUnlock()
	if ok {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.db != nil {
		return nil
	}
	var db *pebble.DB
	var err error
	if e.pending != nil {
		if db, err, ok = e.pending.Opened(); !ok {
			return e.broken // still waiting for space
		}
		e.pending = nil
	} else {
		if time.Now().Before(e.retryAt) {
			return e.broken
		}
		if err := pebbledb.NoRoom(ErrNoSpace, "store: reopen", e.dir, "the store", pebbledb.ReopenRoom(e.dir), noSpaceAdvice("reopen")); err != nil {
			e.broken, e.retryAt = err, time.Now().Add(e.backoff)
			return e.broken
		}
		e.wal.reset()
		o := e.flushes.Open("store.open", e.dir, e.opts)
		var stuck bool
		if db, err, stuck = o.Wait(); stuck {
			e.pending = o
			e.broken = stuckError("reopen", e.dir, err)
			e.log.Error("store: the database cannot reopen until space is freed; commits fail meanwhile",
				slog.String("dir", e.dir), slog.Any("err", e.broken))
			return e.broken
		}
	}
	if err != nil {
		e.broken = fmt.Errorf("reopen %s: %w", e.dir, err)
		e.retryAt = time.Now().Add(e.backoff)
		return e.broken
	}
	e.log.Info("store: reopened after a failed write", slog.String("dir", e.dir))
	e.flushes.Opened()
	e.db, e.broken = db, nil
	return nil
}

func (e *pebbleEngine) iter(lower, upper []byte) (iterator, error) {
	if err := e.reopen(); err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
}

func (e *pebbleEngine) close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pending != nil { // it lets the directory go once space lets it complete
		e.log.Warn("store: closed while reopening after a full disk: the database closes, and lets the directory go, once space is freed",
			slog.String("dir", e.dir))
		e.pending.Abandon("store.open.abandoned", e.release)
		e.pending, e.release = nil, nil
	}
	if e.release != nil {
		defer e.release() // after the database, and its lock, are let go
		e.release = nil
	}
	if e.db == nil {
		return nil
	}
	err := pebbledb.CloseDB(e.db)
	e.db = nil
	return err
}

// stuckError is the error of an open or a reopen (op) of dir whose flush of the
// replayed write-ahead log failed with cause.
func stuckError(op, dir string, cause error) error {
	return pebbledb.StuckError(ErrNoSpace, "store: "+op, dir, noSpaceAdvice(op), cause)
}

// walWatch is the file system under Pebble. It records the first error that a write-ahead
// log file returns from a write or sync. Pebble's WAL writer keeps such an error too, and
// panics, holding its commit lock, at the first write handed to it after the error
// surfaced; the engine checks failed before every write and reopens the database
// instead (commit.go, invariant 5).
type walWatch struct {
	vfs.FS
	mu  sync.Mutex
	err error
}

func (w *walWatch) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *walWatch) set(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *walWatch) reset() {
	w.mu.Lock()
	w.err = nil
	w.mu.Unlock()
}

func (w *walWatch) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return w.wrap(name)(w.FS.Create(name, c))
}

func (w *walWatch) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return w.wrap(newname)(w.FS.ReuseForWrite(oldname, newname, c))
}

// Unwrap returns the file system underneath, as vfs.FS requires.
func (w *walWatch) Unwrap() vfs.FS { return w.FS }

func (w *walWatch) wrap(name string) func(vfs.File, error) (vfs.File, error) {
	return func(f vfs.File, err error) (vfs.File, error) {
		if err != nil || !strings.HasSuffix(name, ".log") {
			return f, err
		}
		return &walFile{f, w}, nil
	}
}

// walFile is a WAL file under walWatch.
type walFile struct {
	vfs.File
	w *walWatch
}

func (f *walFile) check(err error) error {
	if err != nil {
		f.w.set(err)
	}
	return err
}

func (f *walFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.check(err)
}

func (f *walFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.check(err)
}

func (f *walFile) Sync() error     { return f.check(f.File.Sync()) }
func (f *walFile) SyncData() error { return f.check(f.File.SyncData()) }

func (f *walFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.check(err)
}

func (e *pebbleEngine) stats() (engineStats, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.db == nil {
		return engineStats{}, false
	}
	return pebbleStats(e.db.Metrics()), true
}

func pebbleStats(m *pebble.Metrics) engineStats {
	total := m.Total()
	return engineStats{
		diskBytes:        m.DiskSpaceUsage(),
		diskWrittenBytes: m.WAL.BytesWritten + total.TableBytesFlushed + total.TableBytesCompacted + total.BlobBytesFlushed + total.BlobBytesCompacted,
		memtableBytes:    m.MemTable.Size,
		cacheBytes:       m.BlockCache.Size,
	}
}
