/*
 * rmsnorm.c -- CPU RMSNorm variants: y = x / sqrt(mean(x^2) + eps) * w,
 * with FLY_F_RESIDUAL h = x + r (rounded to the dtype, written back to r)
 * normalised instead of x.  fp32, bf16 and fp16 in and out, fp32 math.
 *
 * Variants: rms_ref (plain, double accumulation: the reference), rms_vec
 * (vec independent accumulators per inner step, rows in chunks spread over
 * threads), rms_twopass (sum-of-squares pass over a chunk, then a scale
 * pass).  Owns: nothing across calls.  Thread: launches are reentrant.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "cpu_int.h"

#define RMS_DTYPES ((1u << FLY_DT_FP32) | (1u << FLY_DT_BF16) | \
		    (1u << FLY_DT_FP16))

static const int64_t vec_vals[] = { 1, 4, 8, 16 };
static const int64_t rpc_vals[] = { 1, 4, 16, 64 };
static const int64_t thr_vals[] = { 1, 2, 4 };

struct rms_ctx {
	const struct fly_problem *p;
	const struct flyk_rmsnorm_args *a;
	int64_t vec;
	int64_t rpc;
	int twopass;
	int failed;      /* set by a thread that could not allocate */
};

/* Common checks: op, dtype, dims. */
static int rms_problem_ok(const struct fly_problem *p)
{
	if (p->op != FLY_OP_RMSNORM || !(RMS_DTYPES & (1u << p->dtype)))
		return -EINVAL;
	if (p->dims[0] < 1 || p->dims[1] < 1)
		return -EINVAL;
	if (p->flags & ~FLY_F_RESIDUAL)
		return -EINVAL;
	return 0;
}

/* A chunk of @p rpc rows is sensible when a 4x smaller one would not
 * already cover all rows. */
static int rpc_ok(int64_t rpc, int64_t m)
{
	return rpc == 1 || rpc / 4 < m;
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	return rms_problem_ok(p);
}

static int vec_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	int64_t m = p->dims[0], n = p->dims[1];
	int64_t vec = params[0], rpc = params[1];

	if (rms_problem_ok(p) < 0 || rpc < 1 || vec < 1 || vec > 16)
		return -EINVAL;
	if (vec > 1 && vec / 2 >= n)
		return -EINVAL;
	if (!rpc_ok(rpc, m))
		return -EINVAL;
	return flyk_cpu_threads_ok(dev, params[2], (m + rpc - 1) / rpc);
}

static int twopass_feasible(const struct flyk_device *dev,
			    const struct fly_problem *p, const int64_t *params)
{
	int64_t m = p->dims[0], rpc = params[0];

	if (rms_problem_ok(p) < 0 || rpc < 1 || !rpc_ok(rpc, m))
		return -EINVAL;
	return flyk_cpu_threads_ok(dev, params[1], (m + rpc - 1) / rpc);
}

/* h = round(x + r) into @p h and back into r; or h = x. */
static void row_input(const struct rms_ctx *c, int64_t i, float *h)
{
	const struct flyk_rmsnorm_args *a = c->a;
	uint32_t dt = c->p->dtype;
	int64_t n = c->p->dims[1];
	size_t off = (size_t)(i * n);

	if (c->p->flags & FLY_F_RESIDUAL) {
		for (int64_t j = 0; j < n; j++) {
			float v = flyk_cpu_load(a->x, off + j, dt) +
				  flyk_cpu_load(a->residual, off + j, dt);
			flyk_cpu_store(a->residual, off + j, dt, v);
			h[j] = flyk_cpu_round(v, dt);
		}
		return;
	}
	flyk_cpu_to_f32(h, (const char *)a->x + off * flyk_cpu_dtsize(dt),
			(size_t)n, dt);
}

static inline __attribute__((always_inline)) float
sumsq_lanes(const float *h, int64_t n, const int lanes)
{
	float acc[16] = { 0 };
	float s = 0.0f;
	int64_t j = 0;

	for (; j + lanes <= n; j += lanes)
		for (int l = 0; l < lanes; l++)
			acc[l] += h[j + l] * h[j + l];
	for (; j < n; j++)
		s += h[j] * h[j];
	for (int l = 0; l < lanes; l++)
		s += acc[l];
	return s;
}

static float sumsq(const float *h, int64_t n, int64_t vec)
{
	switch (vec) {
	case 4:
		return sumsq_lanes(h, n, 4);
	case 8:
		return sumsq_lanes(h, n, 8);
	case 16:
		return sumsq_lanes(h, n, 16);
	default:
		return sumsq_lanes(h, n, 1);
	}
}

static void row_output(const struct rms_ctx *c, int64_t i, const float *h,
		       const float *w, float inv)
{
	uint32_t dt = c->p->dtype;
	int64_t n = c->p->dims[1];
	size_t off = (size_t)(i * n);

	if (dt == FLY_DT_FP32) {
		float *y = (float *)c->a->y + off;

		for (int64_t j = 0; j < n; j++)
			y[j] = h[j] * inv * w[j];
		return;
	}
	for (int64_t j = 0; j < n; j++)
		flyk_cpu_store(c->a->y, off + j, dt, h[j] * inv * w[j]);
}

/* One chunk of rows [r0, r1): vec variant. */
static void chunk_vec(const struct rms_ctx *c, int64_t r0, int64_t r1,
		      float *h, const float *w)
{
	int64_t n = c->p->dims[1];

	for (int64_t i = r0; i < r1; i++) {
		row_input(c, i, h);
		float ss = sumsq(h, n, c->vec);
		float inv = 1.0f / sqrtf(ss / (float)n + c->a->eps);
		row_output(c, i, h, w, inv);
	}
}

