/*
 * results.c -- the tuned results: map, FULL commit, shm publication,
 * waiters (see results.h).
 *
 * Owns: struct flyd_results (the map, the shm writer, the waiters and
 * their timers).  Thread: loop thread only.
 *
 * Invariant: the order on a committed winner is commit (synchronous=FULL),
 * then the map and the shm table, then the waiters; nothing is reported
 * `tuned` that is not durable.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decide.h"
#include "fly_key.h"
#include "fly_msg.h"
#include "flyk.h"
#include "log.h"
#include "publish.h"
#include "results.h"
#include "store.h"

/* A deferred `tune wait` reply, on its job's list (job->udata) and on the
 * list of every live waiter. */
struct waiter {
	struct flyd_results *res;
	struct flyd_reply *reply;  /* NULL once answered */
	struct flyd_qjob *job;     /* NULL once detached */
	uv_timer_t timer;
	char key[FLY_KEY_MAX];
	struct waiter *jnext;      /* the job's waiters (job->udata) */
	struct waiter *aprev;      /* every live waiter */
	struct waiter *anext;
};

struct flyd_results {
	struct flyd_ctx *ctx;
	struct flyd_rmap *rmap;
	struct flyd_publish *pub;
	const struct flyk_backend *btab; /* for defaults; NULL: unknown */
	int loaded;                   /* device identified, map filled */
	struct waiter *waiters;
	int closing;
	int pending;                  /* waiter timers still closing */
	void (*stop_done)(void *);
	void *stop_arg;
	void (*committed)(void *);    /* after each durable commit */
	void *committed_arg;
};

/* The backend table used for heuristic defaults (the worker owns the
 * device; defaults need only the table).  GPU tables are not loaded in
 * the daemon: their defaults are the empty decision. */
static const struct flyk_backend *backend_table(const char *name)
{
	if (strcmp(name, "cpu") == 0)
		return flyk_cpu_backend();
	return NULL;
}

int flyd_results_open(struct flyd_ctx *ctx, struct flyd_results **out)
{
	struct flyd_results *res;
	int rc;

	*out = NULL;
	res = calloc(1, sizeof(*res));
	if (res == NULL)
		return -ENOMEM;
	res->ctx = ctx;
	rc = flyd_rmap_new(&res->rmap);
	if (rc < 0)
		goto err_free;
	rc = flyd_publish_open(ctx->cfg.shm_capacity, ctx->cfg.shm_max_bytes,
			       &res->pub);
	if (rc < 0)
		goto err_free;
	res->btab = backend_table(ctx->cfg.backend);
	*out = res;
	return 0;

err_free:
	flyd_rmap_free(res->rmap);
	free(res);
	return rc;
}

void flyd_results_free(struct flyd_results *res)
{
	if (res == NULL)
		return;
	flyd_rmap_free(res->rmap);
	flyd_publish_close(res->pub);
	free(res);
}

/* ------------------------------------------------------------ the map */

/* Whether a canonical key names an exact shape (FLY_F_EXACT). */
static int key_is_exact(const char *key)
{
	return fly_key_is_exact(key, strlen(key));
}

/* Add a key to the map (parsing it) and optionally publish it. */
static void remember(struct flyd_results *res, const char *key,
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
	rc = flyd_rmap_put(res->rmap, key, &p, &md);
	if (replaced != NULL)
		*replaced = rc == 1;
	if (publish)
		(void)flyd_publish_put(res->pub, key, &md);
}

const struct fly_decision *flyd_results_lookup(struct flyd_results *res,
					       const char *key, int check_db)
{
	struct flyd_ctx *ctx = res->ctx;
	const struct fly_decision *d = flyd_rmap_get(res->rmap, key);
	struct flyd_result r;

	if (d != NULL || !check_db || !res->loaded)
		return d;
	if (flyd_store_result_get(ctx->store, key, ctx->device_id,
				  ctx->libver, &r) != 0)
		return NULL;
	remember(res, key, &r.d, 1, NULL);
	return flyd_rmap_get(res->rmap, key);
}

int flyd_results_default(const struct flyd_results *res,
			 const struct fly_problem *p, struct fly_decision *d)
{
	return flyd_decide_default(res->btab, p, d);
}

/* An exact key's bucket row (issue 22): what its shape is served until
 * its own row is tuned, so the provisional answer of an exact key is the
 * one a client already launches.  @return 0 (*d filled, provisional), or
 * FLY_E_NOTFOUND (not exact, or its bucket is not tuned). */
