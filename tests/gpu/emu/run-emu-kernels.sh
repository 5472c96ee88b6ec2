#!/bin/sh
# run-emu-kernels.sh -- rmsnorm and topk on the CPU emulator (run-emu.sh).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu
