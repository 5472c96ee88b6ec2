/*
 * test_kernels_cpu.c -- the CPU backend: every variant at every feasible
 * point of its space against the reference on odd shapes (through the
 * backend's own cases), conversions, fingerprint, the checker catching
 * poisoned and wrong outputs, flyk_launch()'s errors and the test-only
 * faulty variants' gating.  Never depends on which candidate is fastest.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flyk.h"
#include "gemm_ties.h"
#include "../../kernels/cpu/cpu_int.h"

static const struct flyk_backend *B;

static struct flyk_device *dev_open(void)
{
	struct flyk_device *dev = NULL;

	B = flyk_cpu_backend();
	assert_int_equal(B->open(0, &dev), 0);
	assert_non_null(dev);
	return dev;
}

static struct fly_problem prob(uint32_t op, uint32_t dt, uint32_t layout,
			       uint32_t flags, int64_t d0, int64_t d1,
			       int64_t d2, int64_t d3)
{
	struct fly_problem p = { op, dt, layout, flags, { d0, d1, d2, d3 } };

	return p;
}

static int is_test_variant(const struct flyk_variant *v)
{
	return strncmp(v->name, "test_", 5) == 0;
}

/* Advance the odometer over a variant's space; 0 when wrapped. */
static int next_point(const struct flyk_variant *v, uint32_t *pos,
		      int64_t *pt)
{
	for (uint32_t i = v->nparams; i > 0; i--) {
		if (++pos[i - 1] < v->params[i - 1].nvals) {
			pt[i - 1] = v->params[i - 1].vals[pos[i - 1]];
			return 1;
		}
		pos[i - 1] = 0;
		pt[i - 1] = v->params[i - 1].vals[0];
	}
	return 0;
}

/* Time and check every feasible point of every (non-test) variant of the
 * problem's op on one case.  @return the number of points run. */
static int run_all_points(struct flyk_device *dev, const struct fly_problem *p,
			  uint64_t seed)
{
	struct flyk_case *c = NULL;
	int count = 0, nonref = 0;

	assert_int_equal(B->case_new(dev, p, seed, &c), 0);
	for (size_t i = 0; i < B->nvariants; i++) {
		const struct flyk_variant *v = &B->variants[i];
		uint32_t pos[FLY_PARAMS_MAX] = { 0 };
		int64_t pt[FLY_PARAMS_MAX] = { 0 };
		int npoint = 0;

		if (!flyk_variant_supports(v, p) || is_test_variant(v))
			continue;
		for (uint32_t j = 0; j < v->nparams; j++)
			pt[j] = v->params[j].vals[0];
		do {
			double us = -1.0, err = -1.0;
			int rc;

			if (v->feasible(dev, p, pt) != 0)
				continue;
			assert_int_equal(B->case_poison(c), 0);
			if (npoint++ % 8 == 0) {
				/* the timed path (reads a big flush buffer) */
				assert_int_equal(B->case_time(c, v, pt, &us), 0);
				assert_true(us >= 0.0);
			} else {
				if (c->pristine)
					memcpy(c->out2, c->pristine,
					       c->pristine_bytes);
				assert_int_equal(v->launch(dev, p, pt, &c->args,
							   NULL), 0);
			}
			rc = B->case_check(c, &err);
			if (rc != 0)
				fprintf(stderr, "FAIL %s [%lld %lld %lld %lld "
					"%lld] dims %lld %lld %lld %lld dt %u "
					"flags %u err %g\n", v->name,
					(long long)pt[0], (long long)pt[1],
					(long long)pt[2], (long long)pt[3],
					(long long)pt[4], (long long)p->dims[0],
					(long long)p->dims[1],
					(long long)p->dims[2],
					(long long)p->dims[3], p->dtype,
					p->flags, err);
			assert_int_equal(rc, 0);
			assert_true(err >= 0.0);
			count++;
			nonref += !v->is_reference;
		} while (next_point(v, pos, pt));
	}
	B->case_free(c);
	assert_true(nonref >= 1);
	return count;
}

/* ---------------------------------------------------------- basics */

static void test_backend_identity(void **state)
{
	struct flyk_device *dev = dev_open(), *dev3 = NULL, *bad = NULL;

	assert_string_equal(B->name, "cpu");
	assert_int_equal(B->kind, FLYK_BACKEND_CPU);
	assert_true(B->nvariants >= 11);
	assert_int_equal(B->open(3, &dev3), 0);
	assert_int_equal(B->open(-1, &bad), -ENODEV);
	assert_null(bad);
	B->close(dev3);
	B->close(dev);
	B->close(NULL);
}

static void test_fingerprint_stable(void **state)
{
	struct flyk_device *dev = dev_open();
	char a[512], b[512], tiny[8];
	int la = B->fingerprint(dev, a, sizeof(a));
	int lb = B->fingerprint(dev, b, sizeof(b));

	assert_true(la > 0);
	assert_int_equal(la, lb);
	assert_string_equal(a, b);
	assert_int_equal((int)strlen(a), la);
	assert_non_null(strstr(a, "arch="));
	assert_non_null(strstr(a, " model=\""));
	assert_non_null(strstr(a, " units="));
	assert_non_null(strstr(a, " l1d_kb="));
	assert_non_null(strstr(a, " l2_kb="));
	assert_non_null(strstr(a, " l3_kb="));
	assert_non_null(strstr(a, " lib=" FLYK_VERSION));
	{
		/* lib= is flyk_libver(): the release and the kernels' 12-hex
		 * source id (tools/srcid.sh), so changed kernels re-tune */
		const char *v = flyk_libver(), *id;
		char want[128];

		assert_int_equal(strncmp(v, FLYK_VERSION "+",
					 strlen(FLYK_VERSION) + 1), 0);
		id = v + strlen(FLYK_VERSION) + 1;
		assert_int_equal(strlen(id), 12);
		assert_int_equal(strspn(id, "0123456789abcdef"), 12);
		snprintf(want, sizeof(want), " lib=%s", v);
		assert_non_null(strstr(a, want));
	}
	assert_null(strchr(a, '\n'));
	assert_int_equal(B->fingerprint(dev, tiny, sizeof(tiny)), -ENOSPC);
	B->close(dev);
}

static void test_conversions(void **state)
{
	/* bf16: ties to even */
	assert_int_equal(flyk_cpu_f32_to_bf16(1.0f), 0x3f80);
	assert_int_equal(flyk_cpu_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
	assert_int_equal(flyk_cpu_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
	assert_int_equal(flyk_cpu_f32_to_bf16(-2.0f), 0xc000);
	assert_true(isnan(flyk_cpu_bf16_to_f32(flyk_cpu_f32_to_bf16(NAN))));
	/* fp16: ties to even, overflow, subnormals */
	assert_int_equal(flyk_cpu_f32_to_f16(1.0f), 0x3c00);
	assert_int_equal(flyk_cpu_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
	assert_int_equal(flyk_cpu_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
	assert_int_equal(flyk_cpu_f32_to_f16(65504.0f), 0x7bff);
	assert_int_equal(flyk_cpu_f32_to_f16(65520.0f), 0x7c00);
	assert_int_equal(flyk_cpu_f32_to_f16(0x1p-24f), 0x0001);
	assert_int_equal(flyk_cpu_f32_to_f16(0x1p-25f), 0x0000);
	assert_int_equal(flyk_cpu_f32_to_f16(-0.5f), 0xb800);
	/* every finite half survives a round trip */
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00)
			continue;
		assert_int_equal(flyk_cpu_f32_to_f16(flyk_cpu_f16_to_f32(
					 (uint16_t)h)), h);
		assert_int_equal(flyk_cpu_f32_to_bf16(flyk_cpu_bf16_to_f32(
					 (uint16_t)h)), h);
	}
}

/* ---------------------------------------------------------- threads */

struct par_count {
	int hits[32];
	int nseen;
};

static void count_work(void *arg, int tid, int n)
{
	struct par_count *pc = arg;

	__atomic_add_fetch(&pc->hits[tid], 1, __ATOMIC_RELAXED);
	__atomic_store_n(&pc->nseen, n, __ATOMIC_RELAXED);
}

/* Every tid in [0, n) runs exactly once per call, with the right n.
 * @return NULL, or non-NULL on a violation (no cmocka asserts off the
 * main thread). */
static void *par_runs(void *arg)
{
	int base = *(int *)arg;

	for (int r = 0; r < 200; r++) {
		int n = 1 + (r + base) % 20;
		struct par_count pc;

		memset(&pc, 0, sizeof(pc));
		if (flyk_cpu_parallel(n, count_work, &pc) != 0 ||
		    pc.nseen != n)
			return arg;
		for (int t = 0; t < 32; t++)
			if (pc.hits[t] != (t < n ? 1 : 0))
				return arg;
	}
	return NULL;
}

static void test_parallel_pool(void **state)
{
	pthread_t th[3];
	int base[4] = { 0, 5, 11, 17 };
	int64_t lo, hi, sum = 0;

	assert_null(par_runs(&base[0]));
	/* concurrent callers: one gets the pool, the others fresh threads */
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&th[i], NULL, par_runs,
						&base[i + 1]), 0);
	assert_null(par_runs(&base[0]));
	for (int i = 0; i < 3; i++) {
		void *bad = &base[0];

		pthread_join(th[i], &bad);
		assert_null(bad);
	}
	/* split covers [0, total) exactly, aligned to the grain */
	for (int t = 0; t < 3; t++) {
		flyk_cpu_split(37, 3, t, 4, &lo, &hi);
		assert_true(lo % 4 == 0 && lo <= hi);
		sum += hi - lo;
	}
	assert_int_equal(sum, 37);
}

