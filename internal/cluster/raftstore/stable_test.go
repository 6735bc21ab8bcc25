package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
)

// raft's stable keys, as a node of format 1 left them.
var formerStable = map[string][]byte{
	"CurrentTerm":  binary.BigEndian.AppendUint64(nil, 9),
	"LastVoteTerm": binary.BigEndian.AppendUint64(nil, 9),
	"LastVoteCand": []byte("127.0.0.1:7946"),
}

// formerLog writes in dir on fs a Raft log of format 1, as a build before the stable
// file wrote it: the format record, entries 1 to 10 and vals, all in Pebble.
func formerLog(t *testing.T, fs vfs.FS, dir string, vals map[string][]byte) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: pebbledb.Logger{Log: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	_ = b.Set(metaKey, append([]byte(formatMagic), 1), nil)
	for _, l := range entries(1, 10, 1) {
		k := make([]byte, logKeyLen)
		putLogKey(k, l.Index)
		_ = b.Set(k, appendLog(nil, l), nil)
	}
	for k, v := range vals {
		_ = b.Set(appendStableKey(nil, []byte(k)), appendStable(nil, v), nil)
	}
	if err := errors.Join(b.Commit(pebble.Sync), db.Close()); err != nil {
		t.Fatal(err)
	}
}

// checkStable fails t unless s holds vals.
func checkStable(t *testing.T, s *Store, vals map[string][]byte) {
	t.Helper()
	for k, want := range vals {
		if v, err := s.Get([]byte(k)); !bytes.Equal(v, want) || err != nil {
			t.Errorf("Get(%q) = %q, %v, want %q", k, v, err, want)
		}
	}
}

// TestStableMigrate: a node whose term and vote are in its Pebble log (format 1) starts
// with them, moved to the stable file: the log holds none of them, its format record
// says 2 (a build of format 1 refuses it from then on, rather than read a stale term),
// and what raft writes later is read back from the file. An open that stopped after the
// file was written but before the log said so moves the values again, over the file.
// A log of format 2 without its file is refused: the node must not start without its
// vote.
func TestStableMigrate(t *testing.T) {
	dir := t.TempDir()
	formerLog(t, vfs.Default, dir, formerStable)
	s := openTest(t, dir)
	checkStable(t, s, formerStable)
	checkEntries(t, s, entries(1, 10, 1))
	for k := range formerStable {
		if _, _, err := s.db.Get(appendStableKey(nil, []byte(k))); !errors.Is(err, pebble.ErrNotFound) {
			t.Errorf("the log still holds %q after the move: %v", k, err)
		}
	}
	v, closer, err := s.db.Get(metaKey)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v, append([]byte(formatMagic), formatVersion)) || formatVersion != 2 {
		t.Errorf("format record %q after the move, want format 2", v)
	}
	closer.Close()
	if err := s.SetUint64([]byte("CurrentTerm"), 10); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	if v, err := s.GetUint64([]byte("CurrentTerm")); v != 10 || err != nil {
		t.Errorf("CurrentTerm after a reopen = %d, %v, want 10", v, err)
	}
	checkStable(t, s, map[string][]byte{"LastVoteCand": formerStable["LastVoteCand"]})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	t.Run("Interrupted", func(t *testing.T) {
		dir := t.TempDir()
		formerLog(t, vfs.Default, dir, formerStable)
		stale := map[string][]byte{"CurrentTerm": binary.BigEndian.AppendUint64(nil, 3)}
		if err := createStable(vfs.Default, dir, stale); err != nil {
			t.Fatal(err)
		}
		checkStable(t, openTest(t, dir), formerStable)
	})
	t.Run("Missing", func(t *testing.T) {
		if err := os.Remove(filepath.Join(dir, stableName)); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, testLogger(t))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("Open of a log without its stable file = %v, want ErrCorrupt saying it is missing", err)
		}
		t.Logf("open: %v", err)
	})
}

