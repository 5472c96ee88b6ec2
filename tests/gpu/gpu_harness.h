/*
 * gpu_harness.h -- the harness the GPU tests share (tests/gpu/test_*.c):
 * pass/fail counting, problem keys, and running every feasible point of
 * every variant of a problem through the backend's case (poison, time,
 * check), plus flyk_default() on it.
 *
 * Owns: the counters and the per-variant run counts (process globals).
 * Thread: single-threaded tests only.
 * FLYK_TEST_VARIANTS=NAME (read by gt_open): only the variants whose name
 * contains NAME run (a quick look at one family).
 */
#ifndef FLY_GPU_HARNESS_H
#define FLY_GPU_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "flyk.h"

/* FLYK_TEST_VARIANTS, or NULL: every variant. */
extern const char *gt_only;

/* Count one check; print "FAIL what key (rc N)" when !ok. */
void gt_result(int ok, const char *what, const char *key, int rc);

/* "op=.. dt=.. layout=.. flags=.. dims=a,b,c,d NAME(p0,p1,...)" into
 * @p buf (@p np params of @p pt; NULL and 0 for none). */
void gt_key(const struct fly_problem *p, const char *vname,
	    const int64_t *pt, uint32_t np, char *buf, size_t cap);

/* The point at odometer position @p pos of @p v's value lists, and the
 * next position: @return 0 once every position has been visited. */
void gt_point(const struct flyk_variant *v, const uint32_t *pos,
	      int64_t *pt);
int gt_next(const struct flyk_variant *v, uint32_t *pos);

/* Poison the outputs, run @p v at @p pt once (timed), check against the
 * reference.  @return 0 or the failing step's error (-ERANGE: the events
 * measured nothing). */
int gt_run_point(const struct flyk_backend *b, struct flyk_case *c,
		 const struct flyk_variant *v, const int64_t *pt);

/* Every feasible point of @p v on the case @p c of @p p (enumerate()'s
 * points where it has one, each of which must be feasible; else every
 * point of its value lists).  @return how many ran. */
int gt_variant(const struct flyk_backend *b, struct flyk_device *dev,
	       struct flyk_case *c, const struct fly_problem *p,
	       const struct flyk_variant *v);

/* A case of @p p (seeded @p seed), every supported variant (gt_only
 * permitting) through gt_variant, then flyk_default()'s decision, which
 * must run and must not be the reference.  @return the points run. */
int gt_problem(const struct flyk_backend *b, struct flyk_device *dev,
	       const struct fly_problem *p, uint64_t seed);

/* Open device 0 of the GPU backend and read FLYK_TEST_VARIANTS.
 * @return 0, or prints "no GPU ..." with a failing summary and returns
 * the error. */
int gt_open(const struct flyk_backend **b, struct flyk_device **dev);

/* Print the points run per variant ("# ran NAME: N points") and the
 * summary "N passed, N failed".  @return the exit status (1 on a
 * failure). */
int gt_finish(void);

#endif /* FLY_GPU_HARNESS_H */
