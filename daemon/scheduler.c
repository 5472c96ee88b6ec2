/*
 * scheduler.c -- the tuning job stream (see scheduler.h): queue policy
 * and budget, the worker's jobs, READY, faults, cancel.
 *
 * Owns: struct flyd_sched (the queue, the worker supervisor, two timers,
 * the busy spans, the job being built).  Thread: loop thread only.
 *
 * A finished job goes to the results (results.c: commit, map, shm,
 * waiters) before the queue lets it go; a job's row stays in the jobs
 * table until its winner is committed, so a restart resumes it.
 *
 * Single flight across the fleet (scheduler.h): a job's fleet state is
 * j->fleet (queue.h); a parked or asking job stays QUEUED with
 * not_before_ms at the end of its wait, so the queue skips it; one claim
 * is in flight at a time (sc->claiming), and the scheduler starts nothing
 * while it is, so a node asks for the lock of the job it is about to run
 * and never hoards the locks of its whole queue.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fly_err.h"
#include "fly_key.h"
#include "flyk.h"
#include "log.h"
#include "queue.h"
#include "registry.h"
#include "reserve.h"
#include "results.h"
#include "scheduler.h"
#include "store.h"
#include "worker.h"

#define TICK_MS 200            /* policy / cap / worker re-check */
#define MAX_FAULTS 8           /* worker deaths per key before giving up */
#define FAULT_BACKOFF_MS 250   /* a faulted job waits this, doubling ... */
#define FAULT_BACKOFF_MAX_MS 5000 /* ... up to this, behind the others */
#define NSPANS 256             /* busy spans kept for the 60 s window */
#define WINDOW_MS 60000

struct span {
	uint64_t start_ms;
	uint64_t end_ms;
};

struct flyd_sched {
	struct flyd_ctx *ctx;
	struct flyd_results *res;     /* borrowed (main.c owns it) */
	struct flyd_queue *q;
	struct flyd_worker *worker;
	void (*on_ready)(void *arg);  /* once, at the first READY */
	void *on_ready_arg;
	uv_timer_t tick;
	uv_timer_t kick;              /* "run the scheduler soon" */
	int ready_once;               /* first READY handled */
	uint64_t last_request_ms;
	struct span spans[NSPANS];    /* ring of finished busy spans */
	unsigned nspans;
	unsigned span_head;
	int closing;
	int pending;                  /* handles still closing at stop */
	void (*stop_done)(void *);
	void *stop_arg;
	struct flyd_sched_fleet fl;   /* single-flight hooks; claim NULL: none */
	char claiming[FLY_KEY_MAX];   /* the key whose claim is in flight */
	uint64_t claim_until_ms;      /* ... not waited for after this */
	uint64_t taken_ns;            /* uv_hrtime: the running job's start
					 as its waiters see it (reserve.h) */
	uint64_t done_ns;             /* uv_hrtime: the last job's end */
	struct flyd_reserve reserve;  /* the budget's reserve (reserve.h) */
	struct flyd_tune_job job;     /* scratch: ~20 KB, kept off the stack */
};

static void schedule(struct flyd_sched *sc);
static void kick_soon(struct flyd_sched *sc);

/* ------------------------------------------------------------ counters */

/* The op of a canonical key (FLY_OP_NONE when it does not parse). */
static uint32_t key_op(const char *key)
{
	struct fly_problem p;

	if (fly_key_parse(key, strlen(key), &p) < 0 || p.op >= FLY_OP_COUNT)
		return FLY_OP_NONE;
	return p.op;
}

/* Count a job's end (stats.h enum flyd_job_end). */
static void count_job(struct flyd_sched *sc, const char *key, int end)
{
	sc->ctx->stats.jobs[key_op(key)][end]++;
}

static int trial_end(const struct flyd_trial *t,
		     const struct flyd_tune_result *r)
{
	switch (t->outcome) {
	case FLYD_OUT_OK:
		return r->rc == 0 &&
		       strcmp(t->variant, r->winner.variant) == 0 &&
		       t->nparams == r->winner.nparams &&
		       memcmp(t->params, r->winner.params,
			      t->nparams * sizeof(t->params[0])) == 0 ?
		       FLYD_TRIAL_WINNER : FLYD_TRIAL_MEASURED;
	case FLYD_OUT_REJECTED:
		return FLYD_TRIAL_REJECTED;
	case FLYD_OUT_WRONG:
		return FLYD_TRIAL_WRONG;
	case FLYD_OUT_FAULTED:
		/* worker.c's death_reason(): "timed out after ..." */
		return strstr(t->reason, "timed out") != NULL ?
		       FLYD_TRIAL_TIMED_OUT : FLYD_TRIAL_FAULTED;
	case FLYD_OUT_INFEASIBLE:
		return FLYD_TRIAL_INFEASIBLE;
	default:
		return FLYD_TRIAL_ERROR;
	}
}

/* A job's run ended (not cancelled): its seconds and its trials. */
static void count_run(struct flyd_sched *sc, const struct flyd_qjob *j,
		      const struct flyd_tune_result *r)
{
	struct flyd_stats *st = &sc->ctx->stats;
	uint64_t now = uv_now(sc->ctx->loop);
	uint32_t op = key_op(j->key);
	int won = 0;

	flyd_hist_observe(&st->tune_s[op], FLYD_HIST_TUNE,
			  now > j->started_ms ?
			  (double)(now - j->started_ms) / 1000.0 : 0.0);
	for (size_t i = 0; i < r->ntrials; i++) {
		int e = trial_end(&r->trials[i], r);

		if (e == FLYD_TRIAL_WINNER && won++)
			e = FLYD_TRIAL_MEASURED; /* a point measured twice */
		st->trials[op][e]++;
	}
}

/* ------------------------------------------------------------ policy */

static const char *policy_name(int p)
{
	switch (p) {
	case FLYD_POLICY_IDLE:
		return "idle";
	case FLYD_POLICY_ON_REQUEST:
		return "on-request";
	default:
		return "always";
	}
}

