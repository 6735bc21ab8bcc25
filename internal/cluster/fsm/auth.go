package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

// The auth files in the replicated state: the contents of each password and ACL file the
// cluster enforces, keyed by what is the same on every node (the auth block: "" for the
// top-level one, else the listener's name; and the kind), never by a node's path. A
// reload on any node proposes the files that differ from the cluster's (internal/cluster, auth_files.go);
// every node applying the entry puts the new contents in force. A node's start proposes
// its files as a seed, which sets only what the cluster has none of, so the first node's
// files become the cluster's and a later or restarted node adopts the cluster's.
//
// An entry: [flags][n] then n times [block][kind][data], block and data prefixed with
// their length (wire.go). flags: authSeed.
//
// The snapshot section: [index][n] then the files as in an entry, index being the log
// index of the last entry that changed a file.

const kindAuth kind = 5 // AuthFiles: auth file contents set

// authSeed marks a seed: a file is set only where the cluster has none for its key.
const authSeed = 0x01

// Bounds of what is replicated. A file is sent whole in one entry, forwarded to the
// leader over gRPC (whose default limit on a received message is 4 MiB) and held by every
// node in memory and in each snapshot: big user bases belong in an external store, not
// in a replicated file.
const (
	// MaxAuthFile is the largest auth file replicated.
	MaxAuthFile = 3 << 20
	// maxAuthEntry is the most file bytes one entry carries.
	maxAuthEntry = 3<<20 + 512<<10
)

// authKey is what a file is known by in the cluster.
type authKey struct {
	block string
	kind  auth.FileKind
}

// AuthFiles sets auth file contents. Its result is the index of the files in force
// afterwards, as a uvarint: the entry's own index if it changed something.
type AuthFiles struct {
	Seed  bool        // set only the files the cluster has none of for their key
	Files []auth.File // as CheckAuthFiles accepts them
}

func (AuthFiles) kind() kind { return kindAuth }

func (c AuthFiles) appendBody(b []byte) []byte {
	var flags byte
	if c.Seed {
		flags |= authSeed
	}
	b = append(b, flags)
	return appendAuthFiles(b, c.Files)
}

func appendAuthFiles(b []byte, files []auth.File) []byte {
	b = appendUvarint(b, uint64(len(files)))
	for _, f := range files {
		b = appendString(b, f.Block)
		b = append(b, byte(f.Kind))
		b = appendBytes(b, f.Data)
	}
	return b
}

func decodeAuthFiles(r *reader) Command {
	flags := r.byte()
	if r.err == nil && flags&^authSeed != 0 {
		r.err = fmt.Errorf("cluster: auth flags %#x", flags)
	}
	return AuthFiles{Seed: flags&authSeed != 0, Files: readAuthFiles(r)}
}

// readAuthFiles reads what appendAuthFiles wrote; the data is copied out of r's buffer,
// since the state keeps it.
func readAuthFiles(r *reader) []auth.File {
	n := r.uvarint()
	if n > uint64(len(r.b)) { // every file takes at least three bytes
		r.err = errShort
		return nil
	}
	files := make([]auth.File, 0, n)
	for range n {
		f := auth.File{Block: r.string(), Kind: auth.FileKind(r.byte())}
		f.Data = bytes.Clone(r.bytes())
		if f.Data == nil {
			f.Data = []byte{}
		}
		files = append(files, f)
	}
	return files
}

// CheckAuthFiles refuses files the cluster does not replicate: too big, a kind this build
// does not know, a block name that cannot be a listener's, the same key twice. A node
// checks its files before it proposes them; apply checks again, so that an entry refused
// changes nothing on any node.
func CheckAuthFiles(files []auth.File) error {
	total := 0
	seen := map[authKey]bool{}
	for _, f := range files {
		k := authKey{f.Block, f.Kind}
		switch {
		case !f.Kind.Valid():
			return fmt.Errorf("cluster: auth file kind %d unknown (written by a newer node?)", f.Kind)
		case !utf8.ValidString(f.Block) || strings.ContainsRune(f.Block, 0):
			return fmt.Errorf("cluster: auth block %q is not a listener name", f.Block)
		case len(f.Data) > MaxAuthFile:
			return fmt.Errorf("cluster: the %s of %s is %d bytes; at most %d (%d MiB) are replicated",
				f.Kind, auth.BlockName(f.Block), len(f.Data), MaxAuthFile, MaxAuthFile>>20)
		case seen[k]:
			return fmt.Errorf("cluster: the %s of %s is twice in one entry", f.Kind, auth.BlockName(f.Block))
		}
		seen[k] = true
		total += len(f.Data)
	}
	if total > maxAuthEntry {
		return fmt.Errorf("cluster: the auth files come to %d bytes; at most %d (%.1f MiB) go in one entry",
			total, maxAuthEntry, float64(maxAuthEntry)/(1<<20))
	}
	return nil
}

// apply sets each file (a seed: each file the state has none of for its key). The
// result is the index of the files in force afterwards, as a uvarint: the entry's own
// index if it changed something.
func (c AuthFiles) apply(s *state, index uint64) ([]byte, error) {
	if err := CheckAuthFiles(c.Files); err != nil {
		return nil, err
	}
	for _, f := range c.Files {
		k := authKey{f.Block, f.Kind}
		old, ok := s.auth.files[k]
		if ok && (c.Seed || bytes.Equal(old, f.Data)) {
			continue
		}
		if s.auth.files == nil {
			s.auth.files = make(map[authKey][]byte)
		}
		s.auth.files[k] = f.Data
		s.auth.index = index
	}
	return appendUvarint(nil, s.auth.index), nil
}

// authSet is the auth part of the state. The byte slices are never changed once in the
// map, only replaced, so a snapshot's capture may share them.
type authSet struct {
	files map[authKey][]byte
	index uint64 // the log index of the last entry that changed a file; 0: none
}

// list returns the files sorted by block and kind.
func (a *authSet) list() []auth.File {
	out := make([]auth.File, 0, len(a.files))
	for k, d := range a.files {
		out = append(out, auth.File{Block: k.block, Kind: k.kind, Data: d})
	}
	slices.SortFunc(out, func(x, y auth.File) int {
		if c := strings.Compare(x.Block, y.Block); c != 0 {
			return c
		}
		return int(x.Kind) - int(y.Kind)
	})
	return out
}

func captureAuth(s *state) func([]byte) []byte {
	files, index := s.auth.list(), s.auth.index
	return func(b []byte) []byte {
		b = appendUvarint(b, index)
		return appendAuthFiles(b, files)
	}
}

func restoreAuth(s *state, r *reader) {
	s.auth.index = r.uvarint()
	for _, f := range readAuthFiles(r) {
		if s.auth.files == nil {
			s.auth.files = make(map[authKey][]byte)
		}
		s.auth.files[authKey{f.Block, f.Kind}] = f.Data
	}
}

// AuthFiles returns the auth files the applied log holds, sorted by block and kind, and
// the index of the entry that last changed one (0: none yet). The data is shared: the
// caller must not change it.
func (f *FSM) AuthFiles() ([]auth.File, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.auth.list(), f.s.auth.index
}

// AuthIndex returns the index of the entry that last changed an auth file: a cheap check
// after each applied entry, most of which are not auth entries.
func (f *FSM) AuthIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.auth.index
}
