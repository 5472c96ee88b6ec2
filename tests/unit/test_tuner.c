/*
 * test_tuner.c -- the tuning method against a fake backend with
 * deterministic fake timings and a fake clock (no processes, no loop).
 *
 * The fake backend: op rmsnorm; variant "ref" (reference), "a" (param bs
 * in {1,2,3,4}), "b" (params x in {1,2,3}, y in {10,20}; x == 2 is
 * infeasible).  Each test sets the timing of each point through
 * fake_set(); unset points take 100 us.  Every case_time advances the fake
 * clock by fake_tick seconds.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flyk.h"
#include "store.h"
#include "tuner.h"
#include "worker.h"

struct flyk_device {
	int unused;
};
struct flyk_case {
	const struct flyk_variant *last_v;
	int64_t last_p[FLY_PARAMS_MAX];
};

struct fake_point {
	const char *variant;
	int64_t p0;
	int64_t p1;        /* -1: any */
	double us;
	int wrong;
	int launch_err;
	double first_us; /* > 0: the first run's time (a first launch) */
	int calls;
};

static struct fake_point fake_pts[16];
static int fake_npts;
static double fake_clock;
static double fake_tick;
static double fake_load_s; /* added to the clock by a test's first run */
static int fake_first_of_op; /* run()'s opts.first_of_op */
static double fake_setup_s; /* run()'s opts.job_start: this long ago */
static double fake_check_s; /* each check's compare, fake seconds */
static int fake_wall_us; /* a run advances the clock by its own time */
static double fake_jitter; /* relative amplitude */
static double fake_drift;  /* relative slow-down per run (a warming GPU) */
static int fake_runs;
static uint32_t fake_rng;
static int fake_nstart;
static int fake_ntrial;
static struct flyd_trial fake_starts[512];

static const int64_t bs_vals[] = { 1, 2, 3, 4 };
static const int64_t x_vals[] = { 1, 2, 3 };
static const int64_t y_vals[] = { 10, 20 };

static int b_feasible(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params)
{
	if (params[0] == 2)
		return -ENOSPC;
	/* x == 3 needs at least 40 rows (only the bucket-floor test makes
	 * a problem that small). */
	return params[0] == 3 && p->dims[0] < 40 ? -EINVAL : 0;
}

static struct flyk_variant fake_variants[] = {
	{ .name = "ref", .op = FLY_OP_RMSNORM, .dtypes = 1u << FLY_DT_FP32,
	  .flags = FLY_F_RESIDUAL, .is_reference = 1 },
	{ .name = "a", .op = FLY_OP_RMSNORM, .dtypes = 1u << FLY_DT_FP32,
	  .flags = FLY_F_RESIDUAL, .nparams = 1,
	  .params = { { "bs", 4, bs_vals } } },
	{ .name = "b", .op = FLY_OP_RMSNORM, .dtypes = 1u << FLY_DT_FP32,
	  .flags = 0, .nparams = 2,
	  .params = { { "x", 3, x_vals }, { "y", 2, y_vals } },
	  .feasible = b_feasible },
	{ .name = "other_op", .op = FLY_OP_TOPK, .dtypes = 1u << FLY_DT_FP32 },
};

static struct fake_point *fake_find(const struct flyk_variant *v,
				    const int64_t *p)
{
	for (int i = 0; i < fake_npts; i++) {
		struct fake_point *f = &fake_pts[i];

		if (strcmp(f->variant, v->name) != 0)
			continue;
		if (v->nparams >= 1 && f->p0 != p[0])
			continue;
		if (v->nparams >= 2 && f->p1 >= 0 && f->p1 != p[1])
			continue;
		return f;
	}
	return NULL;
}

static void fake_set(const char *variant, int64_t p0, int64_t p1, double us,
		     int wrong, int launch_err)
{
	fake_pts[fake_npts++] = (struct fake_point){ variant, p0, p1, us,
						     wrong, launch_err, 0, 0 };
}

/* The last point set takes @p us on its first run. */
static void fake_first(double us)
{
	fake_pts[fake_npts - 1].first_us = us;
}

static int fake_case_time(struct flyk_case *c, const struct flyk_variant *v,
			  const int64_t *params, double *us)
{
	struct fake_point *f = fake_find(v, params);
	double base = f ? f->us : 100.0, r;

	if (f != NULL && f->calls++ == 0 && f->first_us > 0)
		base = f->first_us;

	fake_clock += fake_tick;
	if (fake_runs == 0)
		fake_clock += fake_load_s; /* the worker's first-use costs */
	c->last_v = v;
	memcpy(c->last_p, params, sizeof(int64_t) * v->nparams);
	if (f != NULL && f->launch_err)
		return -EIO;
	fake_rng = fake_rng * 1103515245u + 12345u;
	r = (double)((fake_rng >> 8) & 0xffff) / 65535.0 * 2.0 - 1.0;
	*us = base * (1.0 + fake_jitter * r) * (1.0 + fake_drift * fake_runs++);
	if (fake_wall_us)
		fake_clock += *us * 1e-6;
	return 0;
}

static int fake_case_poison(struct flyk_case *c)
{
	return 0;
}

static int fake_case_check(struct flyk_case *c, double *max_err)
{
	struct fake_point *f = fake_find(c->last_v, c->last_p);

	fake_clock += fake_check_s;
	*max_err = 0.0;
	if (f != NULL && f->wrong) {
		*max_err = 0.5;
		return -EDOM;
	}
	return 0;
}

static const struct flyk_backend fake_backend = {
	.name = "fake",
	.kind = FLYK_BACKEND_CPU,
	.variants = fake_variants,
	.nvariants = sizeof(fake_variants) / sizeof(fake_variants[0]),
	.case_poison = fake_case_poison,
	.case_time = fake_case_time,
	.case_check = fake_case_check,
};

static double fake_now(void *ctx)
{
	return fake_clock;
}

static void on_start(void *ctx, const struct flyd_trial *t)
{
	if (fake_nstart < 512)
		fake_starts[fake_nstart] = *t;
	fake_nstart++;
}

static void on_trial(void *ctx, const struct flyd_trial *t)
{
	fake_ntrial++;
}

static int setup(void **state)
{
	fake_npts = 0;
	fake_clock = 1000.0;
	fake_tick = 0.001;
	fake_load_s = 0.0;
	fake_first_of_op = 0;
	fake_setup_s = 0.0;
	fake_check_s = 0.0;
	fake_wall_us = 0;
	fake_jitter = 0.0;
	fake_drift = 0.0;
	fake_runs = 0;
	for (size_t i = 0; i < sizeof(fake_variants) / sizeof(fake_variants[0]);
	     i++) {
		fake_variants[i].successor = NULL; /* a failed test's leftover */
		fake_variants[i].prefer_on_tie = 0;
		fake_variants[i].enumerate = NULL;
		if (strcmp(fake_variants[i].name, "a") == 0)
			fake_variants[i].feasible = NULL;
	}
	fake_rng = 42;
	fake_nstart = 0;
	fake_ntrial = 0;
	return 0;
}

