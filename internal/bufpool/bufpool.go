// Package bufpool pools byte buffers by size class, so that connections borrow a buffer
// only while they have bytes in flight and an idle connection holds none.
//
// Buffers come in power-of-four classes from 256 B to 1 MiB, each with its own sync.Pool
// (nats client.go pools its read buffers the same way). A request above the largest class
// is allocated exactly and not pooled: such packets are rare, and pooling them would pin
// megabytes per pool for the life of the process.
package bufpool

import "sync"

const (
	minClassShift = 8  // 256 B
	maxClassShift = 20 // 1 MiB
	classStep     = 2  // each class is 4x the previous one
	numClasses    = (maxClassShift-minClassShift)/classStep + 1
)

var pools [numClasses]sync.Pool

// class returns the index of the smallest class holding n bytes, or -1 above the largest.
func class(n int) int {
	for i := 0; i < numClasses; i++ {
		if n <= 1<<(minClassShift+classStep*i) {
			return i
		}
	}
	return -1
}

// Get returns a buffer with length 0 and capacity at least n. Give it back with Put when
// done; the caller must not use it after that.
func Get(n int) *[]byte {
	c := class(n)
	if c < 0 {
		b := make([]byte, 0, n)
		return &b
	}
	if v := pools[c].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:0]
		return b
	}
	b := make([]byte, 0, 1<<(minClassShift+classStep*c))
	return &b
}

// Put returns a buffer obtained from Get. Buffers whose capacity is not exactly a class size
// (grown by append, or larger than the largest class) are dropped for the GC.
func Put(b *[]byte) {
	if b == nil {
		return
	}
	c := class(cap(*b))
	if c < 0 || cap(*b) != 1<<(minClassShift+classStep*c) {
		return
	}
	pools[c].Put(b)
}

// Grow returns a buffer holding b's bytes with room for n more: b itself if it has the
// room, else a buffer of a larger class (at least twice b's capacity) with b's bytes
// copied, b going back to its pool. Appending through Grow keeps a buffer that takes many
// packets in a class size, so that Put can pool it; append alone would grow it to sizes
// Put drops, and every batch would leave garbage.
func Grow(b *[]byte, n int) *[]byte {
	if cap(*b)-len(*b) >= n {
		return b
	}
	nb := Get(max(len(*b)+n, 2*cap(*b)))
	*nb = append(*nb, *b...)
	Put(b)
	return nb
}
