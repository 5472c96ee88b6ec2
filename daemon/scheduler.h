/*
 * scheduler.h -- the tuning job stream: the queue and its policy, the
 * benchmark budget, the worker and what its READY and results mean.
 *
 * Owns: struct flyd_sched (the queue, the worker supervisor, two timers,
 * the busy spans of the last minute, the job being built for the worker).
 * Thread: loop thread only.
 * A job's row stays in the store's jobs table until its winner is
 * committed (results.h), so a restart resumes it.
 * Calls: queue, worker, registry, store and the results (commit, waiters);
 * never a handler.  Readiness goes up through the callback main.c gives
 * flyd_sched_start().
 */
#ifndef FLYD_SCHEDULER_H
#define FLYD_SCHEDULER_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "daemon.h"
#include "queue.h"
#include "results.h"

struct flyd_sched;

/* Start the worker; results are committed into @p res (borrowed, must
 * outlive the scheduler).  On the worker's first READY the device is
 * identified (ctx->backend, fingerprint, device_id, libver), @p res is
 * loaded, queued jobs of an earlier run resume, then @p on_ready(@p arg)
 * runs once.  @return 0 or an error (the worker could not start). */
int flyd_sched_start(struct flyd_ctx *ctx, struct flyd_results *res,
		     void (*on_ready)(void *arg), void *arg,
		     struct flyd_sched **out);
/* Stop: the job in flight is left in the jobs table (resumed at start),
 * the worker killed, handles closed; the scheduler frees itself and then
 * @p done runs.  Requests see it stopped (is_running() 0) at once. */
void flyd_sched_stop(struct flyd_sched *sc, void (*done)(void *), void *arg);
/* Config reloaded (SIGHUP): queue cap, policy. */
void flyd_sched_reconfigure(struct flyd_sched *sc);
/* Whether jobs are accepted (started, not stopping).  NULL: 0. */
int flyd_sched_is_running(const struct flyd_sched *sc);
/* Health for the watchdog and `status`: running, worker healthy. */
int flyd_sched_is_healthy(const struct flyd_sched *sc);
/* 1 when the last two or more worker starts in a row could not open the
 * device and none is up with it open now (a GPU lost: RELIABILITY.md
 * F11; a crash storm in the kernels is not that); 0 otherwise. */
int flyd_sched_device_lost(const struct flyd_sched *sc);
/* Whether the instance is degraded: marked so (ctx->degraded), the worker
 * unhealthy (or no scheduler yet), or the DB quarantined at open.  The one
 * test behind STATUS=, `status`'s state and flytuned_degraded. */
int flyd_ctx_degraded(const struct flyd_ctx *ctx);
/* Fill `status`'s "queue", "worker" and "policy". */
void flyd_sched_status(const struct flyd_sched *sc, cJSON *resp);

/* The scheduler's gauges for metrics.c (all 0 when stopped). */
struct flyd_sched_gauges {
	uint32_t queued;      /* jobs waiting */
	uint32_t running;     /* 0 or 1 */
	uint32_t cap;         /* queue cap */
	int restarts;         /* worker restarts since start */
	int healthy;          /* worker healthy */
	uint32_t fleet_waiting; /* queued jobs parked on another node's lock */
};
void flyd_sched_gauges(const struct flyd_sched *sc,
		       struct flyd_sched_gauges *g);

/* A decide or tune arrived: the idle policy counts from now. */
void flyd_sched_note_request(struct flyd_sched *sc);
/* Queue a job for @p key (persisted; a forced tune of a failed key drops
 * its failed record).  @return as flyd_queue_push(): 0 queued, 1 already
 * there, 2 failed before, FLY_E_BUSY (counted), FLY_E_KEYLEN, -ENOMEM. */
int flyd_sched_enqueue(struct flyd_sched *sc, const char *key, int prio,
		       int force, struct flyd_qjob **out);
/* Run the scheduler soon (after an enqueue). */
void flyd_sched_kick(struct flyd_sched *sc);
/* The job queue, for `jobs`, `list --status` and lookups (borrowed; NULL
 * when not running). */
