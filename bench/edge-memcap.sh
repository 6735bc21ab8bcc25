#!/usr/bin/env bash
# edge-memcap.sh runs the edge broker (bench/edge-store.sh's config: store on, sync always)
# inside a cgroup v1 memory group with a hard limit, under the edge load (1,000 idle
# connections, 100 QoS 1 msg/s to persistent subscribers), then a surge past the limit:
# SURGE_CONNS more clients connecting, SLOW subscribers that never read and FLOODERS QoS 0
# publishers at FLOOD_RATE msg/s each; then the surge stops. It reports the cgroup's peak
# usage, failcnt and OOM kills, the broker's memory pressure, CONNACK codes of 3.1.1 and
# 5.0 probes during the surge, QoS 0 shed (bifrost_messages_dropped_total), the QoS 1
# traffic (none may be lost) and how long after the surge a CONNECT is accepted again.
#
#   bench/edge-memcap.sh                 LIMIT=32 (MiB)
#   LIMIT=12 bench/edge-memcap.sh        a limit the load exceeds on purpose
#   NOCGROUP=1 LIMIT=12 bench/edge-memcap.sh
#                                        no cgroup: GOMEMLIMIT alone, set to 80% of LIMIT
#                                        (what memory.limit: auto takes of a group's)
#
# Environment: LIMIT (32, MiB), PORT (27883), HTTP_PORT (27880), CONNS (1000), PAIRS (10),
# RATE (10), SURGE (20, seconds), SURGE_CONNS (4000), SLOW (200), FLOODERS (4),
# FLOOD_RATE (2000), SIZE (1024, QoS 0 payload bytes). Root and a writable cgroup v1
# memory hierarchy at /sys/fs/cgroup/memory are needed. The group is made below this
# script's own memory cgroup and removed on the way out; every process the script starts
# is stopped by pid. Samples and reports go to bench/results/ (gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."

limit_mib=${LIMIT:-32}
port=${PORT:-27883}
http_port=${HTTP_PORT:-27880}
conns=${CONNS:-1000}
pairs=${PAIRS:-10}
rate=${RATE:-10}
surge=${SURGE:-20}
surge_conns=${SURGE_CONNS:-4000}
slow=${SLOW:-200}
flooders=${FLOODERS:-4}
flood_rate=${FLOOD_RATE:-2000}
size=${SIZE:-1024}
addr=127.0.0.1:$port
work=$(mktemp -d)
results=bench/results/edge-memcap-${limit_mib}m-$(date +%Y%m%d-%H%M%S)
mkdir -p "$results"
py=/usr/bin/python3
surge_py=bench/edge-surge.py

for p in "$port" "$http_port"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "port $p is taken: another broker would get this script's load" >&2
		exit 1
	fi
done

nocgroup=${NOCGROUP:-}
where="cgroup v1, memory.limit_in_bytes $limit_mib MiB"
[ -n "$nocgroup" ] && where="no cgroup, GOMEMLIMIT $((limit_mib * 1024 * 8 / 10))KiB (80% of $limit_mib MiB)"
mem_root=/sys/fs/cgroup/memory
if [ -n "$nocgroup" ]; then
	cg=/nonexistent # every read of the group's files below reads "-"
else
	[ -w "$mem_root" ] || { echo "no writable cgroup v1 memory hierarchy at $mem_root" >&2; exit 1; }
	self_cg=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
	cg=$mem_root${self_cg%/}/bifrost-memcap-$$
fi

broker_pid=""
pids=()
# shellcheck source=bench/lib/proc.sh
. bench/lib/proc.sh

