package bifrost_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/metrics.golden from the broker's /metrics")

// TestMetricsFamilies: the broker's own families on /metrics keep their names, help,
// types and label sets (testdata/metrics.golden, one line per HELP, TYPE and series,
// values left out): what dashboards and alerts are written against, whatever library
// writes the exposition. Regenerate with -rewrite after a deliberate change.
func TestMetricsFamilies(t *testing.T) {
	b, _ := start(t, testConfig(t))
	if err := b.Publish("kept/topic", []byte("retained"), 1, true); err != nil {
		t.Fatal(err)
	}
	mustConnect(t, b.Addrs()[0].String(), "families") // the listener's connection series
	_, body, err := get(t, b.HTTPAddr(), "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for line := range strings.Lines(body) {
		switch {
		case strings.HasPrefix(line, "# HELP bifrost_"), strings.HasPrefix(line, "# TYPE bifrost_"):
			got.WriteString(line)
		case strings.HasPrefix(line, "bifrost_"):
			series := strings.TrimSpace(line)
			series = series[:strings.LastIndexByte(series, ' ')] // the value
			got.WriteString(series + "\n")
		}
	}
	golden := filepath.Join("testdata", "metrics.golden")
	if *rewrite {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("/metrics families differ from %s (-rewrite to accept):\ngot:\n%s", golden, got.String())
	}
}
