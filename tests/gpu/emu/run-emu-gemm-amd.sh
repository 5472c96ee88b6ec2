#!/bin/sh
# run-emu-gemm-amd.sh -- gemm, grouped gemm and attention on the CPU
# emulator's AMD wave64 model (run-emu.sh; flyk_emu_gemm_amd): every point,
# not quick -- only the portable variants are feasible there (gemm_fma,
# gemm_ref, ggemm_fma, ggemm_ref, attn_ref), a few seconds in all; the
# mma.sync, wgmma and TMA ones are listed skipped-infeasible.
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_gemm_amd:full
