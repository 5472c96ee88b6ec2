/*
 * worker.h -- the benchmark worker: a separate process that owns the
 * compute device, and its supervisor in the daemon.
 *
 * Thread: the supervisor runs on the loop thread.  The worker process is
 * `flytuned --worker` spawned with uv_spawn over a pipe (fd 3 in the
 * child); jobs go out by value, trial records and the result come back
 * as they happen, so a crash or hang mid-candidate names the candidate.
 *
 * Method (see docs/architecture.md "Tuning"): feasibility filter; previously
 * faulted candidates skipped; outputs NaN-poisoned and checked against the
 * reference; warm-ups; caches cleaned between reps by the backend; median
 * and MAD; early rejection (1.5x the best after 3 reps, 1.15x after 10);
 * successive halving; a job time budget; the winner must beat the
 * incumbent by the margin; near-ties (within the margin) between variants
 * resolve by the variants' declared order, within a variant by the
 * median.
 */
#ifndef FLYD_WORKER_H
#define FLYD_WORKER_H

#include <stdint.h>
#include <uv.h>

#include "fly_abi.h"
#include "job.h"

struct flyd_worker_opts {
	const char *exe;          /* path of the flytuned binary */
	int device;               /* device index */
	const char *backend;      /* "auto", "cpu", "cuda", "hip" */
	double cand_timeout_s;    /* hard timeout per candidate */
	double setup_timeout_s;   /* hard timeout on a job's case set-up
				     (before its first START); 0: the
				     larger of 10 x cand_timeout_s and 30 s */
	int max_restarts;         /* in 60 s before the GPU is "degraded" */
};

struct flyd_worker;

/* Called when a job ends (rc set), also when the worker died and the job
 * was abandoned (rc = -ECHILD, the faulted candidate among trials). */
typedef void (*flyd_job_done_cb)(void *ctx, const struct flyd_tune_result *r);
/* Called when the worker (re)starts with its backend and fingerprint. */
typedef void (*flyd_worker_ready_cb)(void *ctx, const char *backend,
				     const char *fingerprint);

int flyd_worker_start(uv_loop_t *loop, const struct flyd_worker_opts *o,
		      flyd_worker_ready_cb ready, flyd_job_done_cb done,
		      void *ctx, struct flyd_worker **out);
/* Submit one job (the worker runs one at a time).  @return 0, -EBUSY. */
int flyd_worker_submit(struct flyd_worker *w, const struct flyd_tune_job *j);
int flyd_worker_is_busy(const struct flyd_worker *w);
/* Abandon the job in flight (forget): a job on the child kills it, and
 * done() follows with rc -ECHILD once it is gone; a job not yet sent ends
 * at once with rc -ECANCELED.  No job: no-op. */
void flyd_worker_cancel(struct flyd_worker *w);
int flyd_worker_is_healthy(const struct flyd_worker *w);
/* 1 while a worker process is up and has reported READY with its
 * device open. */
int flyd_worker_is_ready(const struct flyd_worker *w);
/* How many worker starts in a row reported that the backend could not
 * open its device (0 after one that could). */
int flyd_worker_open_failures(const struct flyd_worker *w);
int flyd_worker_restarts(const struct flyd_worker *w);
int flyd_worker_pid(const struct flyd_worker *w);
struct flyd_registry;
/* The kernel registry of the last worker that was READY (registry.h).
 * @return borrowed, valid until the next READY or flyd_worker_stop();
 *         NULL before the first READY. */
const struct flyd_registry *flyd_worker_registry(const struct flyd_worker *w);
/* Stop: kill the child, close handles; @p done runs when all is closed. */
void flyd_worker_stop(struct flyd_worker *w, void (*done)(void *), void *arg);

/* Entry point of the worker process (`flytuned --worker`).  Never returns
 * to the daemon's main; exits the process. */
int flyd_worker_main(int argc, char **argv);

#endif /* FLYD_WORKER_H */
