/*
 * tune_handlers.c -- the decide and tune requests (handlers_int.h): parse
 * and bucket the key, answer from the results, queue jobs with the
 * scheduler, defer a `tune wait` with the results' waiters.
 *
 * Owns: nothing.  Thread: loop thread.
 * Calls: the scheduler and the results (services), the request's reply
 * handle (reply.h); nothing calls back into this file by name except the
 * dispatch table of handlers.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "daemon.h"
#include "fly_err.h"
#include "fly_hot.h"
#include "fly_key.h"
#include "fly_msg.h"
#include "handlers_int.h"
#include "queue.h"
#include "reply.h"
#include "results.h"
#include "scheduler.h"

#define WAIT_DEFAULT_MS 600000 /* `tune wait` without timeout_ms */

/* Parse, bucket and re-format the key @p s (NUL-terminated). */
static int bucket_key(struct flyd_ctx *ctx, const char *s,
		      struct fly_problem *p, char key[FLY_KEY_MAX],
		      const char **msg)
{
	int rc = fly_key_parse(s, strlen(s), p);

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

/* Parse, bucket and re-format the request's key. */
static int request_key(struct flyd_ctx *ctx, const cJSON *req,
		       struct fly_problem *p, char key[FLY_KEY_MAX],
		       const char **msg)
{
	const char *s;

	if (fly_msg_get_str(req, "key", &s) < 0) {
		*msg = "missing or non-string \"key\"";
		return FLY_E_INVALID;
	}
	return bucket_key(ctx, s, p, key, msg);
}

/* Decide for the key @p s: the bucketed key into @p key, the answer into
 * @p d (tuned, a neighbour's, or the default, queueing the key for
 * tuning as the policy says); @p s NULL: the request had no key
 * string.  Shared by the generic and the fast path. */
static int decide_key(struct flyd_ctx *ctx, const char *s,
		      char key[FLY_KEY_MAX], struct fly_decision *d,
		      const char **msg)
{
	struct flyd_sched *sc = ctx->sched;
	struct flyd_results *res = ctx->results;
	struct fly_problem p;
	const struct fly_decision *tuned;
	struct fly_decision def;
	struct flyd_qjob *j;
	int rc, queued = 0;

	ctx->stats.decides++;
	if (!flyd_sched_is_running(sc)) {
		*msg = "tuning is stopped";
		return FLY_E_DOWN;
	}
	flyd_sched_note_request(sc);
	if (s == NULL) {
		*msg = "missing or non-string \"key\"";
		return FLY_E_INVALID;
	}
	rc = bucket_key(ctx, s, &p, key, msg);
	if (rc < 0)
		return rc;
	j = flyd_queue_find(flyd_sched_queue(sc), key);
	tuned = flyd_results_lookup(res, key, j == NULL);
	if (tuned != NULL) {
		*d = *tuned;
		goto answer;
	}
	if (flyd_results_default(res, &p, &def) == 0 &&
	    ctx->cfg.policy != FLYD_POLICY_ON_REQUEST) {
		rc = flyd_sched_enqueue(sc, key, FLYD_PRIO_BACKGROUND, 0, &j);
		queued = rc == 0 || rc == 1;
		if (rc == 0)
			flyd_sched_kick(sc);
	} else if (j != NULL) {
		queued = j->state != FLYD_Q_FAILED;
	}
	(void)flyd_results_provisional(res, key, &p, queued, d);
answer:
	if (p.op < FLY_OP_COUNT && d->status <= FLY_STATUS_TUNED)
		ctx->stats.decide[p.op][d->status]++;
	return 0;
}

int flyd_handle_decide(struct flyd_ctx *ctx, struct flyd_req *rq,
		       const cJSON *req, cJSON *resp, const char **msg)
{
	char key[FLY_KEY_MAX];
	struct fly_decision d;
	const char *s;
	int rc;

	(void)rq;
	if (fly_msg_get_str(req, "key", &s) < 0)
		s = NULL;
	rc = decide_key(ctx, s, key, &d, msg);
	if (rc < 0)
		return rc;
	cJSON_AddStringToObject(resp, "key", key);
	cJSON_AddItemToObject(resp, "decision", fly_msg_decision_to_json(&d));
	return 0;
}

int flyd_handle_decide_fast(struct flyd_ctx *ctx,
			    const struct fly_hot_req *hr, char *out,
			    size_t cap, size_t *outlen, const char **msg)
{
	char s[FLY_KEY_MAX * 2], key[FLY_KEY_MAX];
	struct fly_decision d;
	cJSON *resp;
	char *text;
	size_t len;
	int rc;

	if (hr->keylen >= sizeof(s))
		return FLYD_FAST_FALLBACK; /* the generic path says why */
	memcpy(s, hr->key, hr->keylen);
	s[hr->keylen] = '\0';
	rc = decide_key(ctx, s, key, &d, msg);
	if (rc < 0)
		return rc;
	rc = fly_hot_decide_write(out, cap, key, &d, hr->has_id, hr->id);
	if (rc >= 0) {
		*outlen = (size_t)rc;
		return 0;
	}
	/* Unusual numbers: the generic printer, the same bytes as
	 * flyd_handle_decide's reply. */
	resp = cJSON_CreateObject();
	if (resp == NULL || !cJSON_AddTrueToObject(resp, "ok") ||
	    !cJSON_AddStringToObject(resp, "key", key) ||
	    !cJSON_AddItemToObject(resp, "decision",
				   fly_msg_decision_to_json(&d)) ||
	    (hr->has_id && !cJSON_AddNumberToObject(resp, "id",
						     (double)hr->id))) {
		cJSON_Delete(resp);
		return -ENOMEM;
	}
	text = fly_msg_print(resp, &len);
	cJSON_Delete(resp);
	if (text == NULL)
		return -ENOMEM;
	if (len > cap) {
		free(text);
		return -ENOMEM;
	}
	memcpy(out, text, len);
	free(text);
	*outlen = len;
	return 0;
}

int flyd_handle_tune(struct flyd_ctx *ctx, struct flyd_req *rq,
		     const cJSON *req, cJSON *resp, const char **msg)
{
	struct flyd_sched *sc = ctx->sched;
	struct flyd_results *res = ctx->results;
	struct fly_problem p;
	char key[FLY_KEY_MAX];
	const struct fly_decision *tuned;
	struct fly_decision d;
	struct flyd_qjob *j;
	int force = 0, wait = 0, rc;
	int64_t timeout_ms = WAIT_DEFAULT_MS;

	if (!flyd_sched_is_running(sc)) {
		*msg = "tuning is stopped";
		return FLY_E_DOWN;
	}
	flyd_sched_note_request(sc);
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
	j = flyd_queue_find(flyd_sched_queue(sc), key);
	tuned = flyd_results_lookup(res, key, j == NULL);
	if (tuned != NULL && !force) {
		cJSON_AddStringToObject(resp, "key", key);
		cJSON_AddStringToObject(resp, "status", "tuned");
		cJSON_AddBoolToObject(resp, "queued", 0);
		cJSON_AddItemToObject(resp, "decision",
				      fly_msg_decision_to_json(tuned));
		return 0;
	}
	if (flyd_results_provisional(res, key, &p, 1, &d) == -EOPNOTSUPP) {
		*msg = "problem not supported by this daemon's backend";
		return FLY_E_INVALID;
	}
	/* RELIABILITY.md F11: the last workers could not open the device (a
	 * GPU lost): refused at once, not queued behind a worker that cannot
	 * start; the winners are still served */
	if (flyd_sched_device_lost(sc)) {
		*msg = "compute device unavailable: the last worker starts "
		       "could not open it (see the log: worker_backend_failed);"
		       " tuned keys are still served";
		return FLY_E_GPU;
	}
	rc = flyd_sched_enqueue(sc, key, FLYD_PRIO_EXPLICIT, force, &j);
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
	flyd_sched_kick(sc);
	if (wait) {
		rc = flyd_results_wait(res, rq, j, timeout_ms);
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
