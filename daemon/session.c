/*
 * session.c -- one client connection: framing, dispatch, replies and the
 * output queue (see session.h and server.h).
 *
 * Owns: each struct flyd_session, its decoder, its backlog of unhandled
 * input, its queue of responses held behind an fd-carrying one, its
 * import staging, and the struct flyd_req and reply ops (reply.h) its
 * handler answers through.  Thread: loop thread.
 *
 * A parsed request goes to the server's dispatch callback, never to a
 * handler by name: this file calls nothing above it.
 *
 * Lifetime: a session is freed when its handle closed and no deferred
 * token (struct sreply) nor batch segment refers to it.  The replies of
 * the requests read in one loop iteration are batched in the server's
 * buffer (a segment per session processed) and written after the poll
 * phase (flyd_session_flush, from server.c's check handle), one write per
 * session; what the socket does not take, and every reply outside a read
 * callback, goes out with uv_try_write, then uv_write (a struct flyd_wreq
 * owns the buffer until write_cb); any unbatched write writes the batch
 * first, so byte order is kept.  A response that carries an fd is sent
 * with sendmsg(SCM_RIGHTS) on the raw socket once libuv's write queue is
 * empty.  A decide the fly_hot scanner reads is answered through the
 * server's fast callback, without a cJSON tree.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "daemon.h"
#include "fly_err.h"
#include "fly_frame.h"
#include "fly_hot.h"
#include "fly_msg.h"
#include "log.h"
#include "reply.h"
#include "server_int.h"
#include "session.h"

/* A response waiting behind an fd-carrying one (or being that one). */
struct outmsg {
	struct outmsg *next;
	uint8_t *buf;
	size_t len;
	int fd;                    /* -1: none */
};

struct flyd_wreq {
	uv_write_t req;
	struct flyd_session *s;
	uint8_t *buf;
};

/* A deferred reply token (reply.h), the session's side of it. */
struct sreply {
	struct flyd_reply base;    /* ops: session_ops */
	struct flyd_session *s;
	int has_id;
	int64_t id;
	int fd;                    /* attached fd (owned), -1: none */
};

struct flyd_session {
	struct flyd_ctx *ctx;
	struct flyd_server *srv;
	uv_pipe_t pipe;
	struct flyd_session *prev, *next;
	uint64_t serial;           /* for log lines */
	int refs;                  /* deferred tokens outstanding */
	int closing;
	int closed;                /* close_cb ran */
	int close_after_flush;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	struct fly_frame_dec dec;
	uint64_t partial_since;    /* uv_now when the partial frame began */
	uint64_t last_active;
	uint32_t writes;           /* uv_write requests outstanding */
	size_t held_bytes;
	struct outmsg *held, **held_tail;
	uint8_t *backlog;          /* input not handled yet (fairness) */
	size_t blen, boff;
	int cur_has_id;            /* the request being handled */
	int64_t cur_id;
	int cur_fd;
	struct flyd_req rq;        /* what the handler sees (reply.h) */
	struct flyd_stage stage;
	char errbuf[256];
};

static uint64_t next_serial = 1;

static void session_unref_free(struct flyd_session *s)
{
	if (s->closed && s->refs == 0)
		free(s);
}

static void on_close(uv_handle_t *h)
{
	struct flyd_session *s = h->data;
	struct flyd_server *srv = s->srv;

	s->closed = 1;
	srv->open_handles--;
	session_unref_free(s);
	if (srv->done != NULL && srv->open_handles == 0) {
		void (*done)(void *) = srv->done;

		srv->done = NULL;
		done(srv->done_arg);
	}
}

