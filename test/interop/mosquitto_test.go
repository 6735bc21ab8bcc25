package interop_test

// Interop with independent client implementations run as child processes: Eclipse
// Mosquitto's command-line clients (mosquitto_pub, mosquitto_sub 2.0.11, libmosquitto) over
// TCP, and Eclipse Paho for Python (1.6.1) over WebSocket, since Debian's Mosquitto clients
// speak no WebSocket. Each test starts its own broker in-process on free ports.
//
// Ordering is how these tests avoid sleeping: a subscriber prints its debug lines (-d), so
// the test waits for its SUBACK before publishing, and absence is shown by a marker: when a
// message that must not arrive would have been queued before a marker published later, the
// marker arriving first proves it was not sent.
//
// Spec rules the cases check are named beside them, as in docs/conformance.md.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// The protocol versions as mosquitto_pub/mosquitto_sub -V name them.
const (
	mqV31  = "mqttv31"
	mqV311 = "mqttv311"
	mqV5   = "mqttv5"
)

// TestMosquittoPubSub publishes one message with mosquitto_pub to a mosquitto_sub, for
// every QoS of publication and subscription in each protocol version, and across versions.
// The message arrives once, at the lower of the two QoS [MQTT-3.8.4-8] (3.1.1
// [MQTT-3.8.4-6]), with the retain flag clear.
func TestMosquittoPubSub(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	b := mqStartProcess(t, nil)
	type tc struct {
		subV, pubV     string
		subQoS, pubQoS int
	}
	var cases []tc
	for _, v := range []string{mqV31, mqV311, mqV5} {
		for sq := range 3 {
			for pq := range 3 {
				cases = append(cases, tc{v, v, sq, pq})
			}
		}
	}
	for _, sv := range []string{mqV31, mqV311, mqV5} {
		for _, pv := range []string{mqV31, mqV311, mqV5} {
			if sv != pv {
				for q := range 3 {
					cases = append(cases, tc{sv, pv, q, q})
				}
			}
		}
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("sub=%s,q%d/pub=%s,q%d", c.subV, c.subQoS, c.pubV, c.pubQoS), func(t *testing.T) {
			t.Parallel()
			topic := fmt.Sprintf("pubsub/%d/%s", i, c.subV)
			payload := fmt.Sprintf("hello from %s at QoS %d", c.pubV, c.pubQoS)
			sub := mqSub(t, "-p", mqPort(b.tcp), "-V", c.subV, "-t", topic, "-q", fmt.Sprint(c.subQoS),
				"-C", "1", "-W", "20", "-F", "%q %r %t %p")
			sub.waitSubscribed()
			mqPub(t, nil, "-p", mqPort(b.tcp), "-V", c.pubV, "-t", topic, "-q", fmt.Sprint(c.pubQoS), "-m", payload)
			sub.expect(fmt.Sprintf("%d 0 %s %s", min(c.subQoS, c.pubQoS), topic, payload))
			sub.wait()
		})
	}
}

// TestMosquittoOrder sends a stream of messages from one mosquitto_pub (-l, one message a
// line, several in flight) and checks they arrive in order [MQTT-4.6.0-6]; and a large
// message, which reaches the broker in many reads and leaves it in many writes.
func TestMosquittoOrder(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	b := mqStartProcess(t, nil)
	for _, v := range []string{mqV311, mqV5} {
		for q := range 3 {
			t.Run(fmt.Sprintf("%s/q%d/stream", v, q), func(t *testing.T) {
				t.Parallel()
				const n = 200
				topic := fmt.Sprintf("order/%s/%d", v, q)
				var in strings.Builder
				want := make([]string, n)
				for i := range n {
					fmt.Fprintf(&in, "message %03d\n", i)
					want[i] = fmt.Sprintf("%d %s message %03d", q, topic, i)
				}
				sub := mqSub(t, "-p", mqPort(b.tcp), "-V", v, "-t", topic, "-q", fmt.Sprint(q),
					"-C", fmt.Sprint(n), "-W", "20", "-F", "%q %t %p")
				sub.waitSubscribed()
				mqPub(t, []byte(in.String()), "-p", mqPort(b.tcp), "-V", v, "-t", topic, "-q", fmt.Sprint(q), "-l")
				// QoS 0 too: the broker sheds QoS 0 only for a consumer with over 64 KiB
				// pending, and these 200 messages are 4 KiB in all.
				sub.expect(want...)
				sub.wait()
			})
			t.Run(fmt.Sprintf("%s/q%d/large", v, q), func(t *testing.T) {
				t.Parallel()
				topic := fmt.Sprintf("large/%s/%d", v, q)
				payload := mqPayload(700 << 10)
				sub := mqSub(t, "-p", mqPort(b.tcp), "-V", v, "-t", topic, "-q", fmt.Sprint(q),
					"-C", "1", "-W", "20", "-F", "%q %l %t %p")
				sub.waitSubscribed()
				mqPub(t, payload, "-p", mqPort(b.tcp), "-V", v, "-t", topic, "-q", fmt.Sprint(q), "-s")
				if got, want := sub.next(), fmt.Sprintf("%d %d %s %s", q, len(payload), topic, payload); got != want {
					t.Fatalf("large message: got %d bytes (sha256 %s), want %d bytes (sha256 %s)",
						len(got), mqSum(got), len(want), mqSum(want))
				}
				sub.wait()
			})
		}
	}
}

