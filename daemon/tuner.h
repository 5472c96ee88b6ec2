/*
 * tuner.h -- the tuning method: enumerate a job's candidates on a backend,
 * check them against the reference, time them, and pick the winner.
 *
 * Owns: nothing between calls (pure logic over a struct flyk_backend; no
 * processes, no loop).  Thread: the caller's (the worker process's main
 * thread); one call at a time per case.
 *
 * Method (docs/architecture.md "Tuning"):
 *   1. Candidates, in a STABLE order: variants in backend table order that
 *      match the op and support the problem (dtype, flags); for each, its
 *      enumerate() list or the cartesian product of its params (first
 *      param most significant, values in declared order).  The op's
 *      reference variant is the checker, not a candidate, unless it is the
 *      only variant.  Infeasible points (feasible() != 0) are counted and
 *      skipped; points listed in job->exclude are counted and skipped.
 *   2. Numerics: each candidate runs once on poisoned outputs and is
 *      checked: -EDOM -> WRONG ("max err 0.0123"), other errors -> ERROR.
 *   3. A candidate whose check run is > 6x the fastest warm-up seen so
 *      far plus 5 ms (what a first launch may add) is REJECTED without
 *      warm-ups ("12.40x best on its first run", 0 reps).  Then warm-up
 *      runs (opts->warmup; none after a check run of 2 ms or more that is
 *      within the warm-up cut below: that run was its warm-up); a candidate whose last warm-up (or,
 *      without warm-ups, its check run) is > 3x the fastest warm-up seen
 *      so far is REJECTED at once ("4.10x best on its warm-up", 0 reps).
 *      Then rounds: every survivor to 1 rep, drop those > 2x the best
 *      (REJECTED, "2.40x best after 1 reps"); to 3 reps,
 *      drop medians > 1.5x the best (REJECTED, "1.62x best after 3 reps");
 *      to 10 reps, drop > 1.15x; then successive halving: the better half
 *      of the survivors gets opts->step more reps per round until the MAD
 *      of the top two is small against max(gap, margin * best) or
 *      opts->max_reps is reached.  In every round the reps are
 *      interleaved: one of each candidate in turn, every other pass in
 *      reverse, so the GPU's clock drift over a key falls on all alike.
 *   4. Budget: candidates are checked in candidate order, except that
 *      the points of a superseded variant (its flyk_variant.successor
 *      has a candidate here) come after all the others.  A candidate not
 *      yet checked once 70% of job->budget_s of wall time (opts->now) has
 *      passed, 40% for a superseded one, or once checking it (its check
 *      and rep costed at the warm-up cut, 3x the fastest run, never
 *      under the largest check seen) would leave the one timed rep every
 *      checked candidate gets (each at its last run's time) ending past
 *      the budget, is not run (counted in
 *      result->nunmeasured, no trial): the rest of the budget is the
 *      checked candidates' reps.  No rep is added that would end past
 *      the budget (every checked, correct candidate still gets one timed
 *      rep).  The decision is made among what was measured, and
 *      result->budget_hit is set when either cut something.  The case's
 *      setup before the tuner (from opts->job_start) is charged to the
 *      budget (but at least 25% of job->budget_s is left).  The
 *      budget's time counts from the end of the candidate list (a
 *      vendor's enumerate may build plans: tune_s, not budget) and, with
 *      opts->first_of_op (the worker's first job of the op), from the end
 *      of the job's first check, which carries the one-time costs: module
 *      loads, driver entry points, handles.  A job with a wall cap
 *      (job->max_s > 0, counted from opts->job_start: the case's setup
 *      and the candidate list are inside it, the one-time first check
 *      is not) gets what is left of the cap when that is less than
 *      job->budget_s (but at least 25% of job->budget_s: what was
 *      listed gets measured), and the shares above apply to that.
 *   5. Decision: best = lowest median among OK trials; the winner's
 *      variant is the earliest variant (declared order, a preference:
 *      the vendor's default first) with a trial within job->margin of
 *      best -- a variant with flyk_variant.prefer_on_tie that has one
 *      comes before all --, and the winner that variant's fastest trial.  With an
 *      incumbent among the OK trials, the winner replaces it only when
 *      its median < incumbent * (1 - margin).
 *   6. Exact-shape jobs (a key with FLY_F_EXACT, issue 22): the op's
 *      default point for the shape (flyk_default) is a candidate even
 *      when the variants' spaces do not list it, it is checked first
 *      (so the budget never leaves it out), and when its OK trial's
 *      median is below the winner's it wins: an exact shape is never
 *      served slower than the default as measured.  Its trial's reason
 *      starts with "default" ("default", "default: 1.62x best after 3
 *      reps").
 */
#ifndef FLYD_TUNER_H
#define FLYD_TUNER_H

#include <stddef.h>
#include <stdint.h>

#include "flyk.h"
#include "job.h"

#define FLYD_TUNER_MAX_CANDS 4096 /* candidates considered per job */
#define FLYD_TUNER_MAX_REPS 200   /* hard cap on opts->max_reps */

struct flyd_tuner_opts {
	int warmup;        /* untimed runs after the check (default 1) */
	int max_reps;      /* reps a survivor may get (default 30) */
	int step;          /* reps added per halving round (default 5) */
	/* 1: the worker's first job of this op (default 0): its first check
	 * carries the process's one-time costs for the op (module loads,
	 * driver entry points, library handles) and the budget counts from
	 * its end */
	int first_of_op;
	/* When the job began in the worker, on the clock of @p now (before
	 * its case's setup): job->max_s counts from here.  0: the call's
	 * start. */
	double job_start;
	/* Clock in seconds (monotonic); NULL: CLOCK_MONOTONIC. */
	double (*now)(void *ctx);
	void *now_ctx;
	/* Called BEFORE every run of a candidate (check, warm-up, each rep),
	 * so a crash or hang is attributed to it and a per-run timeout can be
	 * re-armed; @p t has variant and params. */
	void (*on_start)(void *ctx, const struct flyd_trial *t);
	/* Called once per candidate when its trial is final. */
	void (*on_trial)(void *ctx, const struct flyd_trial *t);
	void *cb_ctx;
};

/* Fill @p o with the defaults above (no callbacks). */
void flyd_tuner_opts_init(struct flyd_tuner_opts *o);

/* Run the method on case @p c (made by b->case_new for j->problem).
 * @param[in] o    options; NULL: defaults.
 * @param[out] r   the result: r->trials holds every trial (caller owns;
 *                 free with flyd_tune_result_fini()), r->winner and
 *                 r->mad_us when r->rc == 0, r->tune_s, counters,
 *                 r->setup_s (from o->job_start) and r->over_s (how far
 *                 the measurements ended past their budget, if they did:
 *                 the daemon's budget reserve learns from it).
 * @return r->rc: 0, -ENOENT (no correct candidate, or no candidate at
 *         all), -ENOMEM, -EINVAL (bad arguments). */
int flyd_tuner_run(const struct flyk_backend *b, struct flyk_device *dev,
		   struct flyk_case *c, const struct flyd_tune_job *j,
		   const struct flyd_tuner_opts *o, struct flyd_tune_result *r);

/* Free what flyd_tuner_run() allocated in @p r (r->trials). */
void flyd_tune_result_fini(struct flyd_tune_result *r);

/* Whether trial @p t names the same candidate as (variant, params). */
int flyd_trial_same(const struct flyd_trial *t, const char *variant,
		    const int64_t *params, uint32_t nparams);

/* The case seed for a key: 64-bit FNV-1a of its bytes (reproducible). */
uint64_t flyd_tuner_seed(const char *key);

#endif /* FLYD_TUNER_H */
