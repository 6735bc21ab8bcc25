//go:build !unix

package broker

// openFileLimit is 0: this system has no per-process open-file limit to respect.
func openFileLimit() int64 { return 0 }