/* ---------------------------------------------------------- per op */

static const uint32_t all_dt[] = { FLY_DT_FP32, FLY_DT_BF16, FLY_DT_FP16 };

static void test_rmsnorm_all_variants(void **state)
{
	struct flyk_device *dev = dev_open();
	static const int64_t ns[] = { 1, 7, 4097 }, ms[] = { 1, 3 };
	uint64_t seed = 1;

	for (int d = 0; d < 3; d++)
		for (int fl = 0; fl < 2; fl++)
			for (int i = 0; i < 3; i++)
				for (int j = 0; j < 2; j++) {
					struct fly_problem p = prob(
						FLY_OP_RMSNORM, all_dt[d], 0,
						fl ? FLY_F_RESIDUAL : 0, ms[j],
						ns[i], 0, 0);

					assert_true(run_all_points(dev, &p,
								   seed++) >= 2);
				}
	/* a wider problem where threads and chunks all apply */
	struct fly_problem big = prob(FLY_OP_RMSNORM, FLY_DT_BF16, 0,
				      FLY_F_RESIDUAL, 130, 257, 0, 0);
	assert_true(run_all_points(dev, &big, 99) >= 10);
	B->close(dev);
}

static void test_topk_all_variants(void **state)
{
	struct flyk_device *dev = dev_open();
	static const int64_t shapes[][3] = {
		{ 1, 1, 1 }, { 3, 7, 1 }, { 3, 7, 7 }, { 2, 100, 33 },
		{ 2, 4097, 64 }, { 1, 4097, 2048 }, { 5, 300, 300 },
	};
	uint64_t seed = 7;

	for (int d = 0; d < 3; d++)
		for (int fl = 0; fl < 2; fl++)
			for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]);
			     s++) {
				struct fly_problem p = prob(
					FLY_OP_TOPK, all_dt[d], 0,
					fl ? FLY_F_DETERMINISTIC : 0,
					shapes[s][0], shapes[s][1],
					shapes[s][2], 0);

				assert_true(run_all_points(dev, &p, seed++) >= 4);
			}
	B->close(dev);
}

/* Many equal values: every variant, twice, bit-identical to the reference
 * and ties ordered by index. */
static void test_topk_ties_deterministic(void **state)
{
	struct flyk_device *dev = dev_open();
	enum { M = 3, N = 1000, K = 150 };
	struct fly_problem p = prob(FLY_OP_TOPK, FLY_DT_BF16, 0,
				    FLY_F_DETERMINISTIC, M, N, K, 0);
	static uint16_t x[M * N], rv[M * K], v1[M * K], v2[M * K];
	static int64_t ri[M * K], i1[M * K], i2[M * K];
	const struct flyk_variant *ref = flyk_variant_find(B, FLY_OP_TOPK,
							   "topk_ref");
	static const float levels[] = { 0.5f, -0.25f, 1.0f, 0.125f };

	for (int i = 0; i < M * N; i++)
		x[i] = flyk_cpu_f32_to_bf16(levels[(i * 7 + i / 13) % 4]);
	union flyk_args a = { .topk = { x, rv, ri } };
	assert_int_equal(ref->launch(dev, &p, NULL, &a, NULL), 0);
	for (int r = 0; r < M; r++)
		for (int j = 1; j < K; j++) {
			int64_t o = r * K + j;

			assert_true(rv[o] == rv[o - 1] ? ri[o] > ri[o - 1]
				    : flyk_cpu_bf16_to_f32(rv[o]) <
				      flyk_cpu_bf16_to_f32(rv[o - 1]));
		}
	for (size_t i = 0; i < B->nvariants; i++) {
		const struct flyk_variant *v = &B->variants[i];
		int64_t pt[FLY_PARAMS_MAX] = { 1 };

		if (v->op != FLY_OP_TOPK || v->is_reference)
			continue;
		union flyk_args a1 = { .topk = { x, v1, i1 } };
		union flyk_args a2 = { .topk = { x, v2, i2 } };
		assert_int_equal(v->feasible(dev, &p, pt), 0);
		assert_int_equal(v->launch(dev, &p, pt, &a1, NULL), 0);
		assert_int_equal(v->launch(dev, &p, pt, &a2, NULL), 0);
		assert_memory_equal(v1, v2, sizeof(v1));
		assert_memory_equal(i1, i2, sizeof(i1));
		assert_memory_equal(v1, rv, sizeof(v1));
		assert_memory_equal(i1, ri, sizeof(i1));
	}
	B->close(dev);
}

static void test_gemm_all_variants(void **state)
{
	struct flyk_device *dev = dev_open();
	static const int64_t shapes[][3] = {
		{ 1, 7, 13 }, { 33, 65, 129 }, { 5, 3, 9 }, { 67, 131, 257 },
		{ 1, 1, 1 },
	};
	static const uint32_t dts[] = { FLY_DT_FP32, FLY_DT_BF16 };
	static const uint32_t lays[] = { FLY_LAYOUT_NT, FLY_LAYOUT_NN };
	static const uint32_t fls[] = { 0, FLY_F_BIAS | FLY_F_SCALE,
					FLY_F_BIAS };
	uint64_t seed = 11;

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int d = 0; d < 2; d++)
			for (int l = 0; l < 2; l++)
				for (int f = 0; f < 3; f++) {
					struct fly_problem p = prob(
						FLY_OP_GEMM, dts[d], lays[l],
						fls[f], shapes[s][0],
						shapes[s][1], shapes[s][2], 0);

					assert_true(run_all_points(dev, &p,
								   seed++) >= 3);
				}
	B->close(dev);
}

/* bf16 outputs rounded to nearest even, bit for bit: every bf16 NT GEMM
 * variant (the reference too) at every feasible point on a problem whose
 * fp32 sums are exact and fall on and beside ties (gemm_ties.h). */