struct flyd_queue *flyd_sched_queue(const struct flyd_sched *sc);

/* Cancel @p key's job: a queued job is removed; a running one is
 * abandoned (the worker's result for it is dropped, it is not retried).
 * Its waiters are answered not_found ("cancelled"), its jobs-table row is
 * deleted, and a FAILED marker is cleared.
 * @param[out] was "queued", "running" or "failed".
 * @return 0, FLY_E_NOTFOUND (no job for the key), FLY_E_DOWN. */
int flyd_sched_cancel(struct flyd_sched *sc, const char *key,
		      const char **was);
/* After a forget of @p key (NULL: all) in the store: drop it from the
 * results, clear its failed marker and record, cancel its job, bump the
 * shm generation. */
void flyd_sched_forget(struct flyd_sched *sc, const char *key);
/* Check a result to import (its canonical @p key, variant and params)
 * against the worker's kernel registry (registry.h): the variant exists for
 * the key's op and supports it, the params are in its space and, where the
 * daemon holds the backend's table (cpu), feasible for the key and its
 * bucket's floor.
 * @param[out] why  what is wrong (@p cap bytes).
 * @return 0, FLY_E_INVALID, FLY_E_GPU (no registry yet: worker not READY). */
int flyd_sched_check_result(const struct flyd_sched *sc, const char *key,
			    const struct fly_decision *d, char *why,
			    size_t cap);

/* Single flight across the fleet (issue 24, docs/fleet.md): before a
 * job of a key runs, the fleet's lock of (device id, libver, key) is
 * asked for.  Taken: the job runs, and the lock is given back once its
 * winner is in the fleet DB.  Held by another node: the job is parked
 * (jobs and explain show it; the key is answered with what the daemon
 * has) until that node's winner arrives (the job is then adopted), that
 * node lets the lock go without a winner (it died: the job asks again,
 * FLYD_SF_FREE), or fleet_wait_ms passes (then it runs without the
 * lock).  A forced job, fleet_wait_ms 0, or no fleet to ask (off, down,
 * connecting past 2 s): the job runs at once, as without a fleet.
 *
 * The fleet implements the hooks and main.c sets them: the fleet calls
 * the scheduler (flyd_sched_fleet_answer()), never the other way round
 * except through these. */
struct flyd_sched_fleet {
	/* Ask for @p key's lock.  @return 0: nothing to ask (run at once);
	 * 1: asked, the answer comes by flyd_sched_fleet_answer(); 2: this
	 * node holds it already (run). */
	int (*claim)(void *arg, const char *key);
	/* Give @p key's lock back: once its winner is in the fleet DB when
	 * @p won, else at once; or, when the job was parked on another
	 * node's lock, stop watching that lock. */
	void (*release)(void *arg, const char *key, int won);
	void *arg;
};
/* Set the hooks (copied); NULL: none (every job runs at once). */
void flyd_sched_set_fleet(struct flyd_sched *sc,
			  const struct flyd_sched_fleet *fl);

enum flyd_sched_fleet_answer {
	FLYD_SF_GOT = 0,    /* the lock is this node's: the job runs */
	FLYD_SF_BUSY = 1,   /* another node holds it: the job is parked */
	FLYD_SF_DOWN = 2,   /* no answer (the connection failed): it runs */
	FLYD_SF_HAD = 3,    /* the fleet had a winner (now served): adopted */
	FLYD_SF_WINNER = 4, /* a fleet winner of the key was applied (NOTIFY,
			       pull): a parked job is adopted */
	FLYD_SF_FREE = 5    /* the lock a parked job waits on was let go
			       without a winner (its holder died or lost
			       its connection): the job asks again */
};
/* The fleet's answer about @p key (enum flyd_sched_fleet_answer); every
 * answer but WINNER and FREE ends the claim in flight.  NULL or stopped:
 * no-op. */
void flyd_sched_fleet_answer(struct flyd_sched *sc, const char *key,
			     int answer);

#endif /* FLYD_SCHEDULER_H */
