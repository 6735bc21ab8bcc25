package pebbledb

import (
	"fmt"
	"syscall"

	"github.com/bifrost-mqtt/bifrost/internal/diskspace"
)

// OpenRoom is the least free space a database opens with. Every pebble.Open writes a new
// MANIFEST (and OPTIONS file and write-ahead log), and the flush of the write-ahead log it
// replays adds a table and then an edit to that MANIFEST. A MANIFEST write that fails
// on Pebble's flush goroutine is fatal to the process (Logger.Fatalf panics there): so an
// open with less than this free is refused before Pebble writes anything.
const OpenRoom = 256 << 10

// ReopenRoom returns the least free space a reopen of dir starts with: the write-ahead
// log it replays (its *.log files, an upper bound: one may be a recycled file), which
// the flush writes into a table, and OpenRoom.
func ReopenRoom(dir string) uint64 {
	return diskspace.FilesSize(dir, ".log") + OpenRoom
}

// NoRoom returns the error of op in dir ("store: open", "raftstore: reopen") when its
// file system has less than least bytes free: a diskspace.Error matching kind, saying
// what opening what ("the store") writes, the space that needs and the space there is,
// with advice; nil when there is room, or when the free space cannot be told.
func NoRoom(kind error, op, dir, what string, least uint64, advice string) error {
	free, ok := diskspace.Free(dir)
	if !ok || free >= least {
		return nil
	}
	wal := diskspace.FilesSize(dir, ".log")
	doing := "opening " + what + " writes a new MANIFEST and write-ahead log, which"
	if wal > 0 {
		doing = fmt.Sprintf("replaying the write-ahead log (%s) writes its records into a table and a new MANIFEST, which", diskspace.Bytes(wal))
	}
	return diskspace.NoSpace(kind, op, dir, doing, wal+OpenRoom, advice, syscall.ENOSPC)
}
