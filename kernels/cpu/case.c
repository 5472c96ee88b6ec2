/*
 * case.c -- the CPU backend's benchmark cases: seeded random inputs, the
 * reference output (computed once with the op's reference variant), cache
 * cleaning, timing, poisoning and checking.
 *
 * Owns: every buffer of a case (freed by flyk_cpu_case_free()) and, on the
 * device, the flush buffer (>= 2x the last-level cache, capped at 64 MiB,
 * allocated by the first case).  Thread: a case belongs to its device's
 * thread.
 *
 * Tolerances (|out - ref| per element, abs + rel):
 *   rmsnorm  fp32 1e-4, bf16 2e-2, fp16 5e-3      times (1 + |ref|)
 *   gemm     fp32 1e-3*sqrt(K), bf16 2e-2*sqrt(K) times (1 + |ref|)
 *   scaled_gemm  (bf16 out, any format) 2^-6 |ref| + 2^-8 max|ref|: two
 *            bf16 roundings of the same sum plus fp32-vs-double order
 *   mqa_logits  max |out - ref| over each row's window <= 2e-3 x the
 *            largest |ref| there (the upstream test's relative error);
 *            with FLY_F_CLEAN every other position exactly -inf
 *   attention  O |out - ref| <= |ref| / 64 + 4e-3 (the GPU's P is rounded
 *            to bf16 before P V: up to 2^-9 of max |v| = 1 over two keys,
 *            plus O's own rounding); lse within 1e-3 max(1, |ref|), and
 *            exactly -inf where the reference's row sees no key
 *   topk     values bit-exact; indices point at equal elements, distinct;
 *            with FLY_F_DETERMINISTIC indices equal the reference's.
 * A NaN anywhere in an output is -EDOM.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_int.h"

#define FLUSH_CAP (64u << 20)
#define FLUSH_UNKNOWN_LLC (32u << 20)
#define GEMM_ALPHA 0.75f

/* ---------------------------------------------------------- rng */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static uint64_t rng_seed(uint64_t seed)
{
	uint64_t z = seed + 0x9E3779B97F4A7C15ULL;

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	z ^= z >> 31;
	return z ? z : 1;
}

/* Uniform in [lo, hi) rounded to the dtype, never zero. */
static void fill(void *buf, size_t n, uint32_t dt, float lo, float hi,
		 uint64_t *s)
{
	for (size_t i = 0; i < n; i++) {
		float u = (float)(rng_next(s) >> 40) * (1.0f / 16777216.0f);
		float v = flyk_cpu_round(lo + u * (hi - lo), dt);

		if (v == 0.0f)
			v = 0.5f;
		flyk_cpu_store(buf, i, dt, v);
	}
}

/* ---------------------------------------------------------- buffers */

static void *case_alloc(struct flyk_case *c, size_t n, size_t es)
{
	size_t bytes;
	void *p;

	if (c->nbufs >= FLYK_CPU_CASE_BUFS || __builtin_mul_overflow(n, es, &bytes))
		return NULL;
	p = malloc(bytes ? bytes : 1);
	if (p)
		c->bufs[c->nbufs++] = p;
	return p;
}

/* Product of dims with overflow check; 0 on overflow (the setups turn a
 * zero count into -ENOMEM: dims >= 1 were checked by feasible()). */
static size_t elems(int64_t a, int64_t b)
{
	int64_t r;

	if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
		return 0;
	return (size_t)r;
}

static int flush_init(struct flyk_device *dev)
{
	size_t llc = dev->l3_bytes > dev->l2_bytes ? dev->l3_bytes
						   : dev->l2_bytes;
	size_t bytes = llc ? 2 * llc : 2 * (size_t)FLUSH_UNKNOWN_LLC;

	if (dev->flush)
		return 0;
	if (bytes > FLUSH_CAP)
		bytes = FLUSH_CAP;
	dev->flush = malloc(bytes);
	if (!dev->flush)
		return -ENOMEM;
	dev->flush_n = bytes / sizeof(float);
	for (size_t i = 0; i < dev->flush_n; i++)
		dev->flush[i] = 1.0f;
	return 0;
}

/* ---------------------------------------------------------- setup per op */

