/*
 * job.h -- the value types of one tuning job, shared by the daemon's
 * scheduler, the worker supervisor, the worker's tuner and the store:
 * the job sent to the worker, each candidate's trial, the job's result.
 *
 * Owns: nothing (plain values; the result's trials array is borrowed, see
 * below).  Thread: any.  No module's state lives here, so the worker's
 * pure tuner (tuner.c) needs neither the store nor the supervisor.
 */
#ifndef FLYD_JOB_H
#define FLYD_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"

#define FLYD_REASON_MAX 160

enum flyd_outcome {
	FLYD_OUT_OK = 0,         /* measured, agreed with the reference */
	FLYD_OUT_REJECTED = 1,   /* dropped early (clear loser) */
	FLYD_OUT_WRONG = 2,      /* numerical check failed */
	FLYD_OUT_FAULTED = 3,    /* crashed or hung the worker: never retried */
	FLYD_OUT_INFEASIBLE = 4, /* refused at launch */
	FLYD_OUT_ERROR = 5       /* launch returned an error */
};

struct flyd_trial {
	char variant[FLY_VARIANT_MAX];
	uint32_t nparams;
	int64_t params[FLY_PARAMS_MAX];
	double median_us;      /* 0 when not measured */
	double mad_us;
	uint32_t reps;
	int outcome;           /* enum flyd_outcome */
	char reason[FLYD_REASON_MAX];
};

#define FLYD_EXCLUDE_MAX 64

struct flyd_tune_job {
	char key[FLY_KEY_MAX];
	struct fly_problem problem;
	/* The smallest problem of the key's bucket (problem itself when
	 * nothing is bucketed): candidates must be feasible on both, since
	 * the winner is launched for every M in the bucket. */
	struct fly_problem problem_lo;
	double budget_s;             /* wall budget for the job */
	/* Wall cap of the whole job in the worker (its case's setup and
	 * candidate list included; <= 0: none): the measurements stop
	 * where it ends if that comes before budget_s does (tuner.h). */
	double max_s;
	double margin;               /* e.g. 0.03 */
	int has_incumbent;
	struct fly_decision incumbent;
	uint32_t nexclude;           /* faulted candidates to skip */
	struct flyd_trial exclude[FLYD_EXCLUDE_MAX];
};

struct flyd_tune_result {
	char key[FLY_KEY_MAX];
	int rc;                      /* 0, or why no winner */
	struct fly_decision winner;  /* status TUNED when rc == 0 */
	double mad_us;
	double tune_s;
	size_t ntrials;
	struct flyd_trial *trials;   /* borrowed; valid during the callback */
	uint32_t ncandidates;
	/* Added by the worker module (additive): */
	uint32_t ninfeasible;        /* points skipped: feasible() != 0 */
	uint32_t nexcluded;          /* points skipped: in job->exclude */
	int budget_hit;              /* 1: budget_s ran out, reps were cut */
	uint32_t nunmeasured;        /* candidates never run (budget) */
	double list_s;               /* of tune_s: listing the candidates */
	double first_s;              /* of tune_s: a first-of-op job's first
					check (the one-time costs), else 0 */
	double setup_s;              /* the case's setup before tune_s (from
					flyd_tuner_opts.job_start) */
	double over_s;               /* how far the measurements ran past
					their budget, s (0: not past) */
	/* Where the budget went (the worker's job_done line; not sent to
	 * the daemon), s from the budget's start unless said: */
	double checks_s;             /* the checks ended */
	double owed_est_s;           /* the owed reps, as estimated then */
	double owed_wall_s;          /* ... as they ran (their wall time) */
	double miss_max_s;           /* the most a later rep ran past its
					estimate (its last run's wall) */
};

#endif /* FLYD_JOB_H */
