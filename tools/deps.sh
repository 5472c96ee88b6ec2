#!/bin/sh
# deps.sh -- install the Debian/Ubuntu packages flytuned needs, when they
# are missing.  Idempotent; silent when everything is there; a clear
# message when it cannot install (not root, no apt-get).
#   FLY_DEPS_GPU=0   skip the HIP compile-check packages
#   FLY_DEPS=0       check nothing (offline machines that have it all)
#   --list           print the package list, one a line, and exit
#                    (tools/install-check.sh checks it against the units)
set -u
list=0
[ "${1:-}" = --list ] && list=1
[ $list = 0 ] && [ "${FLY_DEPS:-1}" = 0 ] && exit 0
# systemd: systemd-analyze verify (tools/systemd-verify.sh); procps: the
# unit's ExecReload=/bin/kill, which verify needs to exist (a minimal
# Debian 12 has no /bin/kill).
# python3-prometheus-client: the exposition parser of the metrics test
# (tests/integration/test_metrics.py, issue 20).
pkgs="gcc g++ make libc6-dev pkg-config libuv1-dev libsqlite3-dev libcjson-dev libcmocka-dev python3 python3-prometheus-client systemd procps"
# The fleet (daemon/fleet.c, issue 24): libpq to build, and a PostgreSQL
# server (initdb, pg_ctl under /usr/lib/postgresql/*/bin) that
# tests/integration/test_fleet starts in a temporary directory.
pkgs="$pkgs libpq-dev postgresql"
# The Debian packages (make deb, tests/pkg/test-deb.sh): debhelper (and
# dpkg-dev), dh-python, lintian, and build-essential, which
# dpkg-buildpackage requires and which is only a Recommends of dpkg-dev
# (found by a fresh Debian 12 chroot: "Unmet build dependencies:
# build-essential:native").
pkgs="$pkgs build-essential debhelper dh-python lintian"
# The fuzzers (tests/fuzz): clang and its libFuzzer runtime, whose package
# carries clang's major version (14 on Debian 12, 18 on Ubuntu 24.04).
clang_v=$(apt-cache depends clang 2>/dev/null | sed -n 's/.*Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -n 1)
pkgs="$pkgs clang libclang-rt-${clang_v:-14}-dev"
if [ "${FLY_DEPS_GPU:-1}" != 0 ]; then
	pkgs="$pkgs hipcc libamdhip64-dev rocm-device-libs"
fi
if [ $list = 1 ]; then
	printf '%s\n' $pkgs
	exit 0
fi
missing=""
for p in $pkgs; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
	case "$st" in
	*"install ok installed"*) ;;
	*) missing="$missing $p" ;;
	esac
done
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
	echo "deps: missing packages:$missing" >&2
	echo "deps: no apt-get here; install them with your package manager" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		SUDO=sudo
	else
		echo "deps: missing packages:$missing" >&2
		echo "deps: run as root (or: sudo apt-get install$missing)" >&2
		exit 1
	fi
else
	SUDO=
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -q --no-install-recommends $missing >/tmp/flytuned-deps.log 2>&1; then
	$SUDO apt-get update -q >>/tmp/flytuned-deps.log 2>&1
	if ! $SUDO apt-get install -y -q --no-install-recommends $missing >>/tmp/flytuned-deps.log 2>&1; then
		tail -20 /tmp/flytuned-deps.log >&2
		echo "deps: apt-get could not install:$missing (log: /tmp/flytuned-deps.log)" >&2
		exit 1
	fi
fi
echo "deps: done"
