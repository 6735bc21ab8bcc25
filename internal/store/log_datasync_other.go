//go:build !linux

package store

// datasync makes f's data durable: fsync, the portable call.
func datasync(f logFile) error { return f.Sync() }
