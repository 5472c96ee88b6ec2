#!/bin/sh
# run_scale_bench.sh -- flytuned at NKEYS tuned keys (issue 19's scale
# targets): starts flytuned (CPU backend, default shm_capacity, so the
# table must grow), tunes one key, imports NKEYS synthetic results through
# `flytune-ctl import` (in files of CHUNK records: the import file cap is
# 64 MiB) and times it, reads the daemon's VmRSS, then runs bench_client
# --scale: one client, two passes of fly_decide over every key, with the
# process-cache, shm and socket counts of each pass.  Prints
# "name value" lines (bench/results/service-1m.json is made from them).
#
#   NKEYS=1000000 sh bench/run_scale_bench.sh     (BUILD=build/bench)
#
# Needs: python3 (to write the import files).
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build/bench}
KEY=${KEY:-rmsnorm/fp32/m=8,n=64}
NKEYS=${NKEYS:-1000000}
CHUNK=${CHUNK:-200000}
FMT='rmsnorm/fp32/m=8,n=%d'

${MAKE:-make} -s BUILD="$B" GPU=none all "$B/bench/bench_client" >/dev/null
. bench/daemon.sh
fly_start flyscale '{"backend":"cpu","policy":"on-request"}' "$KEY"
rss() { awk '/^VmRSS/ {print $2}' "/proc/$DPID/status"; }
# VmRSS counts the table's memfd pages the daemon wrote (RssShmem) too
rss_split() {
	awk '/^RssAnon/ {a = $2} /^RssShmem/ {s = $2}
	     END {print "rss1_anon_kib " a; print "rss1_shmem_kib " s}' \
		"/proc/$DPID/status"
}
echo "rss0_kib $(rss)"
fly_synth_keys "$NKEYS" "$CHUNK"
t0=$(date +%s%N)
for f in "$DIR"/part*.json; do
	$CTL import "$f" >/dev/null
done
t1=$(date +%s%N)
echo "import_keys $NKEYS"
echo "import_ms $(( (t1 - t0) / 1000000 ))"
echo "results $($CTL --json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"])')"
echo "shm $($CTL --json status | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["shm"], separators=(",",":")))')"
echo "rss1_kib $(rss)"
rss_split
"$B/bench/bench_client" "$DIR/gpu0.sock" "$KEY" --scale "$FMT" "$NKEYS" 64
grep -c shm_full "$DIR/daemon.log" | sed 's/^/daemon_log_shm_full /' || true
