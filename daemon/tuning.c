/*
 * tuning.c -- the tuning path (tuning.h): decide, the job queue and its
 * policy, the worker, the FULL commit, the shm publication, the waiters.
 *
 * Owns: struct flyd_tuning (the queue, the results map, the shm writer,
 * the worker supervisor, two timers and the deferred `tune wait`
 * replies).  Thread: loop thread only.
 *
 * Invariant: the order on a finished job is commit (synchronous=FULL),
 * then the results map and the shm table, then the waiters; nothing is
 * reported `tuned` that is not durable.  A job's row stays in the jobs
 * table until its winner is committed, so a restart resumes it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decide.h"
#include "fly_key.h"
#include "fly_msg.h"
#include "fly_err.h"
#include "flyk.h"
#include "log.h"
#include "notify.h"
#include "publish.h"
#include "queue.h"
#include "registry.h"
#include "tuning.h"
#include "worker.h"

#define TICK_MS 200            /* policy / cap / worker re-check */
#define MAX_FAULTS 8           /* worker deaths per key before giving up */
#define FAULT_BACKOFF_MS 250   /* a faulted job waits this, doubling ... */
#define FAULT_BACKOFF_MAX_MS 5000 /* ... up to this, behind the others */
#define NSPANS 256             /* busy spans kept for the 60 s window */
#define WINDOW_MS 60000
#define WAIT_DEFAULT_MS 600000 /* `tune wait` without timeout_ms */

struct waiter {
	struct flyd_tuning *t;
	struct flyd_reply *reply;  /* NULL once answered */
	struct flyd_qjob *job;     /* NULL once detached */
	uv_timer_t timer;
	char key[FLY_KEY_MAX];
	struct waiter *jnext;      /* the job's waiters (job->udata) */
	struct waiter *aprev;      /* every live waiter */
	struct waiter *anext;
};

struct span {
	uint64_t start_ms;
	uint64_t end_ms;
};

struct flyd_tuning {
	struct flyd_ctx *ctx;
	struct flyd_queue *q;
	struct flyd_rmap *rmap;
	struct flyd_publish *pub;
	struct flyd_worker *worker;
	const struct flyk_backend *btab; /* for defaults; NULL: unknown */
	uv_timer_t tick;
	uv_timer_t kick;              /* "run the scheduler soon" */
	int ready_once;               /* first READY handled */
	uint64_t last_request_ms;
	struct span spans[NSPANS];    /* ring of finished busy spans */
	unsigned nspans;
	unsigned span_head;
	struct waiter *waiters;
	int closing;
	int pending;                  /* handles still closing at stop */
	void (*stop_done)(void *);
	void *stop_arg;
	struct flyd_tune_job job;     /* scratch: ~20 KB, kept off the stack */
};

static void schedule(struct flyd_tuning *t);
static void kick_soon(struct flyd_tuning *t);

/* ------------------------------------------------------------ helpers */

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

/* The backend table used for heuristic defaults (the worker owns the
 * device; defaults need only the table).  GPU tables are not loaded in
 * the daemon: their defaults are the empty decision. */
