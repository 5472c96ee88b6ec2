/*
 * tuner.c -- the tuning method (see tuner.h for the steps and their
 * thresholds): candidates in stable order, numerics on poisoned outputs,
 * early rejection, successive halving, budget, near-tie-stable decision
 * (between variants by their order, within one by the median).
 *
 * Owns: the per-call candidate table (freed before return) and the
 * result's trial array (the caller's after return).  Thread: caller's.
 * Invariant: every candidate gets exactly one trial, emitted through
 * on_trial and appended to the result in the same order.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fly_hash.h"
#include "fly_key.h"
#include "tuner.h"

/* One rep each first: on a large key the points at 1.5-3x (small tiles)
 * would otherwise take 3 reps each of the contenders' budget. */
#define REJECT0_REPS 1
#define REJECT0_X 2.0
#define REJECT1_REPS 3
#define REJECT1_X 1.5
#define REJECT2_REPS 10
#define REJECT2_X 1.15
#define NOISE_FRACTION 0.25 /* MAD must be this small against the gap */
#define WARM_REJECT_X 3.0   /* warm-up slower than this x the best: out */
/* What a kernel's first launch may add (loading its module) to a run. */
#define FIRST_RUN_SLACK_US 5000.0
/* The share of the budget the checks may use: the rest is the timed reps'
 * (on the largest keys the checks used to take all of it, and every
 * contender was decided on one rep). */
#define CHECK_SHARE 0.7
/* The share within which a superseded variant's points (its successor
 * runs here: flyk_variant.successor) are checked, after the others'.  On
 * the H200 the older GEMM kernels had not won one of 57 keys since
 * gemm_tma / ggemm_tma came, and on g8 m8192 n8192 k8192 their checks and
 * reps took ~0.55 s of the 1.0 s budget, leaving the contenders one rep
 * each. */
#define LATE_SHARE 0.4
/* A check run at least this long, and not behind the warm-up cut, is the
 * candidate's warm-up too: its module is loaded and its first-use costs
 * are paid (a GPU case whose timed call differs from the checked one
 * runs it once untimed before the check).  On the H200's b32 s8192
 * causal attention keys a separate warm-up was a fourth 7 ms launch per
 * candidate, and the checks' share of the budget reached 18-19 of 32-36
 * candidates. */
#define LONG_RUN_US 2000.0
/* How much longer than a candidate's last run its next one may take,
 * relative: the GPU slows as a key runs (on the H100's two longest MQA
 * keys the owed reps, 0.41 s of them, ran 2.7% and 3.2% longer than the
 * checks they were estimated by; bench/README.md). */
#define DRIFT_ALLOW 0.05
/* The least of job->budget_s a job's wall cap leaves its measurements. */
#define MIN_SHARE 0.25

struct cand {
	const struct flyk_variant *v;
	uint32_t nparams;
	int64_t params[FLY_PARAMS_MAX];
	double *samples;    /* max_reps timings, us */
	uint32_t n;         /* samples taken */
	int alive;          /* still being timed */
	int late;           /* superseded here: checked last (LATE_SHARE) */
	double run_s;       /* its last run's wall time (check, warm-up or
			       rep), s: what one more timed rep of it costs */
	double med;
	double mad;
};

struct tstate {
	const struct flyk_backend *b;
	struct flyk_device *dev;
	struct flyk_case *c;
	const struct flyd_tune_job *j;
	struct flyd_tuner_opts o;
	struct flyd_tune_result *r;
	struct cand *cands;
	uint32_t ncands;
	double start;     /* the job's start (tune_s) */
	double t0;        /* the budget's start: the candidates listed (and,
			     first_of_op, the first check done) */
	double budget;    /* the measurements' budget from t0, s (<= 0:
			     none): j->budget_s, less where the job's wall
			     cap (j->max_s from o.job_start) comes first */
	double best_warm; /* fastest warm-up run so far, us (INFINITY: none) */
	double setup_s;   /* the job's case setup before the tuner started,
			     s: charged to the budget */
	double owed_s;    /* one timed rep of every candidate that passed
			     its check so far, s (each is owed one) */
	double owed_max_s; /* the largest of those reps, s */
	double check_max_s; /* the largest check's wall time (poison,
			       runs, compare), s; 0: none yet */
	double check_fixed_s; /* the last check's wall time less its runs':
				 the poisoning and the compare, s */
	double run_wall_s; /* every run's wall time so far, s */
	/* An exact-shape job (issue 22): the op's default point for the
	 * shape, always a candidate and checked first; the winner is never
	 * slower than its measured median.  -1: not exact, or no default. */
	int defc;
	struct fly_decision def;
};

