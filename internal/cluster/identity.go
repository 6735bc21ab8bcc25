package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The cluster's identity: a random id chosen once, by the first identity entry the first
// leader writes after the bootstrap. Every member advertises it in its metadata, and a
// node advertising another is refused (membership.go), so that two clusters never merge.
// A later identity entry (a second leader that raced the first) changes nothing.

// identity sets the cluster id if none is set yet.
type identity struct {
	id string
}

func (identity) kind() kind { return kindIdentity }

func (c identity) appendBody(b []byte) []byte { return appendString(b, c.id) }

func decodeIdentity(r *reader) command { return identity{id: r.string()} }

// apply returns the id in force afterwards: c's, or the one chosen before.
func (c identity) apply(s *state, _ uint64) ([]byte, error) {
	if !validClusterID(c.id) {
		return nil, fmt.Errorf("cluster: identity %q is not a cluster id", c.id)
	}
	if s.clusterID == "" {
		s.clusterID = c.id
	}
	return []byte(s.clusterID), nil
}

func captureIdentity(s *state) func([]byte) []byte {
	id := s.clusterID
	return func(b []byte) []byte { return appendString(b, id) }
}

func restoreIdentity(s *state, r *reader) { s.clusterID = r.string() }

// ClusterID returns the cluster's id as the applied log says; "" until it is chosen.
func (f *FSM) ClusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.clusterID
}

// newClusterID returns a random cluster id: 16 bytes in hex.
func newClusterID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

func validClusterID(id string) bool {
	b, err := hex.DecodeString(id)
	return err == nil && len(b) == 16
}

// idFile is where a node keeps its cluster's id beside the Raft state, so that it knows
// the id from its start, before its log is replayed (which waits for a leader): a node of
// another cluster is refused from the first gossip on.
const idFile = "cluster-id"

// readClusterID returns the id kept in dir; "" when there is none yet.
func readClusterID(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, idFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	id := strings.TrimSpace(string(data))
	if !validClusterID(id) {
		return "", fmt.Errorf("cluster: %s holds %q, not a cluster id", filepath.Join(dir, idFile), id)
	}
	return id, nil
}

// writeClusterID keeps id in dir, durably: written to a temporary file, synced, renamed
// over the old one, the directory synced.
func writeClusterID(dir, id string) error {
	tmp, err := os.CreateTemp(dir, idFile+".*")
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	_, err = tmp.WriteString(id + "\n")
	err = errors.Join(err, tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, idFile))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("cluster: keep the cluster id: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return errors.Join(d.Sync(), d.Close())
}
