//go:build linux || darwin || freebsd

package diskspace

import "golang.org/x/sys/unix"

// Free returns the bytes an unprivileged writer may still use on dir's file system
// (statfs's f_bavail blocks); false when it cannot tell.
func Free(dir string) (uint64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true
}
