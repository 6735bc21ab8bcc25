package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/coder/websocket"
)

// A cdpPage is a page of headless Chromium driven over the DevTools protocol: the test
// reads what the page shows (Runtime.evaluate) and takes screenshots, while the page runs
// in real time (a dashboard's stream needs that; --dump-dom and --screenshot do not
// wait for it).
type cdpPage struct {
	t    *testing.T
	ws   *websocket.Conn
	mu   sync.Mutex
	next int
}

// findBrowser returns headless Chromium's path (Debian's chromium-headless-shell, which
// .ci/run installs, or a full chromium).
func findBrowser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium-headless-shell", "chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Need(t, false, "chromium-headless-shell (apt-get install -y chromium-headless-shell)")
	return ""
}

// openCDP starts the browser, with flags besides its own, on url and returns its page.
func openCDP(t *testing.T, url string, flags ...string) *cdpPage {
	t.Helper()
	browser := findBrowser(t)
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--window-size=1280,860", "--remote-debugging-port=0", "--remote-allow-origins=*",
		"--user-data-dir=" + t.TempDir()}, flags...)
	cmd := exec.Command(browser, append(args, "about:blank")...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	inGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killGroup(cmd)
		_ = cmd.Wait()
	})
	// "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
	listening := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`DevTools listening on ws://([^/]+)/`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				listening <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var host string
	select {
	case host = <-listening:
	case <-time.After(testenv.Timeout):
		t.Fatal("the browser did not start its DevTools endpoint")
	}
	req, _ := http.NewRequest(http.MethodPut, "http://"+host+"/json/new?"+url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var target struct {
		WS string `json:"webSocketDebuggerUrl"`
	}
	err = json.NewDecoder(resp.Body).Decode(&target)
	resp.Body.Close()
	if err != nil || target.WS == "" {
		t.Fatalf("no page target: %v", err)
	}
	ws, _, err := websocket.Dial(t.Context(), target.WS, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(64 << 20) // screenshots
	t.Cleanup(func() { _ = ws.CloseNow() })
	return &cdpPage{t: t, ws: ws}
}

// call sends a DevTools command and returns its result.
func (p *cdpPage) call(method string, params any) json.RawMessage {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	id := p.next
	msg, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	ctx, cancel := context.WithTimeout(p.t.Context(), testenv.Timeout)
	defer cancel()
	if err := p.ws.Write(ctx, websocket.MessageText, msg); err != nil {
		p.t.Fatalf("%s: %v", method, err)
	}
	for {
		_, data, err := p.ws.Read(ctx)
		if err != nil {
			p.t.Fatalf("%s: %v", method, err)
		}
		var reply struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct{ Message string }
		}
		if json.Unmarshal(data, &reply) != nil || reply.ID != id {
			continue // an event, or another answer
		}
		if reply.Error != nil {
			p.t.Fatalf("%s: %s", method, reply.Error.Message)
		}
		return reply.Result
	}
}

// text evaluates expr in the page and returns its value as a string.
func (p *cdpPage) text(expr string) string {
	p.t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	_ = json.Unmarshal(p.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}), &r)
	if r.Result.Value == nil {
		return ""
	}
	return strings.TrimSpace(fmt.Sprint(r.Result.Value))
}

// await evaluates expr, a promise, in the page and returns what it resolves to as a
// string.
func (p *cdpPage) await(expr string) string {
	p.t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	_ = json.Unmarshal(p.call("Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}), &r)
	return strings.TrimSpace(fmt.Sprint(r.Result.Value))
}

// screenshot returns a PNG of the page.
func (p *cdpPage) screenshot() []byte {
	p.t.Helper()
	var r struct {
		Data []byte `json:"data"` // base64 in JSON: []byte decodes it
	}
	_ = json.Unmarshal(p.call("Page.captureScreenshot", map[string]any{"format": "png"}), &r)
	return r.Data
}
