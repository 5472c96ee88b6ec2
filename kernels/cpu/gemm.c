/*
 * gemm.c -- CPU GEMM variants: C[M,N] = alpha * A[M,K] . B + bias, with B
 * [N,K] (NT) or [K,N] (NN); fp32 or bf16 elements, fp32 accumulation, C of
 * the input dtype.  alpha applies with FLY_F_SCALE, bias with FLY_F_BIAS.
 *
 * Variants: gemm_ref (triple loop, double accumulation: the reference),
 * gemm_blocked (Goto-style: packed fp32 panels of A [mc x kc] and B
 * [kc x nc], an mr x nr register micro-tile, threads over row ranges),
 * gemm_naive_t (contiguous dot products against B^T, threads over rows).
 * flyk_cpu_gemm_blocked_run() is shared with grouped_gemm.c.
 * Owns: nothing across calls (panels are allocated per launch).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_int.h"

#define GEMM_DTYPES ((1u << FLY_DT_FP32) | (1u << FLY_DT_BF16))

static const int64_t mc_vals[] = { 32, 64, 128 };
static const int64_t nc_vals[] = { 64, 128, 256 };
static const int64_t kc_vals[] = { 64, 128, 256 };
static const int64_t tile_vals[] = { 0, 1, 2 };
static const int64_t thr_vals[] = { 1, 2, 4 };
static const int tile_mr[] = { 4, 4, 8 };
static const int tile_nr[] = { 4, 8, 8 };

/* ---------------------------------------------------------- micro-kernels */

/* acc[MR][NR/4] of 4-float vectors (GCC vector extensions, SSE on
 * x86-64), loops fully unrolled so every accumulator stays in a register
 * (plain -O2 neither vectorises the scalar form nor unrolls the loops). */
typedef float v4f __attribute__((vector_size(16)));

#define GEMM_MICRO(MR, NR)                                                   \
	static void micro_##MR##x##NR(int64_t kb, const float *ap,           \
				      const float *bp, float *cp,            \
				      int64_t ldc, int64_t mre, int64_t nre, \
				      int first)                             \
	{                                                                    \
		v4f acc[MR][NR / 4];                                         \
		float out[MR][NR];                                           \
		memset(acc, 0, sizeof(acc));                                 \
		for (int64_t p = 0; p < kb; p++) {                           \
			const float *a = ap + p * MR;                        \
			v4f bv[NR / 4];                                      \
			memcpy(bv, bp + p * NR, sizeof(bv));                 \
			_Pragma("GCC unroll 8")                              \
			for (int i = 0; i < MR; i++)                         \
				_Pragma("GCC unroll 2")                      \
				for (int j = 0; j < NR / 4; j++)             \
					acc[i][j] += a[i] * bv[j];           \
		}                                                            \
		memcpy(out, acc, sizeof(out));                               \
		for (int64_t i = 0; i < mre; i++)                            \
			for (int64_t j = 0; j < nre; j++)                    \
				cp[i * ldc + j] = first ? out[i][j] :        \
					cp[i * ldc + j] + out[i][j];         \
	}
GEMM_MICRO(4, 4)
GEMM_MICRO(4, 8)
GEMM_MICRO(8, 8)

typedef void (*micro_fn)(int64_t, const float *, const float *, float *,
			 int64_t, int64_t, int64_t, int);
static const micro_fn micro_fns[] = { micro_4x4, micro_4x8, micro_8x8 };

/* ---------------------------------------------------------- blocked core */

struct blk_ctx {
	const struct flyk_cpu_gemm_shape *s;
	const void *a;
	const void *b;
	void *c;
	float *cf;        /* fp32 accumulator [M,N]: c itself for fp32 */
	int64_t mc, nc, kc;
	int tile;
	int failed;
};

static inline float load_b(const struct blk_ctx *x, int64_t kk, int64_t nn)
{
	const struct flyk_cpu_gemm_shape *s = x->s;
	size_t i = s->layout == FLY_LAYOUT_NN ? (size_t)(kk * s->n + nn)
					      : (size_t)(nn * s->k + kk);

	return flyk_cpu_load(x->b, i, s->dtype);
}

/* B[pc..pc+kb, jc..jc+nb] into nr-wide micro-panels, zero padded. */
static void pack_b(const struct blk_ctx *x, float *dst, int64_t jc,
		   int64_t nb, int64_t pc, int64_t kb)
{
	int nr = tile_nr[x->tile];

	for (int64_t jr = 0; jr < nb; jr += nr) {
		float *d = dst + jr * kb;

		for (int64_t p = 0; p < kb; p++)
			for (int j = 0; j < nr; j++)
				d[p * nr + j] = jr + j < nb ?
					load_b(x, pc + p, jc + jr + j) : 0.0f;
	}
}

