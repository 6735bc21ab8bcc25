//go:build !bifrost_nopebble

package store

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// openPebbleHooked opens the pebble engine's store, its WAL files watched by h if not nil.
func openPebbleHooked(cfg conf.Store, log *slog.Logger, h *hooks) (*store, error) {
	var fs vfs.FS
	if h != nil {
		fs = &hookFS{FS: vfs.Default, h: h}
	}
	return openPebble(cfg, log, fs)
}

func setPebbleBackoff(e engine, d time.Duration) { e.(*pebbleEngine).backoff = d }

// hookFS is a file system whose WAL files are under hooks: creating one fails too while
// the disk is full. (Failing the MANIFEST would stop the process, as Pebble intends; see
// the package doc.)
type hookFS struct {
	vfs.FS
	h *hooks
}

func (fs *hookFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(name, func() (vfs.File, error) { return fs.FS.Create(name, c) })
}

func (fs *hookFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(newname, func() (vfs.File, error) { return fs.FS.ReuseForWrite(oldname, newname, c) })
}

// Unwrap returns the file system underneath, as vfs.FS requires.
func (fs *hookFS) Unwrap() vfs.FS { return fs.FS }

func (fs *hookFS) wrap(name string, open func() (vfs.File, error)) (vfs.File, error) {
	if !strings.HasSuffix(name, ".log") {
		return open()
	}
	if err := fs.h.check(); err != nil {
		return nil, err
	}
	f, err := open()
	if err != nil {
		return nil, err
	}
	return &hookWAL{f, fs.h}, nil
}

type hookWAL struct {
	vfs.File
	h *hooks
}

func (f *hookWAL) Write(p []byte) (int, error) {
	if err := f.h.check(); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *hookWAL) WriteAt(p []byte, off int64) (int, error) {
	if err := f.h.check(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *hookWAL) Sync() error {
	if err := f.h.sync(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *hookWAL) SyncData() error {
	if err := f.h.sync(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *hookWAL) SyncTo(length int64) (bool, error) {
	if err := f.h.sync(); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}

// storeFormatRecord reads the format of the pebble engine's store in dir from its format record.
func storeFormatRecord(t *testing.T, dir string) byte {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get(metaKey)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return v[len(v)-1]
}
