package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// The log engine (store.engine: log) keeps the records in one append-only file of
// committed batches (log_file.go draws it). The broker holds its state in memory and
// reads the store only in Load, so the engine keeps no index of values while it runs:
// open replays the file into a logIndex (keys and where their values lie), Load's
// iterators read the values from the file through it, and the index is dropped when Load
// ends (or at the first write outside a Load: it is never kept up to date for long). Writes are appends: each group is written with one write of up to 64 KiB (a
// larger group in 64 KiB pieces), and fdatasynced before its done under sync: always.
// When the file has grown past twice its live records plus compactSlack, the committer
// rewrites it with only those (log_compact.go).
//
// A failed write or fdatasync leaves the engine broken: the next write first cuts the
// file back to what is known good (the end of the last whole group after a failed write,
// the last fdatasync after a failed one, since the page cache can no longer be trusted)
// and then goes on, trying at most once per backoff. Batches acknowledged under interval
// or none since the last fdatasync may be lost that way, as a crash would lose them.

// A logFile is the log engine's view of a file: *os.File, or a test's wrapper of one.
type logFile interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	Sync() error
	Close() error
}

// logEngine is the engine of store.engine: log.
type logEngine struct {
	dir, path string
	log       *slog.Logger
	wrap      func(logFile) logFile // tests' fault injection; nil on the OS
	backoff   time.Duration
	release   func() // lets go of the directory's claim and lock; nil once closed

	// Written by the committer only (and by open and close).
	f         logFile
	size      int64  // bytes of the file written and good
	synced    int64  // bytes of the file known durable
	buf       []byte // records waiting for their write
	broken    error  // the failure that left the file to repair; nil when good
	retryAt   time.Time
	dirSync   bool         // the directory must be fsynced before the next write (log_compact.go)
	compactAt int64        // the size past which the committer compacts
	slack     int64        // compactSlack; smaller in tests
	written   int64        // bytes written to disk in all, compactions included; under mu
	shown     atomic.Int64 // size as of the last write, for stats

	mu     sync.Mutex  // guards idx, inLoad, sorted and written
	idx    *logIndex   // from open until Load ends or a write outside Load; kept up to date by Load's writes
	inLoad bool        // Load runs
	sorted sortedRange // the last range iter sorted, while idx is held
	// step, if set, is called before each step of a compaction, which fails at that
	// step if it returns an error (tests).
	step func(string) error
}

// compactSlack is what the log may hold beyond twice its live records before the
// committer compacts it: 4 MiB, so that a small state (a device's few hundred sessions)
// is rewritten once per 4 MiB of appends rather than at every few KiB, and a large one at
// most each time the appends since the last compaction equal its size (a write
// amplification of at most 2).
const compactSlack = 4 << 20

// openLog opens the log engine's store in cfg.Dir; wrap, if not nil, wraps its files.
func openLog(cfg conf.Store, log *slog.Logger, wrap func(logFile) logFile) (*store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("store: no directory configured (store.dir)")
	}
	if log == nil {
		log = slog.Default()
	}
	policy, err := parseSync(cfg.Sync)
	if err != nil {
		return nil, err
	}
	dir := cfg.Dir
	c := conf.Config{Store: cfg}
	c.EnsureDefaults()
	cfg = c.Store
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: create %s: %w", dir, err)
	}
	if err := checkLogDir(dir); err != nil {
		return nil, err
	}
	release, err := claimDir(dir)
	if err != nil {
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(dir, lockName))
	if err != nil {
		release()
		if held := inUse(dir); held != nil {
			return nil, held
		}
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	e := &logEngine{dir: dir, path: filepath.Join(dir, logName), log: log, wrap: wrap, backoff: reopenBackoff,
		slack: compactSlack, release: func() { unlock(); release() }}
	if err := e.open(); err != nil {
		if e.f != nil {
			_ = e.f.Close()
		}
		e.release()
		return nil, err
	}
	// The commit queue is bounded as the pebble engine's (commit.go, invariant 6), so
	// that store.memtable_size keeps its meaning for the memory waiting batches pin.
	maxQueue := max(int(cfg.MemtableSize/2), 256<<10)
	warnLowSpace(log, dir, uint64(maxQueue), "a commit group writes up to half store.memtable_size, at least 256 KiB")
	s := newStore(e, policy, time.Duration(cfg.SyncInterval), maxQueue, log)
	s.dir = dir
	return s, nil
}

