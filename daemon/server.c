/*
 * server.c -- the listener: a Unix socket (or the socket-activated fd),
 * the client limit, EMFILE handling, the timeout sweep (see server.h).
 *
 * Owns: struct flyd_server, the listener handle and two timers.
 * Thread: loop thread.
 *
 * EMFILE: libuv keeps a reserve fd per loop and, when accept() fails with
 * EMFILE/ENFILE, closes it, accepts and closes the pending connections and
 * reopens it (the classic trick, uv__emfile_trick), then reports UV_EMFILE
 * to us; we only log, at most once per second, so there is no accept
 * busy-loop.  The client limit keeps FLYD_FD_RESERVE fds below
 * RLIMIT_NOFILE for the DB, the worker and the shm.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"
#include "fly_frame.h"
#include "fly_msg.h"
#include "log.h"
#include "server.h"

#define SWEEP_MS 100

uint32_t flyd_server_connections(const struct flyd_ctx *ctx)
{
	return ctx->server != NULL ? ctx->server->nsessions : 0;
}

uint32_t flyd_server_max_clients(const struct flyd_ctx *ctx)
{
	return ctx->server != NULL ? ctx->server->max_clients : 0;
}

/* min(cfg.max_clients, RLIMIT_NOFILE - reserve), at least 1. */
static uint32_t client_limit(const struct flyd_ctx *ctx)
{
	struct rlimit rl;
	uint32_t lim = ctx->cfg.max_clients;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		uint64_t room = rl.rlim_cur > FLYD_FD_RESERVE + 1 ?
			rl.rlim_cur - FLYD_FD_RESERVE : 1;

		if (room < lim)
			lim = (uint32_t)room;
	}
	return lim;
}

void flyd_server_reconfigure(struct flyd_ctx *ctx)
{
	if (ctx->server != NULL)
		ctx->server->max_clients = client_limit(ctx);
}

static void on_closed_plain(uv_handle_t *h)
{
	free(h);
}

/* Over the limit: accept, answer max_clients, close. */
static void reject_client(struct flyd_ctx *ctx, uv_stream_t *listener)
{
	uv_pipe_t *p = malloc(sizeof(*p));
	cJSON *e;
	char *text;
	size_t len;

	if (p == NULL || uv_pipe_init(ctx->loop, p, 0) < 0) {
		free(p);
		return;
	}
	if (uv_accept(listener, (uv_stream_t *)p) == 0) {
		e = fly_msg_error(FLY_E_MAXCLIENTS, "server at its client limit");
		text = e != NULL ? fly_msg_print(e, &len) : NULL;
		if (text != NULL) {
			uint8_t hdr[FLY_FRAME_HDR];
			uv_buf_t b[2];

			fly_frame_put_header(hdr, (uint32_t)len);
			b[0] = uv_buf_init((char *)hdr, sizeof(hdr));
			b[1] = uv_buf_init(text, (unsigned)len);
			(void)uv_try_write((uv_stream_t *)p, b, 2);
		}
		free(text);
		cJSON_Delete(e);
	}
	ctx->stats.rejected_max_clients++;
	flyd_log(FLYD_LOG_WARN, "max_clients", "limit=%u",
		 ctx->server->max_clients);
	uv_close((uv_handle_t *)p, on_closed_plain);
}

static void on_connection(uv_stream_t *listener, int status)
{
	struct flyd_ctx *ctx = listener->data;
	struct flyd_server *srv = ctx->server;
	int rc;

	if (status < 0) {
		uint64_t now = uv_now(ctx->loop);

		srv->emfile_count++;
		if (now - srv->emfile_logged_ms >= 1000 ||
		    srv->emfile_logged_ms == 0) {
			flyd_log(FLYD_LOG_WARN, "accept_error",
				 "err=%s count=%llu", uv_err_name(status),
				 (unsigned long long)srv->emfile_count);
			srv->emfile_logged_ms = now;
		}
		return;
	}
	if (ctx->stopping)
		return;
	if (srv->nsessions >= srv->max_clients) {
		reject_client(ctx, listener);
		return;
	}
	rc = flyd_session_accept(ctx, listener);
	if (rc < 0)
		flyd_log(FLYD_LOG_WARN, "accept_error", "err=%s",
			 uv_err_name(rc));
}

static void on_sweep(uv_timer_t *t)
{
	struct flyd_ctx *ctx = t->data;

	flyd_session_sweep(ctx, uv_now(ctx->loop));
}

