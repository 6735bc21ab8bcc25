package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// A Histogram counts latencies in log-linear buckets, as HdrHistogram does: values below
// 64 ns each have their own bucket, and every power-of-two range above is cut into 32
// equal buckets, so that a value is known to within 1/32 (about 3%) of itself. It covers
// every int64 in a fixed 15 KiB and records with a few instructions and no allocation,
// which is why each subscriber keeps its own and they are merged at the end.
//
// A Histogram is not safe for concurrent use.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    float64
	max    int64
}

const (
	subBits     = 5            // 32 buckets per power of two
	linearMax   = 2 << subBits // values below 64 are exact
	histBuckets = linearMax + (63-subBits)*(1<<subBits)
)

// bucketOf returns the index of the bucket holding v (v ≥ 0).
func bucketOf(v int64) int {
	if v < linearMax {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBits - 1 // ≥ 1: v>>shift is in [32, 64)
	return linearMax + (shift-1)<<subBits + int(v>>shift) - 1<<subBits
}

// bucketRange returns the smallest and largest value bucket i holds.
func bucketRange(i int) (lo, hi int64) {
	if i < linearMax {
		return int64(i), int64(i)
	}
	i -= linearMax
	shift := i>>subBits + 1
	m := int64(i&(1<<subBits-1) + 1<<subBits)
	lo = m << shift
	return lo, lo + 1<<shift - 1
}

// Record counts one value; a negative one (a clock read out of order) counts as 0.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
	h.max = max(h.max, v)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Count returns the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest value recorded, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the mean of the values recorded, exactly; 0 when there are none.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value below or at which a fraction q (0 < q ≤ 1) of the values
// lie: the ⌈q·n⌉-th smallest, by the nearest-rank definition. Within its bucket it returns
// the bucket's middle, capped at the largest value recorded, so the answer is within half
// a bucket (1.6%) of the true rank's value; the last rank (q = 1) is the maximum exactly.
// It returns 0 when nothing was recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	if rank == h.n {
		return time.Duration(h.max)
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			return time.Duration(min(lo+(hi-lo)/2, h.max))
		}
	}
	return time.Duration(h.max) // not reached: the counts add up to n
}
