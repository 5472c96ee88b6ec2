/*
 * reserve.h -- the tuning budget's reserve: what the last jobs ran past
 * the budget they were given, kept off the next job's budget.
 *
 * A job's measurements stop at its budget (tuner.h), but the time an
 * engine waits for a new key's decision (`decide_wait`) also holds what
 * the budget does not govern: the job's hand-over to the worker, the
 * case freed, the result sent, committed to the tuning DB and published,
 * and the waiters answered -- and, where a last rep ran longer than its
 * previous run, the measurements' own overrun.  On the H100 those put 3
 * of the 12 MQA keys 1-6 ms past their 1.0 s budget (bench/README.md).
 * The scheduler notes each tuned job's excess -- its wall time from the
 * explicit request that queued it (its start where none did, or where
 * it waited behind another job, a restart or a fleet lock) to the
 * answered waiters, less the worker's setup and tune_s, plus the tuner's
 * over_s -- and cuts the next job's budget by FLYD_RESERVE_HEADROOM times
 * the largest of the last FLYD_RESERVE_JOBS, never by more than
 * FLYD_RESERVE_MAX_SHARE of it.  The headroom is there because a job's
 * excess is only known at its end and grows with the job: in one H100
 * run (bench/README.md) the short MQA keys left 1.6-2.2 ms, the long ones
 * 2.5-3.0 ms, and the first long key, budgeted by the short ones' 2.2 ms,
 * was answered 0.8 ms past 1.0 s.
 *
 * Owns: nothing (a plain value in the scheduler).  Thread: any.
 */
#ifndef FLYD_RESERVE_H
#define FLYD_RESERVE_H

#define FLYD_RESERVE_JOBS 8         /* jobs remembered */
#define FLYD_RESERVE_MAX_SHARE 0.05 /* of the budget, at most */
#define FLYD_RESERVE_HEADROOM 1.5   /* times the largest excess */

struct flyd_reserve {
	double excess[FLYD_RESERVE_JOBS]; /* s, >= 0 */
	unsigned n;                       /* entries held */
	unsigned head;                    /* the next entry written */
};

/* The excess of one job, s (>= 0): @p wall_s from the job's start as its
 * waiters see it to their answers, less what the budget governs or charges
 * (@p setup_s, @p tune_s), plus the measurements' overrun @p over_s.
 * NaN or negative parts count as 0. */
double flyd_reserve_excess(double wall_s, double setup_s, double tune_s,
			   double over_s);

/* Remember @p excess_s (NaN or negative: 0), dropping the oldest past
 * FLYD_RESERVE_JOBS. */
void flyd_reserve_note(struct flyd_reserve *rs, double excess_s);

/* What to keep off a budget of @p budget_s: FLYD_RESERVE_HEADROOM times
 * the largest remembered excess, at most FLYD_RESERVE_MAX_SHARE *
 * budget_s (0: none, or a budget <= 0). */
double flyd_reserve_s(const struct flyd_reserve *rs, double budget_s);

#endif /* FLYD_RESERVE_H */
