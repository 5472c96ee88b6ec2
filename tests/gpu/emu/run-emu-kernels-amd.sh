#!/bin/sh
# run-emu-kernels-amd.sh -- rmsnorm on the CPU emulator's AMD wave64 model
# at every point (run-emu.sh; flyk_emu_amd's rmsnorm-full part), after the
# emulator's wave self-test (the planted 32-lane sum must fail).  topk is
# run-emu-topk1-amd.sh and run-emu-topk2-amd.sh, each its own test under
# its own time limit.
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_amd:rmsnorm-full