static void test_gemm_bf16_rounding_exact(void **state)
{
	struct flyk_device *dev = dev_open();
	enum { M = 260, N = 200, K = 67 };
	struct fly_problem p = prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NT,
				    0, M, N, K, 0);
	static uint16_t a[M * K], b[N * K], c[M * N];
	static char ws[1 << 20];
	int nrun = 0;

	gemm_ties_fill(a, b, M, N, K);
	for (size_t i = 0; i < B->nvariants; i++) {
		const struct flyk_variant *v = &B->variants[i];
		uint32_t pos[FLY_PARAMS_MAX] = { 0 };
		int64_t pt[FLY_PARAMS_MAX] = { 0 };

		if (!flyk_variant_supports(v, &p) || is_test_variant(v))
			continue;
		for (uint32_t j = 0; j < v->nparams; j++)
			pt[j] = v->params[j].vals[0];
		do {
			union flyk_args ar = { .gemm = { a, b, c, NULL, 1.0f,
							 ws, sizeof(ws) } };
			int64_t fi = -1, fj = -1, bad;

			if (v->feasible(dev, &p, pt) != 0)
				continue;
			memset(c, 0xff, sizeof(c));
			assert_int_equal(v->launch(dev, &p, pt, &ar, NULL), 0);
			bad = gemm_ties_bad(c, M, N, &fi, &fj);
			if (bad)
				fprintf(stderr, "%s [%lld %lld]: %lld outputs "
					"off, first (%lld, %lld): %04x, want "
					"%04x\n", v->name, (long long)pt[0],
					(long long)pt[1], (long long)bad,
					(long long)fi, (long long)fj,
					c[fi * N + fj], gemm_ties_want(fi, fj));
			assert_int_equal(bad, 0);
			nrun++;
		} while (next_point(v, pos, pt));
	}
	assert_true(nrun >= 3);
	B->close(dev);
}

static void test_grouped_cases(void **state)
{
	struct flyk_device *dev = dev_open();
	static const int64_t shapes[][4] = {
		{ 4, 37, 19, 23 }, { 8, 3, 5, 7 }, { 1, 1, 1, 1 },
		{ 3, 70, 33, 65 },
	};
	uint64_t seed = 21;

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int d = 0; d < 2; d++) {
			struct fly_problem p = prob(
				FLY_OP_GROUPED_GEMM,
				d ? FLY_DT_BF16 : FLY_DT_FP32, FLY_LAYOUT_NT,
				0, shapes[s][0], shapes[s][1], shapes[s][2],
				shapes[s][3]);

			assert_true(run_all_points(dev, &p, seed++) >= 2);
		}
	B->close(dev);
}

