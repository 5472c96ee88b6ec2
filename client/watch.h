/*
 * watch.h -- libflyclient's connection watcher: one thread per client
 * that learns when the daemon's end of the client's connection hangs up
 * (issue 21, RELIABILITY.md F19), whatever the client's call rate.
 *
 * Owns: its thread, an eventfd that wakes it, and its own duplicate of
 * the watched connection (so it never polls a number its client may
 * have closed and reused).  The client keeps its socket; the watcher
 * only ever polls its copy for POLLRDHUP/POLLHUP/POLLERR, never POLLIN,
 * so it consumes no byte of any reply.
 * Thread: fly__watch_set and fly__watch_fini from the client's threads
 * (serialized by the caller: client.c holds its c->mu, or is closing);
 * the callback runs on the watcher thread with no lock of this module
 * held.  fly__watch_lock/unlock bracket fork (atfork prepare/parent),
 * fly__watch_forked resets the state in the child.
 * Invariant: every fd of the state (cur_fd, next_fd, efd) is closed by
 * exactly one party -- the thread for cur_fd and an adopted next_fd,
 * the setter for a next_fd never adopted, fini for efd, and in a fork
 * child the reset for all three --, always under mu, so a fork never
 * copies a number that is being closed.
 */
#ifndef FLY_CLIENT_WATCH_H
#define FLY_CLIENT_WATCH_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

/* Called on the watcher thread when the connection handed over with
 * @p tag hung up (once per hand-over; the watcher then watches nothing
 * until the next one). */
typedef void (*fly_watch_hup_fn)(void *arg, uint64_t tag);

struct fly_watch {
	pthread_mutex_t mu;   /* guards every field below */
	pthread_t tid;        /* valid while running */
	int running;          /* a thread of this process was started */
	pid_t pid;            /* the process that started it */
	int stop;             /* fini asked the thread to end */
	int efd;              /* eventfd waking the thread, or -1 */
	int cur_fd;           /* the thread's duplicate being polled, or -1 */
	uint64_t cur_tag;     /* its tag */
	int pending;          /* a hand-over waits in next_fd/next_tag */
	int next_fd;          /* handed over, not adopted yet, or -1 */
	uint64_t next_tag;    /* its tag */
	fly_watch_hup_fn hup; /* the client's callback */
	void *arg;            /* its argument */
};

/* An idle watcher in caller storage: no thread, no fd until the first
 * fly__watch_set with a connection.  @return 0 or -errno. */
int fly__watch_init(struct fly_watch *w, fly_watch_hup_fn hup, void *arg);
/* Stop and join the thread (when this process started one), close every
 * fd.  Never waits on the connection. */
void fly__watch_fini(struct fly_watch *w);

/* Start the thread now (all signals blocked in it), watching nothing
 * yet; a no-op when this process's thread runs.  fly_client_open starts
 * it, so a client's first decide does not pay for it (bench_client,
 * fresh client).  @return 0 or -errno (then fly__watch_set tries again). */
int fly__watch_start(struct fly_watch *w);

/* Watch @p fd (a connected socket; the watcher polls its own duplicate)
 * under @p tag from now on, instead of what it watched; -1: nothing.
 * Starts the thread when it does not run (a fork child's first
 * connection, or a start that failed).
 * @return 0; -errno when the connection cannot be watched (no fd left,
 * no thread): the client then works as before, unwatched. */
int fly__watch_set(struct fly_watch *w, int fd, uint64_t tag);

/* Bracket fork(): prepare takes mu, parent releases it. */
void fly__watch_lock(struct fly_watch *w);
void fly__watch_unlock(struct fly_watch *w);
/* In a fork child (single-threaded, mu as fly__watch_lock left it, or
 * held by a thread that no longer exists): close the inherited fds
 * without a byte sent and forget the parent's thread; the child starts
 * its own on its next connection. */
void fly__watch_forked(struct fly_watch *w);

#endif /* FLY_CLIENT_WATCH_H */
