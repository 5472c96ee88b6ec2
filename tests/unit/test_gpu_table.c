/*
 * test_gpu_table.c -- the GPU backends' variant tables, checked without a
 * GPU: libflykernels_{cuda,hip}.so of this build are dlopen()ed (the test
 * skips a library that was not built) and their tables held to flyk.h's
 * contracts: unique names, one reference per op, sane parameter spaces;
 * feasible() on a described H200 (sm_90, 132 SMs) and a described MI300
 * (wave64, no clusters) leaves every benchmark case of cases.json
 * something to tune and a non-reference default; malformed problems are
 * refused; open() and the launch API answer -ENODEV when no device is
 * present.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "flyk.h"
#include "../../kernels/gpu/gpu_int.h"

struct lib {
	const char *file;
	void *dl;
	const struct flyk_backend *b;
};

static struct lib libs[] = {
	{ "libflykernels_cuda.so", NULL, NULL },
	{ "libflykernels_hip.so", NULL, NULL },
};

static const struct flyk_backend *load(int i)
{
	char path[512];

	if (libs[i].b)
		return libs[i].b;
	snprintf(path, sizeof(path), "%s/%s", FLY_BUILD_DIR, libs[i].file);
	if (access(path, R_OK) != 0)
		return NULL; /* not built here: the test skips */
	/* Built, so it must load as the daemon loads it (RTLD_NOW). */
	libs[i].dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!libs[i].dl)
		fail_msg("dlopen %s: %s", path, dlerror());
	flyk_backend_fn fn;
	*(void **)&fn = dlsym(libs[i].dl, "flyk_gpu_backend");
	libs[i].b = fn ? fn() : NULL;
	return libs[i].b;
}

static void describe(struct flyk_device *d, int amd)
{
	memset(d, 0, sizeof(*d));
	d->sms = amd ? 304 : 132;
	d->warp = amd ? 64 : 32;
	d->cc_major = amd ? 0 : 9;
	snprintf(d->arch, sizeof(d->arch), "%s", amd ? "gfx942" : "sm_90");
	d->l2_bytes = amd ? (4u << 20) : (50u << 20);
	d->smem_per_block_optin = amd ? 65536 : 232448;
}

static struct fly_problem prob(uint32_t op, uint32_t dt, uint32_t flags,
			       int64_t a, int64_t b, int64_t c)
{
	struct fly_problem p;

	memset(&p, 0, sizeof(p));
	p.op = op;
	p.dtype = dt;
	p.flags = flags;
	p.dims[0] = a;
	p.dims[1] = b;
	p.dims[2] = c;
	return p;
}

static int any_point(const struct flyk_variant *v,
		     const struct flyk_device *d, const struct fly_problem *p)
{
	uint32_t pos[FLY_PARAMS_MAX] = { 0 };

	for (;;) {
		int64_t pt[FLY_PARAMS_MAX] = { 0 };
		uint32_t j;

		for (j = 0; j < v->nparams; j++)
			pt[j] = v->params[j].vals[pos[j]];
		if (v->feasible(d, p, pt) == 0)
			return 1;
		for (j = v->nparams; j > 0; j--) {
			if (++pos[j - 1] < v->params[j - 1].nvals)
				break;
			pos[j - 1] = 0;
		}
		if (j == 0)
			return 0;
	}
}

/* A non-reference variant may run @p p, and the default is one of them. */
static void assert_tunable(const struct flyk_backend *b,
			   const struct flyk_device *d,
			   const struct fly_problem *p)
{
	int found = 0;
	struct fly_decision dec;

	for (size_t i = 0; i < b->nvariants; i++) {
		const struct flyk_variant *v = &b->variants[i];

		if (flyk_variant_supports(v, p) && !v->is_reference &&
		    any_point(v, d, p))
			found = 1;
	}
	if (!found)
		printf("nothing feasible: op %u dt %u dims %lld,%lld,%lld\n",
		       p->op, p->dtype, (long long)p->dims[0],
		       (long long)p->dims[1], (long long)p->dims[2]);
	assert_true(found);
	assert_int_equal(flyk_default(b, d, p, &dec), 0);
	const struct flyk_variant *v = flyk_variant_find(b, p->op, dec.variant);
	assert_non_null(v);
	assert_false(v->is_reference);
	assert_int_equal(v->feasible(d, p, dec.params), 0);
}

