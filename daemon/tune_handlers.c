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
#include <string.h>

#include <cjson/cJSON.h>

#include "daemon.h"
#include "fly_err.h"
#include "fly_key.h"
#include "fly_msg.h"
#include "handlers_int.h"
#include "queue.h"
#include "reply.h"
#include "results.h"
#include "scheduler.h"

#define WAIT_DEFAULT_MS 600000 /* `tune wait` without timeout_ms */

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

int flyd_handle_decide(struct flyd_ctx *ctx, struct flyd_req *rq,
		       const cJSON *req, cJSON *resp, const char **msg)
{
	struct flyd_sched *sc = ctx->sched;
	struct flyd_results *res = ctx->results;
	struct fly_problem p;
	char key[FLY_KEY_MAX];
	const struct fly_decision *tuned;
	struct fly_decision d, def;
	struct flyd_qjob *j;
	int rc, queued = 0;

	(void)rq;
	ctx->stats.decides++;
	if (!flyd_sched_is_running(sc)) {
		*msg = "tuning is stopped";
		return FLY_E_DOWN;
	}
	flyd_sched_note_request(sc);
	rc = request_key(ctx, req, &p, key, msg);
	if (rc < 0)
		return rc;
	j = flyd_queue_find(flyd_sched_queue(sc), key);
	tuned = flyd_results_lookup(res, key, j == NULL);
	if (tuned != NULL) {
		d = *tuned;
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
	(void)flyd_results_provisional(res, key, &p, queued, &d);
answer:
	if (p.op < FLY_OP_COUNT && d.status <= FLY_STATUS_TUNED)
		ctx->stats.decide[p.op][d.status]++;
	cJSON_AddStringToObject(resp, "key", key);
	cJSON_AddItemToObject(resp, "decision", fly_msg_decision_to_json(&d));
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