/* Explicit offsets: empty groups, single-row groups, one huge group. */
static void test_grouped_uneven_offsets(void **state)
{
	struct flyk_device *dev = dev_open();
	enum { G = 6, M = 75, N = 17, K = 29 };
	static const int64_t off[G + 1] = { 0, 0, 1, 1, 2, 74, 75 };
	struct fly_problem p = prob(FLY_OP_GROUPED_GEMM, FLY_DT_FP32,
				    FLY_LAYOUT_NT, 0, G, M, N, K);
	static float a[M * K], b[G * N * K], cr[M * N], c[M * N];
	const struct flyk_variant *ref = flyk_variant_find(
		B, FLY_OP_GROUPED_GEMM, "ggemm_ref");
	const struct flyk_variant *blk = flyk_variant_find(
		B, FLY_OP_GROUPED_GEMM, "ggemm_blocked");
	uint32_t s = 12345;

	for (int i = 0; i < M * K; i++)
		a[i] = (float)((s = s * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f;
	for (int i = 0; i < G * N * K; i++)
		b[i] = (float)((s = s * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f;
	union flyk_args ar = { .grouped_gemm = { a, b, cr, off, NULL, 0 } };
	assert_int_equal(ref->launch(dev, &p, NULL, &ar, NULL), 0);
	/* spot-check the reference itself: row 1 is group 3's only row */
	double acc = 0.0;
	for (int q = 0; q < K; q++)
		acc += (double)a[1 * K + q] * b[(3 * N + 3) * K + q];
	assert_true(fabs(cr[1 * N + 3] - acc) < 1e-5);
	for (int64_t t = 1; t <= 2; t++)
		for (int64_t tile = 0; tile < 3; tile++) {
			int64_t pt[2] = { t, tile };

			if (blk->feasible(dev, &p, pt) != 0)
				continue;
			memset(c, 0xff, sizeof(c));
			union flyk_args ac = { .grouped_gemm = { a, b, c, off,
								 NULL, 0 } };
			assert_int_equal(blk->launch(dev, &p, pt, &ac, NULL), 0);
			for (int i = 0; i < M * N; i++)
				assert_true(fabs(c[i] - cr[i]) <
					    1e-4 * (1 + fabs(cr[i])));
		}
	/* bad offsets are refused */
	static const int64_t bad[G + 1] = { 0, 5, 4, 10, 20, 30, 75 };
	union flyk_args ab = { .grouped_gemm = { a, b, c, bad, NULL, 0 } };
	int64_t pt[2] = { 1, 0 };
	assert_int_equal(blk->launch(dev, &p, pt, &ab, NULL), -EINVAL);
	B->close(dev);
}

/* ---------------------------------------------------------- checker */

static void test_check_catches_poison_and_wrong(void **state)
{
	struct flyk_device *dev = dev_open();
	struct fly_problem ps[] = {
		prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 3, 33, 0, 0),
		prob(FLY_OP_RMSNORM, FLY_DT_FP16, 0, FLY_F_RESIDUAL, 3, 33, 0, 0),
		prob(FLY_OP_TOPK, FLY_DT_FP32, 0, 0, 2, 50, 5, 0),
		prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NN, FLY_F_BIAS, 9, 10,
		     11, 0),
		prob(FLY_OP_GROUPED_GEMM, FLY_DT_FP32, FLY_LAYOUT_NT, 0, 2, 9,
		     10, 11),
	};

	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
		struct flyk_case *c = NULL;
		const struct flyk_variant *ref = NULL;
		double err = 0, us;

		for (size_t j = 0; j < B->nvariants; j++)
			if (B->variants[j].op == ps[i].op &&
			    B->variants[j].is_reference)
				ref = &B->variants[j];
		assert_non_null(ref);
		assert_int_equal(B->case_new(dev, &ps[i], 5, &c), 0);
		/* poisoned, never launched: NaN left */
		assert_int_equal(B->case_poison(c), 0);
		assert_int_equal(B->case_check(c, &err), -EDOM);
		/* the reference passes */
		assert_int_equal(B->case_time(c, ref, NULL, &us), 0);
		assert_int_equal(B->case_check(c, &err), 0);
		assert_true(err == 0.0);
		/* a wrong number */
		if (ps[i].op == FLY_OP_TOPK) {
			int64_t *idx = c->args.topk.indices;
			float *val = c->args.topk.values;

			idx[0] = idx[1];
			assert_int_equal(B->case_check(c, &err), -EDOM);
			assert_int_equal(B->case_time(c, ref, NULL, &us), 0);
			val[1] = val[0] * 2.0f;
			assert_int_equal(B->case_check(c, &err), -EDOM);
		} else {
			void *out = ps[i].op == FLY_OP_RMSNORM ? c->args.rmsnorm.y
				: ps[i].op == FLY_OP_GEMM ? c->args.gemm.c
				: c->args.grouped_gemm.c;
			float v = flyk_cpu_load(out, 4, ps[i].dtype);

			flyk_cpu_store(out, 4, ps[i].dtype, v + 0.5f);
			assert_int_equal(B->case_check(c, &err), -EDOM);
			assert_true(err > 0.1);
		}
		B->case_free(c);
	}
	B->close(dev);
}

/* ---------------------------------------------------------- mqa_logits */

static void test_fp8_decode(void **state)
{
	(void)state;
	/* e4m3fn: bias 7, 0x7f/0xff NaN, 0x80 -0, max 448 */
	assert_true(flyk_cpu_fp8_to_f32(0x38, 0) == 1.0f);
	assert_true(flyk_cpu_fp8_to_f32(0xb8, 0) == -1.0f);
	assert_true(flyk_cpu_fp8_to_f32(0x7e, 0) == 448.0f);
	assert_true(flyk_cpu_fp8_to_f32(0x01, 0) == 0x1p-9f);
	assert_true(flyk_cpu_fp8_to_f32(0x08, 0) == 0x1p-6f);
	assert_true(flyk_cpu_fp8_to_f32(0x3c, 0) == 1.5f);
	assert_true(isnan(flyk_cpu_fp8_to_f32(0x7f, 0)));
	assert_true(isnan(flyk_cpu_fp8_to_f32(0xff, 0)));
	assert_true(flyk_cpu_fp8_to_f32(0x80, 0) == 0.0f);
	assert_true(signbit(flyk_cpu_fp8_to_f32(0x80, 0)));
	/* e4m3fnuz: bias 8, 0x80 the only NaN, max 240 */
	assert_true(flyk_cpu_fp8_to_f32(0x40, 1) == 1.0f);
	assert_true(flyk_cpu_fp8_to_f32(0x38, 1) == 0.5f);
	assert_true(flyk_cpu_fp8_to_f32(0x7f, 1) == 240.0f);
	assert_true(flyk_cpu_fp8_to_f32(0xff, 1) == -240.0f);
	assert_true(flyk_cpu_fp8_to_f32(0x01, 1) == 0x1p-10f);
	assert_true(isnan(flyk_cpu_fp8_to_f32(0x80, 1)));
	assert_true(flyk_cpu_fp8_to_f32(0x00, 1) == 0.0f);
}

static void test_mqa_all_variants(void **state)
{
	struct flyk_device *dev = dev_open();
	static const int64_t shapes[][4] = {
		{ 1, 1, 1, 1 }, { 1, 37, 4, 16 }, { 5, 3, 2, 8 },
		{ 61, 200, 8, 32 }, { 9, 130, 64, 128 },
	};
	static const uint32_t fl[][2] = {
		{ FLY_DT_FP8_E4M3, 0 },
		{ FLY_DT_FP8_E4M3, FLY_F_CLEAN },
		{ FLY_DT_FP8_E4M3FNUZ, FLY_F_CLEAN },
		{ FLY_DT_FP8_E4M3, FLY_F_CLEAN | FLY_F_KV_FNUZ },
	};
	uint64_t seed = 40;

	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		for (size_t f = 0; f < sizeof(fl) / sizeof(fl[0]); f++) {
			struct fly_problem p = prob(
				FLY_OP_MQA_LOGITS, fl[f][0], 0, fl[f][1],
				shapes[i][0], shapes[i][1], shapes[i][2],
				shapes[i][3]);

			assert_true(run_all_points(dev, &p, seed++) >= 2);
		}
	/* q fnuz with kv "fnuz as well" is not a third format */
	struct fly_problem bad = prob(FLY_OP_MQA_LOGITS, FLY_DT_FP8_E4M3FNUZ,
				      0, FLY_F_KV_FNUZ, 4, 4, 2, 8);
	const struct flyk_variant *ref =
		flyk_variant_find(B, FLY_OP_MQA_LOGITS, "mqa_ref");
	assert_non_null(ref);
	assert_int_equal(ref->feasible(dev, &bad, NULL), -EINVAL);
	B->close(dev);
}

/* mqa_ref and mqa_blocked (at @p pt) on the same inputs @p a, into
 * @p out0 and @p out1 (a's logits ignored). */
static void mqa_run_both(struct flyk_device *dev, const struct fly_problem *p,
			 const int64_t *pt, struct flyk_mqa_logits_args a,
			 float *out0, float *out1)
{
	const struct flyk_variant *v[2] = {
		flyk_variant_find(B, FLY_OP_MQA_LOGITS, "mqa_ref"),
		flyk_variant_find(B, FLY_OP_MQA_LOGITS, "mqa_blocked"),
	};

	for (int i = 0; i < 2; i++) {
		union flyk_args u = { .mqa_logits = a };

		u.mqa_logits.logits = i ? out1 : out0;
		assert_non_null(v[i]);
		assert_int_equal(v[i]->feasible(dev, p, i ? pt : NULL), 0);
		assert_int_equal(v[i]->launch(dev, p, i ? pt : NULL, &u, NULL),
				 0);
	}
}

/* Windows of every kind the engines send (empty rows, ks < 0, ke past
 * skv, context-parallel halves), a strided output: the blocked variant
 * agrees with the reference on every window position; CLEAN writes
 * exactly -inf elsewhere in the row and nothing past skv; without CLEAN
 * nothing outside the windows is written. */
static void test_mqa_windows(void **state)
{
	struct flyk_device *dev = dev_open();
	enum { SQ = 13, SKV = 70, H = 3, D = 24, LD = SKV + 5 };
	static uint8_t q[SQ * H * D], kv[SKV * D];
	static float sc[SKV], w[SQ * H], out[2][SQ * LD];
	static int32_t ks[SQ], ke[SQ];
	uint64_t s = 7;

	for (size_t i = 0; i < sizeof(q); i++)
		q[i] = (uint8_t)((s = s * 6364136223846793005ULL + 1) >> 56) &
		       0x77; /* never NaN */
	for (size_t i = 0; i < sizeof(kv); i++)
		kv[i] = (uint8_t)((s = s * 6364136223846793005ULL + 1) >> 56) &
			0xf7;
	for (int j = 0; j < SKV; j++)
		sc[j] = 0.25f + (float)(j % 5) * 0.125f;
	for (int i = 0; i < SQ * H; i++)
		w[i] = (i % 3 == 0 ? -0.5f : 0.75f) + (float)(i % 7) * 0.03f;
	for (int i = 0; i < SQ; i++) {
		ks[i] = i < SQ / 2 ? 0 : SKV / 2;        /* cp halves */
		ke[i] = i < SQ / 2 ? SKV / 2 - 3 + i : SKV - SQ + i + 1;
	}
	ks[1] = 9, ke[1] = 9;     /* empty */
	ks[2] = -5, ke[2] = 4;    /* starts before 0 */
	ks[3] = 60, ke[3] = 500;  /* ends past skv */
	ks[4] = 30, ke[4] = 10;   /* reversed: empty */
	for (int clean = 0; clean < 2; clean++) {
		struct fly_problem p = prob(FLY_OP_MQA_LOGITS, FLY_DT_FP8_E4M3,
					    0, clean ? FLY_F_CLEAN : 0, SQ,
					    SKV, H, D);
		int64_t pt[3] = { 4, 64, 2 };
		struct flyk_mqa_logits_args a = {
			q, kv, sc, w, ks, ke, NULL, LD, NULL, 0
		};

		for (int i = 0; i < SQ * LD; i++)
			out[0][i] = out[1][i] = 12345.0f;
		mqa_run_both(dev, &p, pt, a, out[0], out[1]);
		for (int i = 0; i < SQ; i++) {
			int lo = ks[i] < 0 ? 0 : ks[i];
			int hi = ke[i] > SKV ? SKV : ke[i];

			for (int j = 0; j < LD; j++) {
				float r = out[0][i * LD + j];
				float b = out[1][i * LD + j];
				int in = j >= lo && j < hi;

				if (j >= SKV || (!in && !clean)) {
					assert_true(r == 12345.0f);
					assert_true(b == 12345.0f);
				} else if (!in) {
					assert_true(isinf(r) && r < 0);
					assert_true(isinf(b) && b < 0);
				} else {
					assert_true(isfinite(r));
					assert_true(fabsf(b - r) <=
						    1e-4f * (1.0f + fabsf(r)));
				}
			}
		}
	}
	B->close(dev);
}

/* relu is torch's in every variant: a NaN fp8 code in one head of a
 * query row makes that row NaN at every window position, one in a KV
 * row makes that column NaN in every row; every other position stays
 * finite and the variants agree (fmaxf would have dropped the NaN head
 * and returned a finite, wrong sum). */
static void test_mqa_nan_propagates(void **state)
{
	struct flyk_device *dev = dev_open();
	enum { SQ = 4, SKV = 20, H = 3, D = 16, NANROW = 1, NANCOL = 7 };
	static uint8_t q[SQ * H * D], kv[SKV * D];
	static float sc[SKV], w[SQ * H], out[2][SQ * SKV];
	static int32_t ks[SQ], ke[SQ];
	static const uint32_t dts[2] = { FLY_DT_FP8_E4M3,
					 FLY_DT_FP8_E4M3FNUZ };
	static const uint8_t nan8[2] = { 0x7f, 0x80 };
	uint64_t s = 11;

	for (int f = 0; f < 2; f++) {
		struct fly_problem p = prob(FLY_OP_MQA_LOGITS, dts[f], 0,
					    FLY_F_CLEAN, SQ, SKV, H, D);
		int64_t pt[3] = { 2, 64, 1 };

		for (size_t i = 0; i < sizeof(q); i++) /* never NaN */
			q[i] = (uint8_t)((s = s * 6364136223846793005ULL +
					      1) >> 56) & 0x77;
		for (size_t i = 0; i < sizeof(kv); i++)
			kv[i] = (uint8_t)((s = s * 6364136223846793005ULL +
					       1) >> 56) & 0x77;
		q[(NANROW * H + 2) * D + 5] = nan8[f];
		kv[NANCOL * D + 3] = nan8[f];
		for (int j = 0; j < SKV; j++)
			sc[j] = 0.5f;
		for (int i = 0; i < SQ * H; i++)
			w[i] = i % 2 ? 0.0f : -0.75f; /* NaN x 0 is NaN */
		for (int i = 0; i < SQ; i++)
			ks[i] = 0, ke[i] = SKV;
		struct flyk_mqa_logits_args a = {
			q, kv, sc, w, ks, ke, NULL, SKV, NULL, 0
		};

		mqa_run_both(dev, &p, pt, a, out[0], out[1]);
		for (int i = 0; i < SQ; i++)
			for (int j = 0; j < SKV; j++) {
				float r = out[0][i * SKV + j];
				float b = out[1][i * SKV + j];

				if (i == NANROW || j == NANCOL) {
					assert_true(isnan(r));
					assert_true(isnan(b));
				} else {
					assert_true(isfinite(r));
					assert_true(fabsf(b - r) <=
						    1e-4f * (1.0f + fabsf(r)));
				}
			}
	}
	B->close(dev);
}

/* The check refuses a wrong valid position, a NaN left in a window, and
 * under CLEAN a finite value outside the windows. */
static void test_mqa_check_catches(void **state)
{
	struct flyk_device *dev = dev_open();
	struct fly_problem p = prob(FLY_OP_MQA_LOGITS, FLY_DT_FP8_E4M3, 0,
				    FLY_F_CLEAN, 8, 16, 4, 16);
	const struct flyk_variant *blk =
		flyk_variant_find(B, FLY_OP_MQA_LOGITS, "mqa_blocked");
	int64_t pt[3] = { 1, 64, 1 };
	struct flyk_case *c = NULL;
	float *o;
	double err;

	assert_int_equal(B->case_new(dev, &p, 9, &c), 0);
	o = c->out;
	/* row 7 of the case's causal-with-prefix windows is [0, 16) full;
	 * row 0 is [0, 9): position (0, 12) lies outside */
	assert_int_equal(blk->launch(dev, &p, pt, &c->args, NULL), 0);
	assert_int_equal(B->case_check(c, &err), 0);
	o[7 * 16 + 3] += 1.0f + fabsf(o[7 * 16 + 3]);
	assert_int_equal(B->case_check(c, &err), -EDOM);
	assert_int_equal(B->case_poison(c), 0);
	assert_int_equal(B->case_check(c, &err), -EDOM);
	assert_int_equal(blk->launch(dev, &p, pt, &c->args, NULL), 0);
	o[0 * 16 + 12] = 0.0f;
	assert_int_equal(B->case_check(c, &err), -EDOM);
	B->case_free(c);
	B->close(dev);
}

/* ---------------------------------------------------------- scaled_gemm */

static void test_mx_decode(void **state)
{
	static const float e2m1[8] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6 };
	/* mxfp4 packing: the low nibble is the even k */
	static const uint8_t packed[16] = { 0x21, 0xf9, 0, 0, 0, 0, 0, 0,
					    0, 0, 0, 0, 0, 0, 0, 0 };
	uint8_t sc = 128; /* 2^1 */

	(void)state;
	for (int i = 0; i < 8; i++) {
		assert_true(flyk_cpu_e2m1_to_f32((uint8_t)i) == e2m1[i]);
		assert_true(flyk_cpu_e2m1_to_f32((uint8_t)(i | 8)) == -e2m1[i]);
	}
	assert_true(flyk_cpu_e8m0_to_f32(127) == 1.0f);
	assert_true(flyk_cpu_e8m0_to_f32(128) == 2.0f);
	assert_true(flyk_cpu_e8m0_to_f32(120) == 0x1p-7f);
	assert_true(flyk_cpu_e8m0_to_f32(0) == 0x1p-127f);
	assert_true(flyk_cpu_e8m0_to_f32(254) == 0x1p127f);
	assert_true(isnan(flyk_cpu_e8m0_to_f32(255)));
	assert_true(flyk_cpu_scaled_elem(FLY_DT_MXFP4, packed, &sc, 32, 0, 0) ==
		    1.0f);
	assert_true(flyk_cpu_scaled_elem(FLY_DT_MXFP4, packed, &sc, 32, 0, 1) ==
		    2.0f);
	assert_true(flyk_cpu_scaled_elem(FLY_DT_MXFP4, packed, &sc, 32, 0, 2) ==
		    -1.0f);
	assert_true(flyk_cpu_scaled_elem(FLY_DT_MXFP4, packed, &sc, 32, 0, 3) ==
		    -12.0f);
}