// mqPayload returns n printable bytes without a newline, different at every offset.
func mqPayload(n int) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	p := make([]byte, n)
	x := uint32(2463534242)
	for i := range p {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		p[i] = alphabet[x%uint32(len(alphabet))]
	}
	return p
}

func mqSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

// TestMosquittoRetained stores a retained message, delivers it to a later subscriber with
// the retain flag set, and clears it with an empty retained message.
func TestMosquittoRetained(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	b := mqStartProcess(t, nil)
	port := mqPort(b.tcp)
	for _, v := range []string{mqV31, mqV311, mqV5} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			topic := "retained/" + v
			sub := func(count int) *mqProc {
				s := mqSub(t, "-p", port, "-V", v, "-t", topic, "-q", "2", "-C", fmt.Sprint(count), "-W", "20",
					"-F", "%r %q %l %t %p")
				s.waitSubscribed()
				return s
			}
			live := sub(2)
			mqPub(t, nil, "-p", port, "-V", v, "-t", topic, "-q", "1", "-r", "-m", "kept")

			// A new subscription gets the retained message with RETAIN 1 [MQTT-3.3.1-8]
			// (3.1.1 [MQTT-3.3.1-8]), at the QoS it was published with.
			late := sub(1)
			late.expect("1 1 4 " + topic + " kept")
			late.wait()

			// Clearing: an empty retained message removes it [MQTT-3.3.1-6], [MQTT-3.3.1-7]
			// (3.1.1 [MQTT-3.3.1-10], [MQTT-3.3.1-11]) and reaches existing subscribers as
			// a normal message. Existing subscriptions get RETAIN 0 [MQTT-3.3.1-12]
			// (3.1.1 [MQTT-3.3.1-9]).
			mqPub(t, nil, "-p", port, "-V", v, "-t", topic, "-q", "1", "-r", "-n")
			live.expect("0 1 4 "+topic+" kept", "0 1 0 "+topic+" ")
			live.wait()

			// Nothing is retained any more: a marker published after the subscription is
			// the first message the new subscriber sees.
			after := sub(1)
			mqPub(t, nil, "-p", port, "-V", v, "-t", topic, "-q", "1", "-m", "marker")
			after.expect("0 1 6 " + topic + " marker")
			after.wait()
		})
	}
	t.Run("wildcard", func(t *testing.T) {
		t.Parallel()
		for _, topic := range []string{"rw/a", "rw/b/c", "rw/b/d", "other/x"} {
			mqPub(t, nil, "-p", port, "-t", topic, "-q", "1", "-r", "-m", "at "+topic)
		}
		// Retained messages matching a wildcard filter, in any order.
		sub := mqSub(t, "-p", port, "-t", "rw/+/c", "-t", "rw/a", "-C", "2", "-W", "20", "-F", "%r %t %p")
		got := map[string]bool{sub.next(): true, sub.next(): true}
		sub.wait()
		for _, want := range []string{"1 rw/a at rw/a", "1 rw/b/c at rw/b/c"} {
			if !got[want] {
				t.Errorf("retained messages %v, want %q among them", got, want)
			}
		}
	})
}

