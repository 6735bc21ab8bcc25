package session

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// stepStore is a Store whose commits complete only when the test says, each with the
// error it chooses, so that the Journal's generations can be walked one by one.
type stepStore struct {
	mu      sync.Mutex
	pending []stepCommit
}

type stepCommit struct {
	b    *store.Batch
	done func(error)
}

func (s *stepStore) Commit(b *store.Batch, done func(error)) {
	s.mu.Lock()
	s.pending = append(s.pending, stepCommit{b, done})
	s.mu.Unlock()
}

func (s *stepStore) Load(store.Visitor) error { return nil }
func (s *stepStore) Close() error             { return nil }

// finish completes the oldest pending commit with err and returns its operation count.
func (s *stepStore) finish(t testing.TB, err error) int {
	t.Helper()
	s.mu.Lock()
	if len(s.pending) == 0 {
		s.mu.Unlock()
		t.Fatal("no commit pending")
	}
	c := s.pending[0]
	s.pending = s.pending[1:]
	s.mu.Unlock()
	n := c.b.Len()
	c.done(err)
	return n
}

func journalLimits(st store.Store) (*Limits, *Journal) {
	j := NewJournal(st, nil)
	lim := testLimits()
	lim.Journal = j
	return lim, j
}

var errFull = fmt.Errorf("%w: %w", store.ErrWrite, store.ErrNoSpace)

// TestSendDurableHeld: a durable ack, and everything encoded after it, stays unwritten
// until its generation is reported; then all of it goes, in order.
func TestSendDurableHeld(t *testing.T) {
	st := &stepStore{}
	lim, j := journalLimits(st)
	s, c := online(t, lim, ConnectInfo{Version: packet.V5})
	s.Send(packet.Pingresp{}) // before the hold: may go with the rest
	s.SendDurable(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1})
	s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 2})
	s.Flush()
	if len(c.buf) != 0 || !s.Held() {
		t.Fatalf("written while held: %s", c)
	}
	j.Commit()
	s.Flush()
	if len(c.buf) != 0 {
		t.Fatal("written before the commit was reported")
	}
	st.finish(t, nil)
	equalLines(t, "after the commit", c.lines(t, packet.V5), []string{"PINGRESP", "PUBACK id1", "PUBACK id2"})
	if s.Held() {
		t.Fatal("still held")
	}
}

// TestSendDurableFailed: a failed commit turns a 5.0 PUBACK into Quota exceeded (disk
// full) and a PUBREC's packet id is forgotten; 3.1.1 loses the connection, the ack and
// what followed it cut, what preceded it sent.
func TestSendDurableFailed(t *testing.T) {
	t.Run("5.0", func(t *testing.T) {
		st := &stepStore{}
		lim, j := journalLimits(st)
		s, c := online(t, lim, ConnectInfo{Version: packet.V5})
		if dup, _ := s.ReceiveQoS2(7); dup {
			t.Fatal("dup")
		}
		s.SendDurable(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1})
		s.SendDurable(&packet.Ack{PacketType: packet.PUBREC, PacketID: 7})
		j.Commit()
		st.finish(t, errFull)
		equalLines(t, "failed", c.lines(t, packet.V5), []string{"PUBACK id1 rc=0x97", "PUBREC id7 rc=0x97"})
		if dup, _ := s.ReceiveQoS2(7); dup {
			t.Fatal("the failed PUBREC's packet id is still awaiting PUBREL")
		}
		if c.shutdown {
			t.Fatal("a 5.0 connection was closed for a failure it was told of")
		}
	})
	t.Run("3.1.1", func(t *testing.T) {
		st := &stepStore{}
		lim, j := journalLimits(st)
		s, c := online(t, lim, ConnectInfo{Version: packet.V311})
		s.Send(packet.Pingresp{})
		s.SendDurable(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1})
		s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 2})
		j.Commit()
		st.finish(t, errors.New("store: write failed"))
		equalLines(t, "failed", c.lines(t, packet.V311), []string{"PINGRESP"})
		if !c.shutdown {
			t.Fatal("a 3.1.1 connection that cannot be told was not closed")
		}
	})
}

// TestJournalUntrusted: generations handed over before the failure's rewrite are
// reported failed even if their own write succeeded (they may rest on what was lost);
// without a resync function none is trusted until one exists.
func TestJournalUntrusted(t *testing.T) {
	st := &stepStore{}
	lim := testLimits()
	resyncs := 0
	j := NewJournal(st, func() { resyncs++ })
	lim.Journal = j
	s, c := online(t, lim, ConnectInfo{Version: packet.V5})
	s.SendDurable(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1})
	j.Commit() // generation 1
	s.SendDurable(&packet.Ack{PacketType: packet.PUBACK, PacketID: 2})
	j.Commit() // generation 2, handed over before 1 fails
	st.finish(t, errFull)
	st.finish(t, nil)
	equalLines(t, "both failed", c.lines(t, packet.V5), []string{"PUBACK id1 rc=0x97", "PUBACK id2 rc=0x97"})
	s.SendDurable(&packet.Ack{PacketType: packet.PUBACK, PacketID: 3})
	j.Commit() // the rewrite goes with generation 3
	if resyncs != 1 {
		t.Fatalf("%d resyncs, want 1", resyncs)
	}
	st.finish(t, nil)
	equalLines(t, "trusted again", c.lines(t, packet.V5), []string{"PUBACK id3"})
}

// TestQueuedRecords: the records a persistent session stages as a message goes through
// its QoS 2 flow, and the reference count of the message.
func TestQueuedRecords(t *testing.T) {
	st := &stepStore{}
	lim, j := journalLimits(st)
	s, c := online(t, lim, ConnectInfo{Version: packet.V5, Expiry: 60})
	j.Commit()
	st.finish(t, nil)
	c.take()
	m := msg("t", "x")
	if _, drop, stored := s.DeliverStored(Delivery{Msg: m, QoS: 2}, at(0)); drop != Delivered || !stored {
		t.Fatalf("drop %v stored %v", drop, stored)
	}
	s.Flush()
	if len(c.buf) != 0 {
		t.Fatal("PUBLISH written before its record is durable")
	}
	j.Commit()
	if n := st.finish(t, nil); n != 2 { // the message and the queue entry
		t.Fatalf("%d operations, want 2", n)
	}
	equalLines(t, "sent", c.lines(t, packet.V5), []string{`PUBLISH "t" q2 id1 "x"`})
	if m.StoreID() == 0 || j.StoredMessages() != 1 {
		t.Fatalf("message id %d, %d stored", m.StoreID(), j.StoredMessages())
	}
	s.Ack(&packet.Ack{PacketType: packet.PUBREC, PacketID: 1}, at(0))
	s.Flush()
	if len(c.buf) != 0 {
		t.Fatal("PUBREL written before the released state is durable")
	}
	j.Commit()
	if n := st.finish(t, nil); n != 2 { // entry released, message deleted
		t.Fatalf("%d operations, want 2", n)
	}
	equalLines(t, "released", c.lines(t, packet.V5), []string{"PUBREL id1"})
	if m.StoreID() != 0 || j.StoredMessages() != 0 {
		t.Fatal("the message outlived its last reference")
	}
	s.Ack(&packet.Ack{PacketType: packet.PUBCOMP, PacketID: 1}, at(0))
	j.Commit()
	if n := st.finish(t, nil); n != 1 { // entry deleted
		t.Fatalf("%d operations, want 1", n)
	}
}
