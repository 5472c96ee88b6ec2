/*
 * metrics.c -- Prometheus text exposition (format 0.0.4) of the daemon's
 * counters and gauges (see metrics.h).
 *
 * Owns: nothing beyond the text it returns.  Thread: loop thread.
 *
 * Every family has one "# HELP" and one "# TYPE" line, then its samples;
 * names follow the Prometheus conventions (counters end in _total, units
 * in the name: _seconds, _bytes).  Label values are escaped (\\, \", \n).
 * The counters are the ones `stats` reports (struct flyd_stats), never a
 * second copy: both requests read the same fields.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fleet.h"
#include "fly_key.h"
#include "fly_msg.h"
#include "flyk.h"
#include "http.h"
#include "metrics.h"
#include "results.h"
#include "scheduler.h"
#include "server.h"
#include "store.h"

struct out {
	char *p;
	size_t n;
	size_t cap;
	int oom;
	char dev[16];   /* the device label's value */
};

static void put(struct out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int m;

	if (o->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		m = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
		va_end(ap);
		if (m < 0) {
			o->oom = 1;
			return;
		}
		if ((size_t)m < o->cap - o->n) {
			o->n += (size_t)m;
			return;
		}
		char *q = realloc(o->p, o->cap * 2 + (size_t)m);

		if (q == NULL) {
			o->oom = 1;
			return;
		}
		o->p = q;
		o->cap = o->cap * 2 + (size_t)m;
	}
}

/* A label value, escaped as the format asks. */
static void put_esc(struct out *o, const char *s)
{
	char c[3] = {'\\', 0, 0};

	for (; *s != '\0'; s++) {
		if (*s == '\\' || *s == '"' || *s == '\n') {
			c[1] = *s == '\n' ? 'n' : *s;
			put(o, "%s", c);
		} else {
			put(o, "%c", *s);
		}
	}
}

static void family(struct out *o, const char *name, const char *type,
		   const char *help)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample: NAME{device="D"[,LABELS]} VALUE; @p labels: "" or
 * 'k="v",...' (values already safe). */
static void sample_u(struct out *o, const char *name, const char *labels,
		     uint64_t v)
{
	put(o, "%s{device=\"%s\"%s%s} %llu\n", name, o->dev,
	    labels[0] ? "," : "", labels, (unsigned long long)v);
}

static void sample_d(struct out *o, const char *name, const char *labels,
		     double v)
{
	put(o, "%s{device=\"%s\"%s%s} %.17g\n", name, o->dev,
	    labels[0] ? "," : "", labels, v);
}

/* A one-sample family. */
static void single(struct out *o, const char *name, const char *type,
		   const char *help, uint64_t v)
{
	family(o, name, type, help);
	sample_u(o, name, "", v);
}

/* The samples of one histogram series (@p labels as sample_u). */
static void hist_series(struct out *o, const char *name, const char *labels,
			const struct flyd_hist *h, int kind)
{
	char b[160], lab[240];
	unsigned n;
	const double *bounds = flyd_hist_bounds(kind, &n);
	uint64_t cum = 0;

	for (unsigned i = 0; i <= n; i++) {
		cum += h->bucket[i];
		if (i < n)
			snprintf(b, sizeof(b), "%g", bounds[i]);
		else
			snprintf(b, sizeof(b), "+Inf");
		snprintf(lab, sizeof(lab), "%s%sle=\"%s\"", labels,
			 labels[0] ? "," : "", b);
		snprintf(b, sizeof(b), "%s_bucket", name);
		sample_u(o, b, lab, cum);
	}
	snprintf(b, sizeof(b), "%s_sum", name);
	sample_d(o, b, labels, h->sum);
	snprintf(b, sizeof(b), "%s_count", name);
	sample_u(o, b, labels, h->count);
}

/* ---------------------------------------------------------------- families */

static void build_info(struct out *o, const struct flyd_ctx *ctx)
{
	const char *backend = ctx->backend[0] ? ctx->backend : ctx->cfg.backend;

	family(o, "flytuned_build_info", "gauge",
	       "Always 1: flytuned's version, the kernel library's version, "
	       "the backend, the device's fingerprint and id.");
	put(o, "flytuned_build_info{device=\"%s\",version=\"", o->dev);
	put_esc(o, ctx->version != NULL ? ctx->version : "");
	put(o, "\",kernels=\"%s\",backend=\"", FLYK_VERSION);
	put_esc(o, backend);
	put(o, "\",libver=\"");
	put_esc(o, ctx->libver);
	put(o, "\",fingerprint=\"");
	put_esc(o, ctx->fingerprint);
	put(o, "\",device_id=\"");
	put_esc(o, ctx->device_id);
	put(o, "\"} 1\n");
}

