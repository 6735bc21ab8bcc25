package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// formatCases are logs whose records round-trip; the fuzz test starts from them.
var formatCases = []struct {
	name string
	log  raft.Log
}{
	{"Zero", raft.Log{}},
	{"Noop", raft.Log{Index: 1, Term: 1, Type: raft.LogNoop}},
	{"Command", raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("claim c1 n2")}},
	{"Extensions", raft.Log{Index: 3, Term: 2, Type: raft.LogCommand, Data: []byte("d"), Extensions: []byte("ext")}},
	{"ExtensionsOnly", raft.Log{Index: 4, Term: 2, Type: raft.LogBarrier, Extensions: []byte("ext")}},
	{"AppendedAt", raft.Log{Index: 5, Term: 3, Type: raft.LogConfiguration, Data: []byte{0, 1, 2},
		AppendedAt: time.Unix(1_800_000_000, 123456789)}},
	{"AppendedAtEpoch", raft.Log{Index: 6, Term: 3, AppendedAt: time.Unix(0, 0)}},
	{"AppendedAtNegative", raft.Log{Index: 6, Term: 3, AppendedAt: time.Unix(-1, 5)}},
	{"TermMax", raft.Log{Index: math.MaxUint64, Term: math.MaxUint64, Type: raft.LogType(255), Data: bytes.Repeat([]byte("x"), 1000)}},
}

// TestFormatRoundTrip: every log decodes to itself, from a record of the length logLen
// says; empty Data and Extensions come back nil.
func TestFormatRoundTrip(t *testing.T) {
	for _, tc := range formatCases {
		t.Run(tc.name, func(t *testing.T) {
			rec := appendLog(nil, &tc.log)
			if len(rec) != logLen(&tc.log) {
				t.Fatalf("record of %d bytes, logLen says %d", len(rec), logLen(&tc.log))
			}
			var got raft.Log
			if err := decodeLog(tc.log.Index, rec, &got); err != nil {
				t.Fatal(err)
			}
			if diff := sameLog(&got, &tc.log); diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

// TestFormatBytes pins the layout drawn in the package doc.
func TestFormatBytes(t *testing.T) {
	l := raft.Log{Index: 9, Term: 300, Type: raft.LogCommand, Data: []byte("da"), Extensions: []byte("e"),
		AppendedAt: time.Unix(0, 0x0102030405060708)}
	want := []byte{
		1,          // record version
		0,          // type: LogCommand
		1,          // flags: appendedAt
		0xac, 0x02, // term 300, uvarint
		1, 2, 3, 4, 5, 6, 7, 8, // appendedAt, Unix ns
		1, 'e', // extensions
		'd', 'a', // data, to the end
	}
	if got := appendLog(nil, &l); !bytes.Equal(got, want) {
		t.Fatalf("record % x, want % x", got, want)
	}
	k := make([]byte, logKeyLen)
	putLogKey(k, 0x0102)
	if want := []byte{1, 0, 0, 0, 0, 0, 0, 1, 2}; !bytes.Equal(k, want) {
		t.Fatalf("key % x, want % x", k, want)
	}
}

// TestFormatCorrupt: records that do not decode are errors matching ErrCorrupt, and
// leave the log they were decoded into as it was.
func TestFormatCorrupt(t *testing.T) {
	good := appendLog(nil, &raft.Log{Term: 5, Data: []byte("data"), Extensions: []byte("ext"), AppendedAt: time.Unix(1, 0)})
	for _, tc := range []struct {
		name string
		rec  []byte
	}{
		{"Empty", nil},
		{"Short", []byte{1, 0}},
		{"Version0", append([]byte{0}, good[1:]...)},
		{"VersionNewer", append([]byte{recordVersion + 1}, good[1:]...)},
		{"UnknownFlag", append([]byte{1, 0, 0x02}, good[3:]...)},
		{"NoTerm", []byte{1, 0, 0}},
		{"TermTruncated", []byte{1, 0, 0, 0x80}},
		{"TermOverflow", []byte{1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0}},
		{"AppendedAtTruncated", []byte{1, 0, flagAppendedAt, 5, 1, 2, 3}},
		{"NoExtensionsLength", []byte{1, 0, 0, 5}},
		{"ExtensionsTooLong", []byte{1, 0, 0, 5, 4, 'e', 'x', 't'}},
		{"ExtensionsLengthHuge", binary.AppendUvarint([]byte{1, 0, 0, 5}, math.MaxUint64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := raft.Log{Index: 77, Data: []byte("before")}
			err := decodeLog(1, tc.rec, &l)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode % x = %v, want ErrCorrupt", tc.rec, err)
			}
			if l.Index != 77 || string(l.Data) != "before" {
				t.Fatalf("a failed decode changed the log: %+v", l)
			}
		})
	}
	for _, tc := range []struct {
		name string
		rec  []byte
	}{{"Empty", nil}, {"Version0", []byte{0, 1}}, {"VersionNewer", []byte{recordVersion + 1}}} {
		t.Run("Stable"+tc.name, func(t *testing.T) {
			if _, err := decodeStable([]byte("k"), tc.rec); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeStable % x = %v, want ErrCorrupt", tc.rec, err)
			}
		})
	}
}

// FuzzDecodeLog: any bytes either decode or fail with ErrCorrupt, never panic; what
// decodes encodes to a record of logLen bytes that decodes to the same log.
func FuzzDecodeLog(f *testing.F) {
	for _, tc := range formatCases {
		f.Add(appendLog(nil, &tc.log))
	}
	f.Add([]byte{1, 0, 0, 0x80})
	f.Fuzz(func(t *testing.T, rec []byte) {
		var l raft.Log
		if err := decodeLog(42, rec, &l); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		if l.Index != 42 {
			t.Fatalf("index %d, want the key's 42", l.Index)
		}
		again := appendLog(nil, &l)
		if len(again) != logLen(&l) {
			t.Fatalf("record of %d bytes, logLen says %d", len(again), logLen(&l))
		}
		var l2 raft.Log
		if err := decodeLog(42, again, &l2); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if diff := sameLog(&l2, &l); diff != "" {
			t.Fatal(diff)
		}
		// Extensions and Data are separate slices: appending to one leaves the other.
		if len(l.Data) > 0 {
			d := bytes.Clone(l.Data)
			_ = append(l.Extensions, 0xee)
			if !bytes.Equal(l.Data, d) {
				t.Fatal("appending to Extensions changed Data")
			}
		}
	})
}