/* Create the parent directory of @p path (one level, 0755). */
static int make_parent(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash == NULL || slash == dir)
		return 0;
	*slash = '\0';
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Whether a live server answers on @p path. */
static int socket_is_live(const char *path)
{
	struct sockaddr_un sa;
	int fd, live;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return live;
}

static int listen_path(struct flyd_ctx *ctx)
{
	struct flyd_server *srv = ctx->server;
	const char *path = ctx->socket_path;
	struct stat st;
	int rc;

	rc = make_parent(path);
	if (rc < 0) {
		flyd_log(FLYD_LOG_ERR, "listen_error", "path=%s err=%s", path,
			 strerror(-rc));
		return rc;
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			flyd_log(FLYD_LOG_ERR, "listen_error",
				 "path=%s err=\"exists and is not a socket\"",
				 path);
			return -EEXIST;
		}
		if (socket_is_live(path)) {
			flyd_log(FLYD_LOG_ERR, "listen_error",
				 "path=%s err=\"another daemon answers\"",
				 path);
			return -EADDRINUSE;
		}
		unlink(path);
		flyd_log(FLYD_LOG_INFO, "stale_socket", "path=%s", path);
	}
	rc = uv_pipe_bind(&srv->listener, path);
	if (rc == 0 && chmod(path, 0660) < 0)
		rc = -errno;
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&srv->listener, 511,
			       on_connection);
	if (rc < 0)
		flyd_log(FLYD_LOG_ERR, "listen_error", "path=%s err=%s", path,
			 uv_strerror(rc));
	return rc;
}

int flyd_server_start(struct flyd_ctx *ctx, int listen_fd)
{
	struct flyd_server *srv = calloc(1, sizeof(*srv));
	int rc;

	if (srv == NULL)
		return -ENOMEM;
	srv->ctx = ctx;
	ctx->server = srv;
	srv->max_clients = client_limit(ctx);
	uv_timer_init(ctx->loop, &srv->sweep);
	uv_timer_init(ctx->loop, &srv->kick);
	srv->sweep.data = ctx;
	srv->kick.data = ctx;
	srv->open_handles = 2;
	uv_pipe_init(ctx->loop, &srv->listener, 0);
	srv->listener.data = ctx;
	srv->open_handles++;
	if (listen_fd >= 0) {
		srv->activated = 1;
		rc = uv_pipe_open(&srv->listener, listen_fd);
		if (rc == 0)
			rc = uv_listen((uv_stream_t *)&srv->listener, 511,
				       on_connection);
		if (rc < 0)
			flyd_log(FLYD_LOG_ERR, "listen_error",
				 "fd=%d err=%s", listen_fd, uv_strerror(rc));
	} else {
		rc = listen_path(ctx);
	}
	if (rc < 0)
		return rc; /* flyd_server_stop() closes the handles */
	srv->listening = 1;
	uv_timer_start(&srv->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
	flyd_log(FLYD_LOG_INFO, "listening", "socket=%s activated=%d "
		 "max_clients=%u", ctx->socket_path, srv->activated,
		 srv->max_clients);
	return 0;
}

/* Close callbacks of the server's own handles: count down. */
static void on_own_closed(uv_handle_t *h)
{
	struct flyd_ctx *ctx = h->data;
	struct flyd_server *srv = ctx->server;

	srv->open_handles--;
	if (srv->done != NULL && srv->open_handles == 0) {
		void (*done)(void *) = srv->done;

		srv->done = NULL;
		done(srv->done_arg);
	}
}

void flyd_server_stop_accepting(struct flyd_ctx *ctx)
{
	struct flyd_server *srv = ctx->server;

	if (srv == NULL || uv_is_closing((uv_handle_t *)&srv->listener))
		return;
	uv_close((uv_handle_t *)&srv->listener, on_own_closed);
	if (srv->listening && !srv->activated)
		unlink(ctx->socket_path);
	srv->listening = 0;
}

void flyd_server_stop(struct flyd_ctx *ctx, void (*done)(void *), void *arg)
{
	struct flyd_server *srv = ctx->server;

	if (srv == NULL) {
		done(arg);
		return;
	}
	srv->done = done;
	srv->done_arg = arg;
	flyd_server_stop_accepting(ctx);
	flyd_session_close_all(ctx);
	if (!uv_is_closing((uv_handle_t *)&srv->sweep))
		uv_close((uv_handle_t *)&srv->sweep, on_own_closed);
	if (!uv_is_closing((uv_handle_t *)&srv->kick))
		uv_close((uv_handle_t *)&srv->kick, on_own_closed);
}