static int bucket_row(struct flyd_results *res, const struct fly_problem *p,
		      struct fly_decision *d)
{
	const struct fly_decision *b;
	struct fly_problem q = *p;
	char bk[FLY_KEY_MAX];

	if (!(p->flags & FLY_F_EXACT) || p->op >= FLY_OP_COUNT)
		return FLY_E_NOTFOUND;
	fly_problem_shape(&q);
	fly_problem_bucket(&q, &res->ctx->cfg.bucket[q.op]);
	if (fly_key_format(&q, bk, sizeof(bk)) < 0 ||
	    (b = flyd_rmap_get(res->rmap, bk)) == NULL)
		return FLY_E_NOTFOUND;
	*d = *b;
	d->provisional = 1;
	return 0;
}

int flyd_results_provisional(struct flyd_results *res, const char *key,
			     const struct fly_problem *p, int queued,
			     struct fly_decision *d)
{
	struct fly_decision def;
	int rc = flyd_decide_default(res->btab, p, &def);

	if (bucket_row(res, p, d) != 0 &&
	    flyd_rmap_nearest(res->rmap, key, p, d, NULL) != 0)
		*d = def;
	d->status = queued ? FLY_STATUS_PENDING : FLY_STATUS_DEFAULT;
	d->median_us = d->provisional ? d->median_us : 0.0;
	return rc;
}

const struct flyk_backend *flyd_results_backend(const struct flyd_results *res)
{
	return res->btab;
}

size_t flyd_results_count(const struct flyd_results *res)
{
	return flyd_rmap_count(res->rmap);
}

static void load_one(void *arg, const struct flyd_result *r)
{
	remember(arg, r->key, &r->d, 0, NULL);
}

/* Reload map and table from the store; bump the generation. */
static void refill(struct flyd_results *res)
{
	struct flyd_ctx *ctx = res->ctx;
	int n;

	flyd_rmap_clear(res->rmap);
	n = flyd_publish_fill(res->pub, ctx->store, ctx->device_id,
			      ctx->libver, load_one, res);
	if (n < 0)
		flyd_log(FLYD_LOG_ERR, "results_load_failed", "rc=%d", n);
	flyd_publish_bump(res->pub);
}

void flyd_results_load(struct flyd_results *res, const char *backend)
{
	res->btab = backend_table(backend);
	refill(res);
	res->loaded = 1;
}

void flyd_results_refill(struct flyd_results *res)
{
	if (res == NULL || res->closing || !res->loaded)
		return;
	refill(res);
}

void flyd_results_imported(struct flyd_results *res,
			   const struct flyd_result *rows, size_t n)
{
	if (res == NULL || res->closing || !res->loaded)
		return;
	for (size_t i = 0; i < n; i++)
		remember(res, rows[i].key, &rows[i].d, 1, NULL);
	flyd_publish_bump(res->pub);
}

void flyd_results_forget(struct flyd_results *res, const char *key)
{
	if (key != NULL) {
		(void)flyd_rmap_del(res->rmap, key);
		(void)flyd_publish_drop(res->pub, key);
	} else {
		flyd_rmap_clear(res->rmap);
		(void)flyd_publish_drop(res->pub, NULL);
	}
}

void flyd_results_bump(struct flyd_results *res)
{
	flyd_publish_bump(res->pub);
}

/* ------------------------------------------------------------ waiters */

static void finish_stop(struct flyd_results *res)
{
	void (*done)(void *) = res->stop_done;

	res->stop_done = NULL;
	if (done != NULL)
		done(res->stop_arg);
}

static void waiter_closed(uv_handle_t *h)
{
	struct waiter *w = h->data;
	struct flyd_results *res = w->res;

	free(w);
	if (--res->pending == 0 && res->closing)
		finish_stop(res);
}

/* Answer a waiter (takes ownership of @p resp) and release it. */
static void waiter_answer(struct waiter *w, cJSON *resp)
{
	struct flyd_results *res = w->res;

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
		res->waiters = w->anext;
	if (w->anext != NULL)
		w->anext->aprev = w->aprev;
	uv_timer_stop(&w->timer);
	res->pending++;
	uv_close((uv_handle_t *)&w->timer, waiter_closed);
}

