#!/bin/sh
# deb-check.sh -- the Debian packages on a fresh minimal Debian 12, the way
# an admin meets them: build them (`make deb` of this tree, GPU=none) and a
# rebuild with a higher version (a "+test1" changelog entry in a copy), then
# in a debootstrap --variant=minbase bookworm chroot:
#   install   apt-get install ./flytuned_*.deb ./libflyclient0_*.deb ...
#   files     what each package puts where; --version; the Python client
#             loads the installed library
#   user      systemd-sysusers made the flytune user and group
#   state     systemd-tmpfiles made /var/lib/flytuned (flytune, 0750)
#   enabled   deb-systemd-helper enabled flytuned@0.socket
#   verify    systemd-analyze verify on the installed units
#   start     the daemon started as flytuned@0.service would: its ExecStart
#             line (%i=0), as the flytune user, umask 0007, /run/flytuned
#             its own (RuntimeDirectory=)
#   tune      flytune-ctl tune KEY --wait; the winner, also through Python
#   upgrade   apt-get install of the rebuild with "systemd running" (a
#             systemctl that records its calls): postinst asks for
#             try-restart of flytuned@*.service; the restarted daemon runs
#             the new binary and still has the winner, untuned again
#   purge     apt-get purge with "systemd running": prerm asks to stop the
#             instances; afterwards no file of the packages, no state or
#             runtime directory, no enablement link is left (the flytune
#             user stays: Debian does not remove system users)
# Each step prints PASS or FAIL; the last line is "deb: N passed, N failed".
# A chroot has no systemd running: the unit's sandboxing (DevicePolicy=,
# ProtectSystem=, ...) is not applied here (tools/systemd-verify.sh checks
# those lines), and the recording systemctl stands in for systemd.
#
#   sh tools/deb-check.sh          # from the project root, as root
#   V=1 sh tools/deb-check.sh      # each step's output, not only a failed one's
#
# ROOTFS: the cached minimal base system, shared with the fresh-machine
# check (default $HOME/.cache/fresh-bookworm.base; built once if missing).
# DEB_CHECK_APT_CACHE: where downloaded .debs are kept between runs
# (default $HOME/.cache/deb-check-apt).  DEB_CHECK_DEBS=DIR: keep the two
# builds in DIR/deb1 and DIR/deb2, and use them from there when present
# (a rerun without rebuilding: stale if the tree changed).
set -u
cd "$(dirname "$0")/.."
TREE=$(pwd)
[ "$(id -u)" = 0 ] || { echo "deb-check: needs root (debootstrap, chroot, apt in the chroot)"; exit 2; }
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}
BASE=${ROOTFS:-$CACHE/fresh-bookworm.base}
APTCACHE=${DEB_CHECK_APT_CACHE:-$CACHE/deb-check-apt}
KEY=rmsnorm/fp32/m=8,n=64
VERSION=$(cat VERSION)
V2=$VERSION+test1
WORK=$(mktemp -d /tmp/deb-check.XXXXXX)
ROOT=$WORK/root
P=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
PKGS="flytuned libflyclient0 libflyclient-dev python3-flyclient"
pass=0 fail=0

