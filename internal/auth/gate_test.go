package auth

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestGate: until a cluster node enforces the cluster's auth files, a CONNECT is not
// decided on the event loop, waits for them on the auth pool, and after gateWait is
// refused with Server unavailable; once the gate is open, CONNECTs are decided as usual.
func TestGate(t *testing.T) {
	c := conf.Default()
	allow := true
	c.Auth.AllowAnonymous = &allow
	set, err := NewSet(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	anon := &Request{ClientID: "c"}
	synctest.Test(t, func(t *testing.T) {
		g := NewGate(set)
		if _, _, ok := g.TryAuthenticate(anon); ok {
			t.Fatal("a closed gate decided a CONNECT on the event loop")
		}
		start := time.Now()
		if _, err := g.Authenticate(anon); !errors.Is(err, packet.ServerUnavailable) {
			t.Fatalf("closed gate: %v; want Server unavailable", err)
		}
		if waited := time.Since(start); waited != gateWait {
			t.Errorf("refused after %v; want %v", waited, gateWait)
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
		time.Sleep(gateWait / 2)
		g.Open()
		if err := <-done; err != nil {
			t.Fatalf("after the gate opened: %v", err)
		}
		if _, err, ok := g.TryAuthenticate(anon); !ok || err != nil {
			t.Errorf("open gate: TryAuthenticate %v, %v", ok, err)
		}
	})
}