/* A[ic..ic+mb, pc..pc+kb] into mr-tall micro-panels, zero padded. */
static void pack_a(const struct blk_ctx *x, float *dst, int64_t ic,
		   int64_t mb, int64_t pc, int64_t kb)
{
	int mr = tile_mr[x->tile];
	int64_t k = x->s->k;
	uint32_t dt = x->s->dtype;

	for (int64_t ir = 0; ir < mb; ir += mr) {
		float *d = dst + ir * kb;

		for (int i = 0; i < mr; i++) {
			size_t row = (size_t)((ic + ir + i) * k + pc);

			for (int64_t p = 0; p < kb; p++)
				d[p * mr + i] = ir + i < mb ?
					flyk_cpu_load(x->a, row + p, dt) : 0.0f;
		}
	}
}

/* One packed block: every micro-tile of rows [ic, ic+mb) x cols [jc, jc+nb). */
static void block_run(const struct blk_ctx *x, const float *pa,
		      const float *pb, int64_t ic, int64_t mb, int64_t jc,
		      int64_t nb, int64_t kb, int first)
{
	int mr = tile_mr[x->tile], nr = tile_nr[x->tile];
	int64_t n = x->s->n;
	micro_fn fn = micro_fns[x->tile];

	for (int64_t jr = 0; jr < nb; jr += nr) {
		int64_t nre = nb - jr < nr ? nb - jr : nr;

		for (int64_t ir = 0; ir < mb; ir += mr) {
			int64_t mre = mb - ir < mr ? mb - ir : mr;

			fn(kb, pa + ir * kb, pb + jr * kb,
			   x->cf + (ic + ir) * n + jc + jr, n, mre, nre, first);
		}
	}
}

/* c = alpha * cf + bias over rows [m0, m1), converted to the dtype. */
static void epilogue(const struct blk_ctx *x, int64_t m0, int64_t m1)
{
	const struct flyk_cpu_gemm_shape *s = x->s;

	for (int64_t i = m0; i < m1; i++)
		for (int64_t j = 0; j < s->n; j++) {
			size_t o = (size_t)(i * s->n + j);
			float v = s->alpha * x->cf[o];

			if (s->bias)
				v += flyk_cpu_load(s->bias, (size_t)j, s->dtype);
			flyk_cpu_store(x->c, o, s->dtype, v);
		}
}

static void blk_work(void *arg, int tid, int nthreads)
{
	struct blk_ctx *x = arg;
	const struct flyk_cpu_gemm_shape *s = x->s;
	int64_t m0, m1;
	float *pa = NULL, *pb = NULL;

	flyk_cpu_split(s->m, nthreads, tid, tile_mr[x->tile], &m0, &m1);
	if (m0 >= m1)
		return;
	pa = malloc((size_t)(x->mc * x->kc) * sizeof(float));
	pb = malloc((size_t)(x->nc * x->kc) * sizeof(float));
	if (!pa || !pb) {
		__atomic_store_n(&x->failed, 1, __ATOMIC_RELAXED);
		goto out;
	}
	for (int64_t jc = 0; jc < s->n; jc += x->nc) {
		int64_t nb = s->n - jc < x->nc ? s->n - jc : x->nc;

		for (int64_t pc = 0; pc < s->k; pc += x->kc) {
			int64_t kb = s->k - pc < x->kc ? s->k - pc : x->kc;

			pack_b(x, pb, jc, nb, pc, kb);
			for (int64_t ic = m0; ic < m1; ic += x->mc) {
				int64_t mb = m1 - ic < x->mc ? m1 - ic : x->mc;

				pack_a(x, pa, ic, mb, pc, kb);
				block_run(x, pa, pb, ic, mb, jc, nb, kb,
					  pc == 0);
			}
		}
	}
	epilogue(x, m0, m1);
out:
	free(pa);
	free(pb);
}

int flyk_cpu_gemm_blocked_run(const struct flyk_cpu_gemm_shape *s,
			      const void *a, const void *b, void *c,
			      int64_t mc, int64_t nc, int64_t kc, int64_t tile,
			      int threads)
{
	struct blk_ctx x = { s, a, b, c, NULL, mc, nc, kc, (int)tile, 0 };
	float *tmp = NULL;

	if (tile < 0 || tile > 2 || mc < 8 || nc < 8 || kc < 1 ||
	    mc % 8 || nc % 8)
		return -EINVAL;
	if (s->m == 0 || s->n == 0)
		return 0;
	if (s->dtype == FLY_DT_FP32) {
		x.cf = c;
	} else {
		tmp = malloc((size_t)(s->m * s->n) * sizeof(float));
		if (!tmp)
			return -ENOMEM;
		x.cf = tmp;
	}
	flyk_cpu_parallel(threads, blk_work, &x);
	free(tmp);
	return x.failed ? -ENOMEM : 0;
}

