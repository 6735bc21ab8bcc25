package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// Compaction of the log engine.
//
// The log grows with every commit, most of which a later one deletes (a queue entry
// lives until its PUBACK). When the file passes compactAt (twice its live records at the
// last open or compaction, plus compactSlack), the committer rewrites it:
//
//  1. replay the file into a logIndex: keys and the places of their values;
//  2. create store.log.tmp and write the header and the live records into it in key
//     order, as sets of up to 64 KiB per record, each value read from the old file;
//  3. fsync store.log.tmp;
//  4. rename it over store.log;
//  5. fsync the directory, and go on appending to the new file.
//
// A crash before step 4 leaves store.log whole (open removes a stray store.log.tmp); a
// crash after it leaves either name pointing at a complete log of the same records.
// A failure before step 4 removes the temporary file and keeps the old log; compaction
// is tried again after compactSlack more bytes. A failed directory fsync after the
// rename leaves the engine appending to the new file and fsyncing the directory again
// before its next write succeeds, so nothing is acknowledged that a crash could take
// back to the old file.
//
// It runs on the committer, after the dones of the group that crossed the threshold,
// rather than in the background: no write can then interleave with the rewrite (else
// the records appended meanwhile would have to be copied over under a lock), and at the
// sizes the log engine is for (an edge device's state, a few MiB) a rewrite takes
// milliseconds. Commits wait meanwhile, as they would for a slow fsync. Its memory is
// the index and its sorted keys, about 120 bytes plus the key per live record (no
// values), and one 64 KiB buffer. It does not run during Load, whose index holds offsets into the old file.

// maintain is called by the committer after each group's dones: it compacts the log if
// it has grown past its threshold.
func (e *logEngine) maintain() {
	if e.size < e.compactAt || e.broken != nil || e.dirSync {
		return
	}
	e.mu.Lock()
	loading := e.inLoad
	e.mu.Unlock()
	if loading {
		return
	}
	start := time.Now()
	before := e.size
	if err := e.compact(); err != nil {
		e.log.Error("store: log compaction failed; the old log stays in use",
			slog.String("file", e.path), slog.Any("err", err))
		e.compactAt = e.size + e.slack
		return
	}
	e.log.Debug("store: log compacted", slog.String("file", e.path), slog.Int64("from", before),
		slog.Int64("to", e.size), slog.Duration("took", time.Since(start)))
}

// compact rewrites the log with its live records (see above).
func (e *logEngine) compact() error {
	idx := newLogIndex()
	if _, err := scanLog(e.f, e.size, e.path, idx.apply); err != nil {
		return err
	}
	tmpPath := filepath.Join(e.dir, logTmpName)
	var tmp logFile
	var size int64
	err := e.do("create", func() (err error) {
		tmp, err = e.openFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
		return err
	})
	if err == nil {
		err = e.do("write", func() (err error) { size, err = e.writeLive(tmp, idx); return err })
	}
	if err == nil {
		err = e.do("sync", tmp.Sync)
	}
	if err == nil {
		err = e.do("rename", func() error { return os.Rename(tmpPath, e.path) })
	}
	if err != nil {
		return e.abandon(tmp, tmpPath, err)
	}
	// Renamed: store.log is the new file, whatever happens now.
	_ = e.f.Close()
	e.f, e.size, e.synced = tmp, size, size
	e.shown.Store(size)
	e.compactAt = 2*(size-int64(logHeaderSize)) + e.slack
	if err := e.do("syncdir", func() error { return syncDir(e.dir) }); err != nil {
		e.dirSync = true // repair fsyncs it before the next write
		e.retryAt = time.Now().Add(e.backoff)
		return fmt.Errorf("compacted, but the directory was not fsynced: %w", err)
	}
	return e.do("done", func() error { return nil })
}

// writeLive writes the header and idx's records, their values read from the current
// log, to f; it returns the bytes written.
func (e *logEngine) writeLive(f logFile, idx *logIndex) (int64, error) {
	buf := logHeader()
	var payload, v []byte
	var off int64 // bytes of f written
	out := func(all bool) error {
		for len(buf) >= logChunk || all && len(buf) > 0 {
			n := min(len(buf), logChunk)
			w, err := f.WriteAt(buf[:n], off)
			off += int64(w)
			e.addWritten(w)
			if err != nil {
				return err
			}
			buf = append(buf[:0], buf[n:]...)
		}
		return nil
	}
	seal := func() {
		if len(payload) > 0 {
			buf = appendRecord(buf, off+int64(len(buf)), payload) // all before it is durable when read
			payload = payload[:0]
		}
	}
	// In key order, the order Load reads them in: its 64 KiB reads then serve many
	// values each.
	for _, kl := range idx.sorted(nil, allKeysUpper) {
		v = grow(v, int(kl.loc.n))
		if _, err := e.f.ReadAt(v, kl.loc.off); err != nil {
			return off, err
		}
		b := Batch{data: payload}
		rawSetTo(&b, kl.k, v)
		if payload = b.data; len(payload) >= logChunk-recHeaderSize {
			seal()
			if err := out(false); err != nil {
				return off, err
			}
		}
	}
	seal()
	return off, out(true)
}

// rawSetTo appends the setting of key k to v to b.
func rawSetTo(b *Batch, k string, v []byte) {
	b.data = append(b.begin(opSet), k...)
	b.value()
	b.data = append(b.data, v...)
	b.end()
}

// abandon closes and removes the temporary file of a failed compaction.
func (e *logEngine) abandon(tmp logFile, path string, cause error) error {
	if tmp != nil {
		_ = tmp.Close()
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return errors.Join(cause, err)
	}
	return cause
}

// do runs the step of a compaction called step, unless the test hook fails it first.
func (e *logEngine) do(step string, f func() error) error {
	if e.step != nil {
		if err := e.step(step); err != nil {
			return err
		}
	}
	return f()
}
