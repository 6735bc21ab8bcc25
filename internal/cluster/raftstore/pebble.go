package raftstore

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

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

// ErrForeign is returned by Open for a directory that holds a Pebble database that is not
// a bifrost Raft log.
var ErrForeign = errors.New("raftstore: not a bifrost Raft log")

// ErrVersion is returned by Open for a Raft log of a newer format than this build reads.
var ErrVersion = errors.New("raftstore: unsupported format version")

// openPebble opens or creates the database in dir on fs and checks its format record.
func openPebble(fs vfs.FS, dir string, log *slog.Logger) (*pebble.DB, error) {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raftstore: create %s: %w", dir, err)
	}
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
	}
	opts := &pebble.Options{
		CacheSize:          cacheSize,
		MemTableSize:       memTableSize,
		FormatMajorVersion: pebbleFormat,
		Logger:             pebbledb.NewLogger(log),
		FS:                 fs,
	}
	// Pebble's default today, pinned: zstd is never used (internal/store's package doc,
	// Build).
	for i := range opts.Levels {
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.SnappyCompression }
	}
	if desc.Exists {
		// Open an existing database at its own format: if it turns out not to be ours,
		// it must leave as it came. Ours is raised to pebbleFormat after the check.
		opts.FormatMajorVersion = pebble.FormatMinSupported
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
	}
	if err := format.Check(db, dir); err != nil {
		_ = db.Close()
		return nil, err
	}
	if db.FormatMajorVersion() < pebbleFormat {
		if err := db.RatchetFormatMajorVersion(pebbleFormat); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
		}
	}
	return db, nil
}