static int setup_rmsnorm(struct flyk_case *c, uint64_t *s)
{
	struct flyk_rmsnorm_args *a = &c->args.rmsnorm;
	uint32_t dt = c->p.dtype;
	size_t es = flyk_cpu_dtsize(dt), mn = elems(c->p.dims[0], c->p.dims[1]);
	size_t n = (size_t)c->p.dims[1];
	void *x = case_alloc(c, mn, es), *w = case_alloc(c, n, es);

	c->out = case_alloc(c, mn, es);
	c->ref = case_alloc(c, mn, es);
	c->out_bytes = mn * es;
	if (!mn || !x || !w || !c->out || !c->ref)
		return -ENOMEM;
	fill(x, mn, dt, -1.0f, 1.0f, s);
	fill(w, n, dt, 0.5f, 1.5f, s);
	*a = (struct flyk_rmsnorm_args){ x, w, c->ref, NULL, 1e-6f };
	if (c->p.flags & FLY_F_RESIDUAL) {
		c->pristine = case_alloc(c, mn, es);
		c->out2 = case_alloc(c, mn, es);
		c->ref2 = case_alloc(c, mn, es);
		if (!c->pristine || !c->out2 || !c->ref2)
			return -ENOMEM;
		c->pristine_bytes = c->out2_bytes = mn * es;
		fill(c->pristine, mn, dt, -1.0f, 1.0f, s);
		memcpy(c->ref2, c->pristine, mn * es);
		a->residual = c->ref2;
	}
	return 0;
}

static void rmsnorm_point_at_outputs(struct flyk_case *c)
{
	c->args.rmsnorm.y = c->out;
	if (c->out2)
		c->args.rmsnorm.residual = c->out2;
}

static int setup_topk(struct flyk_case *c, uint64_t *s)
{
	struct flyk_topk_args *a = &c->args.topk;
	uint32_t dt = c->p.dtype;
	size_t es = flyk_cpu_dtsize(dt), mn = elems(c->p.dims[0], c->p.dims[1]);
	size_t mk = elems(c->p.dims[0], c->p.dims[2]);
	void *x = case_alloc(c, mn, es);

	c->out = case_alloc(c, mk, es);
	c->ref = case_alloc(c, mk, es);
	c->out2 = case_alloc(c, mk, sizeof(int64_t));
	c->ref2 = case_alloc(c, mk, sizeof(int64_t));
	c->out_bytes = mk * es;
	c->out2_bytes = mk * sizeof(int64_t);
	if (!mn || !mk || !x || !c->out || !c->ref || !c->out2 || !c->ref2)
		return -ENOMEM;
	fill(x, mn, dt, -1.0f, 1.0f, s);
	*a = (struct flyk_topk_args){ x, c->ref, c->ref2, NULL, 0 };
	return 0;
}

static int setup_gemm(struct flyk_case *c, uint64_t *s)
{
	struct flyk_gemm_args *a = &c->args.gemm;
	uint32_t dt = c->p.dtype;
	int64_t m = c->p.dims[0], n = c->p.dims[1], k = c->p.dims[2];
	size_t es = flyk_cpu_dtsize(dt), mn = elems(m, n);
	void *x = case_alloc(c, elems(m, k), es);
	void *y = case_alloc(c, elems(n, k), es);
	void *bias = NULL;

	c->out = case_alloc(c, mn, es);
	c->ref = case_alloc(c, mn, es);
	c->out_bytes = mn * es;
	if (!x || !y || !c->out || !c->ref || !mn || !elems(m, k) ||
	    !elems(n, k))
		return -ENOMEM;
	fill(x, elems(m, k), dt, -1.0f, 1.0f, s);
	fill(y, elems(n, k), dt, -1.0f, 1.0f, s);
	if (c->p.flags & FLY_F_BIAS) {
		bias = case_alloc(c, (size_t)n, es);
		if (!bias)
			return -ENOMEM;
		fill(bias, (size_t)n, dt, -1.0f, 1.0f, s);
	}
	*a = (struct flyk_gemm_args){ x, y, c->ref, bias,
				      (c->p.flags & FLY_F_SCALE) ? GEMM_ALPHA
								 : 1.0f,
				      NULL, 0 };
	return 0;
}

static int cmp_i64(const void *x, const void *y)
{
	int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;

	return (a > b) - (a < b);
}

