package hostile

import (
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestPasswordGuessing: a guesser on 16 connections at once from one address (127.0.0.2)
// tries 256 passwords of a real bcrypt password file. The failure budget
// (limits.auth_failures, loopback not exempt here) gives it max checks, then one after
// each block (1s, 2s, 4s...); every other guess is refused unchecked with 0x9F, and both
// are counted in the metrics. Meanwhile a user from another address (127.0.0.3) logs in
// with a check, and a user whose login is cached logs in from the guesser's own address.
func TestPasswordGuessing(t *testing.T) {
	const max, guessers, tries = 5, 16, 16
	dir := t.TempDir()
	var file []byte
	for _, u := range []string{"alice", "bob"} {
		h, err := auth.HashPassword([]byte(u+"-right"), 4) // the cheapest cost: the budget counts checks, not time
		if err != nil {
			t.Fatal(err)
		}
		file = fmt.Appendf(file, "%s:%s\n", u, h)
	}
	pw := filepath.Join(dir, "passwd")
	if err := os.WriteFile(pw, file, 0o600); err != nil {
		t.Fatal(err)
	}
	e := start(t, func(c *conf.Config) {
		c.Auth.PasswordFile = pw
		c.Auth.AllowAnonymous = ptr(false)
		c.Limits.AuthFailures = conf.AuthFailures{Max: ptr(max), Window: conf.Duration(time.Minute),
			BackoffMax: conf.Duration(30 * time.Second), ExemptLoopback: ptr(false)}
	})
	guesser, other := "127.0.0.2", "127.0.0.3"
	if rc := login(t, e.addr, guesser, "alice", "alice-right"); rc != packet.Success {
		t.Fatalf("alice's first login: %v", rc) // now in the login cache
	}

	var mu sync.Mutex
	codes := map[packet.ReasonCode]int{}
	var wg sync.WaitGroup
	begin := time.Now()
	for g := range guessers {
		wg.Go(func() {
			for i := range tries {
				rc, err := dialLogin(e.addr, guesser, "alice", fmt.Sprintf("guess-%d-%d", g, i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				codes[rc]++
				mu.Unlock()
			}
		})
	}
	if rc := login(t, e.addr, other, "bob", "bob-right"); rc != packet.Success {
		t.Errorf("bob's login from another address during the guessing: %v", rc)
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if rc := login(t, e.addr, guesser, "alice", "alice-right"); rc != packet.Success {
		t.Errorf("alice's cached login from the guesser's address: %v", rc)
	}

	checked, throttled := codes[packet.BadUserNameOrPassword], codes[packet.ConnectionRateExceeded]
	t.Logf("%d guesses in %v: %d checked (%.1f/s), %d refused unchecked", guessers*tries, elapsed.Round(time.Millisecond),
		checked, float64(checked)/elapsed.Seconds(), throttled)
	// A block ends at most log2(elapsed+1) times in elapsed seconds (1+2+...+2^(k-1)),
	// each end letting one check through: what the budget allows, however slow the run.
	allowed := max + 1 + int(math.Log2(elapsed.Seconds()+1))
	if checked > allowed || checked+throttled != guessers*tries {
		t.Errorf("answers %v: %d guesses checked in %v, want at most %d, and the rest refused unchecked (0x9F)",
			codes, checked, elapsed, allowed)
	}
	if f, th := e.metric(t, "bifrost_auth_failures_total"), e.metric(t, "bifrost_auth_throttled_total"); int(f) != checked || int(th) != throttled {
		t.Errorf("metrics: %v failures, %v throttled; want %d and %d", f, th, checked, throttled)
	}
}

// login is dialLogin for the test's goroutine.
func login(t *testing.T, addr, local, user, password string) packet.ReasonCode {
	t.Helper()
	rc, err := dialLogin(addr, local, user, password)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// dialLogin connects from the loopback address local as user with password (5.0) and
// returns the CONNACK's reason code.
func dialLogin(addr, local, user, password string) (packet.ReasonCode, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: testenv.Timeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, fmt.Errorf("dial from %s: %w", local, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testenv.Timeout))
	cp := &packet.Connect{Version: packet.V5, CleanStart: true, UsernameFlag: true, Username: []byte(user),
		PasswordFlag: true, Password: []byte(password)}
	if _, err := c.Write(cp.AppendTo(nil, packet.V5)); err != nil {
		return 0, fmt.Errorf("CONNECT from %s: %w", local, err)
	}
	r := packet.Reader{Version: packet.V5}
	buf := make([]byte, 512)
	for {
		h, body, ok, err := r.Next()
		if err != nil {
			return 0, fmt.Errorf("reading CONNACK from %s: %w", local, err)
		}
		if ok {
			var ack packet.Connack
			if err := ack.Decode(h, body, packet.V5); err != nil {
				return 0, fmt.Errorf("CONNACK to %s: %w", local, err)
			}
			return ack.Code, nil
		}
		n, err := c.Read(buf)
		if err != nil {
			return 0, fmt.Errorf("reading CONNACK from %s: %w", local, err)
		}
		r.Feed(buf[:n])
	}
}
