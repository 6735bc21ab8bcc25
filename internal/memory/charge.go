package memory

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path"
	"strconv"
)

// What the kernel charges
//
// Pressure is computed from the memory the kernel holds against the process, not from the
// runtime's own account: the runtime counts what it has mapped, and on a small heap much
// of that is reserved and never touched. An edge broker just started maps 2.9 MB of GC
// metadata and a 1.4 MB table for the memory profiler and has 4.4 MiB resident in all; in
// a 12 MiB cgroup the runtime's figure sat above the level at which soft pressure is left
// with no client connected, so the broker refused every client for good.
//
// The figure is read where the limit was read:
//
//   - in a cgroup whose limit the policy's limit was derived from (memory.limit: auto,
//     GOMEMLIMIT not set): the cgroup's charge less its page cache, v2 memory.current
//     minus memory.stat's file, v1 memory.usage_in_bytes minus memory.stat's total_cache.
//     That is the anonymous memory of the group's processes plus the kernel memory charged
//     to it (socket buffers, the sockets themselves: ~2 KB per connection), which the OOM
//     killer counts and the runtime cannot see; page cache is left out, as the kernel
//     reclaims it before it kills.
//   - otherwise (a configured memory.limit, GOMEMLIMIT, no cgroup limit): the process's
//     anonymous resident memory, /proc/self/statm's resident less its shared (file-backed)
//     pages.
//
// Either is compared with the policy's limit, not with the cgroup's: with memory.limit:
// auto that is 80% of the cgroup's, and the fifth above it is what the kernel's own
// memory and a surge's growth between two samples need. Compared with the cgroup's limit
// itself (soft at 9.6 MiB of 12), the edge broker in a 12 MiB group under
// bench/edge-memcap.sh's surge never reached hard: the level went none and soft every
// second, each dip let the surge's clients in, and the kernel killed it 14 s into the
// surge.
//
// From either, the heap the next GC frees is taken out (the heap the runtime holds less
// the live heap): garbage is not pressure, as the heap grows towards its goal between
// cycles by design. Where neither can be read (not Linux), the runtime's figure is used.

// A meter reads the memory pressure is computed from.
type meter struct {
	// read returns the bytes charged, false when they cannot be read.
	read func() (uint64, bool)
	// what names the figure, for logs.
	what string
}

// Files of a cgroup's charge.
const (
	cgroupV2CurrentFile = "memory.current"
	cgroupV1UsageFile   = "memory.usage_in_bytes"
	cgroupStatFile      = "memory.stat"
)

// newMeter returns the meter for a policy whose limit is lim; envLimit: GOMEMLIMIT
// governs.
func newMeter(fsys fs.FS, lim Limit, envLimit bool) meter {
	if fsys == nil {
		return meter{read: func() (uint64, bool) { return 0, false }, what: "the runtime's figures"}
	}
	if !envLimit && lim.From.Path != "" {
		dir := path.Dir(lim.From.Path)
		switch lim.From.Source {
		case SourceCgroupV2:
			return meter{
				read: func() (uint64, bool) { return cgroupCharge(fsys, dir, cgroupV2CurrentFile, "file") },
				what: "cgroup-v2 memory.current - file",
			}
		case SourceCgroupV1:
			return meter{
				read: func() (uint64, bool) { return cgroupCharge(fsys, dir, cgroupV1UsageFile, "total_cache") },
				what: "cgroup-v1 memory.usage_in_bytes - total_cache",
			}
		}
	}
	return meter{read: func() (uint64, bool) { return readAnon(fsys) }, what: "anonymous RSS"}
}

// cgroupCharge returns the usage in dir's usage file less the page cache that
// memory.stat reports as key.
func cgroupCharge(fsys fs.FS, dir, usageFile, key string) (uint64, bool) {
	data, err := fs.ReadFile(fsys, path.Join(dir, usageFile))
	if err != nil {
		return 0, false
	}
	usage, err := strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
	if err != nil {
		return 0, false
	}
	stat, err := fs.ReadFile(fsys, path.Join(dir, cgroupStatFile))
	if err != nil {
		return 0, false
	}
	cache, ok := statValue(stat, key)
	if !ok {
		return 0, false
	}
	if cache > usage {
		return 0, true
	}
	return usage - cache, true
}

// statValue returns the value of key in a memory.stat file ("key value" lines).
func statValue(stat []byte, key string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(stat))
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte{' '})
		if !ok || string(k) != key {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// readAnon returns the process's anonymous resident memory from /proc/self/statm
// (resident less shared, in pages), false where that cannot be read.
func readAnon(fsys fs.FS) (uint64, bool) {
	data, err := fs.ReadFile(fsys, statmPath)
	if err != nil {
		return 0, false
	}
	// "size resident shared text lib data dt", in pages.
	f := bytes.Fields(data)
	if len(f) < 3 {
		return 0, false
	}
	resident, err1 := strconv.ParseUint(string(f[1]), 10, 64)
	shared, err2 := strconv.ParseUint(string(f[2]), 10, 64)
	if err1 != nil || err2 != nil || shared > resident {
		return 0, false
	}
	return (resident - shared) * uint64(os.Getpagesize()), true
}

// pressureUsed is the figure pressure compares with the limit: charged (ok: it could be
// read) less the heap the next GC frees, never below the live heap; the runtime's own
// figure (Used) where nothing charged could be read.
func pressureUsed(s runtimeSample, charged uint64, ok bool) uint64 {
	if !ok {
		return s.Used()
	}
	var reclaim uint64
	if r := s.Retained(); r > s.Live {
		reclaim = r - s.Live
	}
	if charged < reclaim {
		return s.Live
	}
	return max(charged-reclaim, s.Live)
}
