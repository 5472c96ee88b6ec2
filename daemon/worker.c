/*
 * worker.c -- the supervisor of the benchmark worker process, on the
 * daemon's loop: spawns `EXE --worker --device N --backend B` with the
 * record pipe on the child's fd 3 (worker_proto.h), forwards one job at a
 * time, collects its trials, and survives the child's death.
 *
 * Owns: the child (a struct wproc: process + pipe handles + read buffer,
 * one per spawn, freed after both close callbacks), the candidate timer
 * and the restart timer.  Thread: loop thread only.
 *
 * Death: when the child is gone (exit status seen AND its pipe at EOF, so
 * every record it wrote has been read) with a job in flight, the
 * candidate of the last START record becomes a FAULTED trial ("worker
 * killed by SIGSEGV", "timed out after 5.0 s"), done() gets rc = -ECHILD
 * with the trials so far, and a fresh child is spawned after a backoff
 * (100 ms doubling to 5 s).  opts->max_restarts restarts within 60 s make
 * the worker unhealthy ("degraded") until the window clears.
 * Invariant: handles are freed only in close callbacks (STYLE R9); the
 * stop callback runs after the last one.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "tuner.h"
#include "worker.h"
#include "worker_proto.h"

#define RESTART_WINDOW_MS 60000
#define RESTART_HIST 64
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define SETUP_MIN_S 30.0 /* guard on case setup before the first START */

struct wproc {
	struct flyd_worker *w;
	uv_process_t proc;
	uv_pipe_t pipe;
	int nopen;          /* handles not yet closed */
	int exited;         /* exit_cb ran */
	int eof;            /* pipe at EOF (or failed) */
	int closing;
	int ready;          /* READY rc == 0 received */
	struct flyd_registry reg; /* VARIANT records before READY */
	int pid;
	int64_t exit_status;
	int term_signal;
	uint8_t *rbuf;
	size_t rlen;
	size_t rcap;
};

struct wreq {
	uv_write_t req;
	uint8_t data[FLYD_WP_HDR + sizeof(struct flyd_tune_job)];
};

struct flyd_worker {
	uv_loop_t *loop;
	char *exe;
	char *backend;
	int device;
	double cand_timeout_s;
	double setup_timeout_s;  /* 0: derived, see setup_timeout_s() */
	int max_restarts;
	int open_fails;     /* READYs in a row that could not open the device */
	flyd_worker_ready_cb ready_cb;
	flyd_job_done_cb done_cb;
	void *ctx;

	uv_timer_t cand_timer;
	uv_timer_t restart_timer;
	int ntimers;             /* timer handles not yet closed */
	struct wproc *wp;        /* the current child, NULL between spawns */
	int nwprocs;             /* wprocs not yet freed */

	int busy;                /* a job accepted and not done */
	int job_sent;            /* ... and written to the current child */
	int timed_out;           /* the cand timer killed the child */
	struct flyd_tune_job job;
	struct flyd_trial *trials;
	size_t ntrials;
	size_t trials_cap;
	struct flyd_trial cur;   /* candidate of the last START */
	int has_cur;
	struct flyd_registry reg; /* of the last child that was READY */

	int restarts;                      /* total */
	uint64_t restart_at[RESTART_HIST]; /* uv_now of recent restarts */
	int nbackoff;                      /* consecutive early deaths */

	int stopping;
	void (*stop_cb)(void *);
	void *stop_arg;
};

static int spawn_child(struct flyd_worker *w);
static void maybe_gone(struct wproc *wp);

/* ---------------------------------------------------------- lifetime */

static void maybe_finish_stop(struct flyd_worker *w)
{
	void (*cb)(void *);
	void *arg;

	if (!w->stopping || w->ntimers > 0 || w->nwprocs > 0)
		return;
	cb = w->stop_cb;
	arg = w->stop_arg;
	free(w->trials);
	flyd_registry_clear(&w->reg);
	free(w->exe);
	free(w->backend);
	free(w);
	if (cb != NULL)
		cb(arg);
}

static void timer_close_cb(uv_handle_t *h)
{
	struct flyd_worker *w = h->data;

	w->ntimers--;
	maybe_finish_stop(w);
}

