/*
 * scaled_gemm.c -- CPU scaled low-precision GEMM, NT:
 *   C[m, n] = sum_k A[m, k] B[n, k] (with the format's scales) + bias[n]
 * fp32 (reference: double) accumulation, bf16 C and bias.  Formats (the
 * problem's dtype, see flyk.h's flyk_scaled_gemm_args):
 *   fp8_e4m3, fp8_e4m3fnuz  e4m3 bytes, scale_a and scale_b one fp32 each
 *   mxfp8                   e4m3fn bytes, one e8m0 scale per 32 k (a row's
 *                           scales [K/32] contiguous)
 *   mxfp4                   e2m1, two per byte, the low nibble the even k;
 *                           e8m0 scales as mxfp8
 * MX formats need K % 32 == 0 (-EINVAL otherwise).  An e8m0 scale of
 * 0xFF is NaN and makes its block's products NaN (OCP MX v1.0).
 *
 * Variants: sg_ref (element by element, double sums per 32-k block times
 * the block's scales: the reference), sg_blocked (both operands decoded to
 * fp32 once with their block scales folded in -- exact while every scaled
 * value is an fp32 number, |v| < 2^128 -- then gemm.c's blocked fp32 GEMM,
 * the per-tensor scales and the bias in the epilogue).
 * Owns: nothing across calls.  Thread: launches are reentrant.
 */
#include <errno.h>
#include <stdlib.h>

#include "cpu_int.h"

#define SG_DTYPES                                                      \
	((1u << FLY_DT_FP8_E4M3) | (1u << FLY_DT_FP8_E4M3FNUZ) |       \
	 (1u << FLY_DT_MXFP8) | (1u << FLY_DT_MXFP4))
#define SG_BLOCK 32

static const int64_t mc_vals[] = { 32, 64, 128 };
static const int64_t nc_vals[] = { 64, 128, 256 };
static const int64_t kc_vals[] = { 64, 128, 256 };
static const int64_t tile_vals[] = { 0, 1, 2 };
static const int64_t thr_vals[] = { 1, 2, 4 };

static int is_mx(uint32_t dt)
{
	return dt == FLY_DT_MXFP8 || dt == FLY_DT_MXFP4;
}

static int sg_problem_ok(const struct fly_problem *p)
{
	if (p->op != FLY_OP_SCALED_GEMM || !(SG_DTYPES & (1u << p->dtype)))
		return -EINVAL;
	if (p->layout != FLY_LAYOUT_NT || (p->flags & ~FLY_F_BIAS))
		return -EINVAL;
	for (int i = 0; i < 3; i++)
		if (p->dims[i] < 1)
			return -EINVAL;
	if (is_mx(p->dtype) && p->dims[2] % SG_BLOCK)
		return -EINVAL;
	return 0;
}

float flyk_cpu_scaled_elem(uint32_t dtype, const void *x, const void *scale,
			   int64_t k, int64_t i, int64_t q)
{
	const uint8_t *b = x, *sc = scale;

	switch (dtype) {
	case FLY_DT_FP8_E4M3:
		return flyk_cpu_fp8_to_f32(b[i * k + q], 0);
	case FLY_DT_FP8_E4M3FNUZ:
		return flyk_cpu_fp8_to_f32(b[i * k + q], 1);
	case FLY_DT_MXFP8:
		return flyk_cpu_fp8_to_f32(b[i * k + q], 0) *
		       flyk_cpu_e8m0_to_f32(sc[i * (k / SG_BLOCK) + q / SG_BLOCK]);
	default: {
		uint8_t byte = b[(i * k + q) / 2];

		return flyk_cpu_e2m1_to_f32(q % 2 ? byte >> 4 : byte & 15u) *
		       flyk_cpu_e8m0_to_f32(sc[i * (k / SG_BLOCK) + q / SG_BLOCK]);
	}
	}
}

/* The per-tensor factor: scale_a * scale_b (1 for the MX formats, whose
 * scales are in the elements). */