/* One chunk of rows [r0, r1): two passes (sums of squares, then scale),
 * the second re-reading h from residual (written back) or x. */
static void chunk_twopass(const struct rms_ctx *c, int64_t r0, int64_t r1,
			  float *h, const float *w, float *inv)
{
	int64_t n = c->p->dims[1];
	uint32_t dt = c->p->dtype;
	const void *src = (c->p->flags & FLY_F_RESIDUAL) ? c->a->residual
							 : c->a->x;

	for (int64_t i = r0; i < r1; i++) {
		row_input(c, i, h);
		float ss = sumsq(h, n, 4);
		inv[i - r0] = 1.0f / sqrtf(ss / (float)n + c->a->eps);
	}
	for (int64_t i = r0; i < r1; i++) {
		flyk_cpu_to_f32(h, (const char *)src +
				(size_t)(i * n) * flyk_cpu_dtsize(dt),
				(size_t)n, dt);
		row_output(c, i, h, w, inv[i - r0]);
	}
}

static void rms_work(void *arg, int tid, int nthreads)
{
	struct rms_ctx *c = arg;
	int64_t m = c->p->dims[0], n = c->p->dims[1];
	int64_t nchunks = (m + c->rpc - 1) / c->rpc, q0, q1;
	float *h = malloc((size_t)n * sizeof(float));
	float *w = malloc((size_t)n * sizeof(float));
	float *inv = malloc((size_t)c->rpc * sizeof(float));

	if (!h || !w || !inv) {
		__atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
		goto out;
	}
	flyk_cpu_to_f32(w, c->a->w, (size_t)n, c->p->dtype);
	flyk_cpu_split(nchunks, nthreads, tid, 1, &q0, &q1);
	for (int64_t q = q0; q < q1; q++) {
		int64_t r0 = q * c->rpc;
		int64_t r1 = r0 + c->rpc < m ? r0 + c->rpc : m;

		if (c->twopass)
			chunk_twopass(c, r0, r1, h, w, inv);
		else
			chunk_vec(c, r0, r1, h, w);
	}
out:
	free(h);
	free(w);
	free(inv);
}

static int vec_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	struct rms_ctx c = { p, &args->rmsnorm, params[0], params[1], 0, 0 };

	flyk_cpu_parallel((int)params[2], rms_work, &c);
	return c.failed ? -ENOMEM : 0;
}

static int twopass_launch(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *params,
			  const union flyk_args *args, void *stream)
{
	struct rms_ctx c = { p, &args->rmsnorm, 4, params[0], 1, 0 };

	flyk_cpu_parallel((int)params[1], rms_work, &c);
	return c.failed ? -ENOMEM : 0;
}

/* The reference: element by element, double accumulation. */
static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	const struct flyk_rmsnorm_args *a = &args->rmsnorm;
	int64_t m = p->dims[0], n = p->dims[1];
	uint32_t dt = p->dtype;
	int res = (p->flags & FLY_F_RESIDUAL) != 0;

	for (int64_t i = 0; i < m; i++) {
		size_t off = (size_t)(i * n);
		double ss = 0.0, inv;

		for (int64_t j = 0; j < n; j++) {
			float v = flyk_cpu_load(a->x, off + j, dt);

			if (res) {
				v += flyk_cpu_load(a->residual, off + j, dt);
				flyk_cpu_store(a->residual, off + j, dt, v);
				v = flyk_cpu_round(v, dt);
			}
			ss += (double)v * v;
		}
		inv = 1.0 / sqrt(ss / (double)n + (double)a->eps);
		for (int64_t j = 0; j < n; j++) {
			const void *src = res ? a->residual : a->x;
			double v = flyk_cpu_load(src, off + j, dt);

			v = v * inv * flyk_cpu_load(a->w, (size_t)j, dt);
			flyk_cpu_store(a->y, off + j, dt, (float)v);
		}
	}
	return 0;
}

const struct flyk_variant flyk_cpu_rmsnorm_variants[] = {
	{
		.name = "rms_ref",
		.op = FLY_OP_RMSNORM,
		.dtypes = RMS_DTYPES,
		.flags = FLY_F_RESIDUAL,
		.is_reference = 1,
		.nparams = 0,
		.feasible = ref_feasible,
		.launch = ref_launch,
	},
	{
		.name = "rms_vec",
		.op = FLY_OP_RMSNORM,
		.dtypes = RMS_DTYPES,
		.flags = FLY_F_RESIDUAL,
		.nparams = 3,
		.params = {
			{ "vec", 4, vec_vals },
			{ "rows_per_chunk", 4, rpc_vals },
			{ "threads", 3, thr_vals },
		},
		.feasible = vec_feasible,
		.launch = vec_launch,
	},
	{
		.name = "rms_twopass",
		.op = FLY_OP_RMSNORM,
		.dtypes = RMS_DTYPES,
		.flags = FLY_F_RESIDUAL,
		.nparams = 2,
		.params = {
			{ "rows_per_chunk", 4, rpc_vals },
			{ "threads", 3, thr_vals },
		},
		.feasible = twopass_feasible,
		.launch = twopass_launch,
	},
};
const size_t flyk_cpu_rmsnorm_nvariants =
	sizeof(flyk_cpu_rmsnorm_variants) / sizeof(flyk_cpu_rmsnorm_variants[0]);
