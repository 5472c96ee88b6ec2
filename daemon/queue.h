/*
 * queue.h -- the tuning job queue: single-flight by key, capped, two
 * priority levels (explicit requests ahead of background ones), FIFO
 * within each level.
 *
 * Owns: its jobs (struct flyd_qjob), including the one running and the
 * keys whose job failed (so background decides do not re-queue them in a
 * loop).  Thread: loop thread only.  Pure data structure: no I/O, no
 * store, no libuv; scheduler.c persists and drives it.
 *
 * Invariant: a key has at most one job record at any time, in exactly one
 * state; only QUEUED jobs count against the cap; at most one job is
 * RUNNING.
 */
#ifndef FLYD_QUEUE_H
#define FLYD_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"
#include "table.h"

enum flyd_qstate {
	FLYD_Q_QUEUED = 0,  /* waiting in its priority list */
	FLYD_Q_RUNNING = 1, /* handed to the worker */
	FLYD_Q_FAILED = 2   /* gave up; blocks background re-queueing */
};

/* A job's single flight across the fleet (scheduler.c, docs/fleet.md):
 * set and read by the scheduler only. */
enum flyd_qfleet {
	FLYD_QF_NONE = 0,    /* not asked (fleet off or down: tuned at once) */
	FLYD_QF_ASKING = 1,  /* the fleet's lock asked for; answer pending */
	FLYD_QF_HELD = 2,    /* this node holds the key's lock: it tunes */
	FLYD_QF_WAITING = 3, /* another node holds it: parked until its
				winner arrives or not_before_ms passes */
	FLYD_QF_LOCAL = 4    /* tunes without the lock (waited in vain, or
				the fleet went down while asking) */
};

#define FLYD_PRIO_BACKGROUND 0
#define FLYD_PRIO_EXPLICIT 1

struct flyd_qjob {
	char key[FLY_KEY_MAX];    /* canonical bucketed key */
	int priority;             /* FLYD_PRIO_* */
	int exact;                /* an exact-shape key (issue 22): in the
				     background level, started after every
				     bucket key that may start */
	int force;                /* re-tune even if tuned */
	int state;                /* enum flyd_qstate */
	int persisted;            /* a jobs-table row exists */
	uint32_t faults;          /* worker deaths while running this job */
	int cancelled;            /* forgotten while RUNNING: drop its end */
	int rerun;                /* cancelled, then asked again: queued at
				     the front once its end is dropped */
	uint64_t not_before_ms;   /* QUEUED: not started before (backoff,
				     or the end of a fleet wait) */
	int fleet;                /* enum flyd_qfleet */
	int fleet_freed;          /* asking again: the lock it was parked on
				     was let go (scheduler.c) */
	int64_t queued_at;        /* unix seconds */
	uint64_t started_ms;      /* uv_now when it started running */
	uint64_t asked_ns;        /* uv_hrtime of the first explicit request
				     queueing it (0: none): the budget's
				     reserve counts from there (reserve.h) */
	void *udata;              /* owner's data (results.c: waiters) */
	struct flyd_tnode node;   /* in the queue's table by key */
	struct flyd_qjob *prev;   /* priority list links */
	struct flyd_qjob *next;
};

struct flyd_queue;

/* Create a queue holding at most @p cap QUEUED jobs (0: unlimited).
 * @return 0 or -ENOMEM. */
int flyd_queue_new(uint32_t cap, struct flyd_queue **out);
/* Free every job (udata is not touched: release it first).  NULL: no-op. */
void flyd_queue_free(struct flyd_queue *q);
void flyd_queue_set_cap(struct flyd_queue *q, uint32_t cap);
uint32_t flyd_queue_cap(const struct flyd_queue *q);

/* Queue a job for @p key (single-flight).
 * - no record, or a FAILED one revived by an explicit push: a new QUEUED
 *   job at the tail of its level; returns 0.
 * - already QUEUED or RUNNING: nothing new; a QUEUED background job is
 *   promoted to the tail of the explicit level when @p priority is
 *   explicit; force is OR-ed in; returns 1.
 * - FAILED and a push without @p force: returns 2 (not queued); a job
 *   given up on runs again only when forced (issue 18).
 * @param[out] out (may be NULL) the job record, borrowed; valid until
 *   flyd_queue_done() / flyd_queue_free().
 * @return 0, 1, 2, FLY_E_BUSY (cap reached, nothing changed), -ENOMEM,
 *   FLY_E_KEYLEN. */
int flyd_queue_push(struct flyd_queue *q, const char *key, int priority,
		    int force, struct flyd_qjob **out);
/* The job record of a key in any state, or NULL.  Borrowed. */
struct flyd_qjob *flyd_queue_find(const struct flyd_queue *q,
				  const char *key);
/* The next QUEUED job: head of the explicit level, else head of the
 * background level (only when @p allow_background), or NULL.  Borrowed. */
struct flyd_qjob *flyd_queue_peek(const struct flyd_queue *q,
				  int allow_background);
/* As flyd_queue_peek, skipping jobs whose not_before_ms is after
 * @p now_ms (a faulted job's backoff). */
struct flyd_qjob *flyd_queue_peek_at(const struct flyd_queue *q,
				     int allow_background, uint64_t now_ms);
/* Mark a QUEUED job RUNNING (removed from its list). */
void flyd_queue_start(struct flyd_queue *q, struct flyd_qjob *j);
/* Put a RUNNING job back at the head of its level (after a worker death;
 * never refused by the cap). */
void flyd_queue_requeue_front(struct flyd_queue *q, struct flyd_qjob *j);
/* Put a RUNNING job back at the tail of its level, not to start before
 * @p not_before_ms (after a fault: the others go first). */
void flyd_queue_requeue_back(struct flyd_queue *q, struct flyd_qjob *j,
			     uint64_t not_before_ms);
/* Mark a job FAILED (kept as a marker; udata cleared by the caller). */
void flyd_queue_fail(struct flyd_queue *q, struct flyd_qjob *j);
/* Remove and free a job record in any state. */
void flyd_queue_done(struct flyd_queue *q, struct flyd_qjob *j);
/* Forget FAILED markers (NULL key: all) so the keys may be queued again. */
void flyd_queue_clear_failed(struct flyd_queue *q, const char *key);

/* The RUNNING job or NULL. */
struct flyd_qjob *flyd_queue_running(const struct flyd_queue *q);
/* Number of QUEUED jobs (both levels). */
uint32_t flyd_queue_len(const struct flyd_queue *q);
/* Call @p cb for each QUEUED job in run order (explicit level first). */
void flyd_queue_foreach(struct flyd_queue *q,
			void (*cb)(void *arg, struct flyd_qjob *j), void *arg);

/* Call @p cb for every record, any state, in no particular order (the
 * callback must not add or remove records). */
void flyd_queue_foreach_record(struct flyd_queue *q,
			       void (*cb)(void *arg, struct flyd_qjob *j),
			       void *arg);

#endif /* FLYD_QUEUE_H */
