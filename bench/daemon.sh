# bench/daemon.sh -- sourced by the bench/run_*.sh scripts (after cd to
# the repo root, with B the build directory): fly_start TAG CONF KEY
# starts flytuned from $B in a fresh /tmp/TAG.XXXXXX (DIR) with the
# config JSON CONF, waits until it answers `status`, and tunes KEY; it
# sets DIR, DPID (the daemon) and CTL (flytune-ctl on its socket).  On
# exit the daemon, and RPID when the caller set it (a redis-server), are
# stopped and DIR removed.

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
