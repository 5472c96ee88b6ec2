/*
 * server.c -- the listener: a Unix socket (or the socket-activated fd),
 * the client limit, EMFILE handling, the timeout sweep (see server.h).
 *
 * Owns: struct flyd_server, the listening fd, its poll handle, three
 * timers and the spare fd.
 * Thread: loop thread.
 *
 * Accept is ours (uv_poll on the listening fd, at most 64 per wake-up),
 * not uv_listen: libuv's own EMFILE handling spins inside its accept loop
 * once its reserve fd cannot be reopened.  On EMFILE/ENFILE we close our
 * spare fd, accept and close the pending connections (clients see EOF),
 * reopen the spare; if nothing could be accepted, accepting pauses for
 * 100 ms.  The warning is logged at most once per second.  The client
 * limit keeps FLYD_FD_RESERVE fds below RLIMIT_NOFILE for the DB, the
 * worker and the shm, and room for the admin reserve and the lingering
 * refusals.
 *
 * At max_clients, a peer whose SO_PEERCRED uid is 0 or the daemon's own
 * still gets a session, up to FLYD_ADMIN_RESERVE more; anyone else gets a
 * max_clients error frame ("too many clients") and, up to FLYD_LINGER_MAX
 * at a time, a connection kept half-open for FLYD_LINGER_MS so the frame
 * is read even by a client that sends its hello first.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"
#include "fly_frame.h"
#include "fly_msg.h"
#include "log.h"
#include "server.h"
#include "server_int.h"
#include "session.h"

#define SWEEP_MS 100

uint32_t flyd_server_connections(const struct flyd_ctx *ctx)
{
	return ctx->server != NULL ? ctx->server->nsessions : 0;
}

uint32_t flyd_server_max_clients(const struct flyd_ctx *ctx)
{
	return ctx->server != NULL ? ctx->server->max_clients : 0;
}

/* min(cfg.max_clients, RLIMIT_NOFILE - reserves), at least 1. */
static uint32_t client_limit(const struct flyd_ctx *ctx)
{
	const uint64_t rsv = FLYD_FD_RESERVE + FLYD_ADMIN_RESERVE +
			     FLYD_LINGER_MAX;
	struct rlimit rl;
	uint32_t lim = ctx->cfg.max_clients;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		uint64_t room = rl.rlim_cur > rsv + 1 ? rl.rlim_cur - rsv : 1;

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

/* Keep a refused @p fd half-open for FLYD_LINGER_MS (closed by the sweep),
 * or close it now when every slot is taken. */
static void linger_or_close(struct flyd_server *srv, int fd)
{
	for (int i = 0; i < FLYD_LINGER_MAX; i++)
		if (srv->linger_fd[i] < 0) {
			shutdown(fd, SHUT_WR);
			srv->linger_fd[i] = fd;
			srv->linger_at[i] = uv_now(srv->ctx->loop);
			return;
		}
	close(fd);
}

/* Close the lingering refusals older than FLYD_LINGER_MS (all: @p all). */
static void linger_sweep(struct flyd_server *srv, int all)
{
	uint64_t now = uv_now(srv->ctx->loop);

	for (int i = 0; i < FLYD_LINGER_MAX; i++)
		if (srv->linger_fd[i] >= 0 &&
		    (all || now - srv->linger_at[i] >= FLYD_LINGER_MS)) {
			close(srv->linger_fd[i]);
			srv->linger_fd[i] = -1;
		}
}

/* Whether the peer of @p fd is an admin peer for the reserve: uid 0 or
 * the daemon's own uid (SO_PEERCRED; no /proc look-up on this path). */
static int peer_is_reserved_admin(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return 0;
	return cr.uid == 0 || cr.uid == geteuid();
}

/* Over the limit: answer max_clients on the raw fd, then linger or close. */
static void reject_client(struct flyd_ctx *ctx, int fd)
{
	struct flyd_server *srv = ctx->server;
	char m[160];
	cJSON *e;
	size_t len = 0;
	char *text;

	snprintf(m, sizeof(m), "too many clients (max_clients %u reached; "
		 "%d more are kept for root and the daemon's user)",
		 srv->max_clients, FLYD_ADMIN_RESERVE);
	e = fly_msg_error(FLY_E_MAXCLIENTS, m);
	text = e != NULL ? fly_msg_print(e, &len) : NULL;

	if (text != NULL) {
		uint8_t hdr[FLY_FRAME_HDR];
		struct iovec iov[2] = {{hdr, sizeof(hdr)}, {text, len}};
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};

		fly_frame_put_header(hdr, (uint32_t)len);
		/* A fresh socket's buffer takes a small frame at once. */
		(void)sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	free(text);
	cJSON_Delete(e);
	linger_or_close(srv, fd);
	ctx->stats.rejected_max_clients++;
	if (srv->maxc_logged_ms == 0 ||
	    uv_now(ctx->loop) - srv->maxc_logged_ms >= 1000) {
		srv->maxc_logged_ms = uv_now(ctx->loop);
		flyd_log(FLYD_LOG_WARN, "max_clients", "limit=%u rejected=%llu",
			 srv->max_clients,
			 (unsigned long long)ctx->stats.rejected_max_clients);
	}
}

static void on_poll(uv_poll_t *h, int status, int events);

static void on_pause_done(uv_timer_t *t)
{
	struct flyd_ctx *ctx = t->data;
	struct flyd_server *srv = ctx->server;

	if (srv->listening && !ctx->stopping)
		uv_poll_start(&srv->poll, UV_READABLE, on_poll);
}

/* Out of fds: close the spare, accept and close what is pending (the
 * clients see EOF: overloaded), reopen the spare.  When even that cannot
 * accept, pause accepting for 100 ms instead of spinning. */
static void shed_load(struct flyd_ctx *ctx, int err)
{
	struct flyd_server *srv = ctx->server;
	uint64_t now = uv_now(ctx->loop);
	int shed = 0, fd;

	if (srv->spare_fd >= 0) {
		close(srv->spare_fd);
		srv->spare_fd = -1;
		while ((fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0 ||
		       errno == EINTR) {
			if (fd >= 0) {
				close(fd);
				shed++;
			}
		}
		srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	srv->emfile_count++;
	if (srv->emfile_logged_ms == 0 || now - srv->emfile_logged_ms >= 1000) {
		srv->emfile_logged_ms = now;
		flyd_log(FLYD_LOG_WARN, "accept_error", "err=%s count=%llu "
			 "shed=%d spare=%d", strerror(err),
			 (unsigned long long)srv->emfile_count, shed,
			 srv->spare_fd >= 0);
	}
	if (shed == 0) {
		uv_poll_stop(&srv->poll);
		uv_timer_start(&srv->pause, on_pause_done, 100, 0);
	}
}

/* Connections are pending: accept a bounded batch. */
static void on_poll(uv_poll_t *h, int status, int events)
{
	struct flyd_ctx *ctx = h->data;
	struct flyd_server *srv = ctx->server;

	for (int i = 0; i < 64 && srv->listening && !ctx->stopping; i++) {
		int fd = accept4(srv->lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		int rc;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM)
				shed_load(ctx, errno);
			else if (errno != EAGAIN && errno != EWOULDBLOCK)
				flyd_log(FLYD_LOG_WARN, "accept_error",
					 "err=%s", strerror(errno));
			return;
		}
		if (srv->nsessions >= srv->max_clients &&
		    (srv->nsessions >= srv->max_clients + FLYD_ADMIN_RESERVE ||
		     !peer_is_reserved_admin(fd))) {
			reject_client(ctx, fd);
			continue;
		}
		rc = flyd_session_open(ctx, fd);
		if (rc < 0)
			flyd_log(FLYD_LOG_WARN, "accept_error", "err=%s",
				 uv_err_name(rc));
	}
}

/* After the poll phase: the replies of this iteration go out. */
static void on_flush(uv_check_t *c)
{
	flyd_session_flush(c->data);
}

static void on_sweep(uv_timer_t *t)
{
	struct flyd_ctx *ctx = t->data;

	flyd_session_sweep(ctx, uv_now(ctx->loop));
	linger_sweep(ctx->server, 0);
}

/* The directory of @p path into @p dir ("." for a bare name). */
static void parent_of(const char *path, char *dir, size_t cap)
{
	char *slash;

	snprintf(dir, cap, "%s", path);
	slash = strrchr(dir, '/');
	if (slash == NULL)
		snprintf(dir, cap, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
}

/* The socket's directory: group or others who may write it could unlink
 * the socket (or, sticky, take its name first) and bind their own at its
 * path, and clients would take that server's answers (RELIABILITY.md S1;
 * chrony refuses the same).  The state directory follows the same rule
 * (issue 18: they could replace tuning.db). */
int flyd_server_dir_check(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	if (stat(dir, &st) < 0)
		return -errno;
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return -EPERM;
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

/* A listening socket bound to @p path, mode 0660.  @return fd or -errno. */
static int bind_path(const char *path)
{
	struct sockaddr_un sa;
	int fd, rc;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(path, 0660) < 0 || listen(fd, 511) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int flyd_server_precheck(struct flyd_ctx *ctx, int listen_fd)
{
	const char *path = ctx->socket_path;
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int rc;

	if (listen_fd >= 0)
		return 0;
	parent_of(path, dir, sizeof(dir));
	rc = flyd_server_dir_check(dir);
	if (rc == -EPERM) {
		flyd_log(FLYD_LOG_ERR, "listen_error",
			 "path=%s err=\"directory %s is writable by group or "
			 "others: they could replace the socket (chmod go-w, "
			 "or choose another directory)\"",
			 path, dir);
		return rc;
	}
	if (rc < 0)
		flyd_log(FLYD_LOG_ERR, "listen_error", "path=%s err=%s", path,
			 strerror(-rc));
	return rc;
}

static int listen_path(struct flyd_ctx *ctx)
{
	const char *path = ctx->socket_path;
	struct stat st;
	int rc;

	/* Its directory passed flyd_server_precheck before the DB opened. */
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
	rc = bind_path(path);
	if (rc < 0)
		flyd_log(FLYD_LOG_ERR, "listen_error", "path=%s err=%s", path,
			 strerror(-rc));
	return rc;
}

int flyd_server_start(struct flyd_ctx *ctx, int listen_fd,
		      flyd_dispatch_fn dispatch, void *arg)
{
	struct flyd_server *srv = calloc(1, sizeof(*srv));
	int rc;

	if (srv == NULL)
		return -ENOMEM;
	srv->ctx = ctx;
	srv->dispatch = dispatch;
	srv->dispatch_arg = arg;
	srv->lfd = -1;
	ctx->server = srv;
	srv->max_clients = client_limit(ctx);
	for (int i = 0; i < FLYD_LINGER_MAX; i++)
		srv->linger_fd[i] = -1;
	srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	uv_timer_init(ctx->loop, &srv->sweep);
	uv_timer_init(ctx->loop, &srv->kick);
	uv_timer_init(ctx->loop, &srv->pause);
	uv_check_init(ctx->loop, &srv->flush);
	srv->sweep.data = srv->kick.data = srv->pause.data = ctx;
	srv->flush.data = ctx;
	srv->open_handles = 4;
	uv_check_start(&srv->flush, on_flush);
	uv_unref((uv_handle_t *)&srv->flush); /* keeps nothing alive */
	if (listen_fd >= 0) {
		srv->activated = 1;
		rc = fcntl(listen_fd, F_SETFL,
			   fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
		if (rc == 0)
			rc = fcntl(listen_fd, F_SETFD, FD_CLOEXEC);
		rc = rc < 0 ? -errno : listen_fd;
	} else {
		rc = listen_path(ctx);
	}
	if (rc < 0)
		return rc; /* flyd_server_stop() closes the handles */
	srv->lfd = rc;
	rc = uv_poll_init(ctx->loop, &srv->poll, srv->lfd);
	if (rc < 0)
		return rc;
	srv->poll.data = ctx;
	srv->open_handles++;
	srv->listening = 1;
	uv_poll_start(&srv->poll, UV_READABLE, on_poll);
	uv_timer_start(&srv->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
	flyd_log(FLYD_LOG_INFO, "listening", "socket=%s activated=%d "
		 "max_clients=%u", ctx->socket_path, srv->activated,
		 srv->max_clients);
	return 0;
}

void flyd_server_set_fast(struct flyd_ctx *ctx, flyd_fast_fn fast,
			  void *arg)
{
	ctx->server->fast = fast;
	ctx->server->fast_arg = arg;
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

	if (srv == NULL || srv->lfd < 0)
		return;
	if (srv->listening) {
		uv_poll_stop(&srv->poll);
		uv_close((uv_handle_t *)&srv->poll, on_own_closed);
	}
	uv_timer_stop(&srv->pause);
	close(srv->lfd);
	srv->lfd = -1;
	if (!srv->activated)
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
	if (!uv_is_closing((uv_handle_t *)&srv->pause))
		uv_close((uv_handle_t *)&srv->pause, on_own_closed);
	if (!uv_is_closing((uv_handle_t *)&srv->flush))
		uv_close((uv_handle_t *)&srv->flush, on_own_closed);
	if (srv->spare_fd >= 0)
		close(srv->spare_fd);
	srv->spare_fd = -1;
	linger_sweep(srv, 1);
}