static void session_close_why(struct flyd_session *s, const char *why)
{
	struct flyd_server *srv = s->srv;
	struct outmsg *m;

	if (s->closing)
		return;
	s->closing = 1;
	if (srv->wown == s)
		srv->wlen = srv->wstart; /* its open segment goes with it */
	flyd_log(FLYD_LOG_DEBUG, "close", "conn=%llu reason=%s",
		 (unsigned long long)s->serial, why);
	if (s->prev != NULL)
		s->prev->next = s->next;
	else
		srv->head = s->next;
	if (s->next != NULL)
		s->next->prev = s->prev;
	srv->nsessions--;
	while ((m = s->held) != NULL) {
		s->held = m->next;
		if (m->fd >= 0)
			close(m->fd);
		free(m->buf);
		free(m);
	}
	s->held_tail = &s->held;
	free(s->backlog);
	s->backlog = NULL;
	fly_frame_dec_fini(&s->dec);
	free(s->stage.rows);
	memset(&s->stage, 0, sizeof(s->stage));
	uv_read_stop((uv_stream_t *)&s->pipe);
	uv_close((uv_handle_t *)&s->pipe, on_close);
}

void flyd_session_close(struct flyd_session *s)
{
	session_close_why(s, "server");
}

static void flush_held(struct flyd_session *s);

static void on_write(uv_write_t *req, int status)
{
	struct flyd_wreq *w = (struct flyd_wreq *)req;
	struct flyd_session *s = w->s;

	free(w->buf);
	free(w);
	s->writes--;
	if (s->closing)
		return;
	if (status < 0) {
		session_close_why(s, "write_error");
		return;
	}
	if (s->held != NULL)
		flush_held(s);
	if (!s->closing && s->close_after_flush && s->writes == 0 &&
	    s->held == NULL)
		session_close_why(s, "protocol");
}

/* Write what the socket takes at once, when nothing is queued before
 * @p buf.  The direct write matters: a uv_write that completes at once
 * still makes libuv re-arm the epoll watcher (one epoll_ctl per response,
 * measured with strace under bench_socket), which a request/response
 * protocol pays on every request.
 * @return bytes written (0 .. len), or -1 when the session closed. */
static ssize_t write_try(struct flyd_session *s, const uint8_t *buf,
			 size_t len)
{
	uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
	int n;

	if (s->writes != 0 ||
	    uv_stream_get_write_queue_size((uv_stream_t *)&s->pipe) != 0)
		return 0;
	n = uv_try_write((uv_stream_t *)&s->pipe, &b, 1);
	if (n >= 0)
		return n;
	if (n == UV_EAGAIN)
		return 0;
	session_close_why(s, "write_error");
	return -1;
}

/* Queue @p buf[off..len) with uv_write (@p buf owned, freed in on_write). */
static void write_queue(struct flyd_session *s, uint8_t *buf, size_t off,
			size_t len)
{
	struct flyd_wreq *w = malloc(sizeof(*w));
	uv_buf_t b = uv_buf_init((char *)buf + off, (unsigned)(len - off));

	if (w == NULL) {
		free(buf);
		session_close_why(s, "enomem");
		return;
	}
	w->s = s;
	w->buf = buf;
	if (uv_write(&w->req, (uv_stream_t *)&s->pipe, &b, 1, on_write) < 0) {
		free(buf);
		free(w);
		session_close_why(s, "write_error");
		return;
	}
	s->writes++;
}

/* Write @p buf (owned): straight to the socket when nothing is queued
 * before it, the rest (or all of it) queued with uv_write. */
static void write_now(struct flyd_session *s, uint8_t *buf, size_t len)
{
	ssize_t n = write_try(s, buf, len);

	if (n < 0 || (size_t)n == len) {
		free(buf);
		return;
	}
	write_queue(s, buf, (size_t)n, len);
}

static void check_slow(struct flyd_session *s);
static void session_unref_free(struct flyd_session *s);

/* Write one segment of the batch: what the socket does not take is
 * copied and queued. */
static void seg_write(struct flyd_session *s, const uint8_t *buf, size_t len)
{
	uint8_t *rest;
	ssize_t n = write_try(s, buf, len);

	if (n < 0 || (size_t)n == len)
		return;
	rest = malloc(len - (size_t)n);
	if (rest == NULL) {
		session_close_why(s, "enomem");
		return;
	}
	memcpy(rest, buf + n, len - (size_t)n);
	write_queue(s, rest, 0, len - (size_t)n);
	check_slow(s);
}

