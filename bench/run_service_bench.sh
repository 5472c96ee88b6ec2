#!/bin/sh
# run_service_bench.sh -- the service benchmarks of flytuned, end to end:
# builds, starts flytuned (CPU backend, state in /tmp), tunes a key, runs
# bench_client and bench_socket, runs redis-benchmark against a
# redis-server on a Unix socket for comparison, measures the daemon's RSS
# with 100,000 tuned keys (imported through flytune-ctl), and prints one
# markdown table.
#
#   sh bench/run_service_bench.sh            (BUILD=build/bench SECS=5)
#
# Needs: redis-server, redis-benchmark, python3 (to write the import file).
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build/bench}
SECS=${SECS:-5}
KEY=${KEY:-rmsnorm/fp32/m=8,n=64}
NKEYS=${NKEYS:-100000}

${MAKE:-make} -s BUILD="$B" GPU=none all "$B/bench/bench_client" "$B/bench/bench_socket" >/dev/null
. bench/daemon.sh
fly_start flybench "{\"backend\":\"cpu\",\"policy\":\"on-request\",\"shm_capacity\":${SHM_CAP:-131072}}" "$KEY"

"$B/bench/bench_client" "$DIR/gpu0.sock" "$KEY" > "$DIR/client.txt"
"$B/bench/bench_socket" "$DIR/gpu0.sock" "$SECS" "$KEY" > "$DIR/socket.txt"

redis-server --port 0 --unixsocket "$DIR/redis.sock" --save '' \
	--appendonly no > "$DIR/redis.log" 2>&1 &
RPID=$!
i=0
until [ -S "$DIR/redis.sock" ]; do
	i=$((i + 1)); [ $i -gt 100 ] && { echo "redis did not start" >&2; exit 1; }
	sleep 0.1
done
: > "$DIR/redis.txt"
for c in 1 16 50 64; do
	redis-benchmark -s "$DIR/redis.sock" -t get -n 200000 -c $c -q 2>/dev/null |
		tr '\r' '\n' | grep '^GET: [0-9]' |
		sed "s/^GET: \([0-9.]*\) requests per second, p50=\([0-9.]*\) msec.*/$c \1 \2/" \
		>> "$DIR/redis.txt"
done

# RSS: before and after importing NKEYS tuned results.
rss() { awk '/^VmRSS/ {print $2}' "/proc/$DPID/status"; }
RSS0=$(rss)
fly_synth_keys "$NKEYS" "$NKEYS"
$CTL import "$DIR/part000.json" >/dev/null
NRES=$($CTL --json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["results"])')
RSS1=$(rss)
# cold process cache, warm shm: the first decide of 10,000 imported keys
"$B/bench/bench_client" "$DIR/gpu0.sock" "$KEY" --shm 'rmsnorm/fp32/m=8,n=%d' 10000 64 >> "$DIR/client.txt"

v() { awk -v k="$1" '$1 == k {print $2}' "$DIR/client.txt"; }
echo "| Measurement | Value |"
echo "| --- | --- |"
echo "| fly_decide, hot key, 1 thread: p50 / p99, throughput | $(v hot_t1_p50_ns) ns / $(v hot_t1_p99_ns) ns, $(v hot_t1_mops_per_thread) M/s |"
echo "| fly_decide, hot key, 2 threads: p50 / p99, throughput per thread | $(v hot_t2_p50_ns) ns / $(v hot_t2_p99_ns) ns, $(v hot_t2_mops_per_thread) M/s |"
echo "| first fly_decide of a fresh client on a tuned key (connect + hello + shm): p50 / p99 | $(( $(v fresh_first_call_p50_ns) / 1000 )) us / $(( $(v fresh_first_call_p99_ns) / 1000 )) us ($(v fresh_first_call_via_shm) via shm) |"
echo "| first fly_decide of a tuned key in a connected client, process cache cold (shm lookup): p50 / p99 | $(v shm_first_call_p50_ns) ns / $(v shm_first_call_p99_ns) ns ($(v shm_first_call_hits) from shm) |"
echo "| socket round trip (fly_request decide): p50 / p99 | $(( $(v socket_rtt_p50_ns) / 1000 )) us / $(( $(v socket_rtt_p99_ns) / 1000 )) us |"
while read -r _ n _ rps _ p50 _ p99 _ err; do
	echo "| flytuned decide, $n clients x ${SECS} s: throughput, p50 / p99 | $rps req/s, $p50 us / $p99 us ($err errors) |"
done < "$DIR/socket.txt"
while read -r c rps p50; do
	echo "| redis-benchmark GET, $c clients (same box, Unix socket): throughput, p50 | $rps req/s, $p50 ms |"
done < "$DIR/redis.txt"
echo "| flytuned RSS: idle with 1 key / with $NRES results after importing $NKEYS | $((RSS0 / 1024)) MiB / $((RSS1 / 1024)) MiB |"
