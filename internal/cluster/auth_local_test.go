package cluster

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// serverAuth is a server's auth state with one password file holding user: what SetAuth
// is handed, its file's path, and how many times the files in force changed.
type serverAuth struct {
	state   clusterlink.AuthState
	file    string
	changed atomic.Int32
}

func newServerAuth(t *testing.T, user string) *serverAuth {
	t.Helper()
	s := &serverAuth{file: filepath.Join(t.TempDir(), "passwd")}
	s.write(t, user)
	cfg := conf.Default()
	cfg.Auth.PasswordFile = s.file
	set, err := auth.NewSet(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.state = clusterlink.AuthState{Set: set, Gate: auth.NewGate(set), Changed: func() { s.changed.Add(1) }}
	return s
}

// write makes user the password file's one user.
func (s *serverAuth) write(t *testing.T, user string) {
	t.Helper()
	rec, err := auth.HashPassword([]byte("pw"), 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.file, []byte(user+":"+rec+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// digest is auth.Digest of the files s enforces.
func (s *serverAuth) digest() string { return auth.Digest(s.state.Set.Sums()) }

// TestSetAuthSeedAndReload: the first node's seed makes its file the cluster's and opens
// its gate; a node joining later opens its gate once it enforces the cluster's file
// instead of its own, and says so; its reload proposes its changed file, in force on it
// when ReloadAuth returns and then on the first; a reload of the same file proposes
// nothing.
func TestSetAuthSeedAndReload(t *testing.T) {
	a1, a2 := newServerAuth(t, "alice"), newServerAuth(t, "bob")
	alice := a1.digest()
	n1 := startNode(t, nodeConfig(t, "n1", 1), func(c *Cluster) { c.SetAuth(a1.state) })
	testenv.WaitFor(t, "n1's gate open", a1.state.Gate.IsOpen)
	if a1.digest() != alice || a1.changed.Load() != 0 {
		t.Fatalf("n1 enforces %s (changed %d times) after its seed; want its own file, %s, unchanged", a1.digest(), a1.changed.Load(), alice)
	}

	if a2.state.Gate.IsOpen() {
		t.Fatal("n2's gate open before it started")
	}
	// bootstrap_expect 2: n2 never founds a cluster of its own, it waits to be added.
	n2 := startNode(t, nodeConfig(t, "n2", 2, n1.gossip()), func(c *Cluster) { c.SetAuth(a2.state) })
	testenv.WaitFor(t, "n2's gate open", a2.state.Gate.IsOpen)
	if a2.digest() != alice || a2.changed.Load() == 0 {
		t.Fatalf("n2 enforces %s (changed %d times) after its seed; want the cluster's, %s", a2.digest(), a2.changed.Load(), alice)
	}
	if !strings.Contains(n2.logs.String(), "this node enforces the cluster's auth file, not its own") {
		t.Error("n2 did not say that the cluster's file replaces its own")
	}

	a2.write(t, "carol")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	if err := n2.ReloadAuth(ctx); err != nil {
		t.Fatal(err)
	}
	carol := a2.digest()
	if carol == alice {
		t.Fatal("n2 does not enforce its reloaded file when ReloadAuth returns")
	}
	testenv.WaitFor(t, "n1 enforcing n2's reload", func() bool { return a1.digest() == carol })
	index := n1.fsm.AuthIndex()
	if err := n2.ReloadAuth(ctx); err != nil || n1.fsm.AuthIndex() != index {
		t.Errorf("the same file reloaded: %v, log index of the files %d -> %d; want nothing proposed", err, index, n1.fsm.AuthIndex())
	}
}
