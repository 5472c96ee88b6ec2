/*
 * fleet.h -- the fleet: winners shared by many machines through one
 * PostgreSQL DB (fleet_url; docs/fleet.md, issue 24).
 *
 * Owns: the libpq connection, driven without blocking by libuv (uv_poll
 * on PQsocket, PQconnectStart/PQsendQuery*), its retry timer, and the
 * fleet's counters.  Thread: loop thread only.
 *
 * Sync: on connect the fleet DB is migrated (tuning-db/fleet/, under an
 * advisory lock), LISTEN flytuned_fleet is issued and, once the device is
 * identified, every fleet row of this (device id, libver) is pulled into
 * the local DB and the shm table.  Each local commit also writes an
 * outbox row (store.h) in its transaction; the outbox is pushed with
 * fleet_push() (the merge rule runs in the fleet DB, under the row's
 * lock, so every node converges on one winner) and a row is deleted only
 * once the fleet DB has committed it.  Other nodes' winners arrive by
 * NOTIFY.  Every fleet row is validated like an import (fly_record_check,
 * then the kernel registry and feasibility) before it is served.
 *
 * Single flight (scheduler.h): before a job runs, the scheduler claims
 * the key's session-level advisory lock, pg_try_advisory_lock(id), id =
 * the first 64 bits of md5(device id || '\n' || libver || '\n' || key)
 * (computed by PostgreSQL: FLYD_FLEET_LOCK_ID).  The lock is given back
 * after the winner's push (or at once when the job ends without one);
 * a node that dies loses its locks with its connection.
 *
 * Off (fleet_url "") none of this exists: flyd_fleet_start() gives NULL
 * and every other call takes NULL as a no-op.
 */
#ifndef FLYD_FLEET_H
#define FLYD_FLEET_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "daemon.h"

struct flyd_fleet;

/* Start connecting when ctx->cfg.fleet_url is set (else *out = NULL) and
 * turn the store's outbox on.  A fleet DB that cannot be reached is
 * retried every fleet_retry_ms; the daemon serves locally meanwhile.
 * @return 0 or -ENOMEM. */
int flyd_fleet_start(struct flyd_ctx *ctx, struct flyd_fleet **out);
/* The device is identified (first READY): pull this device's rows. */
void flyd_fleet_ready(struct flyd_fleet *f);
/* A local winner was committed (its outbox row is durable): push it. */
void flyd_fleet_kick(void *f);
/* The lock id of (device, libver, key) as SQL over three text values
 * (psql, tests: "SELECT pg_advisory_lock(" FLYD_FLEET_LOCK_ID("'dev'",
 * "'lib'", "'key'") ")"). */
#define FLYD_FLEET_LOCK_ID(dev, lib, key)                                    \
	"('x' || substr(md5(" dev " || chr(10) || " lib " || chr(10) || " key \
	"), 1, 16))::bit(64)::bigint"
/* The scheduler's claim hook (struct flyd_sched_fleet, @p f a struct
 * flyd_fleet *): ask for @p key's lock.  @return 0 (down, or still
 * connecting 2 s after the attempt began: no single flight), 1 (asked:
 * flyd_sched_fleet_answer() follows; while connecting or syncing, after
 * the pull), 2 (this node holds it already). */
int flyd_fleet_claim(void *f, const char *key);
/* The scheduler's release hook: give @p key's lock back, after its
 * winner's push when @p won; a parked job's: stop watching the lock it
 * waited on.  Neither: no-op. */
void flyd_fleet_release(void *f, const char *key, int won);
/* Close the connection and the handles, then free @p f (asynchronously,
 * on the loop).  NULL: no-op. */
void flyd_fleet_stop(struct flyd_fleet *f);

struct flyd_fleet_gauges {
	int enabled;           /* fleet_url set */
	int connected;         /* migrated and listening */
	int64_t outbox;        /* pushes not yet in the fleet DB */
	double lag_s;          /* age of the oldest queued push (0: none) */
	uint64_t pushed;       /* measurements the fleet DB committed */
	uint64_t applied;      /* fleet winners applied locally */
	uint64_t refused;      /* fleet rows refused by validation */
	uint64_t errors;       /* connection or query failures */
	/* Single flight (the scheduler's counters, stats.h). */
	uint64_t locked;       /* jobs that ran holding the key's lock */
	uint64_t waits;        /* jobs parked on another node's lock */
	uint64_t satisfied;    /* ... that adopted the fleet's winner */
	uint64_t wait_timeouts; /* ... that tuned locally after fleet_wait_ms */
	uint64_t holders_lost; /* ... whose holder let the lock go without a
				  winner (died): asked again */
	uint32_t waiting;      /* jobs parked now */
};
/* @p f may be NULL (all zero). */
void flyd_fleet_gauges(const struct flyd_fleet *f,
		       struct flyd_fleet_gauges *g);
/* "off", "connecting", "syncing" (pull or migration under way),
 * "connected", "down" (waiting to retry). */
const char *flyd_fleet_state(const struct flyd_fleet *f);
/* The last error text ("" when none); never NULL. */
const char *flyd_fleet_last_error(const struct flyd_fleet *f);
/* Add the "fleet" object of `status` / `fleet` to @p resp. */
void flyd_fleet_status(const struct flyd_fleet *f, cJSON *resp);

#endif /* FLYD_FLEET_H */