static const struct flyk_backend *backend_table(const char *name)
{
	if (strcmp(name, "cpu") == 0)
		return flyk_cpu_backend();
	return NULL;
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
static double busy_s_window(const struct flyd_tuning *t, uint64_t now)
{
	uint64_t from = now > WINDOW_MS ? now - WINDOW_MS : 0;
	uint64_t ms = 0;
	struct flyd_qjob *run = flyd_queue_running(t->q);

	for (unsigned i = 0; i < t->nspans; i++) {
		const struct span *sp = &t->spans[i];
		uint64_t a = sp->start_ms > from ? sp->start_ms : from;

		if (sp->end_ms > a)
			ms += sp->end_ms - a;
	}
	if (run != NULL && now > run->started_ms)
		ms += now - (run->started_ms > from ? run->started_ms : from);
	return (double)ms / 1000.0;
}

static void span_add(struct flyd_tuning *t, uint64_t start, uint64_t end)
{
	t->spans[t->span_head] = (struct span){start, end};
	t->span_head = (t->span_head + 1) % NSPANS;
	if (t->nspans < NSPANS)
		t->nspans++;
}

/* Whether a background job may start now (explicit ones always may). */
static int background_allowed(const struct flyd_tuning *t)
{
	const struct flyd_config *c = &t->ctx->cfg;
	uint64_t now = uv_now(t->ctx->loop);

	if (c->policy == FLYD_POLICY_ON_REQUEST)
		return 0;
	if (c->policy == FLYD_POLICY_IDLE &&
	    now - t->last_request_ms < c->idle_ms)
		return 0;
	if (c->bench_s_per_min > 0 && c->bench_s_per_min < 60 &&
	    busy_s_window(t, now) >= c->bench_s_per_min)
		return 0;
	return 1;
}

/* Parse, bucket and re-format the request's key. */
static int request_key(struct flyd_ctx *ctx, const cJSON *req,
		       struct fly_problem *p, char key[FLY_KEY_MAX],
		       const char **msg)
{
	const char *s;
	int rc;

	if (fly_msg_get_str(req, "key", &s) < 0) {
		*msg = "missing or non-string \"key\"";
		return FLY_E_INVALID;
	}
	rc = fly_key_parse(s, strlen(s), p);
	if (rc < 0) {
		/* Say which part is wrong (issue 18 item 18); loop thread
		 * only, read before the next request is handled. */
		static char why[512];

		(void)fly_key_explain(s, why, sizeof(why));
		*msg = why;
		return rc;
	}
	if (p->op < FLY_OP_COUNT)
		fly_problem_bucket(p, &ctx->cfg.bucket[p->op]);
	rc = fly_key_format(p, key, FLY_KEY_MAX);
	if (rc < 0) {
		*msg = fly_strerror(rc);
		return rc;
	}
	return 0;
}

/* Add a key to the results map (parsing it) and optionally publish it. */
static void remember(struct flyd_tuning *t, const char *key,
		     const struct fly_decision *d, int publish, int *replaced)
{
	struct fly_problem p;
	struct fly_decision md = *d;
	int rc;

	md.status = FLY_STATUS_TUNED;
	md.provisional = 0;
	if (fly_key_parse(key, strlen(key), &p) < 0) {
		flyd_log(FLYD_LOG_WARN, "bad_stored_key", "key=%s", key);
		return;
	}
	rc = flyd_rmap_put(t->rmap, key, &p, &md);
	if (replaced != NULL)
		*replaced = rc == 1;
	if (publish)
		(void)flyd_publish_put(t->pub, key, &md);
}

/* The tuned decision of a key: the map, else the store (another instance
 * on an identical device may have committed it), or NULL. */
static const struct fly_decision *lookup_tuned(struct flyd_tuning *t,
					       const char *key, int check_db)
{
	struct flyd_ctx *ctx = t->ctx;
	const struct fly_decision *d = flyd_rmap_get(t->rmap, key);
	struct flyd_result r;

	if (d != NULL || !check_db || !t->ready_once)
		return d;
	if (flyd_store_result_get(ctx->store, key, ctx->device_id,
				  ctx->libver, &r) != 0)
		return NULL;
	remember(t, key, &r.d, 1, NULL);
	return flyd_rmap_get(t->rmap, key);
}

static void persist_job(struct flyd_tuning *t, struct flyd_qjob *j)
{
	struct flyd_job row;
	int rc;

	if (!t->ready_once)
		return; /* device id unknown: persisted at READY */
	memset(&row, 0, sizeof(row));
	memcpy(row.key, j->key, sizeof(row.key));
	row.priority = j->priority;
	row.force = j->force;
	row.queued_at = j->queued_at;
	row.faults = j->faults;
	rc = flyd_store_job_put(t->ctx->store, t->ctx->device_id, &row);
	if (rc < 0)
		flyd_log(FLYD_LOG_WARN, "job_persist_failed", "key=%s rc=%d",
			 j->key, rc);
	else
		j->persisted = 1;
}

/* Queue a job.  @return as flyd_queue_push(). */
static int enqueue(struct flyd_tuning *t, const char *key, int prio,
		   int force, struct flyd_qjob **out)
{
	struct flyd_qjob *j;
	int before_prio = -1, before_force = 0;
	int rc;

	j = flyd_queue_find(t->q, key);
	if (j != NULL) {
		before_prio = j->priority;
		before_force = j->force;
	}
	rc = flyd_queue_push(t->q, key, prio, force, &j);
	if (out != NULL)
		*out = j;
	if (rc == FLY_E_BUSY)
		t->ctx->stats.busy_rejections++;
	if (rc < 0 || rc == 2)
		return rc;
	if (rc == 0) {
		j->queued_at = (int64_t)time(NULL);
		/* a forced tune of a failed key: its record goes */
		if (force && t->ready_once)
			(void)flyd_store_failed_del(t->ctx->store,
						    t->ctx->device_id, key);
		persist_job(t, j);
	} else if (j->state == FLYD_Q_QUEUED &&
		   (j->priority != before_prio || j->force != before_force)) {
		persist_job(t, j);
	}
	return rc;
}

/* ------------------------------------------------------------ waiters */

static void waiter_closed(uv_handle_t *h)
{
	struct waiter *w = h->data;
	struct flyd_tuning *t = w->t;

	free(w);
	if (--t->pending == 0 && t->closing)
		schedule(t); /* finishes the stop */
}

/* Answer a waiter (takes ownership of @p resp) and release it. */
static void waiter_answer(struct waiter *w, cJSON *resp)
{
	struct flyd_tuning *t = w->t;

	if (w->job != NULL) {
		struct waiter **pp = (struct waiter **)&w->job->udata;

		while (*pp != NULL && *pp != w)
			pp = &(*pp)->jnext;
		if (*pp == w)
			*pp = w->jnext;
		w->job = NULL;
	}
	if (w->reply != NULL) {
		(void)flyd_reply_send(w->reply, resp);
		w->reply = NULL;
	} else {
		cJSON_Delete(resp);
	}
	if (w->aprev != NULL)
		w->aprev->anext = w->anext;
	else
		t->waiters = w->anext;
	if (w->anext != NULL)
		w->anext->aprev = w->aprev;
	uv_timer_stop(&w->timer);
	t->pending++;
	uv_close((uv_handle_t *)&w->timer, waiter_closed);
}

/* {"key", "status", "queued", "decision"?}; caller owns result. */
static cJSON *tune_resp(const char *key, const struct fly_decision *d,
			int queued)
{
	cJSON *r = cJSON_CreateObject();

	if (r == NULL)
		abort(); /* daemon OOM policy (STYLE.md R7) */
	cJSON_AddBoolToObject(r, "ok", 1);
	cJSON_AddStringToObject(r, "key", key);
	cJSON_AddStringToObject(r, "status",
				fly_status_name(d != NULL ? d->status
					       : FLY_STATUS_PENDING));
	cJSON_AddBoolToObject(r, "queued", queued);
	if (d != NULL)
		cJSON_AddItemToObject(r, "decision",
				      fly_msg_decision_to_json(d));
	return r;
}

static void answer_job_waiters_tuned(struct flyd_qjob *j,
				     const struct fly_decision *d)
{
	while (j->udata != NULL) {
		struct waiter *w = j->udata;

		waiter_answer(w, tune_resp(w->key, d, 0));
	}
}

static void answer_job_waiters_error(struct flyd_qjob *j, int code,
				     const char *msg)
{
	while (j->udata != NULL) {
		struct waiter *w = j->udata;
		cJSON *e = fly_msg_error(code, msg);

		if (e == NULL)
			abort();
		waiter_answer(w, e);
	}
}

/* ------------------------------------------------------------ decide */

/* The best non-tuned answer: nearest tuned neighbour, else the default;
 * status pending when a job is queued or running, else default.
 * @return -EOPNOTSUPP when the backend does not support the problem. */
static int provisional(struct flyd_tuning *t, const char *key,
		       const struct fly_problem *p, int queued,
		       struct fly_decision *d)
{
	struct fly_decision def;
	int rc = flyd_decide_default(t->btab, p, &def);

	if (flyd_rmap_nearest(t->rmap, key, p, d, NULL) != 0)
		*d = def;
	d->status = queued ? FLY_STATUS_PENDING : FLY_STATUS_DEFAULT;
	d->median_us = d->provisional ? d->median_us : 0.0;
	return rc;
}

int flyd_handle_decide(struct flyd_ctx *ctx, struct flyd_req *rq,
		       const cJSON *req, cJSON *resp, const char **msg)
{
	struct flyd_tuning *t = ctx->tuning;
	struct fly_problem p;
	char key[FLY_KEY_MAX];
	const struct fly_decision *tuned;
	struct fly_decision d, def;
	struct flyd_qjob *j;
	int rc, queued = 0;

	(void)rq;
	ctx->stats.decides++;
	if (t == NULL || t->closing) {
		*msg = "tuning is stopped";
		return FLY_E_DOWN;
	}
	t->last_request_ms = uv_now(ctx->loop);
	rc = request_key(ctx, req, &p, key, msg);
	if (rc < 0)
		return rc;
	j = flyd_queue_find(t->q, key);
	tuned = lookup_tuned(t, key, j == NULL);
	if (tuned != NULL) {
		ctx->stats.decide_tuned++;
		d = *tuned;
		goto answer;
	}
	if (flyd_decide_default(t->btab, &p, &def) == 0 &&
	    ctx->cfg.policy != FLYD_POLICY_ON_REQUEST) {
		rc = enqueue(t, key, FLYD_PRIO_BACKGROUND, 0, &j);
		queued = rc == 0 || rc == 1;
		if (rc == 0)
			kick_soon(t);
	} else if (j != NULL) {
		queued = j->state != FLYD_Q_FAILED;
	}
	(void)provisional(t, key, &p, queued, &d);
	if (queued)
		ctx->stats.decide_pending++;
	else
		ctx->stats.decide_default++;
answer:
	cJSON_AddStringToObject(resp, "key", key);
	cJSON_AddItemToObject(resp, "decision", fly_msg_decision_to_json(&d));
	return 0;
}

/* ------------------------------------------------------------ tune */

static void waiter_timeout(uv_timer_t *h)
{
	struct waiter *w = h->data;
	struct flyd_tuning *t = w->t;
	struct fly_problem p;
	struct fly_decision d;
	const struct fly_decision *tuned = flyd_rmap_get(t->rmap, w->key);

	if (tuned != NULL) {
		waiter_answer(w, tune_resp(w->key, tuned, 0));
		return;
	}
	if (fly_key_parse(w->key, strlen(w->key), &p) == 0)
		(void)provisional(t, w->key, &p, 1, &d);
	else
		memset(&d, 0, sizeof(d));
	d.status = FLY_STATUS_PENDING;
	waiter_answer(w, tune_resp(w->key, &d, 1));
}

static int add_waiter(struct flyd_tuning *t, struct flyd_req *rq,
		      struct flyd_qjob *j, int64_t timeout_ms)
{
	struct waiter *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return -ENOMEM;
	w->reply = flyd_req_defer(rq);
	if (w->reply == NULL) {
		free(w);
		return -ENOMEM;
	}
	w->t = t;
	memcpy(w->key, j->key, sizeof(w->key));
	w->job = j;
	w->jnext = j->udata;
	j->udata = w;
	w->anext = t->waiters;
	if (t->waiters != NULL)
		t->waiters->aprev = w;
	t->waiters = w;
	uv_timer_init(t->ctx->loop, &w->timer);
	w->timer.data = w;
	uv_timer_start(&w->timer, waiter_timeout, (uint64_t)timeout_ms, 0);
	return 0;
}

int flyd_handle_tune(struct flyd_ctx *ctx, struct flyd_req *rq,
		     const cJSON *req, cJSON *resp, const char **msg)
{
	struct flyd_tuning *t = ctx->tuning;
	struct fly_problem p;
	char key[FLY_KEY_MAX];
	const struct fly_decision *tuned;
	struct fly_decision d;
	struct flyd_qjob *j;
	int force = 0, wait = 0, rc;
	int64_t timeout_ms = WAIT_DEFAULT_MS;

	if (t == NULL || t->closing) {
		*msg = "tuning is stopped";
		return FLY_E_DOWN;
	}
	t->last_request_ms = uv_now(ctx->loop);
	rc = request_key(ctx, req, &p, key, msg);
	if (rc < 0)
		return rc;
	if (fly_msg_opt_bool(req, "force", &force) < 0 ||
	    fly_msg_opt_bool(req, "wait", &wait) < 0 ||
	    fly_msg_opt_int(req, "timeout_ms", &timeout_ms) < 0 ||
	    timeout_ms < 0) {
		*msg = "force, wait: booleans; timeout_ms: integer >= 0";
		return FLY_E_INVALID;
	}
	j = flyd_queue_find(t->q, key);
	tuned = lookup_tuned(t, key, j == NULL);
	if (tuned != NULL && !force) {
		cJSON_AddStringToObject(resp, "key", key);
		cJSON_AddStringToObject(resp, "status", "tuned");
		cJSON_AddBoolToObject(resp, "queued", 0);
		cJSON_AddItemToObject(resp, "decision",
				      fly_msg_decision_to_json(tuned));
		return 0;
	}
	if (provisional(t, key, &p, 1, &d) == -EOPNOTSUPP) {
		*msg = "problem not supported by this daemon's backend";
		return FLY_E_INVALID;
	}
	rc = enqueue(t, key, FLYD_PRIO_EXPLICIT, force, &j);
	if (rc == FLY_E_BUSY) {
		*msg = "tuning queue full";
		return rc;
	}
	if (rc == 2) {
		*msg = "tuning this key failed (see get or explain); "
		       "tune with force to try again";
		return FLY_E_GPU;
	}
	if (rc < 0) {
		*msg = fly_strerror(rc);
		return rc;
	}
	kick_soon(t);
	if (wait) {
		rc = add_waiter(t, rq, j, timeout_ms);
		if (rc < 0)
			return rc;
		return FLYD_DEFERRED;
	}
	cJSON_AddStringToObject(resp, "key", key);
	cJSON_AddStringToObject(resp, "status", "pending");
	cJSON_AddBoolToObject(resp, "queued", 1);
	cJSON_AddItemToObject(resp, "decision", fly_msg_decision_to_json(&d));
	return 0;
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

/* Fill t->job for @p j.  @return 0 or the key's parse error. */
static int build_job(struct flyd_tuning *t, const struct flyd_qjob *j)
{
	struct flyd_ctx *ctx = t->ctx;
	struct flyd_tune_job *job = &t->job;
	const struct fly_decision *inc;
	int rc;

	memset(job, 0, sizeof(*job));
	memcpy(job->key, j->key, sizeof(job->key));
	rc = fly_key_parse(j->key, strlen(j->key), &job->problem);
	if (rc < 0)
		return rc;
	fly_problem_bucket_floor(&job->problem,
				 &ctx->cfg.bucket[job->problem.op],
				 &job->problem_lo);
	job->budget_s = ctx->cfg.job_budget_s;
	job->margin = ctx->cfg.margin;
	inc = flyd_rmap_get(t->rmap, j->key);
	if (j->force && inc != NULL) {
		job->has_incumbent = 1;
		job->incumbent = *inc;
	}
	(void)flyd_store_trial_iter(ctx->store, j->key, ctx->device_id,
				    ctx->libver, collect_faulted, job);
	return 0;
}

/* Give up on a job: waiters get @p code, its row is replaced by a
 * failed_jobs record (shown by get and explain, kept across restarts), and
 * a FAILED marker keeps it from being queued again until a forced tune or
 * a forget (issue 18). */
static void job_fail(struct flyd_tuning *t, struct flyd_qjob *j, int code,
		     const char *why)
{
	struct flyd_ctx *ctx = t->ctx;
	struct flyd_failed f;

	flyd_log(FLYD_LOG_WARN, "job_failed", "key=%s rc=%d faults=%u "
		 "why=\"%s\"", j->key, code, j->faults, why);
	ctx->stats.jobs_failed++;
	answer_job_waiters_error(j, code, why);
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
	flyd_queue_fail(t->q, j);
}

/* A job whose key is already tuned (another instance committed it, or an
 * earlier job did): finish it without running. */
static void job_adopt(struct flyd_tuning *t, struct flyd_qjob *j,
		      const struct fly_decision *d)
{
	struct flyd_ctx *ctx = t->ctx;
	struct fly_decision copy = *d;

	flyd_log(FLYD_LOG_INFO, "job_adopted", "key=%s", j->key);
	answer_job_waiters_tuned(j, &copy);
	(void)flyd_store_job_del(ctx->store, ctx->device_id, j->key);
	flyd_queue_done(t->q, j);
}

/* Start the next job when the worker is free and the policy allows. */
static void schedule(struct flyd_tuning *t)
{
	struct flyd_ctx *ctx = t->ctx;

	if (t->closing) {
		if (t->pending == 0 && t->stop_done != NULL) {
			void (*done)(void *) = t->stop_done;
			void *arg = t->stop_arg;

			t->stop_done = NULL;
			flyd_queue_free(t->q);
			flyd_rmap_free(t->rmap);
			flyd_publish_close(t->pub);
			ctx->tuning = NULL;
			free(t);
			done(arg);
		}
		return;
	}
	for (int guard = 0; guard < 1024; guard++) {
		struct flyd_qjob *j;
		const struct fly_decision *d;
		int rc;

		if (!t->ready_once || t->worker == NULL ||
		    flyd_queue_running(t->q) != NULL ||
		    flyd_worker_is_busy(t->worker))
			return;
		j = flyd_queue_peek_at(t->q, background_allowed(t),
				       uv_now(ctx->loop));
		if (j == NULL)
			return;
		d = j->force ? NULL : lookup_tuned(t, j->key, 1);
		if (d != NULL) {
			job_adopt(t, j, d);
			continue;
		}
		flyd_queue_start(t->q, j);
		rc = build_job(t, j);
		if (rc < 0) {
			job_fail(t, j, rc, "stored job key does not parse");
			continue;
		}
		rc = flyd_worker_submit(t->worker, &t->job);
		if (rc < 0) {
			/* Restarting or busy: retried on READY / the tick. */
			flyd_queue_requeue_front(t->q, j);
			return;
		}
		j->started_ms = uv_now(ctx->loop);
		flyd_log(FLYD_LOG_INFO, "job_started",
			 "key=%s priority=%d force=%d excluded=%u", j->key,
			 j->priority, j->force, t->job.nexclude);
		return;
	}
}

static void kick_cb(uv_timer_t *h)
{
	schedule(h->data);
}

static void kick_soon(struct flyd_tuning *t)
{
	if (!t->closing)
		uv_timer_start(&t->kick, kick_cb, 0, 0);
}

static void tick_cb(uv_timer_t *h)
{
	schedule(h->data);
}

/* A winner: commit (FULL), then map + shm, then waiters. */
static void job_succeeded(struct flyd_tuning *t, struct flyd_qjob *j,
			  const struct flyd_tune_result *r)
{
	struct flyd_ctx *ctx = t->ctx;
	struct flyd_result res;
	int rc, replaced = 0;

	memset(&res, 0, sizeof(res));
	memcpy(res.key, j->key, sizeof(res.key));
	memcpy(res.device, ctx->device_id, sizeof(res.device));
	memcpy(res.libver, ctx->libver, sizeof(res.libver));
	res.d = r->winner;
	res.d.status = FLY_STATUS_TUNED;
	res.d.provisional = 0;
	res.d.generation = 0;
	res.mad_us = r->mad_us;
	res.tune_s = r->tune_s;
	res.tuned_at = (int64_t)time(NULL);
	rc = flyd_store_result_put(ctx->store, &res, r->trials, r->ntrials);
	if (rc < 0) {
		flyd_log(FLYD_LOG_ERR, "commit_failed", "key=%s rc=%d",
			 j->key, rc);
		ctx->stats.jobs_failed++;
		answer_job_waiters_error(j, FLY_E_STORAGE,
					 "tuning DB commit failed");
		flyd_queue_fail(t->q, j);
		return;
	}
	remember(t, j->key, &res.d, 1, &replaced);
	if (replaced)
		flyd_publish_bump(t->pub);
	flyd_log(FLYD_LOG_INFO, "tuned",
		 "key=%s variant=%s median_us=%.3f tune_s=%.3f trials=%zu",
		 j->key, res.d.variant, res.d.median_us, res.tune_s,
		 r->ntrials);
	ctx->stats.jobs_done++;
	answer_job_waiters_tuned(j, &res.d);
	flyd_queue_done(t->q, j);
}

/* The worker died mid-candidate: keep the evidence, exclude, retry. */
static void job_faulted(struct flyd_tuning *t, struct flyd_qjob *j,
			const struct flyd_tune_result *r)
{
	struct flyd_ctx *ctx = t->ctx;
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
		job_fail(t, j, FLY_E_GPU, "too many worker faults (set-up or "
			 "candidates)");
		return;
	}
	/* To the back, after a backoff: a job that keeps killing the worker
	 * (a set-up too long for its limit) must not starve the others
	 * (issue 18); its count is persisted for a restart. */
	flyd_queue_requeue_back(t->q, j, uv_now(ctx->loop) + backoff);
	persist_job(t, j);
}

static void done_cb(void *arg, const struct flyd_tune_result *r)
{
	struct flyd_ctx *ctx = arg;
	struct flyd_tuning *t = ctx->tuning;
	struct flyd_qjob *j;

	if (t == NULL || t->closing)
		return; /* stopping: the job stays in the jobs table */
	j = flyd_queue_running(t->q);
	if (j == NULL || strcmp(j->key, r->key) != 0) {
		flyd_log(FLYD_LOG_WARN, "stray_result", "key=%s", r->key);
		return;
	}
	span_add(t, j->started_ms, uv_now(ctx->loop));
	if (j->cancelled) {
		/* forgotten while running: nothing of it is kept */
		flyd_log(FLYD_LOG_INFO, "job_cancelled", "key=%s", j->key);
		answer_job_waiters_error(j, FLY_E_NOTFOUND,
					 "job cancelled by forget");
		flyd_queue_done(t->q, j);
	} else if (r->rc == 0) {
		job_succeeded(t, j, r);
	} else if (r->rc == -ECHILD) {
		job_faulted(t, j, r);
	} else {
		if (r->ntrials > 0)
			(void)flyd_store_trials_add(ctx->store, j->key,
						    ctx->device_id,
						    ctx->libver, r->trials,
						    r->ntrials);
		job_fail(t, j, r->rc, fly_strerror(r->rc));
	}
	kick_soon(t);
}

/* ------------------------------------------------------------ import */

int flyd_tuning_check_result(const struct flyd_ctx *ctx, const char *key,
			     const struct fly_decision *d, char *why,
			     size_t cap)
{
	const struct flyd_tuning *t = ctx->tuning;
	const struct flyd_registry *reg;
	const struct flyk_variant *v;
	struct fly_problem p, lo;
	int rc;

	reg = t != NULL ? flyd_worker_registry(t->worker) : NULL;
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
	if (flyd_registry_check(reg, &p, d, why, cap) < 0)
		return FLY_E_INVALID;
	/* The in-process table is the worker's own (the CPU backend): its
	 * feasibility needs no device, so check the point on the key and on
	 * its bucket's floor, as a job does. */
	v = t->btab != NULL ? flyk_variant_find(t->btab, p.op, d->variant)
			    : NULL;
	if (v == NULL)
		return 0;
	fly_problem_bucket_floor(&p, &ctx->cfg.bucket[p.op], &lo);
	if (v->feasible(NULL, &p, d->params) != 0 ||
	    v->feasible(NULL, &lo, d->params) != 0) {
		snprintf(why, cap, "variant \"%s\" is not feasible for the key "
			 "at these params", d->variant);
		return FLY_E_INVALID;
	}
	return 0;
}

/* ------------------------------------------------------------ READY */

static void load_one(void *arg, const struct flyd_result *r)
{
	remember(arg, r->key, &r->d, 0, NULL);
}

static int resume_one(void *arg, const struct flyd_job *row)
{
	struct flyd_tuning *t = arg;
	struct flyd_qjob *j;
	int rc;

	rc = flyd_queue_push(t->q, row->key, row->priority, row->force, &j);
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
	struct flyd_tuning *t = arg;
	struct flyd_qjob *j;

	if (flyd_queue_push(t->q, f->key, FLYD_PRIO_BACKGROUND, 0, &j) == 0) {
		j->faults = f->faults;
		flyd_queue_fail(t->q, j);
	}
	return 0;
}

static void persist_pending(void *arg, struct flyd_qjob *j)
{
	if (!j->persisted)
		persist_job(arg, j);
}

/* Reload map and table from the store; bump the generation. */
static void refill(struct flyd_tuning *t)
{
	struct flyd_ctx *ctx = t->ctx;
	int n;

	flyd_rmap_clear(t->rmap);
	n = flyd_publish_fill(t->pub, ctx->store, ctx->device_id, ctx->libver,
			      load_one, t);
	if (n < 0)
		flyd_log(FLYD_LOG_ERR, "results_load_failed", "rc=%d", n);
	flyd_publish_bump(t->pub);
}

static void first_ready(struct flyd_tuning *t)
{
	struct flyd_ctx *ctx = t->ctx;
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
	t->btab = backend_table(ctx->backend);
	refill(t);
	rc = flyd_store_job_iter(ctx->store, ctx->device_id, resume_one, t);
	if (rc < 0)
		flyd_log(FLYD_LOG_ERR, "jobs_resume_failed", "rc=%d", rc);
	rc = flyd_store_failed_iter(ctx->store, ctx->device_id,
				    resume_failed, t);
	if (rc < 0)
		flyd_log(FLYD_LOG_ERR, "jobs_resume_failed", "rc=%d", rc);
	t->ready_once = 1;
	flyd_queue_foreach(t->q, persist_pending, t);
	flyd_log(FLYD_LOG_INFO, "tuning_ready",
		 "backend=%s device=%s libver=%s results=%zu queued=%u",
		 ctx->backend, ctx->device_id, ctx->libver,
		 flyd_rmap_count(t->rmap), flyd_queue_len(t->q));
	flyd_daemon_ready(ctx);
}

static void ready_cb(void *arg, const char *backend, const char *fp)
{
	struct flyd_ctx *ctx = arg;
	struct flyd_tuning *t = ctx->tuning;

	if (t == NULL || t->closing)
		return;
	if (!t->ready_once) {
		snprintf(ctx->backend, sizeof(ctx->backend), "%s", backend);
		snprintf(ctx->fingerprint, sizeof(ctx->fingerprint), "%s",
			 fp);
		first_ready(t);
	} else if (strcmp(fp, ctx->fingerprint) != 0) {
		flyd_log(FLYD_LOG_WARN, "fingerprint_changed",
			 "keeping the first one until restart");
	}
	kick_soon(t);
}

/* ------------------------------------------------------------ lifecycle */

int flyd_tuning_start(struct flyd_ctx *ctx)
{
	struct flyd_tuning *t;
	struct flyd_worker_opts wo;
	int rc;

	t = calloc(1, sizeof(*t));
	if (t == NULL)
		return -ENOMEM;
	t->ctx = ctx;
	rc = flyd_queue_new(ctx->cfg.queue_cap, &t->q);
	if (rc < 0)
		goto err_free;
	rc = flyd_rmap_new(&t->rmap);
	if (rc < 0)
		goto err_free;
	rc = flyd_publish_open(ctx->cfg.shm_capacity, &t->pub);
	if (rc < 0)
		goto err_free;
	t->btab = backend_table(ctx->cfg.backend);
	t->last_request_ms = uv_now(ctx->loop);
	ctx->tuning = t;
	memset(&wo, 0, sizeof(wo));
	wo.exe = ctx->exe;
	wo.device = ctx->device;
	wo.backend = ctx->cfg.backend;
	wo.cand_timeout_s = ctx->cfg.cand_timeout_s;
	wo.setup_timeout_s = ctx->cfg.setup_timeout_s;
	wo.max_restarts = 3;
	/* READY and results arrive over the worker's pipe, never from
	 * inside flyd_worker_start(): the timers may be set up after it. */
	rc = flyd_worker_start(ctx->loop, &wo, ready_cb, done_cb, ctx,
			       &t->worker);
	if (rc < 0) {
		flyd_log(FLYD_LOG_CRIT, "worker_start_failed", "rc=%d", rc);
		ctx->tuning = NULL;
		goto err_free;
	}
	uv_timer_init(ctx->loop, &t->tick);
	uv_timer_init(ctx->loop, &t->kick);
	t->tick.data = t->kick.data = t;
	uv_timer_start(&t->tick, tick_cb, TICK_MS, TICK_MS);
	return 0;

err_free:
	flyd_publish_close(t->pub);
	flyd_rmap_free(t->rmap);
	flyd_queue_free(t->q);
	free(t);
	return rc;
}

static void stop_noop(void *arg)
{
	(void)arg;
}

static void handle_closed(uv_handle_t *h)
{
	struct flyd_tuning *t = h->data;

	if (--t->pending == 0)
		schedule(t);
}

static void worker_stopped(void *arg)
{
	struct flyd_tuning *t = arg;

	t->worker = NULL;
	if (--t->pending == 0)
		schedule(t);
}

void flyd_tuning_stop(struct flyd_ctx *ctx, void (*done)(void *), void *arg)
{
	struct flyd_tuning *t = ctx->tuning;

	if (t == NULL) {
		if (done != NULL)
			done(arg);
		return;
	}
	if (t->closing)
		return;
	t->closing = 1;
	t->stop_done = done != NULL ? done : stop_noop;
	t->stop_arg = arg;
	/* Hold one reference while tearing down so nothing completes
	 * before every close was requested. */
	t->pending++;
	while (t->waiters != NULL) {
		cJSON *e = fly_msg_error(FLY_E_DOWN, "daemon stopping");

		if (e == NULL)
			abort();
		waiter_answer(t->waiters, e);
	}
	uv_timer_stop(&t->tick);
	uv_timer_stop(&t->kick);
	t->pending += 2;
	uv_close((uv_handle_t *)&t->tick, handle_closed);
	uv_close((uv_handle_t *)&t->kick, handle_closed);
	if (t->worker != NULL) {
		t->pending++;
		flyd_worker_stop(t->worker, worker_stopped, t);
	}
	if (--t->pending == 0)
		schedule(t);
}

void flyd_tuning_reconfigure(struct flyd_ctx *ctx)
{
	struct flyd_tuning *t = ctx->tuning;

	if (t == NULL || t->closing)
		return;
	flyd_queue_set_cap(t->q, ctx->cfg.queue_cap);
	kick_soon(t);
}

int flyd_tuning_shm_fd(const struct flyd_ctx *ctx)
{
	if (ctx->tuning == NULL || ctx->tuning->pub == NULL)
		return -1;
	return flyd_publish_fd(ctx->tuning->pub);
}

size_t flyd_tuning_shm_size(const struct flyd_ctx *ctx)
{
	if (ctx->tuning == NULL || ctx->tuning->pub == NULL)
		return 0;
	return flyd_publish_size(ctx->tuning->pub);
}

uint32_t flyd_tuning_shm_capacity(const struct flyd_ctx *ctx)
{
	if (ctx->tuning == NULL || ctx->tuning->pub == NULL)
		return 0;
	return flyd_publish_capacity(ctx->tuning->pub);
}

int flyd_tuning_is_healthy(const struct flyd_ctx *ctx)
{
	const struct flyd_tuning *t = ctx->tuning;

	return t != NULL && !t->closing && t->worker != NULL &&
	       flyd_worker_is_healthy(t->worker);
}

void flyd_tuning_status(const struct flyd_ctx *ctx, cJSON *resp)
{
	const struct flyd_tuning *t = ctx->tuning;
	struct flyd_qjob *run;
	cJSON *q, *w, *shm;
	char gen[24];

	if (t == NULL)
		return;
	run = flyd_queue_running(t->q);
	q = cJSON_AddObjectToObject(resp, "queue");
	cJSON_AddNumberToObject(q, "queued", flyd_queue_len(t->q));
	if (run != NULL)
		cJSON_AddStringToObject(q, "running", run->key);
	else
		cJSON_AddNullToObject(q, "running");
	cJSON_AddNumberToObject(q, "cap", flyd_queue_cap(t->q));
	w = cJSON_AddObjectToObject(resp, "worker");
	cJSON_AddNumberToObject(w, "pid", t->worker != NULL ?
				flyd_worker_pid(t->worker) : 0);
	cJSON_AddNumberToObject(w, "restarts", t->worker != NULL ?
				flyd_worker_restarts(t->worker) : 0);
	cJSON_AddBoolToObject(w, "healthy", flyd_tuning_is_healthy(ctx));
	cJSON_AddStringToObject(resp, "policy", policy_name(ctx->cfg.policy));
	shm = cJSON_AddObjectToObject(resp, "shm");
	cJSON_AddNumberToObject(shm, "count", flyd_publish_count(t->pub));
	cJSON_AddNumberToObject(shm, "capacity",
				flyd_publish_capacity(t->pub));
	/* An exact integer literal: the generation is seeded from the clock
	 * (~2^60), beyond a double's 53 bits. */
	snprintf(gen, sizeof(gen), "%llu",
		 (unsigned long long)flyd_publish_generation(t->pub));
	cJSON_AddRawToObject(shm, "generation", gen);
}

/* forget cancels the key's job (NULL: every job): a queued one is
 * dropped, a running one abandoned (the worker's child is killed; its end
 * is dropped by done_cb); waiters get not_found (issue 18). */
static void cancel_one(void *arg, struct flyd_qjob *j)
{
	struct flyd_tuning *t = arg;
	struct flyd_ctx *ctx = t->ctx;

	flyd_log(FLYD_LOG_INFO, "job_cancelled", "key=%s state=%s", j->key,
		 j->state == FLYD_Q_RUNNING ? "running" : "queued");
	answer_job_waiters_error(j, FLY_E_NOTFOUND, "job cancelled by forget");
	if (ctx->device_id[0] != '\0')
		(void)flyd_store_job_del(ctx->store, ctx->device_id, j->key);
	if (j->state == FLYD_Q_RUNNING) {
		j->cancelled = 1;
		flyd_worker_cancel(t->worker);
		return;
	}
	flyd_queue_done(t->q, j);
}

static void cancel_jobs(struct flyd_tuning *t, const char *key)
{
	struct flyd_qjob *j;

	if (key != NULL) {
		j = flyd_queue_find(t->q, key);
		if (j != NULL && j->state != FLYD_Q_FAILED && !j->cancelled)
			cancel_one(t, j);
		return;
	}
	flyd_queue_foreach(t->q, cancel_one, t);
	j = flyd_queue_running(t->q);
	if (j != NULL && !j->cancelled)
		cancel_one(t, j);
}

struct flyd_queue *flyd_tuning_queue(const struct flyd_ctx *ctx)
{
	const struct flyd_tuning *t = ctx->tuning;

	return t != NULL && !t->closing ? t->q : NULL;
}

int flyd_tuning_cancel(struct flyd_ctx *ctx, const char *key,
		       const char **was)
{
	struct flyd_tuning *t = ctx->tuning;
	struct flyd_qjob *j;

	if (t == NULL || t->closing)
		return FLY_E_DOWN;
	j = flyd_queue_find(t->q, key);
	if (j == NULL || j->cancelled)
		return FLY_E_NOTFOUND;
	*was = j->state == FLYD_Q_RUNNING ? "running" :
	       j->state == FLYD_Q_QUEUED ? "queued" : "failed";
	if (j->state == FLYD_Q_FAILED) {
		flyd_log(FLYD_LOG_INFO, "job_cancelled", "key=%s state=failed",
			 key);
		answer_job_waiters_error(j, FLY_E_NOTFOUND, "job cancelled");
		if (ctx->device_id[0] != '\0')
			(void)flyd_store_failed_del(ctx->store, ctx->device_id,
						    key);
		flyd_queue_clear_failed(t->q, key);
	} else {
		if (j->state == FLYD_Q_RUNNING)
			span_add(t, j->started_ms, uv_now(ctx->loop));
		/* a running job's worker is stopped; done_cb drops its end */
		cancel_one(t, j);
	}
	kick_soon(t);
	return 0;
}

void flyd_tuning_forgotten(struct flyd_ctx *ctx, const char *key)
{
	struct flyd_tuning *t = ctx->tuning;

	if (t == NULL || t->closing)
		return;
	if (key != NULL) {
		(void)flyd_rmap_del(t->rmap, key);
		(void)flyd_publish_drop(t->pub, key);
	} else {
		flyd_rmap_clear(t->rmap);
		(void)flyd_publish_drop(t->pub, NULL);
	}
	flyd_queue_clear_failed(t->q, key);
	if (ctx->device_id[0] != '\0')
		(void)flyd_store_failed_del(ctx->store, ctx->device_id, key);
	cancel_jobs(t, key);
	flyd_publish_bump(t->pub);
}

void flyd_tuning_imported(struct flyd_ctx *ctx)
{
	struct flyd_tuning *t = ctx->tuning;

	if (t == NULL || t->closing || !t->ready_once)
		return;
	refill(t);
}