static void state(struct out *o, const struct flyd_ctx *ctx)
{
	int degraded = flyd_ctx_degraded(ctx);
	uint64_t up_ms = uv_now(ctx->loop) - ctx->started_ms;

	single(o, "flytuned_ready", "gauge",
	       "1 once the device is identified and requests are answered.",
	       (uint64_t)(ctx->ready && !ctx->stopping));
	single(o, "flytuned_degraded", "gauge",
	       "1 while the worker is unhealthy or the DB was quarantined.",
	       (uint64_t)degraded);
	/* RELIABILITY.md F11 names it flytune_gpu_healthy; it carries
	 * this exporter's flytuned_ prefix */
	single(o, "flytuned_gpu_healthy", "gauge",
	       "0 while the device cannot be opened (GPU lost: tuning is "
	       "refused, the tuned winners are served); else 1.",
	       (uint64_t)!flyd_sched_device_lost(ctx->sched));
	family(o, "flytuned_start_time_seconds", "gauge",
	       "Start time of the daemon since the Unix epoch.");
	sample_d(o, "flytuned_start_time_seconds", "",
		 (double)time(NULL) - (double)up_ms / 1000.0);
}

static void requests(struct out *o, const struct flyd_ctx *ctx)
{
	const struct flyd_stats *s = &ctx->stats;
	uint64_t seen = 0;
	char lab[96];

	family(o, "flytuned_requests_total", "counter",
	       "Socket requests by type and result (ok: answered, or deferred "
	       "(tune wait, a hello before ready); error: an error reply). "
	       "type=\"invalid\": frames that never reached a handler (bad "
	       "JSON, a bad id).");
	for (int id = 1; id < FLY_REQ_COUNT; id++) {
		const char *name = fly_req_name(id);

		if (name == NULL)
			continue;
		snprintf(lab, sizeof(lab), "type=\"%s\",result=\"ok\"", name);
		sample_u(o, "flytuned_requests_total", lab, s->req_ok[id]);
		snprintf(lab, sizeof(lab), "type=\"%s\",result=\"error\"", name);
		sample_u(o, "flytuned_requests_total", lab, s->req_err[id]);
		seen += s->req_ok[id] + s->req_err[id];
	}
	sample_u(o, "flytuned_requests_total",
		 "type=\"invalid\",result=\"error\"",
		 s->requests > seen ? s->requests - seen : 0);
	single(o, "flytuned_error_replies_total", "counter",
	       "Error replies sent on the socket (any request).", s->errors);
	single(o, "flytuned_protocol_errors_total", "counter",
	       "Malformed frames, bad JSON, unknown requests.",
	       s->protocol_errors);
}

static void decides(struct out *o, const struct flyd_ctx *ctx)
{
	static const char *const st[3] = {"default", "pending", "tuned"};
	char lab[96];

	family(o, "flytuned_decide_answers_total", "counter",
	       "decide answers the daemon gave, by op and status.  Only the "
	       "socket tier is seen here: answers from the shm table and the "
	       "process cache are served inside the clients (libflyclient) "
	       "without the daemon and are not counted.");
	for (int op = 1; op < FLY_OP_COUNT; op++)
		for (int i = 0; i < 3; i++) {
			snprintf(lab, sizeof(lab),
				 "tier=\"socket\",op=\"%s\",status=\"%s\"",
				 fly_op_name((uint32_t)op), st[i]);
			sample_u(o, "flytuned_decide_answers_total", lab,
				 ctx->stats.decide[op][i]);
		}
}

static void queue(struct out *o, const struct flyd_ctx *ctx)
{
	struct flyd_sched_gauges g;

	flyd_sched_gauges(ctx->sched, &g);
	family(o, "flytuned_queue_jobs", "gauge",
	       "Tuning jobs waiting (queued) and on the worker (running).");
	sample_u(o, "flytuned_queue_jobs", "state=\"queued\"", g.queued);
	sample_u(o, "flytuned_queue_jobs", "state=\"running\"", g.running);
	single(o, "flytuned_queue_capacity", "gauge",
	       "The queue's cap (queue_cap).", g.cap);
	single(o, "flytuned_queue_rejected_total", "counter",
	       "Jobs refused because the queue was full.",
	       ctx->stats.busy_rejections);
	single(o, "flytuned_worker_restarts_total", "counter",
	       "Restarts of the benchmark worker process.",
	       (uint64_t)(g.restarts > 0 ? g.restarts : 0));
	single(o, "flytuned_worker_healthy", "gauge",
	       "1 while the worker runs and restarted fewer than 3 times in "
	       "60 s.", (uint64_t)g.healthy);
}