static double clock_now(void *ctx)
{
	struct timespec ts;

	(void)ctx;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void flyd_tuner_opts_init(struct flyd_tuner_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->warmup = 1;
	o->max_reps = 30;
	o->step = 5;
}

uint64_t flyd_tuner_seed(const char *key)
{
	return fly__hash_str(key);
}

int flyd_trial_same(const struct flyd_trial *t, const char *variant,
		    const int64_t *params, uint32_t nparams)
{
	if (strncmp(t->variant, variant, FLY_VARIANT_MAX) != 0 ||
	    t->nparams != nparams)
		return 0;
	for (uint32_t i = 0; i < nparams; i++)
		if (t->params[i] != params[i])
			return 0;
	return 1;
}

void flyd_tune_result_fini(struct flyd_tune_result *r)
{
	if (r == NULL)
		return;
	free(r->trials);
	r->trials = NULL;
	r->ntrials = 0;
}

/* ---------------------------------------------------------- candidates */

static int is_excluded(const struct flyd_tune_job *j, const char *variant,
		       const int64_t *params, uint32_t nparams)
{
	uint32_t n = j->nexclude < FLYD_EXCLUDE_MAX ? j->nexclude
						   : FLYD_EXCLUDE_MAX;

	for (uint32_t i = 0; i < n; i++)
		if (flyd_trial_same(&j->exclude[i], variant, params, nparams))
			return 1;
	return 0;
}

/* Whether the point also runs at the smallest M of the key's bucket: an
 * engine launches the winner for every M that buckets to this key, so a
 * point feasible only at the bucket's top would be refused at launch.  A
 * job without problem_lo (op 0) has no bucket to honour. */
static int feasible_at_floor(const struct tstate *st,
			     const struct flyk_variant *v,
			     const int64_t *params)
{
	const struct fly_problem *lo = &st->j->problem_lo;

	if (lo->op == FLY_OP_NONE ||
	    memcmp(lo, &st->j->problem, sizeof(*lo)) == 0)
		return 1;
	return v->feasible(st->dev, lo, params) == 0;
}

/* Append one point unless excluded or infeasible (those are counted). */
static void cand_add(struct tstate *st, const struct flyk_variant *v,
		     const int64_t *params)
{
	struct cand *c;

	if (is_excluded(st->j, v->name, params, v->nparams)) {
		st->r->nexcluded++;
		return;
	}
	if (v->feasible != NULL &&
	    (v->feasible(st->dev, &st->j->problem, params) != 0 ||
	     !feasible_at_floor(st, v, params))) {
		st->r->ninfeasible++;
		return;
	}
	if (st->ncands >= FLYD_TUNER_MAX_CANDS)
		return;
	c = &st->cands[st->ncands++];
	c->v = v;
	c->nparams = v->nparams < FLY_PARAMS_MAX ? v->nparams : FLY_PARAMS_MAX;
	memcpy(c->params, params, sizeof(c->params[0]) * c->nparams);
	c->alive = 1;
}

/* The cartesian product of a variant's params, first param most
 * significant, each in declared value order (an odometer). */
static void cands_product(struct tstate *st, const struct flyk_variant *v)
{
	uint32_t idx[FLY_PARAMS_MAX] = { 0 };
	int64_t pt[FLY_PARAMS_MAX] = { 0 };
	uint32_t np = v->nparams > FLY_PARAMS_MAX ? FLY_PARAMS_MAX
						  : v->nparams;
	int i;

	for (uint32_t k = 0; k < np; k++)
		if (v->params[k].nvals == 0)
			return;
	for (;;) {
		for (uint32_t k = 0; k < np; k++)
			pt[k] = v->params[k].vals[idx[k]];
		cand_add(st, v, pt);
		for (i = (int)np - 1; i >= 0; i--) {
			if (++idx[i] < v->params[i].nvals)
				break;
			idx[i] = 0;
		}
		if (i < 0)
			return;
	}
}

static int cands_explicit(struct tstate *st, const struct flyk_variant *v)
{
	int64_t (*pts)[FLY_PARAMS_MAX];
	int n;

	pts = calloc(FLYD_TUNER_MAX_CANDS, sizeof(*pts));
	if (pts == NULL)
		return -ENOMEM;
	n = v->enumerate(st->dev, &st->j->problem, pts, FLYD_TUNER_MAX_CANDS);
	for (int i = 0; i < n && i < FLYD_TUNER_MAX_CANDS; i++)
		cand_add(st, v, pts[i]);
	free(pts);
	return 0;
}

/* Whether @p v's successor has a candidate (a feasible point) here. */
static int has_successor(const struct tstate *st,
			 const struct flyk_variant *v)
{
	if (v->successor == NULL)
		return 0;
	for (uint32_t i = 0; i < st->ncands; i++)
		if (strcmp(st->cands[i].v->name, v->successor) == 0)
			return 1;
	return 0;
}

/* An exact-shape job: find the op's default point for the shape among
 * the candidates, adding it when the variants' spaces did not list it
 * (excluded or infeasible points are not added: cand_add counts them).
 * "No exact shape may end up slower than the vendor default on that
 * shape" (issue 22).  @return 0. */
static int cand_default(struct tstate *st)
{
	const struct flyk_variant *v;

	st->defc = -1;
	if (!fly_key_is_exact(st->j->key, strlen(st->j->key)) ||
	    flyk_default(st->b, st->dev, &st->j->problem, &st->def) != 0)
		return 0;
	for (uint32_t i = 0; i < st->ncands; i++) {
		const struct cand *c = &st->cands[i];

		if (strcmp(c->v->name, st->def.variant) == 0 &&
		    c->nparams == st->def.nparams &&
		    memcmp(c->params, st->def.params,
			   sizeof(c->params[0]) * c->nparams) == 0) {
			st->defc = (int)i;
			return 0;
		}
	}
	v = flyk_variant_find(st->b, st->j->problem.op, st->def.variant);
	if (v == NULL || st->ncands >= FLYD_TUNER_MAX_CANDS)
		return 0;
	cand_add(st, v, st->def.params);
	if (st->ncands > 0 && st->cands[st->ncands - 1].v == v &&
	    memcmp(st->cands[st->ncands - 1].params, st->def.params,
		   sizeof(int64_t) * st->cands[st->ncands - 1].nparams) == 0)
		st->defc = (int)st->ncands - 1;
	return 0;
}

static int cands_build(struct tstate *st)
{
	const struct fly_problem *p = &st->j->problem;
	size_t nfit = 0;
	int rc;

	st->cands = calloc(FLYD_TUNER_MAX_CANDS, sizeof(*st->cands));
	if (st->cands == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < st->b->nvariants; i++)
		nfit += flyk_variant_supports(&st->b->variants[i], p);
	for (size_t i = 0; i < st->b->nvariants; i++) {
		const struct flyk_variant *v = &st->b->variants[i];

		if (!flyk_variant_supports(v, p) || (v->is_reference && nfit > 1))
			continue;
		if (v->enumerate != NULL) {
			rc = cands_explicit(st, v);
			if (rc < 0)
				return rc;
		} else {
			cands_product(st, v);
		}
	}
	rc = cand_default(st);
	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < st->ncands; i++) {
		st->cands[i].samples =
			calloc((size_t)st->o.max_reps, sizeof(double));
		if (st->cands[i].samples == NULL)
			return -ENOMEM;
		st->cands[i].late = has_successor(st, st->cands[i].v);
	}
	st->r->ncandidates = st->ncands;
	return 0;
}