/* End the open segment of the session being processed (its replies so
 * far), holding a ref on it until the batch is written. */
static void seg_close(struct flyd_server *srv)
{
	struct flyd_wseg *g;

	if (srv->wown == NULL || srv->wlen == srv->wstart)
		return;
	g = &srv->seg[srv->nseg++];
	g->s = srv->wown;
	g->off = srv->wstart;
	g->len = srv->wlen - srv->wstart;
	g->s->refs++;
	srv->wstart = srv->wlen;
}

/* Write the whole batch, session by session in the order they were
 * processed.  The open segment (of the session being processed) goes
 * too, so a reply written after this call comes after it. */
static void batch_flush_all(struct flyd_server *srv)
{
	uint32_t nseg;

	seg_close(srv);
	nseg = srv->nseg;
	srv->nseg = 0;
	for (uint32_t i = 0; i < nseg; i++) {
		struct flyd_session *s = srv->seg[i].s;

		if (!s->closing)
			seg_write(s, srv->wbuf + srv->seg[i].off,
				  srv->seg[i].len);
		s->refs--;
		session_unref_free(s);
	}
	srv->wlen = srv->wstart = 0;
}

void flyd_session_flush(struct flyd_ctx *ctx)
{
	if (ctx->server->nseg > 0 || ctx->server->wlen > 0)
		batch_flush_all(ctx->server);
}

/* Room for @p need more bytes in the batch for @p s, writing the batch
 * first when full.  @return 1 when @p s batches (it is being processed
 * and nothing is held before it) and the room is there, else 0. */
static int batch_room(struct flyd_session *s, size_t need)
{
	struct flyd_server *srv = s->srv;

	if (srv->wown != s || s->held != NULL || s->closing ||
	    need > sizeof(srv->wbuf))
		return 0;
	if (need > sizeof(srv->wbuf) - srv->wlen)
		batch_flush_all(srv);
	return !s->closing && s->held == NULL;
}

/* Append one frame (header + @p payload) to the batch of @p s.
 * @return 1 when taken, 0 when it must be sent the unbatched way. */
static int batch_put(struct flyd_session *s, const char *payload, size_t len)
{
	struct flyd_server *srv = s->srv;

	if (!batch_room(s, FLY_FRAME_HDR + len))
		return 0;
	fly_frame_put_header(srv->wbuf + srv->wlen, (uint32_t)len);
	memcpy(srv->wbuf + srv->wlen + FLY_FRAME_HDR, payload, len);
	srv->wlen += FLY_FRAME_HDR + len;
	return 1;
}

static void on_kick(uv_timer_t *t)
{
	flyd_session_kick(t->data);
}

static void kick_arm(struct flyd_server *srv, uint64_t ms)
{
	srv->kick.data = srv->ctx;
	uv_timer_start(&srv->kick, on_kick, ms, 0);
}

/* sendmsg() one frame with an fd.  @return bytes sent, 0 to retry
 * later, or -errno. */
static ssize_t send_with_fd(struct flyd_session *s, const uint8_t *buf,
			    size_t len, int fd)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr mh;
	struct cmsghdr *c;
	uv_os_fd_t sfd;
	ssize_t n;

	if (uv_fileno((uv_handle_t *)&s->pipe, &sfd) < 0)
		return -EBADF;
	memset(&mh, 0, sizeof(mh));
	memset(&u, 0, sizeof(u));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.b;
	mh.msg_controllen = sizeof(u.b);
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	do
		n = sendmsg(sfd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
	return n;
}

/* Send held responses in order; an fd-carrying one waits until libuv's
 * queue is empty. */
