/*
 * handlers.c -- request dispatch and the non-tuning handlers (see
 * handlers.h; the protocol table is in docs/architecture.md; decide and
 * tune are in tune_handlers.c).
 *
 * Owns: the list of hellos waiting for readiness.  Thread: loop thread.
 * Field checks: a field of the wrong type is "invalid" naming the field;
 * keys must be canonical (fly_key_parse).  Import is all-or-nothing: rows
 * are staged per connection (rq->stage) while "more" is true and committed in one
 * transaction with the last chunk; any invalid row drops the staging.
 */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "daemon.h"
#include "fly_key.h"
#include "fly_msg.h"
#include "fly_record.h"
#include "fleet.h"
#include "handlers.h"
#include "handlers_int.h"
#include "log.h"
#include "metrics.h"
#include "queue.h"
#include "reply.h"
#include "results.h"
#include "scheduler.h"
#include "server.h"
#include "store.h"

#define LIST_LIMIT_DEFAULT 1000
#define LIST_LIMIT_MAX 10000
#define IMPORT_STAGE_MAX 1000000
#define IMPORT_CHUNK_MAX 10000
#define HELLO_PENDING_MAX 4096

/* ---------------------------------------------------------------- peers */

/* Whether /proc/PID/status lists @p gid among the supplementary groups. */
static int proc_has_group(pid_t pid, gid_t gid)
{
	char path[64], line[4096];
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *p, *end;

		if (strncmp(line, "Groups:", 7) != 0)
			continue;
		for (p = line + 7;; p = end) {
			unsigned long g = strtoul(p, &end, 10);

			if (end == p)
				break;
			if ((gid_t)g == gid)
				found = 1;
		}
		break;
	}
	fclose(f);
	return found;
}

/* Whether the peer may make state-changing requests: uid 0, the daemon's
 * own uid, or a member of cfg.admin_group. */
static int peer_is_admin(const struct flyd_ctx *ctx,
			 const struct flyd_req *rq)
{
	gid_t ag = ctx->admin_gid;

	if (rq->uid == 0 || rq->uid == geteuid())
		return 1;
	if (ag == (gid_t)-1)
		return 0;
	return rq->gid == ag || proc_has_group(rq->pid, ag);
}

static void stage_clear(struct flyd_stage *st)
{
	free(st->rows);
	st->rows = NULL;
	st->n = 0;
	st->cap = 0;
}

/* ---------------------------------------------------------------- fields */

/* Format "'NAME' must be WHAT" into the session's buffer. */
static int bad_field(struct flyd_req *rq, const char **msg,
		     const char *name, const char *what)
{
	size_t cap;
	char *b = (cap = rq->errcap, rq->errbuf);

	snprintf(b, cap, "'%s' must be %s", name, what);
	*msg = b;
	return FLY_E_INVALID;
}

/* Optional string field: 1 absent, 0 present, or FLY_E_INVALID. */
static int opt_str(struct flyd_req *rq, const cJSON *o, const char *name,
		   const char **out, const char **msg)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);

	if (it == NULL || cJSON_IsNull(it))
		return 1;
	if (!cJSON_IsString(it))
		return bad_field(rq, msg, name, "a string");
	*out = it->valuestring;
	return 0;
}

static int opt_int(struct flyd_req *rq, const cJSON *o, const char *name,
		   int64_t *out, const char **msg)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);
	double v;

	if (it == NULL || cJSON_IsNull(it))
		return 1;
	v = it->valuedouble;
	if (!cJSON_IsNumber(it) || v != floor(v) || fabs(v) > 9.0e15)
		return bad_field(rq, msg, name, "an integer");
	*out = (int64_t)v;
	return 0;
}

static int opt_bool(struct flyd_req *rq, const cJSON *o, const char *name,
		    int *out, const char **msg)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);

	if (it == NULL || cJSON_IsNull(it))
		return 1;
	if (!cJSON_IsBool(it))
		return bad_field(rq, msg, name, "a boolean");
	*out = cJSON_IsTrue(it);
	return 0;
}

/* The required canonical "key". */
static int req_key(struct flyd_req *rq, const cJSON *req, const char **key,
		   const char **msg)
{
	struct fly_problem p;
	int rc = opt_str(rq, req, "key", key, msg);

	if (rc == 1)
		return bad_field(rq, msg, "key", "present");
	if (rc < 0)
		return rc;
	rc = fly_key_parse(*key, strlen(*key), &p);
	if (rc < 0) {
		size_t cap;
		char *b = (cap = rq->errcap, rq->errbuf);
		size_t n = (size_t)snprintf(b, cap, "'key': ");

		if (n < cap)
			(void)fly_key_explain(*key, b + n, cap - n);
		*msg = b;
		return rc;
	}
	return 0;
}

/* "'NAME' must be one of: a, b, c" from a name table (index 1..n-1). */
static int bad_name(struct flyd_req *rq, const char **msg,
		    const char *name, const char *(*name_of)(uint32_t),
		    uint32_t n)
{
	size_t cap, len;
	char *b = (cap = rq->errcap, rq->errbuf);

	len = (size_t)snprintf(b, cap, "'%s' must be one of:", name);
	for (uint32_t i = 1; i < n && len < cap; i++)
		if (name_of(i) != NULL)
			len += (size_t)snprintf(b + len, cap - len, "%s %s",
						i > 1 ? "," : "", name_of(i));
	*msg = b;
	return FLY_E_INVALID;
}

/* ---------------------------------------------------------------- JSON */

static cJSON *params_json(const int64_t *params, uint32_t n)
{
	cJSON *a = cJSON_CreateArray();

	for (uint32_t i = 0; a != NULL && i < n && i < FLY_PARAMS_MAX; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber((double)params[i]));
	return a;
}

