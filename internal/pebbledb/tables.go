package pebbledb

import (
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A TableWatch is the file system under Pebble's tables (.sst and .blob files). After a
// write of one failed, it holds the next creation of one until Backoff has passed, so
// that Pebble, which retries a failed flush or compaction at once and forever, retries
// at most once per Backoff: on a full disk a try (its garbage, its log line) a second. It
// holds no lock of Pebble's meanwhile: Pebble creates tables with its database mutex
// released.
type TableWatch struct {
	vfs.FS
	Backoff time.Duration

	mu       sync.Mutex
	failedAt time.Time // of the last failed write; zero if none
	err      error     // the last failed write's
}

// Unwrap returns the file system underneath, as vfs.FS requires.
func (w *TableWatch) Unwrap() vfs.FS { return w.FS }

// Create implements vfs.FS.
func (w *TableWatch) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if !isTable(name) {
		return w.FS.Create(name, c)
	}
	w.mu.Lock()
	wait := time.Until(w.failedAt.Add(w.Backoff))
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

func (w *TableWatch) fail(err error) {
	w.mu.Lock()
	w.failedAt, w.err = time.Now(), err
	w.mu.Unlock()
}

// FailedWithin returns the error of the last failed table write if it was less than d
// ago.
func (w *TableWatch) FailedWithin(d time.Duration) error {
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

// tableFile is a table being written under a TableWatch.
type tableFile struct {
	vfs.File
	w *TableWatch
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
