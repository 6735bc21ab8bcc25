package conf

import (
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", "\n", "# only a comment\n", "---\n", "{}"} {
		t.Run(in, func(t *testing.T) {
			c, err := Parse([]byte(in), "bifrost.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c, Default()) {
				t.Fatalf("got\n%+v\nwant Default()", c)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	c, err := Load("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultEdge()
	want.Memory.Limit = 12 << 20
	want.Listeners = []Listener{
		{Name: "tcp@:1883", Type: "tcp", Address: ":1883"},
		{Name: "secure", Type: "wss", Address: ":8443", Path: "/mqtt",
			TLS: &TLS{CertFile: "/etc/bifrost/cert.pem", KeyFile: "/etc/bifrost/key.pem", MinVersion: "1.2"}},
	}
	want.SysInterval = ptr(Duration(0))
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", c, want)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/missing.yaml")
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "testdata/missing.yaml") {
		t.Fatalf("Load(missing) = %v; want a not-exist error naming the file", err)
	}
}

func TestLoadOrDefault(t *testing.T) {
	c, err := LoadOrDefault("")
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatalf(`LoadOrDefault("") = %+v, %v; want Default()`, c, err)
	}
	if c, err := LoadOrDefault("testdata/edge.yaml"); err != nil || c.Memory.Profile != "edge" {
		t.Fatalf("LoadOrDefault(edge.yaml) = %+v, %v", c, err)
	}
}

func TestParseValues(t *testing.T) {
	c, err := Parse([]byte(`
mqtt:
  max_qos: 0
  topic_alias_maximum: 0
  max_packet_size: 1 MiB
  connect_timeout: 2500ms
auth:
  allow_anonymous: false
  password_file: /etc/bifrost/passwd
http:
  address: "off"
listeners:
  - {type: tls, address: ":8883", tls: {cert_file: c, key_file: k, min_version: 1.3}}
`), "bifrost.yaml")
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case *c.MQTT.MaxQoS != 0, *c.MQTT.TopicAliasMaximum != 0, c.MQTT.MaxPacketSize != 1<<20,
		c.MQTT.ConnectTimeout != Duration(2500*time.Millisecond), *c.Auth.AllowAnonymous,
		c.HTTP.Address != "off", c.Listeners[0].TLS.MinVersion != "1.3", c.Listeners[0].Name != "tls@:8883":
		t.Fatalf("values not decoded as written: %+v", c)
	}
}

// TestParseErrors checks the text of each kind of problem: file, line, field, message.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"unknown key", "mqtt:\n  max_qos: 1\n  max_qso: 2\n",
			"bifrost.yaml:3: mqtt.max_qso: unknown key; expected one of max_keepalive, receive_maximum, " +
				"max_packet_size, topic_alias_maximum, max_qos, retain_available, session_expiry_max, connect_timeout"},
		{"unknown top-level key", "log:\n  level: info\nlogging: {}\n",
			"bifrost.yaml:3: logging: unknown key; expected one of listeners, http, store, memory, auth, log, mqtt, queue, limits, sys_interval, cluster"},
		{"unknown listener key", "listeners:\n  - type: tcp\n    address: :1\n  - type: tcp\n    address: :2\n    port: 2\n",
			"bifrost.yaml:6: listeners[1].port: unknown key; expected one of name, type, address, path, tls"},
		{"unknown tls key", "listeners:\n  - type: tls\n    address: :1\n    tls: {cert: c, cert_file: c, key_file: k}\n",
			"bifrost.yaml:4: listeners[0].tls.cert: unknown key; expected one of cert_file, key_file, client_ca_file, min_version, use_identity_as_username"},
		{"listener type", "listeners:\n  - type: tcp\n    address: :1883\n  - name: b\n    type: udp\n    address: :1884\n",
			`bifrost.yaml:5: listeners[1].type: "udp" is not one of tcp, tls, ws, wss`},
		{"missing tls block at its listener", "listeners:\n  - type: tcp\n    address: :1\n  - type: tls\n    address: :2\n",
			"bifrost.yaml:4: listeners[1].tls: required for a tls listener"},
		{"not an integer", "mqtt:\n  max_qos: two\n", `bifrost.yaml:2: mqtt.max_qos: expected a whole number, got "two"`},
		{"not a bool", "auth:\n  allow_anonymous: maybe\n", `bifrost.yaml:2: auth.allow_anonymous: expected true or false, got "maybe"`},
		{"not a list", "listeners:\n  type: tcp\n", "bifrost.yaml:2: listeners: expected a list, got a mapping"},
		{"not a mapping", "mqtt: fast\n", `bifrost.yaml:1: mqtt: expected a mapping of keys, got "fast"`},
		{"not a string", "log:\n  level: [info]\n", `bifrost.yaml:2: log.level: expected a string, got a list`},
		{"file not a mapping", "hello\n", `bifrost.yaml:1: expected a mapping of keys, got "hello"`},
		{"bad duration", "mqtt:\n  connect_timeout: 10\n",
			`bifrost.yaml:2: mqtt.connect_timeout: "10" is not a duration (write it like 10s, 250ms or 1m30s)`},
		{"bad size", "store:\n  cache_size: 64mb\n", `bifrost.yaml:2: store.cache_size: "64mb": write a size as bytes`},
		{"bad size in flow", "store: {dir: d, cache_size: lots}\n", `bifrost.yaml:1: store.cache_size: "lots": write a size`},
		{"auto where not allowed", "queue:\n  offline_bytes: auto\n",
			`bifrost.yaml:2: queue.offline_bytes: "auto" is only allowed for memory.limit`},
		{"negative size", "memory:\n  limit: -1\n", `bifrost.yaml:2: memory.limit: "-1": a size must not be negative`},
		{"duplicate key", "log:\n  level: info\n  level: debug\n", "bifrost.yaml:3: log.level: duplicate key; first at line 2"},
		{"unterminated quote", "log:\n  level: info\n  format: \"text\n", "bifrost.yaml:3: found unexpected end of stream"},
		{"unclosed flow", "log: {level: info\n", "bifrost.yaml:1: did not find expected ',' or '}'"},
		{"tab", "mqtt:\n\tmax_qos: 1\n", "bifrost.yaml:2: found character that cannot start any token"},
		{"two documents", "log: {level: info}\n---\nlog: {level: debug}\n",
			"bifrost.yaml:2: a second YAML document; the file must hold exactly one"},
		{"default listener clash", "http:\n  address: 127.0.0.1:1883\n",
			`bifrost.yaml:2: http.address: "127.0.0.1:1883" is also used by listeners[0]`},
		{"duration given a list", "mqtt:\n  connect_timeout:\n    - 1s\n",
			"bifrost.yaml:3: mqtt.connect_timeout: expected a duration such as 10s or 250ms, got a list"},
		{"long value cut by yaml", "mqtt:\n  max_keepalive: forty-five\n",
			`bifrost.yaml:2: mqtt.max_keepalive: expected a whole number, got "forty-five"`},
		{"nested flow mapping", "mqtt: {max_qos: {level: 2}}\n",
			"bifrost.yaml:1: mqtt.max_qos: expected a whole number, got a mapping"},
		{"edge defaults still validated", "memory:\n  profile: edge\nmqtt:\n  receive_maximum: 70000\n",
			"bifrost.yaml:4: mqtt.receive_maximum: 70000 is out of range 1..65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in), "bifrost.yaml")
			if c != nil {
				t.Errorf("Parse returned a config with an error")
			}
			var errs *Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse() = %v; want *Errors", err)
			}
			if len(errs.List) != 1 {
				t.Fatalf("want one problem, got:\n%v", err)
			}
			if got := err.Error(); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestParseAllAtOnce checks that decode and validation problems come back together, in
