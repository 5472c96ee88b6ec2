#!/bin/sh
# fly.sh run|test|TARGET... -- the README's two commands.  Works on a fresh
# Debian or Ubuntu machine: installs what is missing (tools/deps.sh: gcc,
# make, the libraries, and the HIP compile-check toolchain), then runs
# make with the given targets.
#   sh tools/fly.sh run    build and start flytuned in the foreground
#   sh tools/fly.sh test   build and run the whole test suite
# `run` on a machine with nvcc or hipcc but no GPU device (no /dev/nvidia0..,
# no /dev/kfd) builds the CPU backend only (GPU=none) and says so: the GPU
# kernels take minutes to compile and nothing could run them.  GPU=cuda or
# GPU=hip (or GPU=auto) in the environment forces a GPU build.  `test`
# always builds what the machine can (its compile-only GPU checks).
#   FLY_DEV_DIR   where to look for the GPU device nodes (default /dev)
set -eu
cd "$(dirname "$0")/.."
sh tools/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
[ $# -gt 0 ] || set -- all

# Whether a CUDA or HIP compiler is there (as the Makefile finds them).
gpu_compiler() {
	command -v nvcc >/dev/null 2>&1 || command -v hipcc >/dev/null 2>&1 ||
		[ -x /usr/local/cuda/bin/nvcc ]
}

# Whether a GPU device node exists.
gpu_device() {
	dev=${FLY_DEV_DIR:-/dev}
	[ -e "$dev/kfd" ] && return 0
	for n in "$dev"/nvidia[0-9]*; do
		[ -e "$n" ] && return 0
	done
	return 1
}

for t in "$@"; do
	case "$t" in
	run)
		if [ -z "${GPU:-}" ] && gpu_compiler && ! gpu_device; then
			echo "fly.sh: no GPU device (no ${FLY_DEV_DIR:-/dev}/nvidia0, no ${FLY_DEV_DIR:-/dev}/kfd): building the CPU backend only (GPU=none); GPU=cuda or GPU=hip forces the GPU build (minutes)"
			GPU=none
			export GPU
		fi
		make -j"$jobs" all && exec make run ;;
	test) make -j"$jobs" all && make -j"$jobs" test-bins && exec make test ;;
	*) make -j"$jobs" "$t" ;;
	esac
done
