package bufpool

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

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
	if testenv.Race {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	Put(Get(1000))
	allocs := testing.AllocsPerRun(100, func() { Put(Get(1000)) })
	if allocs != 0 {
		t.Fatalf("Get/Put allocated %.1f times", allocs)
	}
}

// TestGrow appends far past a first buffer's class through Grow and checks that the bytes
// survive and that the buffer stays in a class size, so that Put pools it.
func TestGrow(t *testing.T) {
	b := Get(10)
	var want []byte
	for i := range 5000 {
		chunk := []byte{byte(i), byte(i >> 8), 0xAA}
		b = Grow(b, len(chunk))
		if cap(*b)-len(*b) < len(chunk) {
			t.Fatalf("Grow left %d bytes of room, want %d", cap(*b)-len(*b), len(chunk))
		}
		*b = append(*b, chunk...)
		want = append(want, chunk...)
		if c := class(cap(*b)); c < 0 || cap(*b) != 1<<(minClassShift+classStep*c) {
			t.Fatalf("capacity %d is not a class size", cap(*b))
		}
	}
	if string(*b) != string(want) {
		t.Fatal("Grow lost bytes")
	}
	Put(b)
}

func TestGrowReuseAllocatesNothing(t *testing.T) {
	if testenv.Race {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	batch := func() {
		b := Get(64)
		for range 200 { // 12,800 bytes: through the 256 B, 1 KiB, 4 KiB and 16 KiB classes
			b = Grow(b, 64)
			*b = append(*b, make([]byte, 64)...)
		}
		Put(b)
	}
	batch()
	if allocs := testing.AllocsPerRun(100, batch); allocs != 0 {
		t.Fatalf("a batch grown through Grow allocated %.1f times", allocs)
	}
}
