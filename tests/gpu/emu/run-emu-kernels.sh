#!/bin/sh
# run-emu-kernels.sh -- rmsnorm on the CPU emulator (run-emu.sh; quick's
# rmsnorm part); topk is run-emu-topk1.sh and run-emu-topk2.sh, each its
# own test under its own time limit (together they took 253 s of the
# 300 s limit as one test).
exec sh "$(dirname "$0")/run-emu.sh" flyk_emu:rmsnorm
