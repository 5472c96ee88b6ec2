#!/bin/sh
# test-deb.sh -- the Debian packages in the test suite (issue 26): the
# changelog's version is VERSION's (and the check refuses another), `make
# deb` builds the four packages (GPU=none, DEB_BUILD_OPTIONS=nocheck: the
# suite runs the tests itself), lintian has nothing to say at warning or
# error level (tags overridden in debian/*.lintian-overrides aside), and
# the packages carry what the install needs: the binaries and units under
# /usr and /lib/systemd/system, the unit running /usr/bin/flytuned, the
# sysusers/tmpfiles snippets and the template's enablement in postinst.
# The install/upgrade/purge on a fresh Debian 12 is tools/deb-check.sh
# (root, a chroot, network).  Prints "deb: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "deb: $*"; fail=$((fail + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ver=$(cat VERSION)

# ---------------------------------------------------- the version
make -s deb-version > "$tmp/v.log" 2>&1 && ok ||
	bad "make deb-version: $(cat "$tmp/v.log")"
# The check refuses a changelog that names another version (in a copy).
mkdir -p "$tmp/v/debian"
cp Makefile VERSION "$tmp/v/"
sed "1s/^flytuned ([^)]*)/flytuned (9.9.9)/" debian/changelog > "$tmp/v/debian/changelog"
if make -s -C "$tmp/v" deb-version > "$tmp/v.log" 2>&1; then
	bad "make deb-version accepted changelog 9.9.9 with VERSION $ver"
else
	grep -q "9.9.9" "$tmp/v.log" && ok ||
		bad "make deb-version failed without naming the version: $(cat "$tmp/v.log")"
fi
sed "1s/^flytuned ([^)]*)/flytuned ($ver+test1)/" debian/changelog > "$tmp/v/debian/changelog"
make -s -C "$tmp/v" deb-version > "$tmp/v.log" 2>&1 && ok ||
	bad "make deb-version refused $ver+test1: $(cat "$tmp/v.log")"

# ---------------------------------------------------- build
for t in dpkg-buildpackage dh lintian; do
	command -v $t >/dev/null 2>&1 && ok ||
		bad "$t not installed (tools/deps.sh installs debhelper, dh-python, lintian)"
done
out=$tmp/deb
start=$(date +%s)
if GPU=none DEB_BUILD_OPTIONS="nocheck noddebs parallel=$(nproc 2>/dev/null || echo 2)" \
	make -s deb DEB_DIR="$out" DEB_LINTIAN=0 > "$tmp/build.log" 2>&1; then
	ok
else
	bad "make deb failed: $(tail -15 "$tmp/build.log")"
fi
echo "deb: built in $(($(date +%s) - start)) s: $(cd "$out" 2>/dev/null && ls *.deb | tr '\n' ' ')"
arch=$(dpkg --print-architecture 2>/dev/null)
for p in flytuned_${ver}_$arch libflyclient0_${ver}_$arch \
	libflyclient-dev_${ver}_$arch python3-flyclient_${ver}_all; do
	[ -f "$out/$p.deb" ] && ok || bad "$p.deb not built"
done

# ---------------------------------------------------- lintian
if [ -f "$out/flytuned_${ver}_$arch.changes" ]; then
	start=$(date +%s)
	lintian --fail-on error,warning "$out/flytuned_${ver}_$arch.changes" \
		> "$tmp/lintian.log" 2>&1
	rc=$?
	grep -v 'running with root privileges' "$tmp/lintian.log"
	echo "deb: lintian exit $rc in $(($(date +%s) - start)) s"
	[ $rc = 0 ] && ok || bad "lintian found errors or warnings (above)"
else
	bad "no .changes file: lintian not run"
fi

# ---------------------------------------------------- contents
# has PKG PATH...: each path is in PKG's data.
has() {
	p=$1
	shift
	f=$(ls "$out"/${p}_"$ver"_*.deb 2>/dev/null | head -n 1)
	[ -n "$f" ] || return
	dpkg-deb -c "$f" | awk '{ print $6 }' | sed 's|^\.||' > "$tmp/c"
	for x in "$@"; do
		grep -qx "$x" "$tmp/c" && ok || bad "$p has no $x"
	done
}
has flytuned /usr/bin/flytuned /usr/bin/flytune-ctl \
	/lib/systemd/system/flytuned@.service /lib/systemd/system/flytuned@.socket \
	/usr/lib/sysusers.d/flytuned.conf /usr/lib/tmpfiles.d/flytuned.conf \
	/usr/share/flytuned/schemas/config.schema.json \
	/usr/share/man/man8/flytuned.8.gz /usr/share/man/man1/flytune-ctl.1.gz
has libflyclient0 /usr/lib/libflyclient.so.0
has libflyclient-dev /usr/include/flyclient.h /usr/lib/libflyclient.a \
	/usr/lib/libflyclient.so
has python3-flyclient /usr/lib/python3/dist-packages/flyclient/__init__.py \
	/usr/lib/python3/dist-packages/flyclient/kernels.py
f=$out/flytuned_${ver}_$arch.deb
if [ -f "$f" ]; then
	dpkg-deb -x "$f" "$tmp/x" && dpkg-deb -e "$f" "$tmp/x/DEBIAN"
	grep -qx 'ExecStart=/usr/bin/flytuned --device %i' \
		"$tmp/x/lib/systemd/system/flytuned@.service" && ok ||
		bad "unit: $(grep ExecStart "$tmp/x/lib/systemd/system/flytuned@.service")"
	# The daemon looks for the GPU libraries in PREFIX/lib/flytuned: the
	# binary carries the prefix /usr, not the default /usr/local.
	tr '\0' '\n' < "$tmp/x/usr/bin/flytuned" > "$tmp/strings"
	grep -qx '/usr' "$tmp/strings" && ! grep -qx '/usr/local' "$tmp/strings" && ok ||
		bad "flytuned does not carry the prefix /usr"
	for s in postinst prerm postrm; do
		sh -n "$tmp/x/DEBIAN/$s" && ok || bad "$s: syntax"
	done
	pi=$tmp/x/DEBIAN/postinst
	grep -q 'systemd-sysusers.* flytuned.conf' "$pi" && ok || bad "postinst: no systemd-sysusers"
	grep -q 'systemd-tmpfiles.* --create flytuned.conf' "$pi" && ok || bad "postinst: no systemd-tmpfiles"
	# sysusers before tmpfiles (the directory's owner) before the socket
	# (its group).
	a=$(grep -n 'systemd-sysusers' "$pi" | head -n 1 | cut -d: -f1)
	b=$(grep -n 'systemd-tmpfiles' "$pi" | head -n 1 | cut -d: -f1)
	c=$(grep -n "deb-systemd-helper enable 'flytuned@.socket'" "$pi" | head -n 1 | cut -d: -f1)
	[ -n "$a" ] && [ -n "$b" ] && [ -n "$c" ] && [ "$a" -lt "$b" ] && [ "$b" -lt "$c" ] && ok ||
		bad "postinst order: sysusers line $a, tmpfiles $b, enable $c"
	grep -q '^DefaultInstance=0$' "$tmp/x/lib/systemd/system/flytuned@.socket" && ok ||
		bad "flytuned@.socket has no DefaultInstance=0: enabling the template enables nothing"
	grep -q 'rm -rf /var/lib/flytuned' "$tmp/x/DEBIAN/postrm" && ok ||
		bad "postrm does not remove the state directory on purge"
fi

echo "deb: $pass passed, $fail failed"
[ $fail = 0 ]
