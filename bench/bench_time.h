/*
 * bench_time.h -- what the C benchmarks share: a monotonic clock in ns,
 * a cheaper timer for single calls (tick), and the percentile of a sample
 * array (sorted in place).
 *
 * tick(): on x86-64 an rdtsc between two lfences (the lfence before
 * waits for the timed code's loads, the one after keeps the timed code
 * from starting early), else clock_gettime(CLOCK_MONOTONIC).  The TSC's
 * rate is calibrated once against CLOCK_MONOTONIC (tick_calibrate(), 20
 * ms) and ticks_ns() converts.  FLY_BENCH_CLOCK=gettime in the
 * environment makes tick() use clock_gettime on x86-64 too (the per-call
 * figures of earlier rounds).  A benchmark prints what an empty tick
 * pair measures beside its figures and never subtracts it.
 *
 * Owns: the calibration (one per program).  Thread: calibrate before
 * starting threads; any thread after.
 */
#ifndef FLY_BENCH_TIME_H
#define FLY_BENCH_TIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ns per tick: 1 while tick() is now_ns() (not calibrated, not x86-64,
 * or FLY_BENCH_CLOCK=gettime); set by tick_calibrate(). */
static double tick_ns_per = 1.0;
/* Whether tick() reads the TSC. */
static int tick_tsc;

static inline uint64_t tick(void)
{
#if defined(__x86_64__)
	if (tick_tsc) {
		uint32_t lo, hi;

		__asm__ volatile("lfence\n\trdtsc\n\tlfence"
				 : "=a"(lo), "=d"(hi)
				 :
				 : "memory");
		return (uint64_t)hi << 32 | lo;
	}
#endif
	return now_ns();
}

/* Ticks to ns (rounded to nearest). */
static inline uint64_t ticks_ns(uint64_t t)
{
	return (uint64_t)((double)t * tick_ns_per + 0.5);
}

/* Choose tick()'s source and measure the TSC's rate against
 * CLOCK_MONOTONIC over 20 ms.  @return the name of the source. */
static inline const char *tick_calibrate(void)
{
	const char *env = getenv("FLY_BENCH_CLOCK");
	uint64_t t0, t1, c0, c1;

	tick_tsc = 0;
	tick_ns_per = 1.0;
#if defined(__x86_64__)
	if (env != NULL && strcmp(env, "gettime") == 0)
		return "clock_gettime";
	tick_tsc = 1;
	t0 = now_ns();
	c0 = tick();
	do
		t1 = now_ns();
	while (t1 - t0 < 20000000ull);
	c1 = tick();
	tick_ns_per = (double)(t1 - t0) / (double)(c1 - c0);
	return "rdtsc";
#else
	(void)env, (void)t0, (void)t1, (void)c0, (void)c1;
	return "clock_gettime";
#endif
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

/* The mean of the fastest @p p share of @p v[0..n) (sorted by pct_u64
 * first): a finer figure than a quantile of samples that move in whole
 * timer steps, with the preempted calls of the slow tail left out. */
static inline double low_mean_u64(const uint64_t *v, size_t n, double p)
{
	size_t m = (size_t)(p * (double)n);
	double s = 0;

	for (size_t i = 0; i < m; i++)
		s += (double)v[i];
	return m > 0 ? s / (double)m : 0;
}

#endif /* FLY_BENCH_TIME_H */
