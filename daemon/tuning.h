/*
 * tuning.h -- the tuning path: decide, the tuning queue, the worker, the
 * DB commit and the shm publication, in that order.
 *
 * Thread: loop thread.
 * Invariant: a key is reported `tuned` to anyone (socket or shm) only
 * after its result was committed with synchronous=FULL.
 */
#ifndef FLYD_TUNING_H
#define FLYD_TUNING_H

#include <cjson/cJSON.h>

#include "daemon.h"
#include "reply.h"

/* Create the tuning state: shm table (capacity from cfg), fill it from the
 * DB once the worker reports its fingerprint, resume queued jobs, start
 * the worker.  @return 0 or an error. */
int flyd_tuning_start(struct flyd_ctx *ctx);
/* Stop: the job in flight is left in the jobs table (resumed at start),
 * the worker killed, handles closed; @p done runs when everything closed. */
void flyd_tuning_stop(struct flyd_ctx *ctx, void (*done)(void *), void *arg);
/* Config reloaded (SIGHUP): policy, caps, margins. */
void flyd_tuning_reconfigure(struct flyd_ctx *ctx);
/* The memfd to hand to clients in `hello` (borrowed; dup before sending),
 * its size and capacity. */
int flyd_tuning_shm_fd(const struct flyd_ctx *ctx);
size_t flyd_tuning_shm_size(const struct flyd_ctx *ctx);
uint32_t flyd_tuning_shm_capacity(const struct flyd_ctx *ctx);
/* Health for the watchdog and `status`: worker healthy and not degraded. */
int flyd_tuning_is_healthy(const struct flyd_ctx *ctx);
/* Fill `status`'s "queue" and "worker" objects. */
void flyd_tuning_status(const struct flyd_ctx *ctx, cJSON *resp);
/* Bump the shm generation and drop the given key (NULL: all) from the
 * table after a forget; re-publish after an import or a change of the
 * system DB. */
void flyd_tuning_forgotten(struct flyd_ctx *ctx, const char *key);
void flyd_tuning_imported(struct flyd_ctx *ctx);
/* Check a result to import (its canonical @p key, variant and params)
 * against the worker's kernel registry (registry.h): the variant exists for
 * the key's op and supports it, the params are in its space and, where the
 * daemon holds the backend's table (cpu), feasible for the key and its
 * bucket's floor.
 * @param[out] why  what is wrong (@p cap bytes).
 * @return 0, FLY_E_INVALID, FLY_E_GPU (no registry yet: worker not READY). */
int flyd_tuning_check_result(const struct flyd_ctx *ctx, const char *key,
			     const struct fly_decision *d, char *why,
			     size_t cap);

/* The job queue, for `jobs` and `list --status` (borrowed; NULL when
 * tuning is not running). */
struct flyd_queue *flyd_tuning_queue(const struct flyd_ctx *ctx);
/* Cancel @p key's job: a queued job is removed; a running one is
 * abandoned (the worker's result for it is dropped, it is not retried).
 * Its waiters are answered not_found ("cancelled"), its jobs-table row is
 * deleted, and a FAILED marker is cleared.
 * @param[out] was "queued", "running" or "failed".
 * @return 0, FLY_E_NOTFOUND (no job for the key), FLY_E_DOWN. */
int flyd_tuning_cancel(struct flyd_ctx *ctx, const char *key,
		       const char **was);

/* Request handlers (dispatched by handlers.c). */
int flyd_handle_decide(struct flyd_ctx *ctx, struct flyd_req *rq,
		       const cJSON *req, cJSON *resp, const char **msg);
int flyd_handle_tune(struct flyd_ctx *ctx, struct flyd_req *rq,
		     const cJSON *req, cJSON *resp, const char **msg);

#endif /* FLYD_TUNING_H */
