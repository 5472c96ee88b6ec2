#!/bin/sh
# run-emu-gemm.sh -- gemm, grouped gemm, scaled gemm, MQA logits (mqa_ref,
# mqa_simt; mqa_wgmma skipped: TMA) and attention (attn_ref, attn_fa2,
# attn_fa2_split) on the CPU emulator at every point (run-emu.sh;
# flyk_emu_gemm's full mode).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_gemm:full
