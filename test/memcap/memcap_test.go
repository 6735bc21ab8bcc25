//go:build linux

// Package memcap drives the edge broker, as a process, past a hard memory cap and back:
// under a cgroup with a memory limit and under GOMEMLIMIT alone. Each run checks the
// whole of docs/edge.md's "Under a hard memory cap": the kernel never kills the broker;
// past its limit it refuses new clients (5.0 quota exceeded, 3.1.1 server unavailable),
// sheds QoS 0 for subscribers that do not read, and stops reading the connection that
// publishes (TCP holds the publisher) while it keeps it open past its keep alive; and once
// the load falls it reads the publisher again and accepts new clients.
package memcap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// binary is the edge build of the broker, as bench/edge-memcap.sh runs it.
var binary = &testenv.Binary{Pkg: "github.com/bifrost-mqtt/bifrost/cmd/bifrost",
	Flags: []string{"-tags", "bifrost_nocluster bifrost_nopebble"}}

func TestMain(m *testing.M) {
	code := m.Run()
	binary.Cleanup()
	os.Exit(code)
}

// bound is how long any one phase may take before the test fails: it only decides how
// long a failing test takes.
const bound = 90 * time.Second

// The load: 16 KiB QoS 1 messages to a subscriber that does not read (the broker queues
// them in its heap once the socket is full), each written together with a burst of
// qos0Burst 1 KiB QoS 0 messages to a subscriber that reads: one round's fan-out of more
// than 4 KiB to it, which under pressure is cut to 4 KiB (the rest shed for memory
// pressure) and without pressure delivered whole. At most maxMessages rounds.
const (
	qos1Size    = 16 << 10
	qos0Size    = 1 << 10
	qos0Burst   = 8
	maxMessages = 20000
	keepAlive   = 2 // seconds: the broker closes a client silent for 3 s
)

// cgroupLimit is the memory limit of TestCgroup's group: the smallest that passed every
// run, 24 of 24, 18 of them beside the listener's race tests (docs/lab/edge.md, "A 16 KiB
// QoS 1 flood in a small group"). At 12 MiB it passed 10 of 12 (5 of 10 without the
// intake budget, internal/memory/budget.go).
const cgroupLimit = 14 << 20

// TestCgroup runs the broker in a memory cgroup of cgroupLimit made for it (memory.limit:
// auto: GOMEMLIMIT 80% of it; pressure from the group's usage less page cache). Without
// the publisher's pause the kernel kills it a second into the flood (in a 48 MiB group).
func TestCgroup(t *testing.T) {
	cg := newCgroup(t, cgroupLimit)
	run(t, cg, nil)
	if n := cg.ooms(t); n != 0 {
		t.Fatalf("the kernel's OOM killer acted %d times in the group", n)
	}
}

// TestGOMEMLIMIT runs the broker with GOMEMLIMIT=8MiB and no cgroup limit (pressure
// from its anonymous RSS).
func TestGOMEMLIMIT(t *testing.T) {
	run(t, nil, []string{"GOMEMLIMIT=8MiB"})
}