/* {"key", "status", "queued", "decision"?}; caller owns result. */
static cJSON *tune_resp(const char *key, const struct fly_decision *d,
			int queued)
{
	cJSON *r = cJSON_CreateObject(), *e;
	int ok = r != NULL && cJSON_AddBoolToObject(r, "ok", 1) != NULL &&
		 cJSON_AddStringToObject(r, "key", key) != NULL &&
		 cJSON_AddStringToObject(
		     r, "status",
		     fly_status_name(d != NULL ? d->status
					       : FLY_STATUS_PENDING)) != NULL &&
		 cJSON_AddBoolToObject(r, "queued", queued) != NULL;

	if (ok && d != NULL) {
		e = fly_msg_decision_to_json(d);
		ok = e != NULL && cJSON_AddItemToObject(r, "decision", e);
		if (!ok)
			cJSON_Delete(e);
	}
	if (ok)
		return r;
	/* An allocation failed: an "ok" without its decision was sent
	 * (issue 21, test_faultsim alloc N=3482); an error instead. */
	cJSON_Delete(r);
	flyd_log(FLYD_LOG_ERR, "reply_oom", "key=%s", key);
	e = fly_msg_error(-ENOMEM, "out of memory building the reply");
	if (e == NULL)
		abort(); /* daemon OOM policy (STYLE.md R7) */
	return e;
}

void flyd_results_answer(struct flyd_results *res, struct flyd_qjob *j,
			 const struct fly_decision *d)
{
	(void)res;
	while (j->udata != NULL) {
		struct waiter *w = j->udata;

		waiter_answer(w, tune_resp(w->key, d, 0));
	}
}

void flyd_results_answer_error(struct flyd_results *res, struct flyd_qjob *j,
			       int code, const char *msg)
{
	(void)res;
	while (j->udata != NULL) {
		struct waiter *w = j->udata;
		cJSON *e = fly_msg_error(code, msg);

		if (e == NULL)
			abort();
		waiter_answer(w, e);
	}
}

static void waiter_timeout(uv_timer_t *h)
{
	struct waiter *w = h->data;
	struct flyd_results *res = w->res;
	struct fly_problem p;
	struct fly_decision d;
	const struct fly_decision *tuned = flyd_rmap_get(res->rmap, w->key);

	if (tuned != NULL) {
		waiter_answer(w, tune_resp(w->key, tuned, 0));
		return;
	}
	if (fly_key_parse(w->key, strlen(w->key), &p) == 0)
		(void)flyd_results_provisional(res, w->key, &p, 1, &d);
	else
		memset(&d, 0, sizeof(d));
	d.status = FLY_STATUS_PENDING;
	waiter_answer(w, tune_resp(w->key, &d, 1));
}

int flyd_results_wait(struct flyd_results *res, struct flyd_req *rq,
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
	w->res = res;
	memcpy(w->key, j->key, sizeof(w->key));
	w->job = j;
	w->jnext = j->udata;
	j->udata = w;
	w->anext = res->waiters;
	if (res->waiters != NULL)
		res->waiters->aprev = w;
	res->waiters = w;
	uv_timer_init(res->ctx->loop, &w->timer);
	w->timer.data = w;
	uv_timer_start(&w->timer, waiter_timeout, (uint64_t)timeout_ms, 0);
	return 0;
}

void flyd_results_stop(struct flyd_results *res, void (*done)(void *),
		       void *arg)
{
	res->closing = 1;
	res->stop_done = done;
	res->stop_arg = arg;
	/* Hold one reference so nothing completes before every waiter was
	 * answered and its timer's close requested. */
	res->pending++;
	while (res->waiters != NULL) {
		cJSON *e = fly_msg_error(FLY_E_DOWN, "daemon stopping");

		if (e == NULL)
			abort();
		waiter_answer(res->waiters, e);
	}
	if (--res->pending == 0)
		finish_stop(res);
}

/* ------------------------------------------------------------ commit */

