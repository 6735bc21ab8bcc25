#!/usr/bin/env bash
# compare.sh measures bifrost and Mosquitto alike, one after the other in the same run, with
# bifrost-bench (docs/benchmarks.md): the broker's RSS and PSS per idle connection, and
# fan-in, fan-out and 1:1 traffic at QoS 0 and 1. For every scenario each broker is started
# fresh, measured and stopped. It prints a markdown table with the ratios bifrost/Mosquitto
# and keeps it, with every run's JSON report, in bench/results/ (gitignored).
#
#   bench/compare.sh            full run: 5,000 and 19,000 idle connections, 15s of traffic each
#   bench/compare.sh --quick    quick run: 1,000 idle connections, 5s of traffic each
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
# In flight per client 1024 (bifrost's default receive_maximum), 1000 queued messages per
# client (bifrost's default queue.offline_messages, which bounds online QoS 1/2 queues too,
# and Mosquitto's default max_queued_messages), no persistence, anonymous clients,
# loopback only, TCP_NODELAY on both (Go sets it on every TCP connection).
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
  offline_messages: 1000
EOF
cat >"$work/mosquitto.conf" <<EOF
listener $mosquitto_port 127.0.0.1
allow_anonymous true
persistence false
set_tcp_nodelay true
max_inflight_messages 1024
max_queued_messages 1000
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
# Each line: a name, then the arguments of bifrost-bench.
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
scenarios=()
for n in "${conns_sizes[@]}"; do
	for v in "${conns_versions[@]}"; do
		# 30s: a server gives a burst's garbage back once it has been quiet for two of its
		# 5s memory checks (internal/memory, releaseRule); the same wait for both brokers.
		scenarios+=("idle $n conns, $v|conns -n $n -version $v -settle 30s")
		scenarios+=("idle $n conns, $v, 1 sub each|conns -n $n -version $v -subscribe -settle 30s")
	done
done
for q in 0 1; do
	scenarios+=("fanin 10->1, QoS $q|fanin -pubs 10 -qos $q -duration $duration")
	scenarios+=("fanout 1->50, QoS $q|fanout -subs 50 -qos $q -duration $duration")
	scenarios+=("pair x10, QoS $q|pair -pairs 10 -qos $q -duration $duration")
done

mkdir -p bench/results
stamp=$(date -u +%Y%m%d-%H%M%S)
jsonl="bench/results/compare-$stamp.jsonl"
table="bench/results/compare-$stamp.md"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

order=0
for s in "${scenarios[@]}"; do
	name=${s%%|*}
	args=${s#*|}
	order=$((order + 1))
	for broker in bifrost mosquitto; do
		log "$name: $broker"
		start_broker "$broker"
		# In the background, so that the trap can stop it too. Its -timeout bounds it.
		# shellcheck disable=SC2086 # args is a list of words
		extra=()
		if [ "$broker" = bifrost ] && [[ $args == conns* ]]; then
			extra=(-metrics "http://127.0.0.1:$bifrost_http_port") # live heap per connection too
		fi
		"$bench" $args "${extra[@]}" -addr "$broker_addr" -pid "$broker_pid" -timeout 5m -json-only >"$work/out.json" &
		bench_pid=$!
		if ! wait "$bench_pid" || ! [ -s "$work/out.json" ]; then
			log "$name: $broker: bench failed"
			echo '{}' >"$work/out.json"
		fi
		bench_pid=""
		stop_broker
		jq -c --arg s "$name" --arg b "$broker" --argjson o "$order" '. + {scenario: $s, target: $b, order: $o}' \
			"$work/out.json" >>"$jsonl"
	done
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
	echo "- each broker fresh per scenario; traffic is closed loop (window 32 per publisher), 64-byte payloads, MQTT 3.1.1"
	echo
	echo "| scenario | figure | better | bifrost | mosquitto | bifrost/mosquitto |"
	echo "|---|---|---|---:|---:|---:|"
	jq -rs '
		def fmt: if type == "number" then (if . == (. | floor) or (. | fabs) >= 100 then (. | round | tostring) else ((. * 100 | round) / 100 | tostring) end) else "n/a" end;
		def ratio(a; b): if (a | type) == "number" and (b | type) == "number" and b != 0 then ((a / b * 100 | round) / 100 | tostring) else "n/a" end;
		def row(s; f; better; a; b): "| \(s) | \(f) | \(better) | \(a | fmt) | \(b | fmt) | \(ratio(a; b)) |";
		[group_by(.order)[] | {s: .[0].scenario,
			b: (map(select(.target == "bifrost"))[0] // {}), m: (map(select(.target == "mosquitto"))[0] // {})}]
		| .[] | .s as $s | .b as $b | .m as $m |
		if ($b.conns // $m.conns) != null then
			row($s; "RSS per connection (B)"; "lower"; $b.broker.rss_per_conn; $m.broker.rss_per_conn),
			row(""; "PSS per connection (B)"; "lower"; $b.broker.pss_per_conn; $m.broker.pss_per_conn),
			row(""; "live heap per connection (B)"; ""; $b.broker.heap_per_conn; null),
			row(""; "RSS with all connected (MiB)"; "lower"; ($b.broker.rss_after // null | if . then . / 1048576 else . end); ($m.broker.rss_after // null | if . then . / 1048576 else . end)),
			row(""; "connections per second"; "higher"; $b.conns.connect_rate; $m.conns.connect_rate),
			row(""; "connected"; ""; $b.conns.connected; $m.conns.connected)
		else
			row($s; "deliveries per second"; "higher"; $b.traffic.recv_rate; $m.traffic.recv_rate),
			row(""; "latency p50 (ms)"; "lower"; ($b.traffic.latency_us.p50 // null | if . then . / 1000 else . end); ($m.traffic.latency_us.p50 // null | if . then . / 1000 else . end)),
			row(""; "latency p99 (ms)"; "lower"; ($b.traffic.latency_us.p99 // null | if . then . / 1000 else . end); ($m.traffic.latency_us.p99 // null | if . then . / 1000 else . end)),
			row(""; "lost (of sent x subscribers)"; "0"; $b.traffic.lost; $m.traffic.lost),
			row(""; "deliveries per broker CPU-second"; "higher"; $b.broker.msgs_per_cpu_s; $m.broker.msgs_per_cpu_s),
			row(""; "load tool CPU (s)"; ""; $b.tool_cpu_s; $m.tool_cpu_s)
		end' "$jsonl"
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
