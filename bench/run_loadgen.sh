#!/bin/sh
# run_loadgen.sh -- flytuned's decide against Redis's GET, the same client
# (bench/loadgen.c) driving both over Unix sockets, interleaved rounds;
# each server's CPU per request from /proc/PID/schedstat.
#
#   sh bench/run_loadgen.sh [OUT.json]     (BUILD=build/bench CONNS=50 SECS=3 ROUNDS=3)
#
# flytuned: CPU backend, state in /tmp, one tuned key.  redis-server:
# Unix socket, no persistence, no TCP.  Prints the JSON lines and writes
# them, with the machine's description, to OUT.json when given.
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build/bench}
KEY=${KEY:-rmsnorm/fp32/m=8,n=64}
${MAKE:-make} -s BUILD="$B" GPU=none all "$B/bench/loadgen" >/dev/null
. bench/daemon.sh
fly_start flyload '{"backend":"cpu","policy":"on-request"}' "$KEY"
redis-server --port 0 --unixsocket "$DIR/redis.sock" --save '' --appendonly no \
	--daemonize no > "$DIR/redis.log" 2>&1 &
RPID=$!
i=0
until [ -S "$DIR/redis.sock" ]; do i=$((i + 1)); [ $i -gt 100 ] && exit 1; sleep 0.1; done
"$B/bench/loadgen" --flytuned "$DIR/gpu0.sock" --fpid "$DPID" --key "$KEY" \
	--redis "$DIR/redis.sock" --rpid "$RPID" --conns "${CONNS:-50}" \
	--secs "${SECS:-3}" --rounds "${ROUNDS:-3}" > "$DIR/out.jsonl"
cat "$DIR/out.jsonl"
if [ $# -ge 1 ]; then
	python3 - "$DIR/out.jsonl" "$1" <<'PY'
import json, os, platform, subprocess, sys, time
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def cpu():
    for l in open("/proc/cpuinfo"):
        if l.startswith("model name"):
            return l.split(":", 1)[1].strip()
try:
    commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"]).decode().strip()
except Exception:
    commit = "unknown"
doc = {"machine": {"cpu": cpu(), "cores": os.cpu_count(), "kernel": platform.release()},
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
       "method": "bench/loadgen.c: one epoll thread, one request in flight per "
                 "connection, interleaved rounds; server CPU from /proc/PID/schedstat",
       "rows": rows}
json.dump(doc, open(sys.argv[2], "w"), indent=1)
PY
fi
