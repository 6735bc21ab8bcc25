package conf

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestParseByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
		err  string // substring of the error; "" for none
	}{
		{"0", 0, ""},
		{"1024", 1024, ""},
		{"1B", 1, ""},
		{"1KB", 1000, ""},
		{"1MB", 1000000, ""},
		{"2GB", 2000000000, ""},
		{"1KiB", 1024, ""},
		{"512MiB", 512 << 20, ""},
		{"1GiB", 1 << 30, ""},
		{"64 MiB", 64 << 20, ""},
		{" 8MiB ", 8 << 20, ""},
		{"auto", ByteSizeAuto, ""},
		{"", 0, "write a size"},
		{"MiB", 0, "write a size"},
		{"1mib", 0, "write a size"},
		{"1Mb", 0, "write a size"},
		{"1K", 0, "write a size"},
		{"1TB", 0, "write a size"},
		{"1.5GiB", 0, "write a size"},
		{"1  MiB", 0, "write a size"},
		{"-1", 0, "negative"},
		{"-5MiB", 0, "negative"},
		{"0x10", 0, "write a size"},
		{"Auto", 0, "write a size"},
		{"99999999999999999999", 0, "too large"},
		{"9000000000GiB", 0, "too large"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseByteSize(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseByteSize(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestByteSizeString(t *testing.T) {
	for _, tc := range []struct {
		in   ByteSize
		want string
	}{
		{0, "0"},
		{1, "1B"},
		{1500, "1500B"},
		{1000, "1KB"},
		{1024, "1KiB"},
		{512 << 20, "512MiB"},
		{1 << 30, "1GiB"},
		{3e9, "3GB"},
		{1 << 40, "1024GiB"},
		{ByteSizeAuto, "auto"},
		{-7, "-7"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.in.String(); got != tc.want {
				t.Fatalf("ByteSize(%d).String() = %q, want %q", int64(tc.in), got, tc.want)
			}
		})
	}
}

// TestByteSizeYAML checks that sizes survive a round trip through YAML and print in the
// form a person would write.
func TestByteSizeYAML(t *testing.T) {
	for _, tc := range []struct {
		in   ByteSize
		yaml string
	}{
		{0, "0"},
		{1500, "1500"},
		{64 << 20, "64MiB"},
		{2e6, "2MB"},
		{ByteSizeAuto, "auto"},
	} {
		t.Run(tc.yaml, func(t *testing.T) {
			out, err := yaml.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(out)); got != tc.yaml {
				t.Fatalf("marshal %d = %q, want %q", int64(tc.in), got, tc.yaml)
			}
			var back ByteSize
			if err := yaml.Unmarshal(out, &back); err != nil || back != tc.in {
				t.Fatalf("unmarshal %q = %d, %v; want %d", out, back, err, tc.in)
			}
		})
	}
}

func TestByteSizeUnmarshalYAML(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
		err  string
	}{
		{"v: 4096", 4096, ""},
		{"v: 16MiB", 16 << 20, ""},
		{`v: "1 GB"`, 1e9, ""},
		{"v: auto", ByteSizeAuto, ""},
		{"v: ten", 0, `line 1: "ten": write a size`},
		{"v: [1]", 0, "line 1: expected a size such as 64MiB, got a list"},
		{"v:\n  a: 1", 0, "line 2: expected a size such as 64MiB, got a mapping"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var v struct{ V ByteSize }
			err := yaml.Unmarshal([]byte(tc.in), &v)
			checkErr(t, err, tc.err)
			if tc.err == "" && v.V != tc.want {
				t.Fatalf("got %d, want %d", v.V, tc.want)
			}
		})
	}
}

// checkErr fails t unless err contains want, or is nil when want is "".
func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error; want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	}
}