// TestMosquittoUnsubscribe subscribes to two topics and unsubscribes from one (mosquitto_sub
// -U, in the same connection): UNSUBACK answers [MQTT-3.10.4-4] and messages to the topic
// left stop at once [MQTT-3.10.4-2], while the other subscription lives on.
func TestMosquittoUnsubscribe(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	b := mqStartProcess(t, nil)
	port := mqPort(b.tcp)
	for _, v := range []string{mqV31, mqV311, mqV5} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			keep, drop := "unsub/"+v+"/keep", "unsub/"+v+"/drop"
			sub := mqSub(t, "-p", port, "-V", v, "-t", keep, "-t", drop, "-U", drop, "-q", "1",
				"-C", "1", "-W", "20", "-F", "%t %p")
			sub.waitSubscribed()
			sub.waitDebug("received UNSUBACK")
			mqPub(t, nil, "-p", port, "-V", v, "-t", drop, "-q", "1", "-m", "must not arrive")
			mqPub(t, nil, "-p", port, "-V", v, "-t", keep, "-q", "1", "-m", "marker")
			sub.expect(keep + " marker")
			sub.wait()
		})
	}
}

// TestMosquittoKeepAlive lets mosquitto_sub idle with the smallest keep alive it accepts,
// 5 seconds: it sends PINGREQ and the broker answers PINGRESP [MQTT-3.12.4-1] on the same
// connection.
func TestMosquittoKeepAlive(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	b := mqStartProcess(t, nil)
	port := mqPort(b.tcp)
	for _, v := range []string{mqV311, mqV5} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			topic := "keepalive/" + v
			sub := mqSub(t, "-p", port, "-V", v, "-t", topic, "-k", "5", "-C", "1", "-W", "20", "-F", "%t %p")
			sub.waitSubscribed()
			sub.waitDebug("received PINGRESP")
			mqPub(t, nil, "-p", port, "-V", v, "-t", topic, "-m", "still here")
			sub.expect(topic + " still here")
			sub.wait()
			if n := strings.Count(sub.output(), "sending CONNECT"); n != 1 {
				t.Errorf("mosquitto_sub connected %d times, want once", n)
			}
		})
	}
}

