/*
 * session.h -- one client connection, as handlers see it.
 *
 * Thread: loop thread.  A handler answers synchronously by filling the
 * response object it is given, or asynchronously: it calls
 * flyd_session_defer() to get a token, returns FLYD_DEFERRED, and later
 * calls flyd_session_reply(token, resp) exactly once.  If the connection
 * closed meanwhile, reply() frees resp and returns -ENOTCONN; the token
 * stays valid until reply() (sessions are refcounted for that).
 */
#ifndef FLYD_SESSION_H
#define FLYD_SESSION_H

#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

struct flyd_session;
struct flyd_ctx;

#define FLYD_DEFERRED 1

/* Peer credentials (SO_PEERCRED at accept). */
uid_t flyd_session_uid(const struct flyd_session *s);
gid_t flyd_session_gid(const struct flyd_session *s);
pid_t flyd_session_pid(const struct flyd_session *s);
/* Whether the peer may make state-changing requests (root, or member of
 * the service group). */
int flyd_session_is_admin(const struct flyd_session *s);

struct flyd_reply; /* a deferred reply token */
/* Take a token for a later reply to the request being handled (its "id"
 * is remembered).  Caller owns the token until flyd_session_reply(). */
struct flyd_reply *flyd_session_defer(struct flyd_session *s);
/* Send @p resp (takes ownership, even on failure) for a deferred token and
 * release the token.  "ok"/"id" are added if missing.
 * @return 0 or -ENOTCONN (client gone). */
int flyd_session_reply(struct flyd_reply *r, cJSON *resp);

/* Handler signature: fill @p resp (an object with "ok": true already set;
 * on error return a negative FLY_E_* / -errno and optionally set *msg to a
 * static or session-owned message) or return FLYD_DEFERRED. */
typedef int (*flyd_handler_fn)(struct flyd_ctx *ctx, struct flyd_session *s,
			       const cJSON *req, cJSON *resp,
			       const char **msg);

#endif /* FLYD_SESSION_H */
