package hostile

import (
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// slowTimeout is the mqtt.connect_timeout of the slowloris cases; dribbleFor is how long a
// dribbling attacker keeps going before the case decides the broker let it stay.
const (
	slowTimeout = time.Second
	dribbleFor  = slowTimeout + 4*time.Second
)

// TestSlowloris: connections that never complete a packet must not stay. A CONNECT that
// stops halfway, or comes one byte a second, is closed after mqtt.connect_timeout; after
// CONNECT, a packet that never completes is no Control Packet, so the connection is
// closed once 1.5 times the keep alive passes without one ([MQTT-3.1.2-22] in 5.0,
// [MQTT-3.1.2-24] in 3.1.1), however many bytes trickle in.
func TestSlowloris(t *testing.T) {
	e := start(t, func(c *conf.Config) { c.MQTT.ConnectTimeout = conf.Duration(slowTimeout) })
	h := e.healthy(t)
	var subs []sub
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		subs = append(subs,
			sub{v.String() + "/connect-stops-halfway", func(t *testing.T) {
				r := e.dial(t, v)
				t0 := time.Now()
				r.sendBytes(connectBytes(v, "half", nil)[:7])
				r.closed()
				if d := time.Since(t0); d < slowTimeout-300*time.Millisecond {
					t.Errorf("closed after %v, before the connect timeout of %v", d, slowTimeout)
				}
			}},
			sub{v.String() + "/connect-one-byte-a-second", func(t *testing.T) {
				b := connectBytes(v, "slowloris-client-with-a-long-id", nil)
				if d := dribble(e.dial(t, v), b[:len(b)-1], time.Second); d < 0 {
					t.Fatalf("a CONNECT dribbled one byte a second was not closed within %v: the connect timeout of %v must be absolute", dribbleFor, slowTimeout)
				} else {
					t.Logf("closed %v after the first byte", d.Round(time.Millisecond))
				}
			}},
			sub{v.String() + "/packet-never-completes", func(t *testing.T) {
				r := e.dial(t, v)
				r.connect(v.String()+"-trickle", func(c *packet.Connect) { c.KeepAlive = 1 })
				// A PUBLISH promising 16,383 bytes, within the packet size limit.
				b := append([]byte{0x30, 0xff, 0x7f}, str("trickle")...)
				b = append(b, make([]byte, 64)...)
				d := dribble(r, b, 500*time.Millisecond)
				switch {
				case d < 0:
					t.Fatalf("a packet dribbled after CONNECT kept the connection %v without any complete Control Packet, past 1.5 x the keep alive of 1s [MQTT-3.1.2-22]", dribbleFor)
				case d < 1500*time.Millisecond-300*time.Millisecond:
					t.Errorf("closed %v after the first byte, before 1.5 x the keep alive of 1s", d)
				default:
					t.Logf("closed %v after the first byte", d.Round(time.Millisecond))
				}
			}},
			sub{v.String() + "/packet-stops-halfway", func(t *testing.T) {
				r := e.dial(t, v)
				r.connect(v.String()+"-halfway", func(c *packet.Connect) { c.KeepAlive = 1 })
				t0 := time.Now()
				r.sendBytes(publishRaw(v, 0x30, "halfway", 0, nil)[:4])
				// A 5.0 client may be told why first: 0x8D, keep alive timeout.
				if p := r.nextOrEnd(); p != nil {
					if d, ok := p.(*packet.Disconnect); !ok || v != packet.V5 || d.Code != packet.KeepAliveTimeout {
						t.Fatalf("got %v %+v, want the close or (5.0) DISCONNECT 0x8D", p.Type(), p)
					}
					r.closed()
				}
				if d := time.Since(t0); d < 1500*time.Millisecond-300*time.Millisecond {
					t.Errorf("closed after %v, before 1.5 x the keep alive of 1s", d)
				}
			}})
	}
	together(t, subs...)
	h.check(t)
}

// dribble writes b one byte every gap until the broker closes the connection, and
// returns how long after the first byte that was, or -1 if dribbleFor passed first (or b
// ran out).
func dribble(r *raw, b []byte, gap time.Duration) time.Duration {
	t0 := time.Now()
	for i := range b {
		if time.Since(t0) > dribbleFor {
			break
		}
		if err := r.write(b[i : i+1]); err != nil {
			return time.Since(t0)
		}
		select {
		case <-r.done:
			return time.Since(t0)
		case p := <-r.in:
			if p.Type() == packet.DISCONNECT {
				<-r.done
				return time.Since(t0)
			}
			r.t.Fatalf("got %v %+v while dribbling", p.Type(), p)
		case <-time.After(gap):
		}
	}
	return -1
}