// TestMosquittoWill kills a client with SIGKILL and checks that its will reaches another
// subscriber [MQTT-3.1.2-8], and that a normal DISCONNECT discards it [MQTT-3.1.2-10]
// (5.0 [MQTT-3.14.4-3]).
func TestMosquittoWill(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	// The large-publish cases send 1 MiB of payload: above the default maximum packet size.
	b := mqStartProcess(t, func(c *bifrost.Config) { c.MQTT.MaxPacketSize = 2 << 20 })
	port := mqPort(b.tcp)
	// watch subscribes to topic and waits for its SUBACK.
	watch := func(t *testing.T, v, topic, format string) *mqProc {
		w := mqSub(t, "-p", port, "-V", v, "-t", topic, "-q", "2", "-C", "1", "-W", "20", "-F", format)
		w.waitSubscribed()
		return w
	}
	// connected waits until the broker counts n clients.
	connected := func(t *testing.T, n int64) {
		testenv.WaitFor(t, fmt.Sprintf("%d connected clients", n), func() bool { return b.connections(t) == n })
	}
	versions := []string{mqV31, mqV311, mqV5}
	for _, v := range versions {
		for q := range 3 {
			t.Run(fmt.Sprintf("%s/q%d/killed", v, q), func(t *testing.T) {
				t.Parallel()
				topic := fmt.Sprintf("will/%s/%d", v, q)
				w := watch(t, v, topic, "%q %r %t %p")
				c := mqSub(t, "-p", port, "-V", v, "-t", "will/none", "-W", "30",
					"--will-topic", topic, "--will-payload", "gone", "--will-qos", fmt.Sprint(q))
				c.waitSubscribed()
				c.kill()
				w.expect(fmt.Sprintf("%d 0 %s gone", q, topic))
				w.wait()
			})
		}
		t.Run(v+"/retained", func(t *testing.T) {
			t.Parallel()
			topic := "will/retained/" + v
			c := mqSub(t, "-p", port, "-V", v, "-t", "will/none", "-W", "30",
				"--will-topic", topic, "--will-payload", "last words", "--will-qos", "1", "--will-retain")
			c.waitSubscribed()
			c.kill()
			// The will is retained [MQTT-3.1.2-17]: a subscriber that comes after it gets it.
			testenv.WaitFor(t, "the retained will", func() bool {
				out := mqExec(t, mqTool(t, "mosquitto_sub"), nil, "-p", port, "-V", v, "-t", topic,
					"-C", "1", "-W", "20", "-F", "%r %t %p", "--retained-only")
				return out == "1 "+topic+" last words\n"
			})
		})
	}
	t.Run("v5/properties", func(t *testing.T) {
		t.Parallel()
		topic := "will/props"
		w := watch(t, mqV5, topic, "%P|%C|%F|%R|%D|%t %p")
		c := mqSub(t, "-p", port, "-V", mqV5, "-t", "will/none", "-W", "30",
			"--will-topic", topic, "--will-payload", "gone",
			"-D", "will", "user-property", "why", "killed",
			"-D", "will", "content-type", "text/plain",
			"-D", "will", "payload-format-indicator", "1",
			"-D", "will", "response-topic", "will/answer",
			"-D", "will", "correlation-data", "c0ffee")
		c.waitSubscribed()
		c.kill()
		w.expect("why:killed|text/plain|1|will/answer|c0ffee|" + topic + " gone")
		w.wait()
	})
	// A Payload Format Indicator the spec does not describe is accepted and forwarded
	// unaltered [MQTT-3.3.2-4] (docs/conformance.md).
	t.Run("v5/payload-format-unknown", func(t *testing.T) {
		t.Parallel()
		topic := "will/format"
		w := watch(t, mqV5, topic, "%F|%t %p")
		c := mqSub(t, "-p", port, "-V", mqV5, "-t", "will/none", "-W", "30",
			"--will-topic", topic, "--will-payload", "gone", "-D", "will", "payload-format-indicator", "2")
		c.waitSubscribed()
		c.kill()
		w.expect("2|" + topic + " gone")
		w.wait()
	})
	for _, v := range versions {
		t.Run(v+"/disconnected", func(t *testing.T) {
			// Not parallel: it counts the broker's clients.
			topic := "will/clean/" + v
			w := watch(t, v, topic, "%t %p")
			connected(t, 1)
			mqPub(t, nil, "-p", port, "-V", v, "-t", "will/other", "-m", "x",
				"--will-topic", topic, "--will-payload", "must not be sent")
			connected(t, 1) // the publisher's connection is closed, without a will
			mqPub(t, nil, "-p", port, "-V", v, "-t", topic, "-m", "marker")
			w.expect(topic + " marker")
			w.wait()
		})
	}
	// A large PUBLISH followed at once by DISCONNECT and the close of the socket: the
	// broker must read all of it, deliver the message and, having read the DISCONNECT,
	// discard the will [MQTT-3.1.2-10], [MQTT-3.14.4-3].
	for _, v := range []string{mqV311, mqV5} {
		t.Run(v+"/disconnected-after-large-publish", func(t *testing.T) {
			topic := "will/large/" + v
			w := watch(t, v, topic, "%t %p")
			data := mqSub(t, "-p", port, "-V", v, "-t", topic+"/data", "-C", "1", "-W", "20", "-F", "%t %l")
			data.waitSubscribed()
			connected(t, 2)
			payload := mqPayload(1 << 20)
			mqPub(t, payload, "-p", port, "-V", v, "-t", topic+"/data", "-s",
				"--will-topic", topic, "--will-payload", "must not be sent")
			// The publisher is gone (at most 2, as the will, wrongly sent, would end w).
			testenv.WaitFor(t, "the publisher to be gone", func() bool { return b.connections(t) <= 2 })
			mqPub(t, nil, "-p", port, "-V", v, "-t", topic, "-m", "marker")
			w.expect(topic + " marker")
			w.wait()
			data.expect(fmt.Sprintf("%s/data %d", topic, len(payload)))
			data.wait()
		})
	}
	// 5.0: a will delay longer than the session's life does not hold the will back: it is
	// published when the session ends (3.1.3.2.2), here at once with session expiry 0.
	t.Run("v5/delay-beyond-session", func(t *testing.T) {
		topic := "will/delay/ends"
		w := watch(t, mqV5, topic, "%t %p")
		c := mqSub(t, "-p", port, "-V", mqV5, "-t", "will/none", "-W", "30", "-x", "0",
			"--will-topic", topic, "--will-payload", "session ended", "-D", "will", "will-delay-interval", "3600")
		c.waitSubscribed()
		c.kill()
		w.expect(topic + " session ended")
		w.wait()
	})
	// 5.0: a client that reconnects within the will delay keeps its will unsent
	// [MQTT-3.1.3-9].
	t.Run("v5/delay-reconnect", func(t *testing.T) {
		topic := "will/delay/back"
		w := watch(t, mqV5, topic, "%t %p")
		args := []string{"-p", port, "-V", mqV5, "-i", "will-delay-client", "-c", "-x", "3600", "-t", "will/none",
			"-W", "30", "--will-topic", topic, "--will-payload", "must not be sent",
			"-D", "will", "will-delay-interval", "3600"}
		c := mqSub(t, args...)
		c.waitSubscribed()
		c.kill()
		connected(t, 1)
		again := mqSub(t, args...)
		again.waitSubscribed()
		mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-m", "marker")
		w.expect(topic + " marker")
		w.wait()
	})
}

