package conf

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestDurationUnmarshalYAML(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"v: 10s", 10 * time.Second, ""},
		{"v: 250ms", 250 * time.Millisecond, ""},
		{"v: 1m30s", 90 * time.Second, ""},
		{`v: "2h"`, 2 * time.Hour, ""},
		{"v: 0", 0, ""},
		{"v: 0s", 0, ""},
		{"v: -1s", -time.Second, ""}, // decodes; Validate decides where negatives are wrong
		{"v: 10", 0, `line 1: "10" is not a duration`},
		{"v: 1.5", 0, `"1.5" is not a duration`},
		{"v: ten seconds", 0, `"ten seconds" is not a duration`},
		{"v: [1s]", 0, "expected a duration such as 10s or 250ms, got a list"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var v struct{ V Duration }
			err := yaml.Unmarshal([]byte(tc.in), &v)
			checkErr(t, err, tc.err)
			if tc.err == "" && time.Duration(v.V) != tc.want {
				t.Fatalf("got %v, want %v", v.V, tc.want)
			}
		})
	}
}

func TestDurationYAMLRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{0, 250 * time.Millisecond, 10 * time.Second, 90 * time.Second} {
		t.Run(d.String(), func(t *testing.T) {
			out, err := yaml.Marshal(Duration(d))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(out)); got != d.String() {
				t.Fatalf("marshal = %q, want %q", got, d.String())
			}
			var back Duration
			if err := yaml.Unmarshal(out, &back); err != nil || time.Duration(back) != d {
				t.Fatalf("unmarshal %q = %v, %v", out, back, err)
			}
		})
	}
}
