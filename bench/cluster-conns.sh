#!/usr/bin/env bash
# cluster-conns.sh measures what connections cost a bifrost cluster, against one node
# without a cluster block, on loopback (docs/lab/cluster.md):
#
#   1. one node, no cluster: 19,000 connections with one subscription each; its VmRSS and
#      live heap growth per connection, settled;
#   2. 5 nodes, one process each; 19,000 connections with a subscription each are opened on
#      n1, then n2, ... n5 (95,000), each set held open. While node i's set connects and
#      settles, node i's growth per connection is the local cost (the connection, its
#      session and route, its client id in the Raft ownership table) and every other node's
#      growth per connection is what a remote client costs it (a route in its remote index
#      and the ownership entry, which every node applies); the CONNECT rate with claims in
#      Raft, and the claims per Raft entry (bifrost_cluster_claims_total);
#   3. kill -9 of n5 with its 19,000 clients: the time until n1's memberlist marks it
#      dead and its routes leave n1's remote index, and the time until all of its clients,
#      reconnecting at once to n1..n4 with the same client ids, are connected again, with
#      what became of their sessions (bifrost_cluster_handovers_total).
#
#   bench/cluster-conns.sh            19,000 per node, 20 s settle
#   bench/cluster-conns.sh --quick    2,000 per node, 5 s settle
#   bench/cluster-conns.sh --storm    phases 3 and 4 with room on the survivors: n1..n4
#                                     hold 14,000 clients each, n5 19,000, 5 s settle
#
# A node holds at most its open-file limit less a reserve (20,000 - 1,000 here,
# internal/broker/openfiles.go): in the full run n1..n4 are at that cap when n5 dies, so
# they refuse its clients at once (reason open_files) and phase 3 measures detection and
# refusal; --storm leaves each survivor room for a quarter of n5's clients.
#
# Environment: PER_NODE and SETTLE (seconds) override those, SURVIVORS the survivors'
# clients in --storm; MOVE_CONC bounds the dead
# node's clients reconnecting at once per survivor (default: all of them); KEEP_WORK=1
# keeps the work directory (configs, node logs, the clients' errors) and prints its path;
# CLUSTER_PORT (12300) is the first of the loopback ports (10 per node).
#
# Clients are `bifrost-bench conns -worker` processes (the tool's own worker protocol,
# internal/loadgen/worker.go): one per node and set, at most 19,000 open files each, spread
# over the source addresses 127.0.0.2-5; each reports its connections as a JSON line and
# holds them until its stdin (a FIFO this script keeps open) ends or it is stopped.
# Every process this script starts is stopped by pid on the way out.
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=5
per_node=19000
storm=0
settle=20
case "${1:-}" in
--quick) per_node=2000 settle=5 ;;
--storm) storm=1 settle=5 ;;
"") ;;
*)
	echo "usage: $0 [--quick|--storm]" >&2
	exit 2
	;;
esac
per_node=${PER_NODE:-$per_node}
settle=${SETTLE:-$settle}

base=${CLUSTER_PORT:-12300}
work=$(mktemp -d)
node_pid=()   # by node number; 0 is the single node
client_pids=()

# shellcheck source=bench/lib/cluster.sh
. bench/lib/cluster.sh