/* "lib=X" from a fingerprint line, else "unknown". */
static void parse_libver(const char *fp, char out[FLYD_LIBVER_MAX])
{
	const char *s = fp;
	size_t n;

	while ((s = strstr(s, "lib=")) != NULL) {
		if (s == fp || s[-1] == ' ')
			break;
		s += 4;
	}
	if (s == NULL) {
		snprintf(out, FLYD_LIBVER_MAX, "unknown");
		return;
	}
	s += 4;
	n = strcspn(s, " \t\n");
	if (n == 0 || n >= FLYD_LIBVER_MAX) {
		snprintf(out, FLYD_LIBVER_MAX, "unknown");
		return;
	}
	memcpy(out, s, n);
	out[n] = '\0';
}

/* Busy seconds of the worker within the last minute. */
static double busy_s_window(const struct flyd_sched *sc, uint64_t now)
{
	uint64_t from = now > WINDOW_MS ? now - WINDOW_MS : 0;
	uint64_t ms = 0;
	struct flyd_qjob *run = flyd_queue_running(sc->q);

	for (unsigned i = 0; i < sc->nspans; i++) {
		const struct span *sp = &sc->spans[i];
		uint64_t a = sp->start_ms > from ? sp->start_ms : from;

		if (sp->end_ms > a)
			ms += sp->end_ms - a;
	}
	if (run != NULL && now > run->started_ms)
		ms += now - (run->started_ms > from ? run->started_ms : from);
	return (double)ms / 1000.0;
}

static void span_add(struct flyd_sched *sc, uint64_t start, uint64_t end)
{
	sc->spans[sc->span_head] = (struct span){start, end};
	sc->span_head = (sc->span_head + 1) % NSPANS;
	if (sc->nspans < NSPANS)
		sc->nspans++;
}

/* Whether a background job may start now (explicit ones always may). */
static int background_allowed(const struct flyd_sched *sc)
{
	const struct flyd_config *c = &sc->ctx->cfg;
	uint64_t now = uv_now(sc->ctx->loop);

	if (c->policy == FLYD_POLICY_ON_REQUEST)
		return 0;
	if (c->policy == FLYD_POLICY_IDLE &&
	    now - sc->last_request_ms < c->idle_ms)
		return 0;
	if (c->bench_s_per_min > 0 && c->bench_s_per_min < 60 &&
	    busy_s_window(sc, now) >= c->bench_s_per_min)
		return 0;
	return 1;
}

static void persist_job(struct flyd_sched *sc, struct flyd_qjob *j)
{
	struct flyd_job row;
	int rc;

	if (!sc->ready_once)
		return; /* device id unknown: persisted at READY */
	memset(&row, 0, sizeof(row));
	memcpy(row.key, j->key, sizeof(row.key));
	row.priority = j->priority;
	row.force = j->force;
	row.queued_at = j->queued_at;
	row.faults = j->faults;
	rc = flyd_store_job_put(sc->ctx->store, sc->ctx->device_id, &row);
	if (rc < 0)
		flyd_log(FLYD_LOG_WARN, "job_persist_failed", "key=%s rc=%d",
			 j->key, rc);
	else
		j->persisted = 1;
}

/* Queue a job.  @return as flyd_queue_push(). */
static int enqueue(struct flyd_sched *sc, const char *key, int prio,
		   int force, struct flyd_qjob **out)
{
	struct flyd_qjob *j;
	int before_prio = -1, before_force = 0;
	uint64_t now_ns = uv_hrtime();
	int rc;

	j = flyd_queue_find(sc->q, key);
	if (j != NULL) {
		before_prio = j->priority;
		before_force = j->force;
	}
	rc = flyd_queue_push(sc->q, key, prio, force, &j);
	if (out != NULL)
		*out = j;
	if (rc == FLY_E_BUSY)
		sc->ctx->stats.busy_rejections++;
	if (rc < 0 || rc == 2)
		return rc;
	if (prio == FLYD_PRIO_EXPLICIT && j->state == FLYD_Q_QUEUED &&
	    j->asked_ns == 0)
		j->asked_ns = now_ns; /* its first waiter's */
	if (rc == 0) {
		j->queued_at = (int64_t)time(NULL);
		/* a forced tune of a failed key: its record goes */
		if (force && sc->ready_once)
			(void)flyd_store_failed_del(sc->ctx->store,
						    sc->ctx->device_id, key);
		persist_job(sc, j);
	} else if (j->state == FLYD_Q_QUEUED &&
		   (j->priority != before_prio || j->force != before_force)) {
		if (j->force && j->fleet == FLYD_QF_WAITING) {
			j->fleet = FLYD_QF_LOCAL; /* forced: no more waiting */
			j->not_before_ms = 0;
		}
		persist_job(sc, j);
	}
	return rc;
}

/* ------------------------------------------------------------ jobs */

static int collect_faulted(void *arg, const struct flyd_trial *tr)
{
	struct flyd_tune_job *job = arg;

	if (tr->outcome != FLYD_OUT_FAULTED)
		return 0;
	if (job->nexclude >= FLYD_EXCLUDE_MAX)
		return 1;
	job->exclude[job->nexclude++] = *tr;
	return 0;
}

/* Fill sc->job for @p j.  @return 0 or the key's parse error. */
static int build_job(struct flyd_sched *sc, const struct flyd_qjob *j)
{
	struct flyd_ctx *ctx = sc->ctx;
	struct flyd_tune_job *job = &sc->job;
	const struct fly_decision *inc;
	int rc;

	memset(job, 0, sizeof(*job));
	memcpy(job->key, j->key, sizeof(job->key));
	rc = fly_key_parse(j->key, strlen(j->key), &job->problem);
	if (rc < 0)
		return rc;
	/* an exact key (FLY_F_EXACT) is its own floor: only its M is ever
	 * launched from it; the kernels get the shape without the flag */
	fly_problem_bucket_floor(&job->problem,
				 &ctx->cfg.bucket[job->problem.op],
				 &job->problem_lo);
	fly_problem_shape(&job->problem);
	fly_problem_shape(&job->problem_lo);
	/* less what the last jobs ran past theirs (reserve.h) */
	job->budget_s = ctx->cfg.job_budget_s -
			flyd_reserve_s(&sc->reserve, ctx->cfg.job_budget_s);
	job->max_s = ctx->cfg.job_max_x * ctx->cfg.job_budget_s;
	job->margin = ctx->cfg.margin;
	inc = flyd_results_lookup(sc->res, j->key, 0);
	if (j->force && inc != NULL) {
		job->has_incumbent = 1;
		job->incumbent = *inc;
	}
	(void)flyd_store_trial_iter(ctx->store, j->key, ctx->device_id,
				    ctx->libver, collect_faulted, job);
	return 0;
}

