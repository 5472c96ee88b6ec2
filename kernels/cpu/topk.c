/*
 * topk.c -- CPU top-k variants: per row the k largest values (same dtype
 * as x, sorted descending) and their int64 indices.  Ties are always
 * ordered by smaller index first, so FLY_F_DETERMINISTIC holds for every
 * variant here and results are bit-identical across runs.
 *
 * Each element becomes one uint64 "composite": the order-preserving uint32
 * key of its fp32 value in the high half and ~index in the low half, so a
 * larger composite is a better element and no two are equal.
 *
 * Variants: topk_ref (full sort, the reference), topk_heap (min-heap of
 * k), topk_select (quickselect then sort k), topk_radix (histogram of the
 * key's top 11 bits finds the threshold bucket, then select within the
 * survivors); each takes threads over rows.  Feasible for
 * 1 <= k <= min(n, 2048).  Owns: nothing across calls.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_int.h"

#define TOPK_DTYPES ((1u << FLY_DT_FP32) | (1u << FLY_DT_BF16) | \
		     (1u << FLY_DT_FP16))
#define TOPK_KMAX 2048
#define RADIX_BITS 11

enum topk_algo { ALGO_SORT, ALGO_HEAP, ALGO_SELECT, ALGO_RADIX };

static const int64_t thr_vals[] = { 1, 2, 4 };

struct topk_ctx {
	const struct fly_problem *p;
	const struct flyk_topk_args *a;
	enum topk_algo algo;
	int failed;
};

static inline uint32_t order_key(float f)
{
	uint32_t u = flyk_cpu_f32_bits(f);

	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static int topk_problem_ok(const struct fly_problem *p)
{
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];

	if (p->op != FLY_OP_TOPK || !(TOPK_DTYPES & (1u << p->dtype)))
		return -EINVAL;
	if (p->flags & ~FLY_F_DETERMINISTIC)
		return -EINVAL;
	if (m < 1 || n < 1 || n > INT32_MAX || k < 1 || k > n ||
	    k > TOPK_KMAX)
		return -EINVAL;
	return 0;
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	return topk_problem_ok(p);
}

static int thr_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	if (topk_problem_ok(p) < 0)
		return -EINVAL;
	return flyk_cpu_threads_ok(dev, params[0], p->dims[0]);
}

static int cmp_desc(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? 1 : (a > b ? -1 : 0);
}

static inline void swap64(uint64_t *a, uint64_t *b)
{
	uint64_t t = *a;

	*a = *b;
	*b = t;
}

/* Reorder a[0..n) so that a[0..k) hold the k largest (in any order). */
static void select_top(uint64_t *a, int64_t n, int64_t k)
{
	int64_t lo = 0, hi = n - 1, t = k - 1;

	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2, i = lo, j = hi;
		uint64_t x = a[lo], y = a[mid], z = a[hi], pv;

		pv = (x > y) ? ((y > z) ? y : (x > z ? z : x))
			     : ((x > z) ? x : (y > z ? z : y));
		while (i <= j) {
			while (a[i] > pv)
				i++;
			while (a[j] < pv)
				j--;
			if (i <= j)
				swap64(&a[i++], &a[j--]);
		}
		if (t <= j)
			hi = j;
		else if (t >= i)
			lo = i;
		else
			break;
	}
}

static void heap_down(uint64_t *h, int64_t k, int64_t i)
{
	for (;;) {
		int64_t l = 2 * i + 1, r = l + 1, s = i;

		if (l < k && h[l] < h[s])
			s = l;
		if (r < k && h[r] < h[s])
			s = r;
		if (s == i)
			return;
		swap64(&h[i], &h[s]);
		i = s;
	}
}

/* The k best of comp[0..n) into out[0..k), via a min-heap. */
static void top_heap(const uint64_t *comp, int64_t n, int64_t k,
		     uint64_t *out)
{
	memcpy(out, comp, (size_t)k * sizeof(*out));
	for (int64_t i = k / 2 - 1; i >= 0; i--)
		heap_down(out, k, i);
	for (int64_t i = k; i < n; i++) {
		if (comp[i] > out[0]) {
			out[0] = comp[i];
			heap_down(out, k, 0);
		}
	}
}

/* Keep only the elements in or above the threshold bucket of the key's
 * top RADIX_BITS; @return how many survived (>= k) at the front. */
