//go:build linux

package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestServeOpenFileLimit runs the broker under an open-file limit of 512 and opens more
// MQTT connections than that: the broker holds the limit less its reserve (256), refuses
// the rest at once, and keeps its HTTP endpoint answering. Without the cap, accept fails
// with EMFILE for clients and for /metrics alike, and the clients past the limit wait in
// the backlog for nothing.
func TestServeOpenFileLimit(t *testing.T) {
	prlimit := testenv.Command(t, "prlimit", "apt-get install -y util-linux")
	path := writeFile(t, "bifrost.yaml", "store:\n  dir: off\nlisteners:\n  - type: tcp\n    address: 127.0.0.1:0\nhttp:\n  address: 127.0.0.1:0\nlimits:\n  connect_rate: 0\nlog:\n  format: json\n")
	s := startCommand(t, exec.Command(prlimit, "--nofile=512:512", "--", binary.Path(t), "-c", path))
	mqtt := s.waitLog(t, "mqtt listening")["addr"].(string)
	web := s.waitLog(t, "http listening")["addr"].(string)

	const dials, held = 600, 512 - 256
	connect := []byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 0} // 3.1.1, clean, empty id
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	acked, refused := 0, 0
	for range dials {
		c, err := net.DialTimeout("tcp", mqtt, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write(connect); err != nil {
			refused++ // closed at open, before the write
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(testenv.Timeout))
		var ack [4]byte
		_, err = io.ReadFull(c, ack[:])
		switch {
		case err == nil && ack == [4]byte{0x20, 2, 0, 0}:
			acked++
		case err != nil && !isTimeout(err):
			refused++
		default:
			t.Fatalf("connection %d: %x, %v: neither a CONNACK nor a close", len(conns), ack, err)
		}
	}
	if acked != held || refused != dials-held {
		t.Fatalf("%d connections acknowledged and %d refused, want %d and %d", acked, refused, held, dials-held)
	}

	resp, err := http.Get("http://" + web + "/metrics")
	if err != nil {
		t.Fatalf("/metrics with the connections at the cap: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `bifrost_connects_refused_total{reason="open_files"} 344`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics has no %q", want)
	}
	resp, err = http.Get("http://" + web + "/load")
	if err != nil {
		t.Fatal(err)
	}
	var load struct {
		MaxConnections int `json:"max_connections"`
	}
	err = json.NewDecoder(resp.Body).Decode(&load)
	resp.Body.Close()
	if err != nil || load.MaxConnections != held {
		t.Errorf("/load max_connections = %d (%v), want %d", load.MaxConnections, err, held)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
