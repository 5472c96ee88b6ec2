#!/bin/sh
# fly.sh run|test|TARGET... -- the README's two commands.  Works on a fresh
# Debian or Ubuntu machine: installs what is missing (tools/deps.sh: gcc,
# make, the libraries, and the HIP compile-check toolchain), then runs
# make with the given targets.
#   sh tools/fly.sh run    build and start flytuned in the foreground
#   sh tools/fly.sh test   build and run the whole test suite
set -eu
cd "$(dirname "$0")/.."
sh tools/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
[ $# -gt 0 ] || set -- all
for t in "$@"; do
	case "$t" in
	run) make -j"$jobs" all && exec make run ;;
	test) make -j"$jobs" all && make -j"$jobs" test-bins && exec make test ;;
	*) make -j"$jobs" "$t" ;;
	esac
done