// checkLogDir refuses a directory holding something other than the log engine's files:
// Pebble's (naming the engine that wrote them) or anything else. What a first open that
// was interrupted leaves (an empty or partial log, a lock) is the log engine's.
func checkLogDir(dir string) error {
	names, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("store: open %s: %w", dir, err)
	}
	for _, d := range names {
		switch name := d.Name(); {
		case name == logName, name == logTmpName, name == lockName, name == "lost+found":
		case pebbleFile(name):
			return fmt.Errorf("%w: %s holds a store written by the pebble engine (%s) and this configuration has store.engine: %s; set store.engine: %s to open it, or point store.dir at an empty or new directory",
				ErrOtherEngine, dir, name, conf.EngineLog, conf.EnginePebble)
		default:
			return fmt.Errorf("%w: %s holds %q and no store; point store.dir at an empty or new directory",
				ErrForeign, dir, name)
		}
	}
	return nil
}

func (e *logEngine) openFile(path string, flag int) (logFile, error) {
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, err
	}
	if e.wrap != nil {
		return e.wrap(f), nil
	}
	return f, nil
}

// open opens or creates the log file, replays it into the index and cuts a torn tail.
func (e *logEngine) open() error {
	if err := os.Remove(filepath.Join(e.dir, logTmpName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: open %s: %w", e.dir, err)
	}
	f, err := e.openFile(e.path, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return fmt.Errorf("store: open %s: %w", e.dir, err)
	}
	e.f = f
	size, err := fileSize(e.path)
	if err != nil {
		return err
	}
	head := make([]byte, logHeaderSize)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("store: open %s: %w", e.path, err)
	}
	if size < int64(logHeaderSize) && bytes.HasPrefix(logHeader(), head[:n]) {
		// New, or a creation that stopped before its header was durable.
		if err := e.create(); err != nil {
			return err
		}
		size = int64(logHeaderSize)
	} else if err := checkHeader(head[:n], e.path); err != nil {
		return err
	} else if head[len(logMagic)+1] != formatVersion {
		// A store of an older format this build reads: marked with this build's before
		// anything is written to it, so that the older build refuses it from now on.
		if _, err := f.WriteAt(logHeader(), 0); err != nil {
			return fmt.Errorf("store: open %s: %w", e.path, err)
		}
	}
	idx := newLogIndex()
	end, err := scanLog(f, size, e.path, idx.apply)
	if err != nil {
		return err
	}
	if end < size {
		e.log.Warn("store: cut the torn tail of the log (a write that a crash interrupted: nothing acknowledged under sync: always)",
			slog.String("file", e.path), slog.Int64("offset", end), slog.Int64("bytes", size-end))
		if err := f.Truncate(end); err != nil {
			return fmt.Errorf("store: open %s: cut the torn tail: %w", e.path, err)
		}
	}
	// Durable from here on, whatever the policy was: a later record's claim proves it.
	// A full fsync, so that a cut's new size is durable too.
	if err := f.Sync(); err != nil {
		return fmt.Errorf("store: open %s: %w", e.path, err)
	}
	e.size, e.synced, e.idx = end, end, idx
	e.shown.Store(end)
	e.compactAt = 2*idx.live + e.slack
	return e.checkMeta()
}

// create writes the header of a new log and makes it and its name durable.
func (e *logEngine) create() error {
	if err := e.f.Truncate(0); err != nil {
		return fmt.Errorf("store: create %s: %w", e.path, err)
	}
	if _, err := e.f.WriteAt(logHeader(), 0); err != nil {
		return fmt.Errorf("store: create %s: %w", e.path, err)
	}
	if err := e.f.Sync(); err != nil {
		return fmt.Errorf("store: create %s: %w", e.path, err)
	}
	if err := syncDir(e.dir); err != nil {
		return fmt.Errorf("store: create %s: %w", e.path, err)
	}
	return nil
}

