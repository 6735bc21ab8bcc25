package interop_test

// Helpers of the Mosquitto and WebSocket interop tests (mosquitto_test.go) and of the idle
// test (idle_test.go). Every name here starts with mq so that it cannot clash with the
// helpers of the Paho tests that share this package.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// mqTool returns the path of a Mosquitto command-line client (testenv.Command).
func mqTool(t testing.TB, name string) string {
	t.Helper()
	return testenv.Command(t, name, "apt-get install -y mosquitto-clients")
}

// mqLogs is a log sink safe for the broker's goroutines; its content is shown when the
// test fails.
type mqLogs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *mqLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *mqLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// mqBroker is a broker running in the test process, with a TCP listener, a WebSocket
// listener at /mqtt and the HTTP endpoint, each on a free loopback port.
type mqBroker struct {
	*bifrost.Broker
	tcp, ws, http string // host:port
	logs          *mqLogs
}

// mqStart starts a broker; edit, if not nil, changes the config first. t closes it.
func mqStart(t testing.TB, edit func(*bifrost.Config)) *mqBroker {
	t.Helper()
	cfg := mqConfig(t, edit)
	logs := &mqLogs{}
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if t.Failed() {
			t.Logf("broker log:\n%s", logs)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	mb := &mqBroker{Broker: b, logs: logs}
	addrs := b.Addrs()
	mb.tcp, mb.ws = addrs[0].String(), addrs[1].String()
	if a := b.HTTPAddr(); a != nil {
		mb.http = a.String()
	}
	return mb
}

// mqConfig is the config the interop brokers run with: loopback listeners on free ports,
// a store in the test's temporary directory, debug logs; edit, if not nil, changes it.
func mqConfig(t testing.TB, edit func(*bifrost.Config)) *bifrost.Config {
	cfg := bifrost.DefaultConfig()
	cfg.Listeners = []conf.Listener{
		{Name: "tcp", Type: conf.ListenerTCP, Address: "127.0.0.1:0"},
		{Name: "ws", Type: conf.ListenerWS, Address: "127.0.0.1:0", Path: "/mqtt"},
	}
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Store.Dir = t.TempDir()
	cfg.Log.Level = "debug"
	if edit != nil {
		edit(cfg)
	}
	return cfg
}

// port returns the port of a host:port address, as the command-line clients want it.
func mqPort(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// connections returns the number of connected MQTT clients as GET /load reports it.
func (b *mqBroker) connections(t testing.TB) int64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: testenv.Timeout}
	resp, err := client.Get("http://" + b.http + "/load")
	if err != nil {
		t.Fatalf("GET /load: %v", err)
	}
	defer resp.Body.Close()
	var load struct {
		Connections int64 `json:"connections"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&load); err != nil {
		t.Fatalf("GET /load: %v", err)
	}
	return load.Connections
}

// mqRecv waits for a value on ch.
func mqRecv[T any](t testing.TB, ch <-chan T, what string) (T, bool) {
	t.Helper()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-time.After(testenv.Timeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// mqProc is a running mosquitto_sub (or any client started with -d): its debug lines tell
// when it is connected and subscribed, its other output lines are the messages.
type mqProc struct {
	t         testing.TB
	name      string
	cmd       *exec.Cmd
	cancel    context.CancelFunc
	lines     chan string   // output lines that are not debug lines; closed at exit
	connacked chan struct{} // closed on "received CONNACK"
	subacked  chan struct{} // closed on "received SUBACK"
	done      chan struct{} // closed when the process has exited
	stderr    mqLogs

	mu         sync.Mutex
	transcript strings.Builder // every stdout line, for failure messages
	err        error           // of Wait
}

// mqSub starts mosquitto_sub with -d (debug lines mark CONNACK and SUBACK) and args. The
// caller passes -C and -W so that the process always ends by itself; it is killed at the
// end of the test at the latest. Its standard output is a pipe, which C's stdio buffers
// fully: stdbuf -oL (coreutils) makes it write every line as it is printed.
func mqSub(t testing.TB, args ...string) *mqProc {
	t.Helper()
	sub := mqTool(t, "mosquitto_sub")
	stdbuf := testenv.Command(t, "stdbuf", "coreutils")
	return mqSpawn(t, stdbuf, append([]string{"-oL", sub, "-d"}, args...)...)
}

func mqSpawn(t testing.TB, path string, args ...string) *mqProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testenv.Timeout)
	cmd := exec.CommandContext(ctx, path, args...)
	p := &mqProc{
		t: t, name: strings.Join(append([]string{path}, args...), " "), cmd: cmd, cancel: cancel,
		lines: make(chan string, 4096), connacked: make(chan struct{}), subacked: make(chan struct{}),
		done: make(chan struct{}),
	}
	cmd.Stderr = &p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("%s: %v", p.name, err)
	}
	go p.read(stdout)
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // no-op when it has exited
		<-p.done
		cancel()
		if t.Failed() {
			t.Logf("%s:\nstdout:\n%s\nstderr:\n%s", p.name, p.output(), p.stderr.String())
		}
	})
	return p
}

// read sorts the process's output until it exits, then waits for it.
func (p *mqProc) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	var conn, sub sync.Once
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.transcript.WriteString(mqShorten(line))
		p.transcript.WriteByte('\n')
		p.mu.Unlock()
		switch {
		case strings.HasPrefix(line, "Client ") && strings.Contains(line, " received CONNACK"):
			conn.Do(func() { close(p.connacked) })
		case strings.HasPrefix(line, "Client ") && strings.Contains(line, " received SUBACK"):
			sub.Do(func() { close(p.subacked) })
		case strings.HasPrefix(line, "Client "), strings.HasPrefix(line, "Subscribed (mid"):
		default:
			p.lines <- line
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	err := p.cmd.Wait()
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	close(p.lines)
	close(p.done)
}

func mqShorten(s string) string {
	if len(s) > 200 {
		return s[:200] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

func (p *mqProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.transcript.String()
}

// waitSubscribed waits until the broker has acknowledged the subscriptions.
func (p *mqProc) waitSubscribed() {
	p.t.Helper()
	select {
	case <-p.subacked:
	case <-p.done:
		p.t.Fatalf("%s exited before its SUBACK: %v\n%s%s", p.name, p.exitErr(), p.output(), p.stderr.String())
	case <-time.After(testenv.Timeout):
		p.t.Fatalf("%s: no SUBACK\n%s", p.name, p.output())
	}
}

// waitDebug waits until the process has printed a debug line containing what, such as
// "received UNSUBACK" or "received PINGRESP".
func (p *mqProc) waitDebug(what string) {
	p.t.Helper()
	testenv.WaitFor(p.t, fmt.Sprintf("%q from %s", what, p.name), func() bool {
		for _, line := range strings.Split(p.output(), "\n") {
			if strings.HasPrefix(line, "Client ") && strings.Contains(line, what) {
				return true
			}
		}
		return false
	})
}

// next returns the next message line.
func (p *mqProc) next() string {
	p.t.Helper()
	line, ok := mqRecv(p.t, p.lines, "a message at "+p.name)
	if !ok {
		p.t.Fatalf("%s exited (%v) before the message expected\n%s%s", p.name, p.exitErr(), p.output(), p.stderr.String())
	}
	return line
}

// expect checks that the next message lines are want, in order.
func (p *mqProc) expect(want ...string) {
	p.t.Helper()
	for i, w := range want {
		if got := p.next(); got != w {
			p.t.Fatalf("%s: message %d = %q, want %q", p.name, i, mqShorten(got), mqShorten(w))
		}
	}
}

// wait waits for the process to exit by itself and checks that it succeeded and printed
// no other message.
func (p *mqProc) wait() {
	p.t.Helper()
	mqRecv(p.t, p.done, p.name+" to exit")
	for line := range p.lines {
		p.t.Errorf("%s: unexpected message %q", p.name, mqShorten(line))
	}
	if err := p.exitErr(); err != nil {
		p.t.Fatalf("%s: %v\n%s", p.name, err, p.stderr.String())
	}
}

// kill ends the process with SIGKILL: the broker sees the connection drop without a
// DISCONNECT.
func (p *mqProc) kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("kill %s: %v", p.name, err)
	}
	mqRecv(p.t, p.done, p.name+" to die")
}

func (p *mqProc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// mqPub runs mosquitto_pub to completion and fails the test if it fails; stdin, if not
// nil, is its standard input.
func mqPub(t testing.TB, stdin []byte, args ...string) {
	t.Helper()
	mqExec(t, mqTool(t, "mosquitto_pub"), stdin, args...)
}

// mqExec runs a command to completion, fails the test if it fails, and returns its
// standard output.
func mqExec(t testing.TB, path string, stdin []byte, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", path, strings.Join(args, " "), err,
			mqShorten(stdout.String()), stderr.String())
	}
	return stdout.String()
}

// mqAtoi parses a decimal number printed by a client, failing the test if it is not one.
func mqAtoi(t testing.TB, what, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not a number", what, s)
	}
	return n
}

// mqConnectPacket returns a CONNECT with clean start, keep alive 0 (no timeout) and the
// given client identifier, in MQTT 3.1.1 or 5.0 (no properties).
func mqConnectPacket(v5 bool, id string) []byte {
	level := byte(4)
	if v5 {
		level = 5
	}
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', level, 0x02, 0, 0}
	if v5 {
		body = append(body, 0) // property length
	}
	body = append(body, byte(len(id)>>8), byte(len(id)))
	body = append(body, id...)
	return append(mqFixedHeader(0x10, len(body)), body...)
}

// mqFixedHeader returns a packet's first byte and its remaining length.
func mqFixedHeader(first byte, n int) []byte {
	b := []byte{first}
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

// mqWSRequest is the WebSocket upgrade request for MQTT at /mqtt.
const mqWSRequest = "GET /mqtt HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n"

// mqHandshake makes c an MQTT connection: the WebSocket upgrade if ws, then CONNECT and a
// successful CONNACK. The server sends nothing unasked, so every read here ends at the
// end of what is awaited and no byte is left in a buffer.
func mqHandshake(c net.Conn, ws, v5 bool, id string) error {
	if err := c.SetDeadline(time.Now().Add(testenv.Timeout)); err != nil {
		return err
	}
	if ws {
		if _, err := io.WriteString(c, mqWSRequest); err != nil {
			return err
		}
		var buf [512]byte
		n := 0
		for !bytes.Contains(buf[:n], []byte("\r\n\r\n")) {
			if n == len(buf) {
				return fmt.Errorf("upgrade response too long: %q", buf[:n])
			}
			k, err := c.Read(buf[n:])
			if err != nil {
				return fmt.Errorf("upgrade: %w after %q", err, buf[:n])
			}
			n += k
		}
		if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 101 ")) {
			return fmt.Errorf("upgrade: %q", buf[:n])
		}
	}
	connect := mqConnectPacket(v5, id)
	if ws {
		connect = mqWSFrame(connect)
	}
	if _, err := c.Write(connect); err != nil {
		return err
	}
	var connack []byte
	if ws {
		var h [2]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return fmt.Errorf("CONNACK frame: %w", err)
		}
		if h[0] != 0x82 || h[1] >= 126 {
			return fmt.Errorf("CONNACK frame header % x, want one binary frame under 126 bytes", h)
		}
		connack = make([]byte, h[1])
		if _, err := io.ReadFull(c, connack); err != nil {
			return fmt.Errorf("CONNACK frame: %w", err)
		}
	} else {
		var h [2]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return fmt.Errorf("CONNACK: %w", err)
		}
		if h[1] >= 128 {
			return fmt.Errorf("CONNACK header % x", h)
		}
		connack = append(h[:], make([]byte, h[1])...)
		if _, err := io.ReadFull(c, connack[2:]); err != nil {
			return fmt.Errorf("CONNACK: %w", err)
		}
	}
	if len(connack) < 4 || connack[0] != 0x20 || int(connack[1]) != len(connack)-2 || connack[3] != 0 {
		return fmt.Errorf("CONNACK % x, want a successful one", connack)
	}
	return c.SetDeadline(time.Time{})
}

// mqWSFrame wraps p in one masked binary WebSocket frame, as a client sends it.
func mqWSFrame(p []byte) []byte {
	mask := [4]byte{0x12, 0x34, 0x56, 0x78}
	f := []byte{0x82}
	switch n := len(p); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n <= 0xFFFF:
		f = append(f, 0x80|126, byte(n>>8), byte(n))
	default:
		f = append(f, 0x80|127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	f = append(f, mask[:]...)
	for i, b := range p {
		f = append(f, b^mask[i%4])
	}
	return f
}
