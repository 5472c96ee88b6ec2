/*
 * notify.c -- sd_notify, watchdog and socket activation (see notify.h).
 *
 * Owns: the notify address (process global, read once at start) and the
 * watchdog timer.  Thread: loop thread.
 * Calls nothing of the daemon but the log: what to say and when (READY,
 * STATUS, health) is main.c's.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "notify.h"

static struct sockaddr_un notify_addr;
static socklen_t notify_len;
static uint64_t watchdog_usec;
static uv_timer_t watchdog_timer;
static int watchdog_on;
static int (*watchdog_ok)(void *arg);

int flyd_notify_init(void)
{
	const char *ns = getenv("NOTIFY_SOCKET");
	const char *wu = getenv("WATCHDOG_USEC");
	const char *wp = getenv("WATCHDOG_PID");
	const char *lf = getenv("LISTEN_FDS");
	const char *lp = getenv("LISTEN_PID");
	int fd = -1;

	if (ns != NULL && (ns[0] == '/' || ns[0] == '@') &&
	    strlen(ns) < sizeof(notify_addr.sun_path)) {
		size_t n = strlen(ns);

		memset(&notify_addr, 0, sizeof(notify_addr));
		notify_addr.sun_family = AF_UNIX;
		memcpy(notify_addr.sun_path, ns, n);
		if (ns[0] == '@')
			notify_addr.sun_path[0] = '\0'; /* abstract */
		notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
					 n + (ns[0] == '/'));
	}
	if (wu != NULL && (wp == NULL || atol(wp) == (long)getpid()))
		watchdog_usec = strtoull(wu, NULL, 10);
	if (lf != NULL && lp != NULL && atol(lp) == (long)getpid()) {
		long n = atol(lf);

		fd = n == 1 ? 3 : n > 1 ? -EINVAL : -1;
	}
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDNAMES");
	return fd;
}

/* Messages dropped because the notify socket's queue was full. */
static unsigned long notify_dropped;

int flyd_notify_send(const char *msg)
{
	int fd, rc = 0;

	if (notify_len == 0)
		return 0;
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Never wait on the receiver: a full queue (net.unix.max_dgram_qlen,
	 * 10 by default, of a reader that does not read) blocked this loop
	 * thread in sendto, so no client was answered. */
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT,
		   (struct sockaddr *)&notify_addr, notify_len) < 0) {
		rc = -errno;
		if (rc == -EAGAIN || rc == -EWOULDBLOCK) {
			/* logged at the 1st, 2nd, 4th, 8th, ... drop */
			notify_dropped++;
			if ((notify_dropped & (notify_dropped - 1)) == 0)
				flyd_log(FLYD_LOG_WARN, "notify_dropped",
					 "n=%lu msg=%.20s", notify_dropped,
					 msg);
		} else {
			flyd_log(FLYD_LOG_WARN, "notify_error", "err=%s",
				 strerror(errno));
		}
	}
	close(fd);
	return rc;
}

static void on_watchdog(uv_timer_t *t)
{
	if (watchdog_ok(t->data))
		flyd_notify_send("WATCHDOG=1");
}

int flyd_notify_watchdog_start(uv_loop_t *loop, int (*ok)(void *arg),
			       void *arg)
{
	uint64_t ms = watchdog_usec / 2000;

	if (watchdog_usec == 0 || watchdog_on)
		return 0;
	if (ms == 0)
		ms = 1;
	uv_timer_init(loop, &watchdog_timer);
	watchdog_timer.data = arg;
	watchdog_ok = ok;
	watchdog_on = 1;
	flyd_log(FLYD_LOG_INFO, "watchdog", "interval_ms=%llu",
		 (unsigned long long)ms);
	return uv_timer_start(&watchdog_timer, on_watchdog, ms, ms);
}

void flyd_notify_watchdog_stop(void)
{
	if (!watchdog_on)
		return;
	watchdog_on = 0;
	uv_close((uv_handle_t *)&watchdog_timer, NULL);
}

void flyd_notify_reloading(void)
{
	struct timespec ts;
	char msg[64];

	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
		 (unsigned long long)ts.tv_sec * 1000000ull +
		 (unsigned long long)ts.tv_nsec / 1000ull);
	flyd_notify_send(msg);
}

void flyd_notify_stopping(void)
{
	flyd_notify_send("STOPPING=1");
}
