//go:build !linux

package testenv

import "testing"

// Tmpfs needs Linux: the test is skipped (Need).
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	Need(t, false, "a tmpfs mount (Linux)")
	return ""
}

// ResizeTmpfs needs Linux.
func ResizeTmpfs(t testing.TB, dir string, size int64) { t.Fatal("no tmpfs here") }