/* ------------------------------------------------------------ fleet */

/* @p j ends: give its fleet lock back (after its winner's push when
 * @p won), or stop watching the one it was parked on. */
static void fleet_release(struct flyd_sched *sc, struct flyd_qjob *j,
			  int won)
{
	if ((j->fleet == FLYD_QF_HELD || j->fleet == FLYD_QF_WAITING ||
	     j->fleet == FLYD_QF_ASKING) && sc->fl.release != NULL)
		sc->fl.release(sc->fl.arg, j->key, won);
	j->fleet = FLYD_QF_NONE;
}

/* Whether a claim is in flight (its answer not yet waited for in vain). */
static int claim_pending(struct flyd_sched *sc)
{
	if (sc->claiming[0] == '\0')
		return 0;
	if (uv_now(sc->ctx->loop) < sc->claim_until_ms)
		return 1;
	sc->claiming[0] = '\0';
	return 0;
}

/* Whether job @p j (at the head of the queue, not tuned) may run now:
 * no single flight for it, its lock held, or its wait over.  Otherwise
 * its lock is asked for (the job is skipped until the answer). */
static int fleet_gate(struct flyd_sched *sc, struct flyd_qjob *j)
{
	struct flyd_ctx *ctx = sc->ctx;
	uint64_t now = uv_now(ctx->loop);
	uint32_t wait = ctx->cfg.fleet_wait_ms;
	int rc;

	if (j->force || sc->fl.claim == NULL || wait == 0)
		return 1;
	switch (j->fleet) {
	case FLYD_QF_HELD:
	case FLYD_QF_LOCAL:
		return 1;
	case FLYD_QF_ASKING:  /* no answer within fleet_wait_ms */
	case FLYD_QF_WAITING: /* the holder's winner did not come */
		ctx->stats.fleet_wait_timeouts++;
		flyd_log(FLYD_LOG_WARN, "fleet_wait_timeout", "key=%s "
			 "wait_ms=%u why=\"%s\"", j->key, wait,
			 j->fleet == FLYD_QF_ASKING ? "the fleet did not answer" :
			 "no fleet winner arrived: tuning locally");
		fleet_release(sc, j, 0); /* a parked job's lock: unwatched */
		j->fleet = FLYD_QF_LOCAL;
		return 1;
	default:
		break;
	}
	rc = sc->fl.claim(sc->fl.arg, j->key);
	if (rc == 0)
		return 1;
	if (rc == 2) {
		j->fleet = FLYD_QF_HELD;
		return 1;
	}
	j->fleet = FLYD_QF_ASKING;
	j->not_before_ms = now + wait;
	snprintf(sc->claiming, sizeof(sc->claiming), "%s", j->key);
	sc->claim_until_ms = now + wait;
	return 0;
}

/* The fleet's lock of @p j is taken (by this node, @p got, or another):
 * hold it, or park the job. */
static void fleet_locked(struct flyd_sched *sc, struct flyd_qjob *j, int got)
{
	struct flyd_ctx *ctx = sc->ctx;

	if (got) {
		j->fleet = FLYD_QF_HELD;
		ctx->stats.fleet_locked++;
		if (j->state == FLYD_Q_QUEUED)
			j->not_before_ms = 0;
		return;
	}
	if (j->state != FLYD_Q_QUEUED)
		return;
	if (flyd_results_lookup(sc->res, j->key, 0) != NULL) {
		j->not_before_ms = 0; /* its winner came first: adopted */
		return;
	}
	j->fleet = FLYD_QF_WAITING;
	j->not_before_ms = uv_now(ctx->loop) + ctx->cfg.fleet_wait_ms;
	ctx->stats.fleet_waits++;
	flyd_log(FLYD_LOG_INFO, "job_fleet_waiting", "key=%s wait_ms=%u "
		 "why=\"another node holds the key's fleet lock\"", j->key,
		 ctx->cfg.fleet_wait_ms);
}

/* The lock parked job @p j waits on was let go with no winner in the
 * fleet DB: its holder died (PostgreSQL dropped its session's locks) or
 * lost its connection.  The job asks again at once, not after
 * fleet_wait_ms: one waiter takes the lock and tunes, the others park on
 * it afresh. */
static void fleet_unpark(struct flyd_sched *sc, struct flyd_qjob *j)
{
	if (j == NULL || j->state != FLYD_Q_QUEUED ||
	    j->fleet != FLYD_QF_WAITING)
		return;
	j->fleet = FLYD_QF_NONE;
	j->fleet_freed = 1;
	j->not_before_ms = 0;
	flyd_log(FLYD_LOG_DEBUG, "fleet_lock_free", "key=%s", j->key);
}

/* The answer to the claim of a job that asked again after its lock was
 * let go: unless the fleet had the winner after all (its holder pushed
 * and unlocked just before the check), the holder was lost. */
static void fleet_freed_answer(struct flyd_sched *sc, struct flyd_qjob *j,
			       int answer)
{
	if (j == NULL || !j->fleet_freed || j->fleet != FLYD_QF_ASKING)
		return;
	j->fleet_freed = 0;
	if (answer != FLYD_SF_GOT && answer != FLYD_SF_BUSY)
		return;
	sc->ctx->stats.fleet_holders_lost++;
	flyd_log(FLYD_LOG_WARN, "fleet_holder_lost", "key=%s now=%s why=\"the "
		 "key's fleet lock was let go without a winner: its holder "
		 "died or lost its connection\"", j->key,
		 answer == FLYD_SF_GOT ? "locked" : "waiting");
}

