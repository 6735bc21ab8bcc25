package bridge

import (
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// A scripted is a remote broker played by the test over one accepted connection: it
// answers the bridge's CONNECT and SUBSCRIBE, then sends and reads what the test says.
type scripted struct {
	t       testing.TB
	c       net.Conn
	r       packet.Reader
	in      []byte
	connect packet.Connect // the bridge's
}

// acceptBridge accepts the bridge's connection on l, reads its CONNECT and answers with a
// CONNACK, then reads its SUBSCRIBE and grants it.
func acceptBridge(t testing.TB, l net.Listener) *scripted {
	t.Helper()
	_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(testenv.Timeout))
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("the bridge did not connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	s := &scripted{t: t, c: c, r: packet.Reader{Version: packet.V5}, in: make([]byte, 4096)}
	h, body := s.next(testenv.Timeout)
	if h.Type != packet.CONNECT {
		t.Fatalf("first packet %s, not CONNECT", h.Type)
	}
	if err := s.connect.Decode(h, body, packet.V5); err != nil {
		t.Fatalf("the bridge's CONNECT: %v", err)
	}
	s.send(&packet.Connack{})
	h, body = s.next(testenv.Timeout)
	var sub packet.Subscribe
	if h.Type != packet.SUBSCRIBE || sub.Decode(h, body, packet.V5) != nil {
		t.Fatalf("no SUBSCRIBE: %s", h.Type)
	}
	s.send(&packet.Suback{PacketID: sub.PacketID, Codes: []packet.ReasonCode{packet.ReasonCode(sub.Subscriptions[0].QoS)}})
	return s
}

func (s *scripted) send(p interface {
	AppendTo([]byte, packet.Version) []byte
}) {
	s.t.Helper()
	if _, err := s.c.Write(p.AppendTo(nil, packet.V5)); err != nil {
		s.t.Fatal(err)
	}
}

// next returns the next packet within d; a zero header if none came.
func (s *scripted) next(d time.Duration) (packet.Header, []byte) {
	s.t.Helper()
	_ = s.c.SetReadDeadline(time.Now().Add(d))
	for {
		h, body, ok, err := s.r.Next()
		if err != nil {
			s.t.Fatal(err)
		}
		if ok {
			if h.Type == packet.PINGREQ {
				continue
			}
			return h, append([]byte(nil), body...)
		}
		n, err := s.c.Read(s.in)
		if n == 0 && err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return packet.Header{}, nil
			}
			s.t.Fatal(err)
		}
		s.r.Feed(s.in[:n])
	}
}

// expectAck reads the next packet and checks it is an acknowledgement t of id.
func (s *scripted) expectAck(t packet.Type, id uint16) {
	s.t.Helper()
	h, body := s.next(testenv.Timeout)
	var a packet.Ack
	if h.Type != t || a.Decode(h, body, packet.V5) != nil || a.PacketID != id {
		s.t.Fatalf("got %s (id %d), want %s of %d", h.Type, a.PacketID, t, id)
	}
}

// TestInAckWaits: a message from the remote that bifrost publishes to a persistent local
// subscriber is acknowledged to the remote (PUBACK, PUBREC) once the store has it, not
// before; at QoS 2 a PUBLISH the remote sends again (DUP) before its PUBREL is
// acknowledged again but not published twice, and the PUBREL is completed (fails
// without the held acknowledgement: the PUBACK comes while the store holds; and, for
// the DUP, without the bridge's QoS 2 packet ids). The check that the acknowledgement
// has not come is bounded: 300 ms in which one that does not wait arrives many times
// over.
func TestInAckWaits(t *testing.T) {
	for _, qos := range []uint8{1, 2} {
		t.Run("QoS"+strconv.Itoa(int(qos)), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			gs := &gateStore{}
			bc := bridgeConf("up", l.Addr().String(), conf.BridgeV5,
				conf.BridgeTopic{Pattern: "c/#", Direction: conf.BridgeIn, QoS: int(qos)})
			sb := startStoredWrap(t, filepath.Join(t.TempDir(), "store"), conf.EngineLog,
				func(st store.Store) store.Store { gs.Store = st; return gs }, bc)
			t.Cleanup(gs.release)
			br := sb.set.Bridges()[0]
			// A persistent subscriber here: the store keeps what is queued for it.
			_, local := clientQoS(t, sb.addr, "local-sub", false, "c/#", 2)
			remote := acceptBridge(t, l)

			gs.hold()
			p := packet.Publish{Topic: []byte("c/1"), Payload: []byte("m1"), QoS: qos, PacketID: 7}
			remote.send(&p)
			testenv.WaitFor(t, "the message published here", func() bool { return br.Stats().In == 1 })
			if h, _ := remote.next(300 * time.Millisecond); h.Type != 0 {
				t.Fatalf("%s before the store reported the message durable", h.Type)
			}
			want := packet.PUBACK
			if qos == 2 {
				want = packet.PUBREC
			}
			gs.release()
			remote.expectAck(want, 7)
			if qos == 2 {
				p.Dup = true
				remote.send(&p) // the PUBREC was lost, as far as the remote knows
				remote.expectAck(packet.PUBREC, 7)
				remote.send(&packet.Ack{PacketType: packet.PUBREL, PacketID: 7})
				remote.expectAck(packet.PUBCOMP, 7)
				if n := br.Stats().In; n != 1 {
					t.Fatalf("the DUP PUBLISH was published here again: %d in", n)
				}
			}
			testenv.WaitFor(t, "the message at the local subscriber", func() bool { return local.count("m1") > 0 })
			if n := local.count("m1"); n != 1 {
				t.Fatalf("the local subscriber got m1 %d times", n)
			}
		})
	}
}

