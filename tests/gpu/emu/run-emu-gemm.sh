#!/bin/sh
# run-emu-gemm.sh -- gemm, grouped gemm, scaled gemm and MQA logits
# (mqa_ref, mqa_simt; mqa_wgmma skipped: TMA) on the CPU emulator
# (run-emu.sh).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_gemm
