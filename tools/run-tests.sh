#!/bin/sh
# run-tests.sh SUITE TEST... -- run each test in its own process with a
# timeout (FLY_TEST_TIMEOUT seconds, default 300, times
# FLY_TEST_TIMEOUT_MULTIPLIER), show its output (CMocka's summary lines
# included), and end with one line: "N passed, N failed".
#   *.py  run with python3 (prints its own "N passed, N failed"), with
#         $FLY_PY_ENV (VAR=value ...) in its environment
#   *.sh  run with sh (the same)
#   else  a CMocka binary
set -u
suite=$1
shift
t=${FLY_TEST_TIMEOUT:-300}
m=${FLY_TEST_TIMEOUT_MULTIPLIER:-1}
limit=$((t * m))
passed=0 failed=0 bad=""
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for test in "$@"; do
	name=$(basename "$test")
	echo "=== $suite: $name"
	case "$test" in
	*.py) cmd="env ${FLY_PY_ENV:-} python3 $test" ;;
	*.sh) cmd="sh $test" ;;
	*) cmd="$test" ;;
	esac
	start=$(date +%s)
	timeout --kill-after=10 "$limit" $cmd > "$out" 2>&1
	rc=$?
	cat "$out"
	end=$(date +%s)
	# CMocka: "[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s), listed below:"
	p=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test.*/\1/p' "$out" | awk '{s+=$1} END {print s+0}')
	f=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test.*/\1/p' "$out" | awk '{s+=$1} END {print s+0}')
	if [ "$p" = 0 ] && [ "$f" = 0 ]; then
		# a script's plain "N passed, N failed" line: its last one is
		# its total (earlier ones may be per-part subtotals)
		p=$(sed -n 's/^\([A-Za-z_-]*: \)\{0,1\}\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed.*/\2/p' "$out" | tail -1)
		f=$(sed -n 's/^\([A-Za-z_-]*: \)\{0,1\}\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed.*/\3/p' "$out" | tail -1)
		p=${p:-0}
		f=${f:-0}
	fi
	if [ $rc -ne 0 ] && [ "$f" = 0 ]; then
		f=1
		[ $rc -ge 124 ] && echo "*** $name: timed out or killed after $((end - start)) s (rc $rc)"
		[ $rc -lt 124 ] && echo "*** $name: exited $rc"
	fi
	[ "$f" != 0 ] && bad="$bad $name"
	passed=$((passed + p))
	failed=$((failed + f))
	echo "--- $name: $p passed, $f failed ($((end - start)) s)"
done
[ -n "$bad" ] && echo "failing:$bad"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
