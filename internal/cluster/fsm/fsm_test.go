package fsm

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

const (
	idA = "0123456789abcdef0123456789abcdef"
	idB = "fedcba9876543210fedcba9876543210"
)

// applyEntry applies data at index as Raft would and returns the result.
func applyEntry(f *FSM, index uint64, data []byte) applied {
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(applied)
}

func TestCommandEncoding(t *testing.T) {
	data := Encode(Identity{ID: idA})
	if data[0] != entryVersion || kind(data[1]) != kindIdentity {
		t.Fatalf("entry starts % x; want version %d, kind %d", data[:2], entryVersion, kindIdentity)
	}
	c, err := decodeCommand(data)
	if err != nil {
		t.Fatal(err)
	}
	if c != (Identity{ID: idA}) {
		t.Fatalf("decoded %#v", c)
	}
	if len(data) != 2+1+32 {
		t.Errorf("identity entry is %d bytes; want 35", len(data))
	}
}

// TestIdentityOnce: the first identity entry chooses the id; a later one (a second
// leader that raced the first) changes nothing and is told the id in force.
func TestIdentityOnce(t *testing.T) {
	var f FSM
	changes := 0
	f.changed = func() { changes++ }
	if f.ClusterID() != "" {
		t.Fatal("a new FSM has an id")
	}
	if r := applyEntry(&f, 2, Encode(Identity{ID: idA})); r.err != nil || string(r.data) != idA {
		t.Fatalf("first identity: %q, %v", r.data, r.err)
	}
	if r := applyEntry(&f, 3, Encode(Identity{ID: idB})); r.err != nil || string(r.data) != idA {
		t.Fatalf("second identity: %q, %v; want the first id", r.data, r.err)
	}
	if f.ClusterID() != idA {
		t.Fatalf("cluster id %q; want %q", f.ClusterID(), idA)
	}
	if changes != 2 {
		t.Errorf("changed ran %d times; want 2", changes)
	}
}

// TestBadEntries: an entry this build cannot read is refused with a reason, identically
// on every node, and leaves the state alone.
func TestBadEntries(t *testing.T) {
	good := Encode(Identity{ID: idA})
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "a log entry of 0 bytes"},
		{"newer version", append([]byte{entryVersion + 1}, good[1:]...), "log entry version 2"},
		{"unknown kind", []byte{entryVersion, 200, 0}, "unknown command kind 200"},
		{"truncated", good[:len(good)-1], "truncated"},
		{"trailing bytes", append(bytes.Clone(good), 0), "1 bytes after the end"},
		{"not an id", Encode(Identity{ID: "n1"}), `identity "n1" is not a cluster id`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f FSM
			r := applyEntry(&f, 1, tc.data)
			if r.err == nil || !strings.Contains(r.err.Error(), tc.want) {
				t.Fatalf("err = %v; want %q", r.err, tc.want)
			}
			if f.ClusterID() != "" {
				t.Fatalf("a refused entry set the id to %q", f.ClusterID())
			}
		})
	}
}

// sink is a raft.SnapshotSink in memory.
type sink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *sink) ID() string    { return "test" }
func (s *sink) Close() error  { s.closed = true; return nil }
func (s *sink) Cancel() error { s.cancelled = true; return nil }

func persist(t testing.TB, snap raft.FSMSnapshot) []byte {
	t.Helper()
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	if !s.closed || s.cancelled {
		t.Fatalf("Persist left the sink closed=%v cancelled=%v", s.closed, s.cancelled)
	}
	snap.Release()
	return s.Bytes()
}

// TestSnapshotRestore: a snapshot restores the state it was taken of, and captures the
// state at Snapshot, not at Persist (which runs concurrently with later Applies).
func TestSnapshotRestore(t *testing.T) {
	var f FSM
	before, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	applyEntry(&f, 2, Encode(Identity{ID: idA}))
	after, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	emptyData, fullData := persist(t, before), persist(t, after)

	var g FSM
	restored := 0
	g.changed = func() { restored++ }
	if err := g.Restore(io.NopCloser(bytes.NewReader(fullData))); err != nil {
		t.Fatal(err)
	}
	if g.ClusterID() != idA || restored != 1 {
		t.Fatalf("restored id %q (changed ran %d times); want %q", g.ClusterID(), restored, idA)
	}
	// A restore replaces the state as a whole.
	if err := g.Restore(io.NopCloser(bytes.NewReader(emptyData))); err != nil {
		t.Fatal(err)
	}
	if g.ClusterID() != "" {
		t.Fatalf("the snapshot taken before the identity restored id %q", g.ClusterID())
	}
}

func TestRestoreRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not a snapshot this build reads"},
		{"newer version", []byte{snapshotVersion + 1}, "not a snapshot this build reads"},
		{"unknown section", []byte{snapshotVersion, 99, 0}, "snapshot section 99 unknown"},
		{"truncated section", []byte{snapshotVersion, 1, 5, 'a'}, "truncated"},
		{"section with trailing bytes", []byte{snapshotVersion, 1, 2, 0, 0}, "after the end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f FSM
			applyEntry(&f, 1, Encode(Identity{ID: idA}))
			err := f.Restore(io.NopCloser(bytes.NewReader(tc.data)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want %q", err, tc.want)
			}
			if f.ClusterID() != idA {
				t.Fatal("a refused snapshot changed the state")
			}
		})
	}
}

// TestPersistError: a sink that fails is cancelled, not closed, and the error returned.
func TestPersistError(t *testing.T) {
	var f FSM
	snap, _ := f.Snapshot()
	s := &failSink{}
	if err := snap.Persist(s); err == nil || !s.cancelled {
		t.Fatalf("Persist = %v, cancelled %v; want an error and a cancelled sink", err, s.cancelled)
	}
}

type failSink struct{ sink }

func (s *failSink) Write([]byte) (int, error) { return 0, errors.New("disk full") }