void flyd_sched_fleet_answer(struct flyd_sched *sc, const char *key,
			     int answer)
{
	struct flyd_qjob *j;

	if (!flyd_sched_is_running(sc))
		return;
	if (answer != FLYD_SF_WINNER && answer != FLYD_SF_FREE &&
	    strcmp(sc->claiming, key) == 0)
		sc->claiming[0] = '\0';
	j = flyd_queue_find(sc->q, key);
	if (j != NULL && j->state == FLYD_Q_FAILED)
		j = NULL;
	fleet_freed_answer(sc, j, answer);
	switch (answer) {
	case FLYD_SF_GOT:
		/* asked; or given up waiting and running without it */
		if (j != NULL && (j->fleet == FLYD_QF_ASKING ||
				  j->fleet == FLYD_QF_LOCAL))
			fleet_locked(sc, j, 1);
		else if (sc->fl.release != NULL)
			sc->fl.release(sc->fl.arg, key, 0);
		break;
	case FLYD_SF_BUSY:
		if (j != NULL && j->fleet == FLYD_QF_ASKING)
			fleet_locked(sc, j, 0);
		break;
	case FLYD_SF_DOWN:
		if (j != NULL && j->fleet == FLYD_QF_ASKING) {
			j->fleet = FLYD_QF_LOCAL;
			j->not_before_ms = 0;
		}
		break;
	case FLYD_SF_FREE:
		fleet_unpark(sc, j);
		break;
	default: /* HAD, WINNER: a parked job is adopted at its turn */
		if (j != NULL && j->state == FLYD_Q_QUEUED &&
		    (j->fleet == FLYD_QF_ASKING ||
		     j->fleet == FLYD_QF_WAITING))
			j->not_before_ms = 0;
		break;
	}
	kick_soon(sc);
}

void flyd_sched_set_fleet(struct flyd_sched *sc,
			  const struct flyd_sched_fleet *fl)
{
	if (sc == NULL)
		return;
	if (fl != NULL)
		sc->fl = *fl;
	else
		memset(&sc->fl, 0, sizeof(sc->fl));
}

/* ------------------------------------------------------------ job ends */

/* Give up on a job: waiters get @p code, its row is replaced by a
 * failed_jobs record (shown by get and explain, kept across restarts), and
 * a FAILED marker keeps it from being queued again until a forced tune or
 * a forget (issue 18). */
static void job_fail(struct flyd_sched *sc, struct flyd_qjob *j, int code,
		     const char *why)
{
	struct flyd_ctx *ctx = sc->ctx;
	struct flyd_failed f;

	flyd_log(FLYD_LOG_WARN, "job_failed", "key=%s rc=%d faults=%u "
		 "why=\"%s\"", j->key, code, j->faults, why);
	count_job(sc, j->key, FLYD_JOB_FAILED);
	fleet_release(sc, j, 0);
	flyd_results_answer_error(sc->res, j, code, why);
	if (ctx->device_id[0] != '\0') {
		memset(&f, 0, sizeof(f));
		snprintf(f.key, sizeof(f.key), "%s", j->key);
		f.faults = j->faults;
		snprintf(f.why, sizeof(f.why), "%s", why);
		f.at = (int64_t)time(NULL);
		if (flyd_store_failed_put(ctx->store, ctx->device_id, &f) < 0)
			(void)flyd_store_job_del(ctx->store, ctx->device_id,
						 j->key);
	}
	flyd_queue_fail(sc->q, j);
}

/* A job whose key is already tuned (another instance committed it, or an
 * earlier job did): finish it without running. */
static void job_adopt(struct flyd_sched *sc, struct flyd_qjob *j,
		      const struct fly_decision *d)
{
	struct flyd_ctx *ctx = sc->ctx;
	struct fly_decision copy = *d;

	flyd_log(FLYD_LOG_INFO, "job_adopted", "key=%s", j->key);
	count_job(sc, j->key, FLYD_JOB_ADOPTED);
	if (j->fleet == FLYD_QF_ASKING || j->fleet == FLYD_QF_WAITING)
		ctx->stats.fleet_satisfied++;
	fleet_release(sc, j, 0);
	flyd_results_answer(sc->res, j, &copy);
	(void)flyd_store_job_del(ctx->store, ctx->device_id, j->key);
	flyd_queue_done(sc->q, j);
}

/* Where job @p j's time starts for the budget's reserve: now, or, for a
 * job an explicit request queued (and no fleet lock held it up), that
 * request's arrival -- its queueing, the job row's write and the
 * scheduler's turn are what its waiter waits through too -- but never
 * before the last job ended (the wait behind another job is not this
 * job's). */
static uint64_t job_start_ns(const struct flyd_sched *sc,
			     const struct flyd_qjob *j)
{
	uint64_t now = uv_hrtime(), t = j->asked_ns;

	if (t == 0 || t > now || j->fleet != FLYD_QF_NONE)
		return now;
	return t > sc->done_ns ? t : (sc->done_ns < now ? sc->done_ns : now);
}