static double tensor_scale(const struct fly_problem *p,
			   const struct flyk_scaled_gemm_args *g)
{
	if (is_mx(p->dtype))
		return 1.0;
	return (double)*(const float *)g->scale_a * *(const float *)g->scale_b;
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	return sg_problem_ok(p);
}

/* The reference: double sums of the exactly decoded products. */
static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	const struct flyk_scaled_gemm_args *g = &args->scaled_gemm;
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	double ts = tensor_scale(p, g);

	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double acc = 0.0;

			for (int64_t q = 0; q < k; q++)
				acc += (double)flyk_cpu_scaled_elem(
					       p->dtype, g->a, g->scale_a, k, i, q) *
				       flyk_cpu_scaled_elem(p->dtype, g->b,
							    g->scale_b, k, j, q);
			acc *= ts;
			if (g->bias)
				acc += flyk_cpu_load(g->bias, (size_t)j,
						     FLY_DT_BF16);
			flyk_cpu_store(g->c, (size_t)(i * n + j), FLY_DT_BF16,
				       (float)acc);
		}
	return 0;
}

static int blocked_feasible(const struct flyk_device *dev,
			    const struct fly_problem *p, const int64_t *params)
{
	if (sg_problem_ok(p) < 0)
		return -EINVAL;
	return flyk_cpu_gemm_blocked_point_ok(dev, p, params);
}

/* Rows [0, rows) of an operand decoded to fp32, block scales folded. */
static float *decode(const struct fly_problem *p, const void *x,
		     const void *scale, int64_t rows)
{
	int64_t k = p->dims[2];
	float *f = malloc((size_t)(rows * k) * sizeof(float));

	if (!f)
		return NULL;
	for (int64_t i = 0; i < rows; i++)
		for (int64_t q = 0; q < k; q++)
			f[i * k + q] = flyk_cpu_scaled_elem(p->dtype, x, scale,
							    k, i, q);
	return f;
}

static int blocked_launch(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *params,
			  const union flyk_args *args, void *stream)
{
	const struct flyk_scaled_gemm_args *g = &args->scaled_gemm;
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	struct flyk_cpu_gemm_shape s = { m, n, k, FLY_DT_FP32, FLY_LAYOUT_NT,
					 (float)tensor_scale(p, g), NULL };
	float *a = decode(p, g->a, g->scale_a, m);
	float *b = decode(p, g->b, g->scale_b, n);
	float *c = malloc((size_t)(m * n) * sizeof(float));
	int rc = -ENOMEM;

	if (!a || !b || !c)
		goto out;
	rc = flyk_cpu_gemm_blocked_run(&s, a, b, c, params[0], params[1],
				       params[2], params[3], (int)params[4]);
	if (rc < 0)
		goto out;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			float v = c[i * n + j];

			if (g->bias)
				v += flyk_cpu_load(g->bias, (size_t)j,
						   FLY_DT_BF16);
			flyk_cpu_store(g->c, (size_t)(i * n + j), FLY_DT_BF16,
				       v);
		}
out:
	free(a);
	free(b);
	free(c);
	return rc;
}

const struct flyk_variant flyk_cpu_scaled_gemm_variants[] = {
	{
		.name = "sg_ref",
		.op = FLY_OP_SCALED_GEMM,
		.dtypes = SG_DTYPES,
		.flags = FLY_F_BIAS,
		.is_reference = 1,
		.nparams = 0,
		.feasible = ref_feasible,
		.launch = ref_launch,
	},
	{
		.name = "sg_blocked",
		.op = FLY_OP_SCALED_GEMM,
		.dtypes = SG_DTYPES,
		.flags = FLY_F_BIAS,
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
};
const size_t flyk_cpu_scaled_gemm_nvariants =
	sizeof(flyk_cpu_scaled_gemm_variants) /
	sizeof(flyk_cpu_scaled_gemm_variants[0]);