func run(t *testing.T, cg *cgroup, env []string) {
	b := start(t, cg, env)

	sub := b.dial(t, packet.V5, "slow-q1", 4<<10)
	sub.subscribe(t, "q1/#", 1)
	sub0 := b.dial(t, packet.V5, "q0", 0)
	sub0.subscribe(t, "q0/#", 0)
	go sub0.discard()
	pub := b.dial(t, packet.V5, "pub", 0)
	go pub.discard() // its PUBACKs and PINGRESPs
	// Every client keeps its connection alive: the subscribers are slow, not gone.
	stopPings := make(chan struct{})
	defer close(stopPings)
	for _, c := range []*client{sub, sub0, pub} {
		go c.keepAlive(stopPings)
	}

	// The publisher floods until told to stop, with as many QoS 1 messages unacknowledged
	// as the broker's Receive Maximum allows; a paused publisher is held by that window
	// or by TCP, whichever fills first.
	stop := make(chan struct{})
	var sent atomic.Int64
	flood := make(chan error, 1)
	go func() {
		q1 := make([]byte, qos1Size)
		q0 := make([]byte, qos0Size)
		for i := range maxMessages {
			select {
			case <-stop:
				flood <- nil
				return
			case <-pub.window:
			}
			ps := []packet.Packet{&packet.Publish{Topic: []byte("q1/x"), Payload: q1, QoS: 1, PacketID: uint16(i%65535 + 1)}}
			for range qos0Burst {
				ps = append(ps, &packet.Publish{Topic: []byte("q0/x"), Payload: q0})
			}
			if err := pub.send(ps...); err != nil {
				flood <- err
				return
			}
			sent.Add(1)
		}
		flood <- errors.New("the broker read every message: never paused")
	}()

	// Hard: the publisher is paused.
	b.waitMetrics(t, "hard pressure with the publisher paused", func(m metrics) bool {
		return m["bifrost_memory_pressure"] == 2 && m["bifrost_connections_paused"] >= 1
	})
	atHard := sent.Load()
	t.Logf("hard after %d rounds", atHard)

	// New clients are refused with the right CONNACK while over.
	if code := b.connectCode(t, packet.V5, "probe5"); code != byte(packet.QuotaExceeded) {
		t.Errorf("a 5.0 CONNECT at hard: CONNACK 0x%02x, want 0x%02x (quota exceeded)", code, byte(packet.QuotaExceeded))
	}
	if code := b.connectCode(t, packet.V311, "probe3"); code != packet.ConnRefusedServerUnavailable {
		t.Errorf("a 3.1.1 CONNECT at hard: return code %d, want %d (server unavailable)", code, packet.ConnRefusedServerUnavailable)
	}

	// Paused past its keep alive (1.5 × 2 s), the publisher is kept, and not read: its
	// writes are held (by its Receive Maximum window, whose PUBACKs do not come, or by
	// TCP). Wanted: 4 s of the broker's time at hard with the publisher paused throughout
	// and not one more message written. A dip below hard resumes it for a moment (the
	// level's hysteresis at work); the window then starts again.
	start, held := -1.0, int64(0)
	b.waitMetrics(t, "4 s at hard with the publisher paused and its writes held", func(m metrics) bool {
		at := m["bifrost_memory_hard_seconds_total"]
		switch {
		case m["bifrost_memory_pressure"] != 2 || m["bifrost_connections_paused"] < 1 || start >= 0 && sent.Load() != held:
			start = -1
		case start < 0:
			start, held = at, sent.Load()
		}
		return start >= 0 && at-start >= 4
	})
	if len(flood) != 0 {
		t.Fatalf("the publisher ended while paused: %v", <-flood)
	}
	if pub.ended.Load() {
		t.Fatal("the paused publisher's connection was closed")
	}
	m := b.metrics(t)
	if m["bifrost_messages_dropped_total{reason=\"memory_pressure\"}"] == 0 {
		t.Errorf("no QoS 0 message shed under pressure: %v", m)
	}

	// The load falls: the publisher stops, the slow subscriber reads.
	close(stop)
	go sub.drain()
	select {
	case err := <-flood:
		if err != nil {
			t.Fatalf("publisher: %v", err)
		}
	case <-time.After(bound):
		t.Fatal("the publisher did not stop")
	}
	b.waitMetrics(t, "no pressure and no connection paused", func(m metrics) bool {
		return m["bifrost_memory_pressure"] == 0 && m["bifrost_connections_paused"] == 0
	})
	waitFor(t, "a 5.0 and a 3.1.1 CONNECT accepted", func() bool {
		return b.connectCode(t, packet.V5, "after5") == 0 && b.connectCode(t, packet.V311, "after3") == 0
	})
	// The publisher was kept through its pause and is served: its PINGREQs are answered.
	pongs := pub.pongs.Load()
	waitFor(t, "a PINGRESP to the publisher after its pause", func() bool {
		return pub.pongs.Load() > pongs || pub.ended.Load()
	})
	if pub.ended.Load() {
		t.Fatal("the publisher's connection was closed")
	}
	b.alive(t)
}

// A broker process.
type broker struct {
	*testenv.Proc
	addr string // MQTT
	http string
}