// expectPublish reads the next packet and checks it is a PUBLISH of payload, with DUP as
// dup, and returns its packet id.
func (s *scripted) expectPublish(payload string, dup bool) uint16 {
	s.t.Helper()
	h, body := s.next(testenv.Timeout)
	var p packet.Publish
	if h.Type != packet.PUBLISH || p.Decode(h, body, packet.V5) != nil {
		s.t.Fatalf("got %s, want the PUBLISH of %s", h.Type, payload)
	}
	if string(p.Payload) != payload || p.Dup != dup {
		s.t.Fatalf("got PUBLISH %q dup %v, want %q dup %v", p.Payload, p.Dup, payload, dup)
	}
	return p.PacketID
}

// TestQoS2OutRestartKeepsPacketID: a QoS 2 message sent to the remote and not completed
// when bifrost stops is sent again after the restart under the same packet id, with DUP,
// whether its PUBREC came (the remote holds the id awaiting the PUBREL) or not; one
// completed is not sent again (fails without the stored packet id: the messages come
// again as new PUBLISHes under new ids, which a remote holding the old id would take for
// duplicates of what it holds).
func TestQoS2OutRestartKeepsPacketID(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := filepath.Join(t.TempDir(), "store")
	bc := bridgeConf("up", l.Addr().String(), conf.BridgeV5,
		conf.BridgeTopic{Pattern: "q/#", Direction: conf.BridgeOut, QoS: 2},
		conf.BridgeTopic{Pattern: "r/#", Direction: conf.BridgeIn, QoS: 2})
	sb := startStored(t, dir, conf.EngineLog, bc)
	remote := acceptBridge(t, l)
	for _, m := range []string{"m0", "m1", "m2"} {
		if err := sb.b.Publish("q/m", []byte(m), 2, false); err != nil {
			t.Fatal(err)
		}
	}
	ids := []uint16{remote.expectPublish("m0", false), remote.expectPublish("m1", false), remote.expectPublish("m2", false)}
	remote.send(&packet.Ack{PacketType: packet.PUBREC, PacketID: ids[0]})
	remote.expectAck(packet.PUBREL, ids[0])
	remote.send(&packet.Ack{PacketType: packet.PUBCOMP, PacketID: ids[0]})
	remote.send(&packet.Ack{PacketType: packet.PUBREC, PacketID: ids[1]})
	remote.expectAck(packet.PUBREL, ids[1])
	testenv.WaitFor(t, "m0 out of the stored queue", func() bool { return sb.set.Bridges()[0].Stats().Stored == 2 })
	sb.close()

	startStored(t, dir, conf.EngineLog, bc)
	remote = acceptBridge(t, l)
	if id := remote.expectPublish("m1", true); id != ids[1] {
		t.Fatalf("m1 sent again under packet id %d, was %d", id, ids[1])
	}
	if id := remote.expectPublish("m2", true); id != ids[2] {
		t.Fatalf("m2 sent again under packet id %d, was %d", id, ids[2])
	}
}

// TestReceiveMaximum: a 5.0 bridge tells the remote its window, max_inflight, in its
// CONNECT, so that a conforming remote has at most that many QoS 1 and 2 messages
// unacknowledged towards it (and the bridge keeps at most that many QoS 2 packet ids).
func TestReceiveMaximum(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bc := bridgeConf("up", l.Addr().String(), conf.BridgeV5, conf.BridgeTopic{Pattern: "c/#", Direction: conf.BridgeIn, QoS: 2})
	bc.MaxInflight = 7
	startBifrost(t, bc)
	remote := acceptBridge(t, l)
	if rm := remote.connect.Props.ReceiveMaximum; !rm.Set || rm.V != 7 {
		t.Fatalf("the bridge's CONNECT has Receive Maximum %+v, want 7", rm)
	}
}
