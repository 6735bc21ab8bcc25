package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
	"github.com/prometheus/client_golang/prometheus"
)

// The auth files every node enforces (fsm/auth.go holds them in the replicated state).
// Each change the log applies is put in force through the node's authHost, on every node,
// in log order; the server's auth state is one (auth_local.go). Proposals come from the
// node's reload (ProposeAuth: the files that differ from the cluster's) and its start
// (SeedAuth: the files the cluster has none of yet). Both return once the node itself
// enforces what the log then holds, so a reload that returns without error is in force
// here, and a node that finished its seed enforces the cluster's files rather than its
// own.

// authProtocol is the protocolVersion a member needs to apply an auth entry.
const authProtocol = 2

// ErrOldMembers refuses an auth proposal while a member runs a build that could not apply
// it (a rolling upgrade): each node enforces its own files meanwhile.
var ErrOldMembers = errors.New("cluster: a member's build cannot apply auth files")

// An authHost is the node's auth state, which the replicated files drive.
type authHost interface {
	// UseAuthFiles puts files in force, the whole set the log holds after the entry at
	// index; a file whose contents are in force already changes nothing, and one that
	// does not parse leaves its block as it was (the host logs why). It runs on Raft's
	// FSM goroutine, without the FSM's lock: it must not call back into the cluster.
	UseAuthFiles(files []auth.File, index uint64)
	// AuthDigest is auth.Digest of the files in force on this node, shown to the other
	// nodes and at /cluster.
	AuthDigest() string
}

// authSync follows which auth files this node has put in force.
type authSync struct {
	host  authHost   // set before Start; nil: none (tests of the cluster alone)
	local *localAuth // the server's auth state (SetAuth), host then; nil: none

	mu      sync.Mutex
	inForce uint64        // the index of the files last handed to the host
	moved   chan struct{} // closed, and replaced, when inForce changes
}

// authChanged runs on Raft's FSM goroutine after each applied entry and restore: it puts
// the files the log holds in force when they changed.
func (c *Cluster) authChanged() {
	a := &c.authf
	a.mu.Lock()
	same := c.fsm.AuthIndex() == a.inForce
	a.mu.Unlock()
	if same {
		return
	}
	files, index := c.fsm.AuthFiles()
	if a.host != nil {
		a.host.UseAuthFiles(files, index)
	}
	a.mu.Lock()
	a.inForce = index
	if a.moved != nil {
		close(a.moved)
		a.moved = nil
	}
	a.mu.Unlock()
	c.signal() // the metadata carries the digest in force
}

// waitAuth returns once the files of the entry at index (or later ones) are in force on
// this node.
func (c *Cluster) waitAuth(ctx context.Context, index uint64) error {
	a := &c.authf
	for {
		a.mu.Lock()
		if a.inForce >= index {
			a.mu.Unlock()
			return nil
		}
		if a.moved == nil {
			a.moved = make(chan struct{})
		}
		moved := a.moved
		a.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("cluster: auth files of log index %d not applied on this node yet: %w", index, ctx.Err())
		case <-c.ctx.Done():
			return errClosed
		}
	}
}

// ProposeAuth proposes files, what this node's auth files hold (checked by the caller),
// as the cluster's: those whose contents differ from what the log holds go in one entry.
// It returns how many were proposed, once this node enforces them; 0 when the cluster
// holds them already. A file over the size limit, or a member too old to apply the entry,
// refuses the whole proposal.
func (c *Cluster) ProposeAuth(ctx context.Context, files []auth.File) (int, error) {
	if c.fsm == nil {
		return 0, errClosed
	}
	if err := fsm.CheckAuthFiles(files); err != nil {
		return 0, err
	}
	have, _ := c.fsm.AuthFiles()
	var diff []auth.File
	for _, f := range files {
		i := -1
		for j, h := range have {
			if h.Block == f.Block && h.Kind == f.Kind {
				i = j
			}
		}
		if i < 0 || !bytes.Equal(have[i].Data, f.Data) {
			diff = append(diff, f)
		}
	}
	if len(diff) == 0 {
		return 0, nil
	}
	if err := c.applyAuth(ctx, fsm.AuthFiles{Files: diff}); err != nil {
		return 0, err
	}
	return len(diff), nil
}

// SeedAuth proposes files as the cluster's where it has none for their block and kind
// (the first node's files become the cluster's), and returns once this node enforces
// what the log then holds: the cluster's files where it had some. Each file goes in an
// entry of its own, so that no sum of sizes refuses a start; a file the cluster does not
// replicate (too big) is left out and logged, and stays this node's alone.
func (c *Cluster) SeedAuth(ctx context.Context, files []auth.File) error {
	if c.fsm == nil {
		return errClosed
	}
	sent := false
	for _, f := range files {
		one := []auth.File{f}
		if err := fsm.CheckAuthFiles(one); err != nil {
			c.log.Error("cluster: auth file not offered to the cluster; this node alone enforces it", "err", err)
			continue
		}
		if err := c.applyAuth(ctx, fsm.AuthFiles{Seed: true, Files: one}); err != nil {
			return err
		}
		sent = true
	}
	if sent {
		return nil
	}
	// Nothing to offer: an empty seed still tells which files the cluster holds.
	return c.applyAuth(ctx, fsm.AuthFiles{Seed: true})
}

// applyAuth appends cmd to the log and waits until this node enforces the result, up to
// ctx's deadline (applyTimeout without one).
func (c *Cluster) applyAuth(ctx context.Context, cmd fsm.AuthFiles) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, applyTimeout)
		defer cancel()
	}
	for _, m := range c.Members() {
		if m.State == "alive" && m.MetaErr == nil && m.Meta.Protocol < authProtocol {
			return fmt.Errorf("%w: %s runs protocol %d, auth files need %d; upgrade it first",
				ErrOldMembers, m.Name, m.Meta.Protocol, authProtocol)
		}
	}
	res, err := c.Apply(ctx, cmd)
	if err != nil {
		return err
	}
	index, n := binary.Uvarint(res)
	if n <= 0 {
		return fmt.Errorf("cluster: auth entry result % x", res)
	}
	return c.waitAuth(ctx, index)
}

// authDigest is the digest of the auth files in force on this node; "" without a host.
func (c *Cluster) authDigest() string {
	if c.authf.host == nil {
		return ""
	}
	return c.authf.host.AuthDigest()
}

// replicatedAuthDigest is auth.Digest of the files the applied log holds.
func (c *Cluster) replicatedAuthDigest() (string, uint64) {
	files, index := c.fsm.AuthFiles()
	sums := make([]auth.FileSum, len(files))
	for i, f := range files {
		sums[i] = f.Sum()
	}
	return auth.Digest(sums), index
}

var (
	descAuthInSync = prometheus.NewDesc("bifrost_cluster_auth_in_sync",
		"1 when the auth files this node enforces are those the Raft log holds (their digests are equal), else 0.", nil, nil)
	descAuthIndex = prometheus.NewDesc("bifrost_cluster_auth_index",
		"The Raft log index of the auth files the log holds (0: none replicated yet).", nil, nil)
)

type authCollector struct{ c *Cluster }

func (authCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAuthInSync
	ch <- descAuthIndex
}

func (k authCollector) Collect(ch chan<- prometheus.Metric) {
	rep, index := k.c.replicatedAuthDigest()
	in := 0.0
	if rep == k.c.authDigest() {
		in = 1
	}
	ch <- prometheus.MustNewConstMetric(descAuthInSync, prometheus.GaugeValue, in)
	ch <- prometheus.MustNewConstMetric(descAuthIndex, prometheus.GaugeValue, float64(index))
}
