#!/usr/bin/env bash
# compare.sh measures bifrost and Mosquitto alike, one after the other in the same run, with
# bifrost-bench (docs/benchmarks.md): the broker's RSS and PSS per idle connection (3 s
# after the last CONNACK and settled) and its CPU per accepted connection, and traffic in
# the patterns people compare brokers with, at QoS 0 and 1: the tool's closed loop (10
# publishers, a window of 32, written in batches), 100 publishers closed loop with a
# window of 32 and of 1 (one message per write), 100 publishers open loop at 25, 50 and
# 75% of the saturation both brokers reach in this run, emqtt-bench's pattern (100
# publishers, one message every 10 ms each), fan-out 1->50 and 10 pairs. For every
# scenario each broker is started fresh, measured and stopped. It prints a markdown table
# with the ratios bifrost/Mosquitto, and the range of the deliveries-per-CPU-second ratio
# by pattern, and keeps them, with every run's JSON report, in bench/results/
# (gitignored).
#
#   bench/compare.sh            full run: 5,000 and 19,000 idle connections, 15s of traffic each (~25 min)
#   bench/compare.sh --quick    quick run: 1,000 idle connections, 5s of traffic each (~8 min)
#
# Environment: BIFROST_PORT (11883) and MOSQUITTO_PORT (11884), loopback ports for the two
# brokers. Mosquitto is installed with apt-get when it is missing. Every process this script
# starts is stopped by pid on the way out, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
case "${1:-}" in
--quick) quick=1 ;;
"") ;;
*)
	echo "usage: $0 [--quick]" >&2
	exit 2
	;;
esac

bifrost_port=${BIFROST_PORT:-11883}
mosquitto_port=${MOSQUITTO_PORT:-11884}
bifrost_http_port=${BIFROST_HTTP_PORT:-11880} # bifrost's /metrics and /debug/pprof, for the live heap
work=$(mktemp -d)
broker_pid=""
bench_pid=""

cleanup() {
	if [ -n "$bench_pid" ]; then
		kill -TERM "$bench_pid" 2>/dev/null || true
		wait "$bench_pid" 2>/dev/null || true
	fi
	if [ -n "$broker_pid" ]; then
		stop_broker
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '%s\n' "$*" >&2; }

# --- tools -----------------------------------------------------------------------------
need=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need+=(mosquitto)
command -v jq >/dev/null 2>&1 || need+=(jq)
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
fi
mosquitto_bin=$(command -v mosquitto || echo /usr/sbin/mosquitto)

log "building bifrost and bifrost-bench"
go build -o "$work/bifrost" ./cmd/bifrost
go build -o "$work/bifrost-bench" ./cmd/bifrost-bench
bench="$work/bifrost-bench"

# --- broker configs: the same limits for both ------------------------------------------
# In flight per client 1024 (bifrost's default receive_maximum), 10,000 queued messages per
# client (bifrost's queue.offline_messages, which bounds online QoS 1/2 queues too, and
# Mosquitto's max_queued_messages; both default to 1,000, which 100 closed-loop publishers
# with 32 messages out each overflow, so that both would drop QoS 1 by policy), no
# persistence, anonymous clients, loopback only, TCP_NODELAY on both (Go sets it on every
# TCP connection).
cat >"$work/bifrost.yaml" <<EOF
listeners:
  - name: mqtt
    type: tcp
    address: 127.0.0.1:$bifrost_port
http:
  address: 127.0.0.1:$bifrost_http_port
store:
  dir: "off"
log:
  level: warn
mqtt:
  receive_maximum: 1024
queue:
  offline_messages: 10000
EOF
cat >"$work/mosquitto.conf" <<EOF
listener $mosquitto_port 127.0.0.1
allow_anonymous true
persistence false
set_tcp_nodelay true
max_inflight_messages 1024
max_queued_messages 10000
max_connections -1
log_dest stderr
log_type error
log_type warning
EOF

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_broker NAME starts a fresh broker and waits until it accepts connections.
start_broker() {
	local name=$1 port
	case $name in
	bifrost)
		port=$bifrost_port
		port_open "$port" && { log "port $port is taken"; exit 1; }
		"$work/bifrost" -c "$work/bifrost.yaml" 2>>"$work/bifrost.log" &
		;;
	mosquitto)
		port=$mosquitto_port
		port_open "$port" && { log "port $port is taken"; exit 1; }
		"$mosquitto_bin" -c "$work/mosquitto.conf" 2>>"$work/mosquitto.log" &
		;;
	esac
	broker_pid=$!
	broker_addr=127.0.0.1:$port
	for _ in $(seq 100); do
		port_open "$port" && break
		kill -0 "$broker_pid" 2>/dev/null || { log "$name exited:"; tail -5 "$work/$name.log" >&2; exit 1; }
		sleep 0.1
	done
	port_open "$port" || { log "$name does not listen on $port"; exit 1; }
	sleep 1 # let the probe connection go and the process settle before the baseline
}