static cJSON *result_json(const struct flyd_result *r)
{
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		return NULL;
	cJSON_AddStringToObject(o, "key", r->key);
	cJSON_AddStringToObject(o, "device", r->device);
	cJSON_AddStringToObject(o, "libver", r->libver);
	cJSON_AddStringToObject(o, "variant", r->d.variant);
	cJSON_AddItemToObject(o, "params", params_json(r->d.params,
						       r->d.nparams));
	cJSON_AddNumberToObject(o, "median_us", r->d.median_us);
	cJSON_AddNumberToObject(o, "mad_us", r->mad_us);
	cJSON_AddNumberToObject(o, "tune_s", r->tune_s);
	cJSON_AddNumberToObject(o, "tuned_at", (double)r->tuned_at);
	return o;
}

static cJSON *trial_json(const struct flyd_trial *t)
{
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		return NULL;
	cJSON_AddStringToObject(o, "variant", t->variant);
	cJSON_AddItemToObject(o, "params", params_json(t->params, t->nparams));
	cJSON_AddNumberToObject(o, "median_us", t->median_us);
	cJSON_AddNumberToObject(o, "mad_us", t->mad_us);
	cJSON_AddNumberToObject(o, "reps", t->reps);
	cJSON_AddStringToObject(o, "outcome", flyd_outcome_name(t->outcome));
	cJSON_AddStringToObject(o, "reason", t->reason);
	return o;
}

/* ---------------------------------------------------------------- hello */

struct hello_wait {
	struct hello_wait *next;
	struct flyd_reply *r;
	int64_t version;
};

static struct hello_wait *hello_waiting;
static unsigned hello_nwaiting;

static void hello_fill(struct flyd_ctx *ctx, cJSON *resp, int64_t version)
{
	cJSON *dev = cJSON_CreateObject(), *shm = cJSON_CreateObject();

	cJSON_AddNumberToObject(resp, "version", (double)version);
	cJSON_AddNumberToObject(dev, "index", ctx->device);
	cJSON_AddStringToObject(dev, "backend", ctx->backend);
	cJSON_AddStringToObject(dev, "fingerprint", ctx->fingerprint);
	cJSON_AddStringToObject(dev, "id", ctx->device_id);
	cJSON_AddItemToObject(resp, "device", dev);
	cJSON_AddStringToObject(resp, "libver", ctx->libver);
	cJSON_AddNumberToObject(shm, "capacity",
				flyd_results_shm_capacity(ctx->results));
	cJSON_AddNumberToObject(shm, "size",
				(double)flyd_results_shm_size(ctx->results));
	cJSON_AddItemToObject(resp, "shm", shm);
}

static int h_hello(struct flyd_ctx *ctx, struct flyd_req *rq,
		   const cJSON *req, cJSON *resp, const char **msg)
{
	int64_t v = FLY_PROTO_VERSION;
	int shm_fd, rc;

	rc = opt_int(rq, req, "version", &v, msg);
	if (rc == 1)
		return bad_field(rq, msg, "version", "present (an integer >= 1)");
	if (rc < 0)
		return rc;
	if (v != FLY_PROTO_VERSION) {
		/* No negotiation: libflyclient refuses any other version in
		 * the answer, so a silent downgrade helps no one (issue 18). */
		size_t cap;
		char *b = (cap = rq->errcap, rq->errbuf);

		snprintf(b, cap, "protocol version %lld is not supported: this "
			 "daemon speaks version %d", (long long)v,
			 FLY_PROTO_VERSION);
		*msg = b;
		return FLY_E_VERSION;
	}
	if (!ctx->ready) {
		struct hello_wait *w;

		if (ctx->stopping) {
			*msg = "daemon is stopping";
			return FLY_E_DOWN;
		}
		if (hello_nwaiting >= HELLO_PENDING_MAX) {
			*msg = "too many clients waiting for start-up";
			return FLY_E_BUSY;
		}
		w = malloc(sizeof(*w));
		if (w == NULL)
			return -ENOMEM;
		w->r = flyd_req_defer(rq);
		if (w->r == NULL) {
			free(w);
			return -ENOMEM;
		}
		w->version = v;
		w->next = hello_waiting;
		hello_waiting = w;
		hello_nwaiting++;
		return FLYD_DEFERRED;
	}
	hello_fill(ctx, resp, v);
	shm_fd = flyd_results_shm_fd(ctx->results);
	if (shm_fd >= 0) {
		rc = flyd_req_attach_fd(rq, shm_fd);
		if (rc < 0) {
			*msg = "cannot pass the shm table";
			return rc;
		}
	}
	return 0;
}

void flyd_handlers_ready(struct flyd_ctx *ctx)
{
	struct hello_wait *w;

	while ((w = hello_waiting) != NULL) {
		cJSON *resp = cJSON_CreateObject();
		int fd = flyd_results_shm_fd(ctx->results);

		hello_waiting = w->next;
		hello_nwaiting--;
		if (resp != NULL) {
			cJSON_AddTrueToObject(resp, "ok");
			hello_fill(ctx, resp, w->version);
		}
		if (fd >= 0 && flyd_reply_attach_fd(w->r, fd) < 0) {
			cJSON_Delete(resp);
			resp = fly_msg_error(-EMFILE,
					     "cannot pass the shm table");
		}
		flyd_reply_send(w->r, resp);
		free(w);
	}
}

void flyd_handlers_stop(struct flyd_ctx *ctx)
{
	struct hello_wait *w;

	while ((w = hello_waiting) != NULL) {
		hello_waiting = w->next;
		hello_nwaiting--;
		flyd_reply_send(w->r, fly_msg_error(FLY_E_DOWN,
						       "daemon is stopping"));
		free(w);
	}
}

/* ---------------------------------------------------------------- get */

