/*
 * results.h -- the tuned results as the daemon serves them: the in-memory
 * map (decide.h), the FULL commit of a job's winner, the shm publication
 * (publish.h), and the `tune wait` waiters of each job.
 *
 * Owns: struct flyd_results (the map, the shm writer, the backend table
 * used for defaults, the waiters and their timers).
 * Thread: loop thread only.
 * Invariant: the order on a committed winner is commit (synchronous=FULL),
 * then the map and the shm table, then the waiters; nothing is reported
 * `tuned` to anyone (socket or shm) that is not durable.
 * Calls: decide, publish, store, and the reply handles its waiters hold
 * (reply.h); never the scheduler or a handler.
 */
#ifndef FLYD_RESULTS_H
#define FLYD_RESULTS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "daemon.h"
#include "job.h"
#include "queue.h"
#include "reply.h"

struct flyd_results;
struct flyk_backend;

/* Create the map and the sealed shm table (capacity cfg.shm_capacity),
 * the defaults' backend table from cfg.backend.
 * @return 0, -ENOMEM, -errno (the shm table). */
int flyd_results_open(struct flyd_ctx *ctx, struct flyd_results **out);
/* Stop: answer every waiter "down" (daemon stopping), close their timers;
 * @p done runs once they are closed.  The map and the table stay until
 * flyd_results_free(). */
void flyd_results_stop(struct flyd_results *res, void (*done)(void *),
		       void *arg);
/* NULL: no-op. */
void flyd_results_free(struct flyd_results *res);

/* The device is identified (ctx->device_id, ctx->libver; first READY):
 * take the defaults' table of @p backend, fill the map and the shm table
 * from the store, and from now on look keys up in the store too. */
void flyd_results_load(struct flyd_results *res, const char *backend);
/* Re-read map and table from the store (an import, a new system DB) and
 * bump the generation; no-op before flyd_results_load() or once stopping. */
void flyd_results_refill(struct flyd_results *res);
/* @p n rows were just committed by an import (each now the stored row
 * of its key on this device and libver): put them in the map and the
 * shm table, then bump the generation once -- only the rows the request
 * changed (issue 19: a refill re-published every stored row per import,
 * 3M puts for 1M keys imported in five files).  No-op before
 * flyd_results_load() (the load reads them) or once stopping. */
void flyd_results_imported(struct flyd_results *res,
			   const struct flyd_result *rows, size_t n);
size_t flyd_results_count(const struct flyd_results *res);

/* The tuned decision of @p key: the map, else (when @p check_db and the
 * results are loaded) the store, where another instance on an identical
 * device may have committed it (then published here too).
 * @return borrowed, valid until the next call into this module; NULL. */
const struct fly_decision *flyd_results_lookup(struct flyd_results *res,
					       const char *key, int check_db);
/* The backend's default for @p p (flyd_decide_default).
 * @return 0 or -EOPNOTSUPP (the backend does not support @p p). */
int flyd_results_default(const struct flyd_results *res,
			 const struct fly_problem *p, struct fly_decision *d);
/* The best non-tuned answer for @p key: the nearest tuned neighbour, else
 * the default; status pending when @p queued, else default.
 * @return as flyd_results_default(). */
int flyd_results_provisional(struct flyd_results *res, const char *key,
			     const struct fly_problem *p, int queued,
			     struct fly_decision *d);
/* The defaults' backend table (NULL: unknown, a GPU backend). */
const struct flyk_backend *flyd_results_backend(const struct flyd_results *res);

/* Commit job @p j's winner @p r (FULL), then map and shm (a replaced
 * winner bumps the generation), then answer its waiters.  On a failed
 * commit the waiters get FLY_E_STORAGE.  @return 0 or FLY_E_STORAGE. */
int flyd_results_commit(struct flyd_results *res, struct flyd_qjob *j,
			const struct flyd_tune_result *r);
/* Call @p cb(@p arg) after every durable commit of a job's winner (the
 * fleet's push; NULL: none).  A hook, so results never calls the fleet. */
void flyd_results_on_commit(struct flyd_results *res, void (*cb)(void *),
			    void *arg);
/* Commit other nodes' winners @p rs (already validated) as one import
 * (one FULL transaction), then the map and the shm table (a replaced
 * winner bumps the generation).
 * @return 0, -EAGAIN (not loaded yet), FLY_E_STORAGE. */
int flyd_results_adopt(struct flyd_results *res, const struct flyd_result *rs,
		       size_t n);
/* Answer job @p j's waiters with @p d (tuned), or with an error. */
void flyd_results_answer(struct flyd_results *res, struct flyd_qjob *j,
			 const struct fly_decision *d);
void flyd_results_answer_error(struct flyd_results *res, struct flyd_qjob *j,
			       int code, const char *msg);
/* Defer the reply of request @p rq (a `tune wait`) until job @p j ends or
 * @p timeout_ms passes (then it is answered with what is known: tuned,
 * else pending with the provisional decision).  j->udata holds the job's
 * waiters.  @return 0 or -ENOMEM. */
int flyd_results_wait(struct flyd_results *res, struct flyd_req *rq,
		      struct flyd_qjob *j, int64_t timeout_ms);

/* Drop @p key (NULL: every key) from the map and the shm table. */
void flyd_results_forget(struct flyd_results *res, const char *key);
/* Bump the shm generation. */
void flyd_results_bump(struct flyd_results *res);

/* The memfd to hand to clients in `hello` (borrowed; -1: none), its size
 * and capacity (0 when none).  @p res may be NULL. */
int flyd_results_shm_fd(const struct flyd_results *res);
size_t flyd_results_shm_size(const struct flyd_results *res);
uint32_t flyd_results_shm_capacity(const struct flyd_results *res);
/* Fill `status`'s "shm" object (count, capacity, generation). */
void flyd_results_status(const struct flyd_results *res, cJSON *resp);

/* The results' gauges for metrics.c (all 0 when @p res is NULL). */
struct flyd_results_gauges {
	size_t results;           /* tuned keys in the map */
	uint32_t shm_used;        /* shm slots holding an entry */
	uint32_t shm_capacity;    /* shm slots */
	uint64_t shm_generation;  /* the table's generation */
	size_t shm_bytes;         /* the mapping's size */
};
void flyd_results_gauges(const struct flyd_results *res,
			 struct flyd_results_gauges *g);

#endif /* FLYD_RESULTS_H */