// checkMeta checks the format record, if a build wrote one into the log: a newer build
// may, to tell records of a newer format apart.
func (e *logEngine) checkMeta() error {
	loc, ok := e.idx.keys[string(metaKey)]
	if !ok {
		return nil
	}
	v := make([]byte, loc.n)
	if _, err := e.f.ReadAt(v, loc.off); err != nil {
		return fmt.Errorf("store: open %s: %w", e.path, err)
	}
	if len(v) != len(formatMagic)+1 || !bytes.HasPrefix(v, []byte(formatMagic)) {
		return fmt.Errorf("%w: %s has a foreign format record %q", ErrForeign, e.path, v)
	}
	if v[len(formatMagic)] > formatVersion || v[len(formatMagic)] < oldestFormat {
		return fmt.Errorf("%w: %s holds a store of format %d; this build reads format %d",
			ErrVersion, e.path, v[len(formatMagic)], formatVersion)
	}
	return nil
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("store: open %s: %w", path, err)
	}
	return fi.Size(), nil
}

func (e *logEngine) write(group []*Batch, sync bool) error {
	if err := e.repair(); err != nil {
		return err
	}
	start := e.size
	for _, b := range group {
		if len(b.data) == 0 {
			continue
		}
		if len(e.buf) > 0 && len(e.buf)+recHeaderSize+len(b.data) > logChunk {
			if err := e.flushBuf(); err != nil {
				return e.fail(err, start)
			}
		}
		e.buf = appendRecord(e.buf, e.synced, b.data)
	}
	if err := e.flushBuf(); err != nil {
		return e.fail(err, start)
	}
	if sync && e.size > e.synced {
		if err := datasync(e.f); err != nil {
			return e.fail(err, e.synced)
		}
		e.synced = e.size
	}
	e.shown.Store(e.size)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.idx != nil && !e.inLoad {
		e.idx, e.sorted = nil, sortedRange{} // nothing but Load reads the store; iter replays the log if asked
	}
	if e.idx != nil {
		off := start
		for _, b := range group {
			if len(b.data) > 0 {
				_ = e.idx.apply(b.data, off+recHeaderSize) // a Batch's own encoding
				off += recHeaderSize + int64(len(b.data))
			}
		}
	}
	return nil
}

// flushBuf writes the buffered records, in logChunk pieces.
func (e *logEngine) flushBuf() error {
	for p := e.buf; len(p) > 0; {
		n := min(len(p), logChunk)
		w, err := e.f.WriteAt(p[:n], e.size)
		e.size += int64(w)
		e.addWritten(w)
		if err != nil {
			return err
		}
		p = p[n:]
	}
	if cap(e.buf) > 4*logChunk { // a spike's buffer goes back
		e.buf = nil
	}
	e.buf = e.buf[:0]
	return nil
}

func (e *logEngine) addWritten(n int) {
	e.mu.Lock()
	e.written += int64(n)
	e.mu.Unlock()
}

// fail records a failed write or fdatasync; repair cuts the file back to good before
// the next write.
func (e *logEngine) fail(err error, good int64) error {
	e.log.Error("store: log write failed; the log is cut back to its last good record before the next commit",
		slog.String("file", e.path), slog.Any("err", err))
	e.buf = e.buf[:0]
	e.size = min(e.size, good)
	if e.broken == nil {
		e.broken = err
	}
	e.retryAt = time.Now().Add(e.backoff)
	return err
}

// repair makes a broken log good again: cuts it to the last good record, makes that
// durable, and fsyncs the directory if a compaction's rename is not yet known durable.
func (e *logEngine) repair() error {
	if e.broken == nil && !e.dirSync {
		return nil
	}
	if time.Now().Before(e.retryAt) {
		return e.broken
	}
	if e.dirSync {
		if err := syncDir(e.dir); err != nil {
			e.retryAt = time.Now().Add(e.backoff)
			return err
		}
		e.dirSync = false
	}
	if e.broken == nil {
		return nil
	}
	good := e.size
	if err := e.f.Truncate(good); err != nil {
		e.retryAt = time.Now().Add(e.backoff)
		return err
	}
	if err := e.f.Sync(); err != nil { // the new size with the data

		e.retryAt = time.Now().Add(e.backoff)
		return err
	}
	e.synced = good
	e.log.Info("store: log repaired after a failed write", slog.String("file", e.path), slog.Int64("size", good))
	e.broken = nil
	return nil
}

