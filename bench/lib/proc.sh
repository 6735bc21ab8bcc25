# shellcheck shell=bash
# What every bench script does alike with the processes it starts. Sourced.

log() { printf '%s\n' "$*" >&2; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
now() { date +%s.%N | cut -c1-14; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

# stop_pids PID... sends each SIGTERM, then waits up to 10 s for each before SIGKILL.
# Empty arguments are skipped.
stop_pids() {
	local pid
	for pid in "$@"; do [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "$@"; do
		[ -n "$pid" ] || continue
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
}

# build_edge DIR builds the edge broker (TAGS, default the edge build: no cluster, the log
# store only; TAGS= for the default build) and the load tool into DIR.
build_edge() {
	local tags=${TAGS-bifrost_nocluster bifrost_nopebble}
	log "building bifrost (CGO_ENABLED=0, tags '$tags') and bifrost-bench"
	CGO_ENABLED=0 go build -tags "$tags" -o "$1/bifrost" ./cmd/bifrost
	go build -o "$1/bifrost-bench" ./cmd/bifrost-bench
}
