#!/usr/bin/env python3
"""edge-surge.py: the raw MQTT clients bench/edge-memcap.sh needs and bifrost-bench has not.

  probe ADDR VERSION          one CONNECT (VERSION 4: 3.1.1, 5: 5.0); prints the CONNACK's
                              return / reason code, or "closed" / "timeout"
  probes ADDR N SECS          N probes, alternating 3.1.1 and 5.0, over SECS seconds;
                              prints a JSON count of the codes per version
  recover ADDR SECS           probes every 0.5 s until a 3.1.1 and a 5.0 CONNECT are both
                              accepted; prints the seconds it took (or "never" after SECS)
  slow ADDR N TOPIC SECS      N 3.1.1 subscribers to TOPIC at QoS 0 with a 4 KiB receive
                              buffer that never read after their SUBACK, held SECS seconds
  flood ADDR TOPIC RATE SECS SIZE
                              one publisher of QoS 0 messages of SIZE bytes at RATE a
                              second for SECS seconds; prints how many it wrote

Every loop is bounded in count and time; sockets go to ADDR only (loopback in the script).
"""
import json
import socket
import struct
import sys
import time


def varint(n):
    out = bytearray()
    while True:
        b = n % 128
        n //= 128
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def mqtt_str(s):
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def connect_packet(cid, version, keepalive=0):
    var = mqtt_str("MQTT") + bytes([version, 0x02]) + struct.pack(">H", keepalive)
    if version == 5:
        var += b"\x00"  # no properties
    body = var + mqtt_str(cid)
    return b"\x10" + varint(len(body)) + body


def subscribe_packet(topic, pid=1):
    body = struct.pack(">H", pid) + mqtt_str(topic) + b"\x00"
    return b"\x82" + varint(len(body)) + body


def publish_packet(topic, payload):
    body = mqtt_str(topic) + payload
    return b"\x30" + varint(len(body)) + body


def dial(addr, rcvbuf=0, timeout=5.0):
    host, port = addr.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect((host, int(port)))
    return s


def read_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError
        b += c
    return b


def read_packet(s):
    h = read_exact(s, 1)[0]
    n, mul = 0, 1
    while True:
        b = read_exact(s, 1)[0]
        n += (b & 0x7F) * mul
        mul *= 128
        if not b & 0x80:
            break
    return h, read_exact(s, n)


def probe(addr, version, cid):
    """Returns the CONNACK code, "closed" or "timeout"."""
    try:
        s = dial(addr)
    except OSError:
        return "refused"
    try:
        s.sendall(connect_packet(cid, version))
        h, body = read_packet(s)
        if h >> 4 != 2 or len(body) < 2:
            return "bad"
        return "0x%02x" % body[1]
    except socket.timeout:
        return "timeout"
    except (EOFError, OSError):
        return "closed"
    finally:
        s.close()


def main():
    mode, addr = sys.argv[1], sys.argv[2]
    if mode == "probe":
        print(probe(addr, int(sys.argv[3]), "probe"))
    elif mode == "probes":
        n, secs = int(sys.argv[3]), float(sys.argv[4])
        counts = {"3.1.1": {}, "5.0": {}}
        end = time.monotonic() + secs
        for i in range(n):
            if time.monotonic() > end:
                break
            v = 4 if i % 2 == 0 else 5
            code = probe(addr, v, "probe-%d" % i)
            key = "3.1.1" if v == 4 else "5.0"
            counts[key][code] = counts[key].get(code, 0) + 1
            time.sleep(max(0.0, secs / n - 0.001))
        print(json.dumps(counts))
    elif mode == "recover":
        secs = float(sys.argv[3])
        start = time.monotonic()
        while time.monotonic() - start < secs:
            if probe(addr, 4, "rec4") == "0x00" and probe(addr, 5, "rec5") == "0x00":
                print("%.1f" % (time.monotonic() - start))
                return
            time.sleep(0.5)
        print("never")
    elif mode == "slow":
        n, topic, secs = int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
        socks, failed = [], 0
        end = time.monotonic() + secs
        for i in range(n):
            try:
                s = dial(addr, rcvbuf=4096)
                s.sendall(connect_packet("slow-%d" % i, 4))
                h, body = read_packet(s)
                if h >> 4 != 2 or body[1] != 0:
                    failed += 1
                    s.close()
                    continue
                s.sendall(subscribe_packet(topic))
                read_packet(s)  # SUBACK; nothing is read after it
                socks.append(s)
            except (OSError, EOFError):
                failed += 1
        print(json.dumps({"subscribed": len(socks), "failed": failed}), flush=True)
        while time.monotonic() < end:
            time.sleep(0.2)
        for s in socks:
            s.close()
    elif mode == "flood":
        topic, rate, secs, size = sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
        s = dial(addr)
        s.sendall(connect_packet("flood-%d" % int(time.time() * 1000 % 100000), 4))
        read_packet(s)
        pkt = publish_packet(topic, b"x" * size)
        sent, start = 0, time.monotonic()
        batch = max(1, int(rate / 100))
        try:
            while True:
                el = time.monotonic() - start
                if el >= secs:
                    break
                due = int(el * rate)
                if sent < due:
                    k = min(batch, due - sent)
                    s.sendall(pkt * k)
                    sent += k
                else:
                    time.sleep(0.005)
        except OSError:
            pass
        s.close()
        print(json.dumps({"sent": sent}))
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
