#!/bin/sh
# run-emu-gemm-amd.sh -- gemm, grouped gemm, scaled gemm, MQA logits and
# attention on the CPU emulator's AMD wave64 model (run-emu.sh;
# flyk_emu_gemm_amd, mode amd): every point of the portable variants
# (gemm_fma, gemm_ref, ggemm_fma, ggemm_ref, sg_ref, sg_simt, mqa_ref,
# mqa_simt, attn_ref), every 3rd of the bf16 MFMA ones (gemm_mfma,
# ggemm_mfma; ~30 s on 2 cores) and every point of the fp8 ones (sg_mfma
# on 6 shapes, mqa_mfma on 3; ~8 s); the mma.sync, wgmma and TMA variants
# are listed skipped-infeasible.
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_gemm_amd:amd
