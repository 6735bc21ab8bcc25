package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// A log entry is [entryVersion][kind][body]. Adding a command is a local change: a kind
// below (never reusing a value), a type implementing Command in a file of its own, and
// its decoder in commands. A leader may only write a command every member can apply:
// nodes tell their protocol version in their metadata (internal/cluster, member_meta.go), and a
// command that needs a newer one waits until every member has it.

// entryVersion is the first byte of every command this build writes.
const entryVersion = 1

// A kind is a command's type, the second byte of its log entry.
type kind byte

const (
	kindIdentity kind = 1 // identity.go: the cluster id, chosen once
	// 2, 3: owners.go
	// 4: retained.go
	// 5: auth.go
	// 6, 7: owners.go
	// 8, 9, 10: placement.go
)

// A Command is one change of the replicated state: Identity, Claims, Releases, Attaches,
// Retains, AuthFiles. The set is closed (its methods are unexported): only this package's
// types are written to the log, so every node can decode every entry it applies.
type Command interface {
	kind() kind
	// appendBody appends the command's encoding, without version and kind.
	appendBody(b []byte) []byte
	// apply changes s as the command says, at log index index, and returns what the node
	// that applied it is told (the result's encoding is the command's business). It runs
	// under the FSM's lock on Raft's FSM goroutine: it must not block. An error leaves s
	// unchanged and is returned to that node instead.
	apply(s *state, index uint64) ([]byte, error)
}

// commands decodes each kind's body; the reader's error reports a malformed one.
var commands = map[kind]func(r *reader) Command{
	kindIdentity:   decodeIdentity,
	kindClaim:      decodeClaims,
	kindClaimAs:    decodeClaimsAs,
	kindRelease:    decodeReleases,
	kindAttach:     decodeAttaches,
	kindRetain:     decodeRetains,
	kindAuth:       decodeAuthFiles,
	kindShards:     decodeShards,
	kindPlaces:     decodePlaces,
	kindShardReady: decodeShardReady,
}

// state is the replicated state: every field is changed by commands only.
type state struct {
	clusterID string      // identity.go; "" until the first identity entry
	owners    owners      // owners.go: client-id ownership
	ret       retainedSet // retained.go: retained messages
	auth      authSet     // auth.go: auth file contents
	placement placement   // placement.go: the shards of persistent sessions
}

// A part is one piece of state with its own section in a snapshot. Adding state for a new
// command adds a part.
type part struct {
	section byte // never reused
	// capture runs in FSM.Snapshot, on Raft's FSM goroutine while no Apply runs, and
	// returns what writes the part as it is then; that function runs in Persist,
	// concurrently with later Applies, so capture copies or freezes what it refers to.
	// nil leaves the section out: a part no command has set yet writes nothing, so that
	// a build that does not know it still restores the snapshot.
	capture func(s *state) func(b []byte) []byte
	// restore reads the section back into s, which holds the parts restored before it.
	restore func(s *state, r *reader)
	// restoreOlder, when set, reads the section as a snapshot of an older version wrote
	// it.
	restoreOlder func(s *state, r *reader, version byte)
}

var parts = []part{
	{section: 1, capture: captureIdentity, restore: restoreIdentity},
	{section: 2, capture: captureOwners, restore: restoreOwners, restoreOlder: restoreOlderOwners},
	{section: 3, capture: captureRetained, restore: restoreRetained},
	{section: 4, capture: captureAuth, restore: restoreAuth},
	{section: 5, capture: capturePlacement, restore: restorePlacement},
}

// snapshotVersion is the first byte of every snapshot this build writes; it reads
// versions 1 (the ownership table with client ids) and 2 (with keys, without owners'
// identities) too. A node of an older build cannot restore a newer snapshot: it says so
// and stays behind until it is upgraded.
const snapshotVersion = 3

// Encode returns c's log entry, the bytes the node hands to raft.Apply (or forwards to
// the leader, which does).
func Encode(c Command) []byte {
	return c.appendBody([]byte{entryVersion, byte(c.kind())})
}

// decodeCommand reads a log entry.
func decodeCommand(data []byte) (Command, error) {
	if len(data) < 2 {
		return nil, fmt.Errorf("cluster: a log entry of %d bytes", len(data))
	}
	if data[0] != entryVersion {
		return nil, fmt.Errorf("cluster: log entry version %d; this build reads %d", data[0], entryVersion)
	}
	dec, ok := commands[kind(data[1])]
	if !ok {
		return nil, fmt.Errorf("cluster: unknown command kind %d (written by a newer node?)", data[1])
	}
	r := &reader{b: data[2:]}
	c := dec(r)
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("cluster: command kind %d: %w", data[1], err)
	}
	return c, nil
}

// An applied is what FSM.Apply returns for a command, through raft's ApplyFuture.
type applied struct {
	data []byte
	err  error
}

// Response reads what FSM.Apply returned for an entry, as raft's ApplyFuture.Response
// gives it on the leader: the command's result, or the error with which the state
// machine refused it (every node refused it the same way, and the state is unchanged).
func Response(resp any) ([]byte, error) {
	r, ok := resp.(applied)
	if !ok {
		return nil, fmt.Errorf("cluster: %T is not a state machine's response", resp)
	}
	return r.data, r.err
}

