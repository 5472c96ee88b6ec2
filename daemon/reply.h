/*
 * reply.h -- what the session layer hands a request handler: the
 * request's context (peer credentials, a message buffer, the import
 * staging of its connection) and the ways to answer (an fd attached to
 * the response, a deferred reply token).
 *
 * Thread: loop thread.  The session layer (session.c) fills the ops; a
 * handler, and a service keeping a token (a `tune wait`), call through
 * them, so nothing above the session layer links to it by name and the
 * request path runs one way: server -> session -> dispatch (a callback
 * given to flyd_server_start) -> handler -> services.
 *
 * A handler answers synchronously by filling the response object it is
 * given, or asynchronously: flyd_req_defer() gives a token, the handler
 * returns FLYD_DEFERRED, and later flyd_reply_send(token, resp) is called
 * exactly once.  If the connection closed meanwhile, send() frees resp and
 * returns -ENOTCONN; the token stays valid until send() (sessions are
 * refcounted for that).
 */
#ifndef FLYD_REPLY_H
#define FLYD_REPLY_H

#include <stddef.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

struct flyd_ctx;
struct flyd_req;
struct flyd_reply;
struct flyd_result;

#define FLYD_DEFERRED 1

struct flyd_reply_ops {
	/* A token for a later reply to the request being handled (its "id"
	 * is remembered).  Caller owns it until send().  NULL: -ENOMEM. */
	struct flyd_reply *(*defer)(struct flyd_req *rq);
	/* Attach an fd (dup'd; the caller keeps its own) to the response of
	 * the request being handled.  @return 0 or -errno. */
	int (*attach_fd)(struct flyd_req *rq, int fd);
	/* Send @p resp (takes ownership, even on failure) for a token and
	 * release the token; "ok"/"id" are added if missing.
	 * @return 0 or -ENOTCONN (client gone). */
	int (*send)(struct flyd_reply *r, cJSON *resp);
	/* Attach an fd (dup'd) to a token's reply.  @return 0 or -errno. */
	int (*reply_attach_fd)(struct flyd_reply *r, int fd);
};

/* Per-connection import staging: rows staged while "more" (handlers.c
 * fills it; the session frees rows when the connection closes). */
struct flyd_stage {
	struct flyd_result *rows;
	size_t n;
	size_t cap;
};

/* The request being handled, as a handler sees it (borrowed; valid during
 * the handler call). */
struct flyd_req {
	const struct flyd_reply_ops *ops;
	uid_t uid;                   /* SO_PEERCRED at accept; -1 unknown */
	gid_t gid;
	pid_t pid;
	char *errbuf;                /* for a formatted error message: */
	size_t errcap;               /* valid until the next request */
	struct flyd_stage *stage;    /* the connection's import staging */
};

/* A deferred reply token; its ops are the session layer's. */
struct flyd_reply {
	const struct flyd_reply_ops *ops;
};

static inline struct flyd_reply *flyd_req_defer(struct flyd_req *rq)
{
	return rq->ops->defer(rq);
}

static inline int flyd_req_attach_fd(struct flyd_req *rq, int fd)
{
	return rq->ops->attach_fd(rq, fd);
}

static inline int flyd_reply_send(struct flyd_reply *r, cJSON *resp)
{
	return r->ops->send(r, resp);
}

static inline int flyd_reply_attach_fd(struct flyd_reply *r, int fd)
{
	return r->ops->reply_attach_fd(r, fd);
}

/* Handler: fill @p resp (an object with "ok": true already set; on error
 * return a negative FLY_E_* / -errno and optionally set *msg to a static
 * message or rq->errbuf) or return FLYD_DEFERRED. */
typedef int (*flyd_handler_fn)(struct flyd_ctx *ctx, struct flyd_req *rq,
			       const cJSON *req, cJSON *resp,
			       const char **msg);
/* The dispatch callback the session layer calls for each parsed request
 * (an object), with the @p arg given to flyd_server_start(): same
 * contract as a handler. */
typedef int (*flyd_dispatch_fn)(void *arg, struct flyd_req *rq,
				const cJSON *req, cJSON *resp,
				const char **msg);

/* The fast path of a decide request that fly_hot_scan_decide() matched
 * (issue 19): the session layer calls it, with the @p arg given to
 * flyd_server_set_fast(), instead of parsing the frame.  It writes the
 * whole response payload into @p out (@p cap >= FLY_HOT_DECIDE_MAX) and
 * returns 0 with its length in *outlen; or a negative FLY_E_* / -errno
 * (and optionally *msg, as a handler) for an error response; or
 * FLYD_FAST_FALLBACK, having done and counted nothing, to have the
 * request parsed and dispatched the generic way. */
#define FLYD_FAST_FALLBACK 2
struct fly_hot_req;
typedef int (*flyd_fast_fn)(void *arg, struct flyd_req *rq,
			    const struct fly_hot_req *hr, char *out,
			    size_t cap, size_t *outlen, const char **msg);

#endif /* FLYD_REPLY_H */
