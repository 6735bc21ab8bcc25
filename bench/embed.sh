#!/usr/bin/env bash
# embed.sh measures the smallest program that embeds bifrost (examples/minimal: edge
# profile, one TCP listener, no store, no HTTP endpoint; docs/edge.md, "Embedding"): its
# binary size, the allocations of its package inits (GODEBUG=inittrace=1), and its
# VmRSS, RssAnon, RssFile and PSS (/proc/PID/status, smaps_rollup) just started and with
# 1,000 idle clients, sampled every 0.5 s.
#
#   bench/embed.sh                      plain go build (Pebble linked)
#   TAGS=bifrost_nopebble bench/embed.sh
#   PKG=./some/other/main bench/embed.sh
#
# Environment: PORT (25883, loopback); CONNS (1000); HOLD (10, seconds the clients stay);
# TAGS (build tags, none unless set); PKG (./examples/minimal); GO_BUILD_ENV
# (CGO_ENABLED=0, as a release build). Results go to bench/results/ (gitignored). Every
# process this script starts is stopped by pid on the way out.
set -euo pipefail
cd "$(dirname "$0")/.."

port=${PORT:-25883}
conns=${CONNS:-1000}
hold=${HOLD:-10}
tags=${TAGS-}
pkg=${PKG:-./examples/minimal}
build_env=${GO_BUILD_ENV:-CGO_ENABLED=0}
work=$(mktemp -d)
results=bench/results/embed-$(date +%Y%m%d-%H%M%S)
mkdir -p "$results"
prog_pid=""
sampler_pid=""
conns_pid=""

# shellcheck source=bench/lib/proc.sh
. bench/lib/proc.sh

cleanup() {
	stop_pids "$conns_pid" "$sampler_pid" "$prog_pid"
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building $pkg ($build_env, tags '$tags') and bifrost-bench"
env $build_env go build -tags "$tags" -o "$work/prog" "$pkg"
go build -o "$work/bifrost-bench" ./cmd/bifrost-bench
size=$(stat -c %s "$work/prog")
go version -m "$work/prog" | awk '$1 == "dep" {print $2}' >"$results/modules.txt"
go tool nm -size -sort size "$work/prog" >"$results/nm.txt"

if port_open "$port"; then
	log "port $port is taken"
	exit 1
fi
GODEBUG=inittrace=1 "$work/prog" -addr "127.0.0.1:$port" 2>"$results/prog.log" &
prog_pid=$!
for _ in $(seq 100); do port_open "$port" && break; sleep 0.1; done
port_open "$port" || { log "the program did not listen"; cat "$results/prog.log" >&2; exit 1; }

# One sample every 0.5 s: time since start (ds), VmRSS, RssAnon, RssFile, Pss (kB).
start=$(now)
(
	while kill -0 "$prog_pid" 2>/dev/null; do
		s=$(awk '/^(VmRSS|RssAnon|RssFile):/ {printf " %s", $2}' "/proc/$prog_pid/status" 2>/dev/null || true)
		p=$(awk '/^Pss:/ {print $2}' "/proc/$prog_pid/smaps_rollup" 2>/dev/null || true)
		[ -n "$s" ] && echo "$(since "$start")$s $p"
		sleep 0.5
	done
) >"$results/rss.txt" &
sampler_pid=$!

sleep 3
idle_end=$(since "$start")
"$work/bifrost-bench" conns -addr "127.0.0.1:$port" -n "$conns" -settle 3s -hold "${hold}s" \
	-pid "$prog_pid" -json-only >"$results/conns.json" 2>"$results/conns.err" &
conns_pid=$!
sleep 6 # connected and settled
held_start=$(since "$start")
sleep $((hold - 2))
held_end=$(since "$start")
wait "$conns_pid"
conns_pid=""

stat() { # from to column: the median of the column over the samples in [from, to), MiB
	awk -v a="$1" -v b="$2" -v c="$3" '$1 >= a && $1 < b {print $c}' "$results/rss.txt" | sort -n |
		awk '{v[NR] = $1} END {if (NR == 0) {print "-"; exit} printf "%.1f", v[int((NR + 1) / 2)] / 1024}'
}
row() { # label from to
	printf '%-22s VmRSS %s  RssAnon %s  RssFile %s  PSS %s MiB\n' "$1" "$(stat "$2" "$3" 2)" \
		"$(stat "$2" "$3" 3)" "$(stat "$2" "$3" 4)" "$(stat "$2" "$3" 5)"
}
inits=$(grep -c '^init ' "$results/prog.log" || true)
init_bytes=$(awk '$1 == "init" {for (i = 1; i < NF; i++) if ($(i + 1) == "bytes,") b += $i} END {print b + 0}' "$results/prog.log")
{
	echo "$pkg (tags '$tags', $build_env): $size bytes, $(wc -l <"$results/modules.txt") modules"
	echo "package inits: $inits, $init_bytes bytes allocated; the largest:"
	awk '$1 == "init" {for (i = 1; i < NF; i++) if ($(i + 1) == "bytes,") print $i, $2}' "$results/prog.log" |
		sort -rn | head -8 | sed 's/^/  /'
	row "just started" 1 "$idle_end"
	row "$conns idle clients" "$held_start" "$held_end"
	echo "clients: $(tr -d '\n' <"$results/conns.json" | grep -o '"connected": *[0-9]*' || echo '?')"
} | tee "$results/summary.txt"