static int setup_grouped(struct flyk_case *c, uint64_t *s)
{
	struct flyk_grouped_gemm_args *a = &c->args.grouped_gemm;
	uint32_t dt = c->p.dtype;
	int64_t g = c->p.dims[0], m = c->p.dims[1], n = c->p.dims[2];
	int64_t k = c->p.dims[3];
	size_t es = flyk_cpu_dtsize(dt), mn = elems(m, n);
	size_t bn = elems(elems(g, n), k);
	void *x = case_alloc(c, elems(m, k), es), *y = case_alloc(c, bn, es);
	int64_t *off = case_alloc(c, (size_t)g + 1, sizeof(int64_t));

	c->out = case_alloc(c, mn, es);
	c->ref = case_alloc(c, mn, es);
	c->out_bytes = mn * es;
	if (!x || !y || !off || !c->out || !c->ref || !mn || !bn)
		return -ENOMEM;
	fill(x, elems(m, k), dt, -1.0f, 1.0f, s);
	fill(y, bn, dt, -1.0f, 1.0f, s);
	/* uneven groups: g-1 random cut points in [0, m], sorted */
	off[0] = 0;
	for (int64_t i = 1; i < g; i++)
		off[i] = (int64_t)(rng_next(s) % (uint64_t)(m + 1));
	qsort(off + 1, (size_t)(g - 1), sizeof(*off), cmp_i64);
	off[g] = m;
	*a = (struct flyk_grouped_gemm_args){ x, y, c->ref, off, NULL, 0, NULL };
	return 0;
}

/* Random e4m3 bytes: sign, exponent field 4..9 (fn: 2^-3 .. 2^2, fnuz
 * half that), any mantissa; never zero or NaN in either format. */
static void fill_fp8(uint8_t *b, size_t n, uint64_t *s)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t r = rng_next(s) >> 32;

		b[i] = (uint8_t)(((r & 1u) << 7) | ((4u + (r >> 1) % 6u) << 3) |
				 ((r >> 8) & 7u));
	}
}

/* The windows of the tuning case: causal with a KV prefix
 * (ke = skv - sq + i + 1, ks = 0), so the early rows of sq > skv are
 * empty and the rest grow by one. */
static void mqa_windows(int32_t *ks, int32_t *ke, int64_t sq, int64_t skv)
{
	for (int64_t i = 0; i < sq; i++) {
		int64_t e = skv - sq + i + 1;

		ks[i] = 0;
		ke[i] = (int32_t)(e < 0 ? 0 : e);
	}
}

static int setup_mqa(struct flyk_case *c, uint64_t *s)
{
	struct flyk_mqa_logits_args *a = &c->args.mqa_logits;
	int64_t sq = c->p.dims[0], skv = c->p.dims[1], h = c->p.dims[2];
	int64_t d = c->p.dims[3];
	size_t nq = elems(elems(sq, h), d), nkv = elems(skv, d);
	size_t nl = elems(sq, skv);
	uint8_t *q = case_alloc(c, nq, 1), *kv = case_alloc(c, nkv, 1);
	float *sc = case_alloc(c, (size_t)skv, sizeof(float));
	float *w = case_alloc(c, elems(sq, h), sizeof(float));
	int32_t *ks = case_alloc(c, (size_t)sq, sizeof(int32_t));
	int32_t *ke = case_alloc(c, (size_t)sq, sizeof(int32_t));

	c->out = case_alloc(c, nl, sizeof(float));
	c->ref = case_alloc(c, nl, sizeof(float));
	c->out_bytes = nl * sizeof(float);
	if (!nq || !nkv || !nl || !q || !kv || !sc || !w || !ks || !ke ||
	    !c->out || !c->ref)
		return -ENOMEM;
	fill_fp8(q, nq, s);
	fill_fp8(kv, nkv, s);
	fill(sc, (size_t)skv, FLY_DT_FP32, 0.1f, 1.0f, s);
	fill(w, elems(sq, h), FLY_DT_FP32, -0.5f, 0.5f, s);
	mqa_windows(ks, ke, sq, skv);
	/* positions outside the windows stay NaN in the reference: only the
	 * valid ones are compared (and -inf under FLY_F_CLEAN) */
	memset(c->ref, 0xff, nl * sizeof(float));
	*a = (struct flyk_mqa_logits_args){ q, kv, sc, w, ks, ke, c->ref, 0,
					    NULL, 0 };
	return 0;
}