static void wproc_close_cb(uv_handle_t *h)
{
	struct wproc *wp = h->data;
	struct flyd_worker *w = wp->w;

	if (--wp->nopen > 0)
		return;
	free(wp->rbuf);
	flyd_registry_clear(&wp->reg);
	free(wp);
	w->nwprocs--;
	maybe_finish_stop(w);
}

static void wproc_close(struct wproc *wp)
{
	if (wp->closing)
		return;
	wp->closing = 1;
	uv_close((uv_handle_t *)&wp->proc, wproc_close_cb);
	uv_close((uv_handle_t *)&wp->pipe, wproc_close_cb);
}

static void wproc_kill(struct wproc *wp)
{
	if (wp != NULL && !wp->exited && !wp->closing)
		uv_process_kill(&wp->proc, SIGKILL);
}

/* ---------------------------------------------------------- restarts */

static int recent_restarts(const struct flyd_worker *w)
{
	uint64_t now = uv_now(w->loop);
	int n = 0, hist;

	hist = w->restarts < RESTART_HIST ? w->restarts : RESTART_HIST;
	for (int i = 0; i < hist; i++)
		if (now - w->restart_at[i] < RESTART_WINDOW_MS)
			n++;
	return n;
}

static void restart_cb(uv_timer_t *t)
{
	struct flyd_worker *w = t->data;

	if (w->stopping || w->wp != NULL)
		return;
	w->restart_at[w->restarts % RESTART_HIST] = uv_now(w->loop);
	w->restarts++;
	if (recent_restarts(w) >= w->max_restarts)
		flyd_log(FLYD_LOG_WARN, "worker_degraded",
			 "restarts_60s=%d max=%d", recent_restarts(w),
			 w->max_restarts);
	flyd_log(FLYD_LOG_INFO, "worker_restart", "restarts=%d", w->restarts);
	if (spawn_child(w) < 0) {
		uint64_t ms = BACKOFF_MAX_MS;

		uv_timer_start(&w->restart_timer, restart_cb, ms, 0);
	}
}

static void schedule_restart(struct flyd_worker *w)
{
	uint64_t ms = BACKOFF_MIN_MS;

	for (int i = 0; i < w->nbackoff && ms < BACKOFF_MAX_MS; i++)
		ms *= 2;
	if (ms > BACKOFF_MAX_MS)
		ms = BACKOFF_MAX_MS;
	w->nbackoff++;
	uv_timer_start(&w->restart_timer, restart_cb, ms, 0);
}

/* ---------------------------------------------------------- job */

static int trial_push(struct flyd_worker *w, const struct flyd_trial *t)
{
	if (w->ntrials == w->trials_cap) {
		size_t cap = w->trials_cap ? 2 * w->trials_cap : 64;
		struct flyd_trial *n = realloc(w->trials, cap * sizeof(*n));

		if (n == NULL)
			return -ENOMEM;
		w->trials = n;
		w->trials_cap = cap;
	}
	w->trials[w->ntrials++] = *t;
	return 0;
}

static double setup_timeout_s(const struct flyd_worker *w);

/* The hang guard fired: the job's set-up (no START yet) or a candidate,
 * each under its own name and limit (issue 18: a set-up was logged as
 * candidate_timeout with the candidate's limit). */
static void cand_timeout_cb(uv_timer_t *t)
{
	struct flyd_worker *w = t->data;

	if (w->wp == NULL)
		return;
	w->timed_out = 1;
	if (w->has_cur)
		flyd_log(FLYD_LOG_WARN, "candidate_timeout",
			 "key=%s variant=%s timeout_s=%.1f pid=%d", w->job.key,
			 w->cur.variant, w->cand_timeout_s, w->wp->pid);
	else
		flyd_log(FLYD_LOG_WARN, "setup_timeout",
			 "key=%s timeout_s=%.1f pid=%d", w->job.key,
			 setup_timeout_s(w), w->wp->pid);
	wproc_kill(w->wp);
}

/* Arm the hang guard for @p s seconds (<= 0: off). */
static void arm_cand_timer(struct flyd_worker *w, double s)
{
	uint64_t ms = (uint64_t)(s * 1000.0);

	if (s > 0)
		uv_timer_start(&w->cand_timer, cand_timeout_cb, ms ? ms : 1, 0);
}

