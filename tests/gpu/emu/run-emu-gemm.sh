#!/bin/sh
# run-emu-gemm.sh -- gemm, grouped gemm and scaled gemm on the CPU emulator
# (run-emu.sh).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_gemm
