#!/bin/sh
# run-emu-kernels.sh -- rmsnorm on the CPU emulator at every point
# (run-emu.sh; flyk_emu's rmsnorm-full part); topk is run-emu-topk1.sh and
# run-emu-topk2.sh, each its own test under its own time limit.
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu:rmsnorm-full
