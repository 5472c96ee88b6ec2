/*
 * worker_main.c -- the worker process: `flytuned --worker --device N
 * --backend B [--max-reps R]`.  Opens the backend, reports READY on fd 3,
 * then runs one job at a time, streaming START/TRIAL records and the
 * RESULT (worker_proto.h), until EOF on fd 3.
 *
 * Owns: the backend, its device and the job's benchmark case.  Dies with
 * the daemon (PR_SET_PDEATHSIG), so a hung candidate never lingers.
 * Thread: single-threaded process.  A candidate that crashes or hangs
 * takes this process down; the supervisor (worker.c) attributes it to the
 * last START record.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "log.h"
#include "tuner.h"
#include "worker.h"
#include "worker_proto.h"

/* kernels/testing (flytuned-test only; NULL in the production daemon):
 * makes a marked job's case set-up crash on demand. */
extern void flyk_testing_setup_fault(const struct fly_problem *p)
	__attribute__((weak));
/* kernels/testing: < 0 where the device is to be lost at open (the
 * worker's backend open fails as on a GPU gone: RELIABILITY.md F11). */
extern int flyk_testing_open_fault(void) __attribute__((weak));

struct wm_args {
	int device;
	const char *backend;
	int max_reps;  /* 0: per-backend default */
};

static int parse_args(int argc, char **argv, struct wm_args *a)
{
	a->device = 0;
	a->backend = "auto";
	a->max_reps = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--worker") == 0)
			continue;
		if (i + 1 >= argc)
			return -EINVAL;
		if (strcmp(argv[i], "--device") == 0)
			a->device = atoi(argv[++i]);
		else if (strcmp(argv[i], "--backend") == 0)
			a->backend = argv[++i];
		else if (strcmp(argv[i], "--max-reps") == 0)
			a->max_reps = atoi(argv[++i]);
		else
			return -EINVAL;
	}
	return 0;
}

/* A write to the daemon failed: it is gone, so are we. */
static void send_or_exit(uint32_t type, const void *p, uint32_t len)
{
	if (flyd_wp_write(FLYD_WP_FD, type, p, len) < 0)
		_exit(0);
}

static void on_start(void *ctx, const struct flyd_trial *t)
{
	send_or_exit(FLYD_WP_START, t, sizeof(*t));
}

static void on_trial(void *ctx, const struct flyd_trial *t)
{
	send_or_exit(FLYD_WP_TRIAL, t, sizeof(*t));
}