static void flush_held(struct flyd_session *s)
{
	while (s->held != NULL && !s->closing) {
		struct outmsg *m = s->held;
		ssize_t n;

		if (m->fd >= 0) {
			if (uv_stream_get_write_queue_size(
				    (uv_stream_t *)&s->pipe) > 0 || s->writes > 0)
				return; /* on_write calls again */
			n = send_with_fd(s, m->buf, m->len, m->fd);
			if (n == 0) {
				kick_arm(s->srv, 2);
				return;
			}
			if (n < 0) {
				session_close_why(s, "sendmsg_error");
				return;
			}
			close(m->fd);
			m->fd = -1;
			if ((size_t)n < m->len) {
				size_t rlen = m->len - (size_t)n;
				uint8_t *rest = malloc(rlen);

				if (rest == NULL) {
					session_close_why(s, "enomem");
					return;
				}
				memcpy(rest, m->buf + n, rlen);
				s->held = m->next;
				s->held_bytes -= m->len;
				free(m->buf);
				free(m);
				write_now(s, rest, rlen);
				continue;
			}
			free(m->buf);
			m->buf = NULL;
		}
		s->held = m->next;
		s->held_bytes -= m->len;
		if (m->buf != NULL)
			write_now(s, m->buf, m->len);
		free(m);
	}
	if (s->held == NULL)
		s->held_tail = &s->held;
}

/* Disconnect a client that stopped reading: more than one response
 * outstanding and more than cfg.out_buf_cap bytes unsent. */
static void check_slow(struct flyd_session *s)
{
	size_t q;

	if (s->closing)
		return;
	q = uv_stream_get_write_queue_size((uv_stream_t *)&s->pipe) +
	    s->held_bytes;
	if (q > s->ctx->cfg.out_buf_cap && s->writes + (s->held != NULL) > 1) {
		s->ctx->stats.rejected_slow++;
		flyd_log(FLYD_LOG_WARN, "slow_client",
			 "conn=%llu pid=%d queued=%zu cap=%u",
			 (unsigned long long)s->serial, (int)s->pid, q,
			 s->ctx->cfg.out_buf_cap);
		session_close_why(s, "slow");
	}
}

/* Queue one frame (@p buf owned, @p fd owned or -1). */
static void out_enqueue(struct flyd_session *s, uint8_t *buf, size_t len,
			int fd)
{
	struct outmsg *m;

	flyd_session_flush(s->ctx); /* the batch goes first: order is kept */
	if (s->closing) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return;
	}
	if (fd < 0 && s->held == NULL) {
		write_now(s, buf, len);
		check_slow(s);
		return;
	}
	m = malloc(sizeof(*m));
	if (m == NULL) {
		free(buf);
		if (fd >= 0)
			close(fd);
		session_close_why(s, "enomem");
		return;
	}
	m->next = NULL;
	m->buf = buf;
	m->len = len;
	m->fd = fd;
	*s->held_tail = m;
	s->held_tail = &m->next;
	s->held_bytes += len;
	flush_held(s);
	check_slow(s);
}

/* Serialize and send @p resp (consumed), adding "ok" and "id". */
static void send_resp(struct flyd_session *s, cJSON *resp, int has_id,
		      int64_t id, int fd)
{
	uint8_t *buf;
	char *text;
	size_t len;

	if (resp == NULL)
		resp = fly_msg_error(-ENOMEM, "out of memory");
	if (resp != NULL && !cJSON_HasObjectItem(resp, "ok"))
		cJSON_AddTrueToObject(resp, "ok");
	if (resp != NULL && has_id && !cJSON_HasObjectItem(resp, "id"))
		cJSON_AddNumberToObject(resp, "id", (double)id);
	text = resp != NULL ? fly_msg_print(resp, &len) : NULL;
	cJSON_Delete(resp);
	if (text == NULL) {
		if (fd >= 0)
			close(fd);
		session_close_why(s, "enomem");
		return;
	}
	if (fd < 0 && batch_put(s, text, len)) {
		free(text);
		return;
	}
	buf = malloc(FLY_FRAME_HDR + len);
	if (buf == NULL) {
		free(text);
		if (fd >= 0)
			close(fd);
		session_close_why(s, "enomem");
		return;
	}
	fly_frame_put_header(buf, (uint32_t)len);
	memcpy(buf + FLY_FRAME_HDR, text, len);
	free(text);
	out_enqueue(s, buf, FLY_FRAME_HDR + len, fd);
}