static void test_scaled_all_variants(void **state)
{
	struct flyk_device *dev = dev_open();
	/* M = 1, N and K off every tile; the MX shapes keep K % 32 == 0 */
	static const int64_t any[][3] = { { 1, 1, 1 }, { 1, 37, 7 },
					  { 5, 3, 33 }, { 33, 70, 130 } };
	static const int64_t mx[][3] = { { 1, 1, 32 }, { 1, 37, 64 },
					 { 5, 3, 96 }, { 33, 70, 160 },
					 { 64, 64, 256 } };
	static const uint32_t dts[] = { FLY_DT_FP8_E4M3, FLY_DT_FP8_E4M3FNUZ,
					FLY_DT_MXFP8, FLY_DT_MXFP4 };
	uint64_t seed = 70;

	for (size_t d = 0; d < 4; d++)
		for (size_t i = 0; i < (d < 2 ? 4u : 5u); i++)
			for (uint32_t f = 0; f <= FLY_F_BIAS; f += FLY_F_BIAS) {
				const int64_t *s = d < 2 ? any[i] : mx[i];
				struct fly_problem p = prob(
					FLY_OP_SCALED_GEMM, dts[d],
					FLY_LAYOUT_NT, f, s[0], s[1], s[2], 0);

				assert_true(run_all_points(dev, &p, seed++) >=
					    2);
			}
	B->close(dev);
}

/* MX needs K % 32 == 0; only NT; no fp8 e5m2 kernels (yet). */
static void test_scaled_errors(void **state)
{
	struct flyk_device *dev = dev_open();
	struct flyk_case *c = NULL;
	const struct flyk_variant *ref =
		flyk_variant_find(B, FLY_OP_SCALED_GEMM, "sg_ref");
	struct fly_problem k48 = prob(FLY_OP_SCALED_GEMM, FLY_DT_MXFP8,
				      FLY_LAYOUT_NT, 0, 4, 4, 48, 0);
	struct fly_problem k20 = prob(FLY_OP_SCALED_GEMM, FLY_DT_MXFP4,
				      FLY_LAYOUT_NT, 0, 4, 4, 20, 0);
	struct fly_problem nn = prob(FLY_OP_SCALED_GEMM, FLY_DT_FP8_E4M3,
				     FLY_LAYOUT_NN, 0, 4, 4, 32, 0);

	assert_non_null(ref);
	assert_int_equal(ref->feasible(dev, &k48, NULL), -EINVAL);
	assert_int_equal(B->case_new(dev, &k48, 1, &c), -EINVAL);
	assert_int_equal(B->case_new(dev, &k20, 1, &c), -EINVAL);
	assert_int_equal(B->case_new(dev, &nn, 1, &c), -EINVAL);
	assert_null(c);
	B->close(dev);
}