static int h_get(struct flyd_ctx *ctx, struct flyd_req *rq,
		 const cJSON *req, cJSON *resp, const char **msg)
{
	struct flyd_result r;
	const char *key;
	int rc = req_key(rq, req, &key, msg);

	if (rc < 0)
		return rc;
	rc = flyd_store_result_get(ctx->store, key, ctx->device_id,
				   ctx->libver, &r);
	if (rc == FLY_E_NOTFOUND) {
		struct flyd_failed f;
		size_t cap;
		char *b;

		*msg = "no tuned result for this key on this device";
		if (flyd_store_failed_get(ctx->store, ctx->device_id, key,
					  &f) != 0)
			return rc;
		/* issue 18: a job given up on says so, until forced */
		b = (cap = rq->errcap, rq->errbuf);
		snprintf(b, cap, "no tuned result: tuning failed after %u "
			 "worker faults (%s); tune with force to try again",
			 f.faults, f.why);
		*msg = b;
		return rc;
	}
	if (rc < 0)
		return rc;
	cJSON_AddStringToObject(resp, "key", key);
	cJSON_AddItemToObject(resp, "result", result_json(&r));
	return 0;
}

static int add_trial(void *arg, const struct flyd_trial *t)
{
	cJSON_AddItemToArray(arg, trial_json(t));
	return 0;
}

/* explain's "failed" {faults, why, at} of a job given up on (issue 18). */
static void failed_json(struct flyd_ctx *ctx, const char *key, cJSON *resp)
{
	struct flyd_failed f;
	cJSON *o;

	if (flyd_store_failed_get(ctx->store, ctx->device_id, key, &f) != 0)
		return;
	o = cJSON_AddObjectToObject(resp, "failed");
	if (o == NULL)
		return;
	cJSON_AddNumberToObject(o, "faults", f.faults);
	cJSON_AddStringToObject(o, "why", f.why);
	cJSON_AddNumberToObject(o, "at", (double)f.at);
}

/* A job's single flight across the fleet (scheduler.h): "fleet" (asking,
 * locked, waiting, local; absent when not asked) and, while it waits for
 * another node's winner, "fleet_wait_s" (seconds left before it runs
 * anyway). */
static void fleet_job_json(cJSON *o, const struct flyd_qjob *j,
			   uint64_t now_ms)
{
	static const char *const name[] = {
		[FLYD_QF_ASKING] = "asking", [FLYD_QF_HELD] = "locked",
		[FLYD_QF_WAITING] = "waiting", [FLYD_QF_LOCAL] = "local",
	};

	if (j->fleet <= FLYD_QF_NONE || j->fleet > FLYD_QF_LOCAL)
		return;
	cJSON_AddStringToObject(o, "fleet", name[j->fleet]);
	if (j->fleet == FLYD_QF_WAITING && j->state == FLYD_Q_QUEUED)
		cJSON_AddNumberToObject(o, "fleet_wait_s",
					j->not_before_ms > now_ms ?
					(double)(j->not_before_ms - now_ms) /
						1000.0 : 0.0);
}

/* explain's "job" {state, fleet, fleet_wait_s} of a key queued or
 * running (the queue holds bucketed keys, as cancel finds them). */
static void job_of_key_json(struct flyd_ctx *ctx, const char *key,
			    cJSON *resp)
{
	struct flyd_queue *q = flyd_sched_queue(ctx->sched);
	struct flyd_qjob *j;
	struct fly_problem p;
	char bk[FLY_KEY_MAX];
	cJSON *o;

	if (q == NULL || fly_key_parse(key, strlen(key), &p) < 0 ||
	    p.op >= FLY_OP_COUNT)
		return;
	fly_problem_bucket(&p, &ctx->cfg.bucket[p.op]);
	if (fly_key_format(&p, bk, sizeof(bk)) < 0)
		return;
	j = flyd_queue_find(q, bk);
	if (j == NULL || j->state == FLYD_Q_FAILED)
		return;
	o = cJSON_AddObjectToObject(resp, "job");
	if (o == NULL)
		return;
	cJSON_AddStringToObject(o, "state", j->state == FLYD_Q_RUNNING ?
				"running" : "queued");
	fleet_job_json(o, j, uv_now(ctx->loop));
}

/* A stored result as JSON, or JSON null. */
static cJSON *row_json(struct flyd_ctx *ctx, const char *key)
{
	struct flyd_result r;

	if (flyd_store_result_get(ctx->store, key, ctx->device_id,
				  ctx->libver, &r) != 0)
		return cJSON_CreateNull();
	return result_json(&r);
}

/* explain's "shape" (issue 22) for a key whose shape has an exact key
 * beside its bucket's: both keys, both rows (null when not tuned) and
 * which one a decide of the shape answers from now -- the exact row once
 * tuned (for a client that used the shape FLYTUNED_EXACT_AFTER times),
 * else the bucket's, else "default".  The key explained is the one
 * answering (@p akey), unless the request named a bucket or exact key.
 * Absent for a shape on its bucket's representative. */
static void shape_json(struct flyd_ctx *ctx, const char *key, cJSON *resp,
		       char akey[FLY_KEY_MAX])
{
	struct fly_problem p, b, x;
	char bk[FLY_KEY_MAX], xk[FLY_KEY_MAX];
	cJSON *o, *brow, *xrow;
	const char *answers;

	snprintf(akey, FLY_KEY_MAX, "%s", key);
	if (fly_key_parse(key, strlen(key), &p) < 0 || p.op >= FLY_OP_COUNT ||
	    fly_problem_exact(&p, &x) != 1)
		return;
	b = x;
	fly_problem_shape(&b);
	fly_problem_bucket(&b, &ctx->cfg.bucket[b.op]);
	if (fly_key_format(&b, bk, sizeof(bk)) < 0 ||
	    fly_key_format(&x, xk, sizeof(xk)) < 0 ||
	    (o = cJSON_AddObjectToObject(resp, "shape")) == NULL)
		return;
	brow = row_json(ctx, bk);
	xrow = row_json(ctx, xk);
	answers = !cJSON_IsNull(xrow) ? "exact" :
		  !cJSON_IsNull(brow) ? "bucket" : "default";
	cJSON_AddStringToObject(o, "bucket_key", bk);
	cJSON_AddItemToObject(o, "bucket", brow);
	cJSON_AddStringToObject(o, "exact_key", xk);
	cJSON_AddItemToObject(o, "exact", xrow);
	cJSON_AddStringToObject(o, "answers", answers);
	/* a plain off-bucket shape: explain the key that answers it */
	if (strcmp(key, bk) != 0 && strcmp(key, xk) != 0)
		snprintf(akey, FLY_KEY_MAX, "%s",
			 strcmp(answers, "exact") == 0 ? xk : bk);
}