static struct flyd_session *session_of(struct flyd_req *rq)
{
	return (struct flyd_session *)(void *)((char *)rq -
					      offsetof(struct flyd_session, rq));
}

static struct sreply *sreply_of(struct flyd_reply *r)
{
	return (struct sreply *)(void *)r; /* base is the first member */
}

static const struct flyd_reply_ops session_ops;

static struct flyd_reply *session_defer(struct flyd_req *rq)
{
	struct flyd_session *s = session_of(rq);
	struct sreply *r = malloc(sizeof(*r));

	if (r == NULL)
		return NULL;
	r->base.ops = &session_ops;
	r->s = s;
	r->has_id = s->cur_has_id;
	r->id = s->cur_id;
	r->fd = -1;
	s->refs++;
	return &r->base;
}

static int session_send(struct flyd_reply *token, cJSON *resp)
{
	struct sreply *r = sreply_of(token);
	struct flyd_session *s = r->s;
	int rc = 0;

	if (s->closing) {
		cJSON_Delete(resp);
		if (r->fd >= 0)
			close(r->fd);
		rc = -ENOTCONN;
	} else {
		int code = fly_msg_get_error(resp, NULL);

		if (code != 0)
			s->ctx->stats.errors++;
		send_resp(s, resp, r->has_id, r->id, r->fd);
	}
	s->refs--;
	free(r);
	session_unref_free(s);
	return rc;
}

static int session_attach_fd(struct flyd_req *rq, int fd)
{
	struct flyd_session *s = session_of(rq);
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);

	if (d < 0)
		return -errno;
	if (s->cur_fd >= 0)
		close(s->cur_fd);
	s->cur_fd = d;
	return 0;
}

static int session_reply_attach_fd(struct flyd_reply *token, int fd)
{
	struct sreply *r = sreply_of(token);
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);

	if (d < 0)
		return -errno;
	if (r->fd >= 0)
		close(r->fd);
	r->fd = d;
	return 0;
}

static const struct flyd_reply_ops session_ops = {
	.defer = session_defer,
	.attach_fd = session_attach_fd,
	.send = session_send,
	.reply_attach_fd = session_reply_attach_fd,
};

/* Answer a decide that fly_hot_scan_decide() matched through the
 * server's fast path; its reply joins the batch.  The reply is written
 * on the stack, not straight into the batch: a reply queued while the
 * handler runs must not be written over.
 * @return 0 answered, 1 to parse and dispatch it. */
static int hot_frame(struct flyd_session *s, const struct fly_hot_req *hr)
{
	struct flyd_server *srv = s->srv;
	char tmp[FLY_HOT_DECIDE_MAX];
	const char *msg = NULL;
	size_t len = 0;
	uint8_t *buf;
	int rc;

	s->cur_has_id = hr->has_id;
	s->cur_id = hr->id;
	rc = srv->fast(srv->fast_arg, &s->rq, hr, tmp, sizeof(tmp), &len,
		       &msg);
	if (rc == FLYD_FAST_FALLBACK)
		return 1;
	if (rc < 0) {
		s->ctx->stats.errors++;
		send_resp(s, fly_msg_error(rc, msg != NULL ? msg :
					   fly_strerror(rc)),
			  hr->has_id, hr->id, -1);
		return 0;
	}
	if (batch_put(s, tmp, len))
		return 0;
	buf = malloc(FLY_FRAME_HDR + len);
	if (buf == NULL) {
		session_close_why(s, "enomem");
		return 0;
	}
	fly_frame_put_header(buf, (uint32_t)len);
	memcpy(buf + FLY_FRAME_HDR, tmp, len);
	out_enqueue(s, buf, FLY_FRAME_HDR + len, -1);
	return 0;
}