/* Start the next job when the worker is free and the policy allows. */
static void schedule(struct flyd_sched *sc)
{
	struct flyd_ctx *ctx = sc->ctx;

	if (sc->closing) {
		if (sc->pending == 0 && sc->stop_done != NULL) {
			void (*done)(void *) = sc->stop_done;
			void *arg = sc->stop_arg;

			sc->stop_done = NULL;
			flyd_queue_free(sc->q);
			free(sc);
			done(arg);
		}
		return;
	}
	for (int guard = 0; guard < 1024; guard++) {
		struct flyd_qjob *j;
		const struct fly_decision *d;
		int rc;

		if (!sc->ready_once || sc->worker == NULL ||
		    flyd_queue_running(sc->q) != NULL ||
		    flyd_worker_is_busy(sc->worker) || claim_pending(sc))
			return;
		j = flyd_queue_peek_at(sc->q, background_allowed(sc),
				       uv_now(ctx->loop));
		if (j == NULL)
			return;
		d = j->force ? NULL : flyd_results_lookup(sc->res, j->key, 1);
		if (d != NULL) {
			job_adopt(sc, j, d);
			continue;
		}
		if (!fleet_gate(sc, j))
			continue; /* asked: the next turn waits for the answer */
		flyd_queue_start(sc->q, j);
		sc->taken_ns = job_start_ns(sc, j);
		rc = build_job(sc, j);
		if (rc < 0) {
			job_fail(sc, j, rc, "stored job key does not parse");
			continue;
		}
		rc = flyd_worker_submit(sc->worker, &sc->job);
		if (rc < 0) {
			/* Restarting or busy: retried on READY / the tick
			 * (the restart is not this job's time). */
			j->asked_ns = 0;
			flyd_queue_requeue_front(sc->q, j);
			return;
		}
		j->started_ms = uv_now(ctx->loop);
		flyd_log(FLYD_LOG_INFO, "job_started",
			 "key=%s priority=%d force=%d excluded=%u "
			 "budget_s=%.4f", j->key, j->priority, j->force,
			 sc->job.nexclude, sc->job.budget_s);
		return;
	}
}

static void kick_cb(uv_timer_t *h)
{
	schedule(h->data);
}

static void kick_soon(struct flyd_sched *sc)
{
	if (!sc->closing)
		uv_timer_start(&sc->kick, kick_cb, 0, 0);
}

static void tick_cb(uv_timer_t *h)
{
	schedule(h->data);
}

/* A winner: commit (FULL), then map + shm, then waiters (results.c). */
static void job_succeeded(struct flyd_sched *sc, struct flyd_qjob *j,
			  const struct flyd_tune_result *r)
{
	if (flyd_results_commit(sc->res, j, r) < 0) {
		/* The DB refused it (disk full, I/O error): not the key's
		 * fault, so not marked failed (that needs a forced tune);
		 * dropped, the next tune or decide queues it again once the
		 * DB takes writes (issue 21, test_disk_full). */
		count_job(sc, j->key, FLYD_JOB_FAILED);
		fleet_release(sc, j, 0);
		flyd_queue_done(sc->q, j);
		return;
	}
	count_job(sc, j->key, FLYD_JOB_TUNED);
	fleet_release(sc, j, 1);
	flyd_queue_done(sc->q, j);
}

/* The worker died mid-candidate: keep the evidence, exclude, retry. */
static void job_faulted(struct flyd_sched *sc, struct flyd_qjob *j,
			const struct flyd_tune_result *r)
{
	struct flyd_ctx *ctx = sc->ctx;
	uint64_t nf = 0, backoff;

	for (size_t i = 0; i < r->ntrials; i++)
		if (r->trials[i].outcome == FLYD_OUT_FAULTED)
			nf++;
	if (r->ntrials > 0 &&
	    flyd_store_trials_add(ctx->store, j->key, ctx->device_id,
				  ctx->libver, r->trials, r->ntrials) < 0)
		flyd_log(FLYD_LOG_ERR, "trials_store_failed", "key=%s",
			 j->key);
	ctx->stats.candidates_faulted += nf > 0 ? nf : 1;
	count_job(sc, j->key, FLYD_JOB_FAULTED);
	j->faults++;
	backoff = FAULT_BACKOFF_MS;
	for (uint32_t i = 1; i < j->faults && backoff < FAULT_BACKOFF_MAX_MS;
	     i++)
		backoff *= 2;
	if (backoff > FAULT_BACKOFF_MAX_MS)
		backoff = FAULT_BACKOFF_MAX_MS;
	flyd_log(FLYD_LOG_WARN, "job_faulted", "key=%s faults=%u max=%d "
		 "backoff_ms=%llu", j->key, j->faults, MAX_FAULTS,
		 (unsigned long long)backoff);
	if (j->faults >= MAX_FAULTS) {
		job_fail(sc, j, FLY_E_GPU, "too many worker faults (set-up or "
			 "candidates)");
		return;
	}
	/* To the back, after a backoff: a job that keeps killing the worker
	 * (a set-up too long for its limit) must not starve the others
	 * (issue 18); its count is persisted for a restart. */
	flyd_queue_requeue_back(sc->q, j, uv_now(ctx->loop) + backoff);
	persist_job(sc, j);
}

/* A tuned job's waiters are answered: its excess over what its budget
 * governs goes to the reserve (reserve.h); its wall time counts from
 * job_start_ns(). */
static void note_excess(struct flyd_sched *sc,
			const struct flyd_tune_result *r)
{
	double wall = (double)(uv_hrtime() - sc->taken_ns) / 1e9;
	double x = flyd_reserve_excess(wall, r->setup_s, r->tune_s,
				       r->over_s);

	flyd_reserve_note(&sc->reserve, x);
	flyd_log(FLYD_LOG_INFO, "job_excess",
		 "key=%s wall_s=%.4f setup_s=%.4f tune_s=%.4f over_s=%.4f "
		 "excess_s=%.4f reserve_s=%.4f", r->key, wall, r->setup_s,
		 r->tune_s, r->over_s, x,
		 flyd_reserve_s(&sc->reserve, sc->ctx->cfg.job_budget_s));
}

