#!/usr/bin/env bash
# edge-store.sh measures the RSS of a bifrost started with the edge profile and its store
# on (docs/benchmarks.md, "Edge profile with store"): 1,000 idle connections, plus QoS 1
# traffic to persistent subscribers (every message goes through the store), for a
# while; the broker's VmRSS is read from /proc/PID/status every second.
#
#   bench/edge-store.sh                 100 msgs/s (10 pairs x 10/s) for 60s
#   DURATION=120 RATE=5 bench/edge-store.sh
#
# Environment: PORT (21883) and HTTP_PORT (21880), loopback ports for the broker;
# DURATION (60, seconds of traffic); PAIRS (10) and RATE (10, messages per second per
# publisher); CONNS (1000, idle connections); SYNC (always); STORE (on; off runs the
# broker without a store, for comparison); MEMTABLE_SIZE and CACHE_SIZE (the edge
# profile's unless set); GO_BUILD_ENV (CGO_ENABLED=0, as a release build); TAGS (the
# build tags: 'bifrost_nocluster bifrost_nopebble', the edge build; TAGS=bifrost_nocluster
# keeps Pebble (with ENGINE=pebble to use it), TAGS= is the default build); ENGINE (store.engine:
# pebble or log; the edge profile's unless set); STRACE (1: count the store's write and
# sync calls during the traffic with strace, which slows the broker: not for RSS
# figures); EXTRA_YAML, more config appended to the broker's file. The disk traffic
# over the traffic phase is read from /proc/PID/io (write_bytes: bytes sent to the
# storage layer; syscw: write calls of every kind, sockets included). The samples and
# reports are kept in bench/results/ (gitignored). Every process this script
# starts is stopped by pid on the way out, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."

port=${PORT:-21883}
http_port=${HTTP_PORT:-21880}
duration=${DURATION:-60}
pairs=${PAIRS:-10}
rate=${RATE:-10}
conns=${CONNS:-1000}
sync=${SYNC:-always}
build_env=${GO_BUILD_ENV:-CGO_ENABLED=0}
tags=${TAGS-bifrost_nocluster bifrost_nopebble}
work=$(mktemp -d)
store_dir=$work/data
if [ "${STORE:-on}" = off ]; then
	store_dir='"off"'
fi
results=bench/results/edge-store-$(date +%Y%m%d-%H%M%S)
mkdir -p "$results"
broker_pid=""
sampler_pid=""
conns_pid=""
strace_pid=""

# shellcheck source=bench/lib/proc.sh
. bench/lib/proc.sh

