#!/bin/sh
# run-emu-topk1.sh -- topk on the CPU emulator at every point, first half:
# the small shapes, 3x777 k=100 and the long rows (run-emu.sh).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu:topk1-full
