#!/usr/bin/env bash
# cluster-traffic.sh measures the node-to-node traffic of an idle bifrost cluster: gossip
# (memberlist's probes, gossip and the 2 s push-pull) and the rpc port (Raft's heartbeats,
# the lease's checks, gRPC keep-alives). The nodes run in a network namespace of their own,
# so that its loopback counters (/proc/net/dev) count their traffic and nobody else's; the
# rpc port's share is read per socket (ss: bytes_acked and segments of every established
# connection on an rpc port), the rest is gossip. For each cluster size N: N nodes form,
# run 5 s, then the counters are read over the measuring window.
#
#   bench/cluster-traffic.sh              5 and 20 nodes, 20 s windows
#   bench/cluster-traffic.sh --quick      5 nodes, 10 s
#
# Needs root (ip netns). The namespace is deleted and every process this script starts is
# stopped by pid on the way out.
set -euo pipefail
cd "$(dirname "$0")/.."

sizes=(5 20)
window=20
case "${1:-}" in
--quick) sizes=(5) window=10 ;;
"") ;;
*)
	echo "usage: $0 [--quick]" >&2
	exit 2
	;;
esac

ns=bifrost-traffic-$$
work=$(mktemp -d)
pids=()
# shellcheck source=bench/lib/cluster.sh
. bench/lib/cluster.sh
stop_all() {
	stop_pids "${pids[@]}"
	pids=()
}
cleanup() {
	stop_all
	ip netns del "$ns" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
command -v jq >/dev/null 2>&1 || { log "cluster-traffic.sh needs jq"; exit 1; }

go build -o "$work/bifrost" ./cmd/bifrost
ip netns add "$ns"
in_ns() { ip netns exec "$ns" "$@"; }
in_ns ip link set lo up

base=20000
port() { echo $((base + 10 * $1 + $2)); } # port NODE KIND: 1 mqtt, 2 http, 3 gossip, 4 rpc

# lo_bytes prints the namespace's loopback "bytes packets" sent so far.
lo_bytes() { in_ns awk '$1 == "lo:" {print $10, $11}' /proc/net/dev; }
# rpc_sockets prints "local peer bytes_acked segs_out" of every established TCP socket
# with an rpc port at either end.
rpc_sockets() {
	in_ns ss -tinH state established | awk -v lo="$(port 1 4)" -v hi="$(port "$1" 4)" '
		function rpc(a,  p) { p = a; sub(/.*:/, "", p); p += 0; return p >= lo && p <= hi && p % 10 == 4 }
		/^[0-9]/ || /^ESTAB/ { l = $(NF - 1); r = $NF; keep = rpc(l) || rpc(r); next }
		keep { b = 0; s = 0
			for (i = 1; i <= NF; i++) {
				if ($i ~ /^bytes_acked:/) { sub(/.*:/, "", $i); b = $i }
				if ($i ~ /^segs_out:/) { sub(/.*:/, "", $i); s = $i }
			}
			print l, r, b, s; keep = 0 }'
}

echo "# cluster-traffic ($(date -u +%Y-%m-%dT%H:%MZ), $(git describe --always --dirty), ${window}s windows, idle nodes in a network namespace)"
echo
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| nodes | loopback bytes/s, all nodes | per node | rpc port (Raft, gRPC) per node, payload + 52 B per segment | gossip per node (the rest) | packets/s per node |"
echo "|---|---|---|---|---|---|"
for n in "${sizes[@]}"; do
	seeds=""
	for i in $(seq "$n"); do seeds+="127.0.0.1:$(port "$i" 3),"; done
	for i in $(seq "$n"); do
		mkdir -p "$work/d$n-$i"
		node_config "$i" "$((n < 5 ? n : 5))" "$work/d$n-$i" "[${seeds%,}]" >"$work/n$i.yaml"
		# ip execs the broker: $! is the broker's pid.
		ip netns exec "$ns" "$work/bifrost" -c "$work/n$i.yaml" 2>>"$work/n$i.log" &
		pids+=($!)
	done
	formed() {
		local i
		for i in $(seq "$n"); do
			in_ns curl -sf -m 5 "http://127.0.0.1:$(port "$i" 2)/cluster" | jq -e --argjson n "$n" \
				'.formed and ([.members[] | select(.state == "alive")] | length) == $n' >/dev/null 2>&1 || return 1
		done
	}
	for _ in $(seq 600); do formed && break; sleep 0.2; done
	formed || { log "$n nodes did not form; logs in $work"; cat "$work"/n*.log >&2; exit 1; }
	sleep 5
	read -r b0 p0 < <(lo_bytes)
	rpc_sockets "$n" >"$work/rpc0"
	sleep "$window"
	read -r b1 p1 < <(lo_bytes)
	rpc_sockets "$n" >"$work/rpc1"
	rpc=$(awk 'NR == FNR {b[$1 " " $2] = $3; s[$1 " " $2] = $4; next}
		{k = $1 " " $2; t += ($3 - b[k]) + 52 * ($4 - s[k])} END {printf "%d\n", t}' "$work/rpc0" "$work/rpc1")
	all=$(((b1 - b0) / window))
	echo "| $n | $all | $((all / n)) | $((rpc / window / n)) | $(((all - rpc / window) / n)) | $(((p1 - p0) / window / n)) |"
	stop_all
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
