#!/bin/sh
# run_restart_bench.sh -- clients deciding through daemon restarts
# (RELIABILITY.md F19: "<= 0.1% requests error during restart; all
# succeed within 2 s").
#
#   sh bench/run_restart_bench.sh   (BUILD=build/bench NKEYS=10000
#                                    QKEYS=10100 THREADS=16 SECS=24
#                                    RESTARTS=5 SIG=TERM)
#
# flytuned on the CPU backend with NKEYS synthetic tuned keys imported;
# bench/restart_load.c runs THREADS libflyclient clients deciding random
# keys for SECS seconds (1..QKEYS: those above NKEYS are misses, which
# go to the socket) while the daemon is stopped with SIG (TERM, as
# `systemctl restart` does; KILL for a crash) and started again on the
# same state directory RESTARTS times, 3 s apart.  Prints each restart's
# time to answer `status` again and restart_load's JSON line (calls,
# tuned / not tuned / errors and their rates, the longest run of answers
# that were not tuned, the clients' counters).
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build/bench}
N=${NKEYS:-10000}
${MAKE:-make} -s BUILD="$B" GPU=none all "$B/bench/restart_load" >/dev/null
. bench/daemon.sh
fly_start flyrestart '{"backend":"cpu","policy":"on-request"}' \
	rmsnorm/fp32/m=8,n=64
fly_synth_keys "$N" 50000
for f in "$DIR"/part*.json; do $CTL import "$f" >/dev/null; done
"$B/bench/restart_load" "$DIR/gpu0.sock" "$N" "${THREADS:-16}" \
	"${SECS:-24}" "${QKEYS:-$((N + N / 100))}" > "$DIR/out.json" &
LPID=$!
sleep 2
for r in $(seq "${RESTARTS:-5}"); do
	kill -"${SIG:-TERM}" "$DPID"
	wait "$DPID" 2>/dev/null || true
	t0=$(date +%s%N)
	"$B/flytuned" --state-dir "$DIR" --config "$DIR/flytuned.conf" \
		2>> "$DIR/daemon.log" &
	DPID=$!
	until $CTL status >/dev/null 2>&1; do sleep 0.01; done
	echo "restart $r (SIG${SIG:-TERM}): status answered after" \
		"$(( ($(date +%s%N) - t0) / 1000000 )) ms"
	sleep 3
done
wait "$LPID"
cat "$DIR/out.json"
