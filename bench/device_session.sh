#!/bin/sh
# device_session.sh -- everything one call to the GPU machine does, in
# stages that each have a time limit, so one stage's failure or hang still
# leaves the others' results:
#
#   build      make GPU=$GPU: flytuned, libflyclient, libflykernels_$GPU,
#              the two GPU tests
#   quick      test_gpu_gemm on the variants named by QUICK (default tma;
#              fma with GPU=hip)
#   test       tests/gpu/test_gpu_kernels and test_gpu_gemm (contracts;
#              GT_OPS=mqa,attention: test_gpu_kernels on those ops only;
#              TESTS names a subset)
#   rt         bench/gpu_bench.py (RMSNorm, TopK; daemon-driven)
#   sweep      bench/gpu_bench.py --standalone (every candidate timed)
#   gemm       bench/gemm_bench.py (GEMM, grouped GEMM; daemon-driven)
#   mqa        bench/mqa_bench.py (FP8 MQA logits vs the Triton peer;
#              daemon-driven)
#   mqaprof    Nsight Compute over bench/mqa_profile.py (PROF_ARGS: the
#              case, our points, the Triton configs; a diagnostic)
#   normprof   Nsight Compute over bench/norm_points.py --launch (PROF_ARGS:
#              the shapes and --params; a diagnostic)
#   scaled     bench/scaled_gemm_bench.py (fp8 / MXFP8 / MXFP4 GEMM vs
#              torch._scaled_mm and dequantize + matmul; daemon-driven)
#   attn       bench/attention_bench.py (attention forward vs SDPA's
#              cuDNN, flash and efficient backends; daemon-driven; with
#              ATTN_VARIANTS=1 the --variants sweep instead: each of our
#              variants' best point, no daemon)
#   tunableop  bench/tunableop_roundtrip.py (flytuned's TunableOp export
#              read by PyTorch, PyTorch's file imported by flytuned)
#   torch      tests/torch/test_torch_ops.py (flytuned.torch's ops vs
#              torch, torch.compile, CUDA graphs, routing, fallback) and
#              bench/torch_host_cost.py (host us per call vs torch's op)
#   layers     bench/layers_bench.py (Llama-3-8B and Mixtral-style MoE
#              layers in every mode; LAYERS_ARGS, e.g. --shapes
#              prefill2048,prefill8192 in one call and the decode shapes in
#              another; T_LAYERS default 540)
#   points     bench/gemm_points.py on the shapes of POINTS (every point of
#              the variants of POINTS_ARGS timed; a diagnostic)
#   faults     RELIABILITY.md F9: builds the test build of the GPU kernel
#              library ($BUILD/testing/libflykernels_$GPU.so, with
#              kernels/testing/gpu_faulty.hip) and tests/gpu/test_gpu_faults,
#              then injects GPU_FAULTS (default 100) GPU faults -- trap,
#              out-of-bounds, hang, NaN, out of memory in turn -- into the
#              real daemon's benchmarks (T_FAULTS default 420; the daemon's
#              log in logs.tgz: faults-daemon.log)
#
#   . .devdeps/prelude.sh && sh bench/device_session.sh [STAGE...]
#
# Default stages: build test rt gemm.  Environment: CASES (cases.json;
# default ../shared/bench/cases.json, else .devdeps/cases.json), BUILD
# (build/gpu), OUT (results; else build/bench-results), T_QUICK, T_TEST, T_RT,
# T_SWEEP, T_GEMM, T_MQA, T_SCALED, T_ATTN, T_POINTS, T_FAULTS (seconds
# per stage),
# RT_ARGS, GEMM_ARGS, MQA_ARGS, SCALED_ARGS, ATTN_ARGS,
# POINTS_ARGS (extra arguments), POINTS (see points),
# FLY_COMMIT (the commit to record where the tree has no .git), GPU (cuda
# or hip; default hip where rocm-smi, amd-smi or /opt/rocm is found, else
# cuda: the same stages then run on an AMD machine under PyTorch-ROCm, the
# clocks sampled with amd-smi or rocm-smi instead of nvidia-smi).
# OUT receives the result JSON files, summary.txt and logs.tgz (every log,
# the daemons' logs included): few files, as the device tool returns <= 8.
set -u
B=${BUILD:-build/gpu}
R=${OUT:-build/bench-results}
W=$(mktemp -d /tmp/flysession.XXXXXX)
mkdir -p "$R"
STAGES=${*:-build test rt gemm}
C=${CASES:-../shared/bench/cases.json}
[ -f "$C" ] || C=.devdeps/cases.json
export FLY_COMMIT=${FLY_COMMIT:-}
S=$R/summary.txt
: > "$S"
if [ -z "${GPU:-}" ]; then
	if command -v amd-smi > /dev/null || command -v rocm-smi > /dev/null ||
	   [ -d /opt/rocm ]; then
		GPU=hip
	else
		GPU=cuda
	fi
