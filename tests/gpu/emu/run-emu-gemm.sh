#!/bin/sh
# run-emu-gemm.sh -- gemm and grouped gemm on the CPU emulator (run-emu.sh).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_gemm
