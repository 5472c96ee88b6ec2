/*
 * server.h -- the socket server: the listener (a Unix socket path or the
 * socket-activated fd 3) and the sessions behind it.
 *
 * Owns: the listener, every session, the per-session input/output
 * buffers.  Thread: loop thread only.
 *
 * Limits (from cfg, re-read on reconfigure): max clients = min(cfg,
 * RLIMIT_NOFILE - 64); request frames over cfg.frame_cap are refused from
 * their 4-byte header, before anything is allocated; at most
 * FLYD_FRAMES_PER_READ frames of one client are handled per loop
 * iteration; a client whose unsent output passes cfg.out_buf_cap is
 * disconnected (stats.rejected_slow); a partial frame older than
 * cfg.frame_timeout_ms or a connection idle for cfg.idle_timeout_ms is
 * closed (stats.timeouts).  Unsolicited fds sent by a client are dropped by
 * the kernel: the pipes are not ipc pipes, so libuv reads with read(2).
 * Accepting is done here (uv_poll on the listening fd), not by uv_listen,
 * so that EMFILE is handled with a spare fd and, when even that cannot
 * shed the backlog, by pausing accept for a moment: never a busy loop.
 */
#ifndef FLYD_SERVER_H
#define FLYD_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "reply.h"

#define FLYD_FRAMES_PER_READ 16
#define FLYD_FD_RESERVE 64
/* Connections past max_clients kept for admin peers (uid 0 and the
 * daemon's own uid), as PostgreSQL's superuser_reserved_connections
 * (issue 18: root's `status` was refused at max_clients). */
#define FLYD_ADMIN_RESERVE 4
/* Refused connections kept open (their error frame sent, our side shut
 * down) for FLYD_LINGER_MS, so a client that writes its hello first still
 * reads "max_clients" instead of EPIPE; more than this are closed at once. */
#define FLYD_LINGER_MAX 16
#define FLYD_LINGER_MS 1000

/* Listen on @p ctx->socket_path (or on the socket-activated @p listen_fd
 * when >= 0), after flyd_server_precheck passed.  Every request of every
 * session goes to @p dispatch (called with @p arg): the session layer
 * knows no handler by name.  A stale socket file is
 * removed only when nothing answers on it; another live daemon on the
 * path refuses the start (-EADDRINUSE).  The socket is chmod 0660.
 * @return 0 or -errno. */
int flyd_server_start(struct flyd_ctx *ctx, int listen_fd,
		      flyd_dispatch_fn dispatch, void *arg);

/* Give the session layer the decide fast path (reply.h flyd_fast_fn;
 * NULL: every request is parsed and dispatched).  After
 * flyd_server_start(). */
void flyd_server_set_fast(struct flyd_ctx *ctx, flyd_fast_fn fast,
			  void *arg);

/* Before anything is opened there (none with a socket-activated
 * @p listen_fd >= 0): the socket's directory is created 0755 where
 * missing and must not be writable by group or others (-EPERM), logged.
 * @return 0 or -errno. */
int flyd_server_precheck(struct flyd_ctx *ctx, int listen_fd);
/* Create directory @p dir (one level, 0755) where missing, and refuse it
 * when group or others may write it, sticky or not.  Used for the socket's
 * directory and for --state-dir.
 * @return 0, -EPERM (writable by group or others) or -errno. */
int flyd_server_dir_check(const char *dir);
/* Stop accepting (SIGTERM): the listener is closed, sessions stay. */
void flyd_server_stop_accepting(struct flyd_ctx *ctx);
/* Close every session and the listener; @p done runs when all handles are
 * closed.  The socket file is unlinked (not when socket-activated). */
void flyd_server_stop(struct flyd_ctx *ctx, void (*done)(void *), void *arg);
/* cfg changed: recompute the client limit and timeouts. */
void flyd_server_reconfigure(struct flyd_ctx *ctx);
/* Sessions open now. */
uint32_t flyd_server_connections(const struct flyd_ctx *ctx);
/* The effective client limit (admin peers get FLYD_ADMIN_RESERVE more). */
uint32_t flyd_server_max_clients(const struct flyd_ctx *ctx);

#endif /* FLYD_SERVER_H */
