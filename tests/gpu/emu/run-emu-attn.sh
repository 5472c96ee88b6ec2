#!/bin/sh
# run-emu-attn.sh -- attention (attn_ref, attn_fa2, attn_fa2_split) on the
# CPU emulator (run-emu.sh; flyk_emu_gemm's attn-quick mode).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_gemm:attn-quick
