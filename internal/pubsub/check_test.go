package pubsub

import (
	"fmt"
	"strings"
	"testing"
)

// refMatch is the reference matcher: MQTT section 4.7 read literally, on split strings.
func refMatch(filter, topic string) bool {
	fl := strings.Split(filter, "/")
	if strings.HasPrefix(topic, "$") && (fl[0] == "+" || fl[0] == "#") {
		return false // [MQTT-4.7.2-1]
	}
	tl := strings.Split(topic, "/")
	for i, f := range fl {
		if f == "#" {
			return true // the parent level and any number of levels below
		}
		if i >= len(tl) || (f != "+" && f != tl[i]) {
			return false
		}
	}
	return len(fl) == len(tl)
}

// checkTree verifies the tree's invariants.
func checkTree(t *tree) error {
	seen := make([]bool, t.n)
	free := 0
	for x, prev := t.free, uint32(0); x != 0; prev, x = x, t.node(x).next {
		if t.node(x).flags != flagFree || seen[x] || t.node(x).prev != prev {
			return fmt.Errorf("free list: node %d flags %x prev %d (want %d)", x, t.node(x).flags, t.node(x).prev, prev)
		}
		seen[x] = true
		free++
	}
	if free != t.nfree {
		return fmt.Errorf("free list holds %d, nfree %d", free, t.nfree)
	}
	live, bytes := 0, 0
	var err error
	t.walk(0, func(x uint32) bool {
		n := t.node(x)
		if seen[x] {
			err = fmt.Errorf("node %d reached twice or free", x)
			return false
		}
		seen[x] = true
		live++
		bytes += int(n.llen)
		var plus, pound, kids, literalKids int
		prev := uint32(0)
		for c := n.child; c != 0; c = t.node(c).next {
			cn := t.node(c)
			if cn.parent != x || cn.prev != prev {
				err = fmt.Errorf("node %d: child %d has parent %d prev %d", x, c, cn.parent, cn.prev)
				return false
			}
			prev = c
			kids++
			lab := t.label(c)
			switch {
			case cn.flags&flagWild != 0 && isPlus(lab):
				plus++
			case cn.flags&flagWild != 0 && isPound(lab):
				pound++
				if cn.child != 0 {
					err = fmt.Errorf("node %d: '#' with children", c)
					return false
				}
			case cn.flags&flagWild != 0:
				err = fmt.Errorf("node %d: wild label %q", c, lab)
				return false
			default:
				literalKids++
				for _, l := range strings.Split(string(lab), "/") {
					if l == "+" || l == "#" {
						err = fmt.Errorf("node %d: wildcard level in literal label %q", c, lab)
						return false
					}
				}
			}
			if got := t.find(x, firstLevel(lab)); got != c {
				err = fmt.Errorf("node %d: find(%d, %q) = %d", c, x, firstLevel(lab), got)
				return false
			}
		}
		if (plus > 0) != (n.flags&flagPlus != 0) || (pound > 0) != (n.flags&flagPound != 0) || plus > 1 || pound > 1 {
			err = fmt.Errorf("node %d: flags %x, %d '+' and %d '#' children", x, n.flags, plus, pound)
			return false
		}
		if x != 0 && n.n == 0 && n.flags&flagGroups == 0 {
			if kids == 0 {
				err = fmt.Errorf("node %d %q: empty leaf", x, t.label(x))
				return false
			}
			if kids == 1 && literalKids == 1 && n.flags&flagWild == 0 &&
				int(n.llen)+1+int(t.node(n.child).llen) <= 0xffff {
				err = fmt.Errorf("node %d %q: not merged with its only child %q", x, t.label(x), t.label(n.child))
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	if t.nfree >= minFreeNodes && t.nfree*2 > live {
		return fmt.Errorf("%d free nodes for %d live after upkeep", t.nfree, live)
	}
	if live+free != int(t.n) {
		return fmt.Errorf("%d live + %d free nodes of %d: leaked", live, free, t.n)
	}
	if bytes != t.live {
		return fmt.Errorf("live label bytes %d, counted %d", t.live, bytes)
	}
	if want := int(t.n+pageMask) >> pageShift; len(t.pages) != want {
		return fmt.Errorf("%d node pages for %d ids, want %d", len(t.pages), t.n, want)
	}
	pageLive := 0
	for p := range t.pages {
		pg := &t.pages[p]
		used := 0
		for i := range pg.nodes {
			used += int(pg.nodes[i].llen)
			if id := uint32(p)<<pageShift | uint32(i); id >= t.n && pg.nodes[i] != (node{}) {
				return fmt.Errorf("node %d past the end is not zero", id)
			}
		}
		if pg.queued || (pg.dead >= minDeadBytes && pg.dead*2 > len(pg.labels)) {
			return fmt.Errorf("page %d: %d of %d label bytes dead after upkeep", p, pg.dead, len(pg.labels))
		}
		if used+pg.dead != len(pg.labels) {
			return fmt.Errorf("page %d: %d label bytes used + %d dead != %d", p, used, pg.dead, len(pg.labels))
		}
		pageLive += used
	}
	if pageLive != t.live {
		return fmt.Errorf("pages hold %d live label bytes, tree says %d", pageLive, t.live)
	}
	if t.tab.n != live-1 {
		return fmt.Errorf("table holds %d, %d non-root nodes", t.tab.n, live-1)
	}
	used := 0
	if len(t.tab.dir) != 1<<t.tab.depth && t.tab.n != 0 {
		return fmt.Errorf("table: directory of %d at depth %d", len(t.tab.dir), t.tab.depth)
	}
	for i := range t.tab.segs {
		seg := &t.tab.segs[i]
		n := 0
		for _, s := range seg.slots {
			if s == 0 {
				continue
			}
			n++
			id, h := uint32(s), uint32(s>>32)
			nd := t.node(id)
			if nd.flags&flagFree != 0 || h != t.hash(nd.parent, firstLevel(t.label(id))) {
				return fmt.Errorf("table slot for node %d: bad hash or free", id)
			}
			if t.tab.seg(h) != seg {
				return fmt.Errorf("table: node %d in segment %d, directory says otherwise", id, i)
			}
		}
		if n != seg.n || len(seg.slots)&(len(seg.slots)-1) != 0 || (n+1)*4 > len(seg.slots)*3+4 {
			return fmt.Errorf("table: segment %d holds %d in %d slots, n %d", i, n, len(seg.slots), seg.n)
		}
		used += n
	}
	if used != t.tab.n {
		return fmt.Errorf("table: %d slots used, n %d", used, t.tab.n)
	}
	return nil
}

// check verifies an index: its tree, slab, groups and count.
func (x *Index) check() error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if err := checkTree(&x.tree); err != nil {
		return err
	}
	owned := make([][]bool, len(x.slab.pages))
	for p := range owned {
		owned[p] = make([]bool, len(x.slab.pages[p].subs))
	}
	bigOwned := make([]bool, len(x.slab.big))
	count, indexed := 0, 0
	var err error
	checkBlock := func(b block) {
		if *b.n == 0 {
			return
		}
		if *b.n > 1<<*b.class {
			err = fmt.Errorf("owner %x: %d subs in class %d", b.owner, *b.n, *b.class)
			return
		}
		ids := map[SubscriberID]bool{}
		if big := *b.off &^ bigBlock; *b.off&bigBlock != 0 {
			if *b.class <= pageShift || len(x.slab.big[big]) != 1<<*b.class || bigOwned[big] {
				err = fmt.Errorf("owner %x: big block %d of class %d, %d Subs", b.owner, big, *b.class, len(x.slab.big[big]))
				return
			}
			bigOwned[big] = true
		} else {
			if *b.class > pageShift || int(b.page) >= len(owned) || int(*b.off+1<<*b.class) > len(owned[b.page]) {
				err = fmt.Errorf("owner %x: paged block of class %d at %d:%d", b.owner, *b.class, b.page, *b.off)
				return
			}
			for i := *b.off; i < *b.off+1<<*b.class; i++ {
				if owned[b.page][i] {
					err = fmt.Errorf("owner %x: slab slot %d:%d owned twice", b.owner, b.page, i)
					return
				}
				owned[b.page][i] = true
			}
		}
		for i, s := range x.slab.get(b) {
			if ids[s.Subscriber] || s.Subscriber == 0 {
				err = fmt.Errorf("owner %x: subscriber %d twice or zero", b.owner, s.Subscriber)
				return
			}
			ids[s.Subscriber] = true
			if *b.class >= indexedClass {
				indexed++
				if p, ok := x.slab.pos[b.key(s.Subscriber)]; !ok || p != uint32(i) {
					err = fmt.Errorf("owner %x: pos of %d is %d, %v; want %d", b.owner, s.Subscriber, p, ok, i)
					return
				}
			}
		}
		count += int(*b.n)
	}
	for p := range x.tree.pages {
		x.pageBlocks(uint32(p), func(b block) {
			if err == nil {
				checkBlock(b)
			}
		})
	}
	if err != nil {
		return err
	}
	if count != x.count {
		return fmt.Errorf("count %d, blocks hold %d", x.count, count)
	}
	if indexed != len(x.slab.pos) {
		return fmt.Errorf("pos holds %d, indexed blocks %d", len(x.slab.pos), indexed)
	}
	if len(x.slab.pages) > len(x.tree.pages) {
		return fmt.Errorf("%d slab pages for %d node pages", len(x.slab.pages), len(x.tree.pages))
	}
	for p := range x.slab.pages {
		sp := &x.slab.pages[p]
		free := uint32(0)
		for c := range sp.free {
			for f := sp.free[c]; f != 0; f = uint32(sp.subs[f-1].Subscriber) {
				for i := f - 1; i < f-1+1<<c; i++ {
					if owned[p][i] {
						return fmt.Errorf("slab slot %d:%d free and owned", p, i)
					}
					owned[p][i] = true
				}
				free += 1 << c
			}
		}
		if free != sp.nfree {
			return fmt.Errorf("slab page %d: %d free, nfree %d", p, free, sp.nfree)
		}
		for i, o := range owned[p] {
			if !o {
				return fmt.Errorf("slab slot %d:%d neither free nor owned", p, i)
			}
		}
		if sp.queued || (sp.nfree >= minFreeSubs && sp.nfree*2 > uint32(len(sp.subs))) {
			return fmt.Errorf("slab page %d: %d of %d Subs free after upkeep", p, sp.nfree, len(sp.subs))
		}
	}
	for _, i := range x.slab.bigFree {
		if bigOwned[i] || x.slab.big[i] != nil {
			return fmt.Errorf("big block %d free and owned", i)
		}
		bigOwned[i] = true
	}
	for i, o := range bigOwned {
		if !o {
			return fmt.Errorf("big block %d neither free nor owned", i)
		}
	}
	groups := 0
	for node, g := range x.groups.heads {
		if x.tree.node(node).flags&flagGroups == 0 {
			return fmt.Errorf("node %d has groups but no flag", node)
		}
		for ; g != 0; g = x.groups.list[g].next {
			gr := &x.groups.list[g]
			if gr.node != node || gr.n == 0 {
				return fmt.Errorf("group %d %q: node %d (want %d), %d members", g, gr.name, gr.node, node, gr.n)
			}
			groups++
		}
	}
	if groups != x.groups.live {
		return fmt.Errorf("%d groups reachable, %d live", groups, x.groups.live)
	}
	for i := range x.tree.n {
		if x.tree.node(i).flags&flagGroups != 0 && x.groups.heads[i] == 0 {
			return fmt.Errorf("node %d flagged with no groups", i)
		}
	}
	return nil
}

func mustCheck(t testing.TB, x *Index) {
	t.Helper()
	if err := x.check(); err != nil {
		t.Fatal(err)
	}
}
