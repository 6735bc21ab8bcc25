package memory

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// The shares of the available memory that memory.limit: auto takes. The soft limit bounds
// only what the Go runtime maps (heap, stacks, runtime metadata); the headroom is for what
// it does not count and the OOM killer does:
//   - the kernel's socket buffers, ~5 KB per open connection: 500 MB at 100K connections.
//     cgroup v2 charges them to the cgroup; on a host they come out of the same RAM;
//   - the page cache of the store's files, charged to the cgroup (reclaimable, but
//     reclaim under the cgroup's limit stalls writes);
//   - the limit's own overshoot: it is soft, and the runtime exceeds it rather than
//     collect continuously when the live heap gets close;
//   - on a host, every other process.
const (
	// cgroupPercent of a cgroup's limit: the cgroup is this process's (or its container's)
	// own budget, so 20% headroom covers sockets, page cache and overshoot.
	cgroupPercent = 80
	// hostPercent of host memory for the server profile: a host's RAM is shared with the
	// kernel's socket buffers (1M connections hold ~5 GB of them) and other processes.
	hostPercent = 50
	// edgeHostPercent of host memory for the edge profile: a device runs other services
	// that the broker must leave room for (the gateway in DESIGN.md keeps 20% free).
	edgeHostPercent = 25
	// edgeCeiling caps the edge profile's limit whatever the device has. The profile aims at
	// ~15 MB of RSS; the limit is a ceiling, not a target: 64 MiB lets a reconnect storm or
	// a store flush pass, and an edge broker above it should collect harder and refuse work.
	edgeCeiling = 64 << 20
	// minLimit is the lowest limit auto chooses, as conf's minimum for memory.limit: below
	// it the GC would run nearly continuously just to hold the runtime's own memory.
	minLimit = 8 << 20
	// cgroupV1Unlimited: cgroup v1 reports "no limit" as the largest page-aligned int64
	// (9223372036854771712 with 4 KiB pages); anything this large is no limit.
	cgroupV1Unlimited = 1 << 62
)

// A Source names where the available memory was read.
type Source uint8

// Sources of a limit.
const (
	SourceNone     Source = iota // nothing could be read: no limit
	SourceConfig                 // memory.limit is a size
	SourceCgroupV2               // memory.max of the process's cgroup or an ancestor
	SourceCgroupV1               // memory.limit_in_bytes of the memory cgroup or an ancestor
	SourceHost                   // MemTotal of /proc/meminfo
)

// String returns the name logs use: none, config, cgroup-v2, cgroup-v1, host.
func (s Source) String() string {
	switch s {
	case SourceConfig:
		return "config"
	case SourceCgroupV2:
		return "cgroup-v2"
	case SourceCgroupV1:
		return "cgroup-v1"
	case SourceHost:
		return "host"
	default:
		return "none"
	}
}

// Available is the memory the kernel lets the process use, and where that was read.
type Available struct {
	Bytes  int64  // 0 when Source is SourceNone
	Source Source // never SourceConfig
	Path   string // the file read, relative to the file system root ("proc/meminfo")
}

// A Limit is a resolved soft memory limit and what it was derived from.
type Limit struct {
	Bytes int64     // the soft limit; 0: none
	From  Available // for a configured size, Source is SourceConfig and the rest zero
}

// String describes where the limit came from, for logs: "memory.limit", "none", or the
// available memory it is a share of, "cgroup-v2 512.0MiB (sys/fs/cgroup/memory.max)".
func (l Limit) String() string {
	switch l.From.Source {
	case SourceConfig:
		return "memory.limit"
	case SourceNone:
		return "none"
	}
	return fmt.Sprintf("%s %s (%s)", l.From.Source, formatBytes(l.From.Bytes), l.From.Path)
}

// ResolveLimit returns the soft memory limit for cfg: a configured size as it is, or for
// memory.limit: auto a share of the available memory (DetectAvailable) that depends on
// where it was read and on the profile:
//
//	                 server                  edge
//	cgroup limit     80%                     min(80%, 64 MiB)
//	host memory      50%                     min(25%, 64 MiB)
//	nothing          no limit                no limit
//
// and never below 8 MiB. fsys is the file system root (os.DirFS("/")).
func ResolveLimit(cfg conf.Memory, fsys fs.FS) (Limit, error) {
	if cfg.Limit > 0 {
		return Limit{Bytes: int64(cfg.Limit), From: Available{Source: SourceConfig}}, nil
	}
	av, err := DetectAvailable(fsys)
	if err != nil {
		return Limit{}, err
	}
	return Limit{Bytes: autoLimit(cfg.Profile, av), From: av}, nil
}

// autoLimit is the share of av that memory.limit: auto takes (see ResolveLimit).
func autoLimit(profile string, av Available) int64 {
	var l int64
	switch av.Source {
	case SourceCgroupV1, SourceCgroupV2:
		l = percent(av.Bytes, cgroupPercent)
	case SourceHost:
		l = percent(av.Bytes, hostPercent)
		if profile == conf.ProfileEdge {
			l = percent(av.Bytes, edgeHostPercent)
		}
	default:
		return 0
	}
	if profile == conf.ProfileEdge {
		l = min(l, edgeCeiling)
	}
	return max(l, minLimit)
}

// percent returns pct% of n without overflowing for any n ≥ 0.
func percent(n, pct int64) int64 { return n/100*pct + n%100*pct/100 }

// DetectAvailable returns the memory the kernel lets this process use: the lowest cgroup
// limit on its path (v2, else v1), or host memory when that is lower or there is none.
// fsys is the file system root; missing files mean "not on this system", a file that
// exists and cannot be parsed is an error.
func DetectAvailable(fsys fs.FS) (Available, error) {
	host, err := hostMemory(fsys)
	if err != nil {
		return Available{}, err
	}
	cg, err := cgroupLimit(fsys)
	if err != nil {
		return Available{}, err
	}
	// A cgroup limit above the host's memory does not bind: the host's does.
	if cg.Source != SourceNone && (host.Source == SourceNone || cg.Bytes < host.Bytes) {
		return cg, nil
	}
	return host, nil
}

const meminfoPath = "proc/meminfo"

// hostMemory reads MemTotal from /proc/meminfo.
func hostMemory(fsys fs.FS) (Available, error) {
	data, err := fs.ReadFile(fsys, meminfoPath)
	if errors.Is(err, fs.ErrNotExist) {
		return Available{}, nil
	}
	if err != nil {
		return Available{}, fmt.Errorf("%w: %w", errResolve, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		// "MemTotal:       16314460 kB"
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 || kb > 1<<52 {
			break
		}
		return Available{Bytes: kb << 10, Source: SourceHost, Path: meminfoPath}, nil
	}
	return Available{}, fmt.Errorf("%w: %s: no MemTotal in kB", errResolve, meminfoPath)
}