fi
smi_once() { # the GPU's name, driver, clocks, power, once
	if [ "$GPU" = cuda ]; then
		nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,\
temperature.gpu,power.draw --format=csv
	elif command -v amd-smi > /dev/null; then
		amd-smi static --asic --driver --limit --csv
		amd-smi metric --clock --power --temperature --csv
	else
		rocm-smi --showproductname --showdriverversion --showclocks \
			--showpower --showmaxpower --showtemp --csv
	fi
}
smi_loop() { # file ms: sample clocks and power every ms until killed
	if [ "$GPU" = cuda ]; then
		exec nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,\
temperature.gpu,clocks_throttle_reasons.active --format=csv -lms "$2" \
			> "$1" 2>&1
	fi
	while :; do
		date -u +%FT%T.%N
		if command -v amd-smi > /dev/null; then
			amd-smi metric --clock --power --temperature --csv
		else
			rocm-smi --showclocks --showpower --showtemp --csv
		fi
		sleep "$(awk "BEGIN { print $2 / 1000 }")"
	done > "$1" 2>&1
}
say() { echo "$*" | tee -a "$S"; }
stage() { # name limit cmd...: run with a limit, log to $W/name.txt
	# (names of its own: sh has no locals, and callers loop over $t)
	_sn=$1 _sl=$2
	shift 2
	_s0=$(date +%s)
	timeout -k 10 "$_sl" "$@" > "$W/$_sn.txt" 2>&1
	_rc=$?
	say "== stage $_sn: rc $_rc in $(( $(date +%s) - _s0 )) s (limit $_sl s)"
	return $_rc
}

say "== $(date -u +%FT%TZ) commit ${FLY_COMMIT:-?} cases $C"
# test_gpu_gemm's quick variants: NVIDIA's TMA kernels, AMD's fma ones.
if [ "$GPU" = hip ]; then QUICK_DEFAULT=fma; else QUICK_DEFAULT=tma; fi
say "== GPU=$GPU"
smi_once >> "$S" 2>&1
python3 -c 'import torch, triton; print("torch", torch.__version__,
	"triton", triton.__version__, torch.cuda.get_device_name())' \
	>> "$S" 2>&1