static void done_cb(void *arg, const struct flyd_tune_result *r)
{
	struct flyd_sched *sc = arg;
	struct flyd_ctx *ctx = sc->ctx;
	struct flyd_qjob *j;

	if (sc->closing)
		return; /* stopping: the job stays in the jobs table */
	j = flyd_queue_running(sc->q);
	if (j == NULL || strcmp(j->key, r->key) != 0) {
		flyd_log(FLYD_LOG_WARN, "stray_result", "key=%s", r->key);
		return;
	}
	span_add(sc, j->started_ms, uv_now(ctx->loop));
	j->asked_ns = 0;
	if (j->cancelled && j->rerun) {
		/* cancelled, then asked again before its run stopped: the new
		 * request's job runs next, its waiters kept */
		flyd_log(FLYD_LOG_INFO, "job_cancelled", "key=%s rerun=1",
			 j->key);
		count_job(sc, j->key, FLYD_JOB_CANCELLED);
		fleet_release(sc, j, 0);
		j->cancelled = 0;
		j->rerun = 0;
		flyd_queue_requeue_front(sc->q, j);
	} else if (j->cancelled) {
		/* forgotten while running: nothing of it is kept */
		flyd_log(FLYD_LOG_INFO, "job_cancelled", "key=%s", j->key);
		count_job(sc, j->key, FLYD_JOB_CANCELLED);
		flyd_results_answer_error(sc->res, j, FLY_E_NOTFOUND,
					  "job cancelled by forget");
		fleet_release(sc, j, 0);
		flyd_queue_done(sc->q, j);
	} else if (r->rc == 0) {
		count_run(sc, j, r);
		job_succeeded(sc, j, r);
		note_excess(sc, r);
	} else if (r->rc == -ECHILD) {
		count_run(sc, j, r);
		job_faulted(sc, j, r);
	} else {
		count_run(sc, j, r);
		if (r->ntrials > 0)
			(void)flyd_store_trials_add(ctx->store, j->key,
						    ctx->device_id,
						    ctx->libver, r->trials,
						    r->ntrials);
		job_fail(sc, j, r->rc, fly_strerror(r->rc));
	}
	sc->done_ns = uv_hrtime();
	kick_soon(sc);
}

/* ------------------------------------------------------------ import */

int flyd_sched_check_result(const struct flyd_sched *sc, const char *key,
			    const struct fly_decision *d, char *why,
			    size_t cap)
{
	const struct flyk_backend *btab;
	const struct flyd_registry *reg;
	const struct flyk_variant *v;
	struct fly_problem p, kp, lo;
	int rc;

	reg = sc != NULL ? flyd_worker_registry(sc->worker) : NULL;
	if (reg == NULL) {
		snprintf(why, cap, "the worker has not reported its kernel "
			 "registry yet");
		return FLY_E_GPU;
	}
	rc = fly_key_parse(key, strlen(key), &p);
	if (rc < 0) {
		snprintf(why, cap, "'key' is not a canonical shape key");
		return FLY_E_INVALID;
	}
	kp = p;
	fly_problem_shape(&p); /* what the kernels see: no FLY_F_EXACT */
	if (flyd_registry_check(reg, &p, d, why, cap) < 0)
		return FLY_E_INVALID;
	/* The in-process table is the worker's own (the CPU backend): its
	 * feasibility needs no device, so check the point on the key and on
	 * its bucket's floor, as a job does. */
	btab = flyd_results_backend(sc->res);
	v = btab != NULL ? flyk_variant_find(btab, p.op, d->variant) : NULL;
	if (v == NULL)
		return 0;
	fly_problem_bucket_floor(&kp, &sc->ctx->cfg.bucket[p.op], &lo);
	fly_problem_shape(&lo);
	if (v->feasible(NULL, &p, d->params) != 0 ||
	    v->feasible(NULL, &lo, d->params) != 0) {
		snprintf(why, cap, "variant \"%s\" is not feasible for the key "
			 "at these params", d->variant);
		return FLY_E_INVALID;
	}
	return 0;
}

/* ------------------------------------------------------------ READY */

static int resume_one(void *arg, const struct flyd_job *row)
{
	struct flyd_sched *sc = arg;
	struct flyd_qjob *j;
	int rc;

	rc = flyd_queue_push(sc->q, row->key, row->priority, row->force, &j);
	if (rc == 0) {
		j->queued_at = row->queued_at;
		j->faults = row->faults;
		j->persisted = 1;
	}
	return 0;
}

/* A failed job of an earlier run: a FAILED marker again. */
static int resume_failed(void *arg, const struct flyd_failed *f)
{
	struct flyd_sched *sc = arg;
	struct flyd_qjob *j;

	if (flyd_queue_push(sc->q, f->key, FLYD_PRIO_BACKGROUND, 0, &j) == 0) {
		j->faults = f->faults;
		flyd_queue_fail(sc->q, j);
	}
	return 0;
}

static void persist_pending(void *arg, struct flyd_qjob *j)
{
	if (!j->persisted)
		persist_job(arg, j);
}

static void first_ready(struct flyd_sched *sc)
{
	struct flyd_ctx *ctx = sc->ctx;
	int rc;

	rc = flyd_store_device_put(ctx->store, ctx->fingerprint,
				   ctx->device_id);
	if (rc < 0) {
		flyd_log(FLYD_LOG_ERR, "device_put_failed", "rc=%d", rc);
		flyd_store_device_id(ctx->fingerprint, ctx->device_id);
	}
	parse_libver(ctx->fingerprint, ctx->libver);
	{
		int64_t nd = 0, nr = 0;

		rc = flyd_store_device_prune(ctx->store, ctx->fingerprint, &nd,
					     &nr);
		if (rc < 0)
			flyd_log(FLYD_LOG_ERR, "device_prune_failed", "rc=%d",
				 rc);
		else if (nd > 0)
			flyd_log(FLYD_LOG_INFO, "devices_pruned",
				 "devices=%lld results=%lld why=\"this "
				 "hardware under an older software stack "
				 "(kernels, BLAS, driver or runtime)\"",
				 (long long)nd, (long long)nr);
	}
	flyd_results_load(sc->res, ctx->backend);
	rc = flyd_store_job_iter(ctx->store, ctx->device_id, resume_one, sc);
	if (rc < 0)
		flyd_log(FLYD_LOG_ERR, "jobs_resume_failed", "rc=%d", rc);
	rc = flyd_store_failed_iter(ctx->store, ctx->device_id,
				    resume_failed, sc);
	if (rc < 0)
		flyd_log(FLYD_LOG_ERR, "jobs_resume_failed", "rc=%d", rc);
	sc->ready_once = 1;
	flyd_queue_foreach(sc->q, persist_pending, sc);
	flyd_log(FLYD_LOG_INFO, "tuning_ready",
		 "backend=%s device=%s libver=%s results=%zu queued=%u",
		 ctx->backend, ctx->device_id, ctx->libver,
		 flyd_results_count(sc->res), flyd_queue_len(sc->q));
	sc->on_ready(sc->on_ready_arg);
}