/* ---------------------------------------------------------- statistics */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median_of(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	if (n == 0)
		return 0;
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void cand_stats(struct cand *c)
{
	double tmp[FLYD_TUNER_MAX_REPS];

	memcpy(tmp, c->samples, sizeof(double) * c->n);
	c->med = median_of(tmp, c->n);
	for (uint32_t i = 0; i < c->n; i++)
		tmp[i] = fabs(c->samples[i] - c->med);
	c->mad = median_of(tmp, c->n);
}

/* ---------------------------------------------------------- trials */

static void trial_fill(const struct cand *c, struct flyd_trial *t)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->variant, sizeof(t->variant), "%s", c->v->name);
	t->nparams = c->nparams;
	memcpy(t->params, c->params, sizeof(t->params[0]) * c->nparams);
}

static void notify_start(struct tstate *st, const struct cand *c)
{
	struct flyd_trial t;

	if (st->o.on_start == NULL)
		return;
	trial_fill(c, &t);
	st->o.on_start(st->o.cb_ctx, &t);
}

/* Final trial of a candidate: appended to the result, then reported. */
static void emit(struct tstate *st, struct cand *c, int outcome,
		 const char *reason)
{
	struct flyd_trial *t = &st->r->trials[st->r->ntrials++];

	trial_fill(c, t);
	c->alive = 0;
	/* an exact job's default point says so in its trial (explain) */
	if (st->defc >= 0 && c == &st->cands[st->defc]) {
		snprintf(t->reason, sizeof(t->reason), "default%s%s",
			 reason ? ": " : "", reason ? reason : "");
		reason = t->reason;
	}
	if (c->n > 0) {
		cand_stats(c);
		t->median_us = c->med;
		t->mad_us = c->mad;
	}
	t->reps = c->n;
	t->outcome = outcome;
	if (reason != t->reason)
		snprintf(t->reason, sizeof(t->reason), "%s",
			 reason ? reason : "");
	if (st->o.on_trial != NULL)
		st->o.on_trial(st->o.cb_ctx, t);
}

