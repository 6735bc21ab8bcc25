package bufpool

import "testing"

func TestGetCapacity(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 257, 4096, 70000, 1 << 20, 1<<20 + 1} {
		b := Get(n)
		if len(*b) != 0 || cap(*b) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(*b), cap(*b))
		}
		Put(b)
	}
}

func TestPutDropsForeignSizes(t *testing.T) {
	b := make([]byte, 0, 300)
	Put(&b) // must not panic, and must not be handed out as a 256 B class buffer
	g := Get(256)
	if cap(*g) != 256 {
		t.Fatalf("class 0 buffer has cap %d", cap(*g))
	}
}

func TestReuseAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	Put(Get(1000))
	allocs := testing.AllocsPerRun(100, func() { Put(Get(1000)) })
	if allocs != 0 {
		t.Fatalf("Get/Put allocated %.1f times", allocs)
	}
}