func (e *logEngine) flush() error {
	if err := e.repair(); err != nil {
		return err
	}
	if e.size == e.synced {
		return nil
	}
	if err := datasync(e.f); err != nil {
		return e.fail(err, e.synced)
	}
	e.synced = e.size
	return nil
}

// loading keeps the index up to date through Load's sweeps.
func (e *logEngine) loading() {
	e.mu.Lock()
	e.inLoad = true
	e.mu.Unlock()
}

// loaded drops the index: Load is over, and nothing else reads the store.
func (e *logEngine) loaded() {
	e.mu.Lock()
	e.idx, e.inLoad, e.sorted = nil, false, sortedRange{}
	e.mu.Unlock()
}

// iter returns an iterator over [lower, upper), replaying the log again if Load is over.
func (e *logEngine) iter(lower, upper []byte) (iterator, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.idx == nil {
		idx := newLogIndex()
		if _, err := scanLog(e.f, e.size, e.path, idx.apply); err != nil {
			return nil, err
		}
		e.idx = idx
	}
	r := sortedRange{string(lower), string(upper), e.idx.version, nil}
	if e.sorted.kls != nil && e.sorted.lower == r.lower && e.sorted.upper == r.upper && e.sorted.version == r.version {
		r.kls = e.sorted.kls // Load walks the clients twice
	} else {
		r.kls = e.idx.sorted(lower, upper)
	}
	e.sorted = r
	return &logIter{f: e.f, size: e.size, kls: r.kls, i: -1}, nil
}

// A sortedRange is the keys of [lower, upper) of the index at version, in order.
type sortedRange struct {
	lower, upper string
	version      uint64
	kls          []keyLoc
}

func (e *logEngine) stats() (engineStats, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return engineStats{diskBytes: uint64(e.shown.Load()), diskWrittenBytes: uint64(e.written)}, true
}

func (e *logEngine) close() error {
	if e.release == nil {
		return nil
	}
	defer func() { e.release(); e.release = nil }()
	err := e.flush()
	if e.dirSync {
		err = errors.Join(err, syncDir(e.dir))
	}
	return errors.Join(err, e.f.Close())
}

// logIter iterates the keys of a range of the index in order, reading each value from
// the file when it is asked for, through a window of logChunk bytes: the values of
// neighbouring keys were mostly written together, so one read serves many.
type logIter struct {
	f      io.ReaderAt
	size   int64 // of the file
	kls    []keyLoc
	i      int
	win    []byte // the file's bytes from winOff
	winOff int64
	err    error
}

func (it *logIter) First() bool  { it.i = 0; return it.Valid() }
func (it *logIter) Next() bool   { it.i++; return it.Valid() }
func (it *logIter) Valid() bool  { return it.i >= 0 && it.i < len(it.kls) }
func (it *logIter) Key() []byte  { return []byte(it.kls[it.i].k) }
func (it *logIter) Error() error { return it.err }
func (it *logIter) Close() error { return nil }

func (it *logIter) SeekGE(key []byte) bool {
	it.i, _ = slices.BinarySearchFunc(it.kls, string(key), func(kl keyLoc, k string) int { return strings.Compare(kl.k, k) })
	return it.Valid()
}

// ValueAndErr returns the value, valid until the next call.
func (it *logIter) ValueAndErr() ([]byte, error) {
	loc := it.kls[it.i].loc
	end := loc.off + int64(loc.n)
	if loc.off < it.winOff || end > it.winOff+int64(len(it.win)) {
		n := max(int64(loc.n), min(logChunk, it.size-loc.off))
		if cap(it.win) < int(n) || cap(it.win) > logChunk && n <= logChunk {
			it.win = make([]byte, max(n, logChunk))
		}
		it.win = it.win[:n]
		if _, err := it.f.ReadAt(it.win, loc.off); err != nil {
			it.win, it.err = it.win[:0], err
			return nil, err
		}
		it.winOff = loc.off
	}
	return it.win[loc.off-it.winOff : end-it.winOff], nil
}
