package pubsub

// paged is a growable array kept in pages of pageLen elements, indexed by uint32: growing
// it never copies more than the first page (which starts small and doubles), and
// shrinking it from the end gives pages back. See nodePage for why not one slice.
type paged[T any] struct {
	pages [][]T
	n     uint32
}

func (p *paged[T]) at(i uint32) *T { return &p.pages[i>>pageShift][i&pageMask] }

// push appends v and returns its index.
func (p *paged[T]) push(v T) uint32 {
	i := p.n
	pg, o := int(i>>pageShift), int(i&pageMask)
	if pg == len(p.pages) {
		c := pageLen
		if pg == 0 {
			c = 8
		}
		p.pages = append(p.pages, make([]T, 0, c))
	}
	if o == cap(p.pages[pg]) { // the first page, still growing
		grown := make([]T, o, min(pageLen, 2*o))
		copy(grown, p.pages[pg])
		p.pages[pg] = grown
	}
	p.pages[pg] = append(p.pages[pg], v)
	p.n++
	return i
}

// pop removes the last element, and its page if that empties it.
func (p *paged[T]) pop() {
	p.n--
	pg := p.n >> pageShift
	var zero T
	p.pages[pg][p.n&pageMask] = zero // for the GC
	p.pages[pg] = p.pages[pg][:p.n&pageMask]
	if p.n&pageMask == 0 {
		p.pages[pg] = nil
		p.pages = p.pages[:pg]
	}
}

// capacity returns the number of elements the pages can hold, for memory accounting.
func (p *paged[T]) capacity() int {
	c := 0
	for _, pg := range p.pages {
		c += cap(pg)
	}
	return c
}
