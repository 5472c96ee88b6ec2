/*
 * test_decide.c -- the tuned-results map and the neighbour search: same
 * op/dtype/layout/flags only, log2 distance, ties by key order, the
 * default when there is no neighbour.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "decide.h"
#include "flyk.h"

static struct fly_problem prob(uint32_t op, uint32_t dtype, uint32_t layout,
			       uint32_t flags, int64_t d0, int64_t d1,
			       int64_t d2)
{
	struct fly_problem p;

	memset(&p, 0, sizeof(p));
	p.op = op;
	p.dtype = dtype;
	p.layout = layout;
	p.flags = flags;
	p.dims[0] = d0;
	p.dims[1] = d1;
	p.dims[2] = d2;
	return p;
}

static struct fly_decision dec(const char *variant, int64_t param)
{
	struct fly_decision d;

	memset(&d, 0, sizeof(d));
	d.status = FLY_STATUS_TUNED;
	snprintf(d.variant, sizeof(d.variant), "%s", variant);
	d.nparams = 1;
	d.params[0] = param;
	d.median_us = 1.5;
	return d;
}

static void put(struct flyd_rmap *m, const char *key, struct fly_problem p,
		const char *variant, int64_t param)
{
	struct fly_decision d = dec(variant, param);

	assert_int_equal(flyd_rmap_put(m, key, &p, &d), 0);
}

static void test_distance(void **state)
{
	struct fly_problem a = prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NT,
				    0, 1024, 256, 64);
	struct fly_problem b = prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NT,
				    0, 256, 512, 64);
	struct fly_problem c = prob(FLY_OP_RMSNORM, FLY_DT_BF16, 0, 0, 64, 8,
				    0);

	(void)state;
	/* |log2(4)| + |log2(1/2)| + 0 */
	assert_true(fabs(flyd_problem_distance(&a, &b) - 3.0) < 1e-12);
	assert_true(fabs(flyd_problem_distance(&b, &a) - 3.0) < 1e-12);
	assert_true(flyd_problem_distance(&a, &a) == 0.0);
	/* Different dims present: not comparable. */
	assert_true(flyd_problem_distance(&a, &c) < 0.0);
}

static void test_get_put_del(void **state)
{
	struct flyd_rmap *m;
	struct fly_problem p = prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 64,
				    128, 0);
	struct fly_decision d = dec("v2", 7);
	const struct fly_decision *g;

	(void)state;
	assert_int_equal(flyd_rmap_new(&m), 0);
	assert_null(flyd_rmap_get(m, "k"));
	put(m, "k", p, "v1", 1);
	g = flyd_rmap_get(m, "k");
	assert_non_null(g);
	assert_string_equal(g->variant, "v1");
	assert_int_equal(flyd_rmap_put(m, "k", &p, &d), 1);
	assert_string_equal(flyd_rmap_get(m, "k")->variant, "v2");
	assert_int_equal(flyd_rmap_count(m), 1);
	assert_int_equal(flyd_rmap_del(m, "k"), 0);
	assert_int_equal(flyd_rmap_del(m, "k"), FLY_E_NOTFOUND);
	assert_null(flyd_rmap_get(m, "k"));
	assert_int_equal(flyd_rmap_count(m), 0);
	flyd_rmap_free(m);
}

static void test_neighbour_same_class_only(void **state)
{
	struct flyd_rmap *m;
	struct fly_problem q = prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NT,
				    0, 1024, 1024, 1024);
	struct fly_decision out;
	char nkey[FLY_KEY_MAX];

	(void)state;
	assert_int_equal(flyd_rmap_new(&m), 0);
	/* Exact dims but another dtype, layout, flag set or op: never. */
	put(m, "a-dtype", prob(FLY_OP_GEMM, FLY_DT_FP16, FLY_LAYOUT_NT, 0,
			       1024, 1024, 1024), "x", 1);
	put(m, "b-layout", prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NN, 0,
				1024, 1024, 1024), "x", 2);
	put(m, "c-flags", prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NT,
			       FLY_F_BIAS, 1024, 1024, 1024), "x", 3);
	put(m, "d-op", prob(FLY_OP_TOPK, FLY_DT_BF16, FLY_LAYOUT_NT, 0, 1024,
			    1024, 1024), "x", 4);
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, nkey),
			 FLY_E_NOTFOUND);
	/* A far one of the same class is chosen over all of them. */
	put(m, "z-far", prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NT, 0, 16,
			     16, 16), "far", 5);
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, nkey), 0);
	assert_string_equal(nkey, "z-far");
	assert_string_equal(out.variant, "far");
	assert_int_equal(out.provisional, 1);
	assert_int_equal(out.status, FLY_STATUS_TUNED);
	flyd_rmap_free(m);
}

