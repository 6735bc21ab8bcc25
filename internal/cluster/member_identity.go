package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
)

// The cluster's identity: a random id, drawn by the first leader after the bootstrap
// and chosen once by the state machine (fsm.Identity). Every member advertises it in its
// metadata, and a node advertising another is refused (member.go), so that two
// clusters never merge.

// newClusterID returns a random cluster id: 16 bytes in hex.
func newClusterID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
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
	if !fsm.ValidClusterID(id) {
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