int flyk_cpu_gemm_blocks_ok(int64_t m, int64_t n, int64_t k, int64_t mc,
			    int64_t nc, int64_t kc, int64_t tile)
{
	if (tile < 0 || tile > 2)
		return 0;
	/* Pairings that make sense together keep the space small. */
	if (nc != mc && nc != 2 * mc)
		return 0;
	if (kc != nc && 2 * kc != nc)
		return 0;
	if ((tile == 0 && mc > 64) || (tile == 2 && mc < 64))
		return 0;
	/* A block twice as large as the dim buys nothing over a smaller one. */
	if ((mc > 32 && mc / 2 >= m) || (nc > 64 && nc / 2 >= n) ||
	    (kc > 64 && kc / 2 >= k))
		return 0;
	return 1;
}

/* ---------------------------------------------------------- variants */

static int gemm_problem_ok(const struct fly_problem *p)
{
	if (p->op != FLY_OP_GEMM || !(GEMM_DTYPES & (1u << p->dtype)))
		return -EINVAL;
	if (p->layout != FLY_LAYOUT_NT && p->layout != FLY_LAYOUT_NN)
		return -EINVAL;
	if (p->flags & ~(FLY_F_BIAS | FLY_F_SCALE))
		return -EINVAL;
	if (p->dims[0] < 1 || p->dims[1] < 1 || p->dims[2] < 1)
		return -EINVAL;
	return 0;
}

static void shape_of(const struct fly_problem *p, const union flyk_args *args,
		     struct flyk_cpu_gemm_shape *s)
{
	s->m = p->dims[0];
	s->n = p->dims[1];
	s->k = p->dims[2];
	s->dtype = p->dtype;
	s->layout = p->layout;
	s->alpha = (p->flags & FLY_F_SCALE) ? args->gemm.alpha : 1.0f;
	s->bias = (p->flags & FLY_F_BIAS) ? args->gemm.bias : NULL;
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	return gemm_problem_ok(p);
}

int flyk_cpu_gemm_blocked_point_ok(const struct flyk_device *dev,
				   const struct fly_problem *p,
				   const int64_t *params)
{
	if (!flyk_cpu_gemm_blocks_ok(p->dims[0], p->dims[1], p->dims[2],
				     params[0], params[1], params[2],
				     params[3]))
		return -EINVAL;
	return flyk_cpu_threads_ok(dev, params[4], p->dims[0] / 4);
}

static int blocked_feasible(const struct flyk_device *dev,
			    const struct fly_problem *p, const int64_t *params)
{
	if (gemm_problem_ok(p) < 0)
		return -EINVAL;
	return flyk_cpu_gemm_blocked_point_ok(dev, p, params);
}

static int naive_feasible(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *params)
{
	if (gemm_problem_ok(p) < 0)
		return -EINVAL;
	return flyk_cpu_threads_ok(dev, params[0], p->dims[0] / 4);
}

static int blocked_launch(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *params,
			  const union flyk_args *args, void *stream)
{
	struct flyk_cpu_gemm_shape s;

	shape_of(p, args, &s);
	return flyk_cpu_gemm_blocked_run(&s, args->gemm.a, args->gemm.b,
					 args->gemm.c, params[0], params[1],
					 params[2], params[3], (int)params[4]);
}

/* The reference: triple loop, double accumulation. */
static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	struct flyk_cpu_gemm_shape s;
	const struct flyk_gemm_args *g = &args->gemm;

	shape_of(p, args, &s);
	for (int64_t i = 0; i < s.m; i++)
		for (int64_t j = 0; j < s.n; j++) {
			double acc = 0.0;

			for (int64_t q = 0; q < s.k; q++) {
				size_t bi = s.layout == FLY_LAYOUT_NN ?
					(size_t)(q * s.n + j) :
					(size_t)(j * s.k + q);
				size_t ai = (size_t)(i * s.k + q);

				acc += (double)flyk_cpu_load(g->a, ai, s.dtype) *
				       flyk_cpu_load(g->b, bi, s.dtype);
			}
			acc *= s.alpha;
			if (s.bias)
				acc += flyk_cpu_load(s.bias, (size_t)j, s.dtype);
			flyk_cpu_store(g->c, (size_t)(i * s.n + j), s.dtype,
				       (float)acc);
		}
	return 0;
}

