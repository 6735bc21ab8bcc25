#!/usr/bin/env python3
"""MQTT over WebSocket with Eclipse Paho for Python (Debian's python3-paho-mqtt 1.6.1).

Usage: mq_ws_pubsub.py PORT PATH VERSION QOS TOPIC
  VERSION is 3.1.1 or 5.

Connects a subscriber and a publisher (client ids sub-TOPIC and pub-TOPIC, so that runs
with different topics may share a broker) to ws://127.0.0.1:PORT/PATH, subscribes to TOPIC at
QOS, publishes the messages below at QOS (in 5.0 each with the user property seq=<i>) and
prints every message received, one line each, in the order received:

  <qos> <topic> <payload length> <first 16 payload bytes>[ <user properties>]

Payload i is the letter 'a'+i repeated SIZES[i] times. Exits 0 once every message has
arrived, 1 with the reason on stderr if anything fails or takes longer than TIMEOUT seconds.
Run by TestPyPahoWebSocket (mosquitto_test.go), which knows SIZES as mqWSSizes.
"""

import sys
import threading

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

SIZES = [5, 0, 70000, 125, 126, 65535, 3]
TIMEOUT = 15


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def code(rc):
    """A reason code as an int, from an int (3.1.1) or a ReasonCodes (5.0)."""
    return rc if isinstance(rc, int) else rc.value


def connect(name, port, path, v5):
    proto = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
    kwargs = {} if v5 else {"clean_session": True}
    c = mqtt.Client(client_id=name, protocol=proto, transport="websockets", **kwargs)
    c.ws_set_options(path=path)
    connected = threading.Event()
    result = {}

    def on_connect(client, userdata, flags, rc, properties=None):
        result["rc"] = code(rc)
        connected.set()

    c.on_connect = on_connect
    if v5:
        c.connect("127.0.0.1", port, keepalive=30, clean_start=True)
    else:
        c.connect("127.0.0.1", port, keepalive=30)
    c.loop_start()
    if not connected.wait(TIMEOUT):
        fail("%s: no CONNACK" % name)
    if result["rc"] != 0:
        fail("%s: CONNACK code %d" % (name, result["rc"]))
    return c


def main():
    port, path, version, qos, topic = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    v5 = version == "5"

    lock = threading.Lock()
    lines = []
    all_in = threading.Event()
    subscribed = threading.Event()
    granted = []

    sub = connect("sub-" + topic, port, path, v5)

    def on_subscribe(client, userdata, mid, codes, properties=None):
        granted.extend(code(c) for c in codes)
        subscribed.set()

    def on_message(client, userdata, msg):
        line = "%d %s %d %s" % (msg.qos, msg.topic, len(msg.payload), msg.payload[:16].decode())
        if v5:
            line += " %s" % (getattr(msg.properties, "UserProperty", None),)
        with lock:
            lines.append(line)
            if len(lines) == len(SIZES):
                all_in.set()

    sub.on_subscribe = on_subscribe
    sub.on_message = on_message
    sub.subscribe(topic, qos=qos)
    if not subscribed.wait(TIMEOUT):
        fail("no SUBACK")
    if granted != [qos]:
        fail("SUBACK granted %r, want [%d]" % (granted, qos))

    pub = connect("pub-" + topic, port, path, v5)
    for i, size in enumerate(SIZES):
        props = None
        if v5:
            props = Properties(PacketTypes.PUBLISH)
            props.UserProperty = ("seq", str(i))
        info = pub.publish(topic, bytes([ord("a") + i]) * size, qos=qos, properties=props)
        info.wait_for_publish(TIMEOUT)  # QoS 1/2: until PUBACK / PUBCOMP
        if not info.is_published():
            fail("message %d: not acknowledged" % i)

    ok = all_in.wait(TIMEOUT)
    with lock:
        for line in lines:
            print(line)
    for c in (pub, sub):
        c.disconnect()
        c.loop_stop()
    if not ok:
        fail("received %d of %d messages" % (len(lines), len(SIZES)))


if __name__ == "__main__":
    main()