/* A job on rmsnorm/fp32 with the residual flag (only "ref" and "a"
 * support it) or without (also "b"). */
static void job_init(struct flyd_tune_job *j, int residual)
{
	memset(j, 0, sizeof(*j));
	snprintf(j->key, sizeof(j->key), "rmsnorm/fp32/m=64,n=256%s",
		 residual ? "/residual" : "");
	j->problem.op = FLY_OP_RMSNORM;
	j->problem.dtype = FLY_DT_FP32;
	j->problem.flags = residual ? FLY_F_RESIDUAL : 0;
	j->problem.dims[0] = 64;
	j->problem.dims[1] = 256;
	j->budget_s = 60;
	j->margin = 0.03;
}

static int run(const struct flyd_tune_job *j, struct flyd_tune_result *r)
{
	struct flyd_tuner_opts o;
	struct flyk_case c = { 0 };

	flyd_tuner_opts_init(&o);
	o.first_of_op = fake_first_of_op;
	if (fake_setup_s > 0)
		o.job_start = fake_clock - fake_setup_s;
	o.now = fake_now;
	o.on_start = on_start;
	o.on_trial = on_trial;
	return flyd_tuner_run(&fake_backend, NULL, &c, j, &o, r);
}

static const struct flyd_trial *find_trial(const struct flyd_tune_result *r,
					   const char *v, int64_t p0)
{
	for (size_t i = 0; i < r->ntrials; i++)
		if (strcmp(r->trials[i].variant, v) == 0 &&
		    (r->trials[i].nparams == 0 || r->trials[i].params[0] == p0))
			return &r->trials[i];
	return NULL;
}

/* Job @p j tuned under 20 jitter seeds (from @p seed) picks @p variant
 * at first param @p p0 every time. */
static void expect_winner_20(const struct flyd_tune_job *j, uint32_t seed,
			     const char *variant, int64_t p0)
{
	for (int run_i = 0; run_i < 20; run_i++) {
		struct flyd_tune_result r;

		fake_rng = seed + 31u * (uint32_t)run_i;
		assert_int_equal(run(j, &r), 0);
		assert_int_equal(r.winner.status, FLY_STATUS_TUNED);
		assert_string_equal(r.winner.variant, variant);
		assert_int_equal(r.winner.nparams, 1);
		assert_int_equal(r.winner.params[0], p0);
		flyd_tune_result_fini(&r);
	}
}

/* Near ties within a variant: its fastest point, every time (the points'
 * value order is no preference; it used to pick bs=2 here). */
static void test_near_tie_in_variant_fastest(void **state)
{
	struct flyd_tune_job j;

	job_init(&j, 1);
	/* bs=3 is 0.9% faster than bs=2 and 0.5% faster than bs=4. */
	fake_set("a", 1, -1, 20.0, 0, 0);
	fake_set("a", 2, -1, 10.09, 0, 0);
	fake_set("a", 3, -1, 10.0, 0, 0);
	fake_set("a", 4, -1, 10.05, 0, 0);
	fake_jitter = 0.0005;
	expect_winner_20(&j, 7u, "a", 3);
}

/* Near ties between variants: the earlier variant (declared order is a
 * preference), and of it the fastest point, though a later variant's
 * point is faster still within the margin. */
static void test_near_tie_earlier_variant(void **state)
{
	struct flyd_tune_job j;

	job_init(&j, 0); /* "a" and "b" */
	fake_set("a", 1, -1, 10.2, 0, 0);
	fake_set("a", 2, -1, 10.1, 0, 0);
	fake_set("a", 3, -1, 10.3, 0, 0);
	fake_set("a", 4, -1, 10.4, 0, 0);
	fake_set("b", 1, -1, 10.0, 0, 0); /* 1% faster: within 3% */
	fake_set("b", 3, -1, 12.0, 0, 0);
	fake_jitter = 0.0005;
	expect_winner_20(&j, 11u, "a", 2);
	/* Beyond the margin the later variant wins. */
	fake_npts = 0;
	fake_set("a", 1, -1, 10.5, 0, 0);
	fake_set("a", 2, -1, 10.5, 0, 0);
	fake_set("a", 3, -1, 10.5, 0, 0);
	fake_set("a", 4, -1, 10.5, 0, 0);
	fake_set("b", 1, -1, 10.0, 0, 0); /* 5% faster */
	fake_set("b", 3, -1, 12.0, 0, 0);
	struct flyd_tune_result r;
	assert_int_equal(run(&j, &r), 0);
	assert_string_equal(r.winner.variant, "b");
	assert_int_equal(r.winner.params[0], 1);
	flyd_tune_result_fini(&r);
}

/* A variant that asks for near-ties (flyk_variant.prefer_on_tie: the
 * attention op's cuDNN, declared after our kernels) takes them from the
 * earlier one, either way round; beyond the margin the fastest wins.  On
 * the H200 attn_wgmma took b8 s2048 h16 on a 1% tie, 0.93x of cuDNN in
 * the bench. */
/* Job @p j under 20 jitter seeds picks variant "b" at x=1 every time. */
static void expect_b1(const struct flyd_tune_job *j, uint32_t seed)
{
	for (int i = 0; i < 20; i++) {
		struct flyd_tune_result r;

		fake_rng = seed + 31u * (uint32_t)i;
		assert_int_equal(run(j, &r), 0);
		assert_string_equal(r.winner.variant, "b");
		assert_int_equal(r.winner.params[0], 1);
		flyd_tune_result_fini(&r);
	}
}

static void test_prefer_on_tie(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 0); /* "a" and "b" */
	fake_variants[2].prefer_on_tie = 1;
	fake_set("a", 1, -1, 10.0, 0, 0);
	fake_set("b", 1, -1, 10.2, 0, 0); /* 2% slower: within 3% */
	fake_set("b", 3, -1, 10.25, 0, 0);
	fake_jitter = 0.0005;
	expect_b1(&j, 7u);
	fake_npts = 0;
	fake_set("a", 1, -1, 10.2, 0, 0);
	fake_set("b", 1, -1, 10.0, 0, 0);
	fake_set("b", 3, -1, 12.0, 0, 0);
	expect_b1(&j, 9u);
	fake_npts = 0;
	fake_set("a", 1, -1, 10.0, 0, 0);
	fake_set("b", 1, -1, 10.5, 0, 0); /* 5% slower */
	fake_set("b", 3, -1, 12.0, 0, 0);
	assert_int_equal(run(&j, &r), 0);
	assert_string_equal(r.winner.variant, "a");
	assert_int_equal(r.winner.params[0], 1);
	flyd_tune_result_fini(&r);
	fake_variants[2].prefer_on_tie = 0;
}

