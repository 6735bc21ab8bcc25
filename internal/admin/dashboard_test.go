package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

type fakeSource struct{}

func (fakeSource) ClientsByProtocol() map[string]int64 { return map[string]int64{"5.0": 3} }
func (fakeSource) QueueScan(cursor uint32, n int, top []broker.QueueInfo) (uint32, []broker.QueueInfo) {
	return 0, []broker.QueueInfo{{ClientID: "slow", Queued: 7}}
}

// TestStream: the stream's events are JSON with the dashboard's figures, the page is
// served, and past maxStreams open streams another is refused (503) rather than gathered.
func TestStream(t *testing.T) {
	mux := http.NewServeMux()
	Register(mux, Options{Broker: &fakeBroker{}, Access: &auth.AdminAccess{}, Log: slog.New(slog.DiscardHandler),
		Metrics: metrics.New(nil), Source: fakeSource{}})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/dashboard/")
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/dashboard/: %v %v", resp, err)
	}
	resp.Body.Close()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var open []*http.Response
	for i := range maxStreams {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/stream", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream %d: %v %v", i, resp, err)
		}
		open = append(open, resp)
	}
	line, err := bufio.NewReader(open[0].Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q %v", line, err)
	}
	var s struct {
		Protocols map[string]int64     `json:"connections_by_protocol"`
		Top       []broker.QueueInfo   `json:"top_queues"`
		Memory    struct{ RSS uint64 } `json:"memory"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &s); err != nil ||
		s.Protocols["5.0"] != 3 || len(s.Top) != 1 || s.Top[0].ClientID != "slow" {
		t.Fatalf("event %q: %+v %v", line, s, err)
	}
	if resp, err := http.Get(srv.URL + "/api/v1/stream"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a stream past the bound: %v %v; want 503", resp, err)
	} else {
		resp.Body.Close()
	}
	cancel()
	for _, r := range open {
		r.Body.Close()
	}
	testenv.WaitFor(t, "the streams closed", func() bool { return streams.Load() == 0 })
}