static int h_explain(struct flyd_ctx *ctx, struct flyd_req *rq,
		     const cJSON *req, cJSON *resp, const char **msg)
{
	struct flyd_result r;
	char akey[FLY_KEY_MAX];
	const char *key;
	cJSON *trials;
	int rc = req_key(rq, req, &key, msg);

	if (rc < 0)
		return rc;
	shape_json(ctx, key, resp, akey);
	key = akey;
	rc = flyd_store_result_get(ctx->store, key, ctx->device_id,
				   ctx->libver, &r);
	if (rc < 0 && rc != FLY_E_NOTFOUND)
		return rc;
	cJSON_AddStringToObject(resp, "key", key);
	cJSON_AddItemToObject(resp, "result", rc == 0 ? result_json(&r) :
			      cJSON_CreateNull());
	failed_json(ctx, key, resp);
	job_of_key_json(ctx, key, resp);
	trials = cJSON_AddArrayToObject(resp, "trials");
	rc = flyd_store_trial_iter(ctx->store, key, ctx->device_id,
				   ctx->libver, add_trial, trials);
	return rc < 0 ? rc : 0;
}

/* ---------------------------------------------------------------- list */

struct page {
	cJSON *results;
	uint32_t op, dtype;   /* filters, 0: any */
	int status;           /* -1: any */
	int64_t limit;
	int64_t n;
	int more;
	char last[FLY_KEY_MAX];
};

static int page_add(void *arg, const struct flyd_result *r)
{
	struct page *pg = arg;

	if (pg->op != 0 || pg->dtype != 0) {
		struct fly_problem p;

		if (fly_key_parse(r->key, strlen(r->key), &p) < 0)
			return 0;
		if ((pg->op != 0 && p.op != pg->op) ||
		    (pg->dtype != 0 && p.dtype != pg->dtype))
			return 0;
	}
	if (pg->status >= 0 && (int)r->d.status != pg->status)
		return 0;
	if (pg->n == pg->limit) {
		pg->more = 1;
		return 1;
	}
	cJSON_AddItemToArray(pg->results, result_json(r));
	snprintf(pg->last, sizeof(pg->last), "%s", r->key);
	pg->n++;
	return 0;
}

/* ------------------------------------------- list --status pending|default */

/* Keys without a stored result come from the queue: pending = a job
 * queued or running, default = a job that failed (a FAILED marker). */
struct jpage {
	struct flyd_qjob **v;
	size_t n, cap;
	int status;           /* FLY_STATUS_PENDING or _DEFAULT */
	uint32_t op, dtype;   /* filters, 0: any */
	const char *after;
	int oom;
};

static void jpage_add(void *arg, struct flyd_qjob *j)
{
	struct jpage *jp = arg;
	int pending = j->state != FLYD_Q_FAILED;
	struct fly_problem p;
	struct flyd_qjob **v;

	if (j->cancelled && !j->rerun)
		return; /* its run is being stopped, nothing of it kept */
	if (pending != (jp->status == FLY_STATUS_PENDING) ||
	    (jp->after != NULL && strcmp(j->key, jp->after) <= 0))
		return;
	if ((jp->op != 0 || jp->dtype != 0) &&
	    (fly_key_parse(j->key, strlen(j->key), &p) < 0 ||
	     (jp->op != 0 && p.op != jp->op) ||
	     (jp->dtype != 0 && p.dtype != jp->dtype)))
		return;
	if (jp->n == jp->cap) {
		jp->cap = jp->cap ? jp->cap * 2 : 64;
		v = realloc(jp->v, jp->cap * sizeof(*v));
		if (v == NULL) {
			jp->oom = 1;
			return;
		}
		jp->v = v;
	}
	if (jp->n < jp->cap)
		jp->v[jp->n++] = j;
}

static int jkey_cmp(const void *a, const void *b)
{
	return strcmp((*(struct flyd_qjob *const *)a)->key,
		      (*(struct flyd_qjob *const *)b)->key);
}

static const char *job_state_name(const struct flyd_qjob *j)
{
	if (j->cancelled) /* only a rerun is shown: it waits for the stop */
		return "queued";
	return j->state == FLYD_Q_RUNNING ? "running" :
	       j->state == FLYD_Q_QUEUED ? "queued" : "failed";
}

/* A page of keys with status pending or default, ordered by key:
 * {"key", "status", "state"} (schemas/common.json "untuned"). */
static int run_page_jobs(struct flyd_ctx *ctx, const struct page *pg,
			 const char *after, cJSON *resp)
{
	struct flyd_queue *q = flyd_sched_queue(ctx->sched);
	struct jpage jp = {.status = pg->status, .op = pg->op,
			   .dtype = pg->dtype, .after = after};
	size_t i;

	if (q != NULL)
		flyd_queue_foreach_record(q, jpage_add, &jp);
	if (jp.oom) {
		free(jp.v);
		return -ENOMEM;
	}
	if (jp.n > 1)
		qsort(jp.v, jp.n, sizeof(*jp.v), jkey_cmp);
	for (i = 0; i < jp.n && (int64_t)i < pg->limit; i++) {
		cJSON *o = cJSON_CreateObject();

		cJSON_AddStringToObject(o, "key", jp.v[i]->key);
		cJSON_AddStringToObject(o, "status",
					fly_status_name((uint32_t)pg->status));
		cJSON_AddStringToObject(o, "state", job_state_name(jp.v[i]));
		cJSON_AddItemToArray(pg->results, o);
	}
	if (i < jp.n)
		cJSON_AddStringToObject(resp, "next", jp.v[i - 1]->key);
	else
		cJSON_AddNullToObject(resp, "next");
	free(jp.v);
	return 0;
}