static void test_fastest_wins_beyond_margin(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	fake_set("a", 1, -1, 10.0, 0, 0);
	fake_set("a", 2, -1, 10.0, 0, 0);
	fake_set("a", 3, -1, 9.0, 0, 0);
	fake_set("a", 4, -1, 10.0, 0, 0);
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.winner.params[0], 3);
	assert_true(r.winner.median_us > 8.9 && r.winner.median_us < 9.1);
	flyd_tune_result_fini(&r);
}

static void test_incumbent_margin(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	fake_set("a", 1, -1, 9.8, 0, 0);  /* 2% faster than the incumbent */
	fake_set("a", 2, -1, 10.0, 0, 0); /* the incumbent */
	fake_set("a", 3, -1, 10.5, 0, 0);
	fake_set("a", 4, -1, 10.5, 0, 0);
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.winner.params[0], 1); /* no incumbent: fastest */
	flyd_tune_result_fini(&r);

	j.has_incumbent = 1;
	snprintf(j.incumbent.variant, sizeof(j.incumbent.variant), "a");
	j.incumbent.nparams = 1;
	j.incumbent.params[0] = 2;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.winner.params[0], 2); /* kept: not 3% faster */
	flyd_tune_result_fini(&r);

	fake_pts[0].us = 9.0; /* now 10% faster: replaces the incumbent */
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.winner.params[0], 1);
	flyd_tune_result_fini(&r);
}

static void test_early_rejection(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;
	const struct flyd_trial *t;

	job_init(&j, 1);
	fake_set("a", 1, -1, 10.0, 0, 0);
	fake_set("a", 2, -1, 18.0, 0, 0);  /* 1.8x: survives 1, not 3 */
	fake_set("a", 3, -1, 12.0, 0, 0);  /* 1.2x: survives 3, not 10 */
	fake_set("a", 4, -1, 10.2, 0, 0);
	assert_int_equal(run(&j, &r), 0);
	t = find_trial(&r, "a", 2);
	assert_non_null(t);
	assert_int_equal(t->outcome, FLYD_OUT_REJECTED);
	assert_int_equal(t->reps, 3);
	assert_non_null(strstr(t->reason, "1.80x best after 3 reps"));
	t = find_trial(&r, "a", 3);
	assert_non_null(t);
	assert_int_equal(t->outcome, FLYD_OUT_REJECTED);
	assert_int_equal(t->reps, 10);
	assert_non_null(strstr(t->reason, "x best after 10 reps"));
	t = find_trial(&r, "a", 1);
	assert_int_equal(t->outcome, FLYD_OUT_OK);
	assert_true(t->reps >= 10);
	assert_int_equal(r.winner.params[0], 1);
	flyd_tune_result_fini(&r);
}

/* A candidate far behind the fastest warm-up seen so far is rejected
 * before any timed rep; one far behind only candidates measured AFTER it
 * is not (nothing to compare with yet) and goes after its first rep, as
 * does one within the warm-up cut but over twice the best. */
static void test_warm_up_rejection(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;
	const struct flyd_trial *t;

	job_init(&j, 1);
	fake_set("a", 1, -1, 50.0, 0, 0);  /* first: nothing to beat */
	fake_set("a", 2, -1, 10.0, 0, 0);
	fake_set("a", 3, -1, 40.0, 0, 0);  /* 4x the fastest warm-up */
	fake_set("a", 4, -1, 29.0, 0, 0);  /* 2.9x: to the 1-rep round */
	assert_int_equal(run(&j, &r), 0);
	t = find_trial(&r, "a", 3);
	assert_non_null(t);
	assert_int_equal(t->outcome, FLYD_OUT_REJECTED);
	assert_int_equal(t->reps, 0);
	assert_non_null(strstr(t->reason, "4.00x best on its warm-up"));
	t = find_trial(&r, "a", 1);
	assert_int_equal(t->outcome, FLYD_OUT_REJECTED);
	assert_int_equal(t->reps, 1);
	t = find_trial(&r, "a", 4);
	assert_int_equal(t->outcome, FLYD_OUT_REJECTED);
	assert_int_equal(t->reps, 1);
	assert_non_null(strstr(t->reason, "2.90x best after 1 reps"));
	assert_int_equal(r.winner.params[0], 2);
	flyd_tune_result_fini(&r);
}

/* The runs of point @p p0 of variant @p v that were started. */
static int starts_of(const char *v, int64_t p0)
{
	int n = 0;

	for (int i = 0; i < fake_nstart && i < 512; i++)
		n += strcmp(fake_starts[i].variant, v) == 0 &&
		     fake_starts[i].params[0] == p0;
	return n;
}

/* A check run far behind (twice the warm-up cut and 5 ms more) costs no
 * warm-up; one slow only because it is a first launch keeps its warm-up
 * and its reps. */
static void test_first_run_rejection(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;
	const struct flyd_trial *t;

	job_init(&j, 1);
	fake_set("a", 1, -1, 10.0, 0, 0);
	fake_set("a", 2, -1, 20000.0, 0, 0); /* 2000x: out on its check */
	fake_set("a", 3, -1, 11.0, 0, 0);
	fake_first(4000.0); /* within a first launch's slack */
	fake_set("a", 4, -1, 40.0, 0, 0);    /* 4x: out on its warm-up */
	assert_int_equal(run(&j, &r), 0);
	t = find_trial(&r, "a", 2);
	assert_non_null(t);
	assert_int_equal(t->outcome, FLYD_OUT_REJECTED);
	assert_int_equal(t->reps, 0);
	assert_non_null(strstr(t->reason, "2000.00x best on its first run"));
	assert_int_equal(starts_of("a", 2), 1);
	t = find_trial(&r, "a", 3);
	assert_non_null(t);
	assert_int_not_equal(t->reps, 0);
	assert_true(starts_of("a", 3) >= 2 + 3);
	t = find_trial(&r, "a", 4);
	assert_int_equal(t->outcome, FLYD_OUT_REJECTED);
	assert_non_null(strstr(t->reason, "on its warm-up"));
	assert_int_equal(starts_of("a", 4), 2);
	flyd_tune_result_fini(&r);
}

