#!/bin/sh
# run-emu-gemm-amd.sh -- gemm, grouped gemm and attention on the CPU
# emulator's AMD wave64 model (run-emu.sh; flyk_emu_gemm_amd, mode amd):
# every point of the portable variants (gemm_fma, gemm_ref, ggemm_fma,
# ggemm_ref, attn_ref) and every 3rd of the MFMA ones (gemm_mfma,
# ggemm_mfma; ~30 s on 2 cores); the mma.sync, wgmma and TMA variants are
# listed skipped-infeasible.
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_gemm_amd:amd