// TestMosquittoProperties checks that MQTT 5 publication properties set by mosquitto_pub
// -D reach a mosquitto_sub unchanged [MQTT-3.3.2-4], [MQTT-3.3.2-15], [MQTT-3.3.2-16],
// [MQTT-3.3.2-17], [MQTT-3.3.2-18], [MQTT-3.3.2-19], [MQTT-3.3.2-20], with the message
// expiry counted down [MQTT-3.3.2-6].
func TestMosquittoProperties(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	b := mqStartProcess(t, nil)
	port := mqPort(b.tcp)
	t.Run("publish", func(t *testing.T) {
		t.Parallel()
		topic := "props/publish"
		sub := mqSub(t, "-p", port, "-V", mqV5, "-t", topic, "-q", "1", "-C", "1", "-W", "20",
			"-F", "%P|%C|%E|%F|%R|%D|%t %p")
		sub.waitSubscribed()
		mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-q", "1", "-m", `{"t":21.5}`,
			"-D", "publish", "user-property", "k", "v",
			"-D", "publish", "user-property", "k", "again", // repeated keys stay, in order
			"-D", "publish", "user-property", "unit", "°C",
			"-D", "publish", "content-type", "application/json",
			"-D", "publish", "message-expiry-interval", "60",
			"-D", "publish", "payload-format-indicator", "1",
			"-D", "publish", "response-topic", "props/reply",
			"-D", "publish", "correlation-data", "req-17")
		got := strings.Split(sub.next(), "|")
		sub.wait()
		want := []string{"k:v k:again unit:°C", "application/json", "60", "1", "props/reply", "req-17", topic + ` {"t":21.5}`}
		if len(got) != len(want) {
			t.Fatalf("got %q, want the fields %q", got, want)
		}
		if e := mqAtoi(t, "message expiry", got[2]); e < 1 || e > 60 {
			t.Errorf("message expiry interval %d, want 1..60", e)
		}
		got[2] = "60"
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("field %d = %q, want %q (all: %q)", i, got[i], want[i], got)
			}
		}
	})
	t.Run("payload-format-unknown", func(t *testing.T) {
		t.Parallel()
		// A Payload Format Indicator the spec does not describe is acknowledged (mosquitto_pub
		// -q 1 fails without a successful PUBACK) and forwarded unaltered [MQTT-3.3.2-4].
		topic := "props/format"
		sub := mqSub(t, "-p", port, "-V", mqV5, "-t", topic, "-q", "1", "-C", "2", "-W", "20", "-F", "%F|%t %p")
		sub.waitSubscribed()
		for _, f := range []string{"200", "255"} {
			mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-q", "1", "-m", "f"+f,
				"-D", "publish", "payload-format-indicator", f)
			sub.expect(f + "|" + topic + " f" + f)
		}
		sub.wait()
	})
	t.Run("to-v311", func(t *testing.T) {
		t.Parallel()
		// A 3.1.1 subscriber gets the payload of a 5.0 publication with properties.
		topic := "props/old"
		sub := mqSub(t, "-p", port, "-V", mqV311, "-t", topic, "-C", "1", "-W", "20", "-F", "%t %p")
		sub.waitSubscribed()
		mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-m", "plain",
			"-D", "publish", "user-property", "k", "v", "-D", "publish", "content-type", "text/plain")
		sub.expect(topic + " plain")
		sub.wait()
	})
	t.Run("subscription-identifier", func(t *testing.T) {
		t.Parallel()
		// The subscription identifier comes back with the messages the subscription
		// matched [MQTT-3.3.4-3]; a subscription without one gets none.
		with := mqSub(t, "-p", port, "-V", mqV5, "-t", "props/subid/+", "-C", "1", "-W", "20",
			"-D", "subscribe", "subscription-identifier", "42", "-F", "[%S] %t %p")
		with.waitSubscribed()
		without := mqSub(t, "-p", port, "-V", mqV5, "-t", "props/subid/#", "-C", "1", "-W", "20", "-F", "[%S] %t %p")
		without.waitSubscribed()
		mqPub(t, nil, "-p", port, "-V", mqV5, "-t", "props/subid/x", "-m", "m")
		with.expect("[42] props/subid/x m")
		without.expect("[] props/subid/x m")
		with.wait()
		without.wait()
	})
	t.Run("topic-alias", func(t *testing.T) {
		t.Parallel()
		// mosquitto_pub -l with a topic alias sends the topic once, then the alias alone
		// [MQTT-3.3.2-12]; subscribers see the full topic every time.
		topic := "props/alias"
		sub := mqSub(t, "-p", port, "-V", mqV5, "-t", topic, "-q", "1", "-C", "3", "-W", "20", "-F", "%A|%t %p")
		sub.waitSubscribed()
		mqPub(t, []byte("one\ntwo\nthree\n"), "-p", port, "-V", mqV5, "-t", topic, "-q", "1", "-l",
			"-D", "publish", "topic-alias", "3")
		sub.expect("|"+topic+" one", "|"+topic+" two", "|"+topic+" three")
		sub.wait()
	})
	t.Run("expiry", func(t *testing.T) {
		t.Parallel()
		// Messages queued for an offline session: the expired one is dropped
		// [MQTT-3.3.2-5], the other has waited and its expiry is counted down
		// [MQTT-3.3.2-6]. Time passing is what is tested, so this case waits for the clock.
		topic := "props/expiry"
		args := []string{"-p", port, "-V", mqV5, "-i", "expiry-client", "-c", "-x", "3600", "-t", topic, "-q", "1"}
		first := mqSub(t, append(args, "-E")...)
		first.waitSubscribed()
		first.wait()
		mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-q", "1", "-m", "stale",
			"-D", "publish", "message-expiry-interval", "1")
		sent := time.Now()
		mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-q", "1", "-m", "counted",
			"-D", "publish", "message-expiry-interval", "100")
		mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-q", "1", "-m", "fresh")
		for time.Since(sent) < 2100*time.Millisecond {
			time.Sleep(time.Until(sent.Add(2100 * time.Millisecond)))
		}
		again := mqSub(t, append(args, "-C", "2", "-W", "20", "-F", "%E|%t %p")...)
		got := again.next()
		again.expect("|" + topic + " fresh")
		again.wait()
		e, rest, _ := strings.Cut(got, "|")
		if rest != topic+" counted" {
			t.Fatalf("first message %q, want the one published with expiry 100 (the expired one must be dropped)", got)
		}
		if n := mqAtoi(t, "message expiry", e); n < 1 || n > 98 {
			t.Errorf("message expiry interval %d after waiting over 2s, want 1..98", n)
		}
	})
}