static void test_wrong_and_error(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;
	const struct flyd_trial *t;

	job_init(&j, 1);
	fake_set("a", 1, -1, 10.0, 0, 0);
	fake_set("a", 2, -1, 1.0, 1, 0); /* fastest, but wrong */
	fake_set("a", 3, -1, 1.0, 0, 1); /* launch error */
	fake_set("a", 4, -1, 10.0, 0, 0);
	assert_int_equal(run(&j, &r), 0);
	t = find_trial(&r, "a", 2);
	assert_int_equal(t->outcome, FLYD_OUT_WRONG);
	assert_non_null(strstr(t->reason, "max err 0.5"));
	assert_int_equal(t->reps, 0);
	t = find_trial(&r, "a", 3);
	assert_int_equal(t->outcome, FLYD_OUT_ERROR);
	assert_int_equal(r.winner.params[0], 1);
	flyd_tune_result_fini(&r);
}

static void test_no_correct_candidate(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	for (int64_t bs = 1; bs <= 4; bs++)
		fake_set("a", bs, -1, 10.0, 1, 0);
	assert_int_equal(run(&j, &r), -ENOENT);
	assert_int_equal(r.rc, -ENOENT);
	assert_int_equal(r.ntrials, 4);
	flyd_tune_result_fini(&r);
}

static void test_infeasible_and_product_order(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;
	static const int64_t want[][2] = { { 1, 10 }, { 1, 20 }, { 3, 10 },
					   { 3, 20 } };
	int k = 0;

	job_init(&j, 0); /* no residual: "b" supports it too */
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.ninfeasible, 2);  /* x == 2, both y */
	assert_int_equal(r.ncandidates, 4 + 4);
	assert_int_equal(r.ntrials, 8);
	for (size_t i = 0; i < r.ntrials; i++)
		assert_false(strcmp(r.trials[i].variant, "b") == 0 &&
			     r.trials[i].params[0] == 2);
	/* The first start of each candidate: variant order, then params
	 * lexicographic in declared value order. */
	for (int i = 0; i < fake_nstart && k < 8; i++) {
		if (i > 0 && fake_starts[i].nparams == fake_starts[k - 1].nparams &&
		    memcmp(fake_starts[i].params, fake_starts[k - 1].params,
			   sizeof(int64_t) * fake_starts[i].nparams) == 0 &&
		    strcmp(fake_starts[i].variant, fake_starts[k - 1].variant) == 0)
			continue;
		if (k < 4) {
			assert_string_equal(fake_starts[i].variant, "a");
			assert_int_equal(fake_starts[i].params[0], k + 1);
		} else {
			assert_string_equal(fake_starts[i].variant, "b");
			assert_int_equal(fake_starts[i].params[0], want[k - 4][0]);
			assert_int_equal(fake_starts[i].params[1], want[k - 4][1]);
		}
		fake_starts[k] = fake_starts[i];
		k++;
	}
	assert_int_equal(k, 8);
	flyd_tune_result_fini(&r);
}

/* Regression: a winner tuned at the bucket's M (64) was refused at launch
 * for smaller M of the same bucket (33..63) when its feasibility depended
 * on M.  Points infeasible at the bucket's floor are not candidates. */
static void test_feasible_across_bucket(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 0);
	j.problem_lo = j.problem;
	j.problem_lo.dims[0] = 33;
	assert_int_equal(run(&j, &r), 0);
	/* x == 2 (both y) as before, and x == 3 (both y) at m = 33. */
	assert_int_equal(r.ninfeasible, 4);
	for (size_t i = 0; i < r.ntrials; i++)
		assert_false(strcmp(r.trials[i].variant, "b") == 0 &&
			     r.trials[i].params[0] == 3);
	flyd_tune_result_fini(&r);
}

static int a_feasible(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params)
{
	return 0;
}

/* An exact-shape job (issue 22): rmsnorm m=100 (its bucket is m=128),
 * the tuner given the shape without FLY_F_EXACT, as build_job does.  The
 * fake backend's default point for it is "a" bs=3 (flyk_default: no
 * rms_vec here, the first variant, its middle value). */
static void exact_job_init(struct flyd_tune_job *j)
{
	job_init(j, 1);
	snprintf(j->key, sizeof(j->key),
		 "rmsnorm/fp32/m=100,n=256/residual+exact");
	j->problem.dims[0] = 100;
	j->problem_lo = j->problem;
	fake_variants[1].feasible = a_feasible; /* flyk_default needs it */
}

static const struct flyd_trial *default_trial(const struct flyd_tune_result *r)
{
	return find_trial(r, "a", 3);
}

/* "No exact shape may end up slower than the vendor default on that
 * shape": the winner's median is never above the default point's, even
 * where the incumbent's margin would keep a slower incumbent, and the
 * default is measured first, so a budget that cuts the rest still has
 * it. */
static void test_issue_22_exact_never_slower_than_default(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;
	const struct flyd_trial *t;

	exact_job_init(&j);
	/* the incumbent a/2 is 1.5% slower than the default a/3: a bucket
	 * key keeps it (not 3% faster); the exact key takes the default */
	fake_set("a", 1, -1, 12.0, 0, 0);
	fake_set("a", 2, -1, 10.15, 0, 0);
	fake_set("a", 3, -1, 10.0, 0, 0);
	fake_set("a", 4, -1, 12.0, 0, 0);
	j.has_incumbent = 1;
	snprintf(j.incumbent.variant, sizeof(j.incumbent.variant), "a");
	j.incumbent.nparams = 1;
	j.incumbent.params[0] = 2;
	assert_int_equal(run(&j, &r), 0);
	t = default_trial(&r);
	assert_non_null(t);
	assert_int_equal(t->outcome, FLYD_OUT_OK);
	assert_string_equal(t->reason, "default");
	assert_int_equal(t->reps > 0, 1);
	assert_true(r.winner.median_us <= t->median_us);
	assert_int_equal(r.winner.params[0], 3);
	flyd_tune_result_fini(&r);
	/* the same job on its bucket key keeps the incumbent */
	snprintf(j.key, sizeof(j.key), "rmsnorm/fp32/m=128,n=256/residual");
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.winner.params[0], 2);
	flyd_tune_result_fini(&r);

	/* under jitter, whatever wins is never slower than the default */
	exact_job_init(&j);
	fake_jitter = 0.02;
	for (int i = 0; i < 20; i++) {
		fake_rng = 5u + 17u * (uint32_t)i;
		assert_int_equal(run(&j, &r), 0);
		t = default_trial(&r);
		assert_non_null(t);
		if (t->outcome == FLYD_OUT_OK)
			assert_true(r.winner.median_us <= t->median_us);
		flyd_tune_result_fini(&r);
	}

	/* a budget spent by the first check: the default was that check */
	exact_job_init(&j);
	fake_jitter = 0.0;
	j.budget_s = 0.0001;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.winner.status, FLY_STATUS_TUNED);
	assert_string_equal(r.winner.variant, "a");
	assert_int_equal(r.winner.params[0], 3);
	assert_true(r.nunmeasured > 0);
	flyd_tune_result_fini(&r);
	fake_variants[1].feasible = NULL;
}

