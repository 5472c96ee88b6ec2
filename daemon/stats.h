/*
 * stats.h -- the daemon's counters: the one set behind both `stats` (the
 * socket request) and the Prometheus text of `metrics` and the HTTP
 * listener (metrics.c renders them); value types and inline updates
 * only, so every module may count without calling anything.
 *
 * Thread: loop thread only (plain integers, no atomics).
 * Invariant: counters only grow; a histogram's buckets are counted per
 * bucket (not cumulative; metrics.c sums them) and count == the sum of
 * its buckets plus the observations above the last bound.
 */
#ifndef FLYD_STATS_H
#define FLYD_STATS_H

#include <stdint.h>

#include "fly_abi.h"
#include "fly_msg.h"

/* Outcome of a tuning job's run (flytuned_jobs_total{outcome}). */
enum flyd_job_end {
	FLYD_JOB_TUNED = 0,     /* a winner committed */
	FLYD_JOB_FAILED = 1,    /* given up on (or its commit failed) */
	FLYD_JOB_FAULTED = 2,   /* the worker died: queued again */
	FLYD_JOB_CANCELLED = 3, /* forget or cancel while queued/running */
	FLYD_JOB_ADOPTED = 4,   /* already tuned when its turn came */
	FLYD_JOB_END_COUNT = 5
};

/* Outcome of one candidate (flytuned_trials_total{outcome}). */
enum flyd_trial_end {
	FLYD_TRIAL_WINNER = 0,     /* measured, and the job's winner */
	FLYD_TRIAL_MEASURED = 1,   /* measured, agreed, lost */
	FLYD_TRIAL_REJECTED = 2,   /* dropped early as a clear loser */
	FLYD_TRIAL_WRONG = 3,      /* failed the numerical check */
	FLYD_TRIAL_FAULTED = 4,    /* crashed the worker */
	FLYD_TRIAL_TIMED_OUT = 5,  /* hung: killed at its timeout */
	FLYD_TRIAL_INFEASIBLE = 6, /* refused at launch */
	FLYD_TRIAL_ERROR = 7,      /* launch returned an error */
	FLYD_TRIAL_END_COUNT = 8
};

/* Histogram kinds, each with its fixed bucket bounds (seconds). */
enum flyd_hist_kind {
	FLYD_HIST_TUNE = 0,   /* a job's run on the worker */
	FLYD_HIST_COMMIT = 1  /* one FULL commit of a winner and its trials */
};

#define FLYD_HIST_BOUNDS_MAX 12

struct flyd_hist {
	uint64_t bucket[FLYD_HIST_BOUNDS_MAX + 1]; /* per bucket; last: +Inf */
	uint64_t count;                            /* observations */
	double sum;                                /* their sum (seconds) */
};

/* The upper bounds of a kind's buckets; *n their number. */
static inline const double *flyd_hist_bounds(int kind, unsigned *n)
{
	static const double tune[] = {0.05, 0.1, 0.25, 0.5, 1,   2.5,
				      5,    10,  30,   60,  120, 300};
	static const double commit[] = {0.0005, 0.001, 0.0025, 0.005,
					0.01,   0.025, 0.05,   0.1,
					0.25,   0.5,   1,      2.5};

	*n = FLYD_HIST_BOUNDS_MAX;
	return kind == FLYD_HIST_TUNE ? tune : commit;
}

static inline void flyd_hist_observe(struct flyd_hist *h, int kind, double v)
{
	unsigned n, i;
	const double *b = flyd_hist_bounds(kind, &n);

	for (i = 0; i < n && v > b[i]; i++)
		;
	h->bucket[i]++;
	h->count++;
	h->sum += v;
}

/* Counters for `stats` and `metrics` (struct flyd_ctx.stats). */
struct flyd_stats {
	uint64_t requests;             /* frames received */
	uint64_t errors;               /* error replies sent */
	uint64_t protocol_errors;
	uint64_t connections;          /* accepted */
	uint64_t rejected_max_clients; /* refused at max_clients */
	uint64_t rejected_slow;        /* closed: output over its cap */
	uint64_t timeouts;             /* closed: frame or idle timeout */
	uint64_t decides;              /* decide requests handled */
	uint64_t candidates_faulted;
	uint64_t busy_rejections;      /* queue full */
	/* By request id (fly_msgs.def): handled without / with an error
	 * (a deferred reply counts when deferred, as ok). */
	uint64_t req_ok[FLY_REQ_COUNT];
	uint64_t req_err[FLY_REQ_COUNT];
	/* decide answers by op and status (FLY_STATUS_*). */
	uint64_t decide[FLY_OP_COUNT][3];
	uint64_t jobs[FLY_OP_COUNT][FLYD_JOB_END_COUNT];
	uint64_t trials[FLY_OP_COUNT][FLYD_TRIAL_END_COUNT];
	struct flyd_hist tune_s[FLY_OP_COUNT];
	struct flyd_hist commit_s;
	/* Single flight across the fleet (scheduler.h, docs/fleet.md). */
	uint64_t fleet_locked;         /* a job ran holding the fleet lock */
	uint64_t fleet_waits;          /* a job parked: another node's lock */
	uint64_t fleet_satisfied;      /* a parked job adopted the fleet's
					  winner instead of running */
	uint64_t fleet_wait_timeouts;  /* a parked job ran without the lock
					  after fleet_wait_ms */
	uint64_t fleet_holders_lost;   /* a parked job asked again: the lock
					  was let go without a winner */
};

/* The sum of decide answers with status @p st over every op. */
static inline uint64_t flyd_stats_decided(const struct flyd_stats *s, int st)
{
	uint64_t n = 0;

	for (int op = 0; op < FLY_OP_COUNT; op++)
		n += s->decide[op][st];
	return n;
}

/* The sum of job ends @p end over every op (stats' jobs_done: TUNED,
 * jobs_failed: FAILED). */
static inline uint64_t flyd_stats_jobs(const struct flyd_stats *s, int end)
{
	uint64_t n = 0;

	for (int op = 0; op < FLY_OP_COUNT; op++)
		n += s->jobs[op][end];
	return n;
}

#endif /* FLYD_STATS_H */