// TestMosquittoInflightExpiry stops a persistent 5.0 subscriber (SIGSTOP) so that it
// cannot acknowledge, publishes a QoS 1 or 2 message with a 1 second expiry to it, kills it
// and reconnects after the expiry has passed. The message was in flight, its delivery
// started: the broker must send it again, DUP set, when the session resumes
// [MQTT-4.4.0-1], and for QoS 2 must not apply the expiry at all [MQTT-4.3.3-7];
// [MQTT-3.3.2-5] lets it drop only copies whose delivery has not started. Time passing is
// what is tested, so this test waits for the clock.
func TestMosquittoInflightExpiry(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	b := mqStartProcess(t, nil)
	port := mqPort(b.tcp)
	for _, q := range []string{"1", "2"} {
		t.Run("q"+q, func(t *testing.T) {
			// Not parallel: it counts the broker's clients.
			topic := "inflight/" + q
			args := []string{"-p", port, "-V", mqV5, "-i", "inflight-" + q, "-c", "-x", "3600", "-t", topic, "-q", q}
			sub := mqSub(t, append(args, "-W", "30")...)
			sub.waitSubscribed()
			pause(t, sub.cmd.Process)
			// Once mosquitto_pub has its PUBACK (PUBREC), the message is in the stopped
			// subscriber's window: the broker routes a PUBLISH before acknowledging it.
			mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-q", q, "-m", "in flight",
				"-D", "publish", "message-expiry-interval", "1")
			sent := time.Now()
			sub.kill()
			testenv.WaitFor(t, "the subscriber to be gone", func() bool { return b.connections(t) == 0 })
			for time.Since(sent) < 2100*time.Millisecond {
				time.Sleep(time.Until(sent.Add(2100 * time.Millisecond)))
			}
			again := mqSub(t, append(args, "-C", "2", "-W", "20", "-F", "%q %t %p")...)
			again.waitSubscribed()
			mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-q", q, "-m", "marker")
			again.expect(q+" "+topic+" in flight", q+" "+topic+" marker")
			again.wait()
			if !strings.Contains(again.output(), "received PUBLISH (d1, q"+q) {
				t.Errorf("the message was sent again without DUP:\n%s", again.output())
			}
		})
	}
}