static void check_table(void **state)
{
	int seen = 0;

	for (int li = 0; li < 2; li++) {
		const struct flyk_backend *b = load(li);
		int refs[FLY_OP_COUNT] = { 0 }, ops[FLY_OP_COUNT] = { 0 };

		if (!b)
			continue;
		seen++;
		assert_true(b->kind == FLYK_BACKEND_CUDA ||
			    b->kind == FLYK_BACKEND_HIP);
		assert_true(b->nvariants > 0);
		for (size_t i = 0; i < b->nvariants; i++) {
			const struct flyk_variant *v = &b->variants[i];

			assert_true(strlen(v->name) > 0 &&
				    strlen(v->name) < FLY_VARIANT_MAX);
			assert_true(v->op > 0 && v->op < FLY_OP_COUNT);
			assert_true(v->dtypes != 0);
			assert_true(v->nparams <= FLY_PARAMS_MAX);
			assert_non_null(v->feasible);
			assert_non_null(v->launch);
			assert_ptr_equal(flyk_variant_find(b, v->op, v->name),
					 v);
			/* A successor is a variant of the same op (a typo
			 * would quietly leave the old kernel's place as is). */
			if (v->successor != NULL) {
				const struct flyk_variant *sv =
				    flyk_variant_find(b, v->op, v->successor);

				assert_non_null(sv);
				assert_ptr_not_equal(sv, v);
				assert_true(sv->successor == NULL ||
					    strcmp(sv->successor, v->name) != 0);
			}
			ops[v->op]++;
			refs[v->op] += v->is_reference != 0;
			for (uint32_t j = 0; j < v->nparams; j++) {
				const struct flyk_param *pp = &v->params[j];

				assert_true(pp->nvals > 0);
				for (uint32_t a = 0; a < pp->nvals; a++)
					for (uint32_t c = a + 1; c < pp->nvals;
					     c++)
						assert_true(pp->vals[a] !=
							    pp->vals[c]);
			}
		}
		for (int op = 0; op < FLY_OP_COUNT; op++)
			if (ops[op])
				assert_int_equal(refs[op], 1);
		assert_true(ops[FLY_OP_RMSNORM] >= 2 && ops[FLY_OP_TOPK] >= 2);
	}
	if (!seen)
		skip();
}

/* cases.json (rmsnorm, topk: primary and serving) and odd shapes. */
static const int64_t rms_cases[][3] = {
	{ 2, 8192, 4096 }, { 2, 4096, 8192 }, { 2, 2048, 16384 },
	{ 2, 2048, 65536 }, { 2, 2048, 114688 }, { 2, 8192, 4097 },
	{ 2, 4096, 8193 }, { 2, 2048, 16385 }, { 3, 8192, 4096 },
	{ 3, 2048, 16384 }, { 3, 8192, 4097 }, { 3, 2048, 16385 },
	{ 1, 8192, 4096 }, { 1, 4096, 8192 }, { 1, 2048, 16384 },
	{ 1, 2048, 32768 }, { 1, 2048, 65536 }, { 1, 2048, 114688 },
	{ 1, 8192, 4097 }, { 1, 4096, 8193 }, { 1, 2048, 16385 },
	{ 1, 2048, 32769 }, { 3, 1, 4096 }, { 3, 64, 4096 },
	{ 3, 256, 5120 }, { 3, 4096, 7168 }, { 3, 16384, 8192 },
	{ 3, 4096, 2048 }, { 3, 32768, 4096 }, { 3, 262144, 128 },
	{ 1, 1, 1 }, { 2, 7, 3 }, { 3, 5, 200001 },
};
static const int64_t topk_cases[][3] = {
	{ 256, 1024, 8 }, { 256, 8192, 16 }, { 4096, 1024, 8 },
	{ 4096, 2048, 2 }, { 4096, 4096, 8 }, { 4096, 8192, 16 },
	{ 16384, 1024, 2 }, { 16384, 1024, 8 }, { 16384, 4096, 8 },
	{ 16384, 8192, 2 }, { 4096, 128, 8 }, { 4096, 256, 8 },
	{ 1, 128256, 50 }, { 64, 151936, 50 }, { 256, 128256, 20 },
	{ 4096, 65536, 2048 }, { 1, 1, 1 }, { 3, 5, 5 }, { 2, 200, 128 },
};

