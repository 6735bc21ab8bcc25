package metrics

import (
	"testing"
)

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   LoadInput
		want float64
	}{
		{"no caps", LoadInput{Connections: 500, MemoryBytes: 1 << 30}, 0},
		{"conns=25/100", LoadInput{Connections: 25, MaxConnections: 100}, 0.25},
		{"mem=3/4", LoadInput{MemoryBytes: 3 << 20, MemoryLimitBytes: 4 << 20}, 0.75},
		{"conns=10/100,mem=1/2 takes the larger", LoadInput{Connections: 10, MaxConnections: 100, MemoryBytes: 1, MemoryLimitBytes: 2}, 0.5},
		{"conns=90/100,mem=1/10 takes the larger", LoadInput{Connections: 90, MaxConnections: 100, MemoryBytes: 1, MemoryLimitBytes: 10}, 0.9},
		{"conns over cap clamps to 1", LoadInput{Connections: 150, MaxConnections: 100}, 1},
		{"mem over limit clamps to 1", LoadInput{MemoryBytes: 5, MemoryLimitBytes: 4}, 1},
		{"negative conns count as 0", LoadInput{Connections: -1, MaxConnections: 10}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Load(tc.in); got != tc.want {
				t.Fatalf("Load(%+v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestRuntimeMemory(t *testing.T) {
	inUse, _ := RuntimeMemory()
	if inUse == 0 {
		t.Fatal("RuntimeMemory reports 0 bytes in use")
	}
}
