/*
 * grouped_gemm.c -- CPU grouped GEMM: for each group g, rows
 * [offsets[g], offsets[g+1]) of A [sum rows, K] times B[g]^T (B [G,N,K],
 * NT per group) into the same rows of C [sum rows, N]; fp32 or bf16, fp32
 * accumulation.  Empty groups are skipped.
 *
 * Variants: ggemm_ref (double accumulation, the reference), ggemm_blocked
 * (flyk_cpu_gemm_blocked_run() per group; params threads and tile).
 * Owns: nothing across calls.
 */
#include <errno.h>

#include "cpu_int.h"

#define GG_DTYPES ((1u << FLY_DT_FP32) | (1u << FLY_DT_BF16))

static const int64_t tile_vals[] = { 0, 1, 2 };
static const int64_t thr_vals[] = { 1, 2, 4 };

static int gg_problem_ok(const struct fly_problem *p)
{
	if (p->op != FLY_OP_GROUPED_GEMM || !(GG_DTYPES & (1u << p->dtype)))
		return -EINVAL;
	if (p->layout != FLY_LAYOUT_NT && p->layout != FLY_LAYOUT_NONE)
		return -EINVAL;
	if (p->flags)
		return -EINVAL;
	for (int i = 0; i < 4; i++)
		if (p->dims[i] < 1)
			return -EINVAL;
	return 0;
}

/* offsets[0] == 0, non-decreasing, offsets[G] == M. */
static int offsets_ok(const struct fly_problem *p, const int64_t *off)
{
	int64_t g = p->dims[0];

	if (!off || off[0] != 0 || off[g] != p->dims[1])
		return -EINVAL;
	for (int64_t i = 0; i < g; i++)
		if (off[i + 1] < off[i])
			return -EINVAL;
	return 0;
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	return gg_problem_ok(p);
}

static int blocked_feasible(const struct flyk_device *dev,
			    const struct fly_problem *p, const int64_t *params)
{
	if (gg_problem_ok(p) < 0 || params[1] < 0 || params[1] > 2)
		return -EINVAL;
	/* the 8-row tile needs rows per group on average to pay off */
	if (params[1] == 2 && p->dims[1] / p->dims[0] < 8)
		return -EINVAL;
	return flyk_cpu_threads_ok(dev, params[0], p->dims[1] / 4);
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	const struct flyk_grouped_gemm_args *a = &args->grouped_gemm;
	int64_t n = p->dims[2], k = p->dims[3];
	uint32_t dt = p->dtype;

	if (offsets_ok(p, a->offsets) < 0)
		return -EINVAL;
	for (int64_t g = 0; g < p->dims[0]; g++)
		for (int64_t i = a->offsets[g]; i < a->offsets[g + 1]; i++)
			for (int64_t j = 0; j < n; j++) {
				double acc = 0.0;

				size_t ai = (size_t)(i * k);
				size_t bi = (size_t)((g * n + j) * k);

				for (int64_t q = 0; q < k; q++)
					acc += (double)flyk_cpu_load(a->a, ai + q, dt) *
					       flyk_cpu_load(a->b, bi + q, dt);
				flyk_cpu_store(a->c, (size_t)(i * n + j), dt,
					       (float)acc);
			}
	return 0;
}

static int blocked_launch(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *params,
			  const union flyk_args *args, void *stream)
{
	const struct flyk_grouped_gemm_args *a = &args->grouped_gemm;
	int64_t n = p->dims[2], k = p->dims[3];
	size_t es = flyk_cpu_dtsize(p->dtype);
	struct flyk_cpu_gemm_shape s = { 0, n, k, p->dtype, FLY_LAYOUT_NT,
					 1.0f, NULL };

	if (offsets_ok(p, a->offsets) < 0)
		return -EINVAL;
	for (int64_t g = 0; g < p->dims[0]; g++) {
		int64_t r0 = a->offsets[g];
		int rc;

		s.m = a->offsets[g + 1] - r0;
		if (s.m == 0)
			continue;
		rc = flyk_cpu_gemm_blocked_run(
			&s, (const char *)a->a + (size_t)(r0 * k) * es,
			(const char *)a->b + (size_t)(g * n * k) * es,
			(char *)a->c + (size_t)(r0 * n) * es, 64, 128, 128,
			params[1], s.m >= 4 * params[0] ? (int)params[0] : 1);
		if (rc < 0)
			return rc;
	}
	return 0;
}

const struct flyk_variant flyk_cpu_grouped_gemm_variants[] = {
	{
		.name = "ggemm_ref",
		.op = FLY_OP_GROUPED_GEMM,
		.dtypes = GG_DTYPES,
		.flags = 0,
		.is_reference = 1,
		.nparams = 0,
		.feasible = ref_feasible,
		.launch = ref_launch,
	},
	{
		.name = "ggemm_blocked",
		.op = FLY_OP_GROUPED_GEMM,
		.dtypes = GG_DTYPES,
		.flags = 0,
		.nparams = 2,
		.params = {
			{ "threads", 3, thr_vals },
			{ "tile", 3, tile_vals },
		},
		.feasible = blocked_feasible,
		.launch = blocked_launch,
	},
};
const size_t flyk_cpu_grouped_gemm_nvariants =
	sizeof(flyk_cpu_grouped_gemm_variants) /
	sizeof(flyk_cpu_grouped_gemm_variants[0]);
