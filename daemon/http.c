/*
 * http.c -- the metrics listener (see http.h): TCP on the daemon's loop,
 * one request per connection, GET /metrics only.
 *
 * Owns: struct flyd_http (the listening handle, its connections and its
 * counters) and each struct hconn (a connection: its handle, its timer,
 * its request head).  Thread: loop thread.
 *
 * Lifetime: a connection's memory goes when both its handles (stream and
 * timer) closed; the listener's when it and every connection closed.  A
 * response buffer is owned by its struct hwrite until write_cb.  After
 * the response the write side is shut down and the rest of the input is
 * read and dropped until EOF or the timeout, so a client that sent more
 * than we read still gets the answer (closing with unread input would
 * reset the connection).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "http.h"

struct hconn {
	struct flyd_http *h;
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_shutdown_t shut;
	struct hconn *prev, *next;
	int pending;              /* handles not closed yet */
	int answered;             /* response written (or being written) */
	int closing;
	size_t n;                 /* bytes of head[] */
	char head[FLYD_HTTP_HEAD_MAX];
};

struct hwrite {
	uv_write_t req;
	char *buf;
};

struct flyd_http {
	uv_loop_t *loop;
	uv_tcp_t tcp;
	flyd_http_render_fn render;
	void *arg;
	struct hconn *conns;
	unsigned nconns;
	int pending;              /* the listener + connections not freed */
	int closing;
	int port;
	struct flyd_http_counts counts;
};

/* ---------------------------------------------------------------- close */

static void http_unref(struct flyd_http *h)
{
	if (--h->pending == 0)
		free(h);
}

static void conn_closed(uv_handle_t *hd)
{
	struct hconn *c = hd->data;
	struct flyd_http *h = c->h;

	if (--c->pending > 0)
		return;
	free(c);
	http_unref(h);
}

static void conn_close(struct hconn *c)
{
	struct flyd_http *h = c->h;

	if (c->closing)
		return;
	c->closing = 1;
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		h->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	h->nconns--;
	uv_timer_stop(&c->timer);
	uv_close((uv_handle_t *)&c->tcp, conn_closed);
	uv_close((uv_handle_t *)&c->timer, conn_closed);
}

/* ---------------------------------------------------------------- reply */

static void on_shutdown(uv_shutdown_t *req, int status)
{
	struct hconn *c = req->data;

	if (status < 0)
		conn_close(c);
	/* else: keep reading (and dropping) until EOF or the timeout */
}

static void on_write(uv_write_t *req, int status)
{
	struct hwrite *w = (struct hwrite *)req;
	struct hconn *c = req->data;

	free(w->buf);
	free(w);
	if (c->closing)
		return;
	if (status < 0 ||
	    uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
		conn_close(c);
}

static const char *reason_of(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 431: return "Request Header Fields Too Large";
	default: return "Internal Server Error";
	}
}

/* Send a response (takes ownership of @p body, malloc'd or NULL) and
 * count it. */
static void respond(struct hconn *c, int status, const char *ctype,
		    char *body, size_t blen)
{
	struct flyd_http_counts *k = &c->h->counts;
	struct hwrite *w;
	char hdr[256];
	uv_buf_t b;
	int n;

	c->answered = 1;
	switch (status) {
	case 200: k->ok++; break;
	case 400: k->bad++; break;
	case 404: k->not_found++; break;
	case 405: k->bad_method++; break;
	case 408: k->timeout++; break;
	case 431: k->too_big++; break;
	default: k->error++; break;
	}
	if (body == NULL) {
		body = strdup(reason_of(status));
		blen = body != NULL ? strlen(body) : 0;
		ctype = "text/plain; charset=utf-8";
	}
	n = snprintf(hdr, sizeof(hdr), "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
		     "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
		     status, reason_of(status), ctype, blen,
		     status == 405 ? "Allow: GET\r\n" : "");
	w = malloc(sizeof(*w));
	if (w != NULL)
		w->buf = malloc((size_t)n + blen);
	if (w == NULL || w->buf == NULL) {
		free(w);
		free(body);
		conn_close(c);
		return;
	}
	memcpy(w->buf, hdr, (size_t)n);
	if (blen > 0)
		memcpy(w->buf + n, body, blen);
	free(body);
	b = uv_buf_init(w->buf, (unsigned)((size_t)n + blen));
	w->req.data = c;
	if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
		free(w->buf);
		free(w);
		conn_close(c);
	}
}

/* Answer a complete request head (NUL-terminated in c->head). */
static void answer(struct hconn *c)
{
	char method[16], target[256], version[16];
	char *text = NULL;
	size_t len = 0, plen;

	if (sscanf(c->head, "%15s %255s %15s", method, target, version) != 3 ||
	    strncmp(version, "HTTP/1.", 7) != 0) {
		respond(c, 400, NULL, NULL, 0);
		return;
	}
	if (strcmp(method, "GET") != 0) {
		respond(c, 405, NULL, NULL, 0);
		return;
	}
	plen = strcspn(target, "?");
	if (plen != strlen("/metrics") ||
	    strncmp(target, "/metrics", plen) != 0) {
		respond(c, 404, NULL, NULL, 0);
		return;
	}
	if (c->h->render(c->h->arg, &text, &len) < 0) {
		free(text);
		respond(c, 500, NULL, NULL, 0);
		return;
	}
	respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", text,
		len);
}