static void emit_error(struct tstate *st, struct cand *c, const char *what,
		       int rc)
{
	char why[FLYD_REASON_MAX];

	snprintf(why, sizeof(why), "%s: %s (%d)", what, strerror(-rc), rc);
	emit(st, c, FLYD_OUT_ERROR, why);
}

/* ---------------------------------------------------------- measuring */

/* Past @p share of the job's budget (none: never). */
static int past_budget(struct tstate *st, double share)
{
	return st->budget > 0 &&
	       st->o.now(st->o.now_ctx) - st->t0 > share * st->budget;
}

/* The budget's start is now: the measurements get j->budget_s from here,
 * less the case's setup (st->setup_s: the job's own wall time), or what
 * is left of the job's wall cap (j->max_s counted from o.job_start: the
 * case's setup and the candidate list are in it) when that is less --
 * but never under MIN_SHARE of j->budget_s: a listing that ran long
 * (cuDNN compiling a new head dim's plans: 1.7 s for d256 on the H200)
 * has been paid, and a cap that left nothing measured one candidate and
 * never ran the candidates it listed (0.85x of cuDNN). */
static void budget_start(struct tstate *st)
{
	double left;

	st->t0 = st->o.now(st->o.now_ctx);
	st->budget = st->j->budget_s;
	if (st->budget > 0 && st->setup_s > 0) {
		st->budget -= st->setup_s;
		if (st->budget < MIN_SHARE * st->j->budget_s)
			st->budget = MIN_SHARE * st->j->budget_s;
	}
	if (st->j->max_s <= 0)
		return;
	left = st->o.job_start + st->j->max_s - st->t0;
	if (st->budget > 0 && left < MIN_SHARE * st->j->budget_s)
		left = MIN_SHARE * st->j->budget_s;
	if (left < 1e-6)
		left = 1e-6;
	if (st->budget <= 0 || left < st->budget)
		st->budget = left;
}

/* @p more_s seconds from now would end past the budget (none: never). */
static int ends_past(struct tstate *st, double more_s)
{
	return st->budget > 0 &&
	       st->o.now(st->o.now_ctx) - st->t0 + more_s > st->budget;
}

/* A run of @p run_s more would end past the budget (and the budget is
 * recorded as hit). */
static int over_budget(struct tstate *st, double run_s)
{
	if (!ends_past(st, run_s))
		return 0;
	st->r->budget_hit = 1;
	return 1;
}

/* Checking one more candidate would push the one timed rep each checked
 * candidate is owed past the budget: st->owed_s (the checked ones' reps,
 * wall time) and the next candidate's check and rep, at the worst a
 * candidate that passes the warm-up cut may cost -- its runs at
 * WARM_REJECT_X times the fastest warm-up seen (or the slowest owed
 * rep's wall time, if more: short kernels' runs are mostly launch), with
 * the last check's fixed part (poison, compare) on top, and never less
 * than the largest check seen.  On the H100 the 9 ms MQA keys checked 43
 * candidates within the checks' share, then their one rep each took 0.3 s
 * past the 1.0 s budget (tune_s 1.31-1.32 s); judged by the last check,
 * a slower candidate's check and rep still ended 4-23 ms past it.  The
 * reps come after every check, on a GPU slowed since: they are counted
 * DRIFT_ALLOW longer. */
static int no_room(struct tstate *st)
{
	if (!(st->best_warm < INFINITY))
		return 0;
	double best = st->best_warm * 1e-6;
	double unit = WARM_REJECT_X * best;
	int runs = unit >= LONG_RUN_US * 1e-6 ? 1 : 1 + st->o.warmup;

	if (unit < st->owed_max_s)
		unit = st->owed_max_s;
	double check = st->check_fixed_s + runs * unit;
	if (check < st->check_max_s)
		check = st->check_max_s;
	return ends_past(st, (1 + DRIFT_ALLOW) * (st->owed_s + unit) + check);
}

/* One run of @p c through the backend (its time in @p us); @p c->run_s
 * becomes the run's wall time (the launch, the L2 clean, the wait: what
 * one more rep of it takes), at least its kernel time and at most that
 * plus what a first launch may add (a module load or the worker's
 * one-time costs are not what its next rep costs). */
static int cand_run(struct tstate *st, struct cand *c, double *us)
{
	double w0 = st->o.now(st->o.now_ctx);
	int rc = st->b->case_time(st->c, c->v, c->params, us);

	if (rc == 0) {
		double w = st->o.now(st->o.now_ctx) - w0;
		double k = *us * 1e-6, cap = k + FIRST_RUN_SLACK_US * 1e-6;

		st->run_wall_s += w;
		c->run_s = w < k ? k : (w > cap ? cap : w);
	}
	return rc;
}

/* Numerics on poisoned outputs, then the warm-ups.  Emits WRONG/ERROR. */
static void cand_check(struct tstate *st, struct cand *c)
{
	double us, err = 0;
	char why[FLYD_REASON_MAX];
	int rc;

	notify_start(st, c);
	rc = st->b->case_poison(st->c);
	if (rc < 0) {
		emit_error(st, c, "poison failed", rc);
		return;
	}
	rc = cand_run(st, c, &us);
	if (rc < 0) {
		emit_error(st, c, "launch failed", rc);
		return;
	}
	rc = st->b->case_check(st->c, &err);
	if (rc == -EDOM) {
		snprintf(why, sizeof(why), "max err %.3g", err);
		emit(st, c, FLYD_OUT_WRONG, why);
		return;
	}
	if (rc < 0) {
		emit_error(st, c, "check failed", rc);
		return;
	}
	/* A check run twice the warm-up cut behind the fastest seen, beyond
	 * what a first launch may add, costs no warm-ups either.  On a large
	 * shape the slow variants' runs are much of the budget: on g8 m8192
	 * n8192 k8192 the 11 ggemm_mma points, at 10-23x the best, took
	 * ~0.5 s of 1.0 in checks and warm-ups (estimated from the ratios
	 * their trials record); 46 of the 137 candidates were never run and
	 * the rest got one rep each. */
	if (us > 2 * WARM_REJECT_X * st->best_warm + FIRST_RUN_SLACK_US) {
		snprintf(why, sizeof(why), "%.2fx best on its first run",
			 us / st->best_warm);
		emit(st, c, FLYD_OUT_REJECTED, why);
		return;
	}
	/* a long check run that would pass the warm-up's cut was the
	 * warm-up (one far behind may be a short kernel's first launch:
	 * its warm-up decides) */
	int warm = us >= LONG_RUN_US && !(us > WARM_REJECT_X * st->best_warm)
			   ? 0
			   : st->o.warmup;
	for (int i = 0; i < warm; i++) {
		notify_start(st, c);
		rc = cand_run(st, c, &us);
		if (rc < 0) {
			emit_error(st, c, "launch failed", rc);
			return;
		}
	}
	/* The last run (a warm-up, else the check) against the fastest seen:
	 * a candidate far behind costs no timed reps.  On a large shape with
	 * many candidates this is what keeps the budget for the contenders. */
	if (us > WARM_REJECT_X * st->best_warm) {
		snprintf(why, sizeof(why), "%.2fx best on its warm-up",
			 us / st->best_warm);
		emit(st, c, FLYD_OUT_REJECTED, why);
		return;
	}
	if (us < st->best_warm)
		st->best_warm = us;
	st->owed_s += c->run_s;
	if (c->run_s > st->owed_max_s)
		st->owed_max_s = c->run_s;
}

/* One timed rep of @p c.  Emits ERROR on a launch failure. */
static void cand_rep(struct tstate *st, struct cand *c)
{
	double us;
	int rc;

	notify_start(st, c);
	rc = cand_run(st, c, &us);
	if (rc < 0) {
		emit_error(st, c, "launch failed", rc);
		return;
	}
	c->samples[c->n++] = us;
}

