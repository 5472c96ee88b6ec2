/*
 * store.h -- persistent tuning results (SQLite): devices, results, trials,
 * jobs.  The only module that includes <sqlite3.h> is store.c.
 *
 * Thread: loop thread only (one connection per process; several processes
 * may open the same file: WAL + busy timeout).
 * Identity: rows are keyed by (key, device id, kernel-library version);
 * the device id is fly__hash_str() (FNV-1a 64) of the fingerprint line
 * in hex, so identical GPUs on one host share winners.
 */
#ifndef FLYD_STORE_H
#define FLYD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"
#include "job.h"

#define FLYD_DEVID_MAX 24   /* 16 hex digits + NUL, rounded */
#define FLYD_LIBVER_MAX 32
const char *flyd_outcome_name(int outcome);
int flyd_outcome_parse(const char *s);

struct flyd_result {
	char key[FLY_KEY_MAX];
	char device[FLYD_DEVID_MAX];
	char libver[FLYD_LIBVER_MAX];
	struct fly_decision d; /* status is FLY_STATUS_TUNED for stored rows */
	double mad_us;         /* noise of the winner */
	double tune_s;         /* wall time the job took */
	int64_t tuned_at;      /* unix seconds */
	uint32_t reps;         /* the winner's timed reps (its trial); set by
				  flyd_store_outbox_iter() only, 0: unknown */
};

struct flyd_job {
	char key[FLY_KEY_MAX];
	int priority;          /* 1 explicit tune, 0 background */
	int force;
	int64_t queued_at;
	uint32_t faults;       /* worker deaths so far (0003) */
};

/* A job given up on (0003, failed_jobs): shown by get/explain, not queued
 * again until a forced tune or a forget. */
struct flyd_failed {
	char key[FLY_KEY_MAX];
	uint32_t faults;
	char why[FLYD_REASON_MAX];
	int64_t at;            /* unix seconds */
};

struct flyd_store;

/* Open (create) the local DB at @p path, migrate it, and optionally layer a
 * read-only system DB @p system_path (NULL: none) under it.  A corrupt or
 * unreadable local file is renamed PATH.corrupt-<unix time> and a fresh one
 * created (logged).  @return 0, FLY_E_SCHEMA (written by a newer schema:
 * refused, not altered), FLY_E_STORAGE, -ENOMEM. */
int flyd_store_open(const char *path, const char *system_path,
		    struct flyd_store **out);
void flyd_store_close(struct flyd_store *st);
/* Layer @p system_path (NULL: none) under the local DB instead of the
 * system DB attached now (SIGHUP with a new system_db).  A missing or
 * unusable file is logged and leaves none attached.
 * @return 1 (attached), 0 (none), FLY_E_STORAGE (the old one could not be
 * detached: kept). */
int flyd_store_set_system(struct flyd_store *st, const char *system_path);
/* Whether the last open quarantined a corrupt file (for STATUS=degraded). */
int flyd_store_was_quarantined(const struct flyd_store *st);
/* SQLite's text for the last FLY_E_STORAGE (e.g. "database or disk is
 * full"), for error replies; static storage, never NULL. */
const char *flyd_store_last_error(const struct flyd_store *st);
/* Cheap health probe for the watchdog (SELECT 1). @return 0 or error. */
int flyd_store_ping(struct flyd_store *st);

/* Record a device fingerprint line; writes its id to @p id_out. */
int flyd_store_device_put(struct flyd_store *st, const char *fingerprint,
			  char id_out[FLYD_DEVID_MAX]);
void flyd_store_device_id(const char *fingerprint, char id_out[FLYD_DEVID_MAX]);
/* Delete the devices that are @p fingerprint's hardware (the same arch=,
 * units= and name=) under another fingerprint (a kernel library, vendor
 * BLAS, driver or runtime version since changed), with all their rows
 * (results, trials, jobs, failed jobs): nothing would ever serve them
 * again.  Devices of other hardware (other GPUs sharing the DB) stay.
 * @p ndev / @p nres (may be NULL): devices and results deleted.
 * @return 0 or an error. */
int flyd_store_device_prune(struct flyd_store *st, const char *fingerprint,
			    int64_t *ndev, int64_t *nres);

/* Look up a result: local first, then the system DB.
 * @return 0, FLY_E_NOTFOUND, FLY_E_STORAGE. */
int flyd_store_result_get(struct flyd_store *st, const char *key,
			  const char *device, const char *libver,
			  struct flyd_result *out);
/* Commit a winner and its trials in one transaction with
 * synchronous=FULL; also removes the key's job row.  Returns only after
 * the commit is durable.  @return 0, FLY_E_STORAGE. */
int flyd_store_result_put(struct flyd_store *st, const struct flyd_result *r,
			  const struct flyd_trial *trials, size_t ntrials);
