#!/bin/sh
# test_bench_vendor.sh -- bench/gpu_vendor.py's pure parts without a GPU
# (the fp8 flavour by gfx name, the SMI command lines, the kernel library's
# name, the cache-clean size: 512 MiB as before on NVIDIA, 1 GiB on
# MI300X), so the bench scripts' AMD path is checked in CI (issue 27).
cd "$(dirname "$0")/../.." || exit 1
python3 bench/gpu_vendor.py --self-test || echo "gpu_vendor: 0 passed, 1 failed"
