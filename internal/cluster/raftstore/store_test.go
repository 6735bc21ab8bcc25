package raftstore

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
)

// TestLog runs each sequence of writes on a new store and checks the log it leaves:
// FirstIndex, LastIndex, every index present with its contents, every other index absent
// with raft.ErrLogNotFound. Each case runs on the open store and again after reopening
// it, which must rebuild the cached indexes from disk.
func TestLog(t *testing.T) {
	type want struct {
		first, last uint64
		terms       map[uint64]uint64 // index → term of every entry present
	}
	// span returns terms for lo..hi in term, merged into m.
	span := func(m map[uint64]uint64, lo, hi, term uint64) map[uint64]uint64 {
		if m == nil {
			m = map[uint64]uint64{}
		}
		for i := lo; ; i++ {
			m[i] = term
			if i == hi { // hi may be the largest index
				return m
			}
		}
	}
	store := func(lo, hi, term uint64) func(*Store) error {
		return func(s *Store) error { return s.StoreLogs(entries(lo, hi, term)) }
	}
	del := func(lo, hi uint64) func(*Store) error {
		return func(s *Store) error { return s.DeleteRange(lo, hi) }
	}
	for _, tc := range []struct {
		name string
		ops  []func(*Store) error
		want want
	}{
		{"Empty", nil, want{}},
		{"StoreLogsNone", []func(*Store) error{func(s *Store) error { return s.StoreLogs(nil) }}, want{}},
		{"StoreLog", []func(*Store) error{func(s *Store) error { return s.StoreLog(entry(1, 1)) }},
			want{1, 1, span(nil, 1, 1, 1)}},
		{"StoreLogs", []func(*Store) error{store(1, 10, 1)}, want{1, 10, span(nil, 1, 10, 1)}},
		{"StoreLogsFrom5", []func(*Store) error{store(5, 10, 1)}, want{5, 10, span(nil, 5, 10, 1)}},
		{"StoreLogsBelowFirst", []func(*Store) error{store(5, 10, 1), store(3, 4, 1)}, want{3, 10, span(nil, 3, 10, 1)}},
		{"Overwrite", []func(*Store) error{store(1, 10, 1), store(5, 6, 2)},
			want{1, 10, span(span(nil, 1, 10, 1), 5, 6, 2)}},
		{"Gap", []func(*Store) error{store(1, 5, 1), store(10, 12, 2)},
			want{1, 12, span(span(nil, 1, 5, 1), 10, 12, 2)}},
		{"DeleteFront", []func(*Store) error{store(1, 10, 1), del(1, 3)}, want{4, 10, span(nil, 4, 10, 1)}},
		{"DeleteFrontFrom0", []func(*Store) error{store(1, 10, 1), del(0, 3)}, want{4, 10, span(nil, 4, 10, 1)}},
		{"DeleteFrontTwice", []func(*Store) error{store(1, 10, 1), del(1, 3), del(4, 6)}, want{7, 10, span(nil, 7, 10, 1)}},
		{"DeleteTail", []func(*Store) error{store(1, 10, 1), del(8, 10)}, want{1, 7, span(nil, 1, 7, 1)}},
		{"DeleteTailToMax", []func(*Store) error{store(1, 10, 1), del(8, math.MaxUint64)}, want{1, 7, span(nil, 1, 7, 1)}},
		{"DeleteTailRewrite", []func(*Store) error{store(1, 10, 1), del(6, 10), store(6, 8, 2)},
			want{1, 8, span(span(nil, 1, 5, 1), 6, 8, 2)}},
		{"DeleteMiddle", []func(*Store) error{store(1, 10, 1), del(4, 6)},
			want{1, 10, span(span(nil, 1, 3, 1), 7, 10, 1)}},
		{"DeleteAll", []func(*Store) error{store(1, 10, 1), del(1, 10)}, want{}},
		{"DeleteAllWide", []func(*Store) error{store(1, 10, 1), del(0, math.MaxUint64)}, want{}},
		{"DeleteAllThenStore", []func(*Store) error{store(1, 10, 1), del(1, 10), store(20, 25, 3)},
			want{20, 25, span(nil, 20, 25, 3)}},
		{"DeleteOutside", []func(*Store) error{store(5, 10, 1), del(11, 30), del(1, 4)}, want{5, 10, span(nil, 5, 10, 1)}},
		{"DeleteEmptyRange", []func(*Store) error{store(1, 10, 1), del(6, 5)}, want{1, 10, span(nil, 1, 10, 1)}},
		{"DeleteOnEmpty", []func(*Store) error{del(1, 10)}, want{}},
		{"DeleteFrontAcrossGap", []func(*Store) error{store(1, 5, 1), store(10, 12, 1), del(1, 7)},
			want{10, 12, span(nil, 10, 12, 1)}},
		{"DeleteTailAcrossGap", []func(*Store) error{store(1, 5, 1), store(10, 12, 1), del(8, 12)},
			want{1, 5, span(nil, 1, 5, 1)}},
		{"IndexMax", []func(*Store) error{store(math.MaxUint64-2, math.MaxUint64-1, 1),
			func(s *Store) error { return s.StoreLog(entry(math.MaxUint64, 1)) }},
			want{math.MaxUint64 - 2, math.MaxUint64, span(span(nil, math.MaxUint64-2, math.MaxUint64-1, 1), math.MaxUint64, math.MaxUint64, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			for i, op := range tc.ops {
				if err := op(s); err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
			}
			check := func(when string, s *Store) {
				t.Helper()
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				if first != tc.want.first || last != tc.want.last {
					t.Errorf("%s: FirstIndex, LastIndex = %d, %d, want %d, %d", when, first, last, tc.want.first, tc.want.last)
				}
				probe := map[uint64]bool{0: true, 1: true, math.MaxUint64: true}
				for i := range uint64(40) {
					probe[i] = true
				}
				for i := range tc.want.terms {
					probe[i], probe[i-1], probe[i+1] = true, true, true
				}
				for i := range probe {
					var got raft.Log
					err := s.GetLog(i, &got)
					term, ok := tc.want.terms[i]
					switch {
					case !ok && !errors.Is(err, raft.ErrLogNotFound):
						t.Errorf("%s: GetLog(%d) = %v, want ErrLogNotFound", when, i, err)
					case ok && err != nil:
						t.Errorf("%s: GetLog(%d) = %v", when, i, err)
					case ok:
						if diff := sameLog(&got, entry(i, term)); diff != "" {
							t.Errorf("%s: GetLog(%d): %s", when, i, diff)
						}
					}
				}
			}
			check("open", s)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			check("reopened", openTest(t, dir))
		})
	}
}

// TestStable: Get and GetUint64 of a missing key return the zero value and no error, as
// raft.StableStore says; values survive a reopen; an empty value is present, not missing;
// Get returns a copy; Set copies its argument.
func TestStable(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	if v, err := s.Get([]byte("missing")); v != nil || err != nil {
		t.Errorf("Get(missing) = %q, %v, want nil, nil", v, err)
	}
	if v, err := s.GetUint64([]byte("missing")); v != 0 || err != nil {
		t.Errorf("GetUint64(missing) = %d, %v, want 0, nil", v, err)
	}
	val := []byte("candidate-1")
	for _, err := range []error{
		s.Set([]byte("LastVoteCand"), val),
		s.Set([]byte("empty"), nil),
		s.SetUint64([]byte("CurrentTerm"), 7),
		s.SetUint64([]byte("CurrentTerm"), 8),
		s.SetUint64([]byte("max"), math.MaxUint64),
		s.Set([]byte("short"), []byte{1, 2, 3}),
		s.Set(nil, []byte("the empty key")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	val[0] = 'X'
	check := func(when string, s *Store) {
		t.Helper()
		for key, want := range map[string]string{"LastVoteCand": "candidate-1", "empty": "", "": "the empty key"} {
			v, err := s.Get([]byte(key))
			if err != nil || v == nil || string(v) != want {
				t.Errorf("%s: Get(%q) = %q (nil %v), %v, want %q", when, key, v, v == nil, err, want)
			}
		}
		for key, want := range map[string]uint64{"CurrentTerm": 8, "max": math.MaxUint64} {
			if v, err := s.GetUint64([]byte(key)); v != want || err != nil {
				t.Errorf("%s: GetUint64(%q) = %d, %v, want %d", when, key, v, err, want)
			}
		}
		if _, err := s.GetUint64([]byte("short")); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: GetUint64 of a 3-byte value = %v, want ErrCorrupt", when, err)
		}
		v, _ := s.Get([]byte("LastVoteCand"))
		v[0] = 'Y'
		if v, _ := s.Get([]byte("LastVoteCand")); string(v) != "candidate-1" {
			t.Errorf("%s: changing what Get returned changed the store: %q", when, v)
		}
	}
	check("open", s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check("reopened", openTest(t, dir))
}

// TestLogAndStableApart: the log and the stable store do not see each other's keys.
func TestLogAndStableApart(t *testing.T) {
	s := openTest(t, t.TempDir())
	var k [logKeyLen - 1]byte // a stable key that looks like a log index
	k[7] = 1
	if err := s.Set(k[:], []byte("value")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(0, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 0 {
		t.Errorf("FirstIndex = %d with only a stable value", first)
	}
	if v, err := s.Get(k[:]); string(v) != "value" || err != nil {
		t.Errorf("Get after DeleteRange of the whole log = %q, %v", v, err)
	}
}

// TestCorruptRecord: a log record that does not decode is an error matching ErrCorrupt
// from GetLog, never a panic or a made-up entry.
func TestCorruptRecord(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.StoreLogs(entries(1, 3, 1)); err != nil {
		t.Fatal(err)
	}
	k := make([]byte, logKeyLen)
	putLogKey(k, 2)
	if err := s.db.Set(k, []byte{recordVersion, 0, 0, 0x80}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := s.GetLog(2, &l); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetLog of a corrupt record = %v, want ErrCorrupt", err)
	}
	if err := s.GetLog(3, &l); err != nil {
		t.Fatal(err)
	}
}

// TestClosed: every method of a closed store returns ErrClosed; Close again is nil.
func TestClosed(t *testing.T) {
	s, err := Open(t.TempDir(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	_, getErr := s.Get([]byte("k"))
	_, getUintErr := s.GetUint64([]byte("k"))
	for name, err := range map[string]error{
		"GetLog":      s.GetLog(1, &l),
		"StoreLog":    s.StoreLog(entry(1, 1)),
		"StoreLogs":   s.StoreLogs(entries(1, 2, 1)),
		"DeleteRange": s.DeleteRange(1, 2),
		"Set":         s.Set([]byte("k"), []byte("v")),
		"SetUint64":   s.SetUint64([]byte("k"), 1),
		"Get":         getErr,
		"GetUint64":   getUintErr,
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestOpenRefuses: Open refuses a Pebble database that is not a Raft log (such as the
// broker's store), one of a newer format, and a path that is a file, each with an error
// naming the directory; a database whose creation stopped before its format record opens
// as a new one.
func TestOpenRefuses(t *testing.T) {
	pebbleDB := func(t *testing.T, key, value []byte) string {
		dir := t.TempDir()
		db, err := pebble.Open(dir, &pebble.Options{Logger: pebbledb.Logger{Log: testLogger(t)}})
		if err != nil {
			t.Fatal(err)
		}
		if key != nil {
			if err := db.Set(key, value, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("ForeignPebble", func(t *testing.T) {
		dir := pebbleDB(t, []byte("their key"), []byte("their value"))
		if _, err := Open(dir, testLogger(t)); !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Open = %v, want ErrForeign naming %s", err, dir)
		}
	})
	t.Run("BrokerStore", func(t *testing.T) { // internal/store's format record
		dir := pebbleDB(t, metaKey, []byte("bifrost\x01"))
		if _, err := Open(dir, testLogger(t)); !errors.Is(err, ErrForeign) {
			t.Fatalf("Open = %v, want ErrForeign", err)
		}
	})
	t.Run("NewerFormat", func(t *testing.T) {
		dir := pebbleDB(t, metaKey, append([]byte(formatMagic), formatVersion+1))
		if _, err := Open(dir, testLogger(t)); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Open = %v, want ErrVersion naming %s", err, dir)
		}
	})
	t.Run("File", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(path, testLogger(t)); err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("Open = %v, want an error naming %s", err, path)
		}
	})
	t.Run("EmptyPebble", func(t *testing.T) {
		dir := pebbleDB(t, nil, nil)
		s := openTest(t, dir)
		if err := s.StoreLog(entry(1, 1)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestGetLogOwnsSlices: the slices GetLog hands out are the caller's: a later write or
// read does not change them.
func TestGetLogOwnsSlices(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.StoreLogs(entries(1, 3, 1)); err != nil {
		t.Fatal(err)
	}
	var a raft.Log
	if err := s.GetLog(3, &a); err != nil {
		t.Fatal(err)
	}
	data, ext := bytes.Clone(a.Data), bytes.Clone(a.Extensions)
	if err := s.StoreLogs(entries(3, 3, 9)); err != nil {
		t.Fatal(err)
	}
	var b raft.Log
	if err := s.GetLog(3, &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Data, data) || !bytes.Equal(a.Extensions, ext) {
		t.Fatalf("an entry read before changed: %q %q", a.Data, a.Extensions)
	}
	a.Extensions = append(a.Extensions, "more"...) // must not run into Data
	if !bytes.Equal(a.Data, data) {
		t.Fatalf("appending to Extensions changed Data: %q", a.Data)
	}
}

// TestGetLogOwnsSlicesFromTables: an entry read from a table keeps its contents while
// the block cache it was read through turns over: GetLog copies out of Pebble's block.
func TestGetLogOwnsSlicesFromTables(t *testing.T) {
	s := openTest(t, t.TempDir())
	const count = 4096 // 1 KiB each: 4 MiB of tables through the 1 MiB cache
	logs := make([]*raft.Log, 0, 64)
	for i := uint64(1); i <= count; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Data: bytes.Repeat([]byte{byte(i)}, 1024)})
		if len(logs) == cap(logs) {
			if err := s.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			logs = logs[:0]
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	var held []raft.Log
	for i := uint64(1); i <= count; i += 97 {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	for range 2 { // read every entry, twice: every block in and out of the cache
		for i := uint64(1); i <= count; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, l := range held {
		if want := bytes.Repeat([]byte{byte(l.Index)}, 1024); !bytes.Equal(l.Data, want) {
			t.Fatalf("entry %d read before the cache turned over changed: % x...", l.Index, l.Data[:16])
		}
	}
}
