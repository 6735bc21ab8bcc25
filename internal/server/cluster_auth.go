package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
)

// The auth files on a cluster node: every node enforces the files the Raft log holds
// (internal/cluster/fsm, auth.go), not its own. The node's files reach the log two ways:
// at start, as a seed that sets only what the cluster has none of yet (the first node's
// files become the cluster's; a node joining later or restarted adopts the cluster's,
// and says so when its own file differs); and on reload (SIGHUP), which checks the files
// and proposes those that differ from the cluster's. Every node applying the entry puts
// the new contents in force and re-checks subscriptions under the new ACL, as a reload
// of a single node does. A reload that cannot reach the log changes nothing anywhere, so
// no node rolls the cluster back to its own stale files.
//
// Until the seed is done, the node does not know the cluster's files: CONNECTs wait for
// it (auth.Gate), and after a few seconds are refused with Server unavailable rather than
// judged by files the cluster may have replaced. While a member runs a build that cannot
// apply auth entries (a rolling upgrade), the seed cannot be written: the node then opens
// the gate on its own files, as every node did before, and keeps trying.

// Timings of the auth files on a cluster node.
const (
	// authProposeTimeout bounds a reload's wait for the log to take its files.
	authProposeTimeout = 10 * time.Second
	// authSeedRetry is the pause before a seed that failed (no leader yet) is retried.
	authSeedRetry = time.Second
)

// clusterAuth is the node's auth.Set as the cluster's AuthHost.
type clusterAuth struct {
	b      *Server
	warned map[[2]string]bool // blocks and kinds the configuration names not, logged once
}

// UseAuthFiles puts the cluster's files in force (on Raft's FSM goroutine).
func (h *clusterAuth) UseAuthFiles(files []auth.File, index uint64) {
	b := h.b
	changed, skipped, err := b.auth.Use(files, fmt.Sprintf("cluster, log index %d", index))
	if err != nil {
		b.log.Error("cluster: auth files of the cluster do not parse on this node; it keeps its previous ones and "+
			"disagrees with the cluster until they are fixed and reloaded", "index", index, "err", err)
	}
	for _, f := range skipped {
		k := [2]string{f.Block, f.Kind.String()}
		if !h.warned[k] {
			h.warned[k] = true
			b.log.Warn("cluster: the cluster holds a file for an auth block this node's configuration names none of; not in force here",
				"block", auth.BlockName(f.Block), "kind", f.Kind.String())
		}
	}
	if changed {
		b.mqtt.ACLChanged()
		b.log.Info("cluster: auth files of the cluster in force", "index", index, "digest", auth.Digest(b.auth.Sums()))
	}
}

// AuthDigest is the digest of the files in force.
func (h *clusterAuth) AuthDigest() string { return auth.Digest(h.b.auth.Sums()) }

// seedAuth runs once the cluster part started: it waits for the cluster, seeds it with
// this node's files, opens the gate, and warns of each local file the cluster's replaces.
func (b *Server) seedAuth(ctx context.Context) {
	if err := b.cluster.Wait(ctx); err != nil {
		return
	}
	var local []auth.File
	for {
		files, err := b.auth.Read()
		if err != nil {
			b.log.Error("cluster: this node's auth files do not load; it offers the cluster none of them and enforces the cluster's", "err", err)
		}
		local = files
		actx, cancel := context.WithTimeout(ctx, authProposeTimeout)
		err = b.cluster.SeedAuth(actx, files)
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, clusterlink.ErrOldMembers) && !b.gate.IsOpen() {
			// A rolling upgrade: the older members enforce their own files, and so does
			// this node until every member can apply the cluster's.
			b.gate.Open()
			b.log.Warn("cluster: enforcing this node's own auth files until every member can apply the cluster's", "err", err)
		}
		b.log.Warn("cluster: auth files not synchronised with the cluster yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(authSeedRetry):
		}
	}
	inForce := map[[2]string]auth.FileSum{}
	for _, s := range b.auth.Sums() {
		inForce[[2]string{s.Block, s.Kind.String()}] = s
	}
	for _, f := range local {
		mine, cl := f.Sum(), inForce[[2]string{f.Block, f.Kind.String()}]
		if mine.Sum != cl.Sum {
			b.log.Warn("cluster: this node enforces the cluster's auth file, not its own, which differs; "+
				"a reload (SIGHUP) of this node would propose its file to the cluster",
				"block", auth.BlockName(f.Block), "kind", f.Kind.String(), "local_digest", mine.Short(), "cluster_digest", cl.Short())
		}
	}
	b.gate.Open()
	b.log.Info("cluster: auth files synchronised with the cluster", "digest", auth.Digest(b.auth.Sums()))
}

// reloadClusterAuth checks this node's auth files and proposes those that differ from
// the cluster's; every node puts them in force as the log applies them. On error nothing
// changed, here or elsewhere.
func (b *Server) reloadClusterAuth() error {
	files, err := b.auth.Read()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(b.ctx, authProposeTimeout)
	defer cancel()
	n, err := b.cluster.ProposeAuth(ctx, files)
	if err != nil {
		return fmt.Errorf("auth files not replicated; every node keeps those in force: %w", err)
	}
	if n == 0 {
		b.log.Info("cluster: this node's auth files are the cluster's already")
		return nil
	}
	b.log.Info("cluster: auth files replicated and in force", "files", n, "digest", auth.Digest(b.auth.Sums()))
	return nil
}
