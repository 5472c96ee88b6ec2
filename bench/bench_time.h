/*
 * bench_time.h -- what the C benchmarks share: a monotonic clock in ns
 * and the percentile of a sample array (sorted in place).
 *
 * Owns: nothing.  Thread: any.
 */
#ifndef FLY_BENCH_TIME_H
#define FLY_BENCH_TIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* The @p p quantile (0..1) of @p v[0..n), n > 0; sorts v. */
static inline uint64_t pct_u64(uint64_t *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return v[(size_t)(p * (double)(n - 1))];
}

#endif /* FLY_BENCH_TIME_H */
