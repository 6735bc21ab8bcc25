package logging

import (
	"testing"
	"time"
)

// TestLimiter: burst lines per interval pass, the rest are counted and reported by the
// first line of a later window.
func TestLimiter(t *testing.T) {
	l := NewLimiter(3, time.Second)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if ok, k := l.Allow(t0.Add(time.Duration(i) * time.Millisecond)); !ok || k != 0 {
			t.Fatalf("line %d: ok %v suppressed %d, want through with none held back", i, ok, k)
		}
	}
	for i := range 5 {
		if ok, _ := l.Allow(t0.Add(500 * time.Millisecond)); ok {
			t.Fatalf("line %d past the burst let through", 3+i)
		}
	}
	if ok, k := l.Allow(t0.Add(time.Second)); !ok || k != 5 {
		t.Fatalf("next window: ok %v suppressed %d, want through reporting 5", ok, k)
	}
	if ok, k := l.Allow(t0.Add(time.Second + time.Millisecond)); !ok || k != 0 {
		t.Fatalf("second line of the window: ok %v suppressed %d, want through with none", ok, k)
	}
}
