//go:build race

package session

// raceEnabled: the race detector makes sync.Pool drop items at random, so allocation
// counts of pooled code mean nothing under it.
const raceEnabled = true