// TestMosquittoSharedQoS2 has a QoS 2 message of a shared subscription in flight to a
// member that stops answering (SIGSTOP) and then dies with its session kept. The message
// must not go to another member [MQTT-4.8.2-5]; the delivery is completed to the first one
// when it reconnects [MQTT-4.8.2-4].
func TestMosquittoSharedQoS2(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	b := mqStartProcess(t, nil)
	port := mqPort(b.tcp)
	const filter, topic = "$share/g/shared/q2", "shared/q2"
	first := []string{"-p", port, "-V", mqV5, "-i", "member-1", "-c", "-x", "3600", "-t", filter, "-q", "2"}
	m1 := mqSub(t, append(first, "-W", "30")...)
	m1.waitSubscribed()
	pause(t, m1.cmd.Process)
	// The only member gets it; once mosquitto_pub is done, it is in member-1's window.
	mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-q", "2", "-m", "exactly once")
	m2 := mqSub(t, "-p", port, "-V", mqV5, "-i", "member-2", "-t", filter, "-q", "2", "-C", "1", "-W", "20", "-F", "%t %p")
	m2.waitSubscribed()
	m1.kill()
	// At most 1: member-2 ends after one message, a wrongly redistributed one included.
	testenv.WaitFor(t, "member-1 to be gone", func() bool { return b.connections(t) <= 1 })
	// member-2 is the only member online: the marker goes to it, and must be the first
	// message it gets.
	mqPub(t, nil, "-p", port, "-V", mqV5, "-t", topic, "-q", "2", "-m", "marker")
	m2.expect(topic + " marker")
	m2.wait()
	back := mqSub(t, append(first, "-C", "1", "-W", "20", "-F", "%t %p")...)
	back.expect(topic + " exactly once")
	back.wait()
}

// TestMosquittoSys reads the $SYS topics, published every sys_interval, and checks that
// wildcards starting the filter do not match them [MQTT-4.7.2-1].
func TestMosquittoSys(t *testing.T) {
	mqTool(t, "mosquitto_sub")
	b := mqStartProcess(t, func(c *bifrost.Config) {
		iv := conf.Duration(20 * time.Millisecond)
		c.SysInterval = &iv
	})
	port := mqPort(b.tcp)
	for _, v := range []string{mqV311, mqV5} {
		t.Run(v, func(t *testing.T) {
			// Retained: present at once for a new subscriber. A live publication may come
			// between the SUBACK and the retained messages, so look among the first few.
			const n = 6
			sub := mqSub(t, "-p", port, "-V", v, "-t", "$SYS/broker/version", "-t", "$SYS/broker/uptime",
				"-C", fmt.Sprint(n), "-W", "20", "-F", "%r %t %p")
			got := map[string]string{}
			for range n {
				f := strings.SplitN(sub.next(), " ", 3)
				if len(f) != 3 {
					t.Fatalf("$SYS message %q", f)
				}
				if f[0] == "1" {
					got[f[1]] = f[2]
				}
			}
			sub.wait()
			if !strings.HasPrefix(got["$SYS/broker/version"], "bifrost ") {
				t.Errorf("$SYS/broker/version = %q", got["$SYS/broker/version"])
			}
			if !strings.HasSuffix(got["$SYS/broker/uptime"], " seconds") {
				t.Errorf("$SYS/broker/uptime = %q", got["$SYS/broker/uptime"])
			}

			// Periodic: -R skips the retained copy, so what arrives was published after the
			// subscription; this subscriber is connected, so the count is at least 1.
			live := mqSub(t, "-p", port, "-V", v, "-t", "$SYS/broker/clients/connected", "-R", "-C", "1", "-W", "20", "-F", "%r %p")
			f := strings.Fields(live.next())
			live.wait()
			if len(f) != 2 || f[0] != "0" || mqAtoi(t, "clients connected", f[1]) < 1 {
				t.Errorf("$SYS/broker/clients/connected: %q, want a live count of at least 1", f)
			}

			// "#" and "+/..." do not match $SYS topics: the marker comes first although
			// $SYS messages are retained and published every 20ms.
			all := mqSub(t, "-p", port, "-V", v, "-t", "#", "-t", "+/broker/uptime", "-t", "+/+/clients/#",
				"-C", "1", "-W", "20", "-F", "%t %p")
			all.waitSubscribed()
			mqPub(t, nil, "-p", port, "-V", v, "-t", "sys/marker", "-m", "marker")
			all.expect("sys/marker marker")
			all.wait()
		})
	}
}

