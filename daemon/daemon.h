/*
 * daemon.h -- the daemon context: everything one flytuned instance owns.
 *
 * Thread: loop thread only.  One struct flyd_ctx per process, built by
 * main.c, passed to every module.  Modules keep their own state behind
 * the opaque pointers below.
 */
#ifndef FLYD_DAEMON_H
#define FLYD_DAEMON_H

#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "fly_abi.h"
#include "stats.h"
#include "store.h"

struct flyd_server;   /* server.c: listener and sessions */
struct flyd_sched;    /* scheduler.c: queue, policy, worker */
struct flyd_results;  /* results.c: map, commit, shm, waiters */
struct flyd_http;     /* http.c: the metrics listener */
struct flyd_fleet;    /* fleet.c: the fleet DB (fleet_url) */

struct flyd_ctx {
	uv_loop_t *loop;
	struct flyd_config cfg;      /* config.h; reloaded on SIGHUP */
	const char *config_path;
	const char *exe;             /* /proc/self/exe, for the worker */
	int device;                  /* --device N */
	char socket_path[108];
	char db_path[4096];
	struct flyd_store *store;
	struct flyd_server *server;
	struct flyd_results *results;  /* NULL before start, after stop */
	struct flyd_sched *sched;      /* NULL before start, after stop */
	/* Learned from the worker's READY (scheduler.c sets them). */
	char backend[16];            /* "cpu", "cuda", "hip" */
	char fingerprint[512];       /* backend fingerprint line */
	char device_id[FLYD_DEVID_MAX];
	char libver[FLYD_LIBVER_MAX];
	int ready;                   /* READY=1 sent */
	int degraded;                /* worker unhealthy or DB quarantined */
	int wd_unhealthy;            /* the watchdog saw the worker unhealthy */
	int wd_gpu_lost;             /* ... and the device lost (F11) */
	int stopping;
	uint64_t started_ms;         /* uv_now at start */
	gid_t admin_gid;             /* service group allowed admin requests */
	struct flyd_stats stats;     /* stats.h: `stats` and `metrics` */
	const char *version;         /* flytuned's version (VERSION) */
	struct flyd_http *http;      /* metrics listener; NULL: off */
	struct flyd_fleet *fleet;    /* the fleet DB; NULL: off */
};

#endif /* FLYD_DAEMON_H */
