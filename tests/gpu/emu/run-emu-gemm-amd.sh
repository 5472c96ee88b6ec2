#!/bin/sh
# run-emu-gemm-amd.sh -- gemm, grouped gemm, scaled gemm, MQA logits and
# attention on the CPU emulator's AMD wave64 model at every point
# (run-emu.sh; flyk_emu_gemm_amd, mode full): the portable variants
# (gemm_fma, gemm_ref, ggemm_fma, ggemm_ref, sg_ref, sg_simt, mqa_ref,
# mqa_simt, attn_ref) and the MFMA ones (gemm_mfma, ggemm_mfma, sg_mfma,
# mqa_mfma, attn_mfma); the mma.sync, wgmma and TMA variants are listed
# skipped-infeasible.
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_gemm_amd:full
