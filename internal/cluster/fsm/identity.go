package fsm

import (
	"encoding/hex"
	"fmt"
)

// The cluster's identity: a random id chosen once, by the first identity entry the first
// leader writes after the bootstrap (the id is drawn by the leader, not here: the state
// machine is pure). A later identity entry (a second leader that raced the first) changes
// nothing.

// Identity sets the cluster id if none is set yet; its result is the id in force
// afterwards: ID, or the one chosen before.
type Identity struct {
	ID string // a cluster id (ValidClusterID)
}

func (Identity) kind() kind { return kindIdentity }

func (c Identity) appendBody(b []byte) []byte { return appendString(b, c.ID) }

func decodeIdentity(r *reader) Command { return Identity{ID: r.string()} }

func (c Identity) apply(s *state, _ uint64) ([]byte, error) {
	if !ValidClusterID(c.ID) {
		return nil, fmt.Errorf("cluster: identity %q is not a cluster id", c.ID)
	}
	if s.clusterID == "" {
		s.clusterID = c.ID
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

// ValidClusterID reports whether id is a cluster id: 16 bytes in hex. The state machine
// refuses an Identity entry with another; a node refuses such an id kept in its data
// directory.
func ValidClusterID(id string) bool {
	b, err := hex.DecodeString(id)
	return err == nil && len(b) == 16
}
