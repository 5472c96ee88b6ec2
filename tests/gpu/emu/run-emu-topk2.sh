#!/bin/sh
# run-emu-topk2.sh -- topk on the CPU emulator at every point, second
# half: the other wide shapes (run-emu.sh).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu:topk2-full
