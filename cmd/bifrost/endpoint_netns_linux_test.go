//go:build linux

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestEndpointOffLoopback runs the broker in a network namespace of its own with
// http.address on that namespace's veth address, so the endpoint is really off loopback,
// and calls it from the test's namespace through the other end of the veth.
//
// With a token file and http.metrics: admin, pprof's command line and heap profile and
// /metrics refuse a request without the token (401) and serve one with it, whatever its
// Host; /healthz answers without. Without credentials pprof and the admin API are off
// (404), and /metrics is open, to a Host that names the address (421 to another name),
// which the log says once at start.
func TestEndpointOffLoopback(t *testing.T) {
	ns, addr := offLoopback(t)
	tokens := writeFile(t, "tokens", "ops 0123456789abcdef0123\n")
	const token = "Bearer 0123456789abcdef0123"
	config := func(http string) string {
		return "store:\n  dir: \"off\"\nlisteners:\n  - type: tcp\n    address: 127.0.0.1:0\nlog:\n  format: json\nhttp:\n  address: " +
			net.JoinHostPort(addr, "0") + "\n" + http
	}
	get := func(web, path, host, auth string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+web+path, nil)
		if host != "" {
			req.Host = host
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: testenv.Timeout}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	t.Run("credentials", func(t *testing.T) {
		s := startCommand(t, exec.Command("ip", "netns", "exec", ns, binary.Path(t), "-c",
			writeFile(t, "bifrost.yaml", config("  metrics: admin\n  admin:\n    token_file: "+tokens+"\n"))))
		web, _ := untilLog(t, s, "http listening")
		for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/heap", "/metrics", "/load"} {
			if code, body := get(web, path, "", ""); code != http.StatusUnauthorized {
				t.Errorf("GET %s without the token: %d %.100q; want 401", path, code, body)
			}
		}
		if code, body := get(web, "/debug/pprof/cmdline", "", token); code != http.StatusOK || !strings.Contains(body, "bifrost.yaml") {
			t.Errorf("GET /debug/pprof/cmdline with the token: %d %.100q; want 200 and the command line", code, body)
		}
		if code, body := get(web, "/debug/pprof/heap", "", token); code != http.StatusOK || len(body) == 0 {
			t.Errorf("GET /debug/pprof/heap with the token: %d, %d bytes; want 200 and a profile", code, len(body))
		}
		if code, body := get(web, "/metrics", "metrics.attacker.test", token); code != http.StatusOK || !strings.Contains(body, "\nbifrost_bytes_received_total ") {
			t.Errorf("GET /metrics with the token, Host another name: %d %.100q; want 200 and the metrics", code, body)
		}
		if code, _ := get(web, "/healthz", "", ""); code != http.StatusOK {
			t.Errorf("GET /healthz: %d; want 200", code)
		}
	})

	t.Run("none", func(t *testing.T) {
		s := startCommand(t, exec.Command("ip", "netns", "exec", ns, binary.Path(t), "-c", writeFile(t, "bifrost.yaml", config(""))))
		web, seen := untilLog(t, s, "http listening")
		for _, msg := range []string{"pprof off", "metrics open off loopback"} {
			if !strings.Contains(seen, "\n"+msg+"\n") {
				t.Errorf("no %q in the log before the endpoint listens:%s", msg, seen)
			}
		}
		for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/heap", "/api/v1/clients"} {
			if code, body := get(web, path, "", ""); code != http.StatusNotFound {
				t.Errorf("GET %s: %d %.100q; want 404 (off)", path, code, body)
			}
		}
		if code, body := get(web, "/metrics", "", ""); code != http.StatusOK || !strings.Contains(body, "\nbifrost_bytes_received_total ") {
			t.Errorf("GET /metrics: %d %.100q; want 200 and the metrics", code, body)
		}
		if code, body := get(web, "/metrics", "rebind.attacker.test:"+port(web), ""); code != http.StatusMisdirectedRequest {
			t.Errorf("GET /metrics, Host another name: %d %.100q; want 421", code, body)
		}
	})
}

// untilLog reads the server's log up to the first record with message msg and returns
// its addr, and the messages before it, one a line.
func untilLog(t *testing.T, s *server, msg string) (addr, seen string) {
	t.Helper()
	for {
		rec, ok := <-s.logs
		if !ok {
			t.Fatalf("server exited before logging %q:%s", msg, seen)
		}
		if rec["msg"] == msg {
			a, _ := rec["addr"].(string)
			return a, seen + "\n"
		}
		seen += fmt.Sprintf("\n%v", rec["msg"])
	}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// offLoopback makes a network namespace joined to the test's by a veth pair on a /30 of
// 10.215.0.0/16 picked by the test's pid, and returns its name and its address (this side
// has the one before). The namespace is bfht<pid>; deleting it deletes the veth, and
// the namespaces of runs whose process is gone are deleted first. A machine where the
// test cannot make namespaces (not root) skips it; CI fails it.
func offLoopback(t *testing.T) (ns, addr string) {
	t.Helper()
	testenv.Command(t, "ip", "apt-get install -y iproute2")
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if m := staleNS.FindStringSubmatch(e.Name()); m != nil {
			if pid, _ := strconv.Atoi(m[1]); pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
				_ = exec.Command("ip", "netns", "del", e.Name()).Run()
			}
		}
	}
	pid := os.Getpid()
	ns, veth := fmt.Sprintf("bfht%d", pid), fmt.Sprintf("bfht%dv", pid)
	out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput()
	testenv.Need(t, err == nil, fmt.Sprintf("the right to make network namespaces (root, CAP_NET_ADMIN; ip netns add: %v: %s)", err, strings.TrimSpace(string(out))))
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v %s", ns, err, out)
		}
	})
	subnet, base := fmt.Sprintf("10.215.%d.", pid>>6&255), pid&63<<2
	here, there := subnet+strconv.Itoa(base+1), subnet+strconv.Itoa(base+2)
	for _, args := range [][]string{
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"addr", "add", here + "/30", "dev", veth},
		{"link", "set", veth, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", there + "/30", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return ns, there
}

var staleNS = regexp.MustCompile(`^bfht(\d+)$`)