// FSM is the Raft state machine (raft.FSM). Raft calls Apply, Snapshot and Restore from
// one goroutine, Raft's FSM goroutine, never concurrently with each other;
// FSMSnapshot.Persist runs concurrently with later Applies. Other goroutines read the
// state through FSM's methods, under its lock. The zero FSM is an empty state without
// hooks; New makes a node's.
type FSM struct {
	mu sync.RWMutex // guards s
	s  state
	// omu guards s.owners too: Apply and Restore hold it beside mu while they change
	// the table, so that Owner reads it under omu alone (owners.go).
	omu sync.RWMutex
	// changed, when set, runs after each applied command and after a Restore, on Raft's
	// FSM goroutine without the lock: it must return quickly.
	changed func()
	// applied, when set, is told each command applied without error, with its index and
	// result (which it may keep: nothing reuses it), on Raft's FSM goroutine after the
	// state changed and without the lock (internal/cluster's owner.go fences the
	// connections of client ids claimed elsewhere): it must not block.
	applied func(c Command, index uint64, result []byte)
}

// Hooks are what the node running an FSM is told of. Each runs on Raft's FSM goroutine,
// so a slow hook holds up every later entry.
type Hooks struct {
	// Changed runs after each applied entry and after a Restore, without the FSM's lock:
	// it must return quickly.
	Changed func()
	// Applied is told each command applied without error, with its index and result
	// (which it may keep: nothing reuses it), after the state changed and without the
	// lock: it must not block.
	Applied func(c Command, index uint64, result []byte)
	// Retained receives every change of the retained set (see RetainedStore); nil: none.
	Retained RetainedStore
	// RetainedApplied is told the index of each Retains entry applied, under the FSM's
	// lock: it must not block nor call back into the FSM.
	RetainedApplied func(index uint64)
}

// New returns an empty FSM that tells h; the node passes it to raft.NewRaft, which
// restores its snapshot and replays its log into it.
func New(h Hooks) *FSM {
	f := &FSM{changed: h.Changed, applied: h.Applied}
	f.setRetainedStore(h.Retained, h.RetainedApplied)
	return f
}

var _ raft.FSM = (*FSM)(nil)

// Apply applies one committed log entry of type LogCommand; Raft calls it on its FSM
// goroutine, in log order, on every node. An entry that does not decode, or that its
// command refuses, changes nothing, the same way on every node; the leader's caller reads
// the outcome with Response.
func (f *FSM) Apply(l *raft.Log) any {
	c, err := decodeCommand(l.Data)
	if err != nil {
		// Every node fails the same entry the same way, so the states stay equal; the
		// node that wrote it is told.
		return applied{err: err}
	}
	f.mu.Lock()
	_, owning := c.(ownerCommand)
	if owning {
		f.omu.Lock()
	}
	data, err := c.apply(&f.s, l.Index)
	if owning {
		f.omu.Unlock()
	}
	f.mu.Unlock()
	if err == nil && f.applied != nil {
		f.applied(c, l.Index, data)
	}
	if f.changed != nil {
		f.changed()
	}
	return applied{data: data, err: err}
}

// Snapshot captures the state for Persist; Raft calls it on its FSM goroutine.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	writers := make([]func([]byte) []byte, len(parts))
	for i, p := range parts {
		writers[i] = p.capture(&f.s)
	}
	return &snapshot{writers: writers}, nil
}

// Restore replaces the state with a snapshot's; Raft calls it on its FSM goroutine. The
// node's retained store is handed the restored set (RetainedStore.ReplaceRetained).
func (f *FSM) Restore(rc io.ReadCloser) error {
	data, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster: read snapshot: %w", err)
	}
	s, err := decodeSnapshot(data)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.omu.Lock()
	s.ret.adopt(&f.s.ret)
	f.s = s
	f.omu.Unlock()
	f.mu.Unlock()
	if f.changed != nil {
		f.changed()
	}
	return nil
}

// decodeSnapshot reads what snapshot.Persist wrote into a new state.
func decodeSnapshot(data []byte) (state, error) {
	var s state
	if len(data) == 0 || data[0] < 1 || data[0] > snapshotVersion {
		return s, fmt.Errorf("cluster: not a snapshot this build reads (version byte %v)", data[:min(len(data), 1)])
	}
	version := data[0]
	r := &reader{b: data[1:]}
	for len(r.b) > 0 && r.err == nil {
		section := r.byte()
		body := r.string()
		i := -1
		for j, p := range parts {
			if p.section == section {
				i = j
			}
		}
		if i < 0 {
			return s, fmt.Errorf("cluster: snapshot section %d unknown (written by a newer node?)", section)
		}
		pr := &reader{b: []byte(body)}
		if p := parts[i]; version < snapshotVersion && p.restoreOlder != nil {
			p.restoreOlder(&s, pr, version)
		} else {
			p.restore(&s, pr)
		}
		if err := pr.end(); err != nil {
			return s, fmt.Errorf("cluster: snapshot section %d: %w", section, err)
		}
	}
	if r.err != nil {
		return s, fmt.Errorf("cluster: snapshot: %w", r.err)
	}
	return s, nil
}

// snapshot is a captured state (raft.FSMSnapshot).
type snapshot struct {
	writers []func([]byte) []byte
}

// Persist writes [snapshotVersion] then each part as [section][length][body].
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	out := []byte{snapshotVersion}
	for i, w := range s.writers {
		if w == nil {
			continue
		}
		body := w(nil)
		out = append(out, parts[i].section)
		out = appendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	if _, err := io.Copy(sink, bytes.NewReader(out)); err != nil {
		return errors.Join(fmt.Errorf("cluster: write snapshot: %w", err), sink.Cancel())
	}
	return sink.Close()
}

// Release frees nothing: the captured parts are garbage once Persist is done.
func (s *snapshot) Release() {}
