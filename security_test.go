package bifrost_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// TestExposureRefused: a listener off loopback with no password file and no explicit
// allow_anonymous refuses to start, naming the listener and the way out; saying
// allow_anonymous: true starts and logs a warning.
func TestExposureRefused(t *testing.T) {
	cfg := testConfig(t)
	cfg.Listeners = cfg.Listeners[:1]
	cfg.Listeners[0].Address = "0.0.0.0:0"
	_, err := bifrost.New(cfg)
	if err == nil || !strings.Contains(err.Error(), "listeners[0].address") || !strings.Contains(err.Error(), "allow_anonymous") {
		t.Fatalf("New = %v, want a refusal naming listeners[0].address and allow_anonymous", err)
	}
	yes := true
	cfg.Auth.AllowAnonymous = &yes
	_, logs := start(t, cfg)
	if !strings.Contains(logs.String(), "anonymous clients from the network") {
		t.Fatalf("no warning logged:\n%s", logs)
	}
}

// hook is an embedder's Authenticator: "app" with password "letmein" may connect, as
// identity "app-1".
type hook struct{ calls chan string }

func (h hook) Authenticate(r *bifrost.AuthRequest) (bifrost.AuthResult, error) {
	h.calls <- r.Username
	if r.Username == "app" && string(r.Password) == "letmein" {
		return bifrost.AuthResult{Username: "app-1"}, nil
	}
	return bifrost.AuthResult{}, bifrost.ErrBadCredentials
}

// pahoConnect connects a Paho 3.1.1 client and returns the token's error.
func pahoConnect(t *testing.T, addr, user, pass string) (mqtt.Client, error) {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("c-" + user).
		SetUsername(user).SetPassword(pass).SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectTimeout(5 * time.Second).SetProtocolVersion(4) // no fallback to 3.1 after a refusal
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(testenv.Timeout) {
		// Without this a CONNACK late on a loaded machine read as an accepted CONNECT:
		// an unanswered token has no error.
		return c, errors.New("no CONNACK in time")
	}
	return c, tok.Error()
}

// TestEmbedderAuthenticator: WithAuthenticator decides CONNECTs (off the event loop);
// Paho sees the refusal as bad user name or password.
func TestEmbedderAuthenticator(t *testing.T) {
	h := hook{calls: make(chan string, 4)}
	cfg := testConfig(t)
	cfg.Listeners = cfg.Listeners[:1]
	var logs syncBuffer
	b, err := bifrost.New(cfg, bifrost.WithAuthenticator(h), bifrost.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	addr := b.Addrs()[0].String()
	if _, err := pahoConnect(t, addr, "app", "wrong"); err == nil || !errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
		t.Fatalf("wrong password: %v, want bad user name or password", err)
	}
	c, err := pahoConnect(t, addr, "app", "letmein")
	if err != nil {
		t.Fatalf("right password: %v", err)
	}
	c.Disconnect(100)
	if got := len(h.calls); got != 2 {
		t.Fatalf("hook called %d times, want 2", got)
	}
}

// TestPasswordFileAndACL: a password file and an ACL file from the configuration,
// through the binary's own formats: a user connects, reads what the ACL lets it, and is
// refused what it does not; a file reload takes a removed user away.
func TestPasswordFileAndACL(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "passwd")
	acl := filepath.Join(dir, "acl")
	hash, err := auth.HashPassword([]byte("s3cret"), 4) // bcrypt at its lowest cost: fast tests
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, pw, "alice:"+hash+"\n")
	writeFile(t, acl, "user alice\ntopic readwrite alice/#\n")
	cfg := testConfig(t)
	cfg.Listeners = cfg.Listeners[:1]
	cfg.Auth.PasswordFile, cfg.Auth.ACLFile = pw, acl
	b, _ := start(t, cfg)
	addr := b.Addrs()[0].String()
	if _, err := pahoConnect(t, addr, "alice", "nope"); !errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := pahoConnect(t, addr, "", ""); !errors.Is(err, packets.ErrorRefusedNotAuthorised) {
		t.Fatalf("anonymous with a password file: %v, want not authorized", err)
	}
	c, err := pahoConnect(t, addr, "alice", "s3cret")
	if err != nil {
		t.Fatalf("alice: %v", err)
	}
	defer c.Disconnect(100)
	got := make(chan string, 8)
	tok := c.Subscribe("#", 0, func(_ mqtt.Client, m mqtt.Message) { got <- m.Topic() })
	if !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	c.Publish("bob/x", 0, false, "denied").WaitTimeout(testenv.Timeout)
	c.Publish("alice/x", 0, false, "allowed").WaitTimeout(testenv.Timeout)
	select {
	case topic := <-got:
		if topic != "alice/x" {
			t.Fatalf("received %q, want only alice/x", topic)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("alice/x not delivered")
	}

	writeFile(t, pw, "")
	if err := b.ReloadFiles(); err != nil {
		t.Fatal(err)
	}
	if _, err := pahoConnect(t, addr, "alice", "s3cret"); !errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
		t.Fatalf("removed user after reload: %v", err)
	}
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