// TestMosquittoChildProcessFDs checks that a child process of a program embedding the
// broker inherits none of the broker's descriptors: the connections' sockets, the event
// loops' epoll and eventfd descriptors. An inherited socket outlives the broker's close (the
// client is not told until the child exits), and an epoll registration follows the open
// file, not the descriptor number: when the broker closes a socket that a child still
// holds, the poller keeps reporting that socket's events under a number the broker may
// already have given to a new connection, which it then serves or closes by mistake.
// Every test here that runs a client as a child process depends on this.
func TestMosquittoChildProcessFDs(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd on this system")
	}
	b := mqStart(t, nil)
	var conns []net.Conn
	for _, addr := range []string{b.tcp, b.ws} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	// The broker has taken both connections over once a CONNECT is answered.
	for i, c := range conns {
		if err := mqHandshake(c, i == 1, i == 1, fmt.Sprint("fd-check-", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The child lists its descriptors other than 0, 1 and 2 and the one ls reads.
	out := mqExec(t, "/bin/sh", nil, "-c", `for f in /proc/self/fd/*; do n=${f##*/}; [ "$n" -gt 2 ] && echo "$n $(readlink "$f")"; done; true`)
	var sockets, pollers []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case strings.Contains(line, "socket:"):
			sockets = append(sockets, line)
		case strings.Contains(line, "anon_inode:"):
			pollers = append(pollers, line)
		}
	}
	if len(sockets) > 0 {
		t.Errorf("a child process inherits %d sockets (not close-on-exec):\n%s", len(sockets), strings.Join(sockets, "\n"))
	}
	if len(pollers) > 0 {
		// Harmless to correctness (a child holding them changes nothing the broker sees),
		// but still descriptors every child keeps open.
		t.Logf("a child process inherits %d epoll/eventfd descriptors:\n%s", len(pollers), strings.Join(pollers, "\n"))
	}
}

// mqPython returns a Python 3 interpreter that has Eclipse Paho (Debian's python3-paho-mqtt);
// the one on PATH first, then the system's, which a version manager may hide.
func mqPython(t *testing.T) string {
	t.Helper()
	var candidates []string
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	candidates = append(candidates, "/usr/bin/python3")
	for _, p := range candidates {
		if exec.Command(p, "-c", "import paho.mqtt.client").Run() == nil {
			return p
		}
	}
	testenv.Need(t, false, "python3 with paho-mqtt (apt-get install -y python3-paho-mqtt)")
	return ""
}

// TestPyPahoWebSocket publishes and subscribes over MQTT over WebSocket with Eclipse Paho
// for Python (testdata/mq_ws_pubsub.py): a subscriber and a publisher on the /mqtt path,
// MQTT 3.1.1 and 5.0, QoS 0 to 2, a message larger than 64 KiB among small ones (the
// WebSocket 64-bit length) and, in 5.0, a user property.
func TestPyPahoWebSocket(t *testing.T) {
	python := mqPython(t)
	script, err := filepath.Abs(filepath.Join("testdata", "mq_ws_pubsub.py"))
	if err != nil {
		t.Fatal(err)
	}
	b := mqStartProcess(t, nil)
	for _, v := range []string{"3.1.1", "5"} {
		for q := range 3 {
			t.Run(fmt.Sprintf("v%s/q%d", v, q), func(t *testing.T) {
				t.Parallel()
				topic := fmt.Sprintf("ws/%s/%d", v, q)
				out := mqExec(t, python, nil, script, mqPort(b.ws), "/mqtt", v, fmt.Sprint(q), topic)
				var want strings.Builder
				for i, size := range mqWSSizes {
					fmt.Fprintf(&want, "%d %s %d %s", q, topic, size, mqWSPayload(i, size))
					if v == "5" {
						fmt.Fprintf(&want, " [('seq', '%d')]", i)
					}
					want.WriteByte('\n')
				}
				if out != want.String() {
					t.Errorf("received:\n%s\nwant:\n%s", out, want.String())
				}
			})
		}
	}
}

// mqWSSizes are the payload sizes mq_ws_pubsub.py sends, in order.
var mqWSSizes = []int{5, 0, 70000, 125, 126, 65535, 3}

// mqWSPayload is what mq_ws_pubsub.py prints of message i: its first 16 bytes.
func mqWSPayload(i, size int) string {
	return strings.Repeat(string(rune('a'+i)), min(size, 16))
}