/* ---------------------------------------------------------------- read */

static void on_alloc(uv_handle_t *hd, size_t hint, uv_buf_t *buf)
{
	struct hconn *c = hd->data;

	(void)hint;
	if (c->answered) /* dropping the rest: reuse the head buffer */
		*buf = uv_buf_init(c->head, sizeof(c->head));
	else
		*buf = uv_buf_init(c->head + c->n,
				   (unsigned)(sizeof(c->head) - 1 - c->n));
}

static int head_complete(const struct hconn *c)
{
	return strstr(c->head, "\r\n\r\n") != NULL ||
	       strstr(c->head, "\n\n") != NULL;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct hconn *c = st->data;

	(void)buf;
	if (nread < 0) {
		conn_close(c);
		return;
	}
	if (c->answered || nread == 0)
		return;
	c->n += (size_t)nread;
	c->head[c->n] = '\0';
	if (memchr(c->head, '\0', c->n) != NULL) {
		respond(c, 400, NULL, NULL, 0); /* a NUL in the head */
		return;
	}
	if (head_complete(c))
		answer(c);
	else if (c->n >= sizeof(c->head) - 1)
		respond(c, 431, NULL, NULL, 0);
}

static void on_timeout(uv_timer_t *t)
{
	struct hconn *c = t->data;

	if (c->answered)
		conn_close(c);
	else
		respond(c, 408, NULL, NULL, 0);
	/* the timer ran once: a 408 that cannot be written in time either
	 * is closed by the second period */
	if (!c->closing)
		uv_timer_start(&c->timer, on_timeout, FLYD_HTTP_TIMEOUT_MS, 0);
}

/* ---------------------------------------------------------------- accept */

static void on_connection(uv_stream_t *srv, int status)
{
	struct flyd_http *h = srv->data;
	struct hconn *c;

	if (status < 0 || h->closing)
		return;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return;
	c->h = h;
	uv_tcp_init(h->loop, &c->tcp);
	uv_timer_init(h->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	c->shut.data = c;
	c->pending = 2;
	h->pending++;
	c->next = h->conns;
	if (h->conns != NULL)
		h->conns->prev = c;
	h->conns = c;
	h->nconns++;
	if (uv_accept(srv, (uv_stream_t *)&c->tcp) < 0) {
		conn_close(c);
		return;
	}
	if (h->nconns > FLYD_HTTP_CONNS) {
		h->counts.refused++;
		conn_close(c);
		return;
	}
	uv_timer_start(&c->timer, on_timeout, FLYD_HTTP_TIMEOUT_MS, 0);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
		conn_close(c);
}

/* ---------------------------------------------------------------- api */

static void listener_closed(uv_handle_t *hd)
{
	http_unref(hd->data);
}

int flyd_http_start(uv_loop_t *loop, const char *addr,
		    flyd_http_render_fn render, void *arg,
		    struct flyd_http **out)
{
	struct sockaddr_storage ss;
	struct sockaddr_storage bound;
	int rc, blen = sizeof(bound);
	struct flyd_http *h;

	*out = NULL;
	rc = flyd_config_parse_listen(addr, &ss);
	if (rc < 0)
		return rc;
	h = calloc(1, sizeof(*h));
	if (h == NULL)
		return -ENOMEM;
	h->loop = loop;
	h->render = render;
	h->arg = arg;
	h->pending = 1;
	uv_tcp_init(loop, &h->tcp);
	h->tcp.data = h;
	rc = uv_tcp_bind(&h->tcp, (const struct sockaddr *)&ss, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&h->tcp, 64, on_connection);
	if (rc < 0) {
		h->closing = 1;
		uv_close((uv_handle_t *)&h->tcp, listener_closed);
		return rc;
	}
	if (uv_tcp_getsockname(&h->tcp, (struct sockaddr *)&bound, &blen) == 0)
		h->port = ntohs(bound.ss_family == AF_INET6 ?
				((struct sockaddr_in6 *)&bound)->sin6_port :
				((struct sockaddr_in *)&bound)->sin_port);
	*out = h;
	return 0;
}

int flyd_http_port(const struct flyd_http *h)
{
	return h != NULL ? h->port : 0;
}

void flyd_http_counts_get(const struct flyd_http *h,
			  struct flyd_http_counts *out)
{
	if (h != NULL)
		*out = h->counts;
	else
		memset(out, 0, sizeof(*out));
}

void flyd_http_stop(struct flyd_http *h)
{
	if (h == NULL || h->closing)
		return;
	h->closing = 1;
	while (h->conns != NULL)
		conn_close(h->conns);
	uv_close((uv_handle_t *)&h->tcp, listener_closed);
}
