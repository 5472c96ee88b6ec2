/*
 * config.h -- flytuned's configuration: defaults, the JSON file
 * (/etc/flytuned/flytuned.conf, schemas/config.schema.json), validation.
 *
 * Thread: loop thread.  Unknown keys or wrong types refuse the whole file
 * with a message naming the key.
 */
#ifndef FLYD_CONFIG_H
#define FLYD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "fly_abi.h"
#include "fly_key.h"

enum flyd_policy {
	FLYD_POLICY_ALWAYS = 0,     /* tune unseen keys as soon as possible */
	FLYD_POLICY_IDLE = 1,       /* only while no request came for idle_ms */
	FLYD_POLICY_ON_REQUEST = 2  /* only explicit tune / decide_wait */
};

struct flyd_config {
	char backend[16];            /* "auto" (default), "cpu", "cuda", "hip" */
	char system_db[4096];        /* read-only pre-tuned DB, "" for none */
	int policy;                  /* enum flyd_policy */
	uint32_t idle_ms;            /* policy idle: quiet time before tuning */
	double bench_s_per_min;      /* cap on benchmark seconds per minute */
	double job_budget_s;         /* wall budget per job (default 1.0) */
	/* A job's wall cap in the worker, setup and candidate list
	 * included, as a multiple of job_budget_s (default 1.35; 0: none) */
	double job_max_x;
	double cand_timeout_s;       /* hard timeout per candidate (5.0) */
	double setup_timeout_s;      /* hard timeout on a job's case set-up
					(60.0) */
	double margin;               /* incumbent margin (0.03) */
	uint32_t queue_cap;          /* max queued jobs (1024) */
	uint32_t shm_capacity;       /* shm slots at start (65536) */
	uint32_t shm_max_bytes;      /* the table's slots grow up to (1 GiB) */
	uint32_t max_clients;        /* (1024), reduced below RLIMIT_NOFILE */
	uint32_t frame_cap;          /* request frame cap bytes (65536) */
	uint32_t out_buf_cap;        /* per-client output cap bytes (1 MiB) */
	uint32_t frame_timeout_ms;   /* partial frame completion (5000) */
	uint32_t idle_timeout_ms;    /* idle connection (300000) */
	char admin_group[64];        /* group allowed admin requests
					("flytune") */
	char log_level[16];          /* "info" */
	char metrics_listen[64];     /* "HOST:PORT" of the metrics listener,
					"" (default): none */
	struct fly_bucket_policy bucket[FLY_OP_COUNT]; /* per-op bucketing */
	/* The fleet (fleet.h, docs/fleet.md): read at start only. */
	char fleet_url[1024];        /* libpq connection string, "": off */
	uint32_t fleet_retry_ms;     /* reconnect after a failure (2000) */
	double fleet_hysteresis;     /* a fleet winner replaces the incumbent
					only when faster by more than this
					fraction (0.03); same on every node */
	uint32_t fleet_wait_ms;      /* a job whose fleet lock another node
					holds waits this long for its winner,
					then tunes locally (30000; 0: no
					single flight); SIGHUP applies it */
	uint32_t fleet_check_ms;     /* a node with parked jobs checks this
					often whether their locks are still
					held (1000; 0: never, wait the full
					fleet_wait_ms); SIGHUP applies it */
};

/* Fill @p c with the defaults. */
void flyd_config_defaults(struct flyd_config *c);
/* Load and validate a JSON file over the defaults.  A missing file is
 * fine when @p required is 0 (the default path); an explicit --config
 * must exist.  @param[out] err human message naming the key on failure.
 * @return 0, -ENOENT, -EINVAL (bad JSON, unknown key, wrong type, value
 * out of range). */
int flyd_config_load(const char *path, int required, struct flyd_config *c,
		     char *err, size_t errcap);
/* The same over @p len bytes of text (@p name names it in messages); on
 * failure @p c is unchanged.  @return 0 or -EINVAL. */
int flyd_config_parse(const char *text, size_t len, const char *name,
		      struct flyd_config *c, char *err, size_t errcap);

/* Parse a metrics_listen value: numeric "HOST:PORT" ("127.0.0.1:9464")
 * or "[V6]:PORT" ("[::1]:9464"), port 0..65535.
 * @return 0 (@p out an AF_INET or AF_INET6 address) or -EINVAL. */
int flyd_config_parse_listen(const char *s, struct sockaddr_storage *out);

#endif /* FLYD_CONFIG_H */