/* The job's setup (the case: inputs, reference output) is no candidate:
 * it gets its own guard (opts->setup_timeout_s), by default longer than
 * one launch. */
static double setup_timeout_s(const struct flyd_worker *w)
{
	double s = 10 * w->cand_timeout_s;

	if (w->setup_timeout_s > 0)
		return w->setup_timeout_s;
	return w->cand_timeout_s <= 0 ? 0 : s > SETUP_MIN_S ? s : SETUP_MIN_S;
}

static void write_cb(uv_write_t *req, int status)
{
	if (status < 0 && status != UV_ECANCELED)
		flyd_log(FLYD_LOG_WARN, "worker_write_failed", "error=%s",
			 uv_strerror(status));
	free(req);
}

static void send_job(struct flyd_worker *w)
{
	struct wreq *r = malloc(sizeof(*r));
	uv_buf_t buf;
	int n, rc;

	if (r == NULL) {
		wproc_kill(w->wp);
		return;
	}
	n = flyd_wp_encode(FLYD_WP_JOB, &w->job, sizeof(w->job), r->data,
			   sizeof(r->data));
	buf = uv_buf_init((char *)r->data, (unsigned)n);
	rc = uv_write(&r->req, (uv_stream_t *)&w->wp->pipe, &buf, 1, write_cb);
	if (rc < 0) {
		free(r);
		flyd_log(FLYD_LOG_WARN, "worker_write_failed", "error=%s",
			 uv_strerror(rc));
		wproc_kill(w->wp);
		return;
	}
	w->job_sent = 1;
	w->timed_out = 0;
	arm_cand_timer(w, setup_timeout_s(w));
}

/* The job ends: done() with the collected trials. */
static void job_finish(struct flyd_worker *w, struct flyd_tune_result *r)
{
	r->trials = w->trials;
	r->ntrials = w->ntrials;
	w->busy = 0;
	w->job_sent = 0;
	w->has_cur = 0;
	uv_timer_stop(&w->cand_timer);
	if (w->done_cb != NULL)
		w->done_cb(w->ctx, r);
}

static void death_reason(const struct flyd_worker *w, const struct wproc *wp,
			 char *buf, size_t cap)
{
	const char *sig;

	if (w->timed_out && !w->has_cur) {
		snprintf(buf, cap, "setup timed out after %.1f s",
			 setup_timeout_s(w));
	} else if (w->timed_out) {
		snprintf(buf, cap, "timed out after %.1f s", w->cand_timeout_s);
	} else if (wp->term_signal != 0) {
		sig = sigabbrev_np(wp->term_signal);
		if (sig != NULL)
			snprintf(buf, cap, "worker killed by SIG%s", sig);
		else
			snprintf(buf, cap, "worker killed by signal %d",
				 wp->term_signal);
	} else {
		snprintf(buf, cap, "worker exited with status %lld",
			 (long long)wp->exit_status);
	}
}

/* The child is gone (exited and drained): fault the job in flight and
 * restart. */
static void child_died(struct flyd_worker *w, struct wproc *wp)
{
	struct flyd_tune_result r;
	char why[FLYD_REASON_MAX];

	uv_timer_stop(&w->cand_timer);
	death_reason(w, wp, why, sizeof(why));
	flyd_log(w->stopping ? FLYD_LOG_INFO : FLYD_LOG_WARN, "worker_died",
		 "pid=%d reason=\"%s\" busy=%d", wp->pid, why, w->busy);
	if (w->stopping)
		return;
	if (wp->ready && w->job_sent)
		w->nbackoff = 0; /* a candidate's fault, not a crash loop */
	if (w->busy && w->job_sent) {
		memset(&r, 0, sizeof(r));
		snprintf(r.key, sizeof(r.key), "%s", w->job.key);
		r.rc = -ECHILD;
		if (w->has_cur) {
			struct flyd_trial t = w->cur;

			t.outcome = FLYD_OUT_FAULTED;
			snprintf(t.reason, sizeof(t.reason), "%s", why);
			trial_push(w, &t);
		}
		job_finish(w, &r);
		if (w->stopping)
			return;
	}
	w->timed_out = 0;
	schedule_restart(w);
}