// TestStableCreateNoSpace: a node that cannot create its stable file (a new log, or one
// of format 1 whose values move there) refuses to start with the error of a full disk,
// naming the file and the space, and leaves the log as it was: once there is room it
// starts with every value.
func TestStableCreateNoSpace(t *testing.T) {
	var full atomic.Bool
	full.Store(true)
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && strings.HasSuffix(op.Path, stableName+".tmp") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return &iofs.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	}))
	for _, dir := range []string{"/new", "/former"} {
		full.Store(true)
		if dir == "/former" {
			formerLog(t, fs, dir, formerStable)
		}
		_, err := openFS(fs, dir, testLogger(t))
		if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("%s: Open that cannot create its stable file = %v, want ErrNoSpace", dir, err)
		}
		for _, want := range []string{dir, "creating the file of Raft's term and vote", "needs up to 8.0 KiB", "cluster.dir"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the error does not say %q: %v", dir, want, err)
			}
		}
		t.Logf("%s: %v", dir, err)
		full.Store(false)
		s, err := openFS(fs, dir, testLogger(t))
		if err != nil {
			t.Fatalf("%s: Open once there is room: %v", dir, err)
		}
		if dir == "/former" {
			checkStable(t, s, formerStable)
			checkEntries(t, s, entries(1, 10, 1))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// stableFile returns the path of the stable file in dir and its two slots' sequence
// numbers and errors.
func stableSlots(t *testing.T, dir string) (path string, b []byte, seq [2]uint64, errs [2]error) {
	t.Helper()
	path = filepath.Join(dir, stableName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		seq[i], _, errs[i] = readSlot(b[i*stableSlot : (i+1)*stableSlot])
	}
	return path, b, seq, errs
}

// TestStableTorn: a write of a slot cut short (its first bytes new, the rest old) leaves
// the other slot, which holds the values of the write before: the store opens with them,
// and its next write goes to the torn slot. A file with neither slot intact, or of
// another size, is refused; so is a slot of a newer version.
func TestStableTorn(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for _, err := range []error{
		s.SetUint64([]byte("CurrentTerm"), 5),
		s.Set([]byte("LastVoteCand"), []byte("a")),
		s.SetUint64([]byte("CurrentTerm"), 6),
		s.Set([]byte("LastVoteCand"), []byte("b")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path, b, seq, errs := stableSlots(t, dir)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("slots: %v, %v", errs[0], errs[1])
	}
	newest := 0
	if seq[1] > seq[0] {
		newest = 1
	}
	// The torn write: the newest slot's first 512 bytes, over the bytes of the slot it
	// replaced (the other's, two writes older).
	torn := bytes.Clone(b)
	older := bytes.Clone(b[(1-newest)*stableSlot:])
	copy(torn[newest*stableSlot+512:(newest+1)*stableSlot], older[512:stableSlot])
	torn[newest*stableSlot+stableHeader] ^= 0xff // the first bytes differ from the old slot's too
	if err := os.WriteFile(path, torn, 0o644); err != nil {
		t.Fatal(err)
	}
	out := &lockedBuffer{}
	s, err := Open(dir, slog.New(slog.NewTextHandler(out, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "does not hold an intact write") {
		t.Errorf("the torn slot is not logged:\n%s", out.String())
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); v != 6 || err != nil {
		t.Errorf("CurrentTerm with the newest slot torn = %d, %v, want 6", v, err)
	}
	checkStable(t, s, map[string][]byte{"LastVoteCand": []byte("a")})
	if err := s.Set([]byte("LastVoteCand"), []byte("c")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, seq2, errs := stableSlots(t, dir); errs[0] != nil || errs[1] != nil || seq2[newest] != seq[newest] {
		t.Errorf("after a write over the torn slot: seqs %v (%v, %v), want slot %d at %d again", seq2, errs[0], errs[1], newest, seq[newest])
	}
	if s, err = Open(dir, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	checkStable(t, s, map[string][]byte{"LastVoteCand": []byte("c")})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
		want error
	}{
		{"BothTorn", func(b []byte) []byte { b[stableHeader] ^= 1; b[stableSlot+stableHeader] ^= 1; return b }, ErrCorrupt},
		{"Short", func(b []byte) []byte { return b[:stableSlot] }, ErrCorrupt},
		{"NewerSlots", func(b []byte) []byte {
			b[len(stableMagic)], b[stableSlot+len(stableMagic)] = stableVersion+1, stableVersion+1
			return b
		}, ErrVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, b, _, _ := stableSlots(t, dir)
			d := t.TempDir()
			if err := os.CopyFS(d, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, stableName), tc.edit(bytes.Clone(b)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(d, testLogger(t))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), d) {
				t.Fatalf("Open = %v, want %v naming the file", err, tc.want)
			}
			t.Logf("open: %v", err)
		})
	}
}

// TestStableFull: values that do not fit in a slot are refused, and the store keeps
// what it held.
func TestStableFull(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.Set([]byte("LastVoteCand"), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("big"), make([]byte, stableSlot)); !errors.Is(err, errStableFull) {
		t.Fatalf("Set of %d bytes = %v, want errStableFull", stableSlot, err)
	}
	if err := s.Set([]byte("big"), make([]byte, stableSlot-stableHeader-32)); err != nil {
		t.Fatalf("Set of what fits: %v", err)
	}
	checkStable(t, s, map[string][]byte{"LastVoteCand": []byte("a")})
	if v, _ := s.Get([]byte("big")); len(v) != stableSlot-stableHeader-32 {
		t.Errorf("Get(big) = %d bytes", len(v))
	}
}
