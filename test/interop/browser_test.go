package interop

import (
	_ "embed"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

//go:embed testdata/browser.html
var browserPage []byte

// TestBrowserWebSocket is MQTT over WebSocket from a real browser: headless Chromium
// (Debian's chromium-headless-shell, which .ci/run installs) loads a page whose script
// speaks MQTT 3.1.1 through the browser's own WebSocket, with the handshake and framing a
// browser really sends (its extension offers, its masking, its close). The script
// subscribes, publishes at QoS 1 to itself and reports what came back; a TCP client
// subscribed to the same topic must get the browser's message too.
func TestBrowserWebSocket(t *testing.T) {
	browser := findBrowser(t)

	e := start(t, mode{conf.ListenerWS, packet.V311}, nil)
	watcher := e.rawVersion(t, packet.V311)
	watcher.session("watcher", false, nil)
	watcher.subscribe(1, 1, 0, "browser/t")

	results := make(chan string, 1)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write(browserPage)
		case "/result":
			b, _ := io.ReadAll(r.Body)
			select {
			case results <- string(b):
			default:
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer page.Close()

	target := page.URL + "/?ws=" + url.QueryEscape("ws://"+e.ws+"/mqtt")
	cmd := exec.Command(browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), target)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	// Chromium starts helper processes of its own: a process group of its own lets the
	// test end them all, and WaitDelay keeps Wait from hanging on a pipe they hold.
	inGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		killGroup(cmd) // it serves the page until killed
		_ = cmd.Wait()
	}()

	select {
	case got := <-results:
		if got != "ok browser/t from the browser" {
			t.Fatalf("the browser reports %q", got)
		}
	case <-time.After(time.Minute): // a safety net: the browser starts in a second or two
		t.Fatalf("no report from the browser; its output:\n%s", out.String())
	}
	watcher.expectPublish("browser/t", "from the browser")
}
