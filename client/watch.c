/*
 * watch.c -- the connection watcher of libflyclient (see watch.h).
 *
 * Owns: the watcher thread, its eventfd, its duplicate of the watched
 * connection.  Thread: the watcher's own, and its client's (serialized).
 * The thread sleeps in poll() with no timeout: no clock, no wake-up while
 * nothing happens, so an idle client costs nothing but the thread.
 * Invariant: the thread polls only an fd it owns (cur_fd), and a setter
 * hands a new one over through next_fd under mu and wakes it; so no fd
 * number the thread polls can be closed by anyone else and reused.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "watch.h"

/* The thread's stack: poll, close and the client's callback (a mutex and
 * a few atomics); room to spare for sanitizer builds. */
#define WATCH_STACK (256u * 1024u)
/* What says the peer is gone.  Never POLLIN: the watcher must not
 * consume (or even wait for) a reply meant for its client. */
#define WATCH_HUP (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Wake the thread (an eventfd counter cannot fill up at one write per
 * hand-over).  Caller holds w->mu. */
static void wake_locked(struct fly_watch *w)
{
	uint64_t one = 1;

	if (w->efd >= 0 && write(w->efd, &one, sizeof(one)) < 0) {
		/* EAGAIN only at a counter of 2^64-2: it is awake anyway */
	}
}

/* Take a pending hand-over: the fd polled so far is closed, the new one
 * (maybe -1) polled from now on.  Caller (the thread) holds w->mu. */
static void adopt_locked(struct fly_watch *w)
{
	if (!w->pending)
		return;
	close_fd(&w->cur_fd);
	w->cur_fd = w->next_fd;
	w->cur_tag = w->next_tag;
	w->next_fd = -1;
	w->pending = 0;
}

static void *watch_main(void *arg)
{
	struct fly_watch *w = arg;

	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		struct pollfd pf[2];
		uint64_t tag, cnt;
		int n;

		adopt_locked(w);
		pf[0] = (struct pollfd){ .fd = w->efd, .events = POLLIN };
		/* a negative fd is skipped by poll: then only wakes count */
		pf[1] = (struct pollfd){ .fd = w->cur_fd, .events = POLLRDHUP };
		tag = w->cur_tag;
		pthread_mutex_unlock(&w->mu);
		n = poll(pf, 2, -1);
		if (n > 0 && (pf[0].revents & POLLIN) &&
		    read(pf[0].fd, &cnt, sizeof(cnt)) < 0) {
			/* EAGAIN: another read took it; nothing to do */
		}
		pthread_mutex_lock(&w->mu);
		if (n > 0 && pf[1].fd >= 0 && (pf[1].revents & WATCH_HUP)) {
			/* only this thread replaces cur_fd: still pf[1].fd */
			close_fd(&w->cur_fd);
			pthread_mutex_unlock(&w->mu);
			w->hup(w->arg, tag);
			pthread_mutex_lock(&w->mu);
		}
	}
	adopt_locked(w);
	close_fd(&w->cur_fd);
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Start the thread with every signal blocked (the host's handlers never
 * run on it).  Caller holds w->mu.  @return 0 or -errno. */
static int start_locked(struct fly_watch *w)
{
	sigset_t all, old;
	pthread_attr_t at;
	int rc;

	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0)
		return -errno;
	rc = pthread_attr_init(&at);
	if (rc != 0)
		goto err_efd;
	pthread_attr_setstacksize(&at, WATCH_STACK + PTHREAD_STACK_MIN);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&w->tid, &at, watch_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
	if (rc != 0)
		goto err_efd;
	w->running = 1;
	w->pid = getpid();
	w->stop = 0;
	return 0;

err_efd:
	close_fd(&w->efd);
	return -rc;
}

int fly__watch_init(struct fly_watch *w, fly_watch_hup_fn hup, void *arg)
{
	int rc = pthread_mutex_init(&w->mu, NULL);

	if (rc != 0)
		return -rc;
	w->running = 0;
	w->pid = 0;
	w->stop = 0;
	w->efd = -1;
	w->cur_fd = -1;
	w->cur_tag = 0;
	w->pending = 0;
	w->next_fd = -1;
	w->next_tag = 0;
	w->hup = hup;
	w->arg = arg;
	return 0;
}

/* A watcher started by another process (a fork without the atfork
 * handler: a raw clone) is not ours: reset it.  running and pid are
 * written only by this module's callers' threads, never by the watcher,
 * so the caller's own serialization covers this unlocked read (and mu
 * may be held by a thread the child does not have). */
static void own_process(struct fly_watch *w)
{
	if (w->running && w->pid != getpid())
		fly__watch_forked(w);
}

void fly__watch_fini(struct fly_watch *w)
{
	own_process(w);
	pthread_mutex_lock(&w->mu);
	if (w->running) {
		w->stop = 1;
		wake_locked(w);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->tid, NULL);
		pthread_mutex_lock(&w->mu);
		w->running = 0;
	}
	close_fd(&w->next_fd);
	close_fd(&w->cur_fd);
	close_fd(&w->efd);
	pthread_mutex_unlock(&w->mu);
	pthread_mutex_destroy(&w->mu);
}

int fly__watch_start(struct fly_watch *w)
{
	int rc = 0;

	own_process(w);
	pthread_mutex_lock(&w->mu);
	if (!w->running)
		rc = start_locked(w);
	pthread_mutex_unlock(&w->mu);
	return rc;
}

int fly__watch_set(struct fly_watch *w, int fd, uint64_t tag)
{
	int dfd = -1, rc = 0;

	own_process(w);
	if (fd >= 0) {
		dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (dfd < 0)
			rc = -errno;
	}
	pthread_mutex_lock(&w->mu);
	if (!w->running && dfd >= 0) {
		rc = start_locked(w);
		if (rc < 0)
			close_fd(&dfd);
	}
	if (w->running) {
		close_fd(&w->next_fd); /* handed over and never adopted */
		w->next_fd = dfd;
		w->next_tag = tag;
		w->pending = 1;
		wake_locked(w);
	}
	pthread_mutex_unlock(&w->mu);
	return rc;
}

void fly__watch_lock(struct fly_watch *w)
{
	pthread_mutex_lock(&w->mu);
}

void fly__watch_unlock(struct fly_watch *w)
{
	pthread_mutex_unlock(&w->mu);
}

void fly__watch_forked(struct fly_watch *w)
{
	close_fd(&w->cur_fd);
	close_fd(&w->next_fd);
	close_fd(&w->efd);
	w->pending = 0;
	w->running = 0;
	w->pid = 0;
	w->stop = 0;
	pthread_mutex_init(&w->mu, NULL);
}
