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
$CTL export "$DIR/one.json" 2>/dev/null
python3 - "$DIR/one.json" "$DIR/part" "$NKEYS" "$CHUNK" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
t = doc["results"][0]
n, chunk = int(sys.argv[3]), int(sys.argv[4])
for f, lo in enumerate(range(0, n, chunk)):
    res = []
    for i in range(lo, min(n, lo + chunk)):
        r = dict(t)
        # n a multiple of the tuned key's (64): the winner stays
        # feasible for every key (import checks it)
        r["key"] = "rmsnorm/fp32/m=8,n=%d" % (64 * (i + 1))
        res.append(r)
    doc["results"] = res
    json.dump(doc, open("%s%03d.json" % (sys.argv[2], f), "w"))
PY
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
