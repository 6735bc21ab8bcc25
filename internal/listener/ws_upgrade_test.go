package listener

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// upgradeRequest is a valid upgrade with RFC 6455's sample key, with headers changed by
// edit (a header set to "" is left out).
func upgradeRequest(line string, edit map[string]string) []byte {
	h := []string{
		"Host: broker.example",
		"Upgrade: websocket",
		"Connection: Upgrade",
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
		"Sec-WebSocket-Version: 13",
		"Sec-WebSocket-Protocol: mqtt",
	}
	var b strings.Builder
	b.WriteString(line + "\r\n")
	for _, kv := range h {
		name, _, _ := strings.Cut(kv, ":")
		if v, ok := edit[name]; ok {
			if v != "" {
				b.WriteString(name + ": " + v + "\r\n")
			}
			continue
		}
		b.WriteString(kv + "\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// TestAnswerUpgrade checks the answers to good and bad upgrade requests, each parsed back
// with net/http: the accept key of RFC 6455 section 1.3's example, the subprotocol
// preference, and the refusals' statuses.
func TestAnswerUpgrade(t *testing.T) {
	const get = "GET /mqtt HTTP/1.1"
	for _, tc := range []struct {
		name   string
		req    []byte
		status int
		proto  string
	}{
		{"valid", upgradeRequest(get, nil), 101, "mqtt"},
		{"query string", upgradeRequest("GET /mqtt?x=1 HTTP/1.1", nil), 101, "mqtt"},
		{"3.1 client", upgradeRequest(get, map[string]string{"Sec-WebSocket-Protocol": "mqttv3.1"}), 101, "mqttv3.1"},
		{"preference", upgradeRequest(get, map[string]string{"Sec-WebSocket-Protocol": "chat, mqttv3.1, mqtt"}), 101, "mqtt"},
		{"token lists", upgradeRequest(get, map[string]string{"Connection": "keep-alive, upgrade", "Upgrade": "WebSocket"}), 101, "mqtt"},
		{"lower-case names", []byte(get + "\r\nhost: b\r\nupgrade: websocket\r\nconnection: upgrade\r\n" +
			"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\nsec-websocket-protocol: mqtt\r\n\r\n"), 101, "mqtt"},
		{"no subprotocol", upgradeRequest(get, map[string]string{"Sec-WebSocket-Protocol": ""}), 400, ""},
		{"other subprotocol", upgradeRequest(get, map[string]string{"Sec-WebSocket-Protocol": "MQTT"}), 400, ""},
		{"other path", upgradeRequest("GET /other HTTP/1.1", nil), 404, ""},
		{"POST", upgradeRequest("POST /mqtt HTTP/1.1", nil), 405, ""},
		{"HTTP/1.0", upgradeRequest("GET /mqtt HTTP/1.0", nil), 400, ""},
		{"no Host", upgradeRequest(get, map[string]string{"Host": ""}), 400, ""},
		{"no Upgrade", upgradeRequest(get, map[string]string{"Upgrade": ""}), 400, ""},
		{"no Connection: Upgrade", upgradeRequest(get, map[string]string{"Connection": "keep-alive"}), 400, ""},
		{"version 8", upgradeRequest(get, map[string]string{"Sec-WebSocket-Version": "8"}), 426, ""},
		{"short key", upgradeRequest(get, map[string]string{"Sec-WebSocket-Key": "dGhlIHNhbXBsZQ=="}), 400, ""},
		{"malformed header", []byte(get + "\r\nno colon here\r\n\r\n"), 400, ""},
	} {
		resp, ok := answerUpgrade(nil, tc.req, "/mqtt")
		res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(resp)), nil)
		if err != nil {
			t.Fatalf("%s: answer %q does not parse: %v", tc.name, resp, err)
		}
		if res.StatusCode != tc.status || ok != (tc.status == 101) || res.Header.Get("Sec-WebSocket-Protocol") != tc.proto {
			t.Errorf("%s: %s (ok %v), subprotocol %q; want %d %q", tc.name, res.Status, ok, res.Header.Get("Sec-WebSocket-Protocol"), tc.status, tc.proto)
		}
		if tc.status == 101 {
			if got := res.Header.Get("Sec-WebSocket-Accept"); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
				t.Errorf("%s: accept %q", tc.name, got)
			}
		} else if !res.Close {
			t.Errorf("%s: a refusal without Connection: close", tc.name)
		}
		if tc.status == 426 && res.Header.Get("Sec-WebSocket-Version") != "13" {
			t.Errorf("%s: 426 without the version we speak", tc.name)
		}
	}
}

// FuzzAnswerUpgrade: any request head gets an answer that parses as HTTP, and 101 only
// with a subprotocol and an accept key.
func FuzzAnswerUpgrade(f *testing.F) {
	f.Add(upgradeRequest("GET /mqtt HTTP/1.1", nil))
	f.Add(upgradeRequest("GET /mqtt HTTP/1.1", map[string]string{"Sec-WebSocket-Version": "8"}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, head []byte) {
		resp, ok := answerUpgrade(nil, head, "/mqtt")
		res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(resp)), nil)
		if err != nil {
			t.Fatalf("answer %q does not parse: %v", resp, err)
		}
		if ok != (res.StatusCode == 101) {
			t.Fatalf("ok %v with status %d", ok, res.StatusCode)
		}
		if ok && (res.Header.Get("Sec-WebSocket-Protocol") == "" || len(res.Header.Get("Sec-WebSocket-Accept")) != 28) {
			t.Fatalf("101 without subprotocol or accept key: %q", resp)
		}
	})
}
