/*
 * main.c -- flytuned: options, the context, the loop, and the order of
 * start, readiness and stop.
 *
 * Owns: the process (signals, exit code) and the sequencing: the socket's
 * directory, the DB, the listener (handed the dispatch table), the metrics
 * listener (handed flyd_metrics_http_render; metrics_listen), the results
 * and the scheduler (which starts the worker), then, at the worker's first
 * READY, ctx->ready, sd_notify READY=1 and the hellos that waited.  Stop
 * runs the other way.  Thread: loop thread.
 *
 * flytuned never forks itself: it always runs in the foreground (systemd
 * Type=notify supervises it); --foreground only adds a human banner.
 * Exit codes: 0 clean stop, 1 start-up failure (DB, socket, worker),
 * 2 usage, 6 configuration error (the log line names the key).
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "fleet.h"
#include "flyk.h"
#include "handlers.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "results.h"
#include "scheduler.h"
#include "server.h"
#include "store.h"
#include "worker.h"

#define FLYTUNED_VERSION FLY_VERSION /* the VERSION file, via the Makefile */
#define EXIT_USAGE 2
#define EXIT_CONFIG 6
#define DEFAULT_CONFIG "/etc/flytuned/flytuned.conf"
#define DEFAULT_RUNDIR "/run/flytuned"
#define DEFAULT_DB "/var/lib/flytuned/tuning.db"

struct opts {
	int device;
	const char *config;     /* NULL: the default (may be missing) */
	const char *socket;
	const char *state_dir;
	int foreground;
};

static struct flyd_ctx the_ctx;
static uv_signal_t sig_term, sig_int, sig_hup;
/* The worker's health and the device's, checked every HEALTH_MS whether
 * or not systemd's watchdog runs (before issue 21's F11 work only the
 * watchdog's timer checked them, so without WatchdogSec= a degraded
 * instance never said so in STATUS= or the log). */
static uv_timer_t health_timer;
static int health_on;
#define HEALTH_MS 1000
static char exe_path[PATH_MAX];
static int exit_code;

static void usage(FILE *f)
{
	fprintf(f,
"usage: flytuned [--device N] [--config FILE] [--socket PATH]\n"
"                [--state-dir DIR] [--foreground] [--help] [--version]\n"
"\n"
"Per-GPU kernel autotuning daemon: one instance per device, answering\n"
"\"which kernel variant for this shape\" over a Unix socket and a shared\n"
"memory table.  flytuned never forks: it runs in the foreground (under\n"
"systemd as Type=notify) and logs one line per event to stderr.\n"
"\n"
"  --device N       device index served (default 0)\n"
"  --config FILE    JSON config (default " DEFAULT_CONFIG ", which may be\n"
"                   missing; an explicit FILE must exist)\n"
"  --socket PATH    listen here (default " DEFAULT_RUNDIR "/gpuN.sock)\n"
"  --state-dir DIR  socket DIR/gpuN.sock and DB DIR/tuning.db (DIR is\n"
"                   created); default DB " DEFAULT_DB "\n"
"  --foreground     also print a start-up banner with the paths\n"
"  --help, --version\n"
"\n"
"Signals: TERM/INT stop gracefully, HUP reloads the config (a bad file\n"
"keeps the old one).  Exit codes: 0 stopped, 1 start-up failure, 2 usage,\n"
"6 configuration error.  See flytuned(8).\n");
}