cleanup() {
	if [ -d "$ROOT/root" ]; then
		in_root 'sh /root/unit.sh stop' >/dev/null 2>&1 || true
	fi
	for m in var/cache/apt/archives dev/shm run tmp sys proc; do
		umount -l "$ROOT/$m" 2>/dev/null || true
	done
	# Never delete through a mount that is still there.
	if grep -q " $WORK/" /proc/mounts; then
		echo "deb-check: mounts left under $WORK, not deleting it"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# in_root CMD: run CMD with sh in the chroot, a clean environment.
in_root() {
	chroot "$ROOT" /usr/bin/env -i PATH=$P HOME=/root LANG=C.UTF-8 \
		DEBIAN_FRONTEND=noninteractive sh -c "$1"
}

# step NAME FUNCTION: run it, output to a log; PASS, or FAIL and the log's
# tail.  A failed step that later steps need ends the run (need).
step() {
	name=$1
	shift
	if "$@" > "$WORK/step.log" 2>&1; then
		echo "PASS $name"
		[ "${V:-0}" = 1 ] && sed 's/^/    /' "$WORK/step.log"
		pass=$((pass + 1))
		return 0
	fi
	echo "FAIL $name"
	tail -n 25 "$WORK/step.log" | sed 's/^/    /'
	fail=$((fail + 1))
	return 1
}
finish() {
	echo "deb: $pass passed, $fail failed"
	[ $fail = 0 ]
	exit $?
}
need() { step "$@" || finish; }

# ------------------------------------------------------------ build
build_v1() {
	GPU=none DEB_BUILD_OPTIONS="nocheck noddebs parallel=$(nproc)" \
		make deb DEB_LINTIAN=0 DEB_DIR="$WORK/deb1" &&
	ls "$WORK"/deb1/flytuned_"$VERSION"_*.deb
}
build_v2() {
	mkdir -p "$WORK/src2" &&
	tar -cf - --exclude=./build --exclude=./.git --exclude=./.state \
		--exclude=./.devdeps . | tar -C "$WORK/src2" -xf - &&
	{
		printf 'flytuned (%s) unstable; urgency=medium\n\n' "$V2"
		printf '  * deb-check: a rebuild to upgrade to.\n\n'
		printf ' -- deb-check <root@localhost>  %s\n\n' "$(date -R)"
		cat debian/changelog
	} > "$WORK/src2/debian/changelog" &&
	GPU=none DEB_BUILD_OPTIONS="nocheck noddebs parallel=$(nproc)" \
		make -C "$WORK/src2" deb DEB_LINTIAN=0 DEB_DIR="$WORK/deb2" &&
	ls "$WORK"/deb2/flytuned_"$V2"_*.deb
}

# ------------------------------------------------------------ chroot
chroot_setup() {
	if [ ! -x "$BASE/bin/sh" ]; then
		command -v debootstrap >/dev/null ||
			apt-get install -y debootstrap >/dev/null || return 1
		echo "building the minimal base system once: $BASE"
		debootstrap --variant=minbase bookworm "$BASE" || return 1
	fi
	cp -a "$BASE" "$ROOT" &&
	cp /etc/resolv.conf "$ROOT/etc/resolv.conf" &&
	mkdir -p "$APTCACHE/partial" &&
	mount -t proc proc "$ROOT/proc" &&
	mount -t sysfs -o ro sys "$ROOT/sys" &&
	mount -t tmpfs tmpfs "$ROOT/tmp" &&
	mount -t tmpfs -o mode=0755 tmpfs "$ROOT/run" &&
	mkdir -p "$ROOT/run/lock" &&
	mount -t tmpfs tmpfs "$ROOT/dev/shm" &&
	mount --bind "$APTCACHE" "$ROOT/var/cache/apt/archives" &&
	mkdir -p "$ROOT/root/debs1" "$ROOT/root/debs2" &&
	cp "$WORK"/deb1/*.deb "$ROOT/root/debs1/" &&
	cp "$WORK"/deb2/*.deb "$ROOT/root/debs2/" &&
	write_helpers &&
	in_root 'apt-get update -q'
}

# /root/unit.sh start|stop|pid in the chroot: flytuned@0.service as
# systemd would run it, without systemd.  /root/systemctl.stub: a
# systemctl that only records its calls (installed for the upgrade and
# the purge, with /run/systemd/system, so the maintainer scripts take
# their "systemd is running" branch).
write_helpers() {
	cat > "$ROOT/root/unit.sh" <<'EOF'
#!/bin/sh
set -u
unit=/lib/systemd/system/flytuned@.service
pidf=/root/unit.pid
running() { [ -f $pidf ] && kill -0 "$(cat $pidf)" 2>/dev/null; }
case "$1" in
start)
	running && exit 0
	# ExecStart, with the instance name; RuntimeDirectory= (systemd makes
	# it and gives it to User=), UMask=, User=, Group=.
	cmd=$(sed -n 's/^ExecStart=//p' $unit | sed 's/%i/0/g')
	user=$(sed -n 's/^User=//p' $unit)
	group=$(sed -n 's/^Group=//p' $unit)
	mode=$(sed -n 's/^RuntimeDirectoryMode=//p' $unit)
	echo "ExecStart: $cmd (as $user:$group)"
	install -d -o "$user" -g "$group" -m "${mode:-0755}" /run/flytuned
	(umask 0007; exec setsid setpriv --reuid="$user" --regid="$group" \
		--init-groups $cmd </dev/null >>/root/unit.log 2>&1) &
	echo $! > $pidf
	for i in $(seq 100); do
		flytune-ctl status >/dev/null 2>&1 && exit 0
		running || break
		sleep 0.2
	done
	tail -n 20 /root/unit.log
	exit 1 ;;
stop)
	running || exit 0
	pid=$(cat $pidf)
	kill -TERM "$pid"
	for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
	# KillMode=control-group: whatever is left of its process group.
	kill -KILL -- "-$pid" 2>/dev/null
	rm -f $pidf ;;
pid)
	running && cat $pidf ;;
esac
EOF
	cat > "$ROOT/root/systemctl.stub" <<'EOF'
#!/bin/sh
echo "systemctl $*" >> /root/systemctl.log
case " $* " in
*" is-enabled "*) echo enabled ;;
esac
exit 0
EOF
}

# fake_systemd on|off: /run/systemd/system and the recording systemctl.
# apt runs dpkg with its own PATH (DPkg::Path, /usr/local/sbin not in it):
# APT_PATH puts the stub first.
APT_PATH="-o DPkg::Path=$P"
fake_systemd() {
	if [ "$1" = on ]; then
		mkdir -p "$ROOT/run/systemd/system" &&
		install -m 755 "$ROOT/root/systemctl.stub" "$ROOT/usr/local/sbin/systemctl" &&
		: > "$ROOT/root/systemctl.log"
	else
		rm -rf "$ROOT/run/systemd/system" "$ROOT/usr/local/sbin/systemctl"
	fi
}

# ------------------------------------------------------------ steps
debs() { # debs DIR: the four packages' files in DIR of the chroot
	for p in $PKGS; do printf ' ./%s/%s_*.deb' "$1" "$p"; done
}
install_v1() {
	in_root "cd /root && apt-get install -y -q --no-install-recommends $(debs debs1)" &&
	versions_are "$VERSION"
}
versions_are() {
	for p in $PKGS; do
		v=$(in_root "dpkg-query -W -f='\${Status} \${Version}' $p")
		echo "$p: $v"
		[ "$v" = "install ok installed $1" ] || return 1
	done
}
files() {
	ok=0
	for f in /usr/bin/flytuned /usr/bin/flytune-ctl \
		/lib/systemd/system/flytuned@.service \
		/lib/systemd/system/flytuned@.socket \
		/usr/lib/sysusers.d/flytuned.conf /usr/lib/tmpfiles.d/flytuned.conf \
		/usr/share/flytuned/schemas/tune.request.json \
		/usr/share/man/man8/flytuned.8.gz /usr/share/man/man1/flytune-ctl.1.gz \
		/usr/share/doc/flytuned/README.Debian \
		/usr/lib/libflyclient.so.0 /usr/lib/libflyclient.so \
		/usr/lib/libflyclient.a /usr/include/flyclient.h \
		/usr/lib/python3/dist-packages/flyclient/__init__.py \
		/usr/lib/python3/dist-packages/flyclient/kernels.py; do
		[ -e "$ROOT$f" ] || { echo "missing: $f"; ok=1; }
	done
	# flyclient.pc, in the multiarch directory pkg-config searches.
	grep -qx 'prefix=/usr' "$ROOT"/usr/lib/*/pkgconfig/flyclient.pc ||
		{ echo "flyclient.pc: $(grep prefix= "$ROOT"/usr/lib/*/pkgconfig/flyclient.pc)"; ok=1; }
	# The unit runs the installed binary.
	exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$ROOT/lib/systemd/system/flytuned@.service")
	[ "$exe" = /usr/bin/flytuned ] || { echo "ExecStart runs '$exe'"; ok=1; }
	for b in flytuned flytune-ctl; do
		v=$(in_root "$b --version" 2>&1 | head -n 1)
		echo "$v"
		case "$v" in "$b $VERSION"*) ;; *) ok=1 ;; esac
	done
	# The Python client, from outside any source tree, loads the
	# packaged library.
	in_root 'cd / && python3 -c "
