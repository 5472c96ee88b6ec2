/*
 * attention.c -- CPU attention forward (issue 16):
 *   O[b, i, h, :] = softmax_j(scale * Q[b, i, h, :] . K[b, j, hk, :]) V[b, j, hk, :]
 * with hk = h / (hq / hkv), bf16/fp16 in and out; dims b, sq, skv, hq,
 * hkv, d; [batch, seq, heads, d] tensors with the caller's strides
 * (flyk_attention_strides).  FLY_F_CAUSAL aligns bottom-right (query i
 * sees keys j <= i + skv - sq); a row that sees no key is written 0 with
 * lse -inf.  lse, when not NULL, is [b, hq, sq] fp32, natural log.
 *
 * Variants: attn_ref (row by row, double sums and exp: the reference),
 * attn_blocked (block_q query rows against tiles of block_kv keys, each
 * tile converted to fp32 once per block, fp32 online softmax -- the
 * flash-attention recurrence -- with the key tiles past the block's last
 * visible key skipped; (batch, head, query block) units spread over
 * `threads` by flyk_cpu_parallel, interleaved so causal blocks balance).
 * Owns: nothing across calls.  Thread: launches are reentrant.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "cpu_int.h"

#define ATTN_DTYPES ((1u << FLY_DT_FP16) | (1u << FLY_DT_BF16))

static const int64_t bq_vals[] = { 16, 64 };
static const int64_t bkv_vals[] = { 64, 256 };
static const int64_t thr_vals[] = { 1, 2, 4 };

/* The problem's dims, the tensors' strides and the mask. */
struct attn_geom {
	int64_t b, sq, skv, hq, hkv, d;
	int64_t qs[3], ks[3], vs[3], os[3];
	float scale;
	int causal;
};

static int attn_problem_ok(const struct fly_problem *p)
{
	int64_t d = p->dims[5];

	if (p->op != FLY_OP_ATTENTION || !(ATTN_DTYPES & (1u << p->dtype)))
		return -EINVAL;
	if (p->flags & ~FLY_F_CAUSAL)
		return -EINVAL;
	for (int i = 0; i < 6; i++)
		if (p->dims[i] < 1)
			return -EINVAL;
	if ((d != 64 && d != 128 && d != 256) || p->dims[3] % p->dims[4])
		return -EINVAL;
	return 0;
}

static void geom_of(const struct fly_problem *p,
		    const struct flyk_attention_args *a, struct attn_geom *g)
{
	g->b = p->dims[0];
	g->sq = p->dims[1];
	g->skv = p->dims[2];
	g->hq = p->dims[3];
	g->hkv = p->dims[4];
	g->d = p->dims[5];
	flyk_attention_strides(g->qs, a->q_stride, g->sq, g->hq, g->d);
	flyk_attention_strides(g->ks, a->k_stride, g->skv, g->hkv, g->d);
	flyk_attention_strides(g->vs, a->v_stride, g->skv, g->hkv, g->d);
	flyk_attention_strides(g->os, a->o_stride, g->sq, g->hq, g->d);
	g->scale = a->scale;
	g->causal = (p->flags & FLY_F_CAUSAL) != 0;
}

/* Keys [0, visible) are seen by query row @p i. */
static int64_t visible(const struct attn_geom *g, int64_t i)
{
	int64_t hi;

	if (!g->causal)
		return g->skv;
	hi = i + g->skv - g->sq + 1;
	return hi < 0 ? 0 : (hi > g->skv ? g->skv : hi);
}

/* ---------------------------------------------------------- reference */

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	(void)dev;
	(void)params;
	return attn_problem_ok(p);
}

/* Row i of head h of batch b, scores in @p s (skv doubles). */
static void ref_row(const struct attn_geom *g, uint32_t dt,
		    const struct flyk_attention_args *a, int64_t b,
		    int64_t h, int64_t i, double *s)
{
	int64_t hk = h / (g->hq / g->hkv), hi = visible(g, i);
	size_t q0 = (size_t)(b * g->qs[0] + i * g->qs[1] + h * g->qs[2]);
	size_t o0 = (size_t)(b * g->os[0] + i * g->os[1] + h * g->os[2]);
	double mx = -INFINITY, sum = 0.0;

	for (int64_t j = 0; j < hi; j++) {
		size_t k0 = (size_t)(b * g->ks[0] + j * g->ks[1] +
				     hk * g->ks[2]);
		double dot = 0.0;

		for (int64_t x = 0; x < g->d; x++)
			dot += (double)flyk_cpu_load(a->q, q0 + x, dt) *
			       flyk_cpu_load(a->k, k0 + x, dt);
		s[j] = dot * g->scale;
		mx = s[j] > mx ? s[j] : mx;
	}
	for (int64_t j = 0; j < hi; j++) {
		s[j] = exp(s[j] - mx);
		sum += s[j];
	}
	for (int64_t x = 0; x < g->d; x++) {
		double acc = 0.0;

		for (int64_t j = 0; j < hi; j++)
			acc += s[j] * flyk_cpu_load(a->v,
						    (size_t)(b * g->vs[0] +
							     j * g->vs[1] +
							     hk * g->vs[2] + x),
						    dt);
		flyk_cpu_store(a->o, o0 + x, dt, hi ? (float)(acc / sum) : 0.f);
	}
	if (a->lse)
		a->lse[(b * g->hq + h) * g->sq + i] =
			hi ? (float)(mx + log(sum)) : -INFINITY;
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	const struct flyk_attention_args *a = &args->attention;
	struct attn_geom g;
	double *s;

	(void)dev;
	(void)params;
	(void)stream;
	if (attn_problem_ok(p) < 0)
		return -EINVAL;
	geom_of(p, a, &g);
	s = malloc((size_t)g.skv * sizeof(*s));
	if (!s)
		return -ENOMEM;
	for (int64_t b = 0; b < g.b; b++)
		for (int64_t h = 0; h < g.hq; h++)
			for (int64_t i = 0; i < g.sq; i++)
				ref_row(&g, p->dtype, a, b, h, i, s);
	free(s);
	return 0;
}