# stop_broker stops the running broker by pid: SIGTERM, then SIGKILL after 10s.
stop_broker() {
	local pid=$broker_pid
	broker_pid=""
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# --- scenarios -------------------------------------------------------------------------
if [ $quick = 1 ]; then
	conns_sizes=(1000)
	conns_versions=(3.1.1)
	duration=5s
	run_kind="quick run"
else
	conns_sizes=(5000 19000)
	conns_versions=(3.1.1 5.0)
	duration=15s
	run_kind="full run"
fi

mkdir -p bench/results
stamp=$(date -u +%Y%m%d-%H%M%S)
jsonl="bench/results/compare-$stamp.jsonl"
table="bench/results/compare-$stamp.md"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
order=0

# scenario GROUP NAME ARGS... runs bifrost-bench ARGS against a fresh bifrost, then a fresh
# Mosquitto, and appends both reports to the JSONL file with the scenario's group, name
# and order.
scenario() {
	local group=$1 name=$2
	shift 2
	order=$((order + 1))
	for broker in bifrost mosquitto; do
		log "$name: $broker"
		start_broker "$broker"
		local extra=()
		if [ "$broker" = bifrost ] && [ "$1" = conns ]; then
			extra=(-metrics "http://127.0.0.1:$bifrost_http_port") # live heap per connection too
		fi
		# In the background, so that the trap can stop it too. Its -timeout bounds it.
		"$bench" "$@" "${extra[@]}" -addr "$broker_addr" -pid "$broker_pid" -timeout 5m -json-only >"$work/out.json" &
		bench_pid=$!
		if ! wait "$bench_pid" || ! [ -s "$work/out.json" ]; then
			log "$name: $broker: bench failed"
			echo '{}' >"$work/out.json"
		fi
		bench_pid=""
		stop_broker
		jq -c --arg g "$group" --arg s "$name" --arg b "$broker" --argjson o "$order" \
			'. + {group: $g, scenario: $s, target: $b, order: $o}' "$work/out.json" >>"$jsonl"
	done
}

# saturation NAME prints the lower of the two brokers' delivery rates in scenario NAME.
saturation() {
	jq -rs --arg s "$1" '[.[] | select(.scenario == $s) | .traffic.recv_rate // 0] | min | floor' "$jsonl"
}

for n in "${conns_sizes[@]}"; do
	for v in "${conns_versions[@]}"; do
		# 30s: long enough for either broker's memory to settle after the burst.
		scenario idle "idle $n conns, $v" conns -n "$n" -version "$v" -settle 30s
		scenario idle "idle $n conns, $v, 1 sub each" conns -n "$n" -version "$v" -subscribe -settle 30s
	done
done
for q in 0 1; do
	scenario batched "fanin 10->1 closed loop, window 32, QoS $q" fanin -pubs 10 -qos $q -duration $duration
	scenario batched "fanin 100->1 closed loop, window 32, QoS $q" fanin -pubs 100 -qos $q -duration $duration
	scenario batched "fanout 1->50 closed loop, QoS $q" fanout -subs 50 -qos $q -duration $duration
	scenario batched "pair x10 closed loop, QoS $q" pair -pairs 10 -qos $q -duration $duration
	scenario single "fanin 100->1 closed loop, window 1, QoS $q" fanin -pubs 100 -inflight 1 -qos $q -duration $duration
	# Fixed rates, one message per write: a share of what the slower broker sustained in
	# the 100-publisher closed loop of this run, the same offered load for both.
	sat=$(saturation "fanin 100->1 closed loop, window 32, QoS $q")
	for pct in 25 50 75; do
		rate=$((sat * pct / 100 / 100))
		[ "$rate" -gt 0 ] || continue
		scenario open "fanin 100->1 open loop, $pct% of $sat msg/s, QoS $q" \
			fanin -pubs 100 -rate "$rate" -qos $q -duration $duration
	done
	# emqtt-bench's pattern: emqtt_bench pub -c 100 -I 10 -s 64, emqtt_bench sub -c 1.
	scenario open "fanin 100->1 every 10 ms (emqtt-bench -I 10), QoS $q" fanin -pubs 100 -rate 100 -qos $q -duration $duration
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the table -------------------------------------------------------------------------
{
	echo "# bifrost vs Mosquitto ($run_kind, $stamp UTC)"
	echo
	echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r)"
	echo "- bifrost: $(git describe --always --dirty 2>/dev/null || echo unknown), $(go version | cut -d' ' -f3)"
	echo "- mosquitto: $("$mosquitto_bin" -h 2>&1 | awk 'NR==1 {print $3}')"
	echo "- load average (1/5/15 min) at start: $load_start; at end: $load_end"
	echo "- each broker fresh per scenario; 64-byte payloads, MQTT 3.1.1 traffic; closed loop: each publisher keeps at most its window undelivered (written in batches of a quarter of it), open loop: each sends on schedule, one message per write"
	echo
	echo "| scenario | figure | better | bifrost | mosquitto | bifrost/mosquitto |"
	echo "|---|---|---|---:|---:|---:|"
	jq -rs '
		def fmt: if type == "number" then (if . == (. | floor) or (. | fabs) >= 100 then (. | round | tostring) else ((. * 100 | round) / 100 | tostring) end) else "n/a" end;
		def ratio(a; b): if (a | type) == "number" and (b | type) == "number" and b != 0 then ((a / b * 100 | round) / 100 | tostring) else "n/a" end;
		def row(s; f; better; a; b): "| \(s) | \(f) | \(better) | \(a | fmt) | \(b | fmt) | \(ratio(a; b)) |";
		def mib: if . then . / 1048576 else . end;
		def ms: if . then . / 1000 else . end;
		[group_by(.order)[] | {s: .[0].scenario,
			b: (map(select(.target == "bifrost"))[0] // {}), m: (map(select(.target == "mosquitto"))[0] // {})}]
		| .[] | .s as $s | .b as $b | .m as $m |
		if ($b.conns // $m.conns) != null then
			row($s; "RSS per connection, settled (B)"; "lower"; $b.broker.rss_per_conn; $m.broker.rss_per_conn),
			row(""; "RSS per connection 3 s after the last CONNACK (B)"; "lower"; $b.broker.rss_per_conn_3s; $m.broker.rss_per_conn_3s),
			row(""; "PSS per connection, settled (B)"; "lower"; $b.broker.pss_per_conn; $m.broker.pss_per_conn),
			row(""; "live heap per connection (B)"; ""; $b.broker.heap_per_conn; null),
			row(""; "RSS with all connected (MiB)"; "lower"; ($b.broker.rss_after // null | mib); ($m.broker.rss_after // null | mib)),
			row(""; "broker CPU per connection (µs)"; "lower"; $b.broker.cpu_per_conn_us; $m.broker.cpu_per_conn_us),
			row(""; "connections per second"; "higher"; $b.conns.connect_rate; $m.conns.connect_rate),
			row(""; "connected"; ""; $b.conns.connected; $m.conns.connected)
		else
			row($s; "deliveries per second"; "higher"; $b.traffic.recv_rate; $m.traffic.recv_rate),
			row(""; "deliveries per broker CPU-second"; "higher"; $b.broker.msgs_per_cpu_s; $m.broker.msgs_per_cpu_s),
			row(""; "latency p50 (ms)"; "lower"; ($b.traffic.latency_us.p50 // null | ms); ($m.traffic.latency_us.p50 // null | ms)),
			row(""; "latency p99 (ms)"; "lower"; ($b.traffic.latency_us.p99 // null | ms); ($m.traffic.latency_us.p99 // null | ms)),
			row(""; "lost (of sent x subscribers)"; "0"; $b.traffic.lost; $m.traffic.lost),
			row(""; "load tool CPU (s)"; ""; $b.tool_cpu_s; $m.tool_cpu_s)
		end' "$jsonl"
	echo
	echo "Deliveries per broker CPU-second, bifrost/Mosquitto, by pattern (min to max over the scenarios of each):"
	echo
	jq -rs '
		def r2: (. * 100 | round) / 100;
		[group_by(.order)[] | {g: .[0].group,
			b: (map(select(.target == "bifrost"))[0].broker.msgs_per_cpu_s // null),
			m: (map(select(.target == "mosquitto"))[0].broker.msgs_per_cpu_s // null)}
			| select(.g != "idle" and .b != null and .m != null and .m > 0) | {g, r: (.b / .m)}]
		| group_by(.g)[] | "- \(.[0].g): \(map(.r) | min | r2)x to \(map(.r) | max | r2)x over \(length) scenarios"' "$jsonl"
	echo
	echo "(batched: closed loop with a window of 32, publishers write 8 messages at once; single: closed loop with a window of 1; open: fixed rates, one message per write.)"
	errors=$(jq -r 'select(.errors) | "- \(.scenario), \(.target): \(.errors | join("; "))"' "$jsonl")
	if [ -n "$errors" ]; then
		echo
		echo "Errors reported by the load tool:"
		echo
		echo "$errors"
	fi
	for b in bifrost mosquitto; do
		if [ -s "$work/$b.log" ]; then
			echo
			echo "Most frequent lines of the $b log (timestamps cut):"
			echo
			echo '```'
			sed -E 's/^[0-9]+: //; s/^time=[^ ]+ //' "$work/$b.log" | sort | uniq -c | sort -rn | head -5
			echo '```'
		fi
	done
} | tee "$table"
log "results: $table, $jsonl"
