//go:build !race

package listener

// raceEnabled: see race_test.go.
const raceEnabled = false
