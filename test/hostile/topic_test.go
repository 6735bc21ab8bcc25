package hostile

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestEscapingTopics publishes to topic names built to reach subscribers they should not
// reach: path tricks, $share and $SYS names, look-alike separators, a leading BOM, a topic
// of thousands of levels. A topic name is matched level by level, literally
// [MQTT-4.7.3-4]; names starting with $ are not matched by filters starting with a
// wildcard [MQTT-4.7.2-1]. In each case a marker message published afterwards through the
// same broker proves that nothing else was coming.
func TestEscapingTopics(t *testing.T) {
	e := start(t, nil)
	h := e.healthy(t)
	t.Run("cases", func(t *testing.T) {
		for _, v := range []packet.Version{packet.V311, packet.V5} {
			run := func(name string, f func(t *testing.T, e *env, v packet.Version, id string)) {
				t.Run(v.String()+"/"+name, func(t *testing.T) {
					t.Parallel()
					f(t, e, v, fmt.Sprintf("%v-%s", v, name))
				})
			}
			run("dot-dot", testDotDot)
			run("share-as-topic-name", testShareAsTopic)
			run("sys-from-client", testSysFromClient)
			run("sys-by-will", testSysByWill)
			run("lookalike-separator", testLookalike)
			run("leading-bom", testBOM)
			run("deep-topic", testDeepTopic)
		}
	})
	h.check(t)
}

// subscriber connects a raw client subscribed at QoS 1 to filters.
func (e *env) subscriber(t *testing.T, v packet.Version, id string, filters ...string) *raw {
	r := e.dial(t, v)
	r.connect(id, nil)
	r.subscribe(1, 1, filters...)
	return r
}

// testDotDot: "a/../b" is three levels, "a", ".." and "b": it reaches "a/+/b", never "b".
func testDotDot(t *testing.T, e *env, v packet.Version, id string) {
	root := "dd-" + id
	victim := e.subscriber(t, v, id+"-victim", root+"/b")
	levels := e.subscriber(t, v, id+"-levels", root+"/a/+/b")
	pub := e.dial(t, v)
	pub.connect(id, nil)
	pub.publish(1, 1, root+"/a/../b", "escape")
	pub.publish(2, 1, root+"/a/./b", "escape")
	pub.publish(3, 1, root+"/b", "marker")
	levels.receiveTopic(root+"/a/../b", "escape")
	levels.receiveTopic(root+"/a/./b", "escape")
	victim.receiveTopic(root+"/b", "marker")
}

// testShareAsTopic: "$share/g/t" as a topic name is no way into group g of filter "t" (the
// $share prefix belongs to subscriptions, spec 4.8.2), and "#" does not match it.
// Whether the broker refuses the name or routes it nowhere, nobody receives it.
func testShareAsTopic(t *testing.T, e *env, v packet.Version, id string) {
	topic := "sh-" + id
	group := e.subscriber(t, v, id+"-group", "$share/g/"+topic)
	all := e.subscriber(t, v, id+"-all", "#")
	pub := e.dial(t, v)
	pub.connect(id, nil)
	pub.send(&packet.Publish{Topic: []byte("$share/g/" + topic), Payload: []byte("escape"), QoS: 1, PacketID: 1, Retain: true})
	ack := expect[*packet.Ack](pub) // accepted (5.0: no matching subscribers) or refused
	if v == packet.V5 && ack.Code == packet.Success {
		t.Errorf("PUBACK %v: a message to $share/g/%s reached a subscriber", ack.Code, topic)
	}
	t.Logf("PUBLISH to $share/g/%s answered with %v", topic, ack.Code)
	pub.publish(2, 1, topic, "marker")
	group.receiveTopic(topic, "marker")
	for {
		p := all.receive() // "#" sees the healthy client's rounds too
		if string(p.Topic) == topic {
			if string(p.Payload) != "marker" {
				t.Fatalf("# received %q %q before the marker", p.Topic, p.Payload)
			}
			break
		}
		if strings.HasPrefix(string(p.Topic), "$") {
			t.Fatalf("# received %q %q: a $ topic", p.Topic, p.Payload)
		}
	}
	// Nor is it retained where a later subscriber of the group's filter would find it.
	late := e.subscriber(t, v, id+"-late", topic)
	late.none()
}

// testSysFromClient: a client cannot publish into $SYS: its message, retained or not,
// reaches no $SYS subscriber and is not kept for later ones.
func testSysFromClient(t *testing.T, e *env, v packet.Version, id string) {
	topic := "$SYS/broker/spoof/" + id
	watcher := e.subscriber(t, v, id+"-watch", "$SYS/broker/spoof/"+id, "$SYS/broker/spoof/"+id+"/#")
	pub := e.dial(t, v)
	pub.connect(id, nil)
	pub.send(&packet.Publish{Topic: []byte(topic), Payload: []byte("spoofed"), QoS: 1, PacketID: 1, Retain: true})
	expect[*packet.Ack](pub)
	pub.send(&packet.Publish{Topic: []byte(topic + "/x"), Payload: []byte("spoofed"), QoS: 0})
	// The broker itself may publish there: its marker proves the client's came to nothing.
	if err := e.b.Publish(topic, []byte("marker"), 1, false); err != nil {
		t.Fatal(err)
	}
	watcher.receiveTopic(topic, "marker")
	late := e.subscriber(t, v, id+"-late", "$SYS/broker/spoof/"+id)
	late.none()
}