cleanup() {
	exec 7>&- 2>/dev/null || true # the clients' stdin ends: they close and exit
	stop_pids "${client_pids[@]}"
	for pid in "${node_pid[@]}"; do [ "$pid" -gt 0 ] && stop_pids "$pid"; done
	if [ "${KEEP_WORK:-0}" = 1 ]; then
		log "work directory kept: $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v jq >/dev/null 2>&1 || { log "cluster-conns.sh needs jq"; exit 1; }

go build -o "$work/bifrost" ./cmd/bifrost
go build -o "$work/bifrost-bench" ./cmd/bifrost-bench
mkfifo "$work/hold"
exec 7<>"$work/hold"

port() { echo $((base + 10 * $1 + $2)); } # port NODE KIND: 1 mqtt, 2 http, 3 gossip, 4 rpc
now_ns() { date +%s%N; }

# start_node I [cluster] writes node I's config and starts it; node 0 has no cluster block.
start_node() {
	local i=$1 seeds="" j
	ports_free "$i"
	if [ "$i" -gt 0 ]; then
		for j in $(seq "$nodes"); do seeds+="127.0.0.1:$(port "$j" 3),"; done
		mkdir -p "$work/d$i"
		node_config "$i" "$nodes" "$work/d$i" "[${seeds%,}]" >"$work/n$i.yaml"
		# Filled to their cap on purpose: no MQTT 5 redirect to a less loaded node.
		echo "  redirect_load: 1" >>"$work/n$i.yaml"
	else
		node_config "$i" >"$work/n$i.yaml"
	fi
	"$work/bifrost" -c "$work/n$i.yaml" 2>>"$work/n$i.log" &
	node_pid[$i]=$!
	for _ in $(seq 100); do
		port_open "$(port "$i" 2)" && return
		sleep 0.1
	done
	log "node $i does not listen; its log:"
	cat "$work/n$i.log" >&2
	exit 1
}

rss() { awk '/^VmRSS:/ {print $2 * 1024}' "/proc/${node_pid[$1]}/status"; }
# heap I forces a GC on node I (pprof) and prints its live heap (go_memstats_heap_alloc_bytes).
heap() {
	local h="http://127.0.0.1:$(port "$1" 2)"
	curl -sf -m 5 "$h/debug/pprof/heap?gc=1&debug=1" >/dev/null
	curl -sf -m 5 "$h/metrics" | awk '$1 == "go_memstats_heap_alloc_bytes" {printf "%d\n", $2}'
}
# metric I SERIES prints the sum of the samples of SERIES (name with labels, a prefix) on node I.
metric() {
	curl -sf -m 5 "http://127.0.0.1:$(port "$1" 2)/metrics" |
		awk -v s="$2" 'index($0, s) == 1 {v += $NF} END {printf "%d\n", v}'
}
# measure prints "rss heap" of each node in 1..N (or of node 0), RSS first: a forced GC
# before it would leave freed pages resident and flatter the connections.
measure() {
	local i r=() h=()
	for i in "$@"; do r[$i]=$(rss "$i"); done
	for i in "$@"; do h[$i]=$(heap "$i"); done
	for i in "$@"; do echo "${r[$i]} ${h[$i]}"; done
}

# clients NAME NODE RUN OFFSET N CONCURRENCY starts a worker holding N connections to
# NODE, client ids lg-RUN-cOFFSET..; its report lands in $work/NAME.out.
clients() {
	local name=$1 node=$2 run=$3 offset=$4 n=$5 conc=$6
	"$work/bifrost-bench" conns -worker -worker-run "$run" -worker-offset "$offset" \
		-worker-deadline 15m -addr "127.0.0.1:$(port "$node" 1)" -version 5.0 -n "$n" \
		-per-proc "$n" -concurrency "$conc" -subscribe -qos 1 \
		<"$work/hold" >"$work/$name.out" 2>>"$work/$name.err" &
	client_pids+=($!)
	eval "pid_$name=$!"
}
# reported NAME waits (up to 10 min) for the worker's connect report and prints it.
reported() {
	for _ in $(seq 6000); do
		[ -s "$work/$1.out" ] && { head -1 "$work/$1.out"; return; }
		sleep 0.1
	done
	log "$1 did not report"
	exit 1
}

per() { echo "scale=1; $1 / $2" | bc; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

log "load average at start: $(load)"
echo "# cluster-conns ($(date -u +%Y-%m-%dT%H:%MZ), $(git describe --always --dirty), $per_node per node, ${settle}s settle)"
echo
echo "load average at start: $(load)"

# --- 1. one node, no cluster -----------------------------------------------------------
if [ "$storm" = 0 ]; then
start_node 0
sleep 1
read -r r0 h0 < <(measure 0)
clients single 0 single 0 "$per_node" 64
rep=$(reported single)
sleep "$settle"
read -r r1 h1 < <(measure 0)
c=$(jq .connected <<<"$rep")
rate0=$(jq '.connected / ((.end_unix_ns - .start_unix_ns) / 1e9) | floor' <<<"$rep")
stop_pids "$pid_single"
stop_pids "${node_pid[0]}"
node_pid[0]=0
echo
echo "## one node, no cluster"
echo
echo "| connected | RSS per connection (B) | live heap per connection (B) | CONNECTs/s |"
echo "|---|---|---|---|"
echo "| $c | $(per $((r1 - r0)) "$c") | $(per $((h1 - h0)) "$c") | $rate0 |"
single_rss=$(per $((r1 - r0)) "$c")
single_heap=$(per $((h1 - h0)) "$c")
fi

# --- 2. five nodes ---------------------------------------------------------------------
for i in $(seq "$nodes"); do start_node "$i"; done
ready() { # every node formed, sees N alive members and serves clients
	local i
	for i in $(seq "$nodes"); do
		curl -sf -m 5 "http://127.0.0.1:$(port "$i" 2)/cluster" | jq -e --argjson n "$nodes" \
			'.formed and ([.members[] | select(.state == "alive")] | length) == $n' >/dev/null 2>&1 || return 1
		[ "$(metric "$i" bifrost_cluster_serving)" = 1 ] || return 1
	done
}
for _ in $(seq 300); do ready && break; sleep 0.1; done
ready || { log "the cluster did not form"; cat "$work"/n*.log >&2; exit 1; }
sleep 2
all=$(seq "$nodes")
mapfile -t base_m < <(measure $all)
echo
echo "## $nodes nodes: $per_node connections opened on each in turn"
echo
# Live heap only: RSS deltas over one set move with the heap's growth steps and what the
# memory policy returns meanwhile (even below zero); RSS is given for the whole, below.
echo "| node | connected | CONNECTs/s | claims per Raft entry | its live heap per connection (B) | each other node's live heap per remote client (B) | routes of it on n1 |"
echo "|---|---|---|---|---|---|---|"
for i in $all; do
	mapfile -t before < <(measure $all)
	ids0=$(metric "$i" 'bifrost_cluster_claims_total{what="client_ids"}')
	ent0=$(metric "$i" 'bifrost_cluster_claims_total{what="entries"}')
	n=$per_node
	[ "$storm" = 1 ] && [ "$i" -lt "$nodes" ] && n=${SURVIVORS:-14000}
	clients "c$i" "$i" cl $(((i - 1) * per_node)) "$n" 64
	rep=$(reported "c$i")
	ids1=$(metric "$i" 'bifrost_cluster_claims_total{what="client_ids"}')
	ent1=$(metric "$i" 'bifrost_cluster_claims_total{what="entries"}')
	sleep "$settle"
	mapfile -t after < <(measure $all)
	c=$(jq .connected <<<"$rep")
	rate=$(jq '.connected / ((.end_unix_ns - .start_unix_ns) / 1e9) | floor' <<<"$rep")
	rh=0
	for j in $all; do
		read -r rb hb <<<"${before[$((j - 1))]}"
		read -r ra ha <<<"${after[$((j - 1))]}"
		if [ "$j" = "$i" ]; then
			lh=$(per $((ha - hb)) "$c")
		else
			rh=$((rh + ha - hb))
		fi
	done
	routes=$([ "$i" = 1 ] && echo - || metric 1 "bifrost_cluster_routes{peer=\"n$i\"}")
	echo "| n$i | $c | $rate | $(per $((ids1 - ids0)) $((ent1 - ent0 > 0 ? ent1 - ent0 : 1))) | $lh | $(per "$rh" $((c * (nodes - 1)))) | $routes |"
done
if [ "$storm" = 0 ]; then
mapfile -t final_m < <(measure $all)
echo
echo "With all $((nodes * per_node)) connected (each node: $per_node local connections, $(((nodes - 1) * per_node)) remote routes, $((nodes * per_node)) ownership entries), growth over the formed, idle cluster per local connection; one node without a cluster: RSS $single_rss B, heap $single_heap B per connection:"
echo
echo "| node | RSS (MiB) | RSS per local conn (B) | live heap (MiB) | heap per local conn (B) |"
echo "|---|---|---|---|---|"
for i in $all; do
	read -r rb hb <<<"${base_m[$((i - 1))]}"
	read -r ra ha <<<"${final_m[$((i - 1))]}"
	echo "| n$i | $((ra >> 20)) | $(per $((ra - rb)) "$per_node") | $((ha >> 20)) | $(per $((ha - hb)) "$per_node") |"
done
echo
fi
echo "load average after the connections: $(load)"

# --- 3. kill -9 of n5 ------------------------------------------------------------------
# survivors SERIES prints the sum of SERIES over n1..n(N-1).
survivors() {
	local j v=0
	for j in $(seq $((nodes - 1))); do v=$((v + $(metric "$j" "$1"))); done
	echo "$v"
}
# detect VICTIM T0 DEAD0 polls n1's /metrics (its /cluster asks Raft, which a claim storm
# keeps busy) until it counts more dead members than DEAD0 and has no route of VICTIM
# (2 min at most); sets t_dead and t_routes (ns) or leaves them empty.
detect() {
	local v=$1 t0=$2 dead0=$3
	t_dead="" t_routes=""
	while [ $(($(now_ns) - t0)) -lt 120000000000 ]; do
		if [ -z "$t_dead" ] && [ "$(metric 1 'bifrost_cluster_members{state="dead"}')" -gt "$dead0" ]; then
			t_dead=$(now_ns)
		fi
		if [ -z "$t_routes" ] && [ "$(metric 1 "bifrost_cluster_routes{peer=\"n$v\"}")" = 0 ]; then
			t_routes=$(now_ns)
		fi
		[ -n "$t_dead" ] && [ -n "$t_routes" ] && return
		sleep 0.05
	done
}
ho0=$(survivors 'bifrost_cluster_handovers_total{outcome="lost"}')
to0=$(survivors bifrost_cluster_route_ack_timeouts_total)
rf0=$(survivors 'bifrost_connects_refused_total{reason="open_files"}')
dead0=$(metric 1 'bifrost_cluster_members{state="dead"}')
t0=$(now_ns)
kill -KILL "${node_pid[$nodes]}"
wait "${node_pid[$nodes]}" 2>/dev/null || true
node_pid[$nodes]=0
stop_pids "$(eval echo "\$pid_c$nodes")"
# The dead node's clients come back at once, spread over the survivors, each with the
# client id it had.
share=$((per_node / (nodes - 1)))
for j in $(seq $((nodes - 1))); do
	n=$share
	[ "$j" = $((nodes - 1)) ] && n=$((per_node - share * (nodes - 2)))
	clients "m$j" "$j" cl $(((nodes - 1) * per_node + (j - 1) * share)) "$n" "${MOVE_CONC:-$n}"
done
detect "$nodes" "$t0" "$dead0"
moved=0 failed=0 last=0
for j in $(seq $((nodes - 1))); do
	rep=$(reported "m$j")
	moved=$((moved + $(jq .connected <<<"$rep")))
	failed=$((failed + $(jq .failed <<<"$rep")))
	e=$(jq .end_unix_ns <<<"$rep")
	[ "$e" -gt "$last" ] && last=$e
done
ho1=$(survivors 'bifrost_cluster_handovers_total{outcome="lost"}')
to1=$(survivors bifrost_cluster_route_ack_timeouts_total)
rf1=$(survivors 'bifrost_connects_refused_total{reason="open_files"}')
ms() { [ -n "$1" ] && echo "$((($1 - t0) / 1000000)) ms" || echo "not within 120 s"; }
echo
echo "## kill -9 of n$nodes with $per_node clients"
echo
echo "| figure | value |"
echo "|---|---|"
echo "| n1's memberlist marks n$nodes dead | $(ms "$t_dead") |"
echo "| n$nodes's routes gone from n1 | $(ms "$t_routes") |"
echo "| its clients, reconnecting at once (${MOVE_CONC:-all} per survivor in flight) to n1..n$((nodes - 1)), connected and subscribed | $(ms "$last") ($moved connected, $failed failed; the tool waits 10 s at most for each CONNACK and SUBACK) |"
echo "| refused at once by survivors at their open-file cap | $((rf1 - rf0)) |"
echo "| their sessions | $((ho1 - ho0)) lost (handed over from a dead node: none can be) |"
echo "| SUBACKs released by the 10 s bound instead of every live peer's ack | $((to1 - to0)) |"
echo
echo "load average: $(load)"

# --- 4. kill -9 of n4, nobody reconnecting ---------------------------------------------
# Failure detection alone, the survivors otherwise idle.
sleep "$settle"
victim=$((nodes - 1))
dead0=$(metric 1 'bifrost_cluster_members{state="dead"}')
t0=$(now_ns)
kill -KILL "${node_pid[$victim]}"
wait "${node_pid[$victim]}" 2>/dev/null || true
node_pid[$victim]=0
detect "$victim" "$t0" "$dead0"
echo
echo "## kill -9 of n$victim, its clients not reconnecting"
echo
echo "| figure | value |"
echo "|---|---|"
echo "| n1's memberlist marks n$victim dead | $(ms "$t_dead") |"
echo "| n$victim's routes gone from n1 | $(ms "$t_routes") |"
echo
echo "load average at the end: $(load)"
