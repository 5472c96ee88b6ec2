/*
 * handlers.h -- the request dispatch table (expanded from
 * proto/fly_msgs.def) and the non-tuning handlers: hello, get, explain,
 * list, export, import, forget, stats, metrics, status, jobs, cancel.
 * decide and tune live in tune_handlers.c (handlers_int.h).
 *
 * Thread: loop thread.
 * Admin: requests flagged FLY_MSGF_ADMIN, and tune with "force": true,
 * need an admin peer (uid 0, the daemon's own uid, or a member of
 * cfg.admin_group); others get "permission".
 *
 * main.c hands flyd_handlers_dispatch to flyd_server_start() as the
 * session layer's dispatch callback (and flyd_handlers_fast to
 * flyd_server_set_fast() for decide's fast path); handlers answer through the struct
 * flyd_req they are given (reply.h) and call services below them, never
 * the session layer by name.
 */
#ifndef FLYD_HANDLERS_H
#define FLYD_HANDLERS_H

#include <cjson/cJSON.h>

#include "daemon.h"
#include "reply.h"

/* Dispatch one parsed request (an object) of a session: a
 * flyd_dispatch_fn whose @p arg is the struct flyd_ctx.  @p resp has
 * "ok": true.  @return 0, FLYD_DEFERRED, or a negative error with *msg
 * set. */
int flyd_handlers_dispatch(void *arg, struct flyd_req *rq, const cJSON *req,
			   cJSON *resp, const char **msg);
/* The decide fast path (a flyd_fast_fn whose @p arg is the struct
 * flyd_ctx; main.c gives it to flyd_server_set_fast()): counted as
 * dispatch counts a decide. */
int flyd_handlers_fast(void *arg, struct flyd_req *rq,
		       const struct fly_hot_req *hr, char *out, size_t cap,
		       size_t *outlen, const char **msg);
/* The daemon became ready: answer the hellos that waited for it. */
void flyd_handlers_ready(struct flyd_ctx *ctx);
/* Shutting down: fail the hellos still waiting. */
void flyd_handlers_stop(struct flyd_ctx *ctx);

#endif /* FLYD_HANDLERS_H */
