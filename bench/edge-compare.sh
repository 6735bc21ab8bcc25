#!/usr/bin/env bash
# edge-compare.sh runs bench/edge-store.sh's load against bifrost (edge profile, store on)
# and then, in the same run, against Mosquitto with persistence, and measures for each:
#
#   memory   VmRSS, RssAnon, RssFile (/proc/PID/status) and PSS, PSS anon and PSS file
#            (/proc/PID/smaps_rollup) every 0.5 s: just started, 1,000 idle connections,
#            and under 100 QoS 1 msg/s to persistent subscribers;
#   flash    over the traffic: write_bytes and syscw of /proc/PID/io (syscw counts socket
#            writes too), and with strace the write calls, bytes and fsyncs on files only,
#            per second and per message;
#   return   a spike: SPIKE more connections and SLOW_SPIKE subscribers that never read,
#            held SPIKE_HOLD seconds, and 5 s of QoS 0 at FLOOD_RATE msg/s (1 KiB) to
#            them; then idle for RETURN_WAIT seconds: the RSS curve every 0.5 s, and
#            when it came back.
#
#   bench/edge-compare.sh
#   SYNC=interval BROKERS=bifrost bench/edge-compare.sh
#
# Environment: BROKERS ("bifrost mosquitto"); PORT (24883; Mosquitto PORT+1) and
# HTTP_PORT (24880); DURATION (60 s of traffic); PAIRS (10) and RATE (10/s each); CONNS
# (1000); SYNC (always, bifrost's store.sync); AUTOSAVE (10, Mosquitto's
# autosave_interval in seconds: a gateway's choice; its default, 1800, writes nothing in
# a run this short); SPIKE (5000), SLOW_SPIKE (100), FLOOD_RATE (400), SPIKE_HOLD (10),
# RETURN_WAIT (75); STRACE (1; 0 skips
# it, as it slows the broker a little). Every process this script starts is stopped by
# pid. Samples and reports go to bench/results/ (gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."

brokers=${BROKERS:-bifrost mosquitto}
port=${PORT:-24883}
http_port=${HTTP_PORT:-24880}
duration=${DURATION:-60}
pairs=${PAIRS:-10}
rate=${RATE:-10}
conns=${CONNS:-1000}
sync=${SYNC:-always}
autosave=${AUTOSAVE:-10}
spike=${SPIKE:-5000}
spike_hold=${SPIKE_HOLD:-10}
slow_spike=${SLOW_SPIKE:-100}
flood_rate=${FLOOD_RATE:-400}
return_wait=${RETURN_WAIT:-75}
use_strace=${STRACE:-1}
command -v strace >/dev/null || use_strace=0
mosquitto_bin=$(command -v mosquitto || echo /usr/sbin/mosquitto)
work=$(mktemp -d) # on a disk file system: write_bytes counts nothing on tmpfs
results=bench/results/edge-compare-$(date +%Y%m%d-%H%M%S)
mkdir -p "$results"

broker_pid=""
pids=()
# shellcheck source=bench/lib/proc.sh
. bench/lib/proc.sh