/* Operand bytes of @p rows x @p k elements of a scaled-GEMM dtype, and
 * its scales: one fp32 (per tensor, in [0.5, 1.5)) or rows x k/32 e8m0
 * bytes (2^-3 .. 2^3, never the NaN 0xFF). */
static int scaled_operand(struct flyk_case *c, int64_t rows, void **x,
			  void **scale, uint64_t *s)
{
	uint32_t dt = c->p.dtype;
	int64_t k = c->p.dims[2];
	size_t n = elems(rows, k);
	int fp4 = dt == FLY_DT_MXFP4;
	int mx = fp4 || dt == FLY_DT_MXFP8;

	*x = case_alloc(c, fp4 ? n / 2 : n, 1);
	*scale = mx ? case_alloc(c, elems(rows, k / 32), 1)
		    : case_alloc(c, 1, sizeof(float));
	if (!n || !*x || !*scale)
		return -ENOMEM;
	if (fp4) {
		uint8_t *b = *x;

		for (size_t i = 0; i < n / 2; i++)
			b[i] = (uint8_t)(rng_next(s) >> 56);
	} else {
		fill_fp8(*x, n, s);
	}
	if (mx) {
		uint8_t *e = *scale;

		for (size_t i = 0; i < elems(rows, k / 32); i++)
			e[i] = (uint8_t)(124u + (rng_next(s) >> 32) % 7u);
	} else {
		fill(*scale, 1, FLY_DT_FP32, 0.5f, 1.5f, s);
	}
	return 0;
}

static int setup_scaled(struct flyk_case *c, uint64_t *s)
{
	struct flyk_scaled_gemm_args *a = &c->args.scaled_gemm;
	int64_t m = c->p.dims[0], n = c->p.dims[1];
	size_t mn = elems(m, n);
	void *x, *y, *sx, *sy, *bias = NULL;
	int rc;

	rc = scaled_operand(c, m, &x, &sx, s);
	if (!rc)
		rc = scaled_operand(c, n, &y, &sy, s);
	if (rc)
		return rc;
	c->out = case_alloc(c, mn, 2);
	c->ref = case_alloc(c, mn, 2);
	c->out_bytes = mn * 2;
	if (!mn || !c->out || !c->ref)
		return -ENOMEM;
	if (c->p.flags & FLY_F_BIAS) {
		bias = case_alloc(c, (size_t)n, 2);
		if (!bias)
			return -ENOMEM;
		fill(bias, (size_t)n, FLY_DT_BF16, -1.0f, 1.0f, s);
	}
	*a = (struct flyk_scaled_gemm_args){ x, y, c->ref, bias, sx, sy,
					     NULL, 0 };
	return 0;
}

/* Dense q [b,sq,hq,d] in [-2, 2), k and v [b,skv,hkv,d] in [-1, 1); O
 * in out (ref), the LSE [b,hq,sq] in out2 (ref2); scale 1/sqrt(d). */
static int setup_attention(struct flyk_case *c, uint64_t *s)
{
	struct flyk_attention_args *a = &c->args.attention;
	const int64_t *dm = c->p.dims;
	uint32_t dt = c->p.dtype;
	size_t nq = elems(elems(dm[0], dm[1]), elems(dm[3], dm[5]));
	size_t nkv = elems(elems(dm[0], dm[2]), elems(dm[4], dm[5]));
	size_t nl = elems(elems(dm[0], dm[3]), dm[1]);
	void *q = case_alloc(c, nq, 2), *k = case_alloc(c, nkv, 2);
	void *v = case_alloc(c, nkv, 2);

	c->out = case_alloc(c, nq, 2);
	c->ref = case_alloc(c, nq, 2);
	c->out2 = case_alloc(c, nl, sizeof(float));
	c->ref2 = case_alloc(c, nl, sizeof(float));
	c->out_bytes = nq * 2;
	c->out2_bytes = nl * sizeof(float);
	if (!nq || !nkv || !nl || !q || !k || !v || !c->out || !c->ref ||
	    !c->out2 || !c->ref2)
		return -ENOMEM;
	fill(q, nq, dt, -2.0f, 2.0f, s);
	fill(k, nkv, dt, -1.0f, 1.0f, s);
	fill(v, nkv, dt, -1.0f, 1.0f, s);
	memset(a, 0, sizeof(*a));
	a->q = q;
	a->k = k;
	a->v = v;
	a->o = c->ref;
	a->lse = c->ref2;
	a->scale = 1.0f / sqrtf((float)dm[5]);
	return 0;
}

