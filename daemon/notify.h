/*
 * notify.h -- the systemd side: sd_notify (READY/STATUS/WATCHDOG/
 * RELOADING/STOPPING) spoken directly over $NOTIFY_SOCKET (a path or an
 * abstract "@name" socket; no libsystemd), the watchdog timer, and socket
 * activation ($LISTEN_FDS/$LISTEN_PID, fd 3).
 *
 * Owns: the notify socket address and the watchdog timer.
 * Thread: loop thread.
 * flyd_notify_init() unsets NOTIFY_SOCKET, WATCHDOG_* and LISTEN_* so the
 * worker child can neither notify nor inherit the listener's identity.
 */
#ifndef FLYD_NOTIFY_H
#define FLYD_NOTIFY_H

#include <uv.h>

/* Read and unset the environment.  Call first thing in the daemon.
 * @return the socket-activated listener fd (3) or -1 when not activated;
 * more than one passed fd is refused (-EINVAL). */
int flyd_notify_init(void);
/* Send one datagram, e.g. "STATUS=ready".  No-op without NOTIFY_SOCKET.
 * @return 0, or -errno. */
int flyd_notify_send(const char *msg);
/* Start the watchdog timer: WATCHDOG=1 every $WATCHDOG_USEC / 2 when
 * @p ok(@p arg) says the daemon is healthy (main.c: the worker healthy and
 * flyd_store_ping() == 0; it logs a skip).  No-op when systemd asked for
 * none. */
int flyd_notify_watchdog_start(uv_loop_t *loop, int (*ok)(void *arg),
			       void *arg);
void flyd_notify_watchdog_stop(void);
/* "RELOADING=1" with MONOTONIC_USEC (main.c sends READY=1 and the status
 * again once reloaded). */
void flyd_notify_reloading(void);
/* "STOPPING=1". */
void flyd_notify_stopping(void);

#endif /* FLYD_NOTIFY_H */