/* list (with filters) and export (without). */
static int run_page(struct flyd_ctx *ctx, struct flyd_req *rq,
		    const cJSON *req, cJSON *resp, const char **msg,
		    int filters)
{
	struct page pg = {.status = -1, .limit = LIST_LIMIT_DEFAULT};
	const char *after = NULL, *str;
	int rc;

	if ((rc = opt_str(rq, req, "after", &after, msg)) < 0)
		return rc;
	if ((rc = opt_int(rq, req, "limit", &pg.limit, msg)) < 0)
		return rc;
	if (pg.limit < 1 || pg.limit > LIST_LIMIT_MAX)
		return bad_field(rq, msg, "limit", "an integer in 1..10000");
	if (filters) {
		str = NULL;
		if ((rc = opt_str(rq, req, "op", &str, msg)) < 0)
			return rc;
		if (str != NULL && (pg.op = fly_op_parse(str, strlen(str))) == 0)
			return bad_name(rq, msg, "op", fly_op_name, FLY_OP_COUNT);
		str = NULL;
		if ((rc = opt_str(rq, req, "dtype", &str, msg)) < 0)
			return rc;
		if (str != NULL &&
		    (pg.dtype = fly_dtype_parse(str, strlen(str))) == 0)
			return bad_name(rq, msg, "dtype", fly_dtype_name,
					FLY_DT_COUNT);
		str = NULL;
		if ((rc = opt_str(rq, req, "status", &str, msg)) < 0)
			return rc;
		if (str != NULL && (pg.status = fly_status_parse(str)) < 0)
			return bad_field(rq, msg, "status",
					 "one of: default, pending, tuned");
	}
	pg.results = cJSON_AddArrayToObject(resp, "results");
	if (pg.results == NULL)
		return -ENOMEM;
	if (pg.status == FLY_STATUS_PENDING || pg.status == FLY_STATUS_DEFAULT)
		return run_page_jobs(ctx, &pg, after, resp);
	rc = flyd_store_result_iter(ctx->store, ctx->device_id, ctx->libver,
				    after, 0, page_add, &pg);
	if (rc < 0)
		return rc;
	if (pg.more)
		cJSON_AddStringToObject(resp, "next", pg.last);
	else
		cJSON_AddNullToObject(resp, "next");
	return 0;
}

static int h_list(struct flyd_ctx *ctx, struct flyd_req *rq,
		  const cJSON *req, cJSON *resp, const char **msg)
{
	return run_page(ctx, rq, req, resp, msg, 1);
}

static int h_export(struct flyd_ctx *ctx, struct flyd_req *rq,
		    const cJSON *req, cJSON *resp, const char **msg)
{
	return run_page(ctx, rq, req, resp, msg, 0);
}

/* ---------------------------------------------------------------- import */

/* The value of number field @p name of a checked record. */
static double rec_num(const cJSON *o, const char *name)
{
	return cJSON_GetObjectItemCaseSensitive(o, name)->valuedouble;
}

/* The value of string field @p name of a checked record. */
static const char *rec_str(const cJSON *o, const char *name)
{
	return cJSON_GetObjectItemCaseSensitive(o, name)->valuestring;
}

/* Read one result object into @p r after the one record check
 * (proto/fly_record.h, shared with flytune-ctl and schemas/).
 * @return NULL or what is wrong (in @p why, or a constant). */
static const char *import_fields(struct flyd_ctx *ctx, const cJSON *o,
				 int retarget, struct flyd_result *r,
				 char *why, size_t cap)
{
	const cJSON *it;

	if (fly_record_check(o, why, cap) < 0)
		return why;
	if (!retarget) {
		if (strcmp(rec_str(o, "device"), ctx->device_id) != 0)
			return "'device' is not this instance's device id "
			       "(another device's results are accepted only "
			       "by an import request with \"retarget\": true)";
		if (strcmp(rec_str(o, "libver"), ctx->libver) != 0)
			return "'libver' is not this instance's kernel library "
			       "version (another version's results are "
			       "accepted only by an import request with "
			       "\"retarget\": true)";
	}
	memset(r, 0, sizeof(*r));
	snprintf(r->key, sizeof(r->key), "%s", rec_str(o, "key"));
	snprintf(r->d.variant, sizeof(r->d.variant), "%s",
		 rec_str(o, "variant"));
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(o, "params"))
		r->d.params[r->d.nparams++] = (int64_t)it->valuedouble;
	r->d.median_us = rec_num(o, "median_us");
	r->mad_us = rec_num(o, "mad_us");
	r->tune_s = rec_num(o, "tune_s");
	r->tuned_at = (int64_t)rec_num(o, "tuned_at");
	snprintf(r->device, sizeof(r->device), "%s", ctx->device_id);
	snprintf(r->libver, sizeof(r->libver), "%s", ctx->libver);
	r->d.status = FLY_STATUS_TUNED;
	return NULL;
}

/* Validate row @p i into @p r: its fields, then its variant and params
 * against the kernel registry (issue 18: rows naming no variant of this
 * backend, or a point outside its space, were imported and served as
 * tuned).  On failure *msg names the row.  @return 0 or an error. */
static int import_row(struct flyd_ctx *ctx, struct flyd_req *rq,
		      const cJSON *o, int retarget, size_t i,
		      struct flyd_result *r, const char **msg)
{
	char buf[200], fbuf[160];
	const char *why = import_fields(ctx, o, retarget, r, fbuf,
					sizeof(fbuf));
	size_t cap;
	char *b;
	int rc = FLY_E_INVALID;

