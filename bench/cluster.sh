#!/usr/bin/env bash
# cluster.sh starts N bifrost nodes on loopback as one cluster and measures, with
# bifrost-bench, what a message costs when it crosses from one node to another against
# when it stays on one node: pair mode (10 publisher/subscriber pairs, a topic each, the
# tool's closed loop), QoS 0 and 1, the subscribers on n1 and the publishers on n1
# (same-node) or on n2 (cross-node). The figure is deliveries per broker CPU-second: the
# messages the subscribers read, over the user + system CPU of every node process over the
# run (from /proc), so the cross-node figure pays for both nodes' work and the same-node
# one includes the idle nodes' gossip. Latency percentiles are the tool's. Each scenario
# runs against the same running cluster, one after the other.
#
#   bench/cluster.sh            3 nodes, 10s of traffic per scenario
#   bench/cluster.sh --quick    2 nodes, 4s per scenario
#
# Environment: CLUSTER_PORT (12100), the first of the loopback ports the nodes use (10 per
# node). Every process this script starts is stopped by pid on the way out.
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=3
duration=10s
case "${1:-}" in
--quick) nodes=2 duration=4s ;;
"") ;;
*)
	echo "usage: $0 [--quick]" >&2
	exit 2
	;;
esac

base=${CLUSTER_PORT:-12100}
work=$(mktemp -d)
pids=()

# shellcheck source=bench/lib/cluster.sh
. bench/lib/cluster.sh

cleanup() {
	stop_pids "${pids[@]}"
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v jq >/dev/null 2>&1 || { log "cluster.sh needs jq"; exit 1; }

go build -o "$work/bifrost" ./cmd/bifrost
go build -o "$work/bifrost-bench" ./cmd/bifrost-bench

port() { echo $((base + 10 * ($1 - 1) + $2)); } # port NODE KIND: 1 mqtt, 2 http, 3 gossip, 4 rpc

seeds=""
for i in $(seq "$nodes"); do
	seeds+="127.0.0.1:$(port "$i" 3),"
done
seeds="[${seeds%,}]"

for i in $(seq "$nodes"); do
	ports_free "$i"
	mkdir -p "$work/n$i"
	{
		node_config "$i" "$nodes" "$work/n$i" "$seeds"
		printf 'mqtt:\n  receive_maximum: 1024\nqueue:\n  offline_messages: 10000\n'
	} >"$work/n$i.yaml"
	"$work/bifrost" -c "$work/n$i.yaml" 2>>"$work/n$i.log" &
	pids+=($!)
done

# formed: every node sees the others alive and serves clients (a node starts fenced, until
# it has caught up with the Raft log: docs/cluster-owner.md).
formed() {
	local i
	for i in $(seq "$nodes"); do
		curl -sf "http://127.0.0.1:$(port "$i" 2)/cluster" | jq -e --argjson n "$nodes" \
			'.formed and ([.members[] | select(.state == "alive")] | length) == $n' >/dev/null 2>&1 || return 1
		curl -sf "http://127.0.0.1:$(port "$i" 2)/metrics" | grep -x 'bifrost_cluster_serving 1' >/dev/null || return 1
	done
}
for _ in $(seq 300); do
	formed && break
	sleep 0.1
done
formed || { log "the cluster did not form; logs in $work"; cat "$work"/n*.log >&2; exit 1; }
log "cluster of $nodes nodes formed"

ticks=$(getconf CLK_TCK)
# cpu prints the user + system CPU seconds of every node process so far.
cpu() {
	local total=0 pid f
	for pid in "${pids[@]}"; do
		read -ra f <"/proc/$pid/stat"
		total=$((total + f[13] + f[14]))
	done
	echo "scale=3; $total / $ticks" | bc
}

printf '| scenario | QoS | received | lost | broker CPU s | deliveries per broker CPU-s | p50 µs | p99 µs |\n'
printf '|---|---|---|---|---|---|---|---|\n'
declare -A rate
for qos in 0 1; do
	for where in same cross; do
		args=(pair -pairs 10 -qos "$qos" -duration "$duration" -version 5.0 -addr "127.0.0.1:$(port 1 1)" -json-only)
		if [ "$where" = cross ]; then
			args+=(-pub-addr "127.0.0.1:$(port 2 1)")
		fi
		before=$(cpu)
		out=$("$work/bifrost-bench" "${args[@]}")
		after=$(cpu)
		used=$(echo "$after - $before" | bc)
		received=$(jq '.traffic.received' <<<"$out")
		lost=$(jq '.traffic.lost' <<<"$out")
		p50=$(jq '.traffic.latency_us.p50' <<<"$out")
		p99=$(jq '.traffic.latency_us.p99' <<<"$out")
		rate[$where$qos]=$(echo "$received / $used" | bc)
		printf '| %s-node | %s | %s | %s | %s | %s | %s | %s |\n' "$where" "$qos" "$received" "$lost" "$used" "${rate[$where$qos]}" "$p50" "$p99"
	done
done
for qos in 0 1; do
	printf '\nQoS %s: cross-node deliveries per broker CPU-second are %s of same-node\n' "$qos" \
		"$(echo "scale=2; ${rate[cross$qos]} / ${rate[same$qos]}" | bc)"
done