/* @return 0 run, 1 exit 0 (help/version), -1 usage error. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"device", required_argument, NULL, 'd'},
		{"config", required_argument, NULL, 'c'},
		{"socket", required_argument, NULL, 's'},
		{"state-dir", required_argument, NULL, 'S'},
		{"foreground", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}
	};
	char *end;
	int c;

	memset(o, 0, sizeof(*o));
	while ((c = getopt_long(argc, argv, "d:c:s:S:fhV", lo, NULL)) != -1) {
		switch (c) {
		case 'd':
			errno = 0;
			o->device = (int)strtol(optarg, &end, 10);
			if (errno != 0 || *end != '\0' || end == optarg ||
			    o->device < 0 || o->device > 1023) {
				fprintf(stderr, "flytuned: bad --device '%s'\n",
					optarg);
				return -1;
			}
			break;
		case 'c': o->config = optarg; break;
		case 's': o->socket = optarg; break;
		case 'S': o->state_dir = optarg; break;
		case 'f': o->foreground = 1; break;
		case 'h': usage(stdout); return 1;
		case 'V':
			printf("flytuned %s (kernels %s, protocol %d)\n",
			       FLYTUNED_VERSION, flyk_libver(),
			       FLY_PROTO_VERSION);
			return 1;
		default: usage(stderr); return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "flytuned: unexpected argument '%s'\n",
			argv[optind]);
		return -1;
	}
	return 0;
}

/* Socket and DB paths from the options.  @return 0 or -errno. */
static int build_paths(struct flyd_ctx *ctx, const struct opts *o)
{
	int n;

	n = o->state_dir != NULL ? flyd_server_dir_check(o->state_dir) : 0;
	if (n == -EPERM) {
		flyd_log(FLYD_LOG_ERR, "state_dir_error",
			 "dir=%s err=\"writable by group or others: they could "
			 "replace the database (chmod go-w, or choose another "
			 "directory)\"", o->state_dir);
		return n;
	}
	if (n < 0) {
		flyd_log(FLYD_LOG_ERR, "state_dir_error", "dir=%s err=%s",
			 o->state_dir, strerror(-n));
		return n;
	}
	if (o->socket != NULL)
		n = snprintf(ctx->socket_path, sizeof(ctx->socket_path), "%s",
			     o->socket);
	else
		n = snprintf(ctx->socket_path, sizeof(ctx->socket_path),
			     "%s/gpu%d.sock", o->state_dir != NULL ?
			     o->state_dir : DEFAULT_RUNDIR, o->device);
	if (n < 0 || (size_t)n >= sizeof(ctx->socket_path)) {
		flyd_log(FLYD_LOG_ERR, "socket_path_error",
			 "err=\"longer than 107 bytes\"");
		return -ENAMETOOLONG;
	}
	snprintf(ctx->db_path, sizeof(ctx->db_path), "%s%s",
		 o->state_dir != NULL ? o->state_dir : DEFAULT_DB,
		 o->state_dir != NULL ? "/tuning.db" : "");
	return 0;
}

/* Settings that follow the config: log level, admin group. */
static void apply_config(struct flyd_ctx *ctx)
{
	struct group *g = getgrnam(ctx->cfg.admin_group);

	if (getenv("FLYTUNED_LOG_LEVEL") == NULL)
		flyd_log_set_level(flyd_log_level_parse(ctx->cfg.log_level));
	ctx->admin_gid = g != NULL ? g->gr_gid : (gid_t)-1;
}

/* Load the config file over the defaults into @p out. */
static int load_config(const struct flyd_ctx *ctx, struct flyd_config *out)
{
	const char *path = ctx->config_path ? ctx->config_path : DEFAULT_CONFIG;
	char err[512], q[600];
	int rc;

	flyd_config_defaults(out);
	rc = flyd_config_load(path, ctx->config_path != NULL, out, err,
			      sizeof(err));
	if (rc < 0)
		flyd_log(FLYD_LOG_ERR, "config_error", "path=%s msg=%s", path,
			 flyd_log_q(err, q, sizeof(q)));
	return rc;
}

static void on_loop_handle_closed(uv_handle_t *h)
{
	(void)h;
}

static void on_server_stopped(void *arg)
{
	struct flyd_ctx *ctx = arg;

	uv_close((uv_handle_t *)&sig_term, on_loop_handle_closed);
	uv_close((uv_handle_t *)&sig_int, on_loop_handle_closed);
	uv_close((uv_handle_t *)&sig_hup, on_loop_handle_closed);
	if (ctx->store != NULL)
		flyd_store_close(ctx->store);
	ctx->store = NULL;
	flyd_log(FLYD_LOG_INFO, "stopped", "device=%d exit=%d", ctx->device,
		 exit_code);
}

static int tuning_parts; /* scheduler and results still stopping */

/* Both the scheduler and the results have stopped: the hellos still
 * waiting get "down", then the sessions and the listener close. */
static void on_tuning_part_stopped(void *arg)
{
	struct flyd_ctx *ctx = arg;

	if (tuning_parts > 0 && --tuning_parts > 0)
		return;
	ctx->sched = NULL; /* freed itself before calling back */
	flyd_results_free(ctx->results);
	ctx->results = NULL;
	flyd_handlers_stop(ctx);
	flyd_server_stop(ctx, on_server_stopped, ctx);
}

/* SIGTERM/SIGINT or a failed start: stop accepting, stop the scheduler
 * (requests see tuning stopped at once; the job in flight stays queued in
 * the DB), answer the `tune wait` waiters, close sessions, close the DB. */