cleanup() {
	stop_pids "${pids[@]}" "$broker_pid"
	if [ -d "$cg" ]; then
		# Empty once the broker is gone; the page cache it charged moves to the parent.
		for _ in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_edge "$work"

cat >"$work/bifrost.yaml" <<EOF
memory:
  profile: edge
listeners:
  - name: mqtt
    type: tcp
    address: $addr
http:
  address: 127.0.0.1:$http_port
store:
  dir: $work/data
  sync: always
log:
  level: info
EOF
cp "$work/bifrost.yaml" "$results/bifrost.yaml"

if [ -n "$nocgroup" ]; then
	gomemlimit=$((limit_mib * 1024 * 8 / 10))KiB
	log "no cgroup: GOMEMLIMIT=$gomemlimit"
	GOMEMLIMIT=$gomemlimit "$work/bifrost" -c "$work/bifrost.yaml" 2>"$results/broker.log" &
else
	mkdir "$cg"
	echo $((limit_mib << 20)) >"$cg/memory.limit_in_bytes"
	echo 0 >"$cg/memory.swappiness" 2>/dev/null || true
	log "cgroup $cg, memory.limit_in_bytes $(cat "$cg/memory.limit_in_bytes")"

	# The broker joins the group before exec, so the memory policy reads the group's limit
	# at start (memory.limit: auto) and everything it allocates is charged to it.
	sh -c 'echo $$ >"$1/cgroup.procs" && exec "$2" -c "$3"' sh "$cg" "$work/bifrost" "$work/bifrost.yaml" \
		2>"$results/broker.log" &
fi
broker_pid=$!
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.1
done
kill -0 "$broker_pid" 2>/dev/null || { log "the broker exited:"; tail -3 "$results/broker.log" >&2; exit 1; }
log "broker pid $broker_pid in $(awk -F: '$2 ~ /memory/ {print $3}' "/proc/$broker_pid/cgroup")"
start=$(now)

# Every 0.5 s: seconds, VmRSS, RssAnon, RssFile (kB), the group's usage and the kernel
# memory in it (bytes), and every second the broker's pressure level, the memory it
# reports as used (bytes) and the connections whose reads it has paused.
(
	i=0
	while kill -0 "$broker_pid" 2>/dev/null; do
		s=$(awk '/^(VmRSS|RssAnon|RssFile):/ {printf " %s", $2}' "/proc/$broker_pid/status" 2>/dev/null || true)
		u=$(cat "$cg/memory.usage_in_bytes" "$cg/memory.kmem.usage_in_bytes" 2>/dev/null | tr '\n' ' ' || true)
		if [ $((i % 2)) = 0 ]; then
			m=$(curl -s -m 1 "http://127.0.0.1:$http_port/metrics" 2>/dev/null |
				awk '/^bifrost_memory_pressure / {p = $2} /^bifrost_memory_used_bytes / {u = $2} /^bifrost_connections_paused / {c = $2} END {printf "%s %s %s", p, u, c}')
		fi
		[ -n "$s" ] && echo "$(since "$start")$s ${u:-- - }${m:-- - -}"
		i=$((i + 1))
		sleep 0.5
	done
) >"$results/samples.txt" &
pids+=($!)

hold=$((surge + 60))
"$work/bifrost-bench" conns -addr "$addr" -n "$conns" -settle 5s -hold "${hold}s" \
	-json-only >"$results/conns.json" 2>"$results/conns.err" &
conns_pid=$!
pids+=("$conns_pid")
sleep 12
duration=$((surge + 40))
"$work/bifrost-bench" pair -addr "$addr" -pairs "$pairs" -rate "$rate" -qos 1 \
	-duration "${duration}s" -session-expiry 3600 -json-only >"$results/pair.json" 2>"$results/pair.err" &
pair_pid=$!
pids+=("$pair_pid")
sleep 10
log "surge: $slow slow subscribers, $flooders x $flood_rate QoS 0 msg/s, $surge_conns clients, ${surge}s"
surge_start=$(since "$start")
$py $surge_py slow "$addr" "$slow" surge/# "$surge" >"$results/slow.json" &
slow_pid=$!
pids+=("$slow_pid")
sleep 2
flood_pids=()
for i in $(seq "$flooders"); do
	$py $surge_py flood "$addr" "surge/$i" "$flood_rate" $((surge - 2)) "$size" >"$results/flood-$i.json" &
	flood_pids+=($!)
	pids+=($!)
done
sleep 1
curl -s -m 5 "http://127.0.0.1:$http_port/debug/pprof/heap" >"$results/heap-surge.pprof" || true
sleep 2
"$work/bifrost-bench" conns -addr "$addr" -n "$surge_conns" -hold "$((surge - 8))s" -json-only \
	>"$results/surge-conns.json" 2>"$results/surge-conns.err" &
surge_conns_pid=$!
pids+=("$surge_conns_pid")
$py $surge_py probes "$addr" 40 $((surge - 7)) >"$results/probes.json"
wait "$slow_pid" "${flood_pids[@]}" 2>/dev/null || true
wait "$surge_conns_pid" 2>/dev/null || true
surge_end=$(since "$start")
log "surge over at ${surge_end}s; waiting for a CONNECT to be accepted"
recover_s=$($py $surge_py recover "$addr" 60)
wait "$pair_pid" 2>/dev/null || true
curl -s "http://127.0.0.1:$http_port/metrics" >"$results/metrics.txt" || true
alive=no
kill -0 "$broker_pid" 2>/dev/null && alive=yes
cgf() { cat "$cg/$1" 2>/dev/null || echo -; }
max_usage=$(cgf memory.max_usage_in_bytes)
failcnt=$(cgf memory.failcnt)
oom=$(cgf memory.oom_control | tr '\n' ' ')
cp "$cg/memory.stat" "$results/memory.stat" 2>/dev/null || true

{
	echo "edge broker in $where; $conns idle connections, $pairs x $rate QoS 1 msg/s; surge ${surge}s from ${surge_start}s to ${surge_end}s"
	echo "limit in force:      $(grep -o "msg=\"memory policy\".*" "$results/broker.log" | head -1)"
	if [ -n "$nocgroup" ]; then
		echo "broker alive:        $alive"
	else
		echo "broker alive:        $alive; cgroup max_usage $(awk -v b="$max_usage" 'BEGIN {printf "%.1f MiB", b / 1048576}') of ${limit_mib} MiB, failcnt $failcnt, oom_control: $oom"
	fi
	echo "peak VmRSS:          $(awk '{if ($2 > m) m = $2} END {printf "%.1f MiB", m / 1024}' "$results/samples.txt"), peak memory_used $(awk '$8 != "-" {if ($8 > m) m = $8} END {printf "%.1f MiB", m / 1048576}' "$results/samples.txt"), max pressure $(awk '$7 != "-" {if ($7 > m) m = $7} END {print m + 0}' "$results/samples.txt")"
	echo "settled (last):      $(tail -1 "$results/samples.txt" | awk '{printf "VmRSS %.1f MiB, RssAnon %.1f MiB, group usage %.1f MiB, pressure %s, memory_used %.1f MiB", $2 / 1024, $3 / 1024, $5 / 1048576, $7, $8 / 1048576}')"
	echo "paused publishers:   max $(awk '$9 != "-" && $9 != "" {if ($9 > m) m = $9} END {print m + 0}' "$results/samples.txt") at once; $(grep -E '^bifrost_memory_hard_seconds_total' "$results/metrics.txt" | awk '{printf "%.1f s at hard", $2}')"
	echo "slow subscribers:    $(cat "$results/slow.json" | head -1)"
	echo "QoS 0 flood:         $(cat "$results"/flood-*.json | jq -s 'map(.sent) | add') sent"
	echo "surge connections:   $(jq -c '.conns | {connected, failed}' "$results/surge-conns.json" 2>/dev/null || echo see surge-conns.err)"
	echo "probes (CONNACK):    $(cat "$results/probes.json")"
	echo "refused (metrics):   $(grep -E '^bifrost_connects_refused_total' "$results/metrics.txt" | tr '\n' ' ')"
	echo "dropped (metrics):   $(grep -E '^bifrost_messages_dropped_total' "$results/metrics.txt" | tr '\n' ' ')"
	echo "QoS 1 traffic:       $(jq -r '.traffic | "\(.sent) sent, \(.received) received, \(.lost) lost, \(.acked) acked"' "$results/pair.json" 2>/dev/null || echo see pair.err)"
	echo "pressure changes:    $(grep -c 'msg="memory: pressure' "$results/broker.log" || true) logged; last: $(grep 'msg="memory: pressure' "$results/broker.log" | tail -1 | sed 's/^time=//')"
	echo "recovered:           a 3.1.1 and a 5.0 CONNECT accepted ${recover_s}s after the surge ended"
} | tee "$results/summary.txt"