static void test_excluded_skipped(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	fake_set("a", 2, -1, 1.0, 0, 0); /* would win */
	j.nexclude = 1;
	snprintf(j.exclude[0].variant, sizeof(j.exclude[0].variant), "a");
	j.exclude[0].nparams = 1;
	j.exclude[0].params[0] = 2;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.nexcluded, 1);
	assert_int_equal(r.ncandidates, 3);
	assert_null(find_trial(&r, "a", 2));
	for (int i = 0; i < fake_nstart && i < 512; i++)
		assert_false(fake_starts[i].params[0] == 2);
	assert_int_not_equal(r.winner.params[0], 2);
	flyd_tune_result_fini(&r);
}

static void test_reference_only_when_alone(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	assert_int_equal(run(&j, &r), 0);
	assert_null(find_trial(&r, "ref", 0)); /* "a" exists: ref checks */
	flyd_tune_result_fini(&r);

	job_init(&j, 1);
	for (uint32_t k = 0; k < 4; k++) {
		j.exclude[k].nparams = 1;
		snprintf(j.exclude[k].variant, sizeof(j.exclude[k].variant),
			 "a");
		j.exclude[k].params[0] = bs_vals[k];
	}
	j.nexclude = 4;
	/* "a" fully excluded but still a variant: ref is not a candidate. */
	assert_int_equal(run(&j, &r), -ENOENT);
	assert_int_equal(r.ncandidates, 0);
	flyd_tune_result_fini(&r);

	fake_variants[1].op = FLY_OP_TOPK; /* now "ref" is alone */
	job_init(&j, 1);
	assert_int_equal(run(&j, &r), 0);
	fake_variants[1].op = FLY_OP_RMSNORM;
	assert_int_equal(r.ncandidates, 1);
	assert_string_equal(r.winner.variant, "ref");
	flyd_tune_result_fini(&r);
}

static void test_budget_respected(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	fake_tick = 1.0; /* every run costs one fake second */
	j.budget_s = 5;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.budget_hit, 1);
	/* Checks (check + warm-up: 2 s each) start at 0 and 2 s; at 4 s the
	 * checks' 70% (3.5 s) is gone: bs=3 and bs=4 are never run.  The
	 * reps, interleaved: bs=1 at 4 s, bs=2 at 5 s, then the budget is
	 * gone (6 s).  Each has the one rep every checked candidate gets. */
	assert_int_equal(r.ncandidates, 4);
	assert_int_equal(r.nunmeasured, 2);
	assert_int_equal(r.ntrials, 2);
	assert_null(find_trial(&r, "a", 3));
	assert_null(find_trial(&r, "a", 4));
	for (size_t i = 0; i < r.ntrials; i++)
		assert_int_equal(r.trials[i].outcome, FLYD_OUT_OK);
	assert_int_equal(find_trial(&r, "a", 1)->reps, 1);
	assert_int_equal(find_trial(&r, "a", 2)->reps, 1);
	assert_true(r.tune_s > 5.5 && r.tune_s < 6.5);
	flyd_tune_result_fini(&r);

	job_init(&j, 1);
	j.budget_s = 1e6;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.budget_hit, 0);
	assert_int_equal(r.nunmeasured, 0);
	assert_int_equal(r.ntrials, 4);
	flyd_tune_result_fini(&r);
}

/* The worker's one-time costs for an op land in its first job's first
 * run (module loads: over 0.7 s of a 1 s budget for the first attention
 * job of a fresh daemon on the H200, which then measured 1 of its
 * candidates).  With first_of_op the budget counts from the end of the
 * first check: every candidate is measured, and tune_s still reports the
 * whole job.  Without it (a later job) the first check is charged. */
static void test_first_check_not_charged(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	fake_load_s = 0.9;
	fake_first_of_op = 1;
	j.budget_s = 1.0;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.ncandidates, 4);
	assert_int_equal(r.nunmeasured, 0);
	assert_int_equal(r.ntrials, 4);
	assert_true(r.tune_s >= 0.9);
	/* its share is reported (the worker logs it: first_s) */
	assert_true(r.first_s >= 0.9 && r.first_s < 0.9 + 0.01);
	flyd_tune_result_fini(&r);

	setup(NULL);
	job_init(&j, 1);
	fake_load_s = 0.9;
	j.budget_s = 1.0;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.nunmeasured, 3);
	flyd_tune_result_fini(&r);
}

/* A vendor variant's candidates cost 0.9 s to list (cuDNN builds an
 * execution plan per heuristic configuration to learn its workspace). */
static int slow_enumerate(const struct flyk_device *dev,
			  const struct fly_problem *p,
			  int64_t (*out)[FLY_PARAMS_MAX], int max)
{
	(void)dev;
	(void)p;
	fake_clock += 0.9;
	for (int i = 0; i < 4 && i < max; i++) {
		memset(out[i], 0, sizeof(out[i]));
		out[i][0] = bs_vals[i];
	}
	return max < 4 ? max : 4;
}

/* The budget counts from the end of the candidate list: on the H200 the
 * cuDNN plans built while listing attention's candidates took 1.4-3 s of
 * a later job's 1 s budget (not its first of the op), and the job measured
 * one of its 34 candidates (attn_wgmma at 0.67x of cuDNN's time, with
 * cuDNN never run).  tune_s still counts the whole job. */
static void test_listing_not_charged(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	fake_variants[1].enumerate = slow_enumerate;
	j.budget_s = 1.0;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.ncandidates, 4);
	assert_int_equal(r.nunmeasured, 0);
	assert_int_equal(r.ntrials, 4);
	assert_true(r.tune_s >= 0.9);
	/* the listing's share of tune_s is reported (the worker logs it) */
	assert_true(fabs(r.list_s - 0.9) < 1e-6);
	fake_variants[1].enumerate = NULL;
	flyd_tune_result_fini(&r);
}

/* The job's wall cap (job->max_s, from opts->job_start): the case's
 * setup and the candidate list count in it, and the budget is what is
 * left of it when that is less than budget_s.  On the H200 the first
 * attention key of a run listed cuDNN's plans for 0.76 s, then measured
 * for the whole 1.0 s budget: 1.95 s against the 1.5 s target. */
