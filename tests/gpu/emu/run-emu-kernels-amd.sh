#!/bin/sh
# run-emu-kernels-amd.sh -- rmsnorm and topk on the CPU emulator's AMD
# wave64 model (run-emu.sh; flyk_emu_amd, quick: every other topk point),
# after the emulator's wave self-test (the planted 32-lane sum must fail).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_amd