static void check_feasible(void **state)
{
	int seen = 0;

	for (int li = 0; li < 2; li++) {
		const struct flyk_backend *b = load(li);

		if (!b)
			continue;
		seen++;
		for (int amd = 0; amd < 2; amd++) {
			struct flyk_device d;

			describe(&d, amd);
			for (size_t i = 0; i < sizeof(rms_cases) /
						       sizeof(rms_cases[0]);
			     i++)
				for (uint32_t f = 0; f <= FLY_F_RESIDUAL;
				     f += FLY_F_RESIDUAL) {
					struct fly_problem p = prob(
						FLY_OP_RMSNORM,
						(uint32_t)rms_cases[i][0], f,
						rms_cases[i][1],
						rms_cases[i][2], 0);
					assert_tunable(b, &d, &p);
				}
			for (size_t i = 0; i < sizeof(topk_cases) /
						       sizeof(topk_cases[0]);
			     i++)
				for (uint32_t dt = 1; dt <= 3; dt++) {
					struct fly_problem p = prob(
						FLY_OP_TOPK, dt,
						dt == 2 ? FLY_F_DETERMINISTIC : 0,
						topk_cases[i][0],
						topk_cases[i][1],
						topk_cases[i][2]);
					assert_tunable(b, &d, &p);
				}
		}
	}
	if (!seen)
		skip();
}

/* Out-of-space problems are refused by every point of every variant. */
static void check_refusals(void **state)
{
	int seen = 0;
	struct fly_problem bad[] = {
		prob(FLY_OP_TOPK, 1, 0, 4, 10, 11),     /* k > n */
		prob(FLY_OP_TOPK, 1, 0, 4, 0, 1),       /* n = 0 */
		prob(FLY_OP_TOPK, 4, 0, 4, 10, 2),      /* fp8 */
		prob(FLY_OP_RMSNORM, 1, 0, 0, 10, 0),   /* m = 0 */
		prob(FLY_OP_RMSNORM, 4, 0, 4, 10, 0),   /* fp8 */
	};

	for (int li = 0; li < 2; li++) {
		const struct flyk_backend *b = load(li);
		struct flyk_device d;

		if (!b)
			continue;
		seen++;
		describe(&d, li);
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			for (size_t v = 0; v < b->nvariants; v++)
				if (b->variants[v].op == bad[i].op)
					assert_false(any_point(&b->variants[v],
							       &d, &bad[i]));
		/* a topk problem is not an rmsnorm problem, and back */
		struct fly_problem t = prob(FLY_OP_TOPK, 1, 0, 4, 64, 2);
		for (size_t v = 0; v < b->nvariants; v++)
			if (b->variants[v].op == FLY_OP_RMSNORM)
				assert_false(any_point(&b->variants[v], &d, &t));
	}
	if (!seen)
		skip();
}

/* No device here (CI): open and the launch API say so; with one, the
 * fingerprint names the arch and the library version. */
static void check_open(void **state)
{
	const struct flyk_backend *b = load(0);

	if (!b)
		skip();
	struct flyk_device *dev = NULL;
	int rc = b->open(0, &dev);

	assert_true(rc == 0 || rc == -ENODEV);
	if (rc == 0) {
		char fp[512];

		assert_true(b->fingerprint(dev, fp, sizeof(fp)) > 0);
		assert_non_null(strstr(fp, "arch="));
		assert_non_null(strstr(fp, "lib=" FLYK_VERSION));
		b->close(dev);
		return;
	}
	assert_null(dev);
	int (*rms)(const struct fly_problem *, const struct fly_decision *,
		   const void *, const void *, void *, void *, float, void *);
	*(void **)&rms = dlsym(libs[0].dl, "flyk_gpu_rmsnorm");
	assert_non_null(rms);
	struct fly_problem p = prob(FLY_OP_RMSNORM, 1, 0, 4, 64, 0);
	struct fly_decision d;

	memset(&d, 0, sizeof(d));
	assert_int_equal(rms(&p, &d, NULL, NULL, NULL, NULL, 1e-6f, NULL),
			 -ENODEV);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(check_table),
		cmocka_unit_test(check_feasible),
		cmocka_unit_test(check_refusals),
		cmocka_unit_test(check_open),
	};

	return cmocka_run_group_tests_name("gpu_table", tests, NULL, NULL);
}