static void test_neighbour_distance_and_ties(void **state)
{
	struct flyd_rmap *m;
	struct fly_problem q = prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 256,
				    1024, 0);
	struct fly_decision out;
	char nkey[FLY_KEY_MAX];

	(void)state;
	assert_int_equal(flyd_rmap_new(&m), 0);
	/* distance 3 */
	put(m, "k-m2048", prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 2048, 1024,
			       0), "far", 1);
	/* distance 1 (m halves), and 1 (n doubles): a tie */
	put(m, "k-n2048", prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 256, 2048,
			       0), "tie-b", 2);
	put(m, "k-m128", prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 128, 1024,
			      0), "tie-a", 3);
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, nkey), 0);
	/* "k-m128" < "k-n2048" */
	assert_string_equal(nkey, "k-m128");
	assert_string_equal(out.variant, "tie-a");
	/* Insertion order does not matter: remove and re-add. */
	assert_int_equal(flyd_rmap_del(m, "k-m128"), 0);
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, nkey), 0);
	assert_string_equal(nkey, "k-n2048");
	put(m, "k-m128", prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 128, 1024,
			      0), "tie-a", 3);
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, nkey), 0);
	assert_string_equal(nkey, "k-m128");
	/* A closer one wins regardless of key order. */
	put(m, "a-close", prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 320, 1024,
			       0), "close", 4);
	put(m, "zz-closer", prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 257,
				 1024, 0), "closer", 5);
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, nkey), 0);
	assert_string_equal(nkey, "zz-closer");
	/* The key itself is never its own neighbour. */
	assert_int_equal(flyd_rmap_nearest(m, "zz-closer", &q, &out, nkey),
			 0);
	assert_string_equal(nkey, "a-close");
	flyd_rmap_clear(m);
	assert_int_equal(flyd_rmap_count(m), 0);
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, nkey),
			 FLY_E_NOTFOUND);
	flyd_rmap_free(m);
}

static void test_many_entries(void **state)
{
	struct flyd_rmap *m;
	char key[64];
	struct fly_decision out;
	struct fly_problem q = prob(FLY_OP_TOPK, FLY_DT_FP32, 0, 0, 3000, 64,
				    8);

	(void)state;
	assert_int_equal(flyd_rmap_new(&m), 0);
	for (int i = 1; i <= 4000; i++) {
		snprintf(key, sizeof(key), "topk/fp32/m=%d,n=64,k=8", i);
		put(m, key, prob(FLY_OP_TOPK, FLY_DT_FP32, 0, 0, i, 64, 8),
		    "v", i);
	}
	assert_int_equal(flyd_rmap_count(m), 4000);
	for (int i = 1; i <= 4000; i += 97) {
		snprintf(key, sizeof(key), "topk/fp32/m=%d,n=64,k=8", i);
		assert_int_equal(flyd_rmap_get(m, key)->params[0], i);
	}
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, NULL), 0);
	assert_int_equal(out.params[0], 3000);
	flyd_rmap_free(m);
}

/* issue 19: the compact entry (packed dims and params, interned variant)
 * gives back every field exactly as put: negative, zero-holed and 64-bit
 * params, nparams beyond the last non-zero param, a median that is not a
 * short decimal, status and provisional; a replaced entry whose values
 * change size, and one moved to another class, leave no trace of the
 * old record (nearest searches its new class only). */