struct naive_ctx {
	const struct flyk_cpu_gemm_shape *s;
	const float *a;   /* [M,K] fp32 */
	const float *bt;  /* [N,K] fp32 */
	void *c;
};

static float dot8(const float *x, const float *y, int64_t k)
{
	float acc[8] = { 0 }, s = 0.0f;
	int64_t q = 0;

	for (; q + 8 <= k; q += 8)
		for (int l = 0; l < 8; l++)
			acc[l] += x[q + l] * y[q + l];
	for (; q < k; q++)
		s += x[q] * y[q];
	for (int l = 0; l < 8; l++)
		s += acc[l];
	return s;
}

static void naive_work(void *arg, int tid, int nthreads)
{
	struct naive_ctx *x = arg;
	const struct flyk_cpu_gemm_shape *s = x->s;
	int64_t m0, m1;

	flyk_cpu_split(s->m, nthreads, tid, 1, &m0, &m1);
	for (int64_t i = m0; i < m1; i++)
		for (int64_t j = 0; j < s->n; j++) {
			float v = s->alpha * dot8(x->a + i * s->k,
						  x->bt + j * s->k, s->k);

			if (s->bias)
				v += flyk_cpu_load(s->bias, (size_t)j, s->dtype);
			flyk_cpu_store(x->c, (size_t)(i * s->n + j), s->dtype, v);
		}
}

static int naive_launch(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params,
			const union flyk_args *args, void *stream)
{
	struct flyk_cpu_gemm_shape s;
	struct naive_ctx x;
	float *a32 = NULL, *bt = NULL;
	int rc = -ENOMEM;

	shape_of(p, args, &s);
	x = (struct naive_ctx){ &s, args->gemm.a, args->gemm.b, args->gemm.c };
	if (s.dtype != FLY_DT_FP32) {
		a32 = malloc((size_t)(s.m * s.k) * sizeof(float));
		if (!a32)
			goto out;
		flyk_cpu_to_f32(a32, args->gemm.a, (size_t)(s.m * s.k), s.dtype);
		x.a = a32;
	}
	if (s.dtype != FLY_DT_FP32 || s.layout == FLY_LAYOUT_NN) {
		bt = malloc((size_t)(s.n * s.k) * sizeof(float));
		if (!bt)
			goto out;
		for (int64_t j = 0; j < s.n; j++)
			for (int64_t q = 0; q < s.k; q++) {
				size_t bi = s.layout == FLY_LAYOUT_NN ?
					(size_t)(q * s.n + j) :
					(size_t)(j * s.k + q);

				bt[j * s.k + q] = flyk_cpu_load(args->gemm.b,
								bi, s.dtype);
			}
		x.bt = bt;
	}
	flyk_cpu_parallel((int)params[0], naive_work, &x);
	rc = 0;
out:
	free(a32);
	free(bt);
	return rc;
}

const struct flyk_variant flyk_cpu_gemm_variants[] = {
	{
		.name = "gemm_ref",
		.op = FLY_OP_GEMM,
		.dtypes = GEMM_DTYPES,
		.flags = FLY_F_BIAS | FLY_F_SCALE,
		.is_reference = 1,
		.nparams = 0,
		.feasible = ref_feasible,
		.launch = ref_launch,
	},
	{
		.name = "gemm_blocked",
		.op = FLY_OP_GEMM,
		.dtypes = GEMM_DTYPES,
		.flags = FLY_F_BIAS | FLY_F_SCALE,
		.nparams = 5,
		.params = {
			{ "mc", 3, mc_vals },
			{ "nc", 3, nc_vals },
			{ "kc", 3, kc_vals },
			{ "tile", 3, tile_vals },
			{ "threads", 3, thr_vals },
		},
		.feasible = blocked_feasible,
		.launch = blocked_launch,
	},
	{
		.name = "gemm_naive_t",
		.op = FLY_OP_GEMM,
		.dtypes = GEMM_DTYPES,
		.flags = FLY_F_BIAS | FLY_F_SCALE,
		.nparams = 1,
		.params = { { "threads", 3, thr_vals } },
		.feasible = naive_feasible,
		.launch = naive_launch,
	},
};
const size_t flyk_cpu_gemm_nvariants =
	sizeof(flyk_cpu_gemm_variants) / sizeof(flyk_cpu_gemm_variants[0]);
