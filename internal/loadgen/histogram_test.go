package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	// Every bucket's range maps back to it, and ranges tile the values without gaps.
	next := int64(0)
	for i := range histBuckets {
		lo, hi := bucketRange(i)
		if lo != next || hi < lo {
			t.Fatalf("bucket %d = [%d, %d], want to start at %d", i, lo, hi, next)
		}
		for _, v := range []int64{lo, lo + (hi-lo)/2, hi} {
			if got := bucketOf(v); got != i {
				t.Fatalf("bucketOf(%d) = %d, want %d", v, got, i)
			}
		}
		if i >= linearMax && float64(hi-lo+1)/float64(lo) > 1.0/32+1e-9 {
			t.Fatalf("bucket %d = [%d, %d] wider than 1/32 of its values", i, lo, hi)
		}
		if hi == math.MaxInt64 {
			return
		}
		next = hi + 1
	}
	t.Fatalf("the buckets end at %d, before MaxInt64", next-1)
}

func TestQuantileExact(t *testing.T) {
	var h Histogram
	for v := range 50 { // below 64 ns every value has its own bucket
		h.Record(time.Duration(v + 1))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.01, 1}, {0.02, 1}, {0.021, 2}, {0.5, 25}, {0.99, 50}, {0.999, 50}, {1, 50}} {
		if got := h.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v (nearest rank)", tc.q, got, tc.want)
		}
	}
	if h.Count() != 50 || h.Max() != 50 || h.Mean() != 25 { // mean of 1..50 is 25.5, truncated
		t.Errorf("Count, Max, Mean = %d, %v, %v; want 50, 50ns, 25ns", h.Count(), h.Max(), h.Mean())
	}
}

func TestQuantileApproximate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var values []int64
	var a, b Histogram // b is filled in two halves and merged, as subscribers are
	var half Histogram
	for i := range 100_000 {
		// Log-uniform between 1µs and 1s, like latencies with a long tail.
		v := int64(math.Exp(math.Log(1e3) + r.Float64()*(math.Log(1e9)-math.Log(1e3))))
		values = append(values, v)
		a.Record(time.Duration(v))
		if i%2 == 0 {
			b.Record(time.Duration(v))
		} else {
			half.Record(time.Duration(v))
		}
	}
	b.Merge(&half)
	slices.Sort(values)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 0.9999} {
		exact := values[int(math.Ceil(q*float64(len(values))))-1]
		for name, h := range map[string]*Histogram{"direct": &a, "merged": &b} {
			got := int64(h.Quantile(q))
			if rel := math.Abs(float64(got-exact)) / float64(exact); rel > 1.0/64 {
				t.Errorf("%s: Quantile(%v) = %d, exact %d: off by %.2f%%, more than half a bucket", name, q, got, exact, 100*rel)
			}
		}
	}
	if a.Max() != time.Duration(values[len(values)-1]) || b.Max() != a.Max() {
		t.Errorf("Max = %v / %v, want %v", a.Max(), b.Max(), values[len(values)-1])
	}
	if a.Count() != 100_000 || b.Count() != 100_000 {
		t.Errorf("Count = %d / %d", a.Count(), b.Count())
	}
}

func TestQuantileEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Fatal("an empty histogram reports 0")
	}
	h.Record(-5) // a clock read out of order
	h.Record(3 * time.Millisecond)
	if got := h.Quantile(0.5); got != 0 {
		t.Errorf("Quantile(0.5) = %v, want 0 (the negative value counts as 0)", got)
	}
	if got := h.Quantile(1); got != 3*time.Millisecond {
		t.Errorf("Quantile(1) = %v, want the maximum exactly", got)
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	for i := range b.N {
		h.Record(time.Duration(i) * 997)
	}
}
