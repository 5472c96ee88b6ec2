/*
 * test_flyk.c -- kernels/flyk.c against a fake backend: variant lookup,
 * dtype/flag matching, the default's search order (threads largest first,
 * other parameters middle-out), its fallbacks (never test_*, reference
 * last), enumerate-driven variants and flyk_launch()'s checks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "flyk.h"

static int launches;
static int64_t last_params[FLY_PARAMS_MAX];

static const int64_t size_vals[] = { 10, 20, 30, 40 };
static const int64_t thr_vals[] = { 1, 2, 4 };
static const int64_t one_val[] = { 1 };

static int always(const struct flyk_device *dev, const struct fly_problem *p,
		  const int64_t *params)
{
	return 0;
}

/* Two fake cores, and size 30 never fits. */
static int a_feasible(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params)
{
	if (params[1] > 2)
		return -EINVAL;
	return params[0] == 30 ? -ENOSPC : 0;
}

static int enum_feasible(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *params)
{
	return params[0] == 8 ? 0 : -EINVAL;
}

static int enum_list(const struct flyk_device *dev,
		     const struct fly_problem *p,
		     int64_t (*out)[FLY_PARAMS_MAX], int max)
{
	memset(out, 0, sizeof(out[0]) * 2);
	out[0][0] = 7;
	out[1][0] = 8;
	return 2;
}

static int rec_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	launches++;
	memset(last_params, 0, sizeof(last_params));
	if (params)
		memcpy(last_params, params, sizeof(last_params));
	return params && params[0] == 20 ? -EIO : 0;
}

static const struct flyk_variant fake_variants[] = {
	{ .name = "f_ref", .op = FLY_OP_GEMM, .dtypes = 1u << FLY_DT_FP32,
	  .flags = FLY_F_BIAS, .is_reference = 1, .feasible = always,
	  .launch = rec_launch },
	{ .name = "f_a", .op = FLY_OP_GEMM, .dtypes = 1u << FLY_DT_FP32,
	  .flags = FLY_F_BIAS | FLY_F_SCALE, .nparams = 2,
	  .params = { { "size", 4, size_vals }, { "threads", 3, thr_vals } },
	  .feasible = a_feasible, .launch = rec_launch },
	{ .name = "test_x", .op = FLY_OP_TOPK, .dtypes = 1u << FLY_DT_FP32,
	  .nparams = 1, .params = { { "one", 1, one_val } },
	  .feasible = always, .launch = rec_launch },
	{ .name = "f_topk_ref", .op = FLY_OP_TOPK,
	  .dtypes = 1u << FLY_DT_FP32, .is_reference = 1, .feasible = always,
	  .launch = rec_launch },
	{ .name = "f_enum", .op = FLY_OP_RMSNORM,
	  .dtypes = 1u << FLY_DT_FP16, .nparams = 1,
	  .params = { { "algo", 0, NULL } }, .feasible = enum_feasible,
	  .enumerate = enum_list, .launch = rec_launch },
	/* same name as f_a but another op */
	{ .name = "f_a", .op = FLY_OP_RMSNORM, .dtypes = 1u << FLY_DT_FP32,
	  .feasible = always, .launch = rec_launch },
};

static const struct flyk_backend fake = {
	.name = "fake",
	.kind = FLYK_BACKEND_CPU,
	.variants = fake_variants,
	.nvariants = sizeof(fake_variants) / sizeof(fake_variants[0]),
};

static struct fly_problem gemm_p(uint32_t dt, uint32_t flags)
{
	struct fly_problem p = { FLY_OP_GEMM, dt, FLY_LAYOUT_NT, flags,
				 { 8, 8, 8 } };

	return p;
}

static void test_find(void **state)
{
	assert_ptr_equal(flyk_variant_find(&fake, FLY_OP_GEMM, "f_a"),
			 &fake_variants[1]);
	assert_ptr_equal(flyk_variant_find(&fake, FLY_OP_RMSNORM, "f_a"),
			 &fake_variants[5]);
	assert_null(flyk_variant_find(&fake, FLY_OP_TOPK, "f_a"));
	assert_null(flyk_variant_find(&fake, FLY_OP_GEMM, "f_"));
	assert_null(flyk_variant_find(&fake, FLY_OP_GEMM, NULL));
	assert_null(flyk_variant_find(NULL, FLY_OP_GEMM, "f_a"));
}

static void test_supports(void **state)
{
	struct fly_problem p = gemm_p(FLY_DT_FP32, FLY_F_BIAS | FLY_F_SCALE);

	assert_true(flyk_variant_supports(&fake_variants[1], &p));
	assert_false(flyk_variant_supports(&fake_variants[0], &p));
	p.flags = FLY_F_BIAS;
	assert_true(flyk_variant_supports(&fake_variants[0], &p));
	p.dtype = FLY_DT_BF16;
	assert_false(flyk_variant_supports(&fake_variants[1], &p));
	p.dtype = 40; /* out of the bitmask's range */
	assert_false(flyk_variant_supports(&fake_variants[1], &p));
	p = gemm_p(FLY_DT_FP32, 0);
	p.op = FLY_OP_TOPK;
	assert_false(flyk_variant_supports(&fake_variants[1], &p));
	assert_false(flyk_variant_supports(NULL, &p));
}

