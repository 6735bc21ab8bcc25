//go:build !race

package testenv

// Race: see race.go.
const Race = false