cleanup() {
	stop_pids "$strace_pid" "$conns_pid" "$sampler_pid" "$broker_pid"
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building bifrost ($build_env, tags '$tags') and bifrost-bench"
env $build_env go build -tags "$tags" -o "$work/bifrost" ./cmd/bifrost
go build -o "$work/bifrost-bench" ./cmd/bifrost-bench

cat >"$work/bifrost.yaml" <<EOF
memory:
  profile: edge
listeners:
  - name: mqtt
    type: tcp
    address: 127.0.0.1:$port
http:
  address: 127.0.0.1:$http_port
store:
  dir: $store_dir
  sync: $sync
${ENGINE:+  engine: $ENGINE}
${MEMTABLE_SIZE:+  memtable_size: $MEMTABLE_SIZE}
${CACHE_SIZE:+  cache_size: $CACHE_SIZE}
log:
  level: warn
${EXTRA_YAML:-}
EOF
cp "$work/bifrost.yaml" "$results/bifrost.yaml"

"$work/bifrost" -c "$work/bifrost.yaml" 2>"$results/broker.log" &
broker_pid=$!
for _ in $(seq 100); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		break
	fi
	sleep 0.1
done
log "broker pid $broker_pid listening on 127.0.0.1:$port"

# One sample a second: seconds since the start, VmRSS, RssAnon and RssFile (kB). RssFile
# is the binary's text and read-only data mapped from the page cache (clean pages the
# kernel can drop and read again), RssAnon the heap, stacks and runtime.
start=$(date +%s)
(
	while kill -0 "$broker_pid" 2>/dev/null; do
		s=$(awk '/^(VmRSS|RssAnon|RssFile):/ {printf " %s", $2}' "/proc/$broker_pid/status" 2>/dev/null || true)
		[ -n "$s" ] && echo "$(($(date +%s) - start))$s"
		sleep 1
	done
) >"$results/rss.txt" &
sampler_pid=$!

sleep 3
idle_start=$(($(date +%s) - start))
hold=$((duration + 30))
"$work/bifrost-bench" conns -addr "127.0.0.1:$port" -n "$conns" -settle 5s -hold "${hold}s" \
	-pid "$broker_pid" -json-only >"$results/conns.json" 2>"$results/conns.err" &
conns_pid=$!
sleep 15 # connected and settled
traffic_start=$(($(date +%s) - start))
cp "/proc/$broker_pid/io" "$results/io-start.txt"
if [ -n "${STRACE:-}" ]; then
	strace -f -y -qq -e trace=write,pwrite64,writev,pwritev,pwritev2,fsync,fdatasync,sync_file_range \
		-p "$broker_pid" -o "$results/strace.txt" &
	strace_pid=$!
fi
"$work/bifrost-bench" pair -addr "127.0.0.1:$port" -pairs "$pairs" -rate "$rate" -qos 1 \
	-duration "${duration}s" -session-expiry 3600 -pid "$broker_pid" -json-only >"$results/pair.json"
traffic_end=$(($(date +%s) - start))
cp "/proc/$broker_pid/io" "$results/io-end.txt"
if [ -n "$strace_pid" ]; then
	kill -INT "$strace_pid" 2>/dev/null || true
	wait "$strace_pid" 2>/dev/null || true
	strace_pid=""
fi
curl -s "http://127.0.0.1:$http_port/metrics" >"$results/metrics.txt" || true
wait "$conns_pid"
conns_pid=""
sleep 2

# Figures: RSS before any connection, with the idle connections, and over the traffic
# (skipping its first 10 s, while the broker's heap and Pebble's memtable fill).
stat() { # from to column: min median max of the column in the samples in [from, to)
	awk -v a="$1" -v b="$2" -v c="$3" '$1 >= a && $1 < b {print $c}' "$results/rss.txt" | sort -n |
		awk '{v[NR] = $1} END {if (NR == 0) {print "-"; exit}
			printf "%.1f / %.1f / %.1f", v[1] / 1024, v[int((NR + 1) / 2)] / 1024, v[NR] / 1024}'
}
stats() { # from to: VmRSS, RssAnon and RssFile over the samples in [from, to)
	echo "VmRSS $(stat "$1" "$2" 2), RssAnon $(stat "$1" "$2" 3), RssFile $(stat "$1" "$2" 4) MiB (min / median / max)"
}
{
	echo "edge profile, store ${STORE:-on} (sync $sync, $build_env, tags '$tags'), $conns idle connections, $pairs x $rate msgs/s QoS 1 to persistent subscribers for ${duration}s"
	echo "before connections:   $(stats 0 "$idle_start")"
	echo "idle connections:     $(stats $((idle_start + 10)) "$traffic_start")"
	echo "traffic (after 10s):  $(stats $((traffic_start + 10)) "$traffic_end")"
	echo "traffic:              $(jq -r '.traffic | "\(.sent) sent, \(.received) received, \(.lost) lost, \(.acked) acked, latency p50 \(.latency_us.p50) µs p99 \(.latency_us.p99) µs"' "$results/pair.json" 2>/dev/null || echo see pair.json)"
	echo "store:                $(grep -E '^bifrost_store_(disk_bytes|memtable_bytes|block_cache_bytes|commits_total|messages) ' "$results/metrics.txt" | tr '\n' ' ')"
	io() { awk -v k="$1:" '$1 == k {print $2}' "$results/$2"; }
	sent=$(jq -r '.traffic.sent' "$results/pair.json" 2>/dev/null || echo 0)
	wb=$(($(io write_bytes io-end.txt) - $(io write_bytes io-start.txt)))
	sw=$(($(io syscw io-end.txt) - $(io syscw io-start.txt)))
	echo "disk:                 write_bytes $wb ($(awk -v a="$wb" -v n="$sent" 'BEGIN {printf "%.0f", n ? a / n : 0}') per message), syscw $sw (all writes, sockets included) over $sent messages"
	if [ -f "$results/strace.txt" ]; then
		echo "store calls (strace): $(grep -F "<${work}/data/" "$results/strace.txt" | sed -E 's/^[0-9]+ +//; s/\(.*//' | sort | uniq -c |
			awk -v n="$sent" '{printf "%s %d (%.2f per message) ", $2, $1, n ? $1 / n : 0}')"
	fi
	echo "go heap:              $(grep -E '^go_memstats_(heap_inuse_bytes|sys_bytes) ' "$results/metrics.txt" | tr '\n' ' ')"
} | tee "$results/summary.txt"
