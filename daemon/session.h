/*
 * session.h -- one client connection: framing, the request's context for
 * its handler (reply.h), replies and the output queue.  Used by server.c
 * only; handlers see a session through struct flyd_req and its ops.
 *
 * Thread: loop thread only.
 */
#ifndef FLYD_SESSION_H
#define FLYD_SESSION_H

#include <stdint.h>

struct flyd_ctx;
struct flyd_session;

/* Make a session of an accepted connection @p fd (server.c checked the
 * client limit); the fd is owned by the call, even on failure.
 * @return 0 or -errno. */
int flyd_session_open(struct flyd_ctx *ctx, int fd);
/* Close a session (idempotent); freed once deferred tokens are released. */
void flyd_session_close(struct flyd_session *s);
/* Timers: close sessions whose partial frame or idleness is too old. */
void flyd_session_sweep(struct flyd_ctx *ctx, uint64_t now_ms);
/* Handle backlogged frames (fairness) and pending fd sends. */
void flyd_session_kick(struct flyd_ctx *ctx);
/* Write the replies batched since the last call, one write per session
 * (server.c calls it from a check handle, after each poll phase). */
void flyd_session_flush(struct flyd_ctx *ctx);
/* Whether any session has backlogged input or a pending fd send. */
int flyd_session_has_work(const struct flyd_ctx *ctx);
/* Close every session. */
void flyd_session_close_all(struct flyd_ctx *ctx);

#endif /* FLYD_SESSION_H */
