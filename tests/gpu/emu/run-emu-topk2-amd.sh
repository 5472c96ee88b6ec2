#!/bin/sh
# run-emu-topk2-amd.sh -- topk on the CPU emulator's AMD wave64 model at
# every point, second half: the other wide shapes (run-emu.sh).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_amd:topk2-full