/* ---------------------------------------------------------- records */

static void on_ready(struct flyd_worker *w, struct wproc *wp,
		     const struct flyd_wp_ready *m)
{
	char fpr[FLYD_WP_FPR_MAX], be[FLYD_WP_BACKEND_MAX];

	if (m->rc < 0) {
		w->open_fails++;
		flyd_log(FLYD_LOG_ERR, "worker_backend_failed",
			 "backend=%s rc=%d in_a_row=%d", w->backend, m->rc,
			 w->open_fails);
		return; /* the child exits; restarts back off */
	}
	w->open_fails = 0;
	wp->ready = 1;
	flyd_registry_move(&w->reg, &wp->reg);
	snprintf(fpr, sizeof(fpr), "%s", m->fingerprint);
	snprintf(be, sizeof(be), "%s", m->backend);
	if (w->ready_cb != NULL)
		w->ready_cb(w->ctx, be, fpr);
	if (!w->stopping && w->busy && !w->job_sent && w->wp == wp)
		send_job(w);
}

static void on_result(struct flyd_worker *w, const struct flyd_wp_result *m)
{
	struct flyd_tune_result r;

	memset(&r, 0, sizeof(r));
	memcpy(r.key, m->key, sizeof(r.key));
	r.key[FLY_KEY_MAX - 1] = '\0';
	r.rc = m->rc;
	r.winner = m->winner;
	r.mad_us = m->mad_us;
	r.tune_s = m->tune_s;
	r.ncandidates = m->ncandidates;
	r.ninfeasible = m->ninfeasible;
	r.nexcluded = m->nexcluded;
	r.nunmeasured = m->nunmeasured;
	r.budget_hit = m->budget_hit;
	r.setup_s = m->setup_s;
	r.over_s = m->over_s;
	if (m->ntrials != w->ntrials)
		flyd_log(FLYD_LOG_WARN, "worker_trials_mismatch",
			 "key=%s sent=%u got=%zu", r.key, m->ntrials,
			 w->ntrials);
	w->nbackoff = 0;
	job_finish(w, &r);
}

/* A candidate's final trial; it is no longer the one in flight. */
static void on_trial(struct flyd_worker *w, const struct flyd_trial *t)
{
	if (trial_push(w, t) < 0)
		flyd_log(FLYD_LOG_ERR, "worker_oom", "trials=%zu", w->ntrials);
	if (w->has_cur &&
	    flyd_trial_same(&w->cur, t->variant, t->params, t->nparams))
		w->has_cur = 0;
}

/* Dispatch one record.  @return 0, or FLY_E_PROTO (kill the child). */
static int on_record(struct flyd_worker *w, struct wproc *wp,
		     const struct flyd_wp_hdr *h, const void *p)
{
	switch (h->type) {
	case FLYD_WP_READY:
		on_ready(w, wp, p);
		return 0;
	case FLYD_WP_VARIANT:
		if (wp->ready || flyd_registry_add(&wp->reg, p) < 0)
			return FLY_E_PROTO;
		return 0;
	case FLYD_WP_START:
		if (!w->job_sent)
			return FLY_E_PROTO;
		memcpy(&w->cur, p, sizeof(w->cur));
		w->has_cur = 1;
		arm_cand_timer(w, w->cand_timeout_s);
		return 0;
	case FLYD_WP_TRIAL:
		if (!w->job_sent)
			return FLY_E_PROTO;
		on_trial(w, p);
		return 0;
	case FLYD_WP_RESULT:
		if (!w->job_sent)
			return FLY_E_PROTO;
		on_result(w, p);
		return 0;
	default:
		return FLY_E_PROTO;
	}
}