static void jobs(struct out *o, const struct flyd_ctx *ctx)
{
	static const char *const je[FLYD_JOB_END_COUNT] = {
		"tuned", "failed", "faulted", "cancelled", "adopted"};
	static const char *const te[FLYD_TRIAL_END_COUNT] = {
		"winner", "measured", "rejected", "wrong", "faulted",
		"timed_out", "infeasible", "error"};
	const struct flyd_stats *s = &ctx->stats;
	char lab[96];
	int op, i;

	family(o, "flytuned_jobs_total", "counter",
	       "Tuning job ends by op and outcome (tuned: winner committed; "
	       "failed: given up; faulted: the worker died, queued again; "
	       "cancelled; adopted: already tuned when started).");
	for (op = 1; op < FLY_OP_COUNT; op++)
		for (i = 0; i < FLYD_JOB_END_COUNT; i++) {
			snprintf(lab, sizeof(lab), "op=\"%s\",outcome=\"%s\"",
				 fly_op_name((uint32_t)op), je[i]);
			sample_u(o, "flytuned_jobs_total", lab, s->jobs[op][i]);
		}
	family(o, "flytuned_trials_total", "counter",
	       "Candidates tried by op and outcome (winner, measured and lost, "
	       "rejected early, wrong answer, faulted the worker, timed out, "
	       "infeasible, launch error).");
	for (op = 1; op < FLY_OP_COUNT; op++)
		for (i = 0; i < FLYD_TRIAL_END_COUNT; i++) {
			snprintf(lab, sizeof(lab), "op=\"%s\",outcome=\"%s\"",
				 fly_op_name((uint32_t)op), te[i]);
			sample_u(o, "flytuned_trials_total", lab,
				 s->trials[op][i]);
		}
	family(o, "flytuned_tuning_seconds", "histogram",
	       "Wall seconds of a job's run on the worker, start to end "
	       "(winner, failure or fault), by op.");
	for (op = 1; op < FLY_OP_COUNT; op++) {
		snprintf(lab, sizeof(lab), "op=\"%s\"",
			 fly_op_name((uint32_t)op));
		hist_series(o, "flytuned_tuning_seconds", lab, &s->tune_s[op],
			    FLYD_HIST_TUNE);
	}
}

static void results(struct out *o, const struct flyd_ctx *ctx)
{
	struct flyd_results_gauges g;

	flyd_results_gauges(ctx->results, &g);
	single(o, "flytuned_results", "gauge",
	       "Tuned keys held for this device and kernel library.",
	       g.results);
	single(o, "flytuned_shm_slots_used", "gauge",
	       "Slots of the shared-memory table holding a decision.",
	       g.shm_used);
	single(o, "flytuned_shm_slots", "gauge",
	       "Slots of the shared-memory table (shm_capacity).",
	       g.shm_capacity);
	single(o, "flytuned_shm_generation", "gauge",
	       "Generation of the shared-memory table (changes when entries "
	       "are replaced or dropped).", g.shm_generation);
	single(o, "flytuned_shm_bytes", "gauge",
	       "Size of the shared-memory table's mapping.", g.shm_bytes);
	family(o, "flytuned_db_commit_seconds", "histogram",
	       "Seconds of one durable (synchronous=FULL) commit of a winner "
	       "and its trials.");
	hist_series(o, "flytuned_db_commit_seconds", "", &ctx->stats.commit_s,
		    FLYD_HIST_COMMIT);
	single(o, "flytuned_db_quarantines_total", "counter",
	       "Corrupt DB files moved aside at start (0 or 1 per start).",
	       (uint64_t)(ctx->store != NULL &&
			  flyd_store_was_quarantined(ctx->store)));
}