/* Point the args' outputs at the case outputs (after the reference). */
static void point_at_outputs(struct flyk_case *c)
{
	switch (c->p.op) {
	case FLY_OP_RMSNORM:
		rmsnorm_point_at_outputs(c);
		break;
	case FLY_OP_TOPK:
		c->args.topk.values = c->out;
		c->args.topk.indices = c->out2;
		break;
	case FLY_OP_GEMM:
		c->args.gemm.c = c->out;
		break;
	case FLY_OP_MQA_LOGITS:
		c->args.mqa_logits.logits = c->out;
		break;
	case FLY_OP_SCALED_GEMM:
		c->args.scaled_gemm.c = c->out;
		break;
	case FLY_OP_ATTENTION:
		c->args.attention.o = c->out;
		c->args.attention.lse = c->out2;
		break;
	default:
		c->args.grouped_gemm.c = c->out;
		break;
	}
}

static int setup(struct flyk_case *c, uint64_t seed)
{
	uint64_t s = rng_seed(seed);

	switch (c->p.op) {
	case FLY_OP_RMSNORM:
		return setup_rmsnorm(c, &s);
	case FLY_OP_TOPK:
		return setup_topk(c, &s);
	case FLY_OP_GEMM:
		return setup_gemm(c, &s);
	case FLY_OP_GROUPED_GEMM:
		return setup_grouped(c, &s);
	case FLY_OP_MQA_LOGITS:
		return setup_mqa(c, &s);
	case FLY_OP_SCALED_GEMM:
		return setup_scaled(c, &s);
	case FLY_OP_ATTENTION:
		return setup_attention(c, &s);
	default:
		return -EOPNOTSUPP;
	}
}

int flyk_cpu_case_new(struct flyk_device *dev, const struct fly_problem *p,
		      uint64_t seed, struct flyk_case **out)
{
	const struct flyk_variant *ref;
	struct flyk_case *c;
	int rc;

	if (!dev || !p || !out)
		return -EINVAL;
	ref = flyk_cpu_reference(p->op);
	if (!ref || !flyk_variant_supports(ref, p))
		return -EOPNOTSUPP;
	if (ref->feasible(dev, p, NULL) < 0)
		return -EINVAL;
	rc = flush_init(dev);
	if (rc < 0)
		return rc;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->dev = dev;
	c->p = *p;
	rc = setup(c, seed);
	if (rc < 0)
		goto fail;
	rc = ref->launch(dev, p, NULL, &c->args, NULL);
	if (rc < 0)
		goto fail;
	point_at_outputs(c);
	*out = c;
	return 0;
fail:
	flyk_cpu_case_free(c);
	return rc;
}

void flyk_cpu_case_free(struct flyk_case *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->nbufs; i++)
		free(c->bufs[i]);
	free(c);
}

int flyk_cpu_case_poison(struct flyk_case *c)
{
	if (!c)
		return -EINVAL;
	memset(c->out, 0xff, c->out_bytes);
	if (c->out2 && (c->p.op == FLY_OP_TOPK || c->p.op == FLY_OP_ATTENTION))
		memset(c->out2, 0xff, c->out2_bytes);
	return 0;
}

/* Read the whole flush buffer; the sum goes to the volatile sink. */
static void flush_caches(struct flyk_device *dev)
{
	float acc[8] = { 0 }, s = 0.0f;
	size_t i = 0;

	for (; i + 8 <= dev->flush_n; i += 8)
		for (int l = 0; l < 8; l++)
			acc[l] += dev->flush[i + l];
	for (int l = 0; l < 8; l++)
		s += acc[l];
	dev->sink = s;
}