cleanup() {
	stop_pids "${pids[@]}" "$broker_pid"
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for p in "$port" "$((port + 1))" "$http_port"; do
	if port_open "$p"; then
		log "port $p is taken: another broker would get this script's load"
		exit 1
	fi
done

build_edge "$work"

mkdir -p "$work/bifrost-data" "$work/mosquitto-data"
# Mosquitto started as root runs as the user mosquitto, which must reach its directory.
chmod 711 "$work"
if id mosquitto >/dev/null 2>&1; then
	chown mosquitto "$work/mosquitto-data"
fi
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
  dir: $work/bifrost-data
  sync: $sync
log:
  level: warn
EOF
cat >"$work/mosquitto.conf" <<EOF
listener $((port + 1)) 127.0.0.1
allow_anonymous true
persistence true
persistence_location $work/mosquitto-data/
autosave_interval $autosave
max_connections -1
log_dest stderr
log_type error
log_type warning
EOF
cp "$work/bifrost.yaml" "$work/mosquitto.conf" "$results/"

# sample PID FILE START: every 0.5 s seconds since START, VmRSS, RssAnon, RssFile, Pss,
# Pss_Anon, Pss_File (kB).
sample() {
	while kill -0 "$1" 2>/dev/null; do
		s=$(awk '/^(VmRSS|RssAnon|RssFile):/ {printf " %s", $2}' "/proc/$1/status" 2>/dev/null || true)
		p=$(awk '/^(Pss|Pss_Anon|Pss_File):/ {printf " %s", $2}' "/proc/$1/smaps_rollup" 2>/dev/null || true)
		[ -n "$s" ] && echo "$(since "$3")$s$p"
		sleep 0.5
	done >"$2"
}

io() { awk '/^(syscw|write_bytes):/ {printf "%s ", $2}' "/proc/$1/io"; } # syscw write_bytes

# strace_files OUT: file write calls, bytes and syncs in strace -f -y output (sockets,
# pipes and eventfds left out; an unfinished call is completed by its resumed line).
strace_files() {
	awk '
	function fdpath(s) { if (match(s, /\(([0-9]+)<[^>]*>/)) return substr(s, RSTART, RLENGTH); return "" }
	function count(name, path, ret) {
		if (path !~ /<\//) return # not a file: socket:[..], pipe:[..], anon_inode
		if (name ~ /sync/) { syncs++; return }
		calls++; if (ret > 0) bytes += ret
	}
	/ <unfinished \.\.\.>/ {
		split($2, a, "("); pend[$1] = a[1]; pendpath[$1] = fdpath($0); next
	}
	/<\.\.\. [a-z0-9_]+ resumed>/ {
		if ($1 in pend) { n = split($0, r, "= "); count(pend[$1], pendpath[$1], r[n] + 0); delete pend[$1] }
		next
	}
	/^[0-9]+ +[a-z0-9_]+\(/ {
		split($2, a, "("); n = split($0, r, "= "); count(a[1], fdpath($0), r[n] + 0)
	}
	END { printf "%d %d %d\n", calls, bytes, syncs }' "$1"
}

run() { # broker
	local b=$1 addr out=$results/$1
	mkdir -p "$out"
	case $b in
	bifrost)
		addr=127.0.0.1:$port
		"$work/bifrost" -c "$work/bifrost.yaml" 2>"$out/broker.log" &
		;;
	mosquitto)
		addr=127.0.0.1:$((port + 1))
		"$mosquitto_bin" -c "$work/mosquitto.conf" 2>"$out/broker.log" &
		;;
	esac
	broker_pid=$!
	for _ in $(seq 100); do
		port_open "${addr#*:}" && break
		sleep 0.1
	done
	kill -0 "$broker_pid" 2>/dev/null || { log "$b exited:"; tail -3 "$out/broker.log" >&2; exit 1; }
	log "$b: pid $broker_pid on $addr"
	local start
	start=$(now)
	sample "$broker_pid" "$out/samples.txt" "$start" &
	local sampler=$!
	pids+=("$sampler")
	sleep 3
	local t_idle t_traffic t_end t_spike t_spike_end
	t_idle=$(since "$start")
	local hold=$((15 + duration + spike_hold + return_wait + 30))
	"$work/bifrost-bench" conns -addr "$addr" -n "$conns" -settle 5s -hold "${hold}s" \
		-json-only >"$out/conns.json" 2>"$out/conns.err" &
	local conns_pid=$!
	pids+=("$conns_pid")
	sleep 15
	t_traffic=$(since "$start")
	local io0 io1 strace_pid=""
	io0=$(io "$broker_pid")
	if [ "$use_strace" = 1 ]; then
		strace -f -qq -y -s 0 -e trace=write,writev,pwrite64,pwritev,pwritev2,fsync,fdatasync,sync_file_range \
			-o "$out/strace.txt" -p "$broker_pid" 2>/dev/null &
		strace_pid=$!
		pids+=("$strace_pid")
	fi
	"$work/bifrost-bench" pair -addr "$addr" -pairs "$pairs" -rate "$rate" -qos 1 \
		-duration "${duration}s" -session-expiry 3600 -json-only >"$out/pair.json" 2>"$out/pair.err"
	io1=$(io "$broker_pid")
	if [ -n "$strace_pid" ]; then
		kill -INT "$strace_pid" 2>/dev/null || true
		wait "$strace_pid" 2>/dev/null || true
	fi
	t_end=$(since "$start")
	sleep 3
	t_spike=$(since "$start")
	"$work/bifrost-bench" conns -addr "$addr" -n "$spike" -hold "${spike_hold}s" -json-only \
		>"$out/spike.json" 2>"$out/spike.err" &
	local spike_pid=$!
	pids+=("$spike_pid")
	# With the connections, a burst of QoS 0 messages to subscribers that do not read:
	# what the broker holds for them is heap, the spike the return-to-OS policy is for.
	/usr/bin/python3 bench/edge-surge.py slow "$addr" "$slow_spike" spike/# "$spike_hold" >"$out/slow.json" &
	local slow_pid=$!
	pids+=("$slow_pid")
	sleep 2
	/usr/bin/python3 bench/edge-surge.py flood "$addr" spike/1 "$flood_rate" 5 1024 >"$out/flood.json" || true
	wait "$spike_pid" "$slow_pid" 2>/dev/null || true
	t_spike_end=$(since "$start")
	sleep "$return_wait"
	stop_pids "$broker_pid"
	broker_pid=""
	stop_pids "$conns_pid"
	stop_pids "$sampler"

	local traffic msgs
	traffic=$(jq -r '.traffic | "\(.sent) sent, \(.received) received, \(.lost) lost, \(.acked) acked"' "$out/pair.json")
	msgs=$(jq -r '.traffic.received' "$out/pair.json")
	local secs
	secs=$(awk -v a="$t_traffic" -v b="$t_end" 'BEGIN {printf "%.1f", b - a}')
	local files="- - -"
	[ -s "$out/strace.txt" ] && files=$(strace_files "$out/strace.txt")
	{
		echo "== $b"
		stats "$out/samples.txt" 0 "$t_idle" "just started:        "
		stats "$out/samples.txt" $(awk -v a="$t_idle" 'BEGIN {print a + 10}') "$t_traffic" "$conns idle connections: "
		stats "$out/samples.txt" $(awk -v a="$t_traffic" 'BEGIN {print a + 10}') "$t_end" "under load:          "
		echo "traffic:              $traffic over ${secs}s"
		echo "$io0 $io1" | awk -v s="$secs" -v m="$msgs" '{w = $4 - $2; c = $3 - $1
			printf "flash (/proc/io):     write_bytes %d (%.0f B/s, %.0f B/msg); syscw %d (%.1f/s, %.2f/msg, sockets included)\n", w, w / s, w / m, c, c / s, c / m}'
		echo "$files" | awk -v s="$secs" -v m="$msgs" '$1 != "-" {
			printf "flash (strace files): %d writes (%.1f/s, %.3f/msg), %d bytes (%.0f B/s, %.0f B/msg), %d fsync/fdatasync (%.1f/s)\n", $1, $1 / s, $1 / m, $2, $2 / s, $2 / m, $3, $3 / s}'
		spike_report "$out/samples.txt" "$t_end" "$t_spike" "$t_spike_end"
		echo "spike:                $(jq -c '.conns | {connected, failed, connect_s}' "$out/spike.json" 2>/dev/null || echo see spike.err) connections; slow subscribers $(head -1 "$out/slow.json"); QoS 0 burst $(cat "$out/flood.json")"
	} | tee -a "$results/summary.txt"
}

