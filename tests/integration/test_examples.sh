#!/bin/sh
# test_examples.sh -- examples/ run as the README says: the C example
# (build/examples/decide, `make examples`) against a real flytuned-test on
# the CPU backend in a temp state dir: decide, decide_wait -> tuned.  The
# Python engine loop (examples/engine_loop.py) needs torch and a GPU: it
# is run here only to check that it says why it cannot run.
# Last line: "N passed, N failed".
set -u
B=${FLY_BUILD_DIR:-build}
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
tmp=$(mktemp -d /tmp/flyex.XXXXXX)
printf '{"backend":"cpu","policy":"on-request"}\n' > "$tmp/flytuned.conf"
"$B/flytuned-test" --foreground --state-dir "$tmp" \
	--config "$tmp/flytuned.conf" > "$tmp/daemon.log" 2>&1 &
dpid=$!
i=0
while [ ! -S "$tmp/gpu0.sock" ] && [ $i -lt 300 ]; do
	sleep 0.1
	i=$((i + 1))
done
out=$(FLYTUNED_SOCKET=$tmp/gpu0.sock "$B/examples/decide" \
	'rmsnorm/fp32/m=64,n=4096' 2>&1)
rc=$?
echo "$out"
if [ $rc -eq 0 ] && echo "$out" | grep -q '^tuned: tuned variant'; then
	ok "examples/decide (README's C example) tuned a key"
else
	bad "examples/decide rc $rc"
	tail -20 "$tmp/daemon.log"
fi
out=$(FLYTUNED_SOCKET=$tmp/gpu0.sock "$B/examples/decide" 'rmsnorm/fp32' 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q 'bad key' &&
	ok "examples/decide refuses a bad key" || bad "bad key: $out"
kill "$dpid" 2>/dev/null
wait "$dpid" 2>/dev/null
if python3 -c 'import torch' 2>/dev/null; then
	echo "engine_loop.py: torch present, run it on the GPU machine"
else
	out=$(python3 examples/engine_loop.py 2>&1)
	[ $? -eq 0 ] && echo "$out" | grep -q 'SKIP.*PyTorch' &&
		ok "engine_loop.py says why it skips" || bad "engine_loop: $out"
fi
rm -rf "$tmp"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
