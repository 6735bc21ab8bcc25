package cluster

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// TestForwardLinkByID: a message to a node with no link starts one, which the next
// messages find by the node's id; a peer gone takes its link out of the table and calls
// the done of what it held, and the next message to it starts a new link.
func TestForwardLinkByID(t *testing.T) {
	c := &Cluster{ctx: context.Background()}
	c.goFn = func(string, func(context.Context)) bool { return true } // links do not run
	c.routes = newRoutes(c)
	c.fwd = newForwarder(c)
	c.routes.own("p", 1, nil)
	c.routes.apply("p", 1, true, []string{"t/#"}, nil, 1)
	o := &broker.Outbound{Msg: session.NewLocalMessage("t/x", []byte("x"), 1, false)}
	dones := 0
	done := func() { dones++ }
	for range 2 {
		if n := c.fwd.Forward(o, done); n != 1 {
			t.Fatalf("forwarded to %d nodes; want 1", n)
		}
	}
	l := c.fwd.linkOf("p")
	if l == nil || c.fwd.linkByID(l.id) != l || l.depth() != 2 {
		t.Fatalf("link %p, by id %p; want the one link, holding both messages", l, c.fwd.linkByID(l.id))
	}
	close(l.exited) // as its goroutine does when the link closes
	c.fwd.gone("p")
	if c.fwd.linkByID(l.id) != nil || dones != 2 {
		t.Fatalf("after the peer left: by id %p, %d dones; want none, 2", c.fwd.linkByID(l.id), dones)
	}
	if c.fwd.Forward(o, done) != 1 {
		t.Fatal("not forwarded once the peer left")
	}
	if nl := c.fwd.linkByID(l.id); nl == nil || nl == l {
		t.Fatal("no new link for the peer")
	}
}

// TestSeenSeqTakeOver: a new stream from a peer takes its de-duplication state over only
// once the older stream's batch has ended, sees what that batch recorded, and the older
// stream begins no batch after it.
func TestSeenSeqTakeOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sn := newSeenSeq()
		sn.takeOver(1)
		if !sn.begin(1) {
			t.Fatal("the only stream could not begin a batch")
		}
		took := make(chan struct{})
		go func() {
			sn.takeOver(2)
			close(took)
		}()
		synctest.Wait()
		select {
		case <-took:
			t.Fatal("a new stream took over during the older one's batch")
		default:
		}
		sn.epoch, sn.last = 7, 5
		sn.end(1)
		<-took
		if sn.begin(1) {
			t.Fatal("the older stream began a batch after a newer one took over")
		}
		if !sn.begin(2) {
			t.Fatal("the new owner could not begin a batch")
		}
		if sn.epoch != 7 || sn.last != 5 {
			t.Fatalf("the new owner sees epoch %d, last %d; want 7, 5", sn.epoch, sn.last)
		}
		sn.end(2)
		sn.takeOver(3) // no batch in progress: at once
	})
}
