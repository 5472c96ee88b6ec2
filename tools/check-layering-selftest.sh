#!/bin/sh
# check-layering-selftest.sh -- shows that the layering check fails on an
# illegal include: builds a scratch tree where client/ includes a daemon
# header and expects check-layering.sh to refuse it, then a clean tree it
# must accept.  Prints a plain "N passed, N failed" line.
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
mkdir -p "$tmp/proto" "$tmp/client" "$tmp/daemon" "$tmp/ctl"
echo '#include "fly_abi.h"' > "$tmp/proto/fly_key.h"
: > "$tmp/proto/fly_abi.h"
: > "$tmp/daemon/store.h"
: > "$tmp/client/flyclient.h"
printf '#include "fly_key.h"\nint x;\n' > "$tmp/client/client.c"
if sh "$here/check-layering.sh" "$tmp" 2>/dev/null; then pass=$((pass+1)); else
	echo "layering selftest: a clean tree was refused"; fail=$((fail+1)); fi
printf '#include "store.h"\nint y;\n' > "$tmp/client/bad.c"
if sh "$here/check-layering.sh" "$tmp" 2>"$tmp/err"; then
	echo "layering selftest: client/ including daemon/store.h was accepted"; fail=$((fail+1))
else
	grep -q 'client/ must not include daemon/' "$tmp/err" && pass=$((pass+1)) || { cat "$tmp/err"; fail=$((fail+1)); }
fi
rm -f "$tmp/client/bad.c"
printf '#include "fly_key.h"\n' > "$tmp/ctl/ctl.c"
if sh "$here/check-layering.sh" "$tmp" 2>/dev/null; then
	echo "layering selftest: ctl/ including a proto header was accepted"; fail=$((fail+1))
else pass=$((pass+1)); fi
echo "layering: $pass passed, $fail failed"
[ $fail = 0 ]
