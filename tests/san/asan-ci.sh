#!/bin/sh
# asan-ci.sh -- the ASan + UBSan (+ LSan) subset (Makefile asan-ci; issue
# 21 item 8) as one test of the suite: every unit test but
# test_kernels_cpu, and the integration tests that meet hostile input.
# tools/fly.sh test builds the binaries first (make test-bins); run alone,
# it builds them here.  The nested run's cmocka lines are what the outer
# run-tests.sh counts.
set -u
cd "$(dirname "$0")/../.."
exec ${MAKE:-make} -s asan-ci
