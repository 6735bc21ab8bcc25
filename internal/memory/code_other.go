//go:build !linux

package memory

import "errors"

// ReleaseCode releases nothing outside Linux: it has no MADV_PAGEOUT.
func ReleaseCode() (int64, error) {
	return 0, errors.New("memory: release code: only on Linux")
}