	if (why == NULL) {
		rc = flyd_sched_check_result(ctx->sched, r->key, &r->d, buf,
					      sizeof(buf));
		if (rc == 0)
			return 0;
		why = buf;
	}
	b = (cap = rq->errcap, rq->errbuf);
	if (why == buf) /* the fields were valid: name the key too */
		snprintf(b, cap, "results[%zu] (%s) %s%s", i, r->key,
			 rc == FLY_E_INVALID ? "" : "not checked: ", why);
	else
		snprintf(b, cap, "results[%zu] %s", i, why);
	*msg = b;
	return rc;
}

static int stage_grow(struct flyd_stage *st, size_t add)
{
	size_t cap = st->cap ? st->cap : 64;
	struct flyd_result *rows;

	if (st->n + add <= st->cap)
		return 0;
	while (cap < st->n + add)
		cap *= 2;
	rows = realloc(st->rows, cap * sizeof(*rows));
	if (rows == NULL)
		return -ENOMEM;
	st->rows = rows;
	st->cap = cap;
	return 0;
}

static int h_import(struct flyd_ctx *ctx, struct flyd_req *rq,
		    const cJSON *req, cJSON *resp, const char **msg)
{
	struct flyd_stage *st = rq->stage;
	const cJSON *rs = cJSON_GetObjectItemCaseSensitive(req, "results");
	int more = 0, retarget = 0, rc;
	const cJSON *o;
	size_t i = 0, n;

	if ((rc = opt_bool(rq, req, "more", &more, msg)) < 0 ||
	    (rc = opt_bool(rq, req, "retarget", &retarget, msg)) < 0)
		goto drop;
	if (!cJSON_IsArray(rs)) {
		rc = bad_field(rq, msg, "results", "an array");
		goto drop;
	}
	n = (size_t)cJSON_GetArraySize(rs);
	if (n > IMPORT_CHUNK_MAX) {
		*msg = "an import request carries at most 10000 results";
		rc = FLY_E_TOOBIG;
		goto drop;
	}
	if (st->n + n > IMPORT_STAGE_MAX) {
		*msg = "import is over 1000000 rows";
		rc = FLY_E_TOOBIG;
		goto drop;
	}
	if ((rc = stage_grow(st, n)) < 0)
		goto drop;
	cJSON_ArrayForEach(o, rs) {
		rc = import_row(ctx, rq, o, retarget, st->n, &st->rows[st->n],
				msg);
		if (rc < 0)
			goto drop;
		st->n++;
		i++;
	}
	if (more) {
		/* schemas/import.response.json: staged so far. */
		cJSON_AddNumberToObject(resp, "imported", (double)st->n);
		return 0;
	}
	n = st->n;
	rc = flyd_store_import(ctx->store, st->rows, n);
	if (rc < 0) {
		stage_clear(st);
		return rc;
	}
	flyd_log(FLYD_LOG_INFO, "imported", "rows=%zu uid=%d", n,
		 (int)rq->uid);
	/* only these rows changed: publish them, not every stored row */
	flyd_results_imported(ctx->results, st->rows, n);
	stage_clear(st);
	/* A large import leaves the staging rows and the parsed chunks as
	 * free heap: give it back (measured: +~10 MiB RSS kept after 100k). */
	malloc_trim(0);
	cJSON_AddNumberToObject(resp, "imported", (double)n);
	return 0;
drop:
	(void)i;
	stage_clear(st);
	return rc;
}

/* ---------------------------------------------------------------- forget */

static int h_forget(struct flyd_ctx *ctx, struct flyd_req *rq,
		    const cJSON *req, cJSON *resp, const char **msg)
{
	const char *key = NULL;
	int all = 0, rc;
	int64_t n = 0;

	if ((rc = opt_bool(rq, req, "all", &all, msg)) < 0)
		return rc;
	if (!all) {
		if ((rc = req_key(rq, req, &key, msg)) < 0)
			return rc;
	} else if (cJSON_HasObjectItem(req, "key")) {
		*msg = "give either 'key' or 'all', not both";
		return FLY_E_INVALID;
	}
	rc = flyd_store_forget(ctx->store, key, ctx->device_id, ctx->libver,
			       &n);
	if (rc < 0)
		return rc;
	flyd_log(FLYD_LOG_INFO, "forgotten", "key=%s rows=%lld uid=%d",
		 key != NULL ? key : "*", (long long)n,
		 (int)rq->uid);
	flyd_sched_forget(ctx->sched, key);
	cJSON_AddNumberToObject(resp, "forgotten", (double)n);
	return 0;
}

/* ---------------------------------------------------------------- stats */

static double uptime_s(const struct flyd_ctx *ctx)
{
	return (double)(uv_now(ctx->loop) - ctx->started_ms) / 1000.0;
}

/* schemas/stats.response.json: integer counters under "counters". */
static int h_stats(struct flyd_ctx *ctx, struct flyd_req *rq,
		   const cJSON *req, cJSON *resp, const char **msg)
{
	cJSON *c = cJSON_AddObjectToObject(resp, "counters");

	if (c == NULL)
		return -ENOMEM;
#define STAT(name) cJSON_AddNumberToObject(c, #name, (double)ctx->stats.name)
	STAT(requests);
	STAT(errors);
	STAT(protocol_errors);
	STAT(connections);
	STAT(rejected_max_clients);
	STAT(rejected_slow);
	STAT(timeouts);
	STAT(decides);
	cJSON_AddNumberToObject(c, "decide_tuned", (double)flyd_stats_decided(
					&ctx->stats, FLY_STATUS_TUNED));
	cJSON_AddNumberToObject(c, "decide_pending", (double)flyd_stats_decided(
					&ctx->stats, FLY_STATUS_PENDING));
	cJSON_AddNumberToObject(c, "decide_default", (double)flyd_stats_decided(
					&ctx->stats, FLY_STATUS_DEFAULT));
	cJSON_AddNumberToObject(c, "jobs_done", (double)flyd_stats_jobs(
					&ctx->stats, FLYD_JOB_TUNED));
	cJSON_AddNumberToObject(c, "jobs_failed", (double)flyd_stats_jobs(
					&ctx->stats, FLYD_JOB_FAILED));
	STAT(candidates_faulted);
	STAT(busy_rejections);
#undef STAT
	cJSON_AddNumberToObject(c, "connections_now",
				flyd_server_connections(ctx));
	cJSON_AddNumberToObject(c, "max_clients", flyd_server_max_clients(ctx));
	cJSON_AddNumberToObject(c, "uptime_s", floor(uptime_s(ctx)));
	return 0;
}

