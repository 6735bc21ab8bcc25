#!/usr/bin/env bash
# faults.sh runs the cluster's fault tests (test/cluster) the long way: every partition
# test, the repeatable ones for many rounds (each round cuts the leader of the moment off,
# heals and checks the whole cluster), and the ones that take minutes (a partition that
# outlasts memberlist's 30s GossipToTheDeadTime). CI runs each once, briefly. Needs root
# (network namespaces, iproute2); the tests remove every namespace they make.
#
#   bench/faults.sh              20 rounds
#   ROUNDS=100 bench/faults.sh
#   RUN='TestPartitionLeader' ROUNDS=50 bench/faults.sh
#
# Environment: ROUNDS (20); RUN (TestPartition, a go test -run pattern); RACE (1: with
# -race; 0: without).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-20}
run=${RUN:-TestPartition}
race=()
[ "${RACE:-1}" = 1 ] && race=(-race)
# One test at a time (-p 1): every node is a process, on cores shared with the tests.
go test "${race[@]}" -p 1 -count=1 -v -timeout 60m -run "$run" ./test/cluster -args -long -rounds "$rounds"