/* A fresh fake state and a job with budget 1.0 s and wall cap 1.35 s,
 * runs of @p tick s, its setup @p setup_s s before the tuner's start. */
static void capped(struct flyd_tune_job *j, double tick, double setup_s)
{
	setup(NULL);
	job_init(j, 1);
	fake_tick = tick;
	fake_setup_s = setup_s;
	j->budget_s = 1.0;
	j->max_s = 1.35;
}

static void test_job_cap(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	/* listing 0.9 s, runs 0.1 s each (check + warm-up: 0.2 s): without
	 * a cap the checks' 70% of 1.0 s takes all four */
	job_init(&j, 1);
	fake_variants[1].enumerate = slow_enumerate;
	fake_tick = 0.1;
	j.budget_s = 1.0;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.nunmeasured, 0);
	assert_int_equal(r.ntrials, 4);
	flyd_tune_result_fini(&r);

	/* cap 1.35 s: 0.45 s left after the list, checks within 0.315 s of
	 * it: two checked, each with its one rep, two never run */
	capped(&j, 0.1, 0.0);
	fake_variants[1].enumerate = slow_enumerate;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.nunmeasured, 2);
	assert_int_equal(r.ntrials, 2);
	assert_int_equal(r.budget_hit, 1);
	assert_int_equal(find_trial(&r, "a", 1)->reps, 1);
	assert_int_equal(find_trial(&r, "a", 2)->reps, 1);
	assert_true(r.tune_s < 1.35 + 0.25);
	flyd_tune_result_fini(&r);

	/* the setup counts: 1.2 s of it leaves 0.15 s, raised to the floor
	 * (a quarter of the budget, 0.25 s): checks within 0.175 s of it,
	 * so the first check (0.2 s with its warm-up) and its rep run,
	 * nothing else */
	capped(&j, 0.1, 1.2);
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.ntrials, 1);
	assert_int_equal(r.nunmeasured, 3);
	assert_string_equal(r.winner.variant, "a");
	flyd_tune_result_fini(&r);

	/* a cap long spent (a listing that compiled for 1.7 s on the H200,
	 * then measured one of its 10 candidates): a quarter of the budget
	 * still measures what was listed */
	capped(&j, 0.001, 5.0);
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.ntrials, 4);
	assert_int_equal(r.nunmeasured, 0);
	assert_int_equal(r.winner.status, FLY_STATUS_TUNED);
	flyd_tune_result_fini(&r);
	/* ... and no more than that: at 0.1 s a run, the checks stop at
	 * 0.175 s */
	capped(&j, 0.1, 5.0);
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.ntrials, 1);
	assert_true(r.tune_s < 0.25 + 0.2 + 1e-9);
	flyd_tune_result_fini(&r);

	/* the worker's first job of the op: its first check's one-time
	 * costs (0.9 s) are not the key's, in the cap as in the budget */
	capped(&j, 0.001, 0.0);
	fake_load_s = 0.9;
	fake_first_of_op = 1;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.nunmeasured, 0);
	assert_int_equal(r.ntrials, 4);
	flyd_tune_result_fini(&r);
	fake_variants[1].enumerate = NULL;
}

/* Runs of @p s seconds each, the fake kernel timing itself the same:
 * the four points of "a" at 20 ms (a 9 ms MQA key on the H100 checked
 * 43 candidates in the checks' 70%, then their one rep each ran 0.3 s
 * past the 1.0 s budget: tune_s 1.31 s). */
static void runs_of(double s)
{
	fake_tick = s;
	for (int64_t p = 1; p <= 4; p++)
		fake_set("a", p, -1, s * 1e6, 0, 0);
}

/* No rep ends past the budget: the checks stop where the one rep each
 * checked candidate is owed would, with room for a next candidate at the
 * warm-up cut (3x the best: a 0.06 s check and rep): 0.02 s a run,
 * budget 0.18 s, two checks, their reps, then reps while one more,
 * counted DRIFT_ALLOW (5%) longer than its last run, ends within the
 * budget: 6 (7 when a rep was counted at its last run's time, the 7th
 * ending at the budget exactly; 0.16 s at a budget of 0.1 s before the
 * owed reps were counted). */
static void test_issue_14_reps_fit_budget(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	runs_of(0.02);
	j.budget_s = 0.18;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.budget_hit, 1);
	assert_int_equal(r.nunmeasured, 2);
	assert_int_equal(r.ntrials, 2);
	assert_int_equal(find_trial(&r, "a", 1)->reps +
				 find_trial(&r, "a", 2)->reps,
			 6);
	assert_true(r.tune_s <= 0.18 + 1e-9);
	assert_int_equal(r.winner.status, FLY_STATUS_TUNED);
	flyd_tune_result_fini(&r);
}

/* A check's compare is time too (0.03 s here against 0.02 s runs): the
 * last check's wall time less its runs' is part of what one more costs
 * (estimated at its runs alone, a third check fitted a 0.27 s budget). */
static void test_issue_14_check_cost_counted(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	runs_of(0.02);
	fake_check_s = 0.03;
	j.budget_s = 0.27;
	assert_int_equal(run(&j, &r), 0);
	assert_true(r.tune_s <= 0.27 + 1e-9);
	assert_int_equal(r.ntrials, 2);
	assert_int_equal(r.winner.status, FLY_STATUS_TUNED);
	flyd_tune_result_fini(&r);
}

/* Every budget from @p from to @p to ms in steps of @p step: a fresh
 * tuner whose runs advance the clock by their own time, the points set by
 * @p points, run (@p residual: job_init's); each must pick a winner.
 * @return how many budgets the measurements ended past. */
static int budgets_over(int residual, int from, int to, int step,
			void (*points)(void))
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;
	int over = 0;

	for (int b = from; b <= to; b += step) {
		setup(NULL);
		job_init(&j, residual);
		fake_tick = 0.0;
		fake_wall_us = 1;
		points();
		j.budget_s = b * 1e-3;
		assert_int_equal(run(&j, &r), 0);
		if (r.tune_s > j.budget_s + 1e-9) {
			print_error("budget %.3f s: tune_s %.4f s (over %.4f)\n",
				    j.budget_s, r.tune_s, r.over_s);
			over++;
		}
		assert_int_equal(r.winner.status, FLY_STATUS_TUNED);
		flyd_tune_result_fini(&r);
	}
	return over;
}

