package broker

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/logging"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// logBuffer collects JSON log lines, safe for the auth pool's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// records returns the lines logged with message msg, decoded.
func (l *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(l.buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestRefusalLog: every refused CONNECT is logged with why, its code, the client id and
// user name it carried and the remote address, and a flood of them is logged within the
// refusal log's rate.
func TestRefusalLog(t *testing.T) {
	g := &gateAuth{gate: make(chan struct{}), seen: make(chan *auth.Request, 16)}
	close(g.gate)
	b := authBroker(t, Security{Authenticator: g})
	logs := &logBuffer{}
	b.log = slog.New(slog.NewJSONHandler(logs, nil))
	refuse := func(v packet.Version, c *packet.Connect) {
		t.Helper()
		conn := &authTestConn{}
		b.OnOpen(conn)
		b.OnData(conn, c.AppendTo(nil, v))
		conn.waitPackets(t, v, 1)
	}
	refuse(packet.V5, &packet.Connect{Version: packet.V5, CleanStart: true, ClientID: []byte("w1"), UsernameFlag: true,
		Username: []byte("alice"), PasswordFlag: true, Password: []byte("secret"), WillFlag: true, WillTopic: []byte("$SYS/x")})
	refuse(packet.V311, &packet.Connect{Version: packet.V311, ClientID: nil, UsernameFlag: true, Username: []byte("bob")})
	refuse(packet.V5, &packet.Connect{Version: packet.V5, CleanStart: true, ClientID: []byte("g1"), UsernameFlag: true,
		Username: []byte("carol"), PasswordFlag: true, Password: []byte("wrong")})
	want := []struct{ reason, code, client, user string }{
		{"will topic reserved to the broker", "not authorized", "w1", "alice"},
		{"empty client id", "client identifier not valid", "", "bob"},
		{auth.ErrBadCredentials.Error(), "bad user name or password", "g1", "carol"},
	}
	got := logs.records(t, "connect refused")
	if len(got) != len(want) {
		t.Fatalf("%d refusals logged, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		r := got[i]
		if r["level"] != "INFO" || r["reason"] != w.reason || r["code"] != w.code || r["client"] != w.client ||
			r["user"] != w.user || r["remote"] != "127.0.0.1:2" {
			t.Errorf("refusal %d logged as %v, want %+v from 127.0.0.1:2", i, r, w)
		}
	}

	b.auth.refusals = logging.NewLimiter(3, time.Hour)
	for range 20 {
		refuse(packet.V311, &packet.Connect{Version: packet.V311, ClientID: nil})
	}
	if n := len(logs.records(t, "connect refused")) - len(want); n != 3 {
		t.Fatalf("a flood of 20 refusals logged %d lines, want the limiter's 3", n)
	}
}