/* schemas/metrics.response.json: the Prometheus text (metrics.c), the
 * same the HTTP listener serves. */
static int h_metrics(struct flyd_ctx *ctx, struct flyd_req *rq,
		     const cJSON *req, cJSON *resp, const char **msg)
{
	size_t len = 0;
	char *text = NULL;
	int rc;

	(void)rq;
	(void)req;
	(void)msg;
	rc = flyd_metrics_render(ctx, &text, &len);
	if (rc < 0)
		return rc;
	cJSON_AddStringToObject(resp, "content_type", FLYD_METRICS_CTYPE);
	cJSON_AddStringToObject(resp, "text", text);
	free(text);
	return 0;
}

/* Move member @p name of @p from (if any) into @p to. */
static void move_item(cJSON *from, const char *name, cJSON *to)
{
	cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(from, name);

	if (it != NULL && to != NULL)
		cJSON_AddItemToObject(to, name, it);
	else
		cJSON_Delete(it);
}

/* schemas/status.response.json (no other top-level members): tuning's
 * "policy" goes inside "queue"; the shm table has its own "shm" object
 * (issue 18: its fields were printed as queue.shm.*). */
static int h_status(struct flyd_ctx *ctx, struct flyd_req *rq,
		    const cJSON *req, cJSON *resp, const char **msg)
{
	int degraded = flyd_ctx_degraded(ctx);
	const char *backend = ctx->backend[0] ? ctx->backend : ctx->cfg.backend;
	cJSON *dev = cJSON_CreateObject(), *t = cJSON_CreateObject(), *q;
	int64_t n;

	if (dev == NULL || t == NULL) {
		cJSON_Delete(dev);
		cJSON_Delete(t);
		return -ENOMEM;
	}
	cJSON_AddStringToObject(resp, "state", ctx->stopping ? "stopping" :
				!ctx->ready ? "starting" :
				degraded ? "degraded" : "ready");
	cJSON_AddStringToObject(resp, "backend", backend);
	cJSON_AddNumberToObject(dev, "index", ctx->device);
	cJSON_AddStringToObject(dev, "backend", backend);
	cJSON_AddStringToObject(dev, "fingerprint", ctx->fingerprint);
	cJSON_AddStringToObject(dev, "id", ctx->device_id);
	cJSON_AddItemToObject(resp, "device", dev);
	flyd_sched_status(ctx->sched, t);
	flyd_results_status(ctx->results, t);
	q = cJSON_DetachItemFromObjectCaseSensitive(t, "queue");
	if (q == NULL)
		q = cJSON_CreateObject();
	move_item(t, "policy", q);
	cJSON_AddItemToObject(resp, "queue", q);
	move_item(t, "shm", resp);
	move_item(t, "worker", resp);
	if (!cJSON_HasObjectItem(resp, "worker"))
		cJSON_AddObjectToObject(resp, "worker");
	cJSON_Delete(t);
	cJSON_AddNumberToObject(resp, "uptime_s", uptime_s(ctx));
	n = ctx->ready ? flyd_store_result_count(ctx->store, ctx->device_id,
						 ctx->libver) : 0;
	cJSON_AddNumberToObject(resp, "results", (double)(n > 0 ? n : 0));
	flyd_fleet_status(ctx->fleet, resp);
	return 0;
}

/* ---------------------------------------------------------------- tuning */

static int h_decide(struct flyd_ctx *ctx, struct flyd_req *rq,
		    const cJSON *req, cJSON *resp, const char **msg)
{
	return flyd_handle_decide(ctx, rq, req, resp, msg);
}

static int h_tune(struct flyd_ctx *ctx, struct flyd_req *rq,
		  const cJSON *req, cJSON *resp, const char **msg)
{
	int force = 0, rc;

	if ((rc = opt_bool(rq, req, "force", &force, msg)) < 0)
		return rc;
	if (force && !peer_is_admin(ctx, rq)) {
		*msg = "tune with force needs an admin peer";
		return FLY_E_PERM;
	}
	return flyd_handle_tune(ctx, rq, req, resp, msg);
}

/* ---------------------------------------------------------------- jobs */

struct jobs_out {
	cJSON *arr;
	int64_t pos;
	uint64_t now_ms;
};

static void job_json(void *arg, struct flyd_qjob *j)
{
	struct jobs_out *jo = arg;
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		return;
	cJSON_AddStringToObject(o, "key", j->key);
	cJSON_AddStringToObject(o, "state", job_state_name(j));
	cJSON_AddNumberToObject(o, "position", (double)jo->pos++);
	cJSON_AddStringToObject(o, "priority",
				j->priority == FLYD_PRIO_EXPLICIT ?
				"explicit" : "background");
	cJSON_AddBoolToObject(o, "force", j->force);
	cJSON_AddNumberToObject(o, "faults", j->faults);
	cJSON_AddNumberToObject(o, "queued_at",
				(double)(j->queued_at > 0 ? j->queued_at : 0));
	if (j->state == FLYD_Q_RUNNING && !j->cancelled) /* not a rerun */
		cJSON_AddNumberToObject(o, "running_s",
					jo->now_ms > j->started_ms ?
					(double)(jo->now_ms - j->started_ms) /
						1000.0 : 0.0);
	fleet_job_json(o, j, jo->now_ms);
	cJSON_AddItemToArray(jo->arr, o);
}