static void test_default_search_order(void **state)
{
	struct fly_problem p = gemm_p(FLY_DT_FP32, 0);
	struct fly_decision d;

	memset(&d, 0x5a, sizeof(d));
	assert_int_equal(flyk_default(&fake, NULL, &p, &d), 0);
	assert_string_equal(d.variant, "f_a");
	assert_int_equal(d.status, FLY_STATUS_DEFAULT);
	assert_int_equal(d.provisional, 0);
	assert_int_equal(d.nparams, 2);
	/* size: middle (30) infeasible, then 40; threads: 4 too many -> 2 */
	assert_int_equal(d.params[0], 40);
	assert_int_equal(d.params[1], 2);
	assert_int_equal(d.params[2], 0);
	assert_true(d.median_us == 0.0);
}

static void test_default_fallbacks(void **state)
{
	struct fly_problem t = { FLY_OP_TOPK, FLY_DT_FP32, 0, 0, { 1, 8, 2 } };
	struct fly_problem r = { FLY_OP_RMSNORM, FLY_DT_FP16, 0, 0, { 1, 8 } };
	struct fly_problem g = gemm_p(FLY_DT_BF16, 0);
	struct fly_decision d;

	/* the only non-reference topk variant is test-only: reference */
	assert_int_equal(flyk_default(&fake, NULL, &t, &d), 0);
	assert_string_equal(d.variant, "f_topk_ref");
	assert_int_equal(d.nparams, 0);
	/* enumerate: first enumerated point that is feasible */
	assert_int_equal(flyk_default(&fake, NULL, &r, &d), 0);
	assert_string_equal(d.variant, "f_enum");
	assert_int_equal(d.params[0], 8);
	/* nothing supports bf16 gemm */
	assert_int_equal(flyk_default(&fake, NULL, &g, &d), -EOPNOTSUPP);
	assert_int_equal(flyk_default(NULL, NULL, &g, &d), -EINVAL);
}

static void test_launch_checks(void **state)
{
	struct fly_problem p = gemm_p(FLY_DT_FP32, 0);
	struct fly_problem r = { FLY_OP_RMSNORM, FLY_DT_FP16, 0, 0, { 1, 8 } };
	union flyk_args args;
	struct fly_decision d;

	memset(&args, 0, sizeof(args));
	memset(&d, 0, sizeof(d));
	launches = 0;
	/* DEFAULT with no name: the default is launched */
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL), 0);
	assert_int_equal(launches, 1);
	assert_int_equal(last_params[0], 40);
	assert_int_equal(last_params[1], 2);
	/* PENDING with no name (no provisional answer yet): the default */
	d.status = FLY_STATUS_PENDING;
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL), 0);
	assert_int_equal(launches, 2);
	/* no name but TUNED: nothing to launch */
	d.status = FLY_STATUS_TUNED;
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL),
			 -ENOENT);
	snprintf(d.variant, sizeof(d.variant), "f_missing");
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL),
			 -ENOENT);
	snprintf(d.variant, sizeof(d.variant), "f_a");
	d.nparams = 1;
	d.params[0] = 10;
	d.params[1] = 1;
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL),
			 -EINVAL);
	d.nparams = 2;
	d.params[0] = 11; /* not in the space */
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL),
			 -EINVAL);
	d.params[0] = 30; /* in the space, infeasible (-ENOSPC) */
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL),
			 -EINVAL);
	d.params[0] = 10;
	d.params[1] = 4; /* infeasible (-EINVAL) */
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL),
			 -EINVAL);
	assert_int_equal(launches, 2);
	d.params[1] = 2;
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL), 0);
	assert_int_equal(launches, 3);
	assert_int_equal(last_params[0], 10);
	/* the same infeasible point, lent provisionally (PENDING, a
	 * neighbour's) or as a DEFAULT: the default runs instead */
	d.params[1] = 4;
	d.status = FLY_STATUS_PENDING;
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL), 0);
	assert_int_equal(launches, 4);
	assert_int_equal(last_params[0], 40);
	snprintf(d.variant, sizeof(d.variant), "f_missing");
	d.status = FLY_STATUS_DEFAULT;
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL), 0);
	assert_int_equal(launches, 5);
	snprintf(d.variant, sizeof(d.variant), "f_a");
	d.params[1] = 2;
	d.status = FLY_STATUS_TUNED;
	/* the launch's own error comes back */
	d.params[0] = 20;
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL), -EIO);
	/* a problem the variant does not support */
	d.params[0] = 10;
	p.flags = FLY_F_DETERMINISTIC;
	assert_int_equal(flyk_launch(&fake, NULL, &p, &d, &args, NULL),
			 -EINVAL);
	/* enumerate variants: no declared space, feasible() decides */
	snprintf(d.variant, sizeof(d.variant), "f_enum");
	d.nparams = 1;
	d.params[0] = 8;
	assert_int_equal(flyk_launch(&fake, NULL, &r, &d, &args, NULL), 0);
	d.params[0] = 7;
	assert_int_equal(flyk_launch(&fake, NULL, &r, &d, &args, NULL),
			 -EINVAL);
	/* an unterminated name */
	memset(d.variant, 'x', sizeof(d.variant));
	assert_int_equal(flyk_launch(&fake, NULL, &r, &d, &args, NULL),
			 -EINVAL);
	assert_int_equal(flyk_launch(NULL, NULL, &r, &d, &args, NULL),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_find),
		cmocka_unit_test(test_supports),
		cmocka_unit_test(test_default_search_order),
		cmocka_unit_test(test_default_fallbacks),
		cmocka_unit_test(test_launch_checks),
	};

	return cmocka_run_group_tests_name("flyk", tests, NULL, NULL);
}