/* ---------------------------------------------------------- blocked */

struct blk_ctx {
	const struct fly_problem *p;
	const struct flyk_attention_args *a;
	struct attn_geom g;
	int64_t bq;      /* query rows per block */
	int64_t bkv;     /* keys per tile */
	int failed;
};

/* One thread's scratch: the block's q rows (fp32, scale folded in), a
 * K and a V tile, the block's accumulators, running max and sum. */
struct blk_scratch {
	float *q, *k, *v, *acc, *m, *l;
};

static int scratch_new(const struct blk_ctx *c, struct blk_scratch *s)
{
	size_t d = (size_t)c->g.d;

	s->q = malloc((size_t)c->bq * d * sizeof(float));
	s->k = malloc((size_t)c->bkv * d * sizeof(float));
	s->v = malloc((size_t)c->bkv * d * sizeof(float));
	s->acc = malloc((size_t)c->bq * d * sizeof(float));
	s->m = malloc((size_t)c->bq * sizeof(float));
	s->l = malloc((size_t)c->bq * sizeof(float));
	return s->q && s->k && s->v && s->acc && s->m && s->l ? 0 : -ENOMEM;
}

static void scratch_free(struct blk_scratch *s)
{
	free(s->q);
	free(s->k);
	free(s->v);
	free(s->acc);
	free(s->m);
	free(s->l);
}

/* Rows @p n of @p d elements at @p src (row stride @p rs) as fp32. */
static void rows_f32(float *dst, const void *src, size_t off, int64_t rs,
		     int64_t n, int64_t d, uint32_t dt, float mul)
{
	for (int64_t r = 0; r < n; r++)
		for (int64_t x = 0; x < d; x++)
			dst[r * d + x] = mul * flyk_cpu_load(src, off +
							     (size_t)(r * rs + x),
							     dt);
}

static float dotf(const float *x, const float *y, int64_t d)
{
	float s[4] = { 0, 0, 0, 0 };

	for (int64_t k = 0; k < d; k += 4)
		for (int l = 0; l < 4; l++)
			s[l] += x[k + l] * y[k + l];
	return (s[0] + s[1]) + (s[2] + s[3]);
}

/* Row @p r of the block against keys [t0, t1) of the tile starting at
 * @p t0 (scores in @p p):
 * the online-softmax update of its max, sum and accumulator. */
static void row_tile(const struct blk_ctx *c, struct blk_scratch *s,
		     int64_t r, int64_t t0, int64_t t1, float *p)
{
	int64_t d = c->g.d;
	float *acc = s->acc + r * d, mx = s->m[r], corr;

	for (int64_t j = t0; j < t1; j++) {
		p[j - t0] = dotf(s->q + r * d, s->k + (j - t0) * d, d);
		mx = p[j - t0] > mx ? p[j - t0] : mx;
	}
	corr = expf(s->m[r] - mx); /* 0 while the row had seen nothing */
	s->l[r] *= corr;
	for (int64_t x = 0; x < d; x++)
		acc[x] *= corr;
	for (int64_t j = t0; j < t1; j++) {
		float e = expf(p[j - t0] - mx);
		const float *vr = s->v + (j - t0) * d;

		s->l[r] += e;
		for (int64_t x = 0; x < d; x++)
			acc[x] += e * vr[x];
	}
	s->m[r] = mx;
}

/* Write the block's rows [i0, i0 + n): O = acc / l, lse = m + log l. */
static void block_store(const struct blk_ctx *c, struct blk_scratch *s,
			int64_t b, int64_t h, int64_t i0, int64_t n)
{
	const struct attn_geom *g = &c->g;
	uint32_t dt = c->p->dtype;

	for (int64_t r = 0; r < n; r++) {
		size_t o0 = (size_t)(b * g->os[0] + (i0 + r) * g->os[1] +
				     h * g->os[2]);
		float l = s->l[r], inv = l > 0.f ? 1.f / l : 0.f;

		for (int64_t x = 0; x < g->d; x++)
			flyk_cpu_store(c->a->o, o0 + (size_t)x, dt,
				       s->acc[r * g->d + x] * inv);
		if (c->a->lse)
			c->a->lse[(b * g->hq + h) * g->sq + i0 + r] =
				l > 0.f ? s->m[r] + logf(l) : -INFINITY;
	}
}