/*
 * Bring each of the @p n candidates @p cs[i] to @p want[i] timed reps
 * (capped at max_reps; budget permitting, but at least one each), one rep
 * of each in turn, every other pass in reverse order.  Interleaved, the
 * GPU's clock drift (it slows as it warms over a long key) falls on all
 * of them alike: timed one after the other, the first candidate got the
 * cool clocks, and on the largest keys the pick went with the order.
 */
static void time_interleaved(struct tstate *st, struct cand **cs, uint32_t n,
			     const uint32_t *want)
{
	int more = 1;

	for (uint32_t pass = 0; more; pass++) {
		more = 0;
		for (uint32_t k = 0; k < n; k++) {
			uint32_t i = pass % 2 ? n - 1 - k : k;
			struct cand *c = cs[i];
			uint32_t w = want[i] < (uint32_t)st->o.max_reps
					     ? want[i]
					     : (uint32_t)st->o.max_reps;

			/* a rep past the owed one starts where its last run
			 * (slowed by the drift allowed, plus the largest miss
			 * seen) still ends within the budget */
			if (!c->alive || c->n >= w ||
			    (c->n >= 1 &&
			     over_budget(st, (1 + DRIFT_ALLOW) * c->run_s +
						     st->r->miss_max_s)))
				continue;
			double est = c->run_s, r0 = st->run_wall_s;

			cand_rep(st, c);
			/* its wall as cand_run measured it, past the estimate */
			double miss = st->run_wall_s - r0 - est;

			if (c->n >= 2 && miss > st->r->miss_max_s)
				st->r->miss_max_s = miss;
			more = 1;
		}
	}
	for (uint32_t i = 0; i < n; i++)
		if (cs[i]->alive && cs[i]->n > 0)
			cand_stats(cs[i]);
}

/* The alive candidates, in candidate order, into @p out; their count. */
static uint32_t alive_cands(struct tstate *st, struct cand **out)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < st->ncands; i++)
		if (st->cands[i].alive)
			out[n++] = &st->cands[i];
	return n;
}

/* One early-rejection round: everyone alive to @p reps, then drop those
 * slower than @p x times the best median. */
static void round_reject(struct tstate *st, struct cand **alive,
			 uint32_t *want, uint32_t reps, double x)
{
	uint32_t n = alive_cands(st, alive);
	double best = INFINITY;
	char why[FLYD_REASON_MAX];

	for (uint32_t i = 0; i < n; i++)
		want[i] = reps;
	time_interleaved(st, alive, n, want);
	for (uint32_t i = 0; i < n; i++)
		if (alive[i]->alive && alive[i]->med < best)
			best = alive[i]->med;
	for (uint32_t i = 0; i < n; i++) {
		struct cand *c = alive[i];

		if (!c->alive || !(c->med > x * best))
			continue;
		snprintf(why, sizeof(why), "%.2fx best after %u reps",
			 best > 0 ? c->med / best : INFINITY, c->n);
		emit(st, c, FLYD_OUT_REJECTED, why);
	}
}

static int cmp_cand_med(const void *a, const void *b)
{
	const struct cand *x = *(const struct cand *const *)a;
	const struct cand *y = *(const struct cand *const *)b;

	if (x->med != y->med)
		return x->med < y->med ? -1 : 1;
	return x < y ? -1 : (x > y); /* stable: candidate order */
}

/* Successive halving: the better half of the contenders gets o.step more
 * reps per round, until the top two are resolved or reps run out. */
static void rounds_halving(struct tstate *st, struct cand **alive,
			   uint32_t *want)
{
	uint32_t n = alive_cands(st, alive), contenders = n;

	while (n >= 2 && !st->r->budget_hit) {
		double gap, noise, ref;
		uint32_t before = 0, after = 0, k;

		qsort(alive, n, sizeof(alive[0]), cmp_cand_med);
		gap = alive[1]->med - alive[0]->med;
		noise = fmax(alive[0]->mad, alive[1]->mad);
		ref = fmax(gap, st->j->margin * alive[0]->med);
		if (noise <= NOISE_FRACTION * ref)
			break;
		contenders = contenders > 2 ? (contenders + 1) / 2 : 2;
		k = contenders < n ? contenders : n;
		for (uint32_t i = 0; i < k; i++) {
			before += alive[i]->n;
			want[i] = alive[i]->n + (uint32_t)st->o.step;
		}
		time_interleaved(st, alive, k, want);
		for (uint32_t i = 0; i < k; i++)
			after += alive[i]->n;
		if (after == before)
			break;
		n = alive_cands(st, alive);
	}
}

