package fsm

import (
	"bytes"
	"encoding/binary"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

var (
	pwA  = auth.File{Block: "", Kind: auth.KindPassword, Data: []byte("alice:$2a$04$x\n")}
	aclA = auth.File{Block: "", Kind: auth.KindACL, Data: []byte("user alice\ntopic read a/#\n")}
	pwB  = auth.File{Block: "", Kind: auth.KindPassword, Data: []byte("bob:$2a$04$y\n")}
	aclL = auth.File{Block: "tls", Kind: auth.KindACL, Data: []byte{}}
)

// authResult applies an auth entry at index and returns the index of the files in force
// it answers.
func authResult(t *testing.T, f *FSM, index uint64, c AuthFiles) uint64 {
	t.Helper()
	r := applyEntry(f, index, Encode(c))
	if r.err != nil {
		t.Fatalf("apply at %d: %v", index, r.err)
	}
	v, n := binary.Uvarint(r.data)
	if n != len(r.data) {
		t.Fatalf("result % x is not one uvarint", r.data)
	}
	return v
}

func TestAuthEncoding(t *testing.T) {
	for _, c := range []AuthFiles{
		{},
		{Seed: true, Files: []auth.File{pwA, aclA, aclL}},
		{Files: []auth.File{pwB}},
	} {
		got, err := decodeCommand(Encode(c))
		if err != nil {
			t.Fatal(err)
		}
		if c.Files == nil {
			c.Files = []auth.File{}
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("decoded %+v; want %+v", got, c)
		}
	}
	bad := Encode(AuthFiles{Files: []auth.File{pwA}})
	bad[2] = 0x80 // a flag this build does not know
	if _, err := decodeCommand(bad); err == nil || !strings.Contains(err.Error(), "auth flags") {
		t.Errorf("unknown flag: %v", err)
	}
}

// TestAuthApply: a set replaces what the log holds; a seed sets only keys that have
// nothing; contents equal to those in force change nothing; every node is told the index
// of the files in force.
func TestAuthApply(t *testing.T) {
	var f FSM
	if files, index := f.AuthFiles(); len(files) != 0 || index != 0 {
		t.Fatalf("a new FSM holds %d auth files at %d", len(files), index)
	}
	// The first node's seed becomes the cluster's.
	if got := authResult(t, &f, 3, AuthFiles{Seed: true, Files: []auth.File{pwA, aclA}}); got != 3 {
		t.Fatalf("first seed: files in force at %d; want 3", got)
	}
	// A later node's seed changes only what is missing: its listener's ACL.
	if got := authResult(t, &f, 4, AuthFiles{Seed: true, Files: []auth.File{pwB, aclL}}); got != 4 {
		t.Fatalf("second seed: files in force at %d; want 4", got)
	}
	files, index := f.AuthFiles()
	if want := []auth.File{pwA, aclA, aclL}; !reflect.DeepEqual(files, want) || index != 4 {
		t.Fatalf("after the seeds: %q at %d; want %q at 4", files, index, want)
	}
	// A seed with nothing new, and a set of the contents in force, change nothing.
	if got := authResult(t, &f, 5, AuthFiles{Seed: true, Files: []auth.File{pwB}}); got != 4 {
		t.Fatalf("seed of a key held: files in force at %d; want 4", got)
	}
	if got := authResult(t, &f, 6, AuthFiles{Files: []auth.File{aclA}}); got != 4 {
		t.Fatalf("set of the contents held: files in force at %d; want 4", got)
	}
	// A reload's set replaces.
	if got := authResult(t, &f, 7, AuthFiles{Files: []auth.File{pwB}}); got != 7 {
		t.Fatalf("set: files in force at %d; want 7", got)
	}
	if files, _ := f.AuthFiles(); !bytes.Equal(files[0].Data, pwB.Data) {
		t.Fatalf("the password file is %q after the set", files[0].Data)
	}
}

// TestAuthRefused: an entry the cluster does not replicate is refused as a whole, the
// same way on every node, and leaves the state alone.
func TestAuthRefused(t *testing.T) {
	big := auth.File{Block: "", Kind: auth.KindACL, Data: make([]byte, MaxAuthFile+1)}
	half := make([]byte, MaxAuthFile/2+MaxAuthFile/4)
	for _, tc := range []struct {
		name  string
		files []auth.File
		want  string
	}{
		{"too big", []auth.File{pwB, big}, "the ACL file of auth is 3145729 bytes; at most 3145728 (3 MiB)"},
		{"too much", []auth.File{
			{Block: "a", Kind: auth.KindACL, Data: half}, {Block: "b", Kind: auth.KindACL, Data: half},
			{Block: "c", Kind: auth.KindACL, Data: half}}, "go in one entry"},
		{"unknown kind", []auth.File{pwB, {Block: "", Kind: 7, Data: []byte("x")}}, "auth file kind 7 unknown"},
		{"twice", []auth.File{pwB, pwB}, "twice in one entry"},
		{"bad block", []auth.File{{Block: "a\x00b", Kind: auth.KindACL}}, "not a listener name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f FSM
			authResult(t, &f, 1, AuthFiles{Files: []auth.File{pwA}})
			r := applyEntry(&f, 2, Encode(AuthFiles{Files: tc.files}))
			if r.err == nil || !strings.Contains(r.err.Error(), tc.want) {
				t.Fatalf("err = %v; want %q", r.err, tc.want)
			}
			if files, index := f.AuthFiles(); len(files) != 1 || !bytes.Equal(files[0].Data, pwA.Data) || index != 1 {
				t.Fatalf("a refused entry changed the files: %q at %d", files, index)
			}
		})
	}
}

// TestAuthSnapshot: the auth files and their index survive a snapshot round trip beside
// the other parts, and a snapshot without the auth section (an older build's) restores
// with none.
func TestAuthSnapshot(t *testing.T) {
	var f FSM
	applyEntry(&f, 1, Encode(Identity{ID: idA}))
	authResult(t, &f, 2, AuthFiles{Seed: true, Files: []auth.File{pwA, aclA, aclL}})
	authResult(t, &f, 3, AuthFiles{Files: []auth.File{pwB}})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Persist writes the state as Snapshot saw it.
	authResult(t, &f, 4, AuthFiles{Files: []auth.File{pwA}})
	data := persist(t, snap)

	var g FSM
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	files, index := g.AuthFiles()
	if want := []auth.File{pwB, aclA, aclL}; !reflect.DeepEqual(files, want) || index != 3 || g.ClusterID() != idA {
		t.Fatalf("restored %q at %d (id %q); want %q at 3", files, index, g.ClusterID(), want)
	}

	old := []byte{snapshotVersion}
	for _, p := range parts {
		w := p.capture(&f.s)
		if p.section == 4 || w == nil {
			continue
		}
		body := w(nil)
		old = append(old, p.section)
		old = appendUvarint(old, uint64(len(body)))
		old = append(old, body...)
	}
	var h FSM
	if err := h.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	if files, index := h.AuthFiles(); len(files) != 0 || index != 0 || h.ClusterID() != idA {
		t.Fatalf("a snapshot without auth restored %d files at %d, id %q", len(files), index, h.ClusterID())
	}
}