static void shutdown_begin(struct flyd_ctx *ctx, const char *why)
{
	if (ctx->stopping)
		return;
	ctx->stopping = 1;
	flyd_notify_stopping();
	flyd_log(FLYD_LOG_INFO, "stopping", "reason=%s", why);
	flyd_notify_watchdog_stop();
	if (health_on) {
		health_on = 0;
		uv_close((uv_handle_t *)&health_timer, on_loop_handle_closed);
	}
	flyd_server_stop_accepting(ctx);
	flyd_http_stop(ctx->http);
	ctx->http = NULL;
	flyd_sched_set_fleet(ctx->sched, NULL);
	flyd_fleet_stop(ctx->fleet);
	ctx->fleet = NULL;
	tuning_parts = 2;
	flyd_sched_stop(ctx->sched, on_tuning_part_stopped, ctx);
	if (ctx->results != NULL)
		flyd_results_stop(ctx->results, on_tuning_part_stopped, ctx);
	else
		on_tuning_part_stopped(ctx);
}

/* Send "STATUS=..." (starting, ready or degraded -- with " gpu=lost"
 * while the device cannot be opened, RELIABILITY.md F11 --, and the
 * backend). */
static void send_status(struct flyd_ctx *ctx)
{
	char msg[256];
	int degraded = flyd_ctx_degraded(ctx);

	snprintf(msg, sizeof(msg), "STATUS=%s%s backend=%s device=%d",
		 !ctx->ready ? "starting" : degraded ? "degraded" : "ready",
		 flyd_sched_device_lost(ctx->sched) ? " gpu=lost" : "",
		 ctx->backend[0] ? ctx->backend : "?", ctx->device);
	flyd_notify_send(msg);
}

/* The scheduler's first READY: the device is identified and the results
 * are loaded, so the daemon is ready: READY=1, the status, the log line,
 * and the hellos that waited. */
static void daemon_ready(void *arg)
{
	struct flyd_ctx *ctx = arg;
	int first = !ctx->ready;

	ctx->ready = 1;
	if (first) {
		flyd_notify_send("READY=1");
		flyd_log(FLYD_LOG_INFO, "ready", "device=%d backend=%s id=%s "
			 "libver=%s socket=%s", ctx->device, ctx->backend,
			 ctx->device_id, ctx->libver, ctx->socket_path);
	}
	send_status(ctx);
	flyd_handlers_ready(ctx);
	if (first)
		flyd_fleet_ready(ctx->fleet);
}

/*
 * The instance's health (health_check, every HEALTH_MS and on each
 * watchdog ping) and the watchdog's (the loop runs, the DB answers).
 * A worker that keeps dying is not a reason for systemd to
 * restart the daemon (RELIABILITY.md F9, F11: the instance goes degraded
 * and keeps serving its winners; a restart would only cut every client
 * off and start the same worker again): it is reported instead, in
 * STATUS= (sent here when it changes), `status` and the metrics.
 */
static void health_check(struct flyd_ctx *ctx)
{
	int unhealthy = !flyd_sched_is_healthy(ctx->sched);
	int lost = flyd_sched_device_lost(ctx->sched);

	if (unhealthy != ctx->wd_unhealthy || lost != ctx->wd_gpu_lost) {
		if (unhealthy != ctx->wd_unhealthy)
			flyd_log(unhealthy ? FLYD_LOG_WARN : FLYD_LOG_INFO,
				 "worker_health", "healthy=%d", !unhealthy);
		if (lost != ctx->wd_gpu_lost)
			flyd_log(lost ? FLYD_LOG_ERR : FLYD_LOG_INFO,
				 lost ? "gpu_lost" : "gpu_back",
				 lost ? "device=%d open=failing tuning=refused "
					"winners=served"
				      : "device=%d open=ok",
				 ctx->device);
		ctx->wd_unhealthy = unhealthy;
		ctx->wd_gpu_lost = lost;
		if (ctx->ready)
			send_status(ctx);
	}
}

static void on_health(uv_timer_t *t)
{
	health_check(t->data);
}

static int watchdog_ok(void *arg)
{
	struct flyd_ctx *ctx = arg;

	health_check(ctx);
	if (ctx->store != NULL && flyd_store_ping(ctx->store) == 0)
		return 1;
	flyd_log(FLYD_LOG_WARN, "watchdog_skip", "db=unanswered");
	return 0;
}