/* schemas/jobs.response.json: the running job (position 0) unless it was
 * cancelled, then the queued ones in run order. */
static int h_jobs(struct flyd_ctx *ctx, struct flyd_req *rq,
		  const cJSON *req, cJSON *resp, const char **msg)
{
	struct flyd_queue *q = flyd_sched_queue(ctx->sched);
	struct jobs_out jo = {.now_ms = uv_now(ctx->loop)};
	struct flyd_qjob *run;

	(void)rq;
	(void)req;
	jo.arr = cJSON_AddArrayToObject(resp, "jobs");
	if (jo.arr == NULL)
		return -ENOMEM;
	if (q == NULL) {
		*msg = "tuning is stopped";
		return FLY_E_DOWN;
	}
	/* a cancelled job is shown no more (its worker is being killed and
	 * its end will be dropped: it lingered here until the worker's exit
	 * was reaped, so `jobs` right after `cancel` could still list it),
	 * unless it was asked again since: then it is queued */
	run = flyd_queue_running(q);
	if (run != NULL && (!run->cancelled || run->rerun))
		job_json(&jo, run);
	jo.pos = 1;
	flyd_queue_foreach(q, job_json, &jo);
	return 0;
}

/* schemas/cancel.request.json (admin): the key is bucketed as decide and
 * tune bucket it, since the queue holds bucketed keys. */
static int h_cancel(struct flyd_ctx *ctx, struct flyd_req *rq,
		    const cJSON *req, cJSON *resp, const char **msg)
{
	char bk[FLY_KEY_MAX];
	struct fly_problem p;
	const char *key, *was = "";
	int rc = req_key(rq, req, &key, msg);

	if (rc < 0)
		return rc;
	(void)fly_key_parse(key, strlen(key), &p);
	if (p.op < FLY_OP_COUNT)
		fly_problem_bucket(&p, &ctx->cfg.bucket[p.op]);
	if (fly_key_format(&p, bk, sizeof(bk)) < 0)
		snprintf(bk, sizeof(bk), "%s", key);
	rc = flyd_sched_cancel(ctx->sched, bk, &was);
	if (rc == FLY_E_NOTFOUND) {
		*msg = "no tuning job for this key";
		return rc;
	}
	if (rc < 0)
		return rc;
	flyd_log(FLYD_LOG_INFO, "cancelled", "key=%s was=%s uid=%d", bk, was,
		 (int)rq->uid);
	cJSON_AddStringToObject(resp, "key", bk);
	cJSON_AddStringToObject(resp, "was", was);
	return 0;
}

/* ---------------------------------------------------------------- table */

struct handler {
	const char *name;
	flyd_handler_fn fn;
	uint32_t flags;
	int id;                      /* wire id: the stats' index */
};

/* Requests answered from the DB need the device id and libver, known
 * only once the worker reported its fingerprint (ctx->ready). */
static int needs_identity(flyd_handler_fn fn)
{
	return fn == h_get || fn == h_explain || fn == h_list ||
	       fn == h_export || fn == h_import || fn == h_forget;
}

static const struct handler table[] = {
#define FLY_MSG(name, id, flags) {#name, h_##name, flags, id},
#include "fly_msgs.def"
#undef FLY_MSG
};

int flyd_handlers_dispatch(void *arg, struct flyd_req *rq, const cJSON *req,
			   cJSON *resp, const char **msg)
{
	struct flyd_ctx *ctx = arg;
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(req, "req");
	size_t cap;
	char *b;
	int rc;

	if (!cJSON_IsString(r)) {
		ctx->stats.protocol_errors++;
		*msg = "request has no \"req\" string";
		return FLY_E_PROTO;
	}
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		if (strcmp(table[i].name, r->valuestring) != 0)
			continue;
		if ((table[i].flags & FLY_MSGF_ADMIN) &&
		    !peer_is_admin(ctx, rq)) {
			b = (cap = rq->errcap, rq->errbuf);
			snprintf(b, cap, "'%s' needs an admin peer (root, the "
				 "daemon's user or group %s)", table[i].name,
				 ctx->cfg.admin_group);
			*msg = b;
			return FLY_E_PERM;
		}
		if (!ctx->ready && needs_identity(table[i].fn)) {
			*msg = "daemon is starting (device not identified yet)";
			rc = FLY_E_DOWN;
		} else {
			rc = table[i].fn(ctx, rq, req, resp, msg);
		}
		if (table[i].id < FLY_REQ_COUNT) {
			if (rc < 0)
				ctx->stats.req_err[table[i].id]++;
			else
				ctx->stats.req_ok[table[i].id]++;
		}
		return rc;
	}
	ctx->stats.protocol_errors++;
	b = (cap = rq->errcap, rq->errbuf);
	snprintf(b, cap, "unknown request '%.64s'", r->valuestring);
	*msg = b;
	return FLY_E_PROTO;
}

int flyd_handlers_fast(void *arg, struct flyd_req *rq,
		       const struct fly_hot_req *hr, char *out, size_t cap,
		       size_t *outlen, const char **msg)
{
	struct flyd_ctx *ctx = arg;
	int rc;

	(void)rq; /* decide: no admin check, no identity needed */
	rc = flyd_handle_decide_fast(ctx, hr, out, cap, outlen, msg);
	if (rc == FLYD_FAST_FALLBACK)
		return rc;
	if (rc < 0)
		ctx->stats.req_err[FLY_REQ_decide]++;
	else
		ctx->stats.req_ok[FLY_REQ_decide]++;
	return rc;
}
