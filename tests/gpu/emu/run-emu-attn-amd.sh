#!/bin/sh
# run-emu-attn-amd.sh -- attention (attn_ref, attn_mfma) on the CPU
# emulator's AMD wave64 model (run-emu.sh; flyk_emu_gemm_amd's attn-quick
# mode); the mma.sync and wgmma variants are skipped-infeasible there.
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_gemm_amd:attn-quick