static void test_issue_19_compact_roundtrip(void **state)
{
	struct flyd_rmap *m;
	struct fly_decision d, out;
	const struct fly_decision *g;
	struct fly_problem p = prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NT,
				    FLY_F_BIAS, INT64_MAX, 1, 3);
	struct fly_problem q = prob(FLY_OP_GEMM, FLY_DT_BF16, FLY_LAYOUT_NT,
				    FLY_F_BIAS, INT64_MAX, 1, 3);
	struct fly_problem other = prob(FLY_OP_TOPK, FLY_DT_FP32, 0, 0, 5, 6,
					7);
	char nkey[FLY_KEY_MAX], longkey[FLY_KEY_MAX];
	const int64_t params[FLY_PARAMS_MAX] = {-1,	   0, INT64_MIN, 0,
						INT64_MAX, 127, 128, 0};

	(void)state;
	assert_int_equal(flyd_rmap_new(&m), 0);
	memset(&d, 0, sizeof(d));
	d.status = FLY_STATUS_PENDING;
	d.provisional = 1;
	snprintf(d.variant, sizeof(d.variant), "%s",
		 "a_variant_name_of_thirty_nine_bytes_xyz");
	d.nparams = FLY_PARAMS_MAX;
	memcpy(d.params, params, sizeof(params));
	d.median_us = 0.1 + 0.2;
	assert_int_equal(flyd_rmap_put(m, "k1", &p, &d), 0);
	g = flyd_rmap_get(m, "k1");
	assert_non_null(g);
	assert_int_equal(g->status, FLY_STATUS_PENDING);
	assert_int_equal(g->provisional, 1);
	assert_string_equal(g->variant, d.variant);
	assert_int_equal(g->nparams, FLY_PARAMS_MAX);
	assert_memory_equal(g->params, params, sizeof(params));
	assert_true(g->median_us == 0.1 + 0.2);
	assert_int_equal(g->generation, 0);
	/* nparams 3, params past it 0: the same 3 come back, the rest 0 */
	d.nparams = 3;
	memset(d.params, 0, sizeof(d.params));
	d.params[2] = 9;
	assert_int_equal(flyd_rmap_put(m, "k1", &p, &d), 1);
	g = flyd_rmap_get(m, "k1");
	assert_int_equal(g->nparams, 3);
	assert_int_equal(g->params[0], 0);
	assert_int_equal(g->params[2], 9);
	assert_int_equal(g->params[7], 0);
	/* a key of FLY_KEY_MAX - 1 bytes; the dims come back through the
	 * neighbour search (distance 0 to its own problem) */
	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	assert_int_equal(flyd_rmap_put(m, longkey, &p, &d), 0);
	q.dims[1] = 2; /* k1 and longkey both at distance 1: key order */
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, nkey), 0);
	assert_string_equal(nkey, "k1");
	assert_int_equal(flyd_rmap_nearest(m, "k1", &q, &out, nkey), 0);
	assert_string_equal(nkey, longkey);
	assert_int_equal(out.provisional, 1);
	assert_int_equal(out.params[2], 9);
	/* k1 moves to another class: no longer a neighbour in the old */
	assert_int_equal(flyd_rmap_put(m, "k1", &other, &d), 1);
	assert_int_equal(flyd_rmap_nearest(m, longkey, &q, &out, nkey),
			 FLY_E_NOTFOUND);
	assert_int_equal(flyd_rmap_nearest(m, "q", &other, &out, nkey), 0);
	assert_string_equal(nkey, "k1");
	assert_int_equal(flyd_rmap_count(m), 2);
	assert_int_equal(flyd_rmap_del(m, longkey), 0);
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, nkey),
			 FLY_E_NOTFOUND);
	flyd_rmap_free(m);
}

/* issue 19: deleting from the middle of a class keeps every other entry
 * reachable by key and by the neighbour search. */
