#!/bin/sh
# check.sh -- the checks of `make check`, run by the test suite too (so
# the README's test command, and CI, run them): the style check, the
# layering check with its call-cycle check, their self-test, and the
# generated-code check (proto/fly_msgs.def and fly_record.def as
# tools/gen_proto.py writes them from schemas/).  Each runs even when an
# earlier one failed.  Prints a plain "N passed, N failed" line.
set -u
cd "$(dirname "$0")/.."
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() {
	name=$1
	shift
	if "$@"; then
		echo "check: $name ok"
		pass=$((pass + 1))
	else
		echo "check: $name FAILED"
		fail=$((fail + 1))
	fi
}

gen_check() {
	python3 tools/gen_proto.py schemas "$tmp/fly_msgs.def" \
		"$tmp/fly_record.def" &&
		cmp proto/fly_msgs.def "$tmp/fly_msgs.def" &&
		cmp proto/fly_record.def "$tmp/fly_record.def" ||
		{ echo "proto/*.def is stale: run make gen"; return 1; }
}

run style sh tools/check-style.sh
run layering sh tools/check-layering.sh .
run layering-selftest sh tools/check-layering-selftest.sh
run gen-check gen_check
echo "check: $pass passed, $fail failed"
[ "$fail" = 0 ]