int flyk_cpu_case_time(struct flyk_case *c, const struct flyk_variant *v,
		       const int64_t *params, double *us)
{
	struct timespec t0, t1;
	int rc;

	if (!c || !v || !us || (v->nparams && !params))
		return -EINVAL;
	if (!flyk_variant_supports(v, &c->p) ||
	    v->feasible(c->dev, &c->p, params) < 0)
		return -EINVAL;
	flush_caches(c->dev);
	if (c->pristine)
		memcpy(c->out2, c->pristine, c->pristine_bytes);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = v->launch(c->dev, &c->p, params, &c->args, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	*us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 +
	      (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
	return rc;
}

/* ---------------------------------------------------------- checks */

/* Element-wise abs+rel comparison of @p n elements.  @return 0 or -EDOM. */
static int cmp_float(const void *out, const void *ref, size_t n, uint32_t dt,
		     double tol, double *max_err)
{
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		double o = flyk_cpu_load(out, i, dt);
		double r = flyk_cpu_load(ref, i, dt);
		double d = fabs(o - r);

		if (isnan(o)) {
			*max_err = INFINITY;
			return -EDOM;
		}
		if (d > *max_err)
			*max_err = d;
		if (d > tol * (1.0 + fabs(r)))
			rc = -EDOM;
	}
	return rc;
}

static double rms_tol(uint32_t dt)
{
	return dt == FLY_DT_FP32 ? 1e-4 : (dt == FLY_DT_BF16 ? 2e-2 : 5e-3);
}

static double gemm_tol(uint32_t dt, int64_t k)
{
	return (dt == FLY_DT_FP32 ? 1e-3 : 2e-2) * sqrt((double)k);
}

/* Whether the row's indices are distinct (sorted copy in @p tmp). */
static int indices_distinct(const int64_t *idx, int64_t k, int64_t *tmp)
{
	memcpy(tmp, idx, (size_t)k * sizeof(*tmp));
	qsort(tmp, (size_t)k, sizeof(*tmp), cmp_i64);
	for (int64_t j = 1; j < k; j++)
		if (tmp[j] == tmp[j - 1])
			return 0;
	return 1;
}

static int check_topk_row(const struct flyk_case *c, int64_t i, int64_t *tmp,
			  double *max_err)
{
	int64_t n = c->p.dims[1], k = c->p.dims[2];
	uint32_t dt = c->p.dtype;
	size_t es = flyk_cpu_dtsize(dt);
	const char *x = (const char *)c->args.topk.x + (size_t)(i * n) * es;
	const char *vo = (const char *)c->out + (size_t)(i * k) * es;
	const char *vr = (const char *)c->ref + (size_t)(i * k) * es;
	const int64_t *io = (const int64_t *)c->out2 + i * k;
	const int64_t *ir = (const int64_t *)c->ref2 + i * k;
	int det = (c->p.flags & FLY_F_DETERMINISTIC) != 0;
	int rc = 0;

	for (int64_t j = 0; j < k; j++) {
		double o = flyk_cpu_load(vo, (size_t)j, dt);
		double r = flyk_cpu_load(vr, (size_t)j, dt);

		if (isnan(o)) {
			*max_err = INFINITY;
			return -EDOM;
		}
		if (fabs(o - r) > *max_err)
			*max_err = fabs(o - r);
		if (memcmp(vo + j * es, vr + j * es, es) != 0)
			rc = -EDOM;
		if (io[j] < 0 || io[j] >= n ||
		    memcmp(x + io[j] * es, vo + j * es, es) != 0 ||
		    (det && io[j] != ir[j]))
			rc = -EDOM;
	}
	if (rc == 0 && !indices_distinct(io, k, tmp))
		rc = -EDOM;
	return rc;
}

static int check_topk(struct flyk_case *c, double *max_err)
{
	int64_t *tmp = malloc((size_t)c->p.dims[2] * sizeof(*tmp));
	int rc = 0;

	if (!tmp)
		return -ENOMEM;
	for (int64_t i = 0; i < c->p.dims[0]; i++) {
		int r = check_topk_row(c, i, tmp, max_err);

		if (r == -EDOM && isinf(*max_err)) {
			rc = r;
			break;
		}
		if (r < 0)
			rc = r;
	}
	free(tmp);
	return rc;
}

static int check_mqa(struct flyk_case *c, double *max_err)
{
	int64_t sq = c->p.dims[0], skv = c->p.dims[1];
	const float *o = c->out, *r = c->ref;
	int clean = (c->p.flags & FLY_F_CLEAN) != 0;
	double den = 0.0;
	int rc = 0;

	for (int64_t i = 0; i < sq; i++) {
		int64_t lo, hi;

		flyk_cpu_mqa_window(&c->args.mqa_logits, skv, i, &lo, &hi);
		for (int64_t j = 0; j < skv; j++) {
			float ov = o[i * skv + j], rv = r[i * skv + j];

			if (j < lo || j >= hi) {
				if (clean && !(isinf(ov) && ov < 0))
					rc = -EDOM;
				continue;
			}
			if (!isfinite(ov)) {
				*max_err = INFINITY;
				return -EDOM;
			}
			if (fabs((double)ov - rv) > *max_err)
				*max_err = fabs((double)ov - rv);
			if (fabs((double)rv) > den)
				den = fabs((double)rv);
		}
	}
	if (*max_err > 2e-3 * (den > 1e-30 ? den : 1e-30) && *max_err > 0)
		rc = -EDOM;
	return rc;
}

/* bf16 outputs against the reference: |o - r| <= 2^-6 |r| + 2^-8 R,
 * R = max |r| (see the header). */
static int check_scaled(struct flyk_case *c, double *max_err)
{
	size_t n = c->out_bytes / 2;
	double big = 0.0;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		double r = flyk_cpu_load(c->ref, i, FLY_DT_BF16);

		if (fabs(r) > big)
			big = fabs(r);
	}
	for (size_t i = 0; i < n; i++) {
		double o = flyk_cpu_load(c->out, i, FLY_DT_BF16);
		double r = flyk_cpu_load(c->ref, i, FLY_DT_BF16);
		double d = fabs(o - r);

		if (isnan(o) != isnan(r)) {
			*max_err = INFINITY;
			return -EDOM;
		}
		if (isnan(o))
			continue;
		if (d > *max_err)
			*max_err = d;
		if (d > 0x1p-6 * fabs(r) + 0x1p-8 * big)
			rc = -EDOM;
	}
	return rc;
}

