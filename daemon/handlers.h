/*
 * handlers.h -- the request dispatch table (expanded from
 * proto/fly_msgs.def) and the non-tuning handlers: hello, get, explain,
 * list, export, import, forget, stats, status.  decide and tune live in
 * tuning.c (flyd_handle_decide / flyd_handle_tune).
 *
 * Thread: loop thread.
 * Admin: requests flagged FLY_MSGF_ADMIN, and tune with "force": true,
 * need flyd_session_is_admin() (uid 0, the daemon's own uid, or a member
 * of cfg.admin_group); others get "permission".
 */
#ifndef FLYD_HANDLERS_H
#define FLYD_HANDLERS_H

#include <cjson/cJSON.h>

#include "daemon.h"
#include "session.h"

/* Dispatch one parsed request (an object).  @p resp has "ok": true.
 * @return 0, FLYD_DEFERRED, or a negative error with *msg set. */
int flyd_handlers_dispatch(struct flyd_ctx *ctx, struct flyd_session *s,
			   const cJSON *req, cJSON *resp, const char **msg);
/* The daemon became ready: answer the hellos that waited for it. */
void flyd_handlers_ready(struct flyd_ctx *ctx);
/* Shutting down: fail the hellos still waiting. */
void flyd_handlers_stop(struct flyd_ctx *ctx);

#endif /* FLYD_HANDLERS_H */