/* Parse, dispatch and answer one request frame. */
static void handle_frame(struct flyd_session *s, const uint8_t *frame,
			 uint32_t len)
{
	struct flyd_ctx *ctx = s->ctx;
	const char *msg = NULL;
	cJSON *req = NULL, *resp = NULL, *id;
	struct fly_hot_req hr;
	int rc;

	ctx->stats.requests++;
	s->cur_has_id = 0;
	s->cur_id = 0;
	s->cur_fd = -1;
	if (s->srv->fast != NULL && fly_hot_scan_decide(frame, len, &hr) == 0 &&
	    hot_frame(s, &hr) == 0)
		return;
	s->cur_has_id = 0;
	s->cur_id = 0;
	if (fly_msg_parse(frame, len, &req) != 0) {
		ctx->stats.protocol_errors++;
		rc = FLY_E_PROTO;
		msg = "request is not a valid JSON object (strict parse)";
		goto reply;
	}
	id = cJSON_GetObjectItemCaseSensitive(req, "id");
	if (id != NULL) {
		if (!cJSON_IsNumber(id) || id->valuedouble != (double)(int64_t)
		    id->valuedouble) {
			rc = FLY_E_INVALID;
			msg = "'id' must be an integer";
			goto reply;
		}
		s->cur_has_id = 1;
		s->cur_id = (int64_t)id->valuedouble;
	}
	resp = cJSON_CreateObject();
	if (resp == NULL || cJSON_AddTrueToObject(resp, "ok") == NULL) {
		rc = -ENOMEM;
		goto reply;
	}
	rc = s->srv->dispatch(s->srv->dispatch_arg, &s->rq, req, resp, &msg);
	if (rc == FLYD_DEFERRED) {
		cJSON_Delete(resp);
		cJSON_Delete(req);
		if (s->cur_fd >= 0)
			close(s->cur_fd);
		s->cur_fd = -1;
		return;
	}
reply:
	if (rc < 0) {
		ctx->stats.errors++;
		cJSON_Delete(resp);
		resp = fly_msg_error(rc, msg != NULL ? msg : fly_strerror(rc));
		if (s->cur_fd >= 0)
			close(s->cur_fd);
		s->cur_fd = -1;
	}
	cJSON_Delete(req);
	send_resp(s, resp, s->cur_has_id, s->cur_id, s->cur_fd);
	s->cur_fd = -1;
}

/* A framing violation: answer and close once it is written.  A length
 * over the cap is "too_big" (schemas/README.md, issue 18), a length of 0
 * "proto"; the header is in s->dec.hdr. */
static void framing_error(struct flyd_session *s, int64_t rc)
{
	int64_t len = fly_frame_get_header(s->dec.hdr, UINT32_MAX);
	int code = FLY_E_PROTO;
	char m[128];

	s->ctx->stats.protocol_errors++;
	s->ctx->stats.errors++;
	flyd_log(FLYD_LOG_WARN, "framing_error", "conn=%llu pid=%d err=%s",
		 (unsigned long long)s->serial, (int)s->pid,
		 rc == FLY_E_TOOBIG ? "length" : "enomem");
	if (rc == FLY_E_TOOBIG && len > 0) {
		code = FLY_E_TOOBIG;
		snprintf(m, sizeof(m), "frame length %lld is over the cap of "
			 "%u bytes", (long long)len, s->dec.cap);
	} else if (rc == FLY_E_TOOBIG) {
		snprintf(m, sizeof(m), "frame length 0 is not allowed");
	} else {
		code = (int)rc;
		snprintf(m, sizeof(m), "cannot buffer the frame");
	}
	uv_read_stop((uv_stream_t *)&s->pipe);
	s->close_after_flush = 1;
	send_resp(s, fly_msg_error(code, m), 0, 0, -1);
	flyd_session_flush(s->ctx);
	if (!s->closing && s->writes == 0 && s->held == NULL)
		session_close_why(s, "protocol");
}

/* Handle up to FLYD_FRAMES_PER_READ frames from @p data.
 * @return bytes consumed (less than @p len when the budget ran out). */