/* Layer the system DB @p path ("" for none) under the local one.
 * @return 1 when done (attached, or none as asked or as the file allows:
 * logged), 0 when the old one could not be detached (kept, logged). */
static int swap_system_db(struct flyd_ctx *ctx, const char *path)
{
	char q[512];
	int rc = flyd_store_set_system(ctx->store, path[0] ? path : NULL);

	if (rc < 0) {
		flyd_log(FLYD_LOG_WARN, "system_db_kept", "path=%s rc=%d",
			 flyd_log_q(ctx->cfg.system_db, q, sizeof(q)), rc);
		return 0;
	}
	flyd_log(FLYD_LOG_INFO, "system_db_changed", "path=%s attached=%d",
		 flyd_log_q(path, q, sizeof(q)), rc);
	return 1;
}

static void reload(struct flyd_ctx *ctx)
{
	struct flyd_config c;

	flyd_notify_reloading();
	if (load_config(ctx, &c) < 0) {
		flyd_log(FLYD_LOG_WARN, "reload_failed",
			 "msg=\"keeping the old configuration\"");
	} else {
		int sys_changed = strcmp(c.system_db, ctx->cfg.system_db) != 0;

		if (strcmp(c.metrics_listen, ctx->cfg.metrics_listen) != 0)
			flyd_log(FLYD_LOG_WARN, "metrics_listen_kept",
				 "msg=\"metrics_listen changes at restart\"");
		if (strcmp(c.fleet_url, ctx->cfg.fleet_url) != 0)
			flyd_log(FLYD_LOG_WARN, "fleet_url_kept",
				 "msg=\"fleet_url changes at restart\"");
		/* The fleet's settings are read at start only. */
		snprintf(c.fleet_url, sizeof(c.fleet_url), "%s",
			 ctx->cfg.fleet_url);
		c.fleet_hysteresis = ctx->cfg.fleet_hysteresis;
		c.fleet_retry_ms = ctx->cfg.fleet_retry_ms;

		if (sys_changed && !swap_system_db(ctx, c.system_db)) {
			snprintf(c.system_db, sizeof(c.system_db), "%s",
				 ctx->cfg.system_db);
			sys_changed = 0;
		}
		ctx->cfg = c;
		apply_config(ctx);
		flyd_server_reconfigure(ctx);
		flyd_sched_reconfigure(ctx->sched);
		if (sys_changed) /* the map and the shm table from the store */
			flyd_results_refill(ctx->results);
		flyd_log(FLYD_LOG_INFO, "reloaded", "path=%s",
			 ctx->config_path ? ctx->config_path : DEFAULT_CONFIG);
	}
	if (ctx->ready)
		flyd_notify_send("READY=1");
	send_status(ctx);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct flyd_ctx *ctx = h->data;

	if (signum == SIGHUP)
		reload(ctx);
	else
		shutdown_begin(ctx, signum == SIGTERM ? "sigterm" : "sigint");
}

static void banner(const struct flyd_ctx *ctx)
{
	printf("flytuned %s: device %d\n  socket %s\n  db     %s\n"
	       "  config %s\n  (runs in the foreground; Ctrl-C or SIGTERM "
	       "stops it)\n", FLYTUNED_VERSION, ctx->device, ctx->socket_path,
	       ctx->db_path, ctx->config_path ? ctx->config_path :
	       DEFAULT_CONFIG);
	fflush(stdout);
}

/* The metrics listener, when metrics_listen is set.  @return 0 or the
 * bind error (logged). */
static int metrics_start(struct flyd_ctx *ctx)
{
	const char *addr = ctx->cfg.metrics_listen;
	int rc;

	if (addr[0] == '\0')
		return 0;
	rc = flyd_http_start(ctx->loop, addr, flyd_metrics_http_render, ctx,
			     &ctx->http);
	if (rc < 0) {
		flyd_log(FLYD_LOG_ERR, "metrics_listen_failed", "addr=%s err=%s",
			 addr, uv_strerror(rc));
		return rc;
	}
	flyd_log(FLYD_LOG_INFO, "metrics_listening", "addr=%s port=%d", addr,
		 flyd_http_port(ctx->http));
	return 0;
}

/* Signals, then in order: the socket's directory, the DB, the listener
 * (the dispatch table handed to the session layer), the results (the shm
 * table), the scheduler (the worker; its first READY calls daemon_ready),
 * the watchdog and STATUS=starting.  @return 0 or an exit code. */