static void ready_cb(void *arg, const char *backend, const char *fp)
{
	struct flyd_sched *sc = arg;
	struct flyd_ctx *ctx = sc->ctx;

	if (sc->closing)
		return;
	if (!sc->ready_once) {
		snprintf(ctx->backend, sizeof(ctx->backend), "%s", backend);
		snprintf(ctx->fingerprint, sizeof(ctx->fingerprint), "%s",
			 fp);
		first_ready(sc);
	} else if (strcmp(fp, ctx->fingerprint) != 0) {
		flyd_log(FLYD_LOG_WARN, "fingerprint_changed",
			 "keeping the first one until restart");
	}
	kick_soon(sc);
}

/* ------------------------------------------------------------ lifecycle */

int flyd_sched_start(struct flyd_ctx *ctx, struct flyd_results *res,
		     void (*on_ready)(void *arg), void *arg,
		     struct flyd_sched **out)
{
	struct flyd_sched *sc;
	struct flyd_worker_opts wo;
	int rc;

	*out = NULL;
	sc = calloc(1, sizeof(*sc));
	if (sc == NULL)
		return -ENOMEM;
	sc->ctx = ctx;
	sc->res = res;
	sc->on_ready = on_ready;
	sc->on_ready_arg = arg;
	rc = flyd_queue_new(ctx->cfg.queue_cap, &sc->q);
	if (rc < 0)
		goto err_free;
	sc->last_request_ms = uv_now(ctx->loop);
	memset(&wo, 0, sizeof(wo));
	wo.exe = ctx->exe;
	wo.device = ctx->device;
	wo.backend = ctx->cfg.backend;
	wo.cand_timeout_s = ctx->cfg.cand_timeout_s;
	wo.setup_timeout_s = ctx->cfg.setup_timeout_s;
	wo.max_restarts = 3;
	/* READY and results arrive over the worker's pipe, never from
	 * inside flyd_worker_start(): the timers may be set up after it. */
	rc = flyd_worker_start(ctx->loop, &wo, ready_cb, done_cb, sc,
			       &sc->worker);
	if (rc < 0) {
		flyd_log(FLYD_LOG_CRIT, "worker_start_failed", "rc=%d", rc);
		goto err_free;
	}
	uv_timer_init(ctx->loop, &sc->tick);
	uv_timer_init(ctx->loop, &sc->kick);
	sc->tick.data = sc->kick.data = sc;
	uv_timer_start(&sc->tick, tick_cb, TICK_MS, TICK_MS);
	*out = sc;
	return 0;

err_free:
	flyd_queue_free(sc->q);
	free(sc);
	return rc;
}

static void stop_noop(void *arg)
{
	(void)arg;
}

static void handle_closed(uv_handle_t *h)
{
	struct flyd_sched *sc = h->data;

	if (--sc->pending == 0)
		schedule(sc);
}

static void worker_stopped(void *arg)
{
	struct flyd_sched *sc = arg;

	sc->worker = NULL;
	if (--sc->pending == 0)
		schedule(sc);
}

void flyd_sched_stop(struct flyd_sched *sc, void (*done)(void *), void *arg)
{
	if (sc == NULL) {
		if (done != NULL)
			done(arg);
		return;
	}
	if (sc->closing)
		return;
	sc->closing = 1;
	sc->stop_done = done != NULL ? done : stop_noop;
	sc->stop_arg = arg;
	/* Hold one reference while tearing down so nothing completes
	 * before every close was requested. */
	sc->pending++;
	uv_timer_stop(&sc->tick);
	uv_timer_stop(&sc->kick);
	sc->pending += 2;
	uv_close((uv_handle_t *)&sc->tick, handle_closed);
	uv_close((uv_handle_t *)&sc->kick, handle_closed);
	if (sc->worker != NULL) {
		sc->pending++;
		flyd_worker_stop(sc->worker, worker_stopped, sc);
	}
	if (--sc->pending == 0)
		schedule(sc);
}

void flyd_sched_reconfigure(struct flyd_sched *sc)
{
	if (!flyd_sched_is_running(sc))
		return;
	flyd_queue_set_cap(sc->q, sc->ctx->cfg.queue_cap);
	kick_soon(sc);
}

int flyd_sched_is_running(const struct flyd_sched *sc)
{
	return sc != NULL && !sc->closing;
}

int flyd_sched_is_healthy(const struct flyd_sched *sc)
{
	return sc != NULL && !sc->closing && sc->worker != NULL &&
	       flyd_worker_is_healthy(sc->worker);
}

int flyd_sched_device_lost(const struct flyd_sched *sc)
{
	return sc != NULL && sc->worker != NULL && !sc->closing &&
	       flyd_worker_open_failures(sc->worker) >= 2 &&
	       !flyd_worker_is_ready(sc->worker);
}

int flyd_ctx_degraded(const struct flyd_ctx *ctx)
{
	return ctx->degraded || !flyd_sched_is_healthy(ctx->sched) ||
	       (ctx->store != NULL && flyd_store_was_quarantined(ctx->store));
}

void flyd_sched_note_request(struct flyd_sched *sc)
{
	sc->last_request_ms = uv_now(sc->ctx->loop);
}

int flyd_sched_enqueue(struct flyd_sched *sc, const char *key, int prio,
		       int force, struct flyd_qjob **out)
{
	return enqueue(sc, key, prio, force, out);
}

void flyd_sched_kick(struct flyd_sched *sc)
{
	kick_soon(sc);
}

