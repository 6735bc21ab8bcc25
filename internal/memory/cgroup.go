package memory

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// Finding the cgroup limit
//
// /proc/self/cgroup names the process's cgroup in each hierarchy: "0::/a/b" for the v2
// (unified) hierarchy, "4:memory:/a/b" for the v1 memory controller. That path is relative
// to the hierarchy's root, which /proc/self/mountinfo maps to a directory: a mount of the
// hierarchy shows which of its cgroups it exposes (field 4, "root") at which directory
// (field 5). In a container with its own cgroup namespace the path is "/" and the mount's
// root is "/"; without one (cgroupns=host, cgroup v1) the path is the full host path and
// the container sees only its own cgroup mounted with that path as root. Either way the
// process's directory is mountpoint + (path - root).
//
// A cgroup is also bound by every ancestor's limit (a systemd slice, a Kubernetes pod), so
// the limit is the lowest found walking from that directory up to the mount point. The
// v2 root cgroup has no memory.max; a v2 hierarchy without the memory controller (the
// "unified" mount of a hybrid system) has none anywhere, and then v1 is read.

const (
	procCgroupPath    = "proc/self/cgroup"
	mountinfoPath     = "proc/self/mountinfo"
	defaultV2Mount    = "/sys/fs/cgroup"        // where systemd mounts the unified hierarchy
	defaultV1Mount    = "/sys/fs/cgroup/memory" // and the v1 memory controller
	cgroupV2LimitFile = "memory.max"
	cgroupV1LimitFile = "memory.limit_in_bytes"
)

// A cgroupMount is a mount of a cgroup hierarchy from /proc/self/mountinfo.
type cgroupMount struct {
	root  string // the cgroup of the hierarchy mounted, "/" for all of it
	point string // the directory it is mounted on
}

// cgroupLimit returns the lowest memory limit on the process's cgroup path, v2 first, or
// SourceNone when the process is in no cgroup with a limit.
func cgroupLimit(fsys fs.FS) (Available, error) {
	data, err := fs.ReadFile(fsys, procCgroupPath)
	if errors.Is(err, fs.ErrNotExist) {
		return Available{}, nil // not Linux, or no /proc
	}
	if err != nil {
		return Available{}, fmt.Errorf("%w: %w", errResolve, err)
	}
	v2, v1, err := parseProcCgroup(data)
	if err != nil {
		return Available{}, err
	}
	info, err := fs.ReadFile(fsys, mountinfoPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Available{}, fmt.Errorf("%w: %w", errResolve, err)
	}
	// Without mountinfo, assume systemd's layout with the whole hierarchy mounted.
	haveInfo := err == nil

	if v2 != "" {
		m, ok := cgroupMount{root: "/", point: defaultV2Mount}, !haveInfo
		if haveInfo {
			m, ok = findMount(info, "cgroup2", "", v2)
		}
		if ok {
			b, file, err := lowestLimit(fsys, m, v2, cgroupV2LimitFile)
			if err != nil || b > 0 {
				return Available{Bytes: b, Source: SourceCgroupV2, Path: file}, err
			}
		}
	}
	if v1 != "" {
		m, ok := cgroupMount{root: "/", point: defaultV1Mount}, !haveInfo
		if haveInfo {
			m, ok = findMount(info, "cgroup", "memory", v1)
		}
		if ok {
			b, file, err := lowestLimit(fsys, m, v1, cgroupV1LimitFile)
			if err != nil || b > 0 {
				return Available{Bytes: b, Source: SourceCgroupV1, Path: file}, err
			}
		}
	}
	return Available{}, nil
}

// parseProcCgroup returns the process's cgroup path in the v2 hierarchy and in the v1
// memory controller's, each "" when the process is not in that hierarchy.
func parseProcCgroup(data []byte) (v2, v1 string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		// hierarchy-ID:controller-list:cgroup-path; the path may itself hold colons.
		id, rest, ok1 := strings.Cut(line, ":")
		ctrls, p, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || !strings.HasPrefix(p, "/") {
			return "", "", fmt.Errorf("%w: %s: malformed line %q", errResolve, procCgroupPath, line)
		}
		switch {
		case id == "0" && ctrls == "":
			v2 = p
		case hasOption(ctrls, "memory"):
			v1 = p
		}
	}
	return v2, v1, nil
}

// findMount returns the mount of the hierarchy of type fstype ("cgroup2", or "cgroup" with
// the controller among its super options) through which cgroup path p can be reached:
// the one whose root holds p, else the first (in a namespace, p may lie outside every
// visible root; the mount then is the process's own cgroup or an ancestor).
func findMount(mountinfo []byte, fstype, controller, p string) (cgroupMount, bool) {
	var first cgroupMount
	found := false
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// 36 35 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate
		// The optional fields before "-" vary in number.
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(f) || f[sep+1] != fstype {
			continue
		}
		if controller != "" && !hasOption(f[sep+3], controller) {
			continue
		}
		m := cgroupMount{root: unescapeMount(f[3]), point: unescapeMount(f[4])}
		if within(p, m.root) {
			return m, true
		}
		if !found {
			first, found = m, true
		}
	}
	return first, found
}

// lowestLimit returns the lowest limit in file along cgroup path p, from its directory
// under m up to m's mount point, and the file it was read from; 0 when none is set.
func lowestLimit(fsys fs.FS, m cgroupMount, p, file string) (int64, string, error) {
	dir := m.point
	if within(p, m.root) {
		dir = path.Join(m.point, strings.TrimPrefix(p, m.root))
	}
	var low int64
	var lowFile string
	for {
		name := strings.TrimPrefix(path.Join(dir, file), "/")
		data, err := fs.ReadFile(fsys, name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Not this level: the root cgroup, or a path the namespace hides.
		case err != nil:
			return 0, "", fmt.Errorf("%w: %w", errResolve, err)
		default:
			b, err := parseCgroupLimit(data)
			if err != nil {
				return 0, "", fmt.Errorf("%w: %s: %w", errResolve, name, err)
			}
			if b > 0 && (low == 0 || b < low) {
				low, lowFile = b, name
			}
		}
		if dir == m.point || dir == "/" || dir == "." {
			return low, lowFile, nil
		}
		dir = path.Dir(dir)
	}
}

// parseCgroupLimit parses memory.max ("max" or bytes) or memory.limit_in_bytes (bytes,
// huge for none); 0 means no limit.
func parseCgroupLimit(data []byte) (int64, error) {
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Past int64 is no limit in any real kernel; anything else is not a number.
		if u, uerr := strconv.ParseUint(s, 10, 64); uerr == nil && u > cgroupV1Unlimited {
			return 0, nil
		}
		return 0, fmt.Errorf("not a limit: %q", s)
	}
	if n <= 0 || n >= cgroupV1Unlimited {
		return 0, nil // v1 writes -1 as "none" and reads it back huge
	}
	return n, nil
}

// within reports whether cgroup path p is root or below it.
func within(p, root string) bool {
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}

// hasOption reports whether the comma-separated list holds opt.
func hasOption(list, opt string) bool {
	for o := range strings.SplitSeq(list, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