# stats FILE FROM TO LABEL: medians over the samples in [FROM, TO) in MiB.
stats() {
	awk -v a="$2" -v b="$3" -v l="$4" '$1 >= a && $1 < b {n++; for (i = 2; i <= 7; i++) v[i, n] = $i}
	function med(i,   k, j, t, x) { for (k = 1; k <= n; k++) x[k] = v[i, k]
		for (k = 2; k <= n; k++) { t = x[k]; for (j = k - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
		return x[int((n + 1) / 2)] / 1024 }
	END { if (n == 0) { print l "-"; exit }
		printf "%sVmRSS %.1f, anon %.1f, file %.1f; PSS %.1f, anon %.1f, file %.1f MiB (median)\n", l, med(2), med(3), med(4), med(5), med(6), med(7) }' "$1"
}

# spike_report FILE T_BEFORE T_SPIKE T_SPIKE_END: RSS before the spike (the 3 s before
# it), its peak, and the first time after it that RSS is within 1 MiB of before.
spike_report() {
	awk -v e="$2" -v s="$3" -v se="$4" '
	$1 >= e && $1 < s {base += $2; nb++}
	$1 >= s && $2 > peak {peak = $2}
	$1 >= se && !back && nb && $2 <= base / nb + 1024 {back = $1 - se; at = $2}
	$1 >= se {last = $2; curve = curve sprintf(" %.1f", $2 / 1024)}
	END { printf "return after spike:   VmRSS before %.1f, peak %.1f MiB; back within 1 MiB %s; at the end %.1f MiB\n", base / nb / 1024, peak / 1024,
			back ? sprintf("%.1f s after the spike connections closed (%.1f MiB)", back, at / 1024) : "never in the run", last / 1024
		print "return curve (MiB, every 0.5 s from the end of the spike):" curve }' "$1"
}

for b in $brokers; do
	run "$b"
done
log "results in $results"
