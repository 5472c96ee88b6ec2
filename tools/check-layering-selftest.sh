#!/bin/sh
# check-layering-selftest.sh -- shows that the layering check fails on an
# illegal include and on a call cycle between the files of a folder:
# builds scratch trees where client/ includes a daemon header, ctl/ a
# proto header, two daemon files call each other, and kernels/gpu's
# prim/, core and op folders include across their floors, and expects
# check-layering.sh to refuse each, then clean trees it must accept.
# Prints a plain "N passed, N failed" line.
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
rm -f "$tmp/ctl/ctl.c"
# A call cycle between two files of one folder fails (issue 23), and so
# does one through a function table; breaking it passes; a static
# function or a struct member named like another file's function is no
# use of it.
printf 'int flyd_b(void);\nint flyd_a(void)\n{\n\treturn flyd_b();\n}\n' \
	> "$tmp/daemon/a.c"
printf 'int flyd_a(void);\nint flyd_b(void)\n{\n\treturn flyd_a() + 1;\n}\n' \
	> "$tmp/daemon/b.c"
if sh "$here/check-layering.sh" "$tmp" 2>"$tmp/err"; then
	echo "layering selftest: a 2-file call cycle was accepted"; fail=$((fail+1))
else
	grep -q 'daemon/: a circle of 2 files: a.c b.c' "$tmp/err" &&
		pass=$((pass+1)) || { cat "$tmp/err"; fail=$((fail+1)); }
fi
printf 'int flyd_a(void);\nstatic int (*const t[])(void) = { flyd_a };\n'\
'int flyd_b(void)\n{\n\treturn t[0]() + 1;\n}\n' > "$tmp/daemon/b.c"
if sh "$here/check-layering.sh" "$tmp" 2>/dev/null; then
	echo "layering selftest: a cycle through a function table was accepted"
	fail=$((fail+1))
else pass=$((pass+1)); fi
printf 'struct s { int (*flyd_a)(void); };\nstatic int flyd_a(void)\n{\n'\
'\treturn 2;\n}\nint flyd_b(const struct s *x)\n{\n'\
'\treturn flyd_a() + x->flyd_a();\n}\n' > "$tmp/daemon/b.c"
if sh "$here/check-layering.sh" "$tmp" 2>"$tmp/err"; then pass=$((pass+1)); else
	echo "layering selftest: a one-way pair was refused:"; cat "$tmp/err"
	fail=$((fail+1))
fi
if sh "$here/check-layering.sh" --no-cycles "$tmp" 2>/dev/null; then
	pass=$((pass+1)); else
	echo "layering selftest: --no-cycles refused a clean tree"; fail=$((fail+1)); fi
# kernels/gpu: primitives under ops.  A clean tree (an op including prim/,
# the core and its own folder) passes; prim/ including the core, an op
# including another op, and a kernels/ file including a tests/ header fail.
mkdir -p "$tmp/kernels/gpu/prim" "$tmp/kernels/gpu/gemm" "$tmp/kernels/gpu/norm" "$tmp/tests/gpu/emu"
: > "$tmp/kernels/gpu/prim/flyk_gpu.h"
: > "$tmp/kernels/gpu/gpu_int.h"
: > "$tmp/tests/gpu/emu/flyk_emu.h"
printf '#include "prim/flyk_gpu.h"\n' > "$tmp/kernels/gpu/gemm/gemm_tile.h"
printf '#include "gpu_int.h"\n#include "prim/flyk_gpu.h"\n#include "gemm/gemm_tile.h"\n' > "$tmp/kernels/gpu/gemm/gemm.hip"
printf '#include "gpu_int.h"\n#include "prim/flyk_gpu.h"\n' > "$tmp/kernels/gpu/norm/rmsnorm.hip"
if sh "$here/check-layering.sh" "$tmp" 2>"$tmp/err"; then pass=$((pass+1)); else
	echo "layering selftest: a clean kernels/gpu tree was refused"; cat "$tmp/err"; fail=$((fail+1)); fi
gpu_refused() { # FILE TEXT EXPECT
	printf "$2" > "$tmp/$1"
	if sh "$here/check-layering.sh" "$tmp" 2>"$tmp/err"; then
		echo "layering selftest: $1 with $2 was accepted"; fail=$((fail+1))
	else
		grep -q "$3" "$tmp/err" && pass=$((pass+1)) || { cat "$tmp/err"; fail=$((fail+1)); }
	fi
	rm -f "$tmp/$1"
}
gpu_refused kernels/gpu/prim/bad.h '#include "gpu_int.h"\n' 'prim must not include core'
gpu_refused kernels/gpu/norm/bad.hip '#include "gemm/gemm_tile.h"\n' 'op:norm must not include op:gemm'
gpu_refused kernels/gpu/prim/emu.h '#include "flyk_emu.h"\n' 'must not include the test header'
echo "layering: $pass passed, $fail failed"
[ $fail = 0 ]
