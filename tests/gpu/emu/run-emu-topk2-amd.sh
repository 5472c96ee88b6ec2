#!/bin/sh
# run-emu-topk2-amd.sh -- topk on the CPU emulator's AMD wave64 model,
# second half of quick's topk part: the other wide shapes (run-emu.sh).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu_amd:topk2
