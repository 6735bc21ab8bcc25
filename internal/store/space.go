package store

import (
	"log/slog"

	"github.com/bifrost-mqtt/bifrost/internal/diskspace"
)

// What the store says when its disk is full: at open, at Load, and when it opens with
// little room left (docs/durability.md, "When the disk is full").

// noSpace returns the error of op (open, reopen, load) in dir, where doing (an "-ing"
// phrase) needed about need bytes (0: unknown) and failed with cause: a diskspace.Error
// matching ErrNoSpace, or cause as it is unless it is a full disk.
func noSpace(op, dir, doing string, need uint64, cause error) error {
	return diskspace.NoSpace(ErrNoSpace, "store: "+op, dir, doing, need, noSpaceAdvice(op), cause)
}

// noSpaceAdvice says what to do after op failed on a full disk.
func noSpaceAdvice(op string) string {
	if op == "reopen" {
		return "commits fail until space is freed there, and the store then reopens by itself"
	}
	return "free space there or move store.dir, then start again"
}

// warnLowSpace logs a warning when dir's file system has less than need bytes free, what
// the engine may need for its next write (what names it): the broker serves, and says
// that commits fail once the disk is full.
func warnLowSpace(log *slog.Logger, dir string, need uint64, what string) {
	free, ok := diskspace.Free(dir)
	if !ok || free >= need {
		return
	}
	log.Warn("store: little space left: commits fail while the disk is full (MQTT 5.0: PUBACK or PUBREC 0x97; 3.1.1: the connection is closed) and work again once space is freed",
		slog.String("dir", dir), slog.String("free", diskspace.Bytes(free)), slog.String("needs", diskspace.Bytes(need)+" ("+what+")"))
}