for s in $STAGES; do
	case $s in
	build)
		stage build 300 make -j"$(nproc)" BUILD="$B" GPU="$GPU" \
			"$B/flytuned" "$B/libflyclient.so" \
			"$B/libflykernels_$GPU.so" "$B/flytune-ctl" \
			"$B/include/flyclient.h" \
			"$B/tests/gpu/test_gpu_kernels" \
			"$B/tests/gpu/test_gpu_gemm" ||
			{ tail -30 "$W/build.txt" | tee -a "$S"; break; }
		;;
	quick)
		stage quick "${T_QUICK:-90}" env \
			FLYK_TEST_VARIANTS="${QUICK:-$QUICK_DEFAULT}" \
			"$B/tests/gpu/test_gpu_gemm"
		{ grep -m 20 FAIL "$W/quick.txt"; grep '^# ran' "$W/quick.txt"
		  tail -1 "$W/quick.txt"; } | tee -a "$S"
		;;
	test)
		for t in ${TESTS:-test_gpu_kernels test_gpu_gemm}; do
			stage "$t" "${T_TEST:-120}" "$B/tests/gpu/$t"
			{ grep -m 20 FAIL "$W/$t.txt"; tail -2 "$W/$t.txt"; } |
				tee -a "$S"
		done
		;;
	rt)
		stage rt "${T_RT:-240}" env PYTHONUNBUFFERED=1 python3 \
			bench/gpu_bench.py --build "$B" --cases "$C" \
			--out "$W/rt" ${RT_ARGS:-}
		grep -v '^\s*$' "$W/rt.txt" | tail -60 | tee -a "$S"
		;;
	sweep)
		stage sweep "${T_SWEEP:-200}" env PYTHONUNBUFFERED=1 python3 \
			bench/gpu_bench.py --standalone --no-compile \
			--build "$B" --cases "$C" --out "$W/sweep" \
			${SWEEP_ARGS:-}
		tail -45 "$W/sweep.txt" | tee -a "$S"
		;;
	gemm)
		# The SM clock, power and throttle reasons every 200 ms while
		# it runs (in logs.tgz: smi-gemm.csv).
		smi_loop "$W/smi-gemm.csv" 200 &
		_smi=$!
		stage gemm "${T_GEMM:-240}" env PYTHONUNBUFFERED=1 python3 \
			bench/gemm_bench.py --build "$B" --cases "$C" \
			--out "$W/gemm" ${GEMM_ARGS:-}
		kill "$_smi" 2>/dev/null
		tail -70 "$W/gemm.txt" | tee -a "$S"
		;;
	mqa)
		smi_loop "$W/smi-mqa.csv" 500 &
		_smi=$!
		stage mqa "${T_MQA:-300}" env PYTHONUNBUFFERED=1 python3 \
			bench/mqa_bench.py --build "$B" --cases "$C" \
			--out "$W/mqa" ${MQA_ARGS:-}
		kill "$_smi" 2>/dev/null
		grep -v '^\s*$' "$W/mqa.txt" | tail -40 | tee -a "$S"
		;;
	mqaprof)
		# shellcheck disable=SC2086
		stage mqaprof "${T_PROF:-180}" ncu --clock-control none \
			-k regex:mqa --section SpeedOfLight \
			--section ComputeWorkloadAnalysis \
			--section MemoryWorkloadAnalysis --section WarpStateStats \
			--section Occupancy --section LaunchStats \
			--section InstructionStats --print-details all \
			python3 bench/mqa_profile.py --build "$B" --cases "$C" \
			${PROF_ARGS:-}
		cp "$W/mqaprof.txt" "$R/" 2>/dev/null
		# the SASS of the kernels profiled, for reading beside it
		cuobjdump -sass "$B/cuda/kernels/gpu/mqa/mqa_logits.o" \
			> "$W/mqa.sass" 2>&1
		grep -E '^  [a-z_]*mqa|Duration|Throughput|Issue Slots|Registers|Achieved Occ|check|ok' \
			"$W/mqaprof.txt" | head -60 | tee -a "$S"
		;;
	normprof)
		# shellcheck disable=SC2086
		stage normprof "${T_PROF:-180}" ncu --clock-control none \
			-k 'regex:rms|triton' --section SpeedOfLight \
			--section MemoryWorkloadAnalysis --section WarpStateStats \
			--section Occupancy --section LaunchStats \
			--section SchedulerStats --print-details all \
			python3 bench/norm_points.py --build "$B" --launch 2 \
			${PROF_ARGS:-bf16:1,4096 bf16:1,4096:res}
		cp "$W/normprof.txt" "$R/" 2>/dev/null
		cuobjdump -sass "$B/cuda/kernels/gpu/norm/rmsnorm.o" \
			> "$R/rmsnorm.sass" 2>&1
		grep -E '^  [a-z_]*(rms|triton)|Duration|Stall|Warp Cycles|launched' \
			"$W/normprof.txt" | head -80 | tee -a "$S"
		;;
	scaled)
		stage scaled "${T_SCALED:-420}" env PYTHONUNBUFFERED=1 python3 \
			bench/scaled_gemm_bench.py --build "$B" --cases "$C" \
			--out "$W/scaled" ${SCALED_ARGS:-}
		grep -v '^\s*$' "$W/scaled.txt" | tail -60 | tee -a "$S"
		;;
	attn)
		# shellcheck disable=SC2086
		stage attn "${T_ATTN:-540}" env PYTHONUNBUFFERED=1 python3 \
			bench/attention_bench.py --build "$B" --cases "$C" \
			--out "$W/attn" ${ATTN_VARIANTS:+--variants} \
			${ATTN_ARGS:-}
		cp "$W/attn"/*-*.json "$R/" 2>/dev/null
		grep -v '^\s*$' "$W/attn.txt" | tail -60 | tee -a "$S"
		;;
	tunableop)
		stage tunableop "${T_TUNABLEOP:-180}" env PYTHONUNBUFFERED=1 \
			python3 bench/tunableop_roundtrip.py --build "$B" \
			--out "$R"
		tail -30 "$W/tunableop.txt" | tee -a "$S"
		;;
	torch)
		# the results file's machine prefix (h100, h200, gfx942, ...)
		TAG=$(cd bench && python3 -c \
			'import gpu_vendor; print(gpu_vendor.machine_tag())' \
			2> /dev/null) || TAG=gpu
		stage torch_ops "${T_TORCH:-300}" env PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 \
			FLY_BUILD_DIR="$B" FLYTUNED_TORCH_BUILD="$PWD/$B/torch_ext" \
			python3 tests/torch/test_torch_ops.py
		grep -v '^\s*$' "$W/torch_ops.txt" | tail -40 | tee -a "$S"
		stage torch_host "${T_TORCH_HOST:-200}" env PYTHONUNBUFFERED=1 \
			FLYTUNED_TORCH_BUILD="$PWD/$B/torch_ext" python3 \
			bench/torch_host_cost.py --build "$B" \
			--out "$R/$TAG-torch_host_cost.json"
		grep -v '^\s*$' "$W/torch_host.txt" | tail -20 | tee -a "$S"
		;;
	layers)
		# shellcheck disable=SC2086
		stage layers "${T_LAYERS:-540}" env PYTHONUNBUFFERED=1 \
			FLYTUNED_TORCH_BUILD="$PWD/$B/torch_ext" python3 \
			bench/layers_bench.py --build "$B" --out "$R" \
			--budget-s $(( ${T_LAYERS:-540} - 60 )) ${LAYERS_ARGS:-}
		grep -v '^\s*$' "$W/layers.txt" | tail -60 | tee -a "$S"
		;;
	points)
		# shellcheck disable=SC2086
		stage points "${T_POINTS:-200}" env PYTHONUNBUFFERED=1 \
			python3 bench/gemm_points.py --build "$B" \
			--out "$R/points.json" ${POINTS_ARGS:-} ${POINTS:-}
		grep -v '^\s*$' "$W/points.txt" | tee -a "$S"
		;;
	faults)
		stage faults_build 180 make -j"$(nproc)" BUILD="$B" GPU="$GPU" \
			"$B/flytuned" "$B/testing/libflykernels_$GPU.so" \
			"$B/tests/gpu/test_gpu_faults" ||
			{ tail -30 "$W/faults_build.txt" | tee -a "$S"; continue; }
		# the test stops injecting 30 s before the limit, so that its
		# summary line is printed
		stage faults "${T_FAULTS:-420}" env GPU_FAULTS="${GPU_FAULTS:-100}" \
			GPU_FAULTS_BACKEND="$GPU" GPU_FAULTS_LOG="$W/faults-daemon.log" \
			GPU_FAULTS_MAX_S=$(( ${T_FAULTS:-420} - 30 )) \
			"$B/tests/gpu/test_gpu_faults"
		{ grep -m 30 FAIL "$W/faults.txt"; grep '^gpu faults:' \
			"$W/faults.txt" | tail -5; } | tee -a "$S"
		;;
	*)
		say "unknown stage $s"
		;;
	esac
done

# Results (JSON) straight into OUT; everything else in one archive.
for d in rt gemm mqa scaled attn; do
	[ -d "$W/$d" ] && cp "$W/$d"/*-*.json "$R/" 2>/dev/null
done
tar -C "$W" -czf "$R/logs.tgz" . 2>/dev/null
ls -la "$R" >> "$S"
exit 0
