#!/bin/sh
# run-emu-topk2.sh -- topk on the CPU emulator, second half of quick's
# topk part: the other wide shapes (run-emu.sh).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu:topk2
