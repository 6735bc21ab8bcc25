package listener

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"strconv"
)

// The opening handshake of RFC 6455 section 4.2, on both engines: the client's GET is
// read whole (at most wsMaxRequest bytes), checked, and answered with 101 or an HTTP
// error, without net/http: a request line and five headers are all that matter, and
// parsing them in place costs an idle connection nothing afterwards (an HTTP server's
// parser leaves a request, header maps and a URL per connection as garbage, which for a
// burst of connections ends up as fragmentation under the records that stay).

// wsMaxRequest bounds the request head; a longer one is answered 431 and closed.
const wsMaxRequest = 8 << 10

// wsGUID is the key suffix of RFC 6455 section 1.3.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// wsRequestEnd returns the length of the request head at the start of data (through the
// blank line), or -1 if data does not hold it yet.
func wsRequestEnd(data []byte) int {
	i := bytes.Index(data, []byte("\r\n\r\n"))
	if i < 0 {
		return -1
	}
	return i + 4
}

// answerUpgrade checks the request head (through its blank line) against a ws listener
// on path and appends the answer to dst: 101 with the accept key and the chosen MQTT
// subprotocol (spec [MQTT-6.0.0-3], [MQTT-6.0.0-4]), or an error status with
// "Connection: close". ok is true for 101.
func answerUpgrade(dst, head []byte, path string) (resp []byte, ok bool) {
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	method, line, _ := bytes.Cut(line, []byte(" "))
	target, version, _ := bytes.Cut(line, []byte(" "))
	if !bytes.HasPrefix(version, []byte("HTTP/1.")) || len(version) != 8 || version[7] < '1' || version[7] > '9' {
		return httpError(dst, "400 Bad Request", "not an HTTP/1.1 request"), false
	}
	if string(method) != "GET" {
		return httpError(dst, "405 Method Not Allowed", "a WebSocket upgrade is a GET"), false
	}
	if p, _, _ := bytes.Cut(target, []byte("?")); string(p) != path {
		return httpError(dst, "404 Not Found", "no WebSocket endpoint here"), false
	}
	var host, upgrade, connUpgrade, v13 bool
	var key []byte
	proto := -1 // index into wsSubprotocols of the best one offered
	for len(rest) > 0 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		if len(h) == 0 {
			break
		}
		name, value, found := bytes.Cut(h, []byte(":"))
		if !found {
			return httpError(dst, "400 Bad Request", "malformed header"), false
		}
		value = bytes.Trim(value, " \t")
		switch {
		case bytes.EqualFold(name, []byte("Host")):
			host = true
		case bytes.EqualFold(name, []byte("Upgrade")):
			upgrade = upgrade || hasToken(value, "websocket")
		case bytes.EqualFold(name, []byte("Connection")):
			connUpgrade = connUpgrade || hasToken(value, "upgrade")
		case bytes.EqualFold(name, []byte("Sec-WebSocket-Key")):
			key = value
		case bytes.EqualFold(name, []byte("Sec-WebSocket-Version")):
			v13 = string(value) == "13"
		case bytes.EqualFold(name, []byte("Sec-WebSocket-Protocol")):
			for i, p := range wsSubprotocols {
				if (proto < 0 || i < proto) && hasExactToken(value, p) {
					proto = i
				}
			}
		}
	}
	switch {
	case !host || !upgrade || !connUpgrade:
		return httpError(dst, "400 Bad Request", "not a WebSocket upgrade"), false
	case !v13:
		dst = append(dst, "HTTP/1.1 426 Upgrade Required\r\nSec-WebSocket-Version: 13\r\n"...)
		return httpErrorTail(dst, "WebSocket version 13 is required"), false
	case !validKey(key):
		return httpError(dst, "400 Bad Request", "bad Sec-WebSocket-Key"), false
	case proto < 0:
		return httpError(dst, "400 Bad Request", "the WebSocket subprotocol mqtt is required"), false
	}
	h := sha1.New()
	h.Write(key)
	h.Write([]byte(wsGUID))
	var sum [sha1.Size]byte
	var accept [28]byte
	base64.StdEncoding.Encode(accept[:], h.Sum(sum[:0]))
	dst = append(dst, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	dst = append(dst, accept[:]...)
	dst = append(dst, "\r\nSec-WebSocket-Protocol: "...)
	dst = append(dst, wsSubprotocols[proto]...)
	return append(dst, "\r\n\r\n"...), true
}

// validKey reports whether key is the base64 of 16 bytes (RFC 6455 section 4.1).
func validKey(key []byte) bool {
	var raw [18]byte
	if len(key) != 24 {
		return false
	}
	n, err := base64.StdEncoding.Decode(raw[:], key)
	return err == nil && n == 16
}

// httpError appends an error response with a one-line body, after which the connection
// is closed.
func httpError(dst []byte, status, msg string) []byte {
	dst = append(dst, "HTTP/1.1 "...)
	dst = append(dst, status...)
	dst = append(dst, "\r\n"...)
	return httpErrorTail(dst, msg)
}

func httpErrorTail(dst []byte, msg string) []byte {
	dst = append(dst, "Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(msg)+1), 10)
	dst = append(dst, "\r\n\r\n"...)
	dst = append(dst, msg...)
	return append(dst, '\n')
}

// hasToken reports whether the comma-separated list holds tok, compared without case
// (Upgrade and Connection tokens are case-insensitive, RFC 9110).
func hasToken(list []byte, tok string) bool {
	for len(list) > 0 {
		var t []byte
		t, list, _ = bytes.Cut(list, []byte(","))
		if bytes.EqualFold(bytes.Trim(t, " \t"), []byte(tok)) {
			return true
		}
	}
	return false
}

// hasExactToken is hasToken with case: subprotocol names are compared as they are
// (RFC 6455 section 4.1).
func hasExactToken(list []byte, tok string) bool {
	for len(list) > 0 {
		var t []byte
		t, list, _ = bytes.Cut(list, []byte(","))
		if string(bytes.Trim(t, " \t")) == tok {
			return true
		}
	}
	return false
}