// start runs the edge broker (store on, as bench/edge-memcap.sh), in cg if not nil, with
// env added to its environment, and stops it when the test ends.
func start(t *testing.T, cg *cgroup, env []string) *broker {
	bin := binary.Path(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bifrost.yaml")
	yaml := fmt.Sprintf(`memory:
  profile: edge
listeners:
  - name: mqtt
    type: tcp
    address: 127.0.0.1:0
http:
  address: 127.0.0.1:0
store:
  dir: %q
  sync: always
queue:
  offline_messages: 1000000
  offline_bytes: 1GiB
log:
  level: info
  format: text
`, filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	if cg != nil {
		// Into the group before exec, so that the policy reads its limit at start and
		// everything the broker allocates is charged to it.
		cmd = exec.Command("/bin/sh", "-c", `echo $$ >"$1/cgroup.procs" && exec "$2" -c "$3"`, "sh", cg.dir, bin, cfg)
	} else {
		cmd = exec.Command(bin, "-c", cfg)
	}
	cmd.Env = append(os.Environ(), env...)
	b := &broker{}
	b.Proc = testenv.StartProc(t, cmd, bound, func(line string) bool {
		if a, ok := testenv.MQTTAddr(line); ok {
			b.addr = a
		}
		if a, ok := testenv.HTTPAddr(line); ok {
			b.http = a
		}
		return b.addr != "" && b.http != ""
	})
	return b
}

// alive fails the test if the broker has exited (a kill by the OOM killer included).
func (b *broker) alive(t *testing.T) {
	t.Helper()
	select {
	case <-b.Done():
		t.Fatalf("the broker exited: %v", b.Cmd.ProcessState)
	default:
	}
}

// metrics are the broker's /metrics samples by series (name and labels).
type metrics map[string]float64

func (b *broker) metrics(t *testing.T) metrics {
	t.Helper()
	b.alive(t)
	res, err := http.Get("http://" + b.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	m := metrics{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// waitMetrics waits until cond holds of the broker's metrics.
func (b *broker) waitMetrics(t *testing.T, what string, cond func(metrics) bool) {
	t.Helper()
	var last metrics
	waitFor(t, what, func() bool {
		last = b.metrics(t)
		return cond(last)
	})
}

// waitFor waits until cond holds, for at most bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", bound, what)
		}
		time.Sleep(pause)
	}
}

// A client is a raw MQTT connection.
type client struct {
	nc    net.Conn
	r     *bufio.Reader
	v     packet.Version
	wm    sync.Mutex   // one writer at a time
	pongs atomic.Int64 // PINGRESPs read by readLoop
	ended atomic.Bool  // readLoop saw the connection end
	// window holds a token per QoS 1 message the client may send unacknowledged: the
	// broker's Receive Maximum; readLoop puts one back per PUBACK.
	window chan struct{}
}

// dial connects a client with id; rcvbuf > 0 sets its socket's receive buffer (a
// subscriber that is to back up soon). It fails the test unless CONNACK accepts it.
func (b *broker) dial(t *testing.T, v packet.Version, id string, rcvbuf int) *client {
	t.Helper()
	c, code := b.connect(t, v, id, rcvbuf)
	if code != 0 {
		t.Fatalf("%s: CONNACK 0x%02x", id, code)
	}
	t.Cleanup(func() { _ = c.nc.Close() })
	return c
}

// connectCode connects a client with id and returns the CONNACK code (3.1.1: return
// code), closing the connection.
func (b *broker) connectCode(t *testing.T, v packet.Version, id string) byte {
	t.Helper()
	c, code := b.connect(t, v, id, 0)
	_ = c.nc.Close()
	return code
}

func (b *broker) connect(t *testing.T, v packet.Version, id string, rcvbuf int) (*client, byte) {
	t.Helper()
	d := net.Dialer{Timeout: bound}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			})
		}
	}
	nc, err := d.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{nc: nc, r: bufio.NewReader(nc), v: v}
	conn := &packet.Connect{Version: v, CleanStart: true, ClientID: []byte(id), KeepAlive: keepAlive}
	_ = nc.SetDeadline(time.Now().Add(bound))
	if err := c.send(conn); err != nil {
		t.Fatalf("%s: CONNECT: %v", id, err)
	}
	h, body, err := c.read()
	if err != nil || h.Type != packet.CONNACK {
		t.Fatalf("%s: no CONNACK: %v %v", id, h.Type, err)
	}
	_ = nc.SetDeadline(time.Time{})
	var ack packet.Connack
	if err := ack.Decode(h, body, v); err != nil {
		t.Fatalf("%s: CONNACK: %v", id, err)
	}
	recvMax := 65535
	if ack.Props.ReceiveMaximum.Set {
		recvMax = int(ack.Props.ReceiveMaximum.V)
	}
	c.window = make(chan struct{}, recvMax)
	for range recvMax {
		c.window <- struct{}{}
	}
	if v != packet.V5 {
		return c, packet.ConnackCodeV3(ack.Code)
	}
	return c, byte(ack.Code)
}

// send writes ps in one write.
func (c *client) send(ps ...packet.Packet) error {
	var b []byte
	for _, p := range ps {
		b = p.AppendTo(b, c.v)
	}
	c.wm.Lock()
	defer c.wm.Unlock()
	_, err := c.nc.Write(b)
	return err
}