/* Checks differ: a slower candidate's check and its owed rep cost more
 * than the last check of a fast one.  Here the third candidate runs at
 * 2.5x the others (inside the warm-up cut): the room left for one more
 * check is judged at the cut, 3x the fastest run, not by the last check
 * (judged by the last, the slow point's 27 ms check came after 12 ms
 * ones and a 0.066 s budget ended at 0.096 s; the MQA keys on the H100
 * ended 4-23 ms past theirs).  Every budget from 40 to 200 ms. */
static void slow_check_points(void)
{
	fake_check_s = 0.002;
	fake_set("a", 1, -1, 10000.0, 0, 0);
	fake_set("a", 2, -1, 10000.0, 0, 0);
	fake_set("a", 3, -1, 25000.0, 0, 0);
	fake_set("a", 4, -1, 10000.0, 0, 0);
}

static void test_issue_14_slow_check_counted(void **state)
{
	assert_int_equal(budgets_over(1, 40, 200, 2, slow_check_points), 0);
}

/* The result says how far the measurements ended past their budget
 * (over_s: the daemon's budget reserve learns from it, reserve.h) and the
 * setup charged (setup_s): 0.02 s runs, a 0.01 s setup and a 0.03 s
 * budget leave 0.02 s, and the first candidate's check and its one owed
 * rep take 0.04 s; within a budget, over_s is 0. */
static void test_issue_14_over_reported(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	runs_of(0.02);
	fake_setup_s = 0.01;
	j.budget_s = 0.03;
	assert_int_equal(run(&j, &r), 0);
	assert_float_equal(r.setup_s, 0.01, 1e-9);
	assert_true(r.over_s > 0.015);
	assert_float_equal(r.over_s, r.tune_s - r.list_s - (0.03 - 0.01),
			   1e-9);
	flyd_tune_result_fini(&r);

	setup(NULL);
	job_init(&j, 1);
	runs_of(0.02);
	fake_setup_s = 0.01;
	assert_int_equal(run(&j, &r), 0);
	assert_float_equal(r.setup_s, 0.01, 1e-9);
	assert_float_equal(r.over_s, 0.0, 0);
	flyd_tune_result_fini(&r);
}

/* The worker's one-time costs in its first check of the op (0.9 s) are
 * not what that candidate's rep will cost: the checks still reach every
 * candidate (with them counted, one was checked). */
static void test_issue_14_first_run_not_owed(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	runs_of(0.02);
	fake_load_s = 0.9;
	fake_first_of_op = 1;
	j.budget_s = 1.0;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.ntrials, 4);
	assert_int_equal(r.nunmeasured, 0);
	flyd_tune_result_fini(&r);
}

/* The case's setup is the job's time too: 0.5 s of it leaves the
 * measurements 0.9 s of a 1.4 s budget, two checks (with all of it, four;
 * the MQA keys' 0.03-0.07 s of setup came on top of the budget), never
 * less than a quarter. */
static void test_issue_14_setup_charged(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	runs_of(0.1);
	fake_setup_s = 0.5;
	j.budget_s = 1.4;
	assert_int_equal(run(&j, &r), 0);
	assert_true(r.tune_s + 0.5 <= 1.4 + 1e-9);
	assert_int_equal(r.ntrials, 2);
	flyd_tune_result_fini(&r);

	setup(NULL);
	job_init(&j, 1);
	runs_of(0.1);
	fake_setup_s = 3.0;
	j.budget_s = 1.0;
	assert_int_equal(run(&j, &r), 0);
	assert_true(r.tune_s <= 0.25 + 1e-9); /* the floor, and no more */
	assert_int_equal(r.ntrials, 1);
	assert_int_equal(r.winner.status, FLY_STATUS_TUNED);
	flyd_tune_result_fini(&r);
}

/* Runs of @p v/@p p0 the tuner started that were neither its check nor a
 * timed rep: its warm-ups. */
static int warmups_of(const struct flyd_tune_result *r, const char *v,
		      int64_t p0)
{
	int n = 0;

	for (int i = 0; i < fake_nstart && i < 512; i++)
		n += strcmp(fake_starts[i].variant, v) == 0 &&
		     fake_starts[i].params[0] == p0;
	return n - 1 - (int)find_trial(r, v, p0)->reps;
}

/* A check run of 2 ms or more is the candidate's warm-up: a fourth 7 ms
 * launch per candidate on the H200's largest attention keys was time
 * the budget did not give to reps.  Shorter ones still get theirs. */
static void test_long_check_is_warmup(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	fake_set("a", 1, -1, 5000.0, 0, 0);
	fake_set("a", 2, -1, 5100.0, 0, 0);
	fake_set("a", 3, -1, 1990.0, 0, 0);
	fake_set("a", 4, -1, 5200.0, 0, 0);
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(warmups_of(&r, "a", 1), 0);
	assert_int_equal(warmups_of(&r, "a", 2), 0);
	assert_int_equal(warmups_of(&r, "a", 3), 1);
	assert_string_equal(r.winner.variant, "a");
	assert_int_equal(r.winner.params[0], 3);
	flyd_tune_result_fini(&r);
}

/* A GPU slowing as a key runs (the H100's long MQA keys: each owed rep
 * ran 2.7-3.2% longer than its check had, 0.41 s of them, bench/README):
 * the room the checks leave for the owed reps allows for it.  Six
 * ~5 ms candidates, each run 0.2% slower than the one before, every
 * budget from 20 to 300 ms: the measurements end within it (counted at
 * their checks' times, the measurements of 8 of those budgets ended up to
 * 0.1 ms past it). */
static void owed_drift_points(void)
{
	fake_check_s = 0.0005;
	fake_drift = 0.002;
	fake_set("a", 1, -1, 5000.0, 0, 0);
	fake_set("a", 2, -1, 5100.0, 0, 0);
	fake_set("a", 3, -1, 5200.0, 0, 0);
	fake_set("a", 4, -1, 5050.0, 0, 0);
	fake_set("b", 1, -1, 5150.0, 0, 0);
	fake_set("b", 3, -1, 5250.0, 0, 0);
}

static void test_issue_14_owed_drift(void **state)
{
	assert_int_equal(budgets_over(0, 20, 300, 1, owed_drift_points), 0);
}

/* A GPU slowing as it warms: every run 0.3% slower than the one before.
 * bs=3 is 2% faster than bs=1 but comes after it; timed one candidate
 * after the other, bs=1 got the cooler runs and won. */
