package store

import (
	"bytes"
	"slices"
	"strings"
	"sync"
)

// memEngine is the engine of NewMemory: a map, sorted when iterated. It is for tests and
// small states; iteration copies the keys in range.
type memEngine struct {
	mu sync.Mutex
	m  map[string][]byte
}

func newMemEngine() *memEngine { return &memEngine{m: make(map[string][]byte)} }

func (e *memEngine) write(group []*Batch, _ bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range group {
		for off := 0; off < len(b.data); {
			var op byte
			var k, v []byte
			op, k, v, off = b.op(off)
			switch op {
			case opSet:
				e.m[string(k)] = bytes.Clone(v)
			case opDelete:
				delete(e.m, string(k))
			case opDeleteRange:
				for key := range e.m {
					if key >= string(k) && key < string(v) {
						delete(e.m, key)
					}
				}
			}
		}
	}
	return nil
}

func (e *memEngine) flush() error { return nil }

func (e *memEngine) iter(lower, upper []byte) (iterator, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	it := &memIter{i: -1}
	for k, v := range e.m {
		if k >= string(lower) && k < string(upper) {
			it.kvs = append(it.kvs, memKV{k, v})
		}
	}
	slices.SortFunc(it.kvs, func(a, b memKV) int { return strings.Compare(a.k, b.k) })
	return it, nil
}

func (e *memEngine) close() error { return nil }

// memIter iterates a snapshot of a memEngine's range.
type memIter struct {
	kvs []memKV
	i   int
}

type memKV struct {
	k string
	v []byte
}

func (it *memIter) First() bool                  { it.i = 0; return it.Valid() }
func (it *memIter) Next() bool                   { it.i++; return it.Valid() }
func (it *memIter) Valid() bool                  { return it.i >= 0 && it.i < len(it.kvs) }
func (it *memIter) Key() []byte                  { return []byte(it.kvs[it.i].k) }
func (it *memIter) ValueAndErr() ([]byte, error) { return it.kvs[it.i].v, nil }
func (it *memIter) Error() error                 { return nil }
func (it *memIter) Close() error                 { return nil }

func (it *memIter) SeekGE(key []byte) bool {
	it.i, _ = slices.BinarySearchFunc(it.kvs, string(key), func(kv memKV, k string) int { return strings.Compare(kv.k, k) })
	return it.Valid()
}