/* All-zero blocks, max-magnitude blocks (e4m3 448, e2m1 6, scales 2^+-8
 * apart), a NaN scale: the blocked variant and the reference agree
 * exactly (every product and sum here is exact in fp32), and a NaN scale
 * makes exactly its rows' outputs NaN. */
static void test_scaled_edge_blocks(void **state)
{
	struct flyk_device *dev = dev_open();
	const struct flyk_variant *ref =
		flyk_variant_find(B, FLY_OP_SCALED_GEMM, "sg_ref");
	const struct flyk_variant *blk =
		flyk_variant_find(B, FLY_OP_SCALED_GEMM, "sg_blocked");
	int64_t pt[5] = { 32, 64, 64, 0, 1 };

	for (int fp4 = 0; fp4 < 2; fp4++) {
		uint32_t dt = fp4 ? FLY_DT_MXFP4 : FLY_DT_MXFP8;
		struct fly_problem p = prob(FLY_OP_SCALED_GEMM, dt,
					    FLY_LAYOUT_NT, 0, 3, 2, 64, 0);
		size_t kb = fp4 ? 32 : 64; /* bytes per row */
		uint8_t a[3 * 64], b[2 * 64], sa[3 * 2], sb[2 * 2];
		uint16_t c1[6], c2[6];
		union flyk_args args = { .scaled_gemm = {
			a, b, c1, NULL, sa, sb, NULL, 0 } };
		uint8_t big = fp4 ? 0x77 : 0x7e; /* 6 | 6 ; 448 */

		memset(a, 0, sizeof(a));
		memset(b, 0, sizeof(b));
		/* row 0: block 0 zero, block 1 max; row 1: both max (neg in
		 * block 0); row 2: block 1 max with a NaN scale */
		memset(a + kb / 2, big, kb / 2);
		memset(a + kb, (uint8_t)(big | (fp4 ? 0x88 : 0x80)), kb / 2);
		memset(a + kb + kb / 2, big, kb / 2);
		memset(a + 2 * kb + kb / 2, big, kb / 2);
		memset(b, big, 2 * kb);
		sa[0] = 127 + 8; sa[1] = 127 + 8;
		sa[2] = 127 - 8; sa[3] = 127 + 8;
		sa[4] = 127; sa[5] = 255;
		sb[0] = 127 - 8; sb[1] = 127 - 8;
		sb[2] = 127; sb[3] = 127;
		assert_int_equal(ref->launch(dev, &p, NULL, &args, NULL), 0);
		args.scaled_gemm.c = c2;
		assert_int_equal(blk->launch(dev, &p, pt, &args, NULL), 0);
		for (int i = 0; i < 6; i++) {
			float r = flyk_cpu_bf16_to_f32(c1[i]);
			float o = flyk_cpu_bf16_to_f32(c2[i]);

			if (i >= 4) {
				assert_true(isnan(r) && isnan(o));
				continue;
			}
			assert_true(r == o);
		}
		/* row 0, col 0: 32 products of max * max scaled 2^8 * 2^-8 */
		float mx = fp4 ? 6.0f : 448.0f;
		assert_true(flyk_cpu_bf16_to_f32(c1[0]) ==
			    flyk_cpu_round(32.0f * mx * mx, FLY_DT_BF16));
		/* row 1, col 0: -32 max^2 2^-16 + 32 max^2 */
		assert_true(flyk_cpu_bf16_to_f32(c1[2]) ==
			    flyk_cpu_round(32.0f * mx * mx * (1.0f - 0x1p-16f),
					   FLY_DT_BF16));
	}
	B->close(dev);
}

static void test_case_errors(void **state)
{
	struct flyk_device *dev = dev_open();
	struct flyk_case *c = NULL;
	/* not an attention shape (hkv and d missing): refused */
	struct fly_problem p = prob(FLY_OP_ATTENTION, FLY_DT_FP16, 0, 0, 1, 2,
				    3, 4);
	struct fly_problem g = prob(FLY_OP_GEMM, FLY_DT_FP16, FLY_LAYOUT_NT, 0,
				    2, 2, 2, 0);
	struct fly_problem t = prob(FLY_OP_TOPK, FLY_DT_FP32, 0, 0, 1, 5, 6,
				    0);

	assert_int_equal(B->case_new(dev, &p, 1, &c), -EINVAL);
	assert_int_equal(B->case_new(dev, &g, 1, &c), -EOPNOTSUPP);
	assert_int_equal(B->case_new(dev, &t, 1, &c), -EINVAL);
	/* dims whose product overflows are refused, not allocated short */
	struct fly_problem huge = prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0,
				       INT64_MAX / 2, 4, 0, 0);
	assert_int_equal(B->case_new(dev, &huge, 1, &c), -ENOMEM);
	struct fly_problem hg = prob(FLY_OP_GEMM, FLY_DT_FP32, FLY_LAYOUT_NT,
				     0, INT64_MAX / 2, 4, 4, 0);
	assert_int_equal(B->case_new(dev, &hg, 1, &c), -ENOMEM);
	assert_null(c);
	B->case_free(NULL);
	B->close(dev);
}

/* ---------------------------------------------------------- attention */

static struct fly_problem attn_prob(uint32_t dt, uint32_t flags,
				    const int64_t *dims)
{
	struct fly_problem p = { FLY_OP_ATTENTION, dt, 0, flags, { 0 } };

	memcpy(p.dims, dims, 6 * sizeof(int64_t));
	return p;
}

/* Issue 16: odd lengths (1, 17, 1000), decode (sq = 1), GQA 1/4/8, d
 * 64/128/256, causal and not, sq > skv causal (rows that see no key), bf16
 * and fp16: every point of attn_blocked against attn_ref through the
 * case (O and LSE checked, both NaN-poisoned before each run). */
static void test_attention_all_variants(void **state)
{
	struct flyk_device *dev = dev_open();
	static const int64_t shapes[][6] = {
		/* b, sq, skv, hq, hkv, d */
		{ 1, 1, 1, 1, 1, 64 },	     { 2, 17, 17, 4, 1, 128 },
		{ 1, 1, 1000, 8, 1, 64 },    { 1, 1000, 1000, 4, 4, 64 },
		{ 1, 17, 1000, 8, 2, 256 },  { 2, 1000, 17, 4, 1, 128 },
		{ 1, 77, 130, 6, 3, 64 },
	};
	uint64_t seed = 90;

	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		for (uint32_t f = 0; f <= FLY_F_CAUSAL; f += FLY_F_CAUSAL) {
			struct fly_problem p = attn_prob(
				i % 2 ? FLY_DT_FP16 : FLY_DT_BF16, f,
				shapes[i]);

			assert_true(run_all_points(dev, &p, seed++) >= 2);
		}
	B->close(dev);
}

/* sq > skv, causal: rows i < sq - skv see no key -- O exactly 0 and lse
 * -inf from attn_blocked; the check catches a finite lse there, a wrong
 * O, a wrong lse elsewhere, and NaN left by the poison. */
static void test_attention_masked_rows(void **state)
{
	struct flyk_device *dev = dev_open();
	static const int64_t dims[6] = { 1, 40, 16, 2, 1, 64 };
	struct fly_problem p = attn_prob(FLY_DT_BF16, FLY_F_CAUSAL, dims);
	const struct flyk_variant *blk =
		flyk_variant_find(B, FLY_OP_ATTENTION, "attn_blocked");
	int64_t pt[3] = { 16, 64, 2 };
	struct flyk_case *c = NULL;
	uint16_t *o;
	float *lse;
	double err;

	assert_non_null(blk);
	assert_int_equal(blk->feasible(dev, &p, pt), 0);
	assert_int_equal(B->case_new(dev, &p, 5, &c), 0);
	o = c->out;
	lse = c->out2;
	assert_int_equal(B->case_poison(c), 0);
	assert_int_equal(blk->launch(dev, &p, pt, &c->args, NULL), 0);
	assert_int_equal(B->case_check(c, &err), 0);
	for (int64_t h = 0; h < 2; h++)
		for (int64_t i = 0; i < 40; i++) {
			float l = lse[h * 40 + i];

			if (i < 40 - 16) {
				assert_true(isinf(l) && l < 0);
				for (int64_t x = 0; x < 64; x++)
					assert_int_equal(
						o[(i * 2 + h) * 64 + x], 0);
			} else {
				assert_true(isfinite(l));
			}
		}
	lse[3] = 0.0f; /* a row that sees no key */
	assert_int_equal(B->case_check(c, &err), -EDOM);
	lse[3] = -INFINITY;
	lse[39] += 0.01f;
	assert_int_equal(B->case_check(c, &err), -EDOM);
	lse[39] -= 0.01f;
	assert_int_equal(blk->launch(dev, &p, pt, &c->args, NULL), 0);
	assert_int_equal(B->case_check(c, &err), 0);
	o[(39 * 2 + 1) * 64 + 5] ^= 0x0400; /* an exponent bit */
	assert_int_equal(B->case_check(c, &err), -EDOM);
	assert_int_equal(B->case_poison(c), 0);
	assert_int_equal(B->case_check(c, &err), -EDOM);
	B->case_free(c);
	B->close(dev);
}

