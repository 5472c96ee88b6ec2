#!/bin/sh
# run-emu.sh [BINARY[:MODE]...] -- the GPU kernels on the CPU emulator,
# quick mode (every variant at a sample of its feasible points; run the
# binaries without "quick" for every point).  Built by `make test` in
# $FLY_BUILD_DIR/tests/emu; BINARY is flyk_emu (rmsnorm, topk) or
# flyk_emu_gemm (gemm, grouped gemm, scaled gemm, MQA logits; MODE
# attn-quick: attention; scaled: scaled gemm and MQA logits only; full:
# all at every point), or their AMD wave64 builds flyk_emu_amd and
# flyk_emu_gemm_amd, default all four; MODE defaults to quick.  `make
# test` runs every point of each through run-emu-kernels.sh
# (flyk_emu:rmsnorm-full), run-emu-topk1.sh and run-emu-topk2.sh
# (flyk_emu's topk in two halves), run-emu-gemm.sh (flyk_emu_gemm:full,
# attention included), run-emu-kernels-amd.sh, run-emu-topk1-amd.sh,
# run-emu-topk2-amd.sh and run-emu-gemm-amd.sh (the AMD builds likewise):
# one test (and one time limit) each.  Each binary prints the variants it ran
# and those skipped as infeasible in its model; ends with one line "emu: N
# passed, N failed".
set -u
b=${FLY_BUILD_DIR:?FLY_BUILD_DIR not set}/tests/emu
tp=0 tf=0 rc=0
for t in ${*:-flyk_emu flyk_emu_gemm flyk_emu_amd flyk_emu_gemm_amd}; do
	mode=quick
	case $t in *:*) mode=${t#*:} t=${t%%:*} ;; esac
	out=$("$b/$t" "$mode" 2>&1) || rc=1
	echo "$out" | grep -v 'passed, 0 failed$' | tail -20
	last=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	[ -n "$last" ] || { echo "$t: no summary line"; rc=1; continue; }
	echo "$t: $last"
	tp=$((tp + ${last%% passed*}))
	f=${last#* passed, }
	tf=$((tf + ${f%% failed*}))
done
[ $rc = 0 ] || [ $tf != 0 ] || tf=1
echo "emu: $tp passed, $tf failed"
[ $tf = 0 ]
