#!/bin/sh
# run-fuzz.sh [SECONDS] -- the libFuzzer harnesses of tests/fuzz: each one
# replays its seed corpus (tests/fuzz/corpus/NAME) and every regression
# input (tests/fuzz/regress/NAME: each crash ever found, kept), then
# fuzzes for SECONDS (default $FUZZ_SECONDS, else 10) on a scratch copy of
# the corpus.  Built by `make fuzz-bins` into $FLY_BUILD_DIR/fuzz.  Prints
# each harness's runs and coverage, and ends with "N passed, N failed"
# (a harness passes when nothing crashed, leaked or failed a check).
# New crash inputs are left in $FLY_BUILD_DIR/fuzz/crash-NAME/.
set -u
b=${FLY_BUILD_DIR:?FLY_BUILD_DIR not set}/fuzz
secs=${1:-${FUZZ_SECONDS:-10}}
src=$(cd "$(dirname "$0")" && pwd)
pass=0 fail=0
for bin in "$b"/fuzz_*; do
	[ -x "$bin" ] || continue
	name=$(basename "$bin")
	corp=$b/corpus-$name
	crash=$b/crash-$name
	mkdir -p "$corp" "$crash"
	cp "$src/corpus/$name"/* "$corp"/ 2>/dev/null
	# replay: seeds and regressions, every input once
	if ! "$bin" -runs=0 "$src/corpus/$name" $(ls -d "$src/regress/$name" 2>/dev/null) \
		> "$b/$name.replay.log" 2>&1; then
		tail -15 "$b/$name.replay.log"
		echo "--- $name: replay of its corpus/regressions FAILED"
		fail=$((fail + 1))
		continue
	fi
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix="$crash/" -print_final_stats=1 "$corp" \
		> "$b/$name.log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$b/$name.log")
	cov=$(grep -o 'cov: [0-9]*' "$b/$name.log" | tail -1)
	if [ $rc -ne 0 ]; then
		grep -A12 -m1 'ERROR\|check failed\|runtime error' "$b/$name.log"
		echo "--- $name: FAILED after ${runs:-?} runs ($cov); input in $crash/"
		fail=$((fail + 1))
	else
		echo "--- $name: ${runs:-?} runs in $secs s, $cov, no failure"
		pass=$((pass + 1))
	fi
done
[ $((pass + fail)) -gt 0 ] || { echo "fuzz: no harness built in $b"; fail=1; }
echo "fuzz: $pass passed, $fail failed"
[ $fail = 0 ]