/* Record trials without a winner (e.g. a faulted candidate), FULL. */
int flyd_store_trials_add(struct flyd_store *st, const char *key,
			  const char *device, const char *libver,
			  const struct flyd_trial *trials, size_t ntrials);
/* Forget one key (NULL: all keys) for a device and libver, with trials.
 * @param[out] n rows removed.  @return 0, FLY_E_STORAGE. */
int flyd_store_forget(struct flyd_store *st, const char *key,
		      const char *device, const char *libver, int64_t *n);

typedef int (*flyd_result_cb)(void *ctx, const struct flyd_result *r);
typedef int (*flyd_trial_cb)(void *ctx, const struct flyd_trial *t);
/* Iterate results of a device/libver ordered by key, keys > @p after
 * (NULL: from the start), at most @p limit (<= 0: no limit), local then
 * system rows not shadowed.  A callback returning non-zero stops. */
int flyd_store_result_iter(struct flyd_store *st, const char *device,
			   const char *libver, const char *after,
			   int64_t limit, flyd_result_cb cb, void *ctx);
int flyd_store_trial_iter(struct flyd_store *st, const char *key,
			  const char *device, const char *libver,
			  flyd_trial_cb cb, void *ctx);
/* Whether a candidate was recorded FAULTED for the key and device. */
int flyd_store_is_faulted(struct flyd_store *st, const char *key,
			  const char *device, const char *libver,
			  const char *variant, const int64_t *params,
			  uint32_t nparams);
/* Import results all-or-nothing in one FULL transaction. */
int flyd_store_import(struct flyd_store *st, const struct flyd_result *rs,
		      size_t n);
int64_t flyd_store_result_count(struct flyd_store *st, const char *device,
				const char *libver);

/* Jobs (so a restart resumes them). */
int flyd_store_job_put(struct flyd_store *st, const char *device,
		       const struct flyd_job *j);
int flyd_store_job_del(struct flyd_store *st, const char *device,
		       const char *key);
typedef int (*flyd_job_cb)(void *ctx, const struct flyd_job *j);
int flyd_store_job_iter(struct flyd_store *st, const char *device,
			flyd_job_cb cb, void *ctx);

/* Record a failed job and delete its jobs row, in one transaction.
 * @return 0, -EINVAL, FLY_E_STORAGE. */
int flyd_store_failed_put(struct flyd_store *st, const char *device,
			  const struct flyd_failed *f);
/* @return 0 (filled), FLY_E_NOTFOUND, -EINVAL, FLY_E_STORAGE. */
int flyd_store_failed_get(struct flyd_store *st, const char *device,
			  const char *key, struct flyd_failed *out);
/* Delete the failed record of @p key (NULL: every key of the device).
 * @return 0, -EINVAL, FLY_E_STORAGE. */
int flyd_store_failed_del(struct flyd_store *st, const char *device,
			  const char *key);
typedef int (*flyd_failed_cb)(void *ctx, const struct flyd_failed *f);
/* Each failed record of @p device; a non-zero return of @p cb stops and is
 * returned.  @return 0, the callback's value, -EINVAL, FLY_E_STORAGE. */
int flyd_store_failed_iter(struct flyd_store *st, const char *device,
			   flyd_failed_cb cb, void *ctx);

/* The fleet outbox (0004, daemon/fleet.c): while on, every
 * flyd_store_result_put() also queues the key for a push to the fleet DB,
 * in the same transaction. */
void flyd_store_set_outbox(struct flyd_store *st, int on);
/* The queued keys with their current local winner, oldest first, at most
 * @p limit (<= 0: all).  A callback returning non-zero stops (returned).
 * @return 0, the callback's value, FLY_E_STORAGE. */
typedef int (*flyd_outbox_cb)(void *ctx, const struct flyd_result *r);
int flyd_store_outbox_iter(struct flyd_store *st, int64_t limit,
			   flyd_outbox_cb cb, void *ctx);
/* The fleet DB has the key's winner: drop it from the outbox. */
int flyd_store_outbox_del(struct flyd_store *st, const char *key,
			  const char *device, const char *libver);
/* Whether the key's push is queued (1) or not (0; also on error). */
int flyd_store_outbox_has(struct flyd_store *st, const char *key,
			  const char *device, const char *libver);
/* Queued pushes, or FLY_E_STORAGE. */
int64_t flyd_store_outbox_count(struct flyd_store *st);

/* For tests: create (or migrate) @p path applying only migrations
 * 1..@p version, as an older binary would have left it, then close it.
 * @return 0, -EINVAL (version out of range), FLY_E_STORAGE. */
int flyd_store_open_at_version(const char *path, int version);

#endif /* FLYD_STORE_H */
