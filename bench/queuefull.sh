#!/usr/bin/env bash
# A QoS 1 fan-in whose subscriber falls behind now and then, under queue.when_full: drop
# and backpressure: 100 publishers at 200 messages a second each (20,000/s) to one
# subscriber for 20 s, default limits, the store off; the broker is stopped (SIGSTOP) for
# STALL seconds once a second, 15 times, as a GC pause or a VM's stolen time would stop it,
# so that the backlog it reads when it goes on overflows the subscriber's window and queue.
# For each mode and each of RUNS runs it prints what was sent, received and lost, the
# queue_full drops, the times publishers were held, the drop lines logged and the broker's
# CPU. The figures: docs/benchmarks.md, "When a queue is full".
#
#   bench/queuefull.sh                  STALL=0.15 RUNS=3 MODES="drop backpressure"
#   STALL=0 bench/queuefull.sh          no stalls: the subscriber keeps up on a quiet machine
set -euo pipefail
cd "$(dirname "$0")/.."

port=${QF_PORT:-37001}
http_port=${QF_HTTP_PORT:-37081}
stall=${STALL:-0.15}
runs=${RUNS:-3}
modes=${MODES:-drop backpressure}
work=$(mktemp -d)
broker_pid=""
stall_pid=""
cleanup() {
	[ -n "$stall_pid" ] && kill "$stall_pid" 2>/dev/null || true
	if [ -n "$broker_pid" ]; then
		kill -CONT "$broker_pid" 2>/dev/null || true
		kill -TERM "$broker_pid" 2>/dev/null || true
		wait "$broker_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/bifrost" ./cmd/bifrost
go build -o "$work/bifrost-bench" ./cmd/bifrost-bench
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

for run in $(seq "$runs"); do
	for mode in $modes; do
		cat >"$work/bifrost.yaml" <<YAML
listeners:
  - type: tcp
    address: 127.0.0.1:$port
http:
  address: 127.0.0.1:$http_port
store:
  dir: "off"
queue:
  when_full: $mode
YAML
		"$work/bifrost" -c "$work/bifrost.yaml" 2>"$work/bifrost.log" &
		broker_pid=$!
		for _ in $(seq 100); do
			port_open "$port" && port_open "$http_port" && break
			sleep 0.1
		done
		load=$(cut -d' ' -f1 /proc/loadavg)
		if [ "$stall" != 0 ]; then
			(
				sleep 2
				for _ in $(seq 15); do
					kill -STOP "$broker_pid"
					sleep "$stall"
					kill -CONT "$broker_pid"
					sleep 1
				done
			) &
			stall_pid=$!
		fi
		"$work/bifrost-bench" fanin -addr "127.0.0.1:$port" -pid "$broker_pid" -src-addrs 0 \
			-pubs 100 -rate 200 -qos 1 -duration 20s -json-only >"$work/out.json"
		if [ -n "$stall_pid" ]; then
			wait "$stall_pid" || true
			stall_pid=""
		fi
		metrics=$(curl -s "http://127.0.0.1:$http_port/metrics")
		kill -TERM "$broker_pid"
		wait "$broker_pid" || true
		broker_pid=""
		dropped=$(echo "$metrics" | awk '/^bifrost_messages_dropped_total\{reason="queue_full"\}/ {print $2}')
		held=$(echo "$metrics" | awk '/^bifrost_publishers_held_total / {print $2}')
		lines=$(grep -c 'msg="message dropped"' "$work/bifrost.log" || true)
		python3 - "$work/out.json" "$mode" "$run" "$load" "$dropped" "$held" "$lines" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
mode, run, load, dropped, held, lines = sys.argv[2:]
t, b = d["traffic"], d["broker"]
print(f"{mode:12} run {run} load {load}: sent {t['sent']} ({t['sent_rate']:.0f}/s) received {t['received']} "
      f"lost {t['lost']} ({100 * t['lost'] / t['sent']:.2f}%), queue_full {dropped}, held {held}, "
      f"drop lines {lines}, broker CPU {b['cpu_s']:.2f} s ({1e6 * b['cpu_s'] / t['sent']:.2f} µs/message sent), "
      f"p99 {t['latency_us']['p99'] / 1000:.1f} ms")
PY
	done
done