// file order, and that a value which failed to decode is not also reported as invalid.
func TestParseAllAtOnce(t *testing.T) {
	in := `listeners:
  - name: a
    type: tcp
    address: 127.0.0.1:1883
  - name: a
    type: udp
    address: 127.0.0.1:1883
store:
  sync: sometimes
  sync_interval: soon
mqtt:
  max_qos: 7
  receive_maximum: lots
  colour: blue
log:
  level: loud
`
	_, err := Parse([]byte(in), "bifrost.yaml")
	want := strings.Join([]string{
		`bifrost.yaml:5: listeners[1].name: "a" is also the name of listeners[0]`,
		`bifrost.yaml:6: listeners[1].type: "udp" is not one of tcp, tls, ws, wss`,
		`bifrost.yaml:7: listeners[1].address: "127.0.0.1:1883" is also used by listeners[0]`,
		`bifrost.yaml:9: store.sync: "sometimes" is not one of always, interval, none`,
		`bifrost.yaml:10: store.sync_interval: "soon" is not a duration (write it like 10s, 250ms or 1m30s)`,
		`bifrost.yaml:12: mqtt.max_qos: 7 is out of range 0..2`,
		`bifrost.yaml:13: mqtt.receive_maximum: expected a whole number, got "lots"`,
		`bifrost.yaml:14: mqtt.colour: unknown key; expected one of max_keepalive, receive_maximum, max_packet_size, ` +
			`topic_alias_maximum, max_qos, retain_available, session_expiry_max, connect_timeout`,
		`bifrost.yaml:16: log.level: "loud" is not one of debug, info, warn, error`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\n\nwant\n%s", err, want)
	}
	var errs *Errors
	if errors.As(err, &errs); errs.List[0] != (Error{File: "bifrost.yaml", Line: 5, Field: "listeners[1].name", Msg: `"a" is also the name of listeners[0]`}) {
		t.Fatalf("first problem = %+v", errs.List[0])
	}
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "f.yaml", Line: 7, Field: "a.b", Msg: "bad"}, "f.yaml:7: a.b: bad"},
		{Error{File: "f.yaml", Field: "a.b", Msg: "bad"}, "f.yaml: a.b: bad"},
		{Error{File: "f.yaml", Line: 2, Msg: "bad"}, "f.yaml:2: bad"},
		{Error{Line: 2, Field: "a", Msg: "bad"}, "line 2: a: bad"},
		{Error{Field: "a", Msg: "bad"}, "a: bad"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.e.Error(); got != tc.want {
				t.Fatalf("got %q", got)
			}
		})
	}
}

// TestParseFlowStyle checks that errors on one line of flow style each find their field.
func TestParseFlowStyle(t *testing.T) {
	_, err := Parse([]byte("mqtt: {max_qos: two, max_keepalive: three, connect_timeout: soon}\n"), "f.yaml")
	want := strings.Join([]string{
		`f.yaml:1: mqtt.max_qos: expected a whole number, got "two"`,
		`f.yaml:1: mqtt.max_keepalive: expected a whole number, got "three"`,
		`f.yaml:1: mqtt.connect_timeout: "soon" is not a duration (write it like 10s, 250ms or 1m30s)`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
}
