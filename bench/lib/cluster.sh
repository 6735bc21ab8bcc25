# shellcheck shell=bash
# What the cluster scripts (bench/cluster.sh, cluster-conns.sh, cluster-traffic.sh) do
# alike with their nodes. Sourced; the script defines port (port NODE KIND: 1 mqtt,
# 2 http, 3 gossip, 4 rpc), which differs between them, and $work.

# shellcheck source=bench/lib/proc.sh
. "$(dirname "${BASH_SOURCE[0]}")/proc.sh"

# ports_free I ends the script when one of node I's ports is taken.
ports_free() {
	local k
	for k in 1 2 3 4; do
		port_open "$(port "$1" "$k")" && { log "port $(port "$1" "$k") is taken"; exit 1; }
	done
	return 0
}

# node_config I [EXPECT DIR SEEDS] prints node I's config: a tcp listener, the HTTP
# endpoint, no store, no $SYS, warnings only; with EXPECT, a cluster block (node nI,
# bootstrap_expect EXPECT, Raft state in DIR, SEEDS a YAML list of gossip addresses).
node_config() {
	cat <<EOF
listeners:
  - name: mqtt
    type: tcp
    address: 127.0.0.1:$(port "$1" 1)
http:
  address: 127.0.0.1:$(port "$1" 2)
store:
  dir: "off"
sys_interval: 0s
log:
  level: warn
EOF
	[ $# -gt 1 ] || return 0
	cat <<EOF
cluster:
  node_name: n$1
  bind: 127.0.0.1:$(port "$1" 3)
  rpc: 127.0.0.1:$(port "$1" 4)
  seeds: $4
  bootstrap_expect: $2
  dir: $3
EOF
}