static int daemon_start(struct flyd_ctx *ctx, int listen_fd)
{
	const char *sys = ctx->cfg.system_db[0] ? ctx->cfg.system_db : NULL;
	int rc;

	signal(SIGPIPE, SIG_IGN);
	uv_signal_init(ctx->loop, &sig_term);
	uv_signal_init(ctx->loop, &sig_int);
	uv_signal_init(ctx->loop, &sig_hup);
	sig_term.data = sig_int.data = sig_hup.data = ctx;
	uv_signal_start(&sig_term, on_signal, SIGTERM);
	uv_signal_start(&sig_int, on_signal, SIGINT);
	uv_signal_start(&sig_hup, on_signal, SIGHUP);
	ctx->started_ms = uv_now(ctx->loop);
	/* The socket's directory is refused before the DB is made there. */
	rc = flyd_server_precheck(ctx, listen_fd);
	if (rc < 0) {
		flyd_log(FLYD_LOG_ERR, "start_failed", "rc=%d", rc);
		return 1;
	}
	rc = flyd_store_open(ctx->db_path, sys, &ctx->store);
	if (rc < 0) {
		flyd_log(FLYD_LOG_ERR, "db_error", "path=%s rc=%d", ctx->db_path,
			 rc);
		return 1;
	}
	rc = flyd_server_start(ctx, listen_fd, flyd_handlers_dispatch, ctx);
	if (rc == 0)
		flyd_server_set_fast(ctx, flyd_handlers_fast, ctx);
	if (rc == 0)
		rc = metrics_start(ctx);
	if (rc == 0)
		rc = flyd_results_open(ctx, &ctx->results);
	if (rc == 0)
		rc = flyd_fleet_start(ctx, &ctx->fleet);
	if (rc == 0 && ctx->fleet != NULL)
		flyd_results_on_commit(ctx->results, flyd_fleet_kick,
				       ctx->fleet);
	if (rc == 0)
		rc = flyd_sched_start(ctx, ctx->results, daemon_ready, ctx,
				      &ctx->sched);
	if (rc == 0 && ctx->fleet != NULL) {
		struct flyd_sched_fleet fl = {flyd_fleet_claim,
					      flyd_fleet_release, ctx->fleet};

		flyd_sched_set_fleet(ctx->sched, &fl);
	}
	if (rc < 0) {
		flyd_log(FLYD_LOG_ERR, "start_failed", "rc=%d", rc);
		return 1;
	}
	flyd_notify_watchdog_start(ctx->loop, watchdog_ok, ctx);
	uv_timer_init(ctx->loop, &health_timer);
	health_timer.data = ctx;
	health_on = 1;
	uv_timer_start(&health_timer, on_health, HEALTH_MS, HEALTH_MS);
	send_status(ctx);
	flyd_log(FLYD_LOG_INFO, "started", "device=%d socket=%s db=%s pid=%d",
		 ctx->device, ctx->socket_path, ctx->db_path, (int)getpid());
	return 0;
}

int main(int argc, char **argv)
{
	struct flyd_ctx *ctx = &the_ctx;
	struct opts o;
	int rc, listen_fd;
	ssize_t n;

	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return flyd_worker_main(argc, argv);
	rc = parse_args(argc, argv, &o);
	if (rc != 0)
		return rc > 0 ? 0 : EXIT_USAGE;
	listen_fd = flyd_notify_init();
	ctx->loop = uv_default_loop();
	if (ctx->loop == NULL) {
		/* uv_loop_init failed (ENOMEM): issue 21, test_faultsim. */
		flyd_log(FLYD_LOG_CRIT, "loop_init_failed", "err=ENOMEM");
		return 1;
	}
	ctx->device = o.device;
	ctx->version = FLYTUNED_VERSION;
	ctx->config_path = o.config;
	n = readlink("/proc/self/exe", exe_path, sizeof(exe_path) - 1);
	ctx->exe = n > 0 ? (exe_path[n] = '\0', exe_path) : argv[0];
	if (load_config(ctx, &ctx->cfg) < 0)
		return EXIT_CONFIG;
	apply_config(ctx);
	if (listen_fd == -EINVAL || build_paths(ctx, &o) < 0)
		return 1;
	if (o.foreground)
		banner(ctx);
	exit_code = daemon_start(ctx, listen_fd);
	if (exit_code != 0)
		shutdown_begin(ctx, "start_failed");
	uv_run(ctx->loop, UV_RUN_DEFAULT);
	free(ctx->server);
	uv_loop_close(ctx->loop);
	return exit_code;
}