static void fleet(struct out *o, const struct flyd_ctx *ctx)
{
	struct flyd_fleet_gauges g;

	flyd_fleet_gauges(ctx->fleet, &g);
	single(o, "flytuned_fleet_enabled", "gauge",
	       "1 when fleet_url is set (docs/fleet.md).", (uint64_t)g.enabled);
	single(o, "flytuned_fleet_connected", "gauge",
	       "1 while the fleet DB is connected, migrated, listened to and "
	       "pulled.", (uint64_t)g.connected);
	single(o, "flytuned_fleet_outbox", "gauge",
	       "Local winners the fleet DB does not have yet.",
	       (uint64_t)(g.outbox > 0 ? g.outbox : 0));
	family(o, "flytuned_fleet_lag_seconds", "gauge",
	       "How long the outbox has been non-empty (0: empty).");
	sample_d(o, "flytuned_fleet_lag_seconds", "", g.lag_s);
	single(o, "flytuned_fleet_pushed_total", "counter",
	       "Measurements the fleet DB committed.", g.pushed);
	single(o, "flytuned_fleet_applied_total", "counter",
	       "Fleet winners applied to the local DB and the shm table.",
	       g.applied);
	single(o, "flytuned_fleet_refused_total", "counter",
	       "Fleet rows refused by validation (unknown variant, infeasible "
	       "point, malformed record).", g.refused);
	single(o, "flytuned_fleet_errors_total", "counter",
	       "Fleet connection and query failures (each retried).",
	       g.errors);
	single(o, "flytuned_fleet_locked_total", "counter",
	       "Tuning jobs run holding the key's fleet lock (single flight).",
	       g.locked);
	single(o, "flytuned_fleet_waits_total", "counter",
	       "Tuning jobs parked because another node held the key's fleet "
	       "lock.", g.waits);
	single(o, "flytuned_fleet_satisfied_total", "counter",
	       "Parked tuning jobs that adopted the fleet's winner instead of "
	       "running.", g.satisfied);
	single(o, "flytuned_fleet_wait_timeouts_total", "counter",
	       "Parked tuning jobs run without the lock after fleet_wait_ms.",
	       g.wait_timeouts);
	single(o, "flytuned_fleet_holders_lost_total", "counter",
	       "Parked tuning jobs that asked again because the lock's holder "
	       "let it go without a winner (it died).", g.holders_lost);
	single(o, "flytuned_fleet_waiting", "gauge",
	       "Tuning jobs parked on another node's fleet lock now.",
	       (uint64_t)g.waiting);
}

static void clients(struct out *o, const struct flyd_ctx *ctx)
{
	const struct flyd_stats *s = &ctx->stats;
	struct flyd_http_counts h;

	single(o, "flytuned_clients", "gauge", "Connected socket clients.",
	       ctx->server != NULL ? flyd_server_connections(ctx) : 0);
	single(o, "flytuned_clients_max", "gauge",
	       "The client limit (max_clients, after RLIMIT_NOFILE).",
	       ctx->server != NULL ? flyd_server_max_clients(ctx) : 0);
	single(o, "flytuned_connections_total", "counter",
	       "Socket connections accepted.", s->connections);
	family(o, "flytuned_connections_refused_total", "counter",
	       "Socket connections refused at accept, by reason.");
	sample_u(o, "flytuned_connections_refused_total",
		 "reason=\"max_clients\"", s->rejected_max_clients);
	family(o, "flytuned_connections_closed_total", "counter",
	       "Socket connections the daemon closed, by reason (slow_reader:"
	       " its replies over output_buffer_cap; timeout: a partial frame"
	       " or an idle connection).");
	sample_u(o, "flytuned_connections_closed_total",
		 "reason=\"slow_reader\"", s->rejected_slow);
	sample_u(o, "flytuned_connections_closed_total", "reason=\"timeout\"",
		 s->timeouts);
	flyd_http_counts_get(ctx->http, &h);
	family(o, "flytuned_http_requests_total", "counter",
	       "Requests to the metrics listener by HTTP status (refused: "
	       "closed at accept, too many connections).");
	sample_u(o, "flytuned_http_requests_total", "code=\"200\"", h.ok);
	sample_u(o, "flytuned_http_requests_total", "code=\"400\"", h.bad);
	sample_u(o, "flytuned_http_requests_total", "code=\"404\"",
		 h.not_found);
	sample_u(o, "flytuned_http_requests_total", "code=\"405\"",
		 h.bad_method);
	sample_u(o, "flytuned_http_requests_total", "code=\"408\"", h.timeout);
	sample_u(o, "flytuned_http_requests_total", "code=\"431\"", h.too_big);
	sample_u(o, "flytuned_http_requests_total", "code=\"500\"", h.error);
	sample_u(o, "flytuned_http_requests_total", "code=\"refused\"",
		 h.refused);
}

int flyd_metrics_render(struct flyd_ctx *ctx, char **text, size_t *len)
{
	struct out o = {.cap = 32768};

	*text = NULL;
	*len = 0;
	o.p = malloc(o.cap);
	if (o.p == NULL)
		return -ENOMEM;
	o.p[0] = '\0';
	snprintf(o.dev, sizeof(o.dev), "%d", ctx->device);
	build_info(&o, ctx);
	state(&o, ctx);
	requests(&o, ctx);
	decides(&o, ctx);
	queue(&o, ctx);
	jobs(&o, ctx);
	results(&o, ctx);
	fleet(&o, ctx);
	clients(&o, ctx);
	if (o.oom) {
		free(o.p);
		return -ENOMEM;
	}
	*text = o.p;
	*len = o.n;
	return 0;
}

int flyd_metrics_http_render(void *arg, char **text, size_t *len)
{
	return flyd_metrics_render(arg, text, len);
}