static int64_t radix_filter(uint64_t *comp, int64_t n, int64_t k)
{
	static const int shift = 32 + 32 - RADIX_BITS;
	uint32_t hist[1u << RADIX_BITS];
	int64_t cum = 0, kept = 0;
	int thr;

	memset(hist, 0, sizeof(hist));
	for (int64_t i = 0; i < n; i++)
		hist[comp[i] >> shift]++;
	for (thr = (1 << RADIX_BITS) - 1; thr > 0; thr--) {
		cum += hist[thr];
		if (cum >= k)
			break;
	}
	for (int64_t i = 0; i < n; i++)
		if ((int)(comp[i] >> shift) >= thr)
			comp[kept++] = comp[i];
	return kept;
}

/* Top k of one row's composites @p comp (clobbered) into @p best. */
static void row_topk(enum topk_algo algo, uint64_t *comp, int64_t n,
		     int64_t k, uint64_t *best)
{
	switch (algo) {
	case ALGO_SORT:
		qsort(comp, (size_t)n, sizeof(*comp), cmp_desc);
		memcpy(best, comp, (size_t)k * sizeof(*best));
		return;
	case ALGO_HEAP:
		top_heap(comp, n, k, best);
		break;
	case ALGO_RADIX:
		n = radix_filter(comp, n, k);
		/* fall through */
	case ALGO_SELECT:
		select_top(comp, n, k);
		memcpy(best, comp, (size_t)k * sizeof(*best));
		break;
	}
	qsort(best, (size_t)k, sizeof(*best), cmp_desc);
}

static void topk_work(void *arg, int tid, int nthreads)
{
	struct topk_ctx *c = arg;
	int64_t m = c->p->dims[0], n = c->p->dims[1], k = c->p->dims[2];
	uint32_t dt = c->p->dtype;
	size_t es = flyk_cpu_dtsize(dt);
	uint64_t *comp = malloc((size_t)n * sizeof(*comp));
	uint64_t *best = malloc((size_t)k * sizeof(*best));
	int64_t r0, r1;

	if (!comp || !best) {
		__atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
		goto out;
	}
	flyk_cpu_split(m, nthreads, tid, 1, &r0, &r1);
	for (int64_t i = r0; i < r1; i++) {
		const char *x = (const char *)c->a->x + (size_t)(i * n) * es;
		char *vals = (char *)c->a->values + (size_t)(i * k) * es;

		for (int64_t j = 0; j < n; j++)
			comp[j] = (uint64_t)order_key(flyk_cpu_load(x, (size_t)j,
								    dt)) << 32 |
				  (uint32_t)~(uint32_t)j;
		row_topk(c->algo, comp, n, k, best);
		for (int64_t j = 0; j < k; j++) {
			int64_t idx = (int64_t)(uint32_t)~(uint32_t)best[j];

			c->a->indices[i * k + j] = idx;
			memcpy(vals + (size_t)j * es, x + (size_t)idx * es, es);
		}
	}
out:
	free(comp);
	free(best);
}

static int run(const struct fly_problem *p, const union flyk_args *args,
	       enum topk_algo algo, int threads)
{
	struct topk_ctx c = { p, &args->topk, algo, 0 };

	flyk_cpu_parallel(threads, topk_work, &c);
	return c.failed ? -ENOMEM : 0;
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	return run(p, args, ALGO_SORT, 1);
}

static int heap_launch(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *params,
		       const union flyk_args *args, void *stream)
{
	return run(p, args, ALGO_HEAP, (int)params[0]);
}

static int select_launch(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *params,
			 const union flyk_args *args, void *stream)
{
	return run(p, args, ALGO_SELECT, (int)params[0]);
}

static int radix_launch(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params,
			const union flyk_args *args, void *stream)
{
	return run(p, args, ALGO_RADIX, (int)params[0]);
}

#define TOPK_VARIANT(nm, fn)                                              \
	{                                                                 \
		.name = nm, .op = FLY_OP_TOPK, .dtypes = TOPK_DTYPES,     \
		.flags = FLY_F_DETERMINISTIC, .nparams = 1,               \
		.params = { { "threads", 3, thr_vals } },                 \
		.feasible = thr_feasible, .launch = fn,                   \
	}

const struct flyk_variant flyk_cpu_topk_variants[] = {
	{
		.name = "topk_ref",
		.op = FLY_OP_TOPK,
		.dtypes = TOPK_DTYPES,
		.flags = FLY_F_DETERMINISTIC,
		.is_reference = 1,
		.nparams = 0,
		.feasible = ref_feasible,
		.launch = ref_launch,
	},
	TOPK_VARIANT("topk_heap", heap_launch),
	TOPK_VARIANT("topk_select", select_launch),
	TOPK_VARIANT("topk_radix", radix_launch),
};
const size_t flyk_cpu_topk_nvariants =
	sizeof(flyk_cpu_topk_variants) / sizeof(flyk_cpu_topk_variants[0]);