// testSysByWill: nor can it get into $SYS by its will: a will on a $SYS topic, published
// by the broker when the connection is lost, must not reach $SYS subscribers any more than
// the client's own PUBLISH would. The CONNECT is refused for it, as for a will the ACL
// denies: not authorized (v5 0x87, 3.1.1 return code 5).
func testSysByWill(t *testing.T, e *env, v packet.Version, id string) {
	topic := "$SYS/broker/will/" + id
	watcher := e.subscriber(t, v, id+"-watch", topic)
	r := e.dial(t, v)
	r.send(&packet.Connect{Version: v, ClientID: []byte(id), CleanStart: true, KeepAlive: 60,
		WillFlag: true, WillTopic: []byte(topic), WillPayload: []byte("spoofed"), WillQoS: 1, WillRetain: true})
	r.refused(false, packet.NotAuthorized)
	watcher.none()
	late := e.subscriber(t, v, id+"-late", topic)
	late.none()
}

// testLookalike: characters that look like separators or wildcards (U+2215 division
// slash, U+FF0B fullwidth plus, U+FF03 fullwidth number sign) are ordinary characters.
func testLookalike(t *testing.T, e *env, v packet.Version, id string) {
	root := "look-" + id
	sub := e.subscriber(t, v, id+"-sub", root+"/+")
	victim := e.subscriber(t, v, id+"-victim", root+"/a/b")
	pub := e.dial(t, v)
	pub.connect(id, nil)
	for i, name := range []string{"a\u2215b", "\uff0b", "\uff03"} {
		pub.publish(uint16(i+1), 1, root+"/"+name, "lookalike")
		sub.receiveTopic(root+"/"+name, "lookalike") // one level, matched by "+"
	}
	pub.publish(9, 1, root+"/a/b", "marker")
	victim.receiveTopic(root+"/a/b", "marker")
}

// testBOM: a leading U+FEFF is part of the name and must not be stripped [MQTT-1.5.4-3].
func testBOM(t *testing.T, e *env, v packet.Version, id string) {
	topic := "bom-" + id
	victim := e.subscriber(t, v, id+"-victim", topic)
	bom := e.subscriber(t, v, id+"-bom", "\ufeff"+topic)
	pub := e.dial(t, v)
	pub.connect(id, nil)
	pub.publish(1, 1, "\ufeff"+topic, "bom")
	pub.publish(2, 1, topic, "marker")
	bom.receiveTopic("\ufeff"+topic, "bom")
	victim.receiveTopic(topic, "marker")
}

// testDeepTopic: a topic name of 30,000 levels (all but one empty) and a filter of as
// many "+" levels are legal MQTT. The broker either serves them (the message reaches the
// subscriber) or refuses them as beyond its limits (limits.max_topic_levels): the filter
// with a failing SUBACK code, the PUBLISH with PUBACK or DISCONNECT 0x90 (topic name
// invalid) in 5.0, the close before. Either way it serves the next client.
func testDeepTopic(t *testing.T, e *env, v packet.Version, id string) {
	const levels = 30000
	root := "deep-" + id
	topic := root + strings.Repeat("/", levels-1)
	filter := root + strings.Repeat("/+", levels-1)
	sub := e.subscriber(t, v, id+"-sub", root+"/#")
	sub.send(&packet.Subscribe{PacketID: 2, Subscriptions: []packet.Subscription{{Filter: []byte(filter), QoS: 1}}})
	ack := expect[*packet.Suback](sub)
	if len(ack.Codes) != 1 || ack.Codes[0].IsError() && v == packet.V5 && !slices.Contains(refusedFilter, ack.Codes[0]) {
		t.Fatalf("SUBACK %v for a %d-level filter", ack.Codes, levels)
	}
	t.Logf("SUBSCRIBE to a %d-level filter: %v", levels, ack.Codes[0])

	pub := e.dial(t, v)
	pub.connect(id, nil)
	pub.send(&packet.Publish{Topic: []byte(topic), Payload: []byte("deep"), QoS: 1, PacketID: 1})
	var code packet.ReasonCode
	switch p := pub.nextOrEnd().(type) {
	case *packet.Ack:
		code = p.Code
	case *packet.Disconnect:
		code = p.Code
		if code != packet.TopicNameInvalid {
			t.Fatalf("DISCONNECT %v for a %d-level topic", code, levels)
		}
		pub.closed()
	case nil:
		code = packet.TopicNameInvalid // 3.1.1 has nothing else to say
	default:
		t.Fatalf("got %v for a PUBLISH", p.Type())
	}
	t.Logf("PUBLISH to a %d-level topic: %v", levels, code)
	if !code.IsError() {
		if p := sub.receive(); string(p.Topic) != topic {
			t.Fatalf("received a %d-byte topic, want the %d-byte one", len(p.Topic), len(topic))
		}
	} else if v == packet.V5 && code != packet.TopicNameInvalid {
		t.Fatalf("PUBACK %v for a %d-level topic, want success or 0x90", code, levels)
	}
	next := e.dial(t, v)
	next.connect(id+"-next", nil)
	next.publish(1, 1, root+"/x", "shallow")
	sub.receiveTopic(root+"/x", "shallow")
}

// refusedFilter are the SUBACK codes a 5.0 server may refuse a filter beyond its limits
// with (spec 3.9.3).
var refusedFilter = []packet.ReasonCode{packet.UnspecifiedError, packet.ImplementationSpecificError,
	packet.TopicFilterInvalid, packet.QuotaExceeded}