void flyd_sched_status(const struct flyd_sched *sc, cJSON *resp)
{
	struct flyd_qjob *run;
	cJSON *q, *w;

	if (sc == NULL)
		return;
	run = flyd_queue_running(sc->q);
	q = cJSON_AddObjectToObject(resp, "queue");
	cJSON_AddNumberToObject(q, "queued", flyd_queue_len(sc->q));
	if (run != NULL && !run->cancelled)
		cJSON_AddStringToObject(q, "running", run->key);
	else
		cJSON_AddNullToObject(q, "running");
	cJSON_AddNumberToObject(q, "cap", flyd_queue_cap(sc->q));
	w = cJSON_AddObjectToObject(resp, "worker");
	cJSON_AddNumberToObject(w, "pid", sc->worker != NULL ?
				flyd_worker_pid(sc->worker) : 0);
	cJSON_AddNumberToObject(w, "restarts", sc->worker != NULL ?
				flyd_worker_restarts(sc->worker) : 0);
	cJSON_AddBoolToObject(w, "healthy", flyd_sched_is_healthy(sc));
	/* RELIABILITY.md F11: the device could not be opened (tuning is
	 * refused with `gpu`; the winners are still served) */
	cJSON_AddBoolToObject(w, "device_lost", flyd_sched_device_lost(sc));
	cJSON_AddStringToObject(resp, "policy", policy_name(sc->ctx->cfg.policy));
}

static void count_waiting(void *arg, struct flyd_qjob *j)
{
	if (j->fleet == FLYD_QF_WAITING)
		(*(uint32_t *)arg)++;
}

void flyd_sched_gauges(const struct flyd_sched *sc,
		       struct flyd_sched_gauges *g)
{
	memset(g, 0, sizeof(*g));
	if (!flyd_sched_is_running(sc))
		return;
	g->queued = flyd_queue_len(sc->q);
	g->running = flyd_queue_running(sc->q) != NULL;
	g->cap = flyd_queue_cap(sc->q);
	g->restarts = sc->worker != NULL ? flyd_worker_restarts(sc->worker) : 0;
	g->healthy = flyd_sched_is_healthy(sc);
	flyd_queue_foreach(sc->q, count_waiting, &g->fleet_waiting);
}

/* ------------------------------------------------------------ cancel */

/* forget cancels the key's job (NULL: every job): a queued one is
 * dropped, a running one abandoned (the worker's child is killed; its end
 * is dropped by done_cb); waiters get not_found (issue 18). */
static void cancel_one(void *arg, struct flyd_qjob *j)
{
	struct flyd_sched *sc = arg;
	struct flyd_ctx *ctx = sc->ctx;

	flyd_log(FLYD_LOG_INFO, "job_cancelled", "key=%s state=%s", j->key,
		 j->state == FLYD_Q_RUNNING && !j->cancelled ? "running" :
							    "queued");
	flyd_results_answer_error(sc->res, j, FLY_E_NOTFOUND,
				  "job cancelled by forget");
	if (ctx->device_id[0] != '\0')
		(void)flyd_store_job_del(ctx->store, ctx->device_id, j->key);
	if (j->state == FLYD_Q_RUNNING && j->cancelled) {
		j->rerun = 0; /* the request made after the cancel goes too */
		return;
	}
	if (j->state == FLYD_Q_RUNNING) {
		j->cancelled = 1; /* counted when its end comes back */
		flyd_worker_cancel(sc->worker);
		return;
	}
	count_job(sc, j->key, FLYD_JOB_CANCELLED);
	fleet_release(sc, j, 0);
	flyd_queue_done(sc->q, j);
}

static void cancel_jobs(struct flyd_sched *sc, const char *key)
{
	struct flyd_qjob *j;

	if (key != NULL) {
		j = flyd_queue_find(sc->q, key);
		if (j != NULL && j->state != FLYD_Q_FAILED &&
		    (!j->cancelled || j->rerun))
			cancel_one(sc, j);
		return;
	}
	flyd_queue_foreach(sc->q, cancel_one, sc);
	j = flyd_queue_running(sc->q);
	if (j != NULL && (!j->cancelled || j->rerun))
		cancel_one(sc, j);
}

struct flyd_queue *flyd_sched_queue(const struct flyd_sched *sc)
{
	return flyd_sched_is_running(sc) ? sc->q : NULL;
}

int flyd_sched_cancel(struct flyd_sched *sc, const char *key,
		      const char **was)
{
	struct flyd_ctx *ctx;
	struct flyd_qjob *j;

	if (!flyd_sched_is_running(sc))
		return FLY_E_DOWN;
	ctx = sc->ctx;
	j = flyd_queue_find(sc->q, key);
	if (j == NULL || (j->cancelled && !j->rerun))
		return FLY_E_NOTFOUND;
	*was = j->cancelled ? "queued" : /* asked again after a cancel */
	       j->state == FLYD_Q_RUNNING ? "running" :
	       j->state == FLYD_Q_QUEUED ? "queued" : "failed";
	if (j->state == FLYD_Q_FAILED) {
		flyd_log(FLYD_LOG_INFO, "job_cancelled", "key=%s state=failed",
			 key);
		flyd_results_answer_error(sc->res, j, FLY_E_NOTFOUND,
					  "job cancelled");
		if (ctx->device_id[0] != '\0')
			(void)flyd_store_failed_del(ctx->store, ctx->device_id,
						    key);
		flyd_queue_clear_failed(sc->q, key);
	} else {
		if (j->state == FLYD_Q_RUNNING && !j->cancelled)
			span_add(sc, j->started_ms, uv_now(ctx->loop));
		/* a running job's worker is stopped; done_cb drops its end */
		cancel_one(sc, j);
	}
	kick_soon(sc);
	return 0;
}

void flyd_sched_forget(struct flyd_sched *sc, const char *key)
{
	struct flyd_ctx *ctx;

	if (!flyd_sched_is_running(sc))
		return;
	ctx = sc->ctx;
	flyd_results_forget(sc->res, key);
	flyd_queue_clear_failed(sc->q, key);
	if (ctx->device_id[0] != '\0')
		(void)flyd_store_failed_del(ctx->store, ctx->device_id, key);
	cancel_jobs(sc, key);
	flyd_results_bump(sc->res);
}