static size_t process_frames(struct flyd_session *s, const uint8_t *data,
			     size_t len)
{
	uint64_t now = uv_now(s->ctx->loop);
	int frames = 0;
	size_t off = 0;

	s->last_active = now;
	while (off < len && !s->closing && !s->close_after_flush) {
		uint8_t *frame = NULL;
		uint32_t flen = 0;
		int64_t n;

		if (frames >= FLYD_FRAMES_PER_READ)
			break;
		if (!fly_frame_dec_is_partial(&s->dec) &&
		    len - off >= FLY_FRAME_HDR) {
			/* A whole frame in the buffer: handled where it is,
			 * not copied into a malloc'd one (issue 19). */
			n = fly_frame_get_header(data + off, s->dec.cap);
			if (n > 0 && (size_t)n <= len - off - FLY_FRAME_HDR) {
				frames++;
				handle_frame(s, data + off + FLY_FRAME_HDR,
					     (uint32_t)n);
				off += FLY_FRAME_HDR + (size_t)n;
				continue;
			}
		}
		n = fly_frame_dec_feed(&s->dec, data + off, len - off, &frame,
				       &flen);
		if (n < 0) {
			framing_error(s, n);
			return len;
		}
		off += (size_t)n;
		if (frame != NULL) {
			frames++;
			handle_frame(s, frame, flen);
			free(frame);
		}
		if (n == 0 && frame == NULL)
			break; /* defensive: no progress */
	}
	if (s->closing)
		return len;
	if (fly_frame_dec_is_partial(&s->dec)) {
		if (frames > 0 || s->partial_since == 0)
			s->partial_since = now;
	} else {
		s->partial_since = 0;
	}
	return off;
}

/* process_frames() with the session's replies batched: they go out with
 * the other sessions' replies of this loop iteration, after the poll
 * phase, one write per session, in order (issue 19).  Not nested: a
 * session processed inside another's handler (none today) writes its
 * replies one by one. */
static size_t process(struct flyd_session *s, const uint8_t *data, size_t len)
{
	struct flyd_server *srv = s->srv;
	int batching = srv->wown == NULL;
	size_t used;

	if (batching) {
		if (srv->nseg >= FLYD_WSEG_MAX - 1)
			batch_flush_all(srv); /* room for this one's segment */
		srv->wown = s;
		srv->wstart = srv->wlen;
	}
	used = process_frames(s, data, len);
	if (batching) {
		seg_close(srv);
		srv->wown = NULL;
	}
	return used;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct flyd_session *s = h->data;

	buf->base = s->srv->rbuf;
	buf->len = sizeof(s->srv->rbuf);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct flyd_session *s = st->data;
	size_t used;

	if (nread == 0 || s->closing)
		return;
	if (nread < 0) {
		session_close_why(s, nread == UV_EOF ?
				  (fly_frame_dec_is_partial(&s->dec) ?
				   "eof_partial" : "eof") : "read_error");
		return;
	}
	used = process(s, (const uint8_t *)buf->base, (size_t)nread);
	if (s->closing || used >= (size_t)nread)
		return;
	/* Budget spent: keep the rest, stop reading until it is handled. */
	s->blen = (size_t)nread - used;
	s->boff = 0;
	s->backlog = malloc(s->blen);
	if (s->backlog == NULL) {
		session_close_why(s, "enomem");
		return;
	}
	memcpy(s->backlog, buf->base + used, s->blen);
	uv_read_stop(st);
	kick_arm(s->srv, 0);
}