static void send_result(const struct flyd_tune_result *r)
{
	struct flyd_wp_result m;

	memset(&m, 0, sizeof(m));
	memcpy(m.key, r->key, sizeof(m.key));
	m.rc = r->rc;
	m.budget_hit = r->budget_hit;
	m.winner = r->winner;
	m.mad_us = r->mad_us;
	m.tune_s = r->tune_s;
	m.ntrials = (uint32_t)r->ntrials;
	m.ncandidates = r->ncandidates;
	m.ninfeasible = r->ninfeasible;
	m.nexcluded = r->nexcluded;
	m.nunmeasured = r->nunmeasured;
	m.setup_s = r->setup_s;
	m.over_s = r->over_s;
	send_or_exit(FLYD_WP_RESULT, &m, sizeof(m));
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One job on a fresh case seeded from the key (setup_s in its log line:
 * the case's inputs and reference, before the tuner's tune_s). */
static void run_job(struct flyd_backend *be, const struct wm_args *a,
		    struct flyd_tune_job *j, uint64_t *ops_seen)
{
	struct flyd_tuner_opts o;
	struct flyd_tune_result r;
	struct flyk_case *c = NULL;
	int rc;

	j->key[FLY_KEY_MAX - 1] = '\0';
	flyd_tuner_opts_init(&o);
	o.max_reps = a->max_reps > 0 ? a->max_reps
		     : be->kb->kind == FLYK_BACKEND_CPU ? 30 : 50;
	o.on_start = on_start;
	o.on_trial = on_trial;
	/* this process's first job of the op: its first check pays the
	 * op's one-time costs (tuner.h) */
	if (j->problem.op < 64) {
		o.first_of_op = !(*ops_seen & (1ull << j->problem.op));
		*ops_seen |= 1ull << j->problem.op;
	}
	if (flyk_testing_setup_fault != NULL)
		flyk_testing_setup_fault(&j->problem);
	double t0 = mono_s();
	o.job_start = t0; /* job->max_s counts the setup (tuner.h) */
	rc = be->kb->case_new(be->dev, &j->problem, flyd_tuner_seed(j->key),
			      &c);
	double setup_s = mono_s() - t0;
	if (rc < 0) {
		memset(&r, 0, sizeof(r));
		memcpy(r.key, j->key, sizeof(r.key));
		r.rc = rc;
		flyd_log(FLYD_LOG_WARN, "case_failed", "key=%s rc=%d", j->key,
			 rc);
		send_result(&r);
		return;
	}
	flyd_tuner_run(be->kb, be->dev, c, j, &o, &r);
	be->kb->case_free(c);
	flyd_log(FLYD_LOG_INFO, "job_done",
		 "key=%s rc=%d winner=%s candidates=%u trials=%zu setup_s=%.3f "
		 "tune_s=%.3f list_s=%.3f first_s=%.3f over_s=%.4f "
		 "checks_s=%.4f owed_est_s=%.4f owed_wall_s=%.4f "
		 "miss_max_s=%.4f",
		 j->key, r.rc, r.rc == 0 ? r.winner.variant : "-",
		 r.ncandidates, r.ntrials, setup_s, r.tune_s, r.list_s,
		 r.first_s, r.over_s, r.checks_s, r.owed_est_s, r.owed_wall_s,
		 r.miss_max_s);
	send_result(&r);
	flyd_tune_result_fini(&r);
}

/* READY: the backend's name and fingerprint, or why it failed; on
 * success its registry first (one VARIANT record per variant). */
static void send_ready(const struct flyd_backend *be, int rc)
{
	struct flyd_wp_ready m;

	memset(&m, 0, sizeof(m));
	m.rc = rc;
	m.pid = (int32_t)getpid();
	if (rc == 0) {
		static struct flyd_reg_variant v;

		for (size_t i = 0; i < be->kb->nvariants; i++) {
			flyd_reg_variant_from(&be->kb->variants[i], &v);
			send_or_exit(FLYD_WP_VARIANT, &v, sizeof(v));
		}
		snprintf(m.backend, sizeof(m.backend), "%s", be->kb->name);
		if (be->kb->fingerprint(be->dev, m.fingerprint,
					sizeof(m.fingerprint)) < 0)
			m.fingerprint[0] = '\0';
	}
	send_or_exit(FLYD_WP_READY, &m, sizeof(m));
}

static void job_loop(struct flyd_backend *be, const struct wm_args *a)
{
	static struct flyd_tune_job job;
	struct flyd_wp_hdr h;
	uint64_t ops_seen = 0; /* ops this process has tuned (tuner.h) */
	int rc;

	for (;;) {
		rc = flyd_wp_read(FLYD_WP_FD, &h, &job, sizeof(job));
		if (rc == -EPIPE)
			return;
		if (rc < 0 || h.type != FLYD_WP_JOB) {
			flyd_log(FLYD_LOG_ERR, "worker_proto", "rc=%d type=%u",
				 rc, rc < 0 ? 0u : (unsigned)h.type);
			_exit(3);
		}
		run_job(be, a, &job, &ops_seen);
	}
}

int flyd_worker_main(int argc, char **argv)
{
	struct flyd_backend be;
	struct wm_args a;
	int fl, rc;

	flyd_log_set_source("worker");
	unsetenv("NOTIFY_SOCKET");
	signal(SIGPIPE, SIG_IGN);
	/* A hanging candidate must not outlive a daemon that died. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (parse_args(argc, argv, &a) < 0) {
		flyd_log(FLYD_LOG_ERR, "worker_usage",
			 "usage=\"--worker --device N --backend B\"");
		exit(2);
	}
	fl = fcntl(FLYD_WP_FD, F_GETFL);
	if (fl < 0) {
		flyd_log(FLYD_LOG_ERR, "worker_no_pipe", "fd=%d", FLYD_WP_FD);
		exit(2);
	}
	fcntl(FLYD_WP_FD, F_SETFL, fl & ~O_NONBLOCK);
	rc = flyk_testing_open_fault != NULL ? flyk_testing_open_fault() : 0;
	if (rc == 0)
		rc = flyd_backend_open(a.backend, a.device, &be);
	send_ready(&be, rc);
	if (rc < 0) {
		flyd_log(FLYD_LOG_ERR, "worker_backend_failed",
			 "backend=%s device=%d rc=%d", a.backend, a.device, rc);
		exit(2);
	}
	flyd_log(FLYD_LOG_INFO, "worker_ready", "backend=%s device=%d pid=%d",
		 be.kb->name, a.device, (int)getpid());
	job_loop(&be, &a);
	flyd_backend_close(&be);
	exit(0);
}