/* ---------------------------------------------------------- decision */

static void decide(struct tstate *st)
{
	struct flyd_tune_result *r = st->r;
	const struct flyd_trial *win = NULL, *inc = NULL;
	double best = INFINITY;

	for (size_t i = 0; i < r->ntrials; i++)
		if (r->trials[i].outcome == FLYD_OUT_OK &&
		    r->trials[i].median_us < best)
			best = r->trials[i].median_us;
	/* Trials of OK candidates were emitted in candidate order: the
	 * earliest variant with a trial within the margin of the best (the
	 * variants' declared order is a preference: the vendor's default
	 * first), and of its trials the fastest (a variant's points are in
	 * value order, which says nothing: picking the first there favoured
	 * the smallest tiles by up to the margin). */
	/* ... unless a variant that asks for near-ties has one there
	 * (flyk_variant.prefer_on_tie: a vendor's declared after ours) */
	for (int pass = 0; pass < 2 && win == NULL; pass++)
		for (size_t i = 0; i < r->ntrials && win == NULL; i++) {
			const struct flyk_variant *v;

			if (r->trials[i].outcome != FLYD_OUT_OK ||
			    r->trials[i].median_us > best * (1 + st->j->margin))
				continue;
			v = pass ? NULL
				 : flyk_variant_find(st->b, st->j->problem.op,
						     r->trials[i].variant);
			if (pass || (v != NULL && v->prefer_on_tie))
				win = &r->trials[i];
		}
	if (win == NULL) {
		r->rc = -ENOENT;
		return;
	}
	for (size_t i = 0; i < r->ntrials; i++)
		if (r->trials[i].outcome == FLYD_OUT_OK &&
		    strcmp(r->trials[i].variant, win->variant) == 0 &&
		    r->trials[i].median_us < win->median_us)
			win = &r->trials[i];
	for (size_t i = 0; st->j->has_incumbent && i < r->ntrials; i++)
		if (r->trials[i].outcome == FLYD_OUT_OK &&
		    flyd_trial_same(&r->trials[i], st->j->incumbent.variant,
				    st->j->incumbent.params,
				    st->j->incumbent.nparams))
			inc = &r->trials[i];
	if (inc != NULL && inc != win &&
	    !(win->median_us < inc->median_us * (1 - st->j->margin)))
		win = inc;
	/* an exact shape is never served slower than its default point as
	 * measured: the margin's preference for an earlier variant (or an
	 * incumbent) does not apply against it */
	for (size_t i = 0; st->defc >= 0 && i < r->ntrials; i++)
		if (r->trials[i].outcome == FLYD_OUT_OK &&
		    flyd_trial_same(&r->trials[i], st->def.variant,
				    st->def.params, st->def.nparams) &&
		    r->trials[i].median_us < win->median_us)
			win = &r->trials[i];
	memset(&r->winner, 0, sizeof(r->winner));
	r->winner.status = FLY_STATUS_TUNED;
	memcpy(r->winner.variant, win->variant, sizeof(r->winner.variant));
	r->winner.nparams = win->nparams;
	memcpy(r->winner.params, win->params, sizeof(win->params));
	r->winner.median_us = win->median_us;
	r->mad_us = win->mad_us;
	r->rc = 0;
}