import flyclient, flyclient.kernels, os
assert flyclient.__file__ == \"/usr/lib/python3/dist-packages/flyclient/__init__.py\", flyclient.__file__
assert flyclient._find_lib() == \"/usr/lib/libflyclient.so.0\", flyclient._find_lib()
flyclient._load()
print(\"python:\", flyclient.__file__, flyclient._find_lib())
"' || ok=1
	return $ok
}
user() {
	pw=$(in_root 'getent passwd flytune')
	gr=$(in_root 'getent group flytune')
	echo "passwd: $pw"
	echo "group: $gr"
	[ -n "$gr" ] || return 1
	gid=$(echo "$gr" | cut -d: -f3)
	echo "$pw" | awk -F: -v g="$gid" '$4 == g && $3 < 1000 && $6 == "/var/lib/flytuned" && $7 ~ /nologin$/ { ok = 1 } END { exit !ok }'
}
state() {
	s=$(in_root 'stat -c "%U:%G %a" /var/lib/flytuned')
	echo "/var/lib/flytuned: $s"
	[ "$s" = "flytune:flytune 750" ] && [ -d "$ROOT/etc/flytuned" ]
}
enabled() {
	l=$ROOT/etc/systemd/system/sockets.target.wants/flytuned@0.socket
	t=$(readlink "$l")
	echo "sockets.target.wants/flytuned@0.socket -> $t"
	[ "$t" = /lib/systemd/system/flytuned@.socket ]
}
verify() {
	out=$(in_root 'cd /tmp && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no flytuned@0.service flytuned@0.socket 2>&1')
	rc=$?
	echo "$out"
	ours=$(echo "$out" | grep -i 'flytune' || true)
	[ $rc = 0 ] && [ -z "$ours" ]
}
start() {
	in_root 'sh /root/unit.sh start' || return 1
	pid=$(in_root 'sh /root/unit.sh pid')
	uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
	want=$(in_root 'id -u flytune')
	echo "flytuned pid $pid uid $uid (flytune: $want)"
	[ -n "$uid" ] && [ "$uid" = "$want" ] || return 1
	in_root 'flytune-ctl status' || return 1
	in_root 'ls -l /run/flytuned /var/lib/flytuned'
	# The socket the clients find by default, the DB in the state
	# directory, both the daemon's.
	[ -S "$ROOT/run/flytuned/gpu0.sock" ] &&
	[ "$(in_root 'stat -c %U /var/lib/flytuned/tuning.db')" = flytune ]
}
# winner: the stored winner of KEY, from get --json: "VARIANT PARAMS
# tuned_at=T" (T: when it was measured; the same T later: not tuned again).
winner() {
	in_root "flytune-ctl --json get '$KEY'" | in_root 'python3 -c "
import json, sys
r = json.load(sys.stdin)[\"result\"]
print(r[\"variant\"], r[\"params\"], \"tuned_at=%d\" % r[\"tuned_at\"])
"'
}
tune() {
	in_root "flytune-ctl tune '$KEY' --wait --timeout 120" || return 1
	W1=$(winner) || return 1
	echo "winner of $KEY: $W1"
	[ -n "$W1" ] || return 1
	# The same answer through the Python client and libflyclient.
	in_root "python3 -c '
import flyclient
d = flyclient.Client().decide_wait(\"rmsnorm\", \"fp32\", {\"m\": 8, \"n\": 64}, timeout_ms=10000)
print(\"python:\", d)
assert d[\"status\"] == \"tuned\" and \"$W1\".startswith(\"%s %s \" % (d[\"variant\"], d[\"params\"])), d
'"
}
upgrade() {
	old=$(in_root 'sh /root/unit.sh pid')
	fake_systemd on &&
	in_root "cd /root && apt-get install -y -q --no-install-recommends $APT_PATH $(debs debs2)" &&
	versions_are "$V2" || return 1
	cat "$ROOT/root/systemctl.log"
	# postinst of an upgrade: try-restart of the running instances, no
	# start of anything that does not run.
	grep -qx 'systemctl try-restart flytuned@\*.service' "$ROOT/root/systemctl.log" || return 1
	grep -q ' start ' "$ROOT/root/systemctl.log" && return 1
	# The old daemon still runs the replaced binary; systemd's
	# try-restart: stop it, start it again.
	ls -l "/proc/$old/exe"
	in_root 'sh /root/unit.sh stop; sh /root/unit.sh start' || return 1
	new=$(in_root 'sh /root/unit.sh pid')
	exe=$(readlink "/proc/$new/exe")
	echo "restarted: pid $old -> $new, running $exe"
	[ "$new" != "$old" ] && [ "$exe" = "$ROOT/usr/bin/flytuned" ] || return 1
	W2=$(winner) || return 1
	echo "winner of $KEY after the upgrade: $W2"
	[ "$W2" = "$W1" ]
}
purge() {
	: > "$ROOT/root/systemctl.log"
	in_root "apt-get purge -y -q $APT_PATH $PKGS" || return 1
	cat "$ROOT/root/systemctl.log"
	grep -qx 'systemctl stop flytuned@\*.socket flytuned@\*.service' "$ROOT/root/systemctl.log" || return 1
	# systemd's stop.
	in_root 'sh /root/unit.sh stop'
	fake_systemd off
	ok=0
	for p in $PKGS; do
		s=$(in_root "dpkg-query -W -f='\${db:Status-Abbrev}' $p 2>/dev/null")
		[ -z "$s" ] || [ "$s" = "un " ] || { echo "$p: dpkg status '$s'"; ok=1; }
	done
	left=$(cd "$ROOT" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./root \
		-o -path ./var/cache/apt \) -prune -o \
		\( -name '*flytune*' -o -name '*flyclient*' \) -print)
	left="$left$(cd "$ROOT" && find run tmp \( -name '*flytune*' -o -name '*flyclient*' \) -print)"
	[ -z "$left" ] || { echo "left after purge:"; echo "$left"; ok=1; }
	for d in /var/lib/flytuned /run/flytuned /etc/flytuned; do
		[ ! -e "$ROOT$d" ] || { echo "left after purge: $d"; ok=1; }
	done
	[ -n "$(in_root 'getent passwd flytune')" ] &&
		echo "the flytune user stays (Debian does not remove system users)"
	return $ok
}

echo "deb-check: flytuned $VERSION, upgrade to $V2, key $KEY"
SAVED=${DEB_CHECK_DEBS:-}
if [ -n "$SAVED" ] && ls "$SAVED"/deb1/flytuned_"$VERSION"_*.deb "$SAVED"/deb2/flytuned_"$V2"_*.deb >/dev/null 2>&1; then
	echo "SKIP build: the packages of $SAVED (DEB_CHECK_DEBS)"
	cp -r "$SAVED/deb1" "$SAVED/deb2" "$WORK/"
else
	need "build $VERSION (make deb, GPU=none)" build_v1
	need "build $V2 (a copy with a +test1 changelog entry)" build_v2
	if [ -n "$SAVED" ]; then
		rm -rf "$SAVED/deb1" "$SAVED/deb2" && mkdir -p "$SAVED" &&
		cp -r "$WORK/deb1" "$WORK/deb2" "$SAVED/"
	fi
fi
need "chroot: minimal Debian 12 ($BASE)" chroot_setup
need "install: apt-get install ./*.deb ($PKGS)" install_v1
step "files" files
step "user flytune (sysusers)" user
step "state directory /var/lib/flytuned (tmpfiles)" state
step "flytuned@0.socket enabled (deb-systemd-helper)" enabled
step "systemd-analyze verify flytuned@0.service flytuned@0.socket" verify
need "start as flytuned@0.service (ExecStart, user flytune)" start
need "tune $KEY with flytune-ctl" tune
step "upgrade to $V2: instances restarted, winner kept" upgrade
step "purge: instances stopped, nothing left" purge
finish
