/*
 * handlers_int.h -- handlers defined outside handlers.c, reached through
 * its dispatch table: decide and tune (tune_handlers.c).
 *
 * Thread: loop thread.  Signature and contract: flyd_handler_fn (reply.h).
 */
#ifndef FLYD_HANDLERS_INT_H
#define FLYD_HANDLERS_INT_H

#include <cjson/cJSON.h>

#include "daemon.h"
#include "fly_hot.h"
#include "reply.h"

/* decide: the tuned winner, else a tuned neighbour (provisional) or the
 * default; an unseen key is queued in the background (policy allowing). */
int flyd_handle_decide(struct flyd_ctx *ctx, struct flyd_req *rq,
		       const cJSON *req, cJSON *resp, const char **msg);
/* decide on the fast path (flyd_fast_fn, reply.h): the same answer and
 * counters as flyd_handle_decide, the response written by
 * fly_hot_decide_write() into @p out (the generic printer for unusual
 * numbers). */
int flyd_handle_decide_fast(struct flyd_ctx *ctx,
			    const struct fly_hot_req *hr, char *out,
			    size_t cap, size_t *outlen, const char **msg);
/* tune: queue an explicit job (force: re-tune; admin checked by the
 * caller); wait: the reply is deferred until the job ends or timeout_ms. */
int flyd_handle_tune(struct flyd_ctx *ctx, struct flyd_req *rq,
		     const cJSON *req, cJSON *resp, const char **msg);

#endif /* FLYD_HANDLERS_INT_H */
