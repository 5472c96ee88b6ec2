#!/bin/sh
# run_shm_bench.sh -- the service bench's shm row alone (issue 19 item
# 2): starts flytuned (CPU backend, shm_capacity 131072), tunes a key,
# imports NKEYS synthetic results through `flytune-ctl import`, then runs
# `bench_client --shm` ROUNDS times, each a fresh client process (process
# cache cold): the first fly_decide of N of the imported keys, each a
# table hit.  Prints bench_client's "name value" lines, each run's under
# a "run K" line.
#
#   sh bench/run_shm_bench.sh      (BUILD=build/bench NKEYS=100000 N=10000 ROUNDS=3)
#
# Needs: python3 (to write the import file).
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build/bench}
KEY=${KEY:-rmsnorm/fp32/m=8,n=64}
NKEYS=${NKEYS:-100000}
N=${N:-10000}
ROUNDS=${ROUNDS:-3}

${MAKE:-make} -s BUILD="$B" GPU=none all "$B/bench/bench_client" >/dev/null
. bench/daemon.sh
fly_start flyshm "{\"backend\":\"cpu\",\"policy\":\"on-request\",\"shm_capacity\":${SHM_CAP:-131072}}" "$KEY"
fly_synth_keys "$NKEYS" "$NKEYS"
$CTL import "$DIR/part000.json" >/dev/null
k=1
while [ $k -le "$ROUNDS" ]; do
	echo "run $k"
	"$B/bench/bench_client" "$DIR/gpu0.sock" "$KEY" --shm \
		'rmsnorm/fp32/m=8,n=%d' "$N" 64
	k=$((k + 1))
done
