#!/bin/sh
# install-check.sh -- what a packager's PREFIX reaches: the installed
# unit's ExecStart and the daemon's compiled-in GPU-library directory
# ($(PREFIX)/lib/flytuned, where `make install` puts libflykernels_*)
# follow PREFIX, and a new PREFIX rebuilds what depends on it.  Builds
# only those two files, in a temp build dir.  Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "install: $*"; fail=$((fail + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
B=$tmp/build
unit=$B/systemd/flytuned@.service obj=$B/obj/daemon/backend.o
for pfx in /opt/flyx /usr; do
	if ! make -s BUILD="$B" PREFIX="$pfx" "$unit" "$obj" \
		> "$tmp/make.log" 2>&1; then
		bad "PREFIX=$pfx: make failed: $(tail -3 "$tmp/make.log")"
		continue
	fi
	grep -q "^ExecStart=$pfx/bin/flytuned --device %i\$" "$unit" && ok ||
		bad "PREFIX=$pfx: $(grep ExecStart "$unit")"
	# The rest of the unit is the tree's.
	[ "$(grep -vc '^ExecStart=' "$unit")" = \
	  "$(grep -vc '^ExecStart=' systemd/flytuned@.service)" ] && ok ||
		bad "PREFIX=$pfx: the unit differs beyond ExecStart"
	grep -aq "$pfx" "$obj" && ok ||
		bad "PREFIX=$pfx: backend.o does not carry the prefix"
done
# The daemon's binary searches /usr/lib/flytuned after the second build.
grep -aq '/opt/flyx' "$obj" && bad "backend.o kept the old prefix" || ok
echo "install: $pass passed, $fail failed"
[ $fail = 0 ]
