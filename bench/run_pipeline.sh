#!/bin/sh
# run_pipeline.sh -- RELIABILITY.md L4 and L9 against one CPU-backend
# flytuned (bench/pipeline.c): 64 connections x 100,000 decides pipelined
# 32 deep (req/s; every reply in order, none lost or doubled), then 63
# request/response connections alone and while one more pipelines 10^6
# decides 1,024 deep (their p50/p99 both ways).
#
#   sh bench/run_pipeline.sh [OUT.jsonl]   (BUILD=build CONNS=64 REQS=100000
#                                           FAIR_REQS=1000000 SECS=10)
#
# Exits non-zero when a reply was lost, doubled, out of order or failed.
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build}
KEY=${KEY:-rmsnorm/fp32/m=8,n=64}
${MAKE:-make} -s BUILD="$B" GPU=none all "$B/bench/pipeline" >/dev/null
. bench/daemon.sh
fly_start flypipe '{"backend":"cpu","policy":"on-request","max_clients":256}' "$KEY"
P="$B/bench/pipeline --sock $DIR/gpu0.sock --key $KEY"
rc=0
$P --conns "${CONNS:-64}" --requests "${REQS:-100000}" --depth 32 \
	> "$DIR/out.jsonl" || rc=1
$P --fair --conns $((${CONNS:-64} - 1)) --requests "${FAIR_REQS:-1000000}" \
	--depth 1024 --secs "${SECS:-10}" >> "$DIR/out.jsonl" || rc=1
kill -0 "$DPID" || rc=1
cat "$DIR/out.jsonl"
[ $# -ge 1 ] && cp "$DIR/out.jsonl" "$1"
exit $rc