// read reads one packet.
func (c *client) read() (packet.Header, []byte, error) {
	var head [5]byte
	n := 0
	for {
		b, err := c.r.ReadByte()
		if err != nil {
			return packet.Header{}, nil, err
		}
		head[n] = b
		n++
		if n >= 2 && b&0x80 == 0 || n == len(head) {
			break
		}
	}
	h, hn, err := packet.ParseHeader(head[:n], c.v)
	if err != nil || hn == 0 {
		return h, nil, fmt.Errorf("header % x: %v", head[:n], err)
	}
	body := make([]byte, h.Remaining)
	_, err = io.ReadFull(c.r, body)
	return h, body, err
}

func (c *client) subscribe(t *testing.T, filter string, qos byte) {
	t.Helper()
	s := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte(filter), QoS: qos}}}
	if err := c.send(s); err != nil {
		t.Fatal(err)
	}
	h, _, err := c.read()
	if err != nil || h.Type != packet.SUBACK {
		t.Fatalf("SUBSCRIBE %s: %v %v", filter, h.Type, err)
	}
}

// discard reads and drops every packet until the connection ends.
func (c *client) discard() { c.readLoop(false) }

// drain reads every packet and acknowledges QoS 1 PUBLISHes, until the connection ends.
func (c *client) drain() { c.readLoop(true) }

// readLoop reads until the connection ends, counting PINGRESPs, and acknowledges QoS 1
// PUBLISHes if ack.
func (c *client) readLoop(ack bool) {
	defer c.ended.Store(true)
	for {
		h, body, err := c.read()
		if err != nil {
			return
		}
		switch h.Type {
		case packet.PINGRESP:
			c.pongs.Add(1)
		case packet.PUBACK:
			select {
			case c.window <- struct{}{}:
			default:
			}
		case packet.PUBLISH:
			var p packet.Publish
			if ack && p.Decode(h, body, c.v) == nil && p.QoS == 1 {
				if c.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: p.PacketID}) != nil {
					return
				}
			}
		}
	}
}

// keepAlive sends a PINGREQ every second until stop is closed, as a client library
// does; while the connection's writes are held, so are these.
func (c *client) keepAlive(stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if c.send(packet.Pingreq{}) != nil {
				return
			}
		}
	}
}

// A cgroup is a memory cgroup made for the broker below the test's own, removed when the
// test ends.
type cgroup struct {
	dir string
	v2  bool
}

// newCgroup makes a memory cgroup with a limit of limit bytes: v2 where the test's own
// cgroup delegates the memory controller, else v1 (root and a writable hierarchy needed).
func newCgroup(t *testing.T, limit int64) *cgroup {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		testenv.Need(t, false, "/proc/self/cgroup")
	}
	var v1, v2 string
	for line := range strings.SplitSeq(strings.TrimSpace(string(self)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2 = f[2]
		case hasMemory(f[1]):
			v1 = f[2]
		}
	}
	name := fmt.Sprintf("bifrost-memcap-test-%d", os.Getpid())
	cg := &cgroup{}
	switch parent := filepath.Join("/sys/fs/cgroup", v2); {
	case v2 != "" && fileHas(filepath.Join(parent, "cgroup.subtree_control"), "memory"):
		cg.dir, cg.v2 = filepath.Join(parent, name), true
	case v1 != "":
		cg.dir = filepath.Join("/sys/fs/cgroup/memory", v1, name)
	default:
		testenv.Need(t, false, "a memory cgroup (v1, or v2 with the memory controller delegated)")
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		testenv.Need(t, false, "a writable memory cgroup hierarchy (root): "+err.Error())
	}
	t.Cleanup(func() {
		// Empty once the broker is gone; a moment may pass before the kernel agrees.
		for i := 0; i < 100; i++ {
			if err := os.Remove(cg.dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("cgroup %s not removed", cg.dir)
	})
	limitFile, swapFile := "memory.limit_in_bytes", "memory.swappiness"
	swap := "0"
	if cg.v2 {
		limitFile, swapFile = "memory.max", "memory.swap.max"
	}
	if err := os.WriteFile(filepath.Join(cg.dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(cg.dir, swapFile), []byte(swap), 0o644) // no swap to hide in
	return cg
}

// ooms returns how many times the OOM killer killed in the group.
func (cg *cgroup) ooms(t *testing.T) int {
	t.Helper()
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func hasMemory(ctrls string) bool {
	for c := range strings.SplitSeq(ctrls, ",") {
		if c == "memory" {
			return true
		}
	}
	return false
}

// fileHas reports whether file's whitespace-separated words include w.
func fileHas(file, w string) bool {
	data, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(data)) {
		if f == w {
			return true
		}
	}
	return false
}