static void test_drift_interleaved(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 1);
	fake_set("a", 1, -1, 10.2, 0, 0);
	fake_set("a", 2, -1, 40.0, 0, 0);
	fake_set("a", 3, -1, 10.0, 0, 0);
	fake_set("a", 4, -1, 40.0, 0, 0);
	fake_drift = 0.003;
	assert_int_equal(run(&j, &r), 0);
	assert_string_equal(r.winner.variant, "a");
	assert_int_equal(r.winner.params[0], 3);
	assert_int_equal(find_trial(&r, "a", 1)->reps,
			 find_trial(&r, "a", 3)->reps);
	/* Interleaved: after the checks, the two contenders' runs alternate
	 * (bs=1 then bs=3, then bs=3 then bs=1, ...). */
	for (int i = 0; i + 1 < fake_nstart && i < 512 - 1; i++)
		if (fake_starts[i].params[0] == 1 && i >= 8)
			assert_true(fake_starts[i - 1].params[0] == 3 ||
				    fake_starts[i + 1].params[0] == 3);
	flyd_tune_result_fini(&r);
}

/* A superseded variant (its successor has candidates here) is checked
 * after the others and only within 40% of the budget; without its
 * successor it keeps its declared place. */
static void test_superseded_checked_late(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 0); /* "a" and "b" both support it */
	fake_set("a", 1, -1, 10.0, 0, 0);
	fake_set("b", 1, -1, 12.0, 0, 0);
	fake_variants[1].successor = "b";
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.nunmeasured, 0);
	/* b's four feasible points (x = 1, 3; y = 10, 20), check and warm-up
	 * each, before any of a's. */
	for (int i = 0; i < 8; i++)
		assert_string_equal(fake_starts[i].variant, "b");
	assert_string_equal(fake_starts[8].variant, "a");
	assert_int_equal(r.ntrials, 8);
	/* The decision keeps the declared order: a = 10 us wins. */
	assert_string_equal(r.winner.variant, "a");
	flyd_tune_result_fini(&r);

	/* One fake second a run, a budget of 10 s: b's checks take 8 s, so
	 * none of a's starts within 40% of it. */
	setup(state);
	fake_variants[1].successor = "b";
	fake_tick = 1.0;
	job_init(&j, 0);
	j.budget_s = 10;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.nunmeasured, 4);
	assert_int_equal(r.budget_hit, 1);
	assert_null(find_trial(&r, "a", 1));
	assert_string_equal(r.winner.variant, "b");
	flyd_tune_result_fini(&r);

	/* A successor with no candidate here: declared order, a first. */
	setup(state);
	fake_variants[1].successor = "other_op";
	job_init(&j, 0);
	assert_int_equal(run(&j, &r), 0);
	assert_string_equal(fake_starts[0].variant, "a");
	fake_variants[1].successor = NULL;
	flyd_tune_result_fini(&r);
}

static void test_all_trials_present(void **state)
{
	struct flyd_tune_job j;
	struct flyd_tune_result r;

	job_init(&j, 0);
	fake_set("a", 1, -1, 10.0, 0, 0);
	fake_set("a", 2, -1, 50.0, 0, 0);
	fake_set("a", 3, -1, 1.0, 1, 0);
	fake_set("a", 4, -1, 1.0, 0, 1);
	fake_jitter = 0.05;
	assert_int_equal(run(&j, &r), 0);
	assert_int_equal(r.ntrials, r.ncandidates);
	assert_int_equal(fake_ntrial, (int)r.ntrials);
	for (size_t i = 0; i < r.ntrials; i++)
		for (size_t k = i + 1; k < r.ntrials; k++)
			assert_false(flyd_trial_same(&r.trials[i],
						     r.trials[k].variant,
						     r.trials[k].params,
						     r.trials[k].nparams));
	for (size_t i = 0; i < r.ntrials; i++)
		if (r.trials[i].outcome == FLYD_OUT_OK)
			assert_true(r.trials[i].reps >= 10 &&
				    r.trials[i].reps <= 30 &&
				    r.trials[i].median_us > 0);
	assert_true(fake_nstart >= (int)r.ntrials);
	assert_true(r.tune_s > 0);
	assert_string_equal(r.key, j.key);
	flyd_tune_result_fini(&r);
}

static void test_seed_stable(void **state)
{
	assert_true(flyd_tuner_seed("rmsnorm/fp32/m=64,n=256") ==
		    flyd_tuner_seed("rmsnorm/fp32/m=64,n=256"));
	assert_true(flyd_tuner_seed("a") != flyd_tuner_seed("b"));
	assert_true(flyd_tuner_seed("") == 14695981039346656037ull);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_near_tie_in_variant_fastest, setup),
		cmocka_unit_test_setup(test_near_tie_earlier_variant, setup),
		cmocka_unit_test_setup(test_fastest_wins_beyond_margin, setup),
		cmocka_unit_test_setup(test_incumbent_margin, setup),
		cmocka_unit_test_setup(test_early_rejection, setup),
		cmocka_unit_test_setup(test_warm_up_rejection, setup),
		cmocka_unit_test_setup(test_first_run_rejection, setup),
		cmocka_unit_test_setup(test_wrong_and_error, setup),
		cmocka_unit_test_setup(test_no_correct_candidate, setup),
		cmocka_unit_test_setup(test_infeasible_and_product_order, setup),
		cmocka_unit_test_setup(test_feasible_across_bucket, setup),
		cmocka_unit_test_setup(test_excluded_skipped, setup),
		cmocka_unit_test_setup(test_reference_only_when_alone, setup),
		cmocka_unit_test_setup(test_budget_respected, setup),
		cmocka_unit_test_setup(test_first_check_not_charged, setup),
		cmocka_unit_test_setup(test_listing_not_charged, setup),
		cmocka_unit_test_setup(test_prefer_on_tie, setup),
		cmocka_unit_test_setup(test_job_cap, setup),
		cmocka_unit_test_setup(test_long_check_is_warmup, setup),
		cmocka_unit_test_setup(test_drift_interleaved, setup),
		cmocka_unit_test_setup(test_superseded_checked_late, setup),
		cmocka_unit_test_setup(test_all_trials_present, setup),
		cmocka_unit_test_setup(
			test_issue_22_exact_never_slower_than_default, setup),
		cmocka_unit_test_setup(test_issue_14_reps_fit_budget, setup),
		cmocka_unit_test_setup(test_issue_14_owed_drift, setup),
		cmocka_unit_test_setup(test_issue_14_setup_charged, setup),
		cmocka_unit_test_setup(test_issue_14_first_run_not_owed, setup),
		cmocka_unit_test_setup(test_issue_14_check_cost_counted, setup),
		cmocka_unit_test_setup(test_issue_14_slow_check_counted, setup),
		cmocka_unit_test_setup(test_issue_14_over_reported, setup),
		cmocka_unit_test(test_seed_stable),
	};

	return cmocka_run_group_tests_name("tuner", tests, NULL, NULL);
}
