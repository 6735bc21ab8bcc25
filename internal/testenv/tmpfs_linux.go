package testenv

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size bytes on a new temporary directory, for a test of a full
// disk, and returns the directory; the test's cleanup unmounts it (after the cleanups
// registered later, such as a process's that has files open there). Mounting needs root:
// where it is refused the test is skipped, or fails in CI (Need).
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size))
	Need(t, err == nil, fmt.Sprintf("a tmpfs mount (mount -t tmpfs needs root: %v)", err))
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount the tmpfs %s: %v (detached instead)", dir, err)
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// ResizeTmpfs gives the tmpfs that Tmpfs mounted on dir a size of size bytes, as an
// operator growing a full file system.
func ResizeTmpfs(t testing.TB, dir string, size int64) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("resize the tmpfs %s: %v", dir, err)
	}
}
