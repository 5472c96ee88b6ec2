#!/usr/bin/env python3
"""gpu_kernels_standalone.py -- the kernel sweep without the daemon: every
feasible (variant, point) of libflykernels_cuda.so per case, timed with
gpu_bench.bench() (the one timing function), the fastest reported beside
the peers.  Same options as gpu_bench.py.

usage: python3 bench/gpu_kernels_standalone.py [--build DIR] [--ops ...]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench  # noqa: E402

if __name__ == "__main__":
    gpu_bench.main(["--standalone"] + sys.argv[1:])