/* Caller strides: q, k and v slices of one packed [b, s, hq + 2 hkv, d]
 * tensor, O into rows padded by one head.  attn_ref on the strided views
 * equals attn_ref on dense copies bit for bit; attn_blocked agrees within
 * the tolerance and writes nothing in the padding. */
static void test_attention_strides(void **state)
{
	struct flyk_device *dev = dev_open();
	enum { NB = 2, S = 33, HQ = 4, HKV = 2, D = 64, HT = HQ + 2 * HKV };
	static const int64_t dims[6] = { NB, S, S, HQ, HKV, D };
	struct fly_problem p = attn_prob(FLY_DT_BF16, FLY_F_CAUSAL, dims);
	const struct flyk_variant *ref =
		flyk_variant_find(B, FLY_OP_ATTENTION, "attn_ref");
	const struct flyk_variant *blk =
		flyk_variant_find(B, FLY_OP_ATTENTION, "attn_blocked");
	size_t npk = (size_t)NB * S * HT * D, no = (size_t)NB * S * HQ * D;
	size_t nop = (size_t)NB * S * (HQ + 1) * D;
	uint16_t *pk = malloc(npk * 2), *q = malloc(no * 2);
	uint16_t *k = malloc(no / 2 * 2), *v = malloc(no / 2 * 2);
	uint16_t *od = malloc(no * 2), *os = malloc(nop * 2);
	float ld[NB * HQ * S], ls[NB * HQ * S];
	union flyk_args a;
	int64_t pt[3] = { 16, 64, 2 };

	assert_true(pk && q && k && v && od && os);
	for (size_t i = 0; i < npk; i++)
		pk[i] = flyk_cpu_f32_to_bf16((float)((i * 7919) % 201) / 100.f -
					     1.f);
	for (size_t b = 0; b < NB; b++)
		for (size_t t = 0; t < S; t++)
			for (size_t h = 0; h < HT; h++)
				for (size_t x = 0; x < D; x++) {
					uint16_t e =
						pk[((b * S + t) * HT + h) * D + x];

					if (h < HQ)
						q[((b * S + t) * HQ + h) * D + x] = e;
					else if (h < HQ + HKV)
						k[((b * S + t) * HKV + h - HQ) * D +
						  x] = e;
					else
						v[((b * S + t) * HKV + h - HQ -
						   HKV) * D + x] = e;
				}
	memset(&a, 0, sizeof(a));
	a.attention.q = q;
	a.attention.k = k;
	a.attention.v = v;
	a.attention.o = od;
	a.attention.lse = ld;
	a.attention.scale = 0.125f;
	assert_int_equal(ref->launch(dev, &p, NULL, &a, NULL), 0);
	a.attention.q = pk;
	a.attention.k = pk + HQ * D;
	a.attention.v = pk + (HQ + HKV) * D;
	a.attention.o = os;
	a.attention.lse = ls;
	for (int i = 0; i < 3; i++) {
		int64_t st[3] = { S * HT * D, HT * D, D };
		int64_t so[3] = { S * (HQ + 1) * D, (HQ + 1) * D, D };

		a.attention.q_stride[i] = a.attention.k_stride[i] =
			a.attention.v_stride[i] = st[i];
		a.attention.o_stride[i] = so[i];
	}
	memset(os, 0x7f, nop * 2);
	assert_int_equal(ref->launch(dev, &p, NULL, &a, NULL), 0);
	for (size_t r = 0; r < (size_t)NB * S; r++) {
		assert_memory_equal(os + r * (HQ + 1) * D, od + r * HQ * D,
				    (size_t)HQ * D * 2);
		assert_int_equal(os[r * (HQ + 1) * D + HQ * D], 0x7f7f);
	}
	assert_memory_equal(ls, ld, sizeof(ls));
	memset(os, 0x7f, nop * 2);
	memset(ls, 0xff, sizeof(ls));
	assert_int_equal(blk->feasible(dev, &p, pt), 0);
	assert_int_equal(blk->launch(dev, &p, pt, &a, NULL), 0);
	for (size_t r = 0; r < (size_t)NB * S; r++) {
		for (size_t x = 0; x < (size_t)HQ * D; x++) {
			float g = flyk_cpu_bf16_to_f32(os[r * (HQ + 1) * D + x]);
			float w = flyk_cpu_bf16_to_f32(od[r * HQ * D + x]);

			assert_true(fabsf(g - w) <= fabsf(w) / 64 + 4e-3f);
		}
		for (size_t x = 0; x < D; x++)
			assert_int_equal(os[r * (HQ + 1) * D + HQ * D + x],
					 0x7f7f);
	}
	for (size_t i = 0; i < (size_t)NB * HQ * S; i++)
		assert_true(fabsf(ls[i] - ld[i]) <= 1e-3f * fmaxf(1.f, fabsf(ld[i])));
	free(pk);
	free(q);
	free(k);
	free(v);
	free(od);
	free(os);
	B->close(dev);
}

/* ---------------------------------------------------------- launch */

static void test_launch_and_default(void **state)
{
	struct flyk_device *dev = dev_open();
	enum { M = 3, N = 40 };
	struct fly_problem p = prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, M, N, 0,
				    0);
	static float x[M * N], w[N], y[M * N], yr[M * N];
	struct fly_decision d;

	for (int i = 0; i < M * N; i++)
		x[i] = (float)(i % 11) / 11.0f - 0.4f;
	for (int i = 0; i < N; i++)
		w[i] = 1.0f + (float)i / 100.0f;
	union flyk_args a = { .rmsnorm = { x, w, y, NULL, 1e-6f } };
	union flyk_args ar = { .rmsnorm = { x, w, yr, NULL, 1e-6f } };
	memset(&d, 0, sizeof(d));
	snprintf(d.variant, sizeof(d.variant), "rms_ref");
	d.status = FLY_STATUS_TUNED;
	assert_int_equal(flyk_launch(B, dev, &p, &d, &ar, NULL), 0);
	/* default: empty name, status DEFAULT */
	memset(&d, 0, sizeof(d));
	assert_int_equal(flyk_launch(B, dev, &p, &d, &a, NULL), 0);
	for (int i = 0; i < M * N; i++)
		assert_true(fabsf(y[i] - yr[i]) <= 1e-4f * (1 + fabsf(yr[i])));
	/* unknown variant: provisional (DEFAULT) runs the default, a tuned
	 * one is refused */
	snprintf(d.variant, sizeof(d.variant), "rms_nope");
	assert_int_equal(flyk_launch(B, dev, &p, &d, &a, NULL), 0);
	d.status = FLY_STATUS_TUNED;
	assert_int_equal(flyk_launch(B, dev, &p, &d, &a, NULL), -ENOENT);
	d.variant[0] = '\0';
	assert_int_equal(flyk_launch(B, dev, &p, &d, &a, NULL), -ENOENT);
	/* out of space, wrong count, infeasible */
	snprintf(d.variant, sizeof(d.variant), "rms_vec");
	d.nparams = 3;
	d.params[0] = 3;
	d.params[1] = 4;
	d.params[2] = 1;
	assert_int_equal(flyk_launch(B, dev, &p, &d, &a, NULL), -EINVAL);
	d.params[0] = 4;
	assert_int_equal(flyk_launch(B, dev, &p, &d, &a, NULL), 0);
	d.nparams = 2;
	assert_int_equal(flyk_launch(B, dev, &p, &d, &a, NULL), -EINVAL);
	d.nparams = 3;
	d.params[1] = 64; /* a chunk 16x larger than M */
	assert_int_equal(flyk_launch(B, dev, &p, &d, &a, NULL), -EINVAL);
	/* an op the variant is not for */
	struct fly_problem t = prob(FLY_OP_TOPK, FLY_DT_FP32, 0, 0, 1, 4, 2, 0);
	assert_int_equal(flyk_launch(B, dev, &t, &d, &a, NULL), -ENOENT);
	B->close(dev);
}