static int measure(struct tstate *st)
{
	struct cand **alive = calloc(st->ncands ? st->ncands : 1,
				     sizeof(*alive));
	uint32_t *want = calloc(st->ncands ? st->ncands : 1, sizeof(*want));
	uint32_t nchecked = 0;

	if (alive == NULL || want == NULL) {
		free(alive);
		free(want);
		return -ENOMEM;
	}
	/* The checks: an exact job's default point first (the first check is
	 * never cut by the budget), the superseded variants' points after
	 * the others'. */
	for (int late = -1; late <= 1; late++)
		for (uint32_t i = 0; i < st->ncands; i++) {
			if (late < 0 ? (int)i != st->defc
				     : ((int)i == st->defc ||
					st->cands[i].late != late))
				continue;
			if (nchecked > 0 &&
			    (past_budget(st, late ? LATE_SHARE : CHECK_SHARE) ||
			     no_room(st))) {
				st->cands[i].alive = 0; /* never run: no trial */
				st->r->nunmeasured++;
				continue;
			}
			double c0 = st->o.now(st->o.now_ctx);
			double r0 = st->run_wall_s;

			cand_check(st, &st->cands[i]);
			/* The first check of the worker's first job of an op
			 * carries what the process pays once for it (module
			 * loads, driver entry points, library handles): on the
			 * H200 the first attention job of a fresh daemon spent
			 * over 0.7 s there and measured 1 of its candidates.
			 * The budget starts after it, and the job's wall cap
			 * does not count it. */
			if (nchecked++ == 0 && st->o.first_of_op) {
				st->r->first_s = st->o.now(st->o.now_ctx) - c0;
				st->o.job_start += st->r->first_s;
				budget_start(st);
			} else {
				double w = st->o.now(st->o.now_ctx) - c0;

				if (w > st->check_max_s)
					st->check_max_s = w;
				st->check_fixed_s = w - (st->run_wall_s - r0);
				if (st->check_fixed_s < 0)
					st->check_fixed_s = 0;
			}
		}
	double t1 = st->o.now(st->o.now_ctx);

	st->r->checks_s = t1 - st->t0;
	st->r->owed_est_s = st->owed_s;
	round_reject(st, alive, want, REJECT0_REPS, REJECT0_X);
	st->r->owed_wall_s = st->o.now(st->o.now_ctx) - t1;
	round_reject(st, alive, want, REJECT1_REPS, REJECT1_X);
	round_reject(st, alive, want, REJECT2_REPS, REJECT2_X);
	rounds_halving(st, alive, want);
	if (st->r->nunmeasured > 0) /* the budget left them out */
		st->r->budget_hit = 1;
	for (uint32_t i = 0; i < st->ncands; i++)
		if (st->cands[i].alive)
			emit(st, &st->cands[i], FLYD_OUT_OK, NULL);
	free(alive);
	free(want);
	return 0;
}

int flyd_tuner_run(const struct flyk_backend *b, struct flyk_device *dev,
		   struct flyk_case *c, const struct flyd_tune_job *j,
		   const struct flyd_tuner_opts *o, struct flyd_tune_result *r)
{
	struct tstate st = { .b = b, .dev = dev, .c = c, .j = j, .r = r,
			     .best_warm = INFINITY, .defc = -1 };
	int rc;

	if (b == NULL || c == NULL || j == NULL || r == NULL)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	snprintf(r->key, sizeof(r->key), "%s", j->key);
	if (o != NULL)
		st.o = *o;
	else
		flyd_tuner_opts_init(&st.o);
	if (st.o.now == NULL)
		st.o.now = clock_now;
	if (st.o.max_reps < 1)
		st.o.max_reps = 1;
	if (st.o.max_reps > FLYD_TUNER_MAX_REPS)
		st.o.max_reps = FLYD_TUNER_MAX_REPS;
	if (st.o.step < 1)
		st.o.step = 1;
	st.start = st.o.now(st.o.now_ctx);
	if (!(st.o.job_start > 0))
		st.o.job_start = st.start;
	st.setup_s = st.start - st.o.job_start;
	rc = cands_build(&st);
	/* The budget is the measurements': listing a vendor's candidates
	 * (cuDNN builds a plan per configuration to learn its workspace:
	 * 1.4-3 s for an attention key on the H200) is tune_s, not budget. */
	budget_start(&st);
	r->list_s = st.t0 - st.start;
	if (rc == 0)
		r->trials = calloc(st.ncands ? st.ncands : 1, sizeof(*r->trials));
	if (rc == 0 && r->trials == NULL)
		rc = -ENOMEM;
	if (rc == 0)
		rc = measure(&st);
	if (rc == 0) {
		decide(&st);
		rc = r->rc;
	} else {
		r->rc = rc;
	}
	double end = st.o.now(st.o.now_ctx);
	r->tune_s = end - st.start;
	r->setup_s = st.setup_s;
	/* past the budget by: what the daemon's budget reserve learns from
	 * (scheduler.c) */
	if (st.budget > 0 && end - st.t0 > st.budget)
		r->over_s = end - st.t0 - st.budget;
	for (uint32_t i = 0; st.cands != NULL && i < FLYD_TUNER_MAX_CANDS; i++)
		free(st.cands[i].samples);
	free(st.cands);
	return rc;
}
