/*
 * server_int.h -- the listener's state, shared by server.c (which accepts)
 * and session.c (which links its sessions into it, reads into its buffer
 * and calls its dispatch callback).  Private to those two files.
 *
 * Thread: loop thread only.
 */
#ifndef FLYD_SERVER_INT_H
#define FLYD_SERVER_INT_H

#include <stdint.h>
#include <uv.h>

#include "reply.h"
#include "server.h"

#define FLYD_WSEG_MAX 256
#define FLYD_WBUF_BYTES (256 * 1024)

/* One session's replies in the server's batch: wbuf[off .. off+len). */
struct flyd_wseg {
	struct flyd_session *s;      /* holds a ref (session.c) */
	size_t off;
	size_t len;
};

struct flyd_server {
	struct flyd_ctx *ctx;
	int lfd;                     /* listening socket, -1 when closed */
	uv_poll_t poll;              /* readable lfd: connections pending */
	uv_timer_t pause;            /* accept paused after EMFILE */
	uv_timer_t sweep;            /* frame/idle timeouts */
	uv_timer_t kick;             /* backlogged frames, pending fd sends */
	int spare_fd;                /* reserve fd for the EMFILE trick */
	int listening;
	int activated;               /* listener came from LISTEN_FDS */
	uint32_t max_clients;
	uint32_t nsessions;
	struct flyd_session *head;   /* every open session */
	uint64_t emfile_logged_ms;   /* rate limit of the EMFILE warning */
	uint64_t emfile_count;
	uint64_t maxc_logged_ms;     /* rate limit of the max_clients warning */
	int linger_fd[FLYD_LINGER_MAX];     /* refused, not yet closed; -1 */
	uint64_t linger_at[FLYD_LINGER_MAX]; /* uv_now when refused */
	int open_handles;            /* for stop's done callback */
	void (*done)(void *);
	void *done_arg;
	flyd_dispatch_fn dispatch;   /* every parsed request goes here */
	void *dispatch_arg;
	flyd_fast_fn fast;           /* decide's fast path, or NULL */
	void *fast_arg;
	char rbuf[65536];            /* shared read buffer */
	/* The replies of a loop iteration (issue 19), written after the
	 * poll phase (the check handle), one write per session, as Redis
	 * writes its replies before it sleeps: */
	uv_check_t flush;            /* runs flyd_session_flush() */
	struct flyd_session *wown;   /* session being processed, or NULL */
	size_t wstart;               /* where wown's open segment began */
	size_t wlen;                 /* bytes in wbuf */
	uint32_t nseg;               /* closed segments in seg[] */
	struct flyd_wseg seg[FLYD_WSEG_MAX];
	uint8_t wbuf[FLYD_WBUF_BYTES];
};

#endif /* FLYD_SERVER_INT_H */