/* O and the LSE against the reference (see the header). */
static int check_attention(struct flyk_case *c, double *max_err)
{
	size_t n = c->out_bytes / 2, nl = c->out2_bytes / sizeof(float);
	const float *lo = c->out2, *lr = c->ref2;
	uint32_t dt = c->p.dtype;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		double o = flyk_cpu_load(c->out, i, dt);
		double r = flyk_cpu_load(c->ref, i, dt);
		double d = fabs(o - r);

		if (isnan(o)) {
			*max_err = INFINITY;
			return -EDOM;
		}
		if (d > *max_err)
			*max_err = d;
		if (d > fabs(r) / 64 + 4e-3)
			rc = -EDOM;
	}
	for (size_t i = 0; i < nl; i++) {
		double d;

		if (isinf(lr[i]) && lr[i] < 0) {
			if (!(isinf(lo[i]) && lo[i] < 0)) {
				*max_err = INFINITY;
				rc = -EDOM;
			}
			continue;
		}
		d = fabs((double)lo[i] - lr[i]);
		if (isnan(lo[i])) {
			*max_err = INFINITY;
			return -EDOM;
		}
		if (d > *max_err)
			*max_err = d;
		if (d > 1e-3 * (fabs(lr[i]) > 1.0 ? fabs(lr[i]) : 1.0))
			rc = -EDOM;
	}
	return rc;
}

int flyk_cpu_case_check(struct flyk_case *c, double *max_err)
{
	uint32_t dt;
	size_t es;
	int rc, rc2 = 0;

	if (!c || !max_err)
		return -EINVAL;
	*max_err = 0.0;
	dt = c->p.dtype;
	es = flyk_cpu_dtsize(dt);
	switch (c->p.op) {
	case FLY_OP_RMSNORM:
		rc = cmp_float(c->out, c->ref, c->out_bytes / es, dt,
			       rms_tol(dt), max_err);
		if (c->out2)
			rc2 = cmp_float(c->out2, c->ref2, c->out2_bytes / es, dt,
					rms_tol(dt), max_err);
		return rc < 0 ? rc : rc2;
	case FLY_OP_TOPK:
		return check_topk(c, max_err);
	case FLY_OP_GEMM:
		return cmp_float(c->out, c->ref, c->out_bytes / es, dt,
				 gemm_tol(dt, c->p.dims[2]), max_err);
	case FLY_OP_MQA_LOGITS:
		return check_mqa(c, max_err);
	case FLY_OP_SCALED_GEMM:
		return check_scaled(c, max_err);
	case FLY_OP_ATTENTION:
		return check_attention(c, max_err);
	default:
		return cmp_float(c->out, c->ref, c->out_bytes / es, dt,
				 gemm_tol(dt, c->p.dims[3]), max_err);
	}
}
