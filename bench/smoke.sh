#!/usr/bin/env bash
# Smoke version of every benchmark, for CI: each Go benchmark once, and each bifrost-bench
# mode for a second or two against a fresh broker on loopback. It checks that the
# benchmarks run, not what they measure: figures are printed, never asserted (the machine
# CI runs on is shared). The real runs: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."

port=${SMOKE_PORT:-22883}
http_port=${SMOKE_HTTP_PORT:-22880}
ws_port=${SMOKE_WS_PORT:-22884}
work=$(mktemp -d)
broker_pid=""
cleanup() {
	if [ -n "$broker_pid" ]; then
		kill -TERM "$broker_pid" 2>/dev/null || true
		wait "$broker_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

echo "== Go benchmarks, one iteration each"
# The figures only, unless a benchmark fails: then all it printed (its logs say why).
if ! go test -run '^$' -bench . -benchtime 1x -benchmem ./... >"$work/bench.out" 2>&1; then
	cat "$work/bench.out"
	exit 1
fi
grep -E '^(Benchmark|ok|FAIL|---)' "$work/bench.out" | sed 's/^/  /'

echo "== bifrost-bench against a fresh broker"
go build -o "$work/bifrost" ./cmd/bifrost
go build -o "$work/bifrost-bench" ./cmd/bifrost-bench
cat >"$work/bifrost.yaml" <<YAML
listeners:
  - type: tcp
    address: 127.0.0.1:$port
  - type: ws
    address: 127.0.0.1:$ws_port
http:
  address: 127.0.0.1:$http_port
store:
  dir: $work/data
log:
  level: warn
YAML
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$port" "$http_port" "$ws_port"; do
	if port_open "$p"; then
		echo "port $p is taken (set SMOKE_PORT / SMOKE_HTTP_PORT / SMOKE_WS_PORT)" >&2
		exit 1
	fi
done
"$work/bifrost" -c "$work/bifrost.yaml" 2>"$work/bifrost.log" &
broker_pid=$!
for _ in $(seq 100); do
	port_open "$port" && break
	kill -0 "$broker_pid" 2>/dev/null || { cat "$work/bifrost.log" >&2; exit 1; }
	sleep 0.1
done
port_open "$port" || { echo "the broker does not listen on $port" >&2; exit 1; }

run() {
	echo "-- bifrost-bench $*"
	"$work/bifrost-bench" "$@" -addr "127.0.0.1:$port" -pid "$broker_pid" \
		-metrics "http://127.0.0.1:$http_port" -timeout 1m | grep -v '^{' | sed 's/^/  /'
}
run_ws() {
	echo "-- bifrost-bench $* (WebSocket)"
	"$work/bifrost-bench" "$@" -addr "127.0.0.1:$ws_port" -ws /mqtt -pid "$broker_pid" \
		-metrics "http://127.0.0.1:$http_port" -timeout 1m | grep -v '^{' | sed 's/^/  /'
}
run conns -n 500 -settle 1s
run conns -n 500 -subscribe -version 5.0 -settle 1s
run_ws conns -n 500 -settle 1s
run_ws fanin -pubs 4 -qos 1 -duration 1s
for q in 0 1 2; do
	run fanin -pubs 4 -qos "$q" -duration 1s
	run fanout -subs 10 -qos "$q" -duration 1s
	run pair -pairs 4 -qos "$q" -duration 1s
done
run pair -pairs 1 -rate 1000 -duration 1s
run churn -concurrency 8 -duration 2s -settle 1s
