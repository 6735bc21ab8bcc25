package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
)

// This node's auth files in the cluster. Every node enforces the files the Raft log holds
// (auth_files.go), not its own; the server hands the node its auth state (SetAuth) and
// the node does the rest. The node's files reach the log two ways: at start, as a seed
// that sets only what the cluster has none of yet (the first node's files become the
// cluster's; a node joining later or restarted adopts the cluster's, and says so when its
// own file differs); and on reload (SIGHUP, ReloadAuth), which checks the files and
// proposes those that differ from the cluster's. Every node applying the entry puts the
// new contents in force and has the broker check subscriptions under the new ACL, as a
// reload of a single node does. A reload that cannot reach the log changes nothing
// anywhere, so no node rolls the cluster back to its own stale files.
//
// Until the seed is done the node does not know the cluster's files: CONNECTs wait for it
// at the server's gate (auth.Gate), and after a few seconds are refused with Server
// unavailable rather than judged by files the cluster may have replaced. While a member
// runs a build that cannot apply auth entries (a rolling upgrade), the seed cannot be
// written: the node then opens the gate on its own files, as every node did before such
// builds, and keeps trying.

// Timings of this node's auth files.
const (
	// authProposeTimeout bounds a seed's or a reload's wait for the log to take its files.
	authProposeTimeout = 10 * time.Second
	// authSeedRetry is the pause before a seed that failed (no leader yet) is retried.
	authSeedRetry = time.Second
)

// localAuth is the server's auth state as the log's files drive it: the authHost of a
// node that serves clients.
type localAuth struct {
	clusterlink.AuthState
	log *slog.Logger
	// warned are the blocks and kinds the cluster holds files for and this node's
	// configuration names not, each logged once; Raft's FSM goroutine only.
	warned map[[2]string]bool
}

// SetAuth hands the node the server's auth state; call it before Start. The log's files
// are put in force through it, Start seeds the cluster with its files (seedAuth), and
// ReloadAuth proposes them.
func (c *Cluster) SetAuth(a clusterlink.AuthState) {
	c.authf.local = &localAuth{AuthState: a, log: c.log, warned: map[[2]string]bool{}}
	c.authf.host = c.authf.local
}

// UseAuthFiles puts the cluster's files in force (on Raft's FSM goroutine).
func (h *localAuth) UseAuthFiles(files []auth.File, index uint64) {
	changed, skipped, err := h.Set.Use(files, fmt.Sprintf("cluster, log index %d", index))
	if err != nil {
		h.log.Error("cluster: auth files of the cluster do not parse on this node; it keeps its previous ones and "+
			"disagrees with the cluster until they are fixed and reloaded", "index", index, "err", err)
	}
	for _, f := range skipped {
		k := [2]string{f.Block, f.Kind.String()}
		if !h.warned[k] {
			h.warned[k] = true
			h.log.Warn("cluster: the cluster holds a file for an auth block this node's configuration names none of; not in force here",
				"block", auth.BlockName(f.Block), "kind", f.Kind.String())
		}
	}
	if changed {
		if h.Changed != nil {
			h.Changed()
		}
		h.log.Info("cluster: auth files of the cluster in force", "index", index, "digest", auth.Digest(h.Set.Sums()))
	}
}

// AuthDigest is the digest of the files in force.
func (h *localAuth) AuthDigest() string { return auth.Digest(h.Set.Sums()) }

// seedAuth runs once the node started, with the server's auth state: it waits for the
// cluster, seeds it with this node's files, opens the gate, and warns of each local file
// the cluster's replaces.
func (c *Cluster) seedAuth(ctx context.Context) {
	h := c.authf.local
	if err := c.Wait(ctx); err != nil {
		return
	}
	var local []auth.File
	for {
		files, err := h.Set.Read()
		if err != nil {
			c.log.Error("cluster: this node's auth files do not load; it offers the cluster none of them and enforces the cluster's", "err", err)
		}
		local = files
		actx, cancel := context.WithTimeout(ctx, authProposeTimeout)
		err = c.SeedAuth(actx, files)
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, ErrOldMembers) && !h.Gate.IsOpen() {
			// A rolling upgrade: the older members enforce their own files, and so does
			// this node until every member can apply the cluster's.
			h.Gate.Open()
			c.log.Warn("cluster: enforcing this node's own auth files until every member can apply the cluster's", "err", err)
		}
		c.log.Warn("cluster: auth files not synchronised with the cluster yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(authSeedRetry):
		}
	}
	inForce := map[[2]string]auth.FileSum{}
	for _, s := range h.Set.Sums() {
		inForce[[2]string{s.Block, s.Kind.String()}] = s
	}
	for _, f := range local {
		mine, cl := f.Sum(), inForce[[2]string{f.Block, f.Kind.String()}]
		if mine.Sum != cl.Sum {
			c.log.Warn("cluster: this node enforces the cluster's auth file, not its own, which differs; "+
				"a reload (SIGHUP) of this node would propose its file to the cluster",
				"block", auth.BlockName(f.Block), "kind", f.Kind.String(), "local_digest", mine.Short(), "cluster_digest", cl.Short())
		}
	}
	h.Gate.Open()
	c.log.Info("cluster: auth files synchronised with the cluster", "digest", auth.Digest(h.Set.Sums()))
}

// ReloadAuth checks this node's auth files and proposes those that differ from the
// cluster's; every node puts them in force as the log applies them, and this one has
// when it returns. On error nothing changed, here or elsewhere.
func (c *Cluster) ReloadAuth(ctx context.Context) error {
	h := c.authf.local
	if h == nil {
		return errors.New("cluster: no auth state to reload (SetAuth)")
	}
	files, err := h.Set.Read()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, authProposeTimeout)
	defer cancel()
	n, err := c.ProposeAuth(ctx, files)
	if err != nil {
		return fmt.Errorf("auth files not replicated; every node keeps those in force: %w", err)
	}
	if n == 0 {
		c.log.Info("cluster: this node's auth files are the cluster's already")
		return nil
	}
	c.log.Info("cluster: auth files replicated and in force", "files", n, "digest", auth.Digest(h.Set.Sums()))
	return nil
}
