package cluster

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/raftstore"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft's settings, with their reasons. Raft's defaults, which Consul runs in production
// (its raft_multiplier 1): they suit loopback and a LAN, and a WAN-ish link of tens of
// milliseconds still leaves a heartbeat timeout ten round trips long.
const (
	// raftHeartbeatTimeout is how long a follower goes without hearing from the leader
	// before it stands for election; the leader sends a heartbeat every tenth of it.
	raftHeartbeatTimeout = time.Second
	// raftElectionTimeout is how long a candidate waits for votes (randomised up to
	// twice this, so that candidates rarely split the vote).
	raftElectionTimeout = time.Second
	// raftLeaderLease is how long a leader goes without a quorum's contact before it
	// steps down: half the heartbeat timeout, so it steps down before a new leader can
	// be elected.
	raftLeaderLease = 500 * time.Millisecond
	// raftSnapshotThreshold and raftTrailingLogs: a snapshot after 8,192 new entries,
	// keeping 10,240 behind it so that a follower a little behind catches up from the
	// log, not a snapshot. One entry holds a batch of claims or releases, so a CONNECT
	// storm writes far fewer entries than CONNECTs.
	raftSnapshotThreshold = 8192
	raftTrailingLogs      = 10240
	// raftSnapshotsKept is how many snapshots the file store keeps: the newest, and one
	// in case the newest turns out unreadable.
	raftSnapshotsKept = 2
	// raftDir is the log store's directory in the cluster's data directory; the
	// snapshots are in "snapshots" beside it, and the cluster id in "cluster-id".
	raftDir = "raft"
)

// raftConfig is Raft's configuration for the node named name.
func raftConfig(name string, log hclog.Logger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(name)
	c.Logger = log
	c.HeartbeatTimeout = raftHeartbeatTimeout
	c.ElectionTimeout = raftElectionTimeout
	c.LeaderLeaseTimeout = raftLeaderLease
	c.SnapshotThreshold = raftSnapshotThreshold
	c.TrailingLogs = raftTrailingLogs
	// A removed node is one that left (Close) and is shutting down anyway; one removed
	// by mistake keeps running and is added back by the leader.
	c.ShutdownOnRemove = false
	c.NoLegacyTelemetry = true
	return c
}

// raftStores are the durable parts of a node's Raft: log, stable store and snapshots.
type raftStores struct {
	logs   raft.LogStore
	stable raft.StableStore
	snaps  raft.SnapshotStore
	closer io.Closer // of logs and stable; nil when there is nothing to close
}

// openRaftStores opens the Raft state in dir.
func openRaftStores(dir string, log *slog.Logger) (*raftStores, error) {
	logs, stable, closer, err := openLogStore(dir, log)
	if err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, raftSnapshotsKept, newHCLogger(log, "raft"))
	if err != nil {
		if closer != nil {
			_ = closer.Close()
		}
		return nil, fmt.Errorf("cluster: raft snapshots in %s: %w", dir, err)
	}
	return &raftStores{logs: logs, stable: stable, snaps: snaps, closer: closer}, nil
}

// hasState reports whether the stores hold Raft state: such a node never bootstraps.
func (s *raftStores) hasState() (bool, error) {
	ok, err := raft.HasExistingState(s.logs, s.stable, s.snaps)
	if err != nil {
		return false, fmt.Errorf("cluster: read raft state: %w", err)
	}
	return ok, nil
}

func (s *raftStores) close() error {
	if s == nil || s.closer == nil {
		return nil
	}
	return s.closer.Close()
}

// openLogStore opens the log and stable store (raftstore) in dir/raft: the log on a
// Pebble database, the term and vote in a file of fixed size beside it, which a full disk
// does not stop. Their writes are synced before raft is told they are done.
func openLogStore(dir string, log *slog.Logger) (raft.LogStore, raft.StableStore, io.Closer, error) {
	s, err := raftstore.Open(filepath.Join(dir, raftDir), log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cluster: raft log: %w", err)
	}
	return s, s, s, nil
}