static void test_issue_19_class_delete_middle(void **state)
{
	struct flyd_rmap *m;
	struct fly_decision out;
	char key[64], nkey[FLY_KEY_MAX];
	struct fly_problem q = prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 4, 1, 0);

	(void)state;
	assert_int_equal(flyd_rmap_new(&m), 0);
	for (int i = 1; i <= 100; i++) {
		snprintf(key, sizeof(key), "r%03d", i);
		put(m, key, prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 4, i, 0),
		    "v", i);
	}
	for (int i = 1; i <= 100; i += 2) {
		snprintf(key, sizeof(key), "r%03d", i);
		assert_int_equal(flyd_rmap_del(m, key), 0);
	}
	assert_int_equal(flyd_rmap_count(m), 50);
	for (int i = 2; i <= 100; i += 2) {
		snprintf(key, sizeof(key), "r%03d", i);
		assert_int_equal(flyd_rmap_get(m, key)->params[0], i);
	}
	/* n=1 was deleted: n=2 is the nearest */
	assert_int_equal(flyd_rmap_nearest(m, "q", &q, &out, nkey), 0);
	assert_string_equal(nkey, "r002");
	assert_int_equal(out.params[0], 2);
	flyd_rmap_free(m);
}

/* Regression: an entry of the map cost ~360 bytes of heap (a fixed
 * 96-byte key, a full fly_decision), which put the daemon at 73 MiB RSS
 * with 100,000 tuned keys; then ~250 bytes, 243 MiB of heap at 1M keys
 * against issue 19's 256 MiB RSS target.  A typical key now costs under
 * 128 bytes, bucket and class arrays included; the decisions come back
 * intact. */
static void test_entry_footprint(void **state)
{
	struct flyd_rmap *m;
	struct mallinfo2 a, b;
	char key[64];
	const int n = 20000;

	(void)state;
	assert_int_equal(flyd_rmap_new(&m), 0);
	a = mallinfo2();
	for (int i = 1; i <= n; i++) {
		snprintf(key, sizeof(key), "rmsnorm/fp32/m=4,n=%d", i);
		put(m, key, prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 4, i, 0),
		    i % 2 ? "rms_vec" : "rms_twopass", i);
	}
	b = mallinfo2();
	assert_true((b.uordblks - a.uordblks) / (size_t)n < 128);
	for (int i = 1; i <= n; i += 997) {
		const struct fly_decision *d;

		snprintf(key, sizeof(key), "rmsnorm/fp32/m=4,n=%d", i);
		d = flyd_rmap_get(m, key);
		assert_non_null(d);
		assert_string_equal(d->variant,
				    i % 2 ? "rms_vec" : "rms_twopass");
		assert_int_equal(d->params[0], i);
		assert_int_equal(d->nparams, 1);
		assert_true(d->median_us == 1.5);
		assert_int_equal(d->status, FLY_STATUS_TUNED);
	}
	flyd_rmap_free(m);
}

static void test_default_when_none(void **state)
{
	struct fly_problem p = prob(FLY_OP_RMSNORM, FLY_DT_FP32, 0, 0, 64,
				    128, 0);
	struct fly_decision d;

	(void)state;
	/* No backend: the empty default. */
	memset(&d, 0x5a, sizeof(d));
	assert_int_equal(flyd_decide_default(NULL, &p, &d), 0);
	assert_int_equal(d.status, FLY_STATUS_DEFAULT);
	assert_string_equal(d.variant, "");
	assert_int_equal(d.nparams, 0);
	/* The CPU backend names a real variant of the op. */
	assert_int_equal(flyd_decide_default(flyk_cpu_backend(), &p, &d), 0);
	assert_int_equal(d.status, FLY_STATUS_DEFAULT);
	assert_int_equal(d.provisional, 0);
	assert_non_null(flyk_variant_find(flyk_cpu_backend(), FLY_OP_RMSNORM,
					  d.variant));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_distance),
		cmocka_unit_test(test_get_put_del),
		cmocka_unit_test(test_neighbour_same_class_only),
		cmocka_unit_test(test_neighbour_distance_and_ties),
		cmocka_unit_test(test_many_entries),
		cmocka_unit_test(test_entry_footprint),
		cmocka_unit_test(test_issue_19_compact_roundtrip),
		cmocka_unit_test(test_issue_19_class_delete_middle),
		cmocka_unit_test(test_default_when_none),
	};

	return cmocka_run_group_tests_name("decide", tests, NULL, NULL);
}