/* Consume every complete record in the read buffer. */
static void drain(struct wproc *wp)
{
	struct flyd_worker *w = wp->w;
	struct flyd_wp_hdr h;
	size_t off = 0;
	int64_t n;

	while (!w->stopping && w->wp == wp) {
		n = flyd_wp_parse(wp->rbuf + off, wp->rlen - off, &h);
		if (n == 0)
			break;
		if (n < 0 || on_record(w, wp, &h, wp->rbuf + off +
					FLYD_WP_HDR) < 0) {
			flyd_log(FLYD_LOG_ERR, "worker_proto", "pid=%d type=%u",
				 wp->pid, (unsigned)h.type);
			wproc_kill(wp);
			off = wp->rlen;
			break;
		}
		off += (size_t)n;
	}
	if (w->stopping || w->wp != wp)
		off = wp->rlen;
	memmove(wp->rbuf, wp->rbuf + off, wp->rlen - off);
	wp->rlen -= off;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct wproc *wp = h->data;
	size_t need = wp->rlen + 65536;

	if (need > wp->rcap) {
		uint8_t *n = realloc(wp->rbuf, need);

		if (n == NULL) {
			*buf = uv_buf_init(NULL, 0);
			return;
		}
		wp->rbuf = n;
		wp->rcap = need;
	}
	*buf = uv_buf_init((char *)wp->rbuf + wp->rlen,
			   (unsigned)(wp->rcap - wp->rlen));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct wproc *wp = s->data;

	if (nread > 0) {
		wp->rlen += (size_t)nread;
		drain(wp);
		return;
	}
	if (nread == 0)
		return;
	if (nread != UV_EOF)
		flyd_log(FLYD_LOG_WARN, "worker_read_failed", "pid=%d error=%s",
			 wp->pid, uv_strerror((int)nread));
	uv_read_stop(s);
	wp->eof = 1;
	if (!wp->exited)
		wproc_kill(wp); /* no pipe, no use: the exit follows */
	maybe_gone(wp);
}

static void exit_cb(uv_process_t *p, int64_t status, int term_signal)
{
	struct wproc *wp = p->data;

	wp->exited = 1;
	wp->exit_status = status;
	wp->term_signal = term_signal;
	maybe_gone(wp);
}

static void maybe_gone(struct wproc *wp)
{
	struct flyd_worker *w = wp->w;

	if (!wp->exited || !wp->eof)
		return;
	if (w->wp == wp) {
		w->wp = NULL;
		child_died(w, wp);
	}
	wproc_close(wp);
}

/* ---------------------------------------------------------- spawn */

static int spawn_child(struct flyd_worker *w)
{
	struct wproc *wp;
	uv_process_options_t o;
	uv_stdio_container_t io[4];
	char dev[16];
	char *args[8];
	int rc;

	wp = calloc(1, sizeof(*wp));
	if (wp == NULL)
		return -ENOMEM;
	wp->w = w;
	w->nwprocs++;
	uv_pipe_init(w->loop, &wp->pipe, 0);
	wp->pipe.data = wp;
	wp->proc.data = wp;
	wp->nopen = 2;
	snprintf(dev, sizeof(dev), "%d", w->device);
	args[0] = w->exe;
	args[1] = "--worker";
	args[2] = "--device";
	args[3] = dev;
	args[4] = "--backend";
	args[5] = w->backend;
	args[6] = NULL;
	memset(&o, 0, sizeof(o));
	memset(io, 0, sizeof(io));
	io[0].flags = UV_IGNORE;
	io[1].flags = UV_INHERIT_FD;
	io[1].data.fd = 1;
	io[2].flags = UV_INHERIT_FD;
	io[2].data.fd = 2;
	io[3].flags = UV_CREATE_PIPE | UV_READABLE_PIPE | UV_WRITABLE_PIPE;
	io[3].data.stream = (uv_stream_t *)&wp->pipe;
	o.file = w->exe;
	o.args = args;
	o.exit_cb = exit_cb;
	o.stdio = io;
	o.stdio_count = 4;
	rc = uv_spawn(w->loop, &wp->proc, &o);
	if (rc < 0) {
		/* Nothing runs; both handles are initialized: close them. */
		flyd_log(FLYD_LOG_ERR, "worker_spawn_failed", "exe=%s error=%s",
			 w->exe, uv_strerror(rc));
		wproc_close(wp);
		return rc;
	}
	wp->pid = wp->proc.pid;
	w->wp = wp;
	rc = uv_read_start((uv_stream_t *)&wp->pipe, alloc_cb, read_cb);
	if (rc < 0) {
		/* Running but unreachable: kill it; exit_cb ends it as a death
		 * (restart with backoff). */
		wp->eof = 1;
		wproc_kill(wp);
	}
	flyd_log(FLYD_LOG_INFO, "worker_spawned", "pid=%d device=%d backend=%s",
		 wp->pid, w->device, w->backend);
	return 0;
}

