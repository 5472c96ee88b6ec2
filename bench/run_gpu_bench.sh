#!/bin/sh
# run_gpu_bench.sh -- on the GPU machine, from the repo root: build the CUDA
# backend and the daemon, run the GPU kernel test, then the benchmark.
#   . .devdeps/prelude.sh && sh bench/run_gpu_bench.sh [--standalone] [...]
# Extra arguments go to bench/gpu_bench.py.  Results land in $OUT (else
# build/bench-results; bench/results holds only the results of record).
# BUILD (default build/gpu) names the build directory.
set -e
B=${BUILD:-build/gpu}
R=${OUT:-build/bench-results}
mkdir -p "$R"
make -j"$(nproc)" BUILD="$B" GPU=cuda "$B/flytuned" "$B/libflyclient.so" \
	"$B/libflykernels_cuda.so" "$B/tests/gpu/test_gpu_kernels"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem \
	--format=csv > "$R/gpu.txt" 2>&1 || true
"$B/tests/gpu/test_gpu_kernels" > "$R/test_gpu.txt" 2>&1 || {
	tail -20 "$R/test_gpu.txt"; echo "GPU kernel test FAILED"; exit 1; }
tail -1 "$R/test_gpu.txt"
PYTHONUNBUFFERED=1 python3 bench/gpu_bench.py --build "$B" --out "$R" "$@" \
	2>&1 | tee "$R/bench.txt"
