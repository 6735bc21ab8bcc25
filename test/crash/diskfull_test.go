package crash

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// diskSize is the tmpfs the store fills: a few MiB, written in a second or two.
const diskSize = 4 << 20

// TestFullDisk runs the broker with its store on a small tmpfs (server profile, sync:
// always) and publishes QoS 1 to an offline persistent session until the disk is full:
// 5.0 publishers are then answered PUBACK 0x97, 3.1.1 ones have their connection closed.
// It kills the broker (kill -9) and starts it again on the full disk: the pebble engine
// must flush the write-ahead log it replays before it can serve, so the start fails at
// once, exiting 1 with an error that names the directory and the space; the log engine
// needs no space to start, so it serves, says the disk is full, and answers 0x97 until
// space is freed. Once the file system has grown, a broker started again (for the log
// engine, after another kill -9) delivers every message it acknowledged.
func TestFullDisk(t *testing.T) {
	for _, engine := range []string{conf.EnginePebble, conf.EngineLog} {
		t.Run("Engine="+engine, func(t *testing.T) { testFullDisk(t, engine) })
	}
}

func testFullDisk(t *testing.T, engine string) {
	mnt := testenv.Tmpfs(t, diskSize)
	dir := filepath.Join(mnt, "store")
	path := configEngine(t, dir, "always", engine)
	p := startBroker(t, path, startLimit)
	sub := newSubscriber("full-sub", packet.V5, 1)
	c, err := sub.connect(p.addr, true)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.write(&packet.Disconnect{})
	c.close()

	// Fill the disk.
	acked := newAckSet()
	var wg sync.WaitGroup
	refused := make([]string, 3)
	for i, v := range []packet.Version{packet.V5, packet.V5, packet.V311} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			refused[i] = fillPublish(p.addr, fmt.Sprintf("full-pub%d", i), v, acked)
		}()
	}
	wg.Wait()
	t.Logf("disk full after %d acknowledged messages; publishers: %q", acked.len(), refused)
	for i, r := range refused {
		want := "PUBACK 0x97"
		if i == 2 {
			want = "closed"
		}
		if !strings.HasPrefix(r, want) {
			t.Errorf("publisher %d on the full disk: %s, want %s", i, r, want)
		}
	}
	p.kill()

	if engine == conf.EnginePebble {
		code, log := runToExit(t, path)
		t.Logf("start on the full disk: exit %d:\n%s", code, log)
		if code != 1 {
			t.Errorf("start on the full disk: exit code %d, want 1", code)
		}
		for _, want := range []string{`msg="start failed"`, dir + ": no space left on device", "replaying the write-ahead log", "its file system has"} {
			if !strings.Contains(log, want) {
				t.Errorf("the start's log does not say %q", want)
			}
		}
		if n := strings.Count(log, "pebble: background error"); n > 2 {
			t.Errorf("%d background errors logged; want them limited", n)
		}
		testenv.ResizeTmpfs(t, mnt, 16*diskSize)
	} else {
		p = startBroker(t, path, startLimit)
		if log := p.Log(); !strings.Contains(log, "store: little space left") || !strings.Contains(log, dir) {
			t.Errorf("the start on the full disk does not say so:\n%s", log)
		}
		if r := fillPublish(p.addr, "full-probe", packet.V5, acked); !strings.HasPrefix(r, "PUBACK 0x97") {
			t.Errorf("a publish on the full disk after the restart: %s, want PUBACK 0x97", r)
		}
		testenv.ResizeTmpfs(t, mnt, 16*diskSize)
		testenv.WaitFor(t, "a publish to be acknowledged once the file system has grown", func() bool {
			return publishOnce(t, p.addr, acked) == 0
		})
		p.kill()
	}

	p = startBroker(t, path, startLimit)
	missing := acked.all()
	c, err = sub.connect(p.addr, false)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(testenv.Timeout))
	err = sub.serve(c, func(payload string) bool {
		delete(missing, payload)
		return len(missing) == 0
	})
	c.close()
	if len(missing) > 0 {
		t.Errorf("%d of %d acknowledged messages not delivered after the restart (%v)", len(missing), acked.len(), err)
	}
	p.stop(t, 10*time.Second)
}

// fillPublish publishes QoS 1 messages of 1 KiB of random hex (Snappy leaves it as it is)
// one at a time on a clean session of protocol v, recording those acknowledged, until one
// is refused: it returns how ("PUBACK 0x97", "closed: ...").
func fillPublish(addr, id string, v packet.Version, acked *ackSet) string {
	c, _, err := dial(addr, v, &packet.Connect{ClientID: []byte(id), CleanStart: true, KeepAlive: 60})
	if err != nil {
		return "closed: " + err.Error()
	}
	defer c.close()
	for pid := uint16(1); ; pid = pid%65000 + 1 {
		payload := randomPayload(id)
		if err := c.write(&packet.Publish{Topic: []byte("crash/q1/" + id), Payload: []byte(payload), QoS: 1, PacketID: pid}); err != nil {
			return "closed: " + err.Error()
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(testenv.Timeout))
		pk, err := c.read()
		if err != nil {
			return "closed: " + err.Error()
		}
		a, ok := pk.(*packet.Ack)
		switch {
		case !ok || a.PacketType != packet.PUBACK || a.PacketID != pid:
			return fmt.Sprintf("unexpected %v", pk)
		case a.Code.IsError():
			return fmt.Sprintf("PUBACK 0x%02x", byte(a.Code))
		}
		acked.add(payload)
	}
}

// publishOnce publishes one 5.0 QoS 1 message and returns its PUBACK's reason code,
// recording it if it is acknowledged; a failure to publish fails t.
func publishOnce(t *testing.T, addr string, acked *ackSet) packet.ReasonCode {
	t.Helper()
	c, _, err := dial(addr, packet.V5, &packet.Connect{ClientID: []byte("full-once"), CleanStart: true, KeepAlive: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	payload := randomPayload("full-once")
	if err := c.write(&packet.Publish{Topic: []byte("crash/q1/once"), Payload: []byte(payload), QoS: 1, PacketID: 1}); err != nil {
		t.Fatal(err)
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(testenv.Timeout))
	pk, err := c.read()
	if err != nil {
		t.Fatal(err)
	}
	a, ok := pk.(*packet.Ack)
	if !ok || a.PacketType != packet.PUBACK {
		t.Fatalf("publish: got %v, want a PUBACK", pk)
	}
	if a.Code == packet.Success {
		acked.add(payload)
	}
	return a.Code
}

func randomPayload(id string) string {
	b := make([]byte, 506)
	_, _ = rand.Read(b)
	return id + ":" + hex.EncodeToString(b)
}

// runToExit runs the broker on the config at path and waits, up to testenv.Timeout, for
// it to exit; it returns the exit code and the log.
func runToExit(t *testing.T, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	var log strings.Builder
	cmd := exec.CommandContext(ctx, binary.Path(t), "-c", path)
	cmd.Stderr = &log
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the broker still runs %v after its start on a full disk (killed):\n%s", testenv.Timeout, tail(log.String(), 20))
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), log.String()
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// An ackSet is the payloads acknowledged, from several publishers.
type ackSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func newAckSet() *ackSet { return &ackSet{m: map[string]bool{}} }

func (s *ackSet) add(payload string) {
	s.mu.Lock()
	s.m[payload] = true
	s.mu.Unlock()
}

func (s *ackSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// all returns a copy of the set.
func (s *ackSet) all() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]bool, len(s.m))
	for k := range s.m {
		m[k] = true
	}
	return m
}