/* ---------------------------------------------------------- API */

int flyd_worker_start(uv_loop_t *loop, const struct flyd_worker_opts *o,
		      flyd_worker_ready_cb ready, flyd_job_done_cb done,
		      void *ctx, struct flyd_worker **out)
{
	struct flyd_worker *w;
	int rc;

	*out = NULL;
	if (loop == NULL || o == NULL || o->exe == NULL)
		return -EINVAL;
	signal(SIGPIPE, SIG_IGN);
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return -ENOMEM;
	w->loop = loop;
	w->exe = strdup(o->exe);
	w->backend = strdup(o->backend ? o->backend : "auto");
	w->device = o->device;
	w->cand_timeout_s = o->cand_timeout_s;
	w->setup_timeout_s = o->setup_timeout_s;
	w->max_restarts = o->max_restarts > 0 ? o->max_restarts : 5;
	w->ready_cb = ready;
	w->done_cb = done;
	w->ctx = ctx;
	uv_timer_init(loop, &w->cand_timer);
	uv_timer_init(loop, &w->restart_timer);
	w->cand_timer.data = w;
	w->restart_timer.data = w;
	w->ntimers = 2;
	rc = (w->exe && w->backend) ? spawn_child(w) : -ENOMEM;
	if (rc < 0) {
		flyd_worker_stop(w, NULL, NULL); /* freed after the closes */
		return rc;
	}
	*out = w;
	return 0;
}

int flyd_worker_submit(struct flyd_worker *w, const struct flyd_tune_job *j)
{
	if (w == NULL || j == NULL)
		return -EINVAL;
	if (w->busy || w->stopping)
		return -EBUSY;
	w->job = *j;
	w->job.key[FLY_KEY_MAX - 1] = '\0';
	w->busy = 1;
	w->job_sent = 0;
	w->ntrials = 0;
	w->has_cur = 0;
	if (w->wp != NULL && w->wp->ready)
		send_job(w);
	return 0;
}

void flyd_worker_cancel(struct flyd_worker *w)
{
	struct flyd_tune_result r;

	if (!w->busy || w->stopping)
		return;
	if (w->job_sent) {
		flyd_log(FLYD_LOG_INFO, "job_cancel", "key=%s pid=%d",
			 w->job.key, w->wp != NULL ? w->wp->pid : 0);
		wproc_kill(w->wp);
		return;
	}
	memset(&r, 0, sizeof(r));
	snprintf(r.key, sizeof(r.key), "%s", w->job.key);
	r.rc = -ECANCELED;
	job_finish(w, &r);
}

int flyd_worker_is_busy(const struct flyd_worker *w)
{
	return w->busy;
}

int flyd_worker_is_healthy(const struct flyd_worker *w)
{
	return !w->stopping && recent_restarts(w) < w->max_restarts;
}

int flyd_worker_is_ready(const struct flyd_worker *w)
{
	return w->wp != NULL && !w->wp->exited && w->wp->ready;
}

int flyd_worker_open_failures(const struct flyd_worker *w)
{
	return w->open_fails;
}

int flyd_worker_restarts(const struct flyd_worker *w)
{
	return w->restarts;
}

const struct flyd_registry *flyd_worker_registry(const struct flyd_worker *w)
{
	return w->reg.n > 0 ? &w->reg : NULL;
}

int flyd_worker_pid(const struct flyd_worker *w)
{
	return (w->wp != NULL && !w->wp->exited) ? w->wp->pid : 0;
}

void flyd_worker_stop(struct flyd_worker *w, void (*done)(void *), void *arg)
{
	if (w->stopping)
		return;
	w->stopping = 1;
	w->stop_cb = done;
	w->stop_arg = arg;
	uv_timer_stop(&w->cand_timer);
	uv_timer_stop(&w->restart_timer);
	uv_close((uv_handle_t *)&w->cand_timer, timer_close_cb);
	uv_close((uv_handle_t *)&w->restart_timer, timer_close_cb);
	/* The child goes with SIGKILL; its handles close once it is gone. */
	wproc_kill(w->wp);
}
