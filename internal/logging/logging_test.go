package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want slog.Level
		ok   bool
	}{
		{"", slog.LevelInfo, true},
		{"debug", slog.LevelDebug, true},
		{"info", slog.LevelInfo, true},
		{"WARN", slog.LevelWarn, true},
		{"error", slog.LevelError, true},
		{"verbose", slog.LevelInfo, false},
	} {
		t.Run("in="+tc.in, func(t *testing.T) {
			got, err := ParseLevel(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("ParseLevel(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestNewText(t *testing.T) {
	var buf bytes.Buffer
	log, level := New(conf.Log{Level: "warn"}, &buf)
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "level=WARN msg=shown k=1") {
		t.Fatalf("text output = %q", out)
	}

	// A reload lowers the level for the logger and everything derived from it.
	child := log.With("part", "x")
	level.Set(slog.LevelDebug)
	child.Debug("now shown")
	if out := buf.String(); !strings.Contains(out, "msg=\"now shown\" part=x") {
		t.Fatalf("after Set(debug) output = %q", out)
	}
}

func TestNewJSON(t *testing.T) {
	var buf bytes.Buffer
	log, _ := New(conf.Log{Format: "json"}, &buf)
	log.Debug("hidden")
	log.Info("hello", "n", 2)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %q: %v", buf.String(), err)
	}
	if rec["msg"] != "hello" || rec["level"] != "INFO" || rec["n"] != 2.0 {
		t.Fatalf("record = %v", rec)
	}
}