int flyd_session_open(struct flyd_ctx *ctx, int sfd)
{
	struct flyd_server *srv = ctx->server;
	struct flyd_session *s = calloc(1, sizeof(*s));
	struct ucred cr;
	socklen_t crlen = sizeof(cr);
	uv_os_fd_t fd;
	int rc;

	if (s == NULL) {
		close(sfd);
		return -ENOMEM;
	}
	s->ctx = ctx;
	s->srv = srv;
	s->held_tail = &s->held;
	s->cur_fd = -1;
	s->serial = next_serial++;
	rc = uv_pipe_init(ctx->loop, &s->pipe, 0);
	if (rc < 0) {
		close(sfd);
		free(s);
		return rc;
	}
	s->pipe.data = s;
	srv->open_handles++;
	s->closing = 1; /* not linked yet: on_close must only free */
	rc = uv_pipe_open(&s->pipe, sfd);
	if (rc < 0) {
		close(sfd);
		uv_close((uv_handle_t *)&s->pipe, on_close);
		return rc;
	}
	s->closing = 0;
	if (uv_fileno((uv_handle_t *)&s->pipe, &fd) == 0 &&
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) == 0) {
		s->uid = cr.uid;
		s->gid = cr.gid;
		s->pid = cr.pid;
	} else {
		s->uid = (uid_t)-1;
		s->gid = (gid_t)-1;
	}
	s->rq = (struct flyd_req){
		.ops = &session_ops,
		.uid = s->uid,
		.gid = s->gid,
		.pid = s->pid,
		.errbuf = s->errbuf,
		.errcap = sizeof(s->errbuf),
		.stage = &s->stage,
	};
	fly_frame_dec_init(&s->dec, ctx->cfg.frame_cap);
	s->last_active = uv_now(ctx->loop);
	s->next = srv->head;
	if (srv->head != NULL)
		srv->head->prev = s;
	srv->head = s;
	srv->nsessions++;
	ctx->stats.connections++;
	flyd_log(FLYD_LOG_DEBUG, "accept", "conn=%llu uid=%d gid=%d pid=%d",
		 (unsigned long long)s->serial, (int)s->uid, (int)s->gid,
		 (int)s->pid);
	rc = uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
	if (rc < 0)
		session_close_why(s, "read_start");
	return 0;
}

void flyd_session_sweep(struct flyd_ctx *ctx, uint64_t now)
{
	struct flyd_session *s = ctx->server->head, *next;
	uint64_t ft = ctx->cfg.frame_timeout_ms;
	uint64_t it = ctx->cfg.idle_timeout_ms;

	for (; s != NULL; s = next) {
		next = s->next;
		if (s->partial_since != 0 && now - s->partial_since >= ft) {
			ctx->stats.timeouts++;
			flyd_log(FLYD_LOG_WARN, "frame_timeout",
				 "conn=%llu pid=%d timeout_ms=%llu",
				 (unsigned long long)s->serial, (int)s->pid,
				 (unsigned long long)ft);
			session_close_why(s, "frame_timeout");
		} else if (it > 0 && s->refs == 0 && s->writes == 0 &&
			   s->held == NULL && s->backlog == NULL &&
			   now - s->last_active >= it) {
			ctx->stats.timeouts++;
			session_close_why(s, "idle_timeout");
		}
	}
}

void flyd_session_kick(struct flyd_ctx *ctx)
{
	struct flyd_session *s = ctx->server->head, *next;
	int more = 0;

	for (; s != NULL; s = next) {
		next = s->next;
		if (s->held != NULL && s->writes == 0)
			flush_held(s);
		if (s->closing || s->backlog == NULL)
			continue;
		s->boff += process(s, s->backlog + s->boff, s->blen - s->boff);
		if (s->closing)
			continue;
		if (s->boff >= s->blen) {
			free(s->backlog);
			s->backlog = NULL;
			if (!s->close_after_flush &&
			    uv_read_start((uv_stream_t *)&s->pipe, on_alloc,
					  on_read) < 0)
				session_close_why(s, "read_start");
		} else {
			more = 1;
		}
	}
	if (more)
		kick_arm(ctx->server, 0);
	else if (flyd_session_has_work(ctx))
		kick_arm(ctx->server, 2);
}

int flyd_session_has_work(const struct flyd_ctx *ctx)
{
	for (const struct flyd_session *s = ctx->server->head; s != NULL;
	     s = s->next)
		if (s->backlog != NULL || (s->held != NULL && s->writes == 0))
			return 1;
	return 0;
}

void flyd_session_close_all(struct flyd_ctx *ctx)
{
	flyd_session_flush(ctx); /* and the batch's refs are released */
	while (ctx->server->head != NULL)
		session_close_why(ctx->server->head, "shutdown");
}
