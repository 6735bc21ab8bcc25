package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// The contents of the auth files in force, as bytes, for a cluster: every node must
// enforce the same password and ACL files, so a node reads its files (Set.Read), the
// cluster replicates their contents, and every node puts what the cluster holds in force
// (Set.Use) in place of what its own files say. A file is known by what is the same on
// every node: its auth block (the top-level one, or a listener's by the listener's name)
// and its kind, not its path.

// FileKind is the kind of an auth file. Its values travel between nodes: append-only.
type FileKind uint8

// The kinds of auth file.
const (
	KindPassword FileKind = iota // conf.Auth.PasswordFile
	KindACL                      // conf.Auth.ACLFile
	numKinds
)

// String names the kind as errors and logs do.
func (k FileKind) String() string {
	switch k {
	case KindPassword:
		return "password file"
	case KindACL:
		return "ACL file"
	}
	return fmt.Sprintf("auth file kind %d", uint8(k))
}

// Valid reports whether k is a kind this build knows.
func (k FileKind) Valid() bool { return k < numKinds }

// path is the file of kind k that c names; "" for none.
func (k FileKind) path(c conf.Auth) string {
	switch k {
	case KindPassword:
		return c.PasswordFile
	case KindACL:
		return c.ACLFile
	}
	return ""
}

// A File is the contents of one auth file: Block is "" for the top-level auth block,
// else the name of the listener whose block names the file.
type File struct {
	Block string
	Kind  FileKind
	Data  []byte
}

// A FileSum is the SHA-256 of one auth file's contents.
type FileSum struct {
	Block string
	Kind  FileKind
	Sum   [sha256.Size]byte
}

// Sum returns f's FileSum.
func (f File) Sum() FileSum { return FileSum{Block: f.Block, Kind: f.Kind, Sum: sha256.Sum256(f.Data)} }

// Short is the first 8 bytes of the sum in hex: enough for an operator to compare.
func (s FileSum) Short() string { return hex.EncodeToString(s.Sum[:8]) }

// BlockName names a block in logs: "auth" for the top-level one, "listener NAME's auth"
// for a listener's.
func BlockName(block string) string {
	if block == "" {
		return "auth"
	}
	return "listener " + block + "'s auth"
}

// Digest returns one digest of a set of files (order does not matter): the first 8 bytes
// in hex of the SHA-256 over each block, kind and sum, sorted; "" for none. Two nodes
// enforce the same files when their digests are equal.
func Digest(sums []FileSum) string {
	if len(sums) == 0 {
		return ""
	}
	sorted := slices.Clone(sums)
	slices.SortFunc(sorted, func(a, b FileSum) int {
		if c := strings.Compare(a.Block, b.Block); c != 0 {
			return c
		}
		return int(a.Kind) - int(b.Kind)
	})
	h := sha256.New()
	for _, s := range sorted {
		fmt.Fprintf(h, "%d:%s\x00%d\x00", len(s.Block), s.Block, s.Kind)
		h.Write(s.Sum[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// blocks returns every Auth of the Set with its block name, the top-level one first.
func (s *Set) blocks() []namedAuth {
	out := []namedAuth{{"", s.top}}
	for name, a := range s.own {
		out = append(out, namedAuth{name, a})
	}
	slices.SortFunc(out[1:], func(x, y namedAuth) int { return strings.Compare(x.block, y.block) })
	return out
}

type namedAuth struct {
	block string
	a     *Auth
}

// Read reads the files every block names and checks that each parses, changing nothing:
// what a node proposes to its cluster. The errors of all files come back together, each
// naming its file and line.
func (s *Set) Read() ([]File, error) {
	var files []File
	var errs []error
	for _, b := range s.blocks() {
		c := b.a.state.Load().c
		scratch := &state{c: c, anonymous: c.Anonymous()}
		var data [numKinds][]byte
		for k := range numKinds {
			path := k.path(c)
			if path == "" {
				continue
			}
			d, err := readFile(k.String(), path)
			if err != nil {
				errs = append(errs, blockErr(b.block, err))
				continue
			}
			data[k] = d
			files = append(files, File{Block: b.block, Kind: k, Data: d})
		}
		if err := scratch.parse(data, "", slog.New(slog.DiscardHandler)); err != nil {
			errs = append(errs, blockErr(b.block, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return files, nil
}

// Use puts files in force in place of what the blocks' own files hold, from is where
// they come from (for logs and errors, e.g. "cluster"). A file for a block or kind this
// Set's configuration does not name is skipped and returned in skipped; a file whose
// contents are already in force changes nothing. Each block either takes all its files
// or, when one does not parse, keeps its state; the errors of all come back together.
// changed reports whether any block's state changed.
func (s *Set) Use(files []File, from string) (changed bool, skipped []File, err error) {
	var errs []error
	for _, b := range s.blocks() {
		var data [numKinds][]byte
		has := false
		for _, f := range files {
			if f.Block == b.block && f.Kind.Valid() {
				data[f.Kind], has = f.Data, true
			}
		}
		if !has {
			continue
		}
		ch, err := b.a.use(data, from)
		changed = changed || ch
		if err != nil {
			errs = append(errs, blockErr(b.block, err))
		}
	}
	for _, f := range files {
		a, ok := s.own[f.Block]
		if f.Block == "" {
			a, ok = s.top, true
		}
		if !ok || !f.Kind.Valid() || f.Kind.path(a.state.Load().c) == "" {
			skipped = append(skipped, f)
		}
	}
	return changed, skipped, errors.Join(errs...)
}

// Sums returns the FileSum of every file in force, block by block.
func (s *Set) Sums() []FileSum {
	var out []FileSum
	for _, b := range s.blocks() {
		st := b.a.state.Load()
		for k := range numKinds {
			if k.path(st.c) != "" {
				out = append(out, FileSum{Block: b.block, Kind: k, Sum: st.sums[k]})
			}
		}
	}
	return out
}

// use puts data in force (nil: keep that kind's contents), skipping contents already in
// force; on error the state stays.
func (a *Auth) use(data [numKinds][]byte, from string) (changed bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.state.Load()
	news := false
	for k := range numKinds {
		if data[k] != nil && (k.path(old.c) == "" || sha256.Sum256(data[k]) == old.sums[k]) {
			data[k] = nil
		}
		news = news || data[k] != nil
	}
	if !news {
		return false, nil
	}
	s := *old
	if err := s.parse(data, from, a.log); err != nil {
		a.log.Error("auth: files not put in force; the previous ones stay", "from", fromOrFile(from), "err", err)
		return false, err
	}
	a.state.Store(&s)
	return true, nil
}

func blockErr(block string, err error) error {
	if block == "" {
		return err
	}
	return fmt.Errorf("listener %s: %w", block, err)
}
