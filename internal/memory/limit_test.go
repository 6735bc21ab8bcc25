package memory

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/bifrost-mqtt/bifrost/conf"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// fixture returns the file system root of a testdata fixture.
func fixture(name string) fs.FS {
	return os.DirFS(filepath.Join("testdata", name))
}

func TestDetectAvailable(t *testing.T) {
	tests := []struct {
		fixture string
		want    Available
	}{
		{"cgroup-v2", Available{512 * mib, SourceCgroupV2, "sys/fs/cgroup/memory.max"}},
		// The service's own memory.max is "max"; its slice's bounds it, a sibling's does not.
		{"cgroup-v2-nested", Available{2 * gib, SourceCgroupV2, "sys/fs/cgroup/system.slice/memory.max"}},
		{"cgroup-v2-unlimited", Available{4 * gib, SourceHost, "proc/meminfo"}},
		// The pod's cgroup is mounted as the root of the container's memory hierarchy.
		{"cgroup-v1", Available{256 * mib, SourceCgroupV1, "sys/fs/cgroup/memory/memory.limit_in_bytes"}},
		{"cgroup-v1-unlimited", Available{2 * gib, SourceHost, "proc/meminfo"}},
		// The unified hierarchy has no memory controller: v1 holds the limit.
		{"cgroup-hybrid", Available{512 * mib, SourceCgroupV1, "sys/fs/cgroup/memory/system.slice/bifrost.service/memory.limit_in_bytes"}},
		{"no-cgroup", Available{174080 * kib, SourceHost, "proc/meminfo"}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			got, err := DetectAvailable(fixture(tt.fixture))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("DetectAvailable = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDetectAvailableEdgeCases covers layouts not worth a fixture directory each.
func TestDetectAvailableEdgeCases(t *testing.T) {
	meminfo := &fstest.MapFile{Data: []byte("MemTotal:        1048576 kB\n")} // 1 GiB
	tests := []struct {
		name string
		fsys fstest.MapFS
		want Available
	}{
		{"nothing readable", fstest.MapFS{}, Available{}},
		{"cgroup above host memory", fstest.MapFS{
			"proc/meminfo":             meminfo,
			"proc/self/cgroup":         {Data: []byte("0::/\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("4294967296\n")},
		}, Available{gib, SourceHost, "proc/meminfo"}},
		{"no mountinfo: systemd layout assumed", fstest.MapFS{
			"proc/meminfo":                   meminfo,
			"proc/self/cgroup":               {Data: []byte("0::/a\n")},
			"sys/fs/cgroup/a/memory.max":     {Data: []byte("134217728\n")},
			"sys/fs/cgroup/memory.max":       {Data: []byte("max\n")},
			"sys/fs/cgroup/b/memory.max":     {Data: []byte("1\n")},
			"sys/fs/cgroup/a/cgroup.threads": {Data: []byte("1\n")},
		}, Available{128 * mib, SourceCgroupV2, "sys/fs/cgroup/a/memory.max"}},
		{"path outside every mount's root: the mount itself", fstest.MapFS{
			"proc/meminfo":             meminfo,
			"proc/self/cgroup":         {Data: []byte("0::/../other\n")},
			"proc/self/mountinfo":      {Data: []byte("1 0 0:30 /ctr /sys/fs/cgroup ro - cgroup2 cgroup rw\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("67108864\n")},
		}, Available{64 * mib, SourceCgroupV2, "sys/fs/cgroup/memory.max"}},
		{"escaped mount point", fstest.MapFS{
			"proc/meminfo":                meminfo,
			"proc/self/cgroup":            {Data: []byte("0::/\n")},
			"proc/self/mountinfo":         {Data: []byte(`1 0 0:30 / /sys/fs/my\040cgroup rw shared:1 - cgroup2 cgroup2 rw` + "\n")},
			"sys/fs/my cgroup/memory.max": {Data: []byte("67108864\n")},
		}, Available{64 * mib, SourceCgroupV2, "sys/fs/my cgroup/memory.max"}},
		{"v2 not mounted", fstest.MapFS{
			"proc/meminfo":             meminfo,
			"proc/self/cgroup":         {Data: []byte("0::/\n")},
			"proc/self/mountinfo":      {Data: []byte("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("67108864\n")},
		}, Available{gib, SourceHost, "proc/meminfo"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DetectAvailable(tt.fsys)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("DetectAvailable = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDetectAvailableMalformed(t *testing.T) {
	tests := []struct {
		name string
		fsys fstest.MapFS
	}{
		{"meminfo without MemTotal", fstest.MapFS{"proc/meminfo": {Data: []byte("MemFree: 1 kB\n")}}},
		{"meminfo in pages", fstest.MapFS{"proc/meminfo": {Data: []byte("MemTotal: 12\n")}}},
		{"cgroup line", fstest.MapFS{"proc/self/cgroup": {Data: []byte("garbage\n")}}},
		{"memory.max", fstest.MapFS{
			"proc/self/cgroup":         {Data: []byte("0::/\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("lots\n")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DetectAvailable(tt.fsys)
			if !errors.Is(err, errResolve) {
				t.Fatalf("err = %v, want %v", err, errResolve)
			}
		})
	}
}

func TestParseCgroupLimit(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"max\n", 0},
		{"536870912\n", 512 * mib},
		{"9223372036854771712\n", 0}, // v1 "no limit", 4 KiB pages
		{"9223372036854710272", 0},   // v1 "no limit", 64 KiB pages
		{"18446744073709551615", 0},  // past int64
		{"-1", 0},
		{"0", 0},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseCgroupLimit([]byte(tt.in))
			if err != nil || got != tt.want {
				t.Fatalf("parseCgroupLimit(%q) = %d, %v, want %d", tt.in, got, err, tt.want)
			}
		})
	}
	if _, err := parseCgroupLimit([]byte("12 MB")); err == nil {
		t.Fatal("parseCgroupLimit(12 MB) succeeded")
	}
}

func TestAutoLimit(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		av      Available
		want    int64
	}{
		{"server/cgroup 512MiB: 80%", conf.ProfileServer, Available{Bytes: 512 * mib, Source: SourceCgroupV2}, 429496729},
		{"server/cgroup v1 4GiB: 80%", conf.ProfileServer, Available{Bytes: 4 * gib, Source: SourceCgroupV1}, 3435973836},
		{"server/host 16GiB: 50%", conf.ProfileServer, Available{Bytes: 16 * gib, Source: SourceHost}, 8 * gib},
		{"server/none", conf.ProfileServer, Available{}, 0},
		{"server/host 12MiB: floor", conf.ProfileServer, Available{Bytes: 12 * mib, Source: SourceHost}, 8 * mib},
		{"edge/host 170MiB: 25%", conf.ProfileEdge, Available{Bytes: 170 * mib, Source: SourceHost}, 44564480},
		{"edge/host 1GiB: ceiling", conf.ProfileEdge, Available{Bytes: gib, Source: SourceHost}, 64 * mib},
		{"edge/cgroup 64MiB: 80%", conf.ProfileEdge, Available{Bytes: 64 * mib, Source: SourceCgroupV2}, 53687091},
		{"edge/cgroup 1GiB: ceiling", conf.ProfileEdge, Available{Bytes: gib, Source: SourceCgroupV2}, 64 * mib},
		{"edge/host 16MiB: floor", conf.ProfileEdge, Available{Bytes: 16 * mib, Source: SourceHost}, 8 * mib},
		{"edge/none", conf.ProfileEdge, Available{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := autoLimit(tt.profile, tt.av); got != tt.want {
				t.Fatalf("autoLimit = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestResolveLimit(t *testing.T) {
	tests := []struct {
		name string
		cfg  conf.Memory
		fsys string
		want Limit
	}{
		{"size as configured", conf.Memory{Profile: conf.ProfileEdge, Limit: 100 * mib}, "cgroup-v2",
			Limit{Bytes: 100 * mib, From: Available{Source: SourceConfig}}},
		{"auto from cgroup v2", conf.Memory{Profile: conf.ProfileServer, Limit: conf.ByteSizeAuto}, "cgroup-v2",
			Limit{Bytes: 429496729, From: Available{512 * mib, SourceCgroupV2, "sys/fs/cgroup/memory.max"}}},
		{"auto from host, edge", conf.Memory{Profile: conf.ProfileEdge, Limit: conf.ByteSizeAuto}, "no-cgroup",
			Limit{Bytes: 44564480, From: Available{174080 * kib, SourceHost, "proc/meminfo"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveLimit(tt.cfg, fixture(tt.fsys))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("ResolveLimit = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLimitString(t *testing.T) {
	l := Limit{Bytes: 429496729, From: Available{512 * mib, SourceCgroupV2, "sys/fs/cgroup/memory.max"}}
	if got, want := l.String(), "cgroup-v2 512.0MiB (sys/fs/cgroup/memory.max)"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
}

func TestPercent(t *testing.T) {
	const maxInt64 = 1<<63 - 1
	if got, want := percent(maxInt64, 80), int64(7378697629483820645); got != want {
		t.Fatalf("percent(MaxInt64, 80) = %d, want %d", got, want)
	}
}