static void test_default_per_op(void **state)
{
	struct flyk_device *dev = dev_open();
	struct fly_problem ps[] = {
		prob(FLY_OP_RMSNORM, FLY_DT_BF16, 0, FLY_F_RESIDUAL, 1, 1, 0, 0),
		prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 4096, 4096, 0, 0),
		prob(FLY_OP_TOPK, FLY_DT_FP32, 0, 0, 1, 1, 1, 0),
		prob(FLY_OP_TOPK, FLY_DT_FP16, 0, 0, 64, 4096, 64, 0),
		prob(FLY_OP_TOPK, FLY_DT_FP16, 0, 0, 64, 4096, 65, 0),
		prob(FLY_OP_GEMM, FLY_DT_FP32, FLY_LAYOUT_NT, 0, 1, 7, 13, 0),
		prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NN, FLY_F_BIAS, 1024,
		     1024, 1024, 0),
		prob(FLY_OP_GROUPED_GEMM, FLY_DT_FP32, FLY_LAYOUT_NT, 0, 8, 3,
		     4, 5),
	};
	static const char *want[] = { "rms_vec", "rms_vec", "topk_heap",
				      "topk_heap", "topk_select",
				      "gemm_blocked", "gemm_blocked",
				      "ggemm_blocked" };
	struct fly_problem bad = prob(FLY_OP_ATTENTION, FLY_DT_FP16, 0, 0, 1,
				      1, 1, 1);
	struct fly_decision d;

	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
		const struct flyk_variant *v;

		assert_int_equal(flyk_default(B, dev, &ps[i], &d), 0);
		assert_string_equal(d.variant, want[i]);
		assert_int_equal(d.status, FLY_STATUS_DEFAULT);
		v = flyk_variant_find(B, ps[i].op, d.variant);
		assert_non_null(v);
		assert_false(v->is_reference);
		assert_int_equal(d.nparams, v->nparams);
		assert_int_equal(v->feasible(dev, &ps[i], d.params), 0);
	}
	/* the big rmsnorm gets the documented mid point */
	assert_int_equal(flyk_default(B, dev, &ps[1], &d), 0);
	assert_int_equal(d.params[0], 8);
	assert_int_equal(d.params[1], 16);
	assert_int_equal(d.params[2], flyk_cpu_cores(dev) >= 4 ? 4 :
			 flyk_cpu_cores(dev) >= 2 ? 2 : 1);
	/* without a device (the daemon's decide path): the host's cores */
	assert_int_equal(flyk_cpu_cores(NULL), flyk_cpu_cores(dev));
	assert_int_equal(flyk_default(B, NULL, &ps[1], &d), 0);
	assert_string_equal(d.variant, "rms_vec");
	assert_int_equal(d.params[2], flyk_cpu_cores(dev) >= 4 ? 4 :
			 flyk_cpu_cores(dev) >= 2 ? 2 : 1);
	assert_int_equal(flyk_default(B, dev, &bad, &d), -EOPNOTSUPP);
	B->close(dev);
}

/* ---------------------------------------------------------- faulty */

static void test_faulty_gated(void **state)
{
	struct flyk_device *dev = dev_open();
	struct fly_problem p = prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 2, 9, 0,
				    0);
	const struct flyk_variant *crash, *hang, *wrong;
	int64_t one[1] = { 1 };
	struct flyk_case *c = NULL;
	struct fly_decision d;
	double us, err;

	crash = flyk_variant_find(B, FLY_OP_RMSNORM, "test_crash");
	hang = flyk_variant_find(B, FLY_OP_RMSNORM, "test_hang");
	wrong = flyk_variant_find(B, FLY_OP_RMSNORM, "test_wrong");
	assert_non_null(crash);
	assert_non_null(hang);
	assert_non_null(wrong);
	unsetenv("FLYK_TESTING_FAULTS");
	assert_int_equal(crash->feasible(dev, &p, one), -EINVAL);
	assert_int_equal(hang->feasible(dev, &p, one), -EINVAL);
	assert_int_equal(wrong->feasible(dev, &p, one), -EINVAL);
	setenv("FLYK_TESTING_FAULTS", "crashy,hangover,wrong", 1);
	assert_int_equal(crash->feasible(dev, &p, one), -EINVAL);
	assert_int_equal(hang->feasible(dev, &p, one), -EINVAL);
	assert_int_equal(wrong->feasible(dev, &p, one), 0);
	setenv("FLYK_TESTING_FAULTS", "crash,hang", 1);
	assert_int_equal(crash->feasible(dev, &p, one), 0);
	assert_int_equal(hang->feasible(dev, &p, one), 0);
	assert_int_equal(wrong->feasible(dev, &p, one), -EINVAL);
	/* the default never picks a test variant */
	assert_int_equal(flyk_default(B, dev, &p, &d), 0);
	assert_int_not_equal(strncmp(d.variant, "test_", 5), 0);
	/* a wrong answer is caught by the checker */
	setenv("FLYK_TESTING_FAULTS", "wrong", 1);
	assert_int_equal(B->case_new(dev, &p, 3, &c), 0);
	assert_int_equal(B->case_poison(c), 0);
	assert_int_equal(B->case_time(c, wrong, one, &us), 0);
	assert_int_equal(B->case_check(c, &err), -EDOM);
	unsetenv("FLYK_TESTING_FAULTS");
	assert_int_equal(B->case_time(c, wrong, one, &us), -EINVAL);
	B->case_free(c);
	B->close(dev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backend_identity),
		cmocka_unit_test(test_fingerprint_stable),
		cmocka_unit_test(test_conversions),
		cmocka_unit_test(test_parallel_pool),
		cmocka_unit_test(test_rmsnorm_all_variants),
		cmocka_unit_test(test_topk_all_variants),
		cmocka_unit_test(test_topk_ties_deterministic),
		cmocka_unit_test(test_gemm_all_variants),
		cmocka_unit_test(test_gemm_bf16_rounding_exact),
		cmocka_unit_test(test_grouped_cases),
		cmocka_unit_test(test_grouped_uneven_offsets),
		cmocka_unit_test(test_check_catches_poison_and_wrong),
		cmocka_unit_test(test_fp8_decode),
		cmocka_unit_test(test_mqa_all_variants),
		cmocka_unit_test(test_mqa_windows),
		cmocka_unit_test(test_mqa_nan_propagates),
		cmocka_unit_test(test_mqa_check_catches),
		cmocka_unit_test(test_mx_decode),
		cmocka_unit_test(test_scaled_all_variants),
		cmocka_unit_test(test_scaled_errors),
		cmocka_unit_test(test_scaled_edge_blocks),
		cmocka_unit_test(test_attention_all_variants),
		cmocka_unit_test(test_attention_masked_rows),
		cmocka_unit_test(test_attention_strides),
		cmocka_unit_test(test_case_errors),
		cmocka_unit_test(test_launch_and_default),
		cmocka_unit_test(test_default_per_op),
		cmocka_unit_test(test_faulty_gated),
	};

	unsetenv("FLYK_TESTING_FAULTS");
	return cmocka_run_group_tests_name("kernels_cpu", tests, NULL, NULL);
}