/* Unit @p u: (batch, head, query block) = (b, h, qb), u = (b * hq + h)
 * * nqb + qb. */
static void block_run(const struct blk_ctx *c, struct blk_scratch *s,
		      int64_t u, float *p)
{
	const struct attn_geom *g = &c->g;
	uint32_t dt = c->p->dtype;
	int64_t nqb = (g->sq + c->bq - 1) / c->bq, qb = u % nqb;
	int64_t h = (u / nqb) % g->hq, b = u / (nqb * g->hq);
	int64_t hk = h / (g->hq / g->hkv), i0 = qb * c->bq;
	int64_t n = i0 + c->bq < g->sq ? c->bq : g->sq - i0;
	int64_t kend = visible(g, i0 + n - 1); /* the block's last row */

	rows_f32(s->q, c->a->q, (size_t)(b * g->qs[0] + i0 * g->qs[1] +
					 h * g->qs[2]),
		 g->qs[1], n, g->d, dt, g->scale);
	for (int64_t r = 0; r < n; r++) {
		s->m[r] = -INFINITY;
		s->l[r] = 0.f;
	}
	for (int64_t x = 0; x < n * g->d; x++)
		s->acc[x] = 0.f;
	for (int64_t t0 = 0; t0 < kend; t0 += c->bkv) {
		int64_t t1 = t0 + c->bkv < kend ? t0 + c->bkv : kend;

		rows_f32(s->k, c->a->k, (size_t)(b * g->ks[0] + t0 * g->ks[1] +
						 hk * g->ks[2]),
			 g->ks[1], t1 - t0, g->d, dt, 1.f);
		rows_f32(s->v, c->a->v, (size_t)(b * g->vs[0] + t0 * g->vs[1] +
						 hk * g->vs[2]),
			 g->vs[1], t1 - t0, g->d, dt, 1.f);
		for (int64_t r = 0; r < n; r++) {
			int64_t hi = visible(g, i0 + r);

			if (hi > t0)
				row_tile(c, s, r, t0, hi < t1 ? hi : t1, p);
		}
	}
	block_store(c, s, b, h, i0, n);
}

static void blocked_work(void *arg, int tid, int nthreads)
{
	struct blk_ctx *c = arg;
	struct blk_scratch s;
	int64_t nqb = (c->g.sq + c->bq - 1) / c->bq;
	int64_t units = c->g.b * c->g.hq * nqb;
	float *p = malloc((size_t)c->bkv * sizeof(float));

	if (scratch_new(c, &s) < 0 || !p) {
		__atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
		goto out;
	}
	/* interleaved units: causal blocks grow with the query index */
	for (int64_t u = tid; u < units; u += nthreads)
		block_run(c, &s, u, p);
out:
	scratch_free(&s);
	free(p);
}

static int blocked_feasible(const struct flyk_device *dev,
			    const struct fly_problem *p, const int64_t *params)
{
	int64_t sq, skv, bq = params[0], bkv = params[1];

	if (attn_problem_ok(p) < 0 || bq < 1 || bkv < 1)
		return -EINVAL;
	sq = p->dims[1];
	skv = p->dims[2];
	/* a 4x smaller block or tile would already cover everything */
	if ((bq > 16 && bq / 4 >= sq) || (bkv > 64 && bkv / 4 >= skv))
		return -EINVAL;
	return flyk_cpu_threads_ok(dev, params[2],
				   p->dims[0] * p->dims[3] *
					   ((sq + bq - 1) / bq));
}

static int blocked_launch(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *params,
			  const union flyk_args *args, void *stream)
{
	struct blk_ctx c = { p, &args->attention, { 0 }, params[0], params[1],
			     0 };

	(void)dev;
	(void)stream;
	if (attn_problem_ok(p) < 0 || params[0] < 1 || params[1] < 1 ||
	    params[2] < 1)
		return -EINVAL;
	geom_of(p, &args->attention, &c.g);
	flyk_cpu_parallel((int)params[2], blocked_work, &c);
	return c.failed ? -ENOMEM : 0;
}

const struct flyk_variant flyk_cpu_attention_variants[] = {
	{
		.name = "attn_ref",
		.op = FLY_OP_ATTENTION,
		.dtypes = ATTN_DTYPES,
		.flags = FLY_F_CAUSAL,
		.is_reference = 1,
		.nparams = 0,
		.feasible = ref_feasible,
		.launch = ref_launch,
	},
	{
		.name = "attn_blocked",
		.op = FLY_OP_ATTENTION,
		.dtypes = ATTN_DTYPES,
		.flags = FLY_F_CAUSAL,
		.nparams = 3,
		.params = {
			{ "block_q", 2, bq_vals },
			{ "block_kv", 2, bkv_vals },
			{ "threads", 3, thr_vals },
		},
		.feasible = blocked_feasible,
		.launch = blocked_launch,
	},
};
const size_t flyk_cpu_attention_nvariants =
	sizeof(flyk_cpu_attention_variants) /
	sizeof(flyk_cpu_attention_variants[0]);
