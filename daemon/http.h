/*
 * http.h -- the optional metrics listener: a minimal HTTP/1.x server on
 * the daemon's loop that answers `GET /metrics` with the text a render
 * callback gives it (main.c hands it flyd_metrics_render), and nothing
 * else.
 *
 * Thread: loop thread.  Bounds: a request head of at most
 * FLYD_HTTP_HEAD_MAX bytes (else 431 and close), complete within
 * FLYD_HTTP_TIMEOUT_MS of the connection (else 408 and close), at most
 * FLYD_HTTP_CONNS connections at once (more are closed at accept).  Every
 * response carries "Connection: close"; a request body is never read.
 * Answers: 200 (GET /metrics, any query string), 404 (another path),
 * 405 with "Allow: GET" (another method), 400 (not an HTTP request line),
 * 431, 408.
 */
#ifndef FLYD_HTTP_H
#define FLYD_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define FLYD_HTTP_HEAD_MAX 4096
#define FLYD_HTTP_TIMEOUT_MS 5000
#define FLYD_HTTP_CONNS 16

/* The body of a 200: @p text (caller owns it afterwards: http.c frees it
 * with free()) of @p len bytes.  @return 0 or -errno (then a 500). */
typedef int (*flyd_http_render_fn)(void *arg, char **text, size_t *len);

/* Responses sent, by status (the listener's own counters). */
struct flyd_http_counts {
	uint64_t ok;          /* 200 */
	uint64_t bad;         /* 400 */
	uint64_t not_found;   /* 404 */
	uint64_t bad_method;  /* 405 */
	uint64_t timeout;     /* 408 */
	uint64_t too_big;     /* 431 */
	uint64_t error;       /* 500 */
	uint64_t refused;     /* closed at accept: FLYD_HTTP_CONNS open */
};

struct flyd_http;

/* Listen on @p addr (flyd_config_parse_listen's syntax).
 * @param[out] out caller owns; stop with flyd_http_stop().
 * @return 0, -EINVAL (bad address), or -errno of bind/listen. */
int flyd_http_start(uv_loop_t *loop, const char *addr,
		    flyd_http_render_fn render, void *arg,
		    struct flyd_http **out);
/* The port bound (for "127.0.0.1:0"); 0 when unknown. */
int flyd_http_port(const struct flyd_http *h);
void flyd_http_counts_get(const struct flyd_http *h,
			  struct flyd_http_counts *out);
/* Close the listener and every connection; the memory goes in the close
 * callbacks.  NULL: no-op. */
void flyd_http_stop(struct flyd_http *h);

#endif /* FLYD_HTTP_H */