int flyd_results_commit(struct flyd_results *res, struct flyd_qjob *j,
			const struct flyd_tune_result *r)
{
	struct flyd_ctx *ctx = res->ctx;
	struct flyd_result row;
	int rc, replaced = 0;
	uint64_t t0;

	memset(&row, 0, sizeof(row));
	memcpy(row.key, j->key, sizeof(row.key));
	memcpy(row.device, ctx->device_id, sizeof(row.device));
	memcpy(row.libver, ctx->libver, sizeof(row.libver));
	row.d = r->winner;
	row.d.status = FLY_STATUS_TUNED;
	row.d.provisional = 0;
	row.d.generation = 0;
	row.mad_us = r->mad_us;
	row.tune_s = r->tune_s;
	row.tuned_at = (int64_t)time(NULL);
	t0 = uv_hrtime();
	rc = flyd_store_result_put(ctx->store, &row, r->trials, r->ntrials);
	flyd_hist_observe(&ctx->stats.commit_s, FLYD_HIST_COMMIT,
			  (double)(uv_hrtime() - t0) / 1e9);
	if (rc < 0) {
		/* Say why (issue 21: a full disk read "commit failed"). */
		char msg[160];

		snprintf(msg, sizeof(msg), "tuning DB commit failed: %s",
			 flyd_store_last_error(ctx->store));
		flyd_log(FLYD_LOG_ERR, "commit_failed", "key=%s rc=%d err=\"%s\"",
			 j->key, rc, flyd_store_last_error(ctx->store));
		flyd_results_answer_error(res, j, FLY_E_STORAGE, msg);
		return FLY_E_STORAGE;
	}
	remember(res, j->key, &row.d, 1, &replaced);
	/* a new exact row also bumps: clients serve their shape from its
	 * bucket's cached row until a generation change sends them back to
	 * the table, where they look the exact key up first (issue 22) */
	if (replaced || key_is_exact(j->key))
		flyd_publish_bump(res->pub);
	flyd_log(FLYD_LOG_INFO, "tuned",
		 "key=%s variant=%s median_us=%.3f tune_s=%.3f trials=%zu",
		 j->key, row.d.variant, row.d.median_us, row.tune_s,
		 r->ntrials);
	flyd_results_answer(res, j, &row.d);
	if (res->committed != NULL)
		res->committed(res->committed_arg);
	return 0;
}

void flyd_results_on_commit(struct flyd_results *res, void (*cb)(void *),
			    void *arg)
{
	res->committed = cb;
	res->committed_arg = arg;
}

int flyd_results_adopt(struct flyd_results *res, const struct flyd_result *rs,
		       size_t n)
{
	struct flyd_ctx *ctx = res->ctx;
	int rc, replaced = 0, any = 0;

	if (!res->loaded || res->closing)
		return -EAGAIN;
	rc = flyd_store_import(ctx->store, rs, n);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		remember(res, rs[i].key, &rs[i].d, 1, &replaced);
		any |= replaced || key_is_exact(rs[i].key);
	}
	if (any)
		flyd_publish_bump(res->pub);
	return 0;
}

/* ------------------------------------------------------------ shm */

int flyd_results_shm_fd(const struct flyd_results *res)
{
	return res != NULL ? flyd_publish_fd(res->pub) : -1;
}

size_t flyd_results_shm_size(const struct flyd_results *res)
{
	return res != NULL ? flyd_publish_size(res->pub) : 0;
}

uint32_t flyd_results_shm_capacity(const struct flyd_results *res)
{
	return res != NULL ? flyd_publish_capacity(res->pub) : 0;
}

void flyd_results_status(const struct flyd_results *res, cJSON *resp)
{
	cJSON *shm;
	char gen[24];

	if (res == NULL)
		return;
	shm = cJSON_AddObjectToObject(resp, "shm");
	cJSON_AddNumberToObject(shm, "count", flyd_publish_count(res->pub));
	cJSON_AddNumberToObject(shm, "capacity",
				flyd_publish_capacity(res->pub));
	/* An exact integer literal: the generation is seeded from the clock
	 * (~2^60), beyond a double's 53 bits. */
	snprintf(gen, sizeof(gen), "%llu",
		 (unsigned long long)flyd_publish_generation(res->pub));
	cJSON_AddRawToObject(shm, "generation", gen);
}

void flyd_results_gauges(const struct flyd_results *res,
			 struct flyd_results_gauges *g)
{
	memset(g, 0, sizeof(*g));
	if (res == NULL)
		return;
	g->results = flyd_rmap_count(res->rmap);
	g->shm_used = flyd_publish_count(res->pub);
	g->shm_capacity = flyd_publish_capacity(res->pub);
	g->shm_generation = flyd_publish_generation(res->pub);
	g->shm_bytes = flyd_publish_size(res->pub);
}
