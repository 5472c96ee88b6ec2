# bench/daemon.sh -- sourced by the bench/run_*.sh scripts (after cd to
# the repo root, with B the build directory): fly_start TAG CONF KEY
# starts flytuned from $B in a fresh /tmp/TAG.XXXXXX (DIR) with the
# config JSON CONF, waits until it answers `status`, and tunes KEY; it
# sets DIR, DPID (the daemon) and CTL (flytune-ctl on its socket).  On
# exit the daemon, and RPID when the caller set it (a redis-server), are
# stopped and DIR removed.  fly_synth_keys N CHUNK writes N synthetic
# results of the tuned rmsnorm key into $DIR/partNNN.json, CHUNK a file
# (for `flytune-ctl import`).

RPID=
DPID=
DIR=

fly_cleanup() {
	[ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
	[ -n "$RPID" ] && kill "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null
	[ -n "$DIR" ] && rm -rf "$DIR"
	return 0
}

fly_start() { # TAG CONF KEY
	DIR=$(mktemp -d "/tmp/$1.XXXXXX")
	trap fly_cleanup EXIT INT TERM
	echo "$2" > "$DIR/flytuned.conf"
	"$B/flytuned" --state-dir "$DIR" --config "$DIR/flytuned.conf" \
		2> "$DIR/daemon.log" &
	DPID=$!
	CTL="$B/flytune-ctl --socket $DIR/gpu0.sock"
	_i=0
	until $CTL status >/dev/null 2>&1; do
		_i=$((_i + 1))
		if [ $_i -gt 300 ]; then
			echo "flytuned did not start" >&2
			cat "$DIR/daemon.log" >&2
			exit 1
		fi
		sleep 0.1
	done
	$CTL tune "$3" --wait --timeout 600 >/dev/null
}

# N synthetic results, CHUNK a file: the tuned key's exported result
# under keys rmsnorm/fp32/m=8,n=64*i (n a multiple of the tuned key's 64:
# the winner stays feasible for every key, which import checks).
fly_synth_keys() { # N CHUNK
	$CTL export "$DIR/one.json" 2>/dev/null
	python3 - "$DIR/one.json" "$DIR/part" "$1" "$2" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
t = doc["results"][0]
n, chunk = int(sys.argv[3]), int(sys.argv[4])
for f, lo in enumerate(range(0, n, chunk)):
    res = []
    for i in range(lo, min(n, lo + chunk)):
        r = dict(t)
        r["key"] = "rmsnorm/fp32/m=8,n=%d" % (64 * (i + 1))
        res.append(r)
    doc["results"] = res
    json.dump(doc, open("%s%03d.json" % (sys.argv[2], f), "w"))
PY
}
