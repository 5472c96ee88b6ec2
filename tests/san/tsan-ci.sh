#!/bin/sh
# tsan-ci.sh -- the ThreadSanitizer subset (Makefile tsan-ci; issue 21
# item 8) as one test of the suite: the client library's threaded unit
# tests (process cache, shm table, the client's table reads).
# tools/fly.sh test builds the binaries first (make test-bins); run alone,
# it builds them here.  The nested run's cmocka lines are what the outer
# run-tests.sh counts; a TSan report fails the test (halt_on_error).
set -u
cd "$(dirname "$0")/../.."
TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}" exec ${MAKE:-make} -s tsan-ci
