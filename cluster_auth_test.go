package bifrost

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestAuthGate: until a cluster node enforces the cluster's auth files, a CONNECT is not
// decided on the event loop, waits for them on the auth pool, and after authGateWait is
// refused with Server unavailable; once the gate is open, CONNECTs are decided as usual.
func TestAuthGate(t *testing.T) {
	c := conf.Default()
	allow := true
	c.Auth.AllowAnonymous = &allow
	set, err := auth.NewSet(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	anon := &auth.Request{ClientID: "c"}
	synctest.Test(t, func(t *testing.T) {
		g := newAuthGate(set)
		if _, _, ok := g.TryAuthenticate(anon); ok {
			t.Fatal("a closed gate decided a CONNECT on the event loop")
		}
		start := time.Now()
		if _, err := g.Authenticate(anon); !errors.Is(err, packet.ServerUnavailable) {
			t.Fatalf("closed gate: %v; want Server unavailable", err)
		}
		if waited := time.Since(start); waited != authGateWait {
			t.Errorf("refused after %v; want %v", waited, authGateWait)
		}

		done := make(chan error, 1)
		go func() {
			_, err := g.Authenticate(anon)
			done <- err
		}()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Authenticate returned %v before the gate opened", err)
		default:
		}
		time.Sleep(authGateWait / 2)
		g.open()
		if err := <-done; err != nil {
			t.Fatalf("after the gate opened: %v", err)
		}
		if _, err, ok := g.TryAuthenticate(anon); !ok || err != nil {
			t.Errorf("open gate: TryAuthenticate %v, %v", ok, err)
		}
	})
}
