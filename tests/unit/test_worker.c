/*
 * test_worker.c -- the worker supervisor with a real uv loop and the real
 * worker process (`EXE --worker`, EXE = $FLY_WORKER_EXE or
 * FLY_BUILD_DIR/flytuned-test) on the CPU backend, with the faulty test
 * variants of kernels/testing (FLYK_TESTING_FAULTS=crash|hang|wrong);
 * plus the pipe records (worker_proto) and backend selection (backend.c).
 *
 * Deadlines below are safety nets against a stuck test, never timing
 * assertions.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "backend.h"
#include "flyk.h"
#include "store.h"
#include "tuner.h"
#include "worker.h"
#include "worker_proto.h"

#define WAIT_S 60.0

struct tctx {
	int nready;
	char backend[FLYD_WP_BACKEND_MAX];
	char fpr[FLYD_WP_FPR_MAX];
	int ndone;
	struct flyd_tune_result r;
	struct flyd_trial trials[1024];
	int stopped;
};

static const char *worker_exe(void)
{
	const char *e = getenv("FLY_WORKER_EXE");

	return e != NULL && *e ? e : FLY_BUILD_DIR "/flytuned-test";
}

static void on_ready(void *ctx, const char *backend, const char *fpr)
{
	struct tctx *t = ctx;

	t->nready++;
	snprintf(t->backend, sizeof(t->backend), "%s", backend);
	snprintf(t->fpr, sizeof(t->fpr), "%s", fpr);
}

static void on_done(void *ctx, const struct flyd_tune_result *r)
{
	struct tctx *t = ctx;
	size_t n = r->ntrials < 1024 ? r->ntrials : 1024;

	t->ndone++;
	t->r = *r;
	memcpy(t->trials, r->trials, n * sizeof(*r->trials));
	t->r.trials = t->trials;
	t->r.ntrials = n;
}

static void on_stopped(void *arg)
{
	((struct tctx *)arg)->stopped = 1;
}

static void tick_cb(uv_timer_t *t)
{
}

/* Run the loop until *flag >= want (or a generous safety deadline). */
static int wait_for(uv_loop_t *loop, const int *flag, int want)
{
	uv_timer_t tick;
	uint64_t end;

	uv_timer_init(loop, &tick);
	uv_timer_start(&tick, tick_cb, 20, 20);
	uv_update_time(loop);
	end = uv_now(loop) + (uint64_t)(WAIT_S * 1000);
	while (*flag < want && uv_now(loop) < end)
		uv_run(loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
	return *flag >= want;
}

static void job_init(struct flyd_tune_job *j)
{
	memset(j, 0, sizeof(*j));
	snprintf(j->key, sizeof(j->key), "rmsnorm/fp32/m=64,n=256");
	j->problem.op = FLY_OP_RMSNORM;
	j->problem.dtype = FLY_DT_FP32;
	j->problem.dims[0] = 64;
	j->problem.dims[1] = 256;
	/* Every candidate is checked before the timing rounds, so the
	 * faulty variants (last in order) run well within this budget; it
	 * only bounds the reps (slow sanitizer builds). */
	j->budget_s = 12;
	j->margin = 0.03;
}

/* Exclude every real (non-test_) candidate of the job but the first, so
 * a fault job reaches the faulty variants (last in candidate order) after
 * a handful of runs even in slow sanitizer builds. */
static void exclude_all_but_one(struct flyd_tune_job *j)
{
	const struct flyk_backend *b = flyk_cpu_backend();
	struct flyk_device *dev = NULL;
	int kept = 0;

	assert_int_equal(b->open(0, &dev), 0);

	for (size_t i = 0; i < b->nvariants; i++) {
		const struct flyk_variant *v = &b->variants[i];
		uint32_t idx[FLY_PARAMS_MAX] = { 0 };
		int k;

		if (!flyk_variant_supports(v, &j->problem) || v->is_reference ||
		    strncmp(v->name, "test_", 5) == 0 || v->enumerate != NULL)
			continue;
		do {
			struct flyd_trial *t = &j->exclude[j->nexclude];

			memset(t, 0, sizeof(*t));
			snprintf(t->variant, sizeof(t->variant), "%s", v->name);
			t->nparams = v->nparams;
			for (uint32_t p = 0; p < v->nparams; p++)
				t->params[p] = v->params[p].vals[idx[p]];
			if (v->feasible(dev, &j->problem, t->params) == 0 &&
			    kept++ > 0 && j->nexclude < FLYD_EXCLUDE_MAX - 1)
				j->nexclude++;
			for (k = (int)v->nparams - 1; k >= 0; k--) {
				if (++idx[k] < v->params[k].nvals)
					break;
				idx[k] = 0;
			}
		} while (k >= 0);
	}
	b->close(dev);
}

static const struct flyd_trial *find_variant(const struct tctx *t,
					     const char *v)
{
	for (size_t i = 0; i < t->r.ntrials; i++)
		if (strcmp(t->trials[i].variant, v) == 0)
			return &t->trials[i];
	return NULL;
}

static struct flyd_worker *start(uv_loop_t *loop, struct tctx *t,
				 double timeout_s)
{
	struct flyd_worker_opts o = {
		.exe = worker_exe(),
		.device = 0,
		.backend = "cpu",
		.cand_timeout_s = timeout_s,
		.max_restarts = 5,
	};
	struct flyd_worker *w = NULL;

	memset(t, 0, sizeof(*t));
	assert_int_equal(flyd_worker_start(loop, &o, on_ready, on_done, t, &w),
			 0);
	assert_non_null(w);
	assert_true(wait_for(loop, &t->nready, 1));
	assert_string_equal(t->backend, "cpu");
	assert_true(strlen(t->fpr) > 0);
	assert_true(flyd_worker_pid(w) > 0);
	return w;
}

static void stop(uv_loop_t *loop, struct flyd_worker *w, struct tctx *t)
{
	flyd_worker_stop(w, on_stopped, t);
	assert_true(wait_for(loop, &t->stopped, 1));
	uv_run(loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(loop), 0);
}

static void assert_completed(const struct tctx *t)
{
	assert_int_equal(t->r.rc, 0);
	assert_int_equal(t->r.winner.status, FLY_STATUS_TUNED);
	assert_true(strlen(t->r.winner.variant) > 0);
	assert_true(t->r.winner.median_us > 0);
	assert_true(t->r.ncandidates > 0);
	assert_int_equal(t->r.ntrials + t->r.nunmeasured, t->r.ncandidates);
	assert_string_equal(t->r.key, "rmsnorm/fp32/m=64,n=256");
}

static void test_job_completes(void **state)
{
	uv_loop_t loop;
	struct tctx t;
	struct flyd_tune_job j;
	struct flyd_worker *w;

	unsetenv("FLYK_TESTING_FAULTS");
	uv_loop_init(&loop);
	w = start(&loop, &t, 10.0);
	job_init(&j);
	assert_int_equal(flyd_worker_submit(w, &j), 0);
	assert_true(flyd_worker_is_busy(w));
	assert_int_equal(flyd_worker_submit(w, &j), -EBUSY);
	assert_true(wait_for(&loop, &t.ndone, 1));
	assert_false(flyd_worker_is_busy(w));
	assert_completed(&t);
	for (size_t i = 0; i < t.r.ntrials; i++) {
		assert_true(t.trials[i].outcome == FLYD_OUT_OK ||
			    t.trials[i].outcome == FLYD_OUT_REJECTED);
		assert_null(strstr(t.trials[i].variant, "test_"));
	}
	assert_int_equal(flyd_worker_restarts(w), 0);
	assert_true(flyd_worker_is_healthy(w));
	stop(&loop, w, &t);
}

/* A fault kills the worker mid-job; the resubmitted job skips it. */
static void fault_then_resubmit(const char *fault, const char *variant,
				const char *reason, double timeout_s)
{
	uv_loop_t loop;
	struct tctx t;
	struct flyd_tune_job j;
	struct flyd_worker *w;
	const struct flyd_trial *f;
	uint32_t nex;
	int pid1;

	setenv("FLYK_TESTING_FAULTS", fault, 1);
	uv_loop_init(&loop);
	w = start(&loop, &t, timeout_s);
	pid1 = flyd_worker_pid(w);
	job_init(&j);
	exclude_all_but_one(&j);
	assert_true(j.nexclude > 0);
	assert_int_equal(flyd_worker_submit(w, &j), 0);
	assert_true(wait_for(&loop, &t.ndone, 1));
	assert_int_equal(t.r.rc, -ECHILD);
	f = find_variant(&t, variant);
	assert_non_null(f);
	assert_int_equal(f->outcome, FLYD_OUT_FAULTED);
	assert_string_equal(f->reason, reason);
	assert_false(flyd_worker_is_busy(w));

	/* Restarted; the daemon re-queues with the candidate excluded. */
	assert_true(wait_for(&loop, &t.nready, 2));
	assert_int_equal(flyd_worker_restarts(w), 1);
	assert_true(flyd_worker_pid(w) > 0);
	assert_int_not_equal(flyd_worker_pid(w), pid1);
	nex = j.nexclude;
	j.exclude[j.nexclude++] = *f;
	assert_int_equal(flyd_worker_submit(w, &j), 0);
	assert_true(wait_for(&loop, &t.ndone, 2));
	assert_completed(&t);
	assert_int_equal(t.r.nexcluded, nex + 1);
	assert_null(find_variant(&t, variant));
	assert_true(flyd_worker_is_healthy(w));
	stop(&loop, w, &t);
	unsetenv("FLYK_TESTING_FAULTS");
}

static void test_crash_faulted_and_restarted(void **state)
{
	/* Under ASan the child must die of the signal, not report it. */
	setenv("ASAN_OPTIONS", "handle_segv=0:detect_leaks=0", 1);
	fault_then_resubmit("crash", "test_crash", "worker killed by SIGSEGV",
			    10.0);
}

static void test_hang_timed_out_and_restarted(void **state)
{
	fault_then_resubmit("hang", "test_hang", "timed out after 1.0 s", 1.0);
}

static void test_wrong_recorded(void **state)
{
	uv_loop_t loop;
	struct tctx t;
	struct flyd_tune_job j;
	struct flyd_worker *w;
	const struct flyd_trial *f;

	setenv("FLYK_TESTING_FAULTS", "wrong", 1);
	uv_loop_init(&loop);
	w = start(&loop, &t, 10.0);
	job_init(&j);
	exclude_all_but_one(&j);
	assert_int_equal(flyd_worker_submit(w, &j), 0);
	assert_true(wait_for(&loop, &t.ndone, 1));
	assert_completed(&t);
	f = find_variant(&t, "test_wrong");
	assert_non_null(f);
	assert_int_equal(f->outcome, FLYD_OUT_WRONG);
	assert_non_null(strstr(f->reason, "max err"));
	assert_string_not_equal(t.r.winner.variant, "test_wrong");
	assert_int_equal(flyd_worker_restarts(w), 0);
	stop(&loop, w, &t);
	unsetenv("FLYK_TESTING_FAULTS");
}

/* Stopping with a job in flight (a hanging candidate) kills the child,
 * closes everything and does not report the job. */
static void test_stop_while_busy(void **state)
{
	uv_loop_t loop;
	struct tctx t;
	struct flyd_tune_job j;
	struct flyd_worker *w;

	setenv("FLYK_TESTING_FAULTS", "hang", 1);
	uv_loop_init(&loop);
	w = start(&loop, &t, 30.0);
	job_init(&j);
	assert_int_equal(flyd_worker_submit(w, &j), 0);
	uv_run(&loop, UV_RUN_NOWAIT);
	stop(&loop, w, &t);
	assert_int_equal(t.ndone, 0);
	unsetenv("FLYK_TESTING_FAULTS");
}

/* A job submitted before READY waits for it; a peer that writes garbage
 * on the pipe is killed and restarted, never trusted. */
static void test_submit_before_ready(void **state)
{
	uv_loop_t loop;
	struct tctx t;
	struct flyd_tune_job j;
	struct flyd_worker *w = NULL;
	struct flyd_worker_opts o = {
		.exe = worker_exe(), .backend = "cpu", .cand_timeout_s = 10,
		.max_restarts = 5,
	};

	unsetenv("FLYK_TESTING_FAULTS");
	memset(&t, 0, sizeof(t));
	uv_loop_init(&loop);
	assert_int_equal(flyd_worker_start(&loop, &o, on_ready, on_done, &t,
					   &w), 0);
	job_init(&j);
	exclude_all_but_one(&j);
	assert_int_equal(t.nready, 0);
	assert_int_equal(flyd_worker_submit(w, &j), 0);
	assert_true(wait_for(&loop, &t.ndone, 1));
	assert_int_equal(t.nready, 1);
	assert_completed(&t);
	assert_int_equal(t.r.ncandidates, 1);
	stop(&loop, w, &t);
}

static void test_garbage_peer_killed(void **state)
{
	uv_loop_t loop;
	struct tctx t;
	struct flyd_worker *w = NULL;
	char exe[] = "/tmp/flyd-garbage-XXXXXX";
	struct flyd_worker_opts o = {
		.exe = exe, .backend = "cpu", .cand_timeout_s = 1,
		.max_restarts = 5,
	};
	uv_timer_t tick;
	uint64_t end;
	FILE *f;
	int fd;

	fd = mkstemp(exe);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	/* Garbage on fd 3, then a long sleep: only a kill ends it. */
	fputs("#!/bin/sh\necho 'not a record, not at all' >&3\n"
	      "exec sleep 300\n", f);
	fclose(f);
	assert_int_equal(chmod(exe, 0700), 0);
	memset(&t, 0, sizeof(t));
	uv_loop_init(&loop);
	assert_int_equal(flyd_worker_start(&loop, &o, on_ready, on_done, &t,
					   &w), 0);
	uv_timer_init(&loop, &tick);
	uv_timer_start(&tick, tick_cb, 20, 20);
	end = uv_now(&loop) + (uint64_t)(WAIT_S * 1000);
	while (flyd_worker_restarts(w) < 1 && uv_now(&loop) < end)
		uv_run(&loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&tick, NULL);
	assert_true(flyd_worker_restarts(w) >= 1);
	assert_int_equal(t.nready, 0);
	stop(&loop, w, &t);
	unlink(exe);
}

/* A worker that dies at once, every time: restarts back off, and after
 * max_restarts within 60 s the worker is degraded. */
static void test_crash_loop_degraded(void **state)
{
	uv_loop_t loop;
	struct tctx t;
	struct flyd_worker *w = NULL;
	struct flyd_worker_opts o = {
		.exe = "/bin/false", .backend = "cpu", .cand_timeout_s = 1,
		.max_restarts = 2,
	};
	uv_timer_t tick;
	uint64_t end;

	memset(&t, 0, sizeof(t));
	uv_loop_init(&loop);
	assert_int_equal(flyd_worker_start(&loop, &o, on_ready, on_done, &t,
					   &w), 0);
	assert_true(flyd_worker_is_healthy(w));
	uv_timer_init(&loop, &tick);
	uv_timer_start(&tick, tick_cb, 20, 20);
	end = uv_now(&loop) + (uint64_t)(WAIT_S * 1000);
	while (flyd_worker_restarts(w) < 2 && uv_now(&loop) < end)
		uv_run(&loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&tick, NULL);
	assert_int_equal(flyd_worker_restarts(w), 2);
	assert_false(flyd_worker_is_healthy(w));
	assert_int_equal(t.nready, 0);
	stop(&loop, w, &t);
}

static void test_spawn_failure(void **state)
{
	uv_loop_t loop;
	struct tctx t;
	struct flyd_worker *w = (struct flyd_worker *)&t;
	struct flyd_worker_opts o = {
		.exe = "/nonexistent/flytuned", .backend = "cpu",
		.cand_timeout_s = 1, .max_restarts = 2,
	};

	memset(&t, 0, sizeof(t));
	uv_loop_init(&loop);
	assert_true(flyd_worker_start(&loop, &o, on_ready, on_done, &t, &w) <
		    0);
	assert_null(w);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_proto_records(void **state)
{
	uint8_t buf[FLYD_WP_HDR + sizeof(struct flyd_trial)];
	struct flyd_trial t, back;
	struct flyd_wp_hdr h;
	int n;

	memset(&t, 0, sizeof(t));
	snprintf(t.variant, sizeof(t.variant), "rows");
	t.nparams = 2;
	t.params[1] = 7;
	n = flyd_wp_encode(FLYD_WP_TRIAL, &t, sizeof(t), buf, sizeof(buf));
	assert_int_equal(n, sizeof(buf));
	assert_int_equal(flyd_wp_parse(buf, 10, &h), 0);
	assert_int_equal(flyd_wp_parse(buf, sizeof(buf) - 1, &h), 0);
	assert_int_equal(flyd_wp_parse(buf, sizeof(buf), &h), sizeof(buf));
	assert_int_equal(h.type, FLYD_WP_TRIAL);
	memcpy(&back, buf + FLYD_WP_HDR, sizeof(back));
	assert_true(flyd_trial_same(&back, "rows", t.params, 2));
	assert_int_equal(flyd_wp_encode(FLYD_WP_TRIAL, &t, 3, buf,
					sizeof(buf)), -EINVAL);
	buf[0] ^= 0xff;
	assert_int_equal(flyd_wp_parse(buf, sizeof(buf), &h), FLY_E_PROTO);
	buf[0] ^= 0xff;
	buf[8] ^= 1; /* wrong length for the type */
	assert_int_equal(flyd_wp_parse(buf, sizeof(buf), &h), FLY_E_PROTO);
}

static void test_proto_fd(void **state)
{
	int fds[2];
	struct flyd_wp_ready m = { .rc = -5 }, back;
	struct flyd_wp_hdr h;

	assert_int_equal(pipe(fds), 0);
	assert_int_equal(flyd_wp_write(fds[1], FLYD_WP_READY, &m, sizeof(m)),
			 0);
	assert_int_equal(flyd_wp_write(fds[1], FLYD_WP_READY, &m, 4), -EINVAL);
	close(fds[1]);
	assert_int_equal(flyd_wp_read(fds[0], &h, &back, sizeof(back)), 0);
	assert_int_equal(h.type, FLYD_WP_READY);
	assert_int_equal(back.rc, -5);
	assert_int_equal(flyd_wp_read(fds[0], &h, &back, sizeof(back)), -EPIPE);
	close(fds[0]);
}

static void test_backend_select(void **state)
{
	struct flyd_backend be;
	char dir[] = "/tmp/flyd-be-XXXXXX", path[512], found[512];
	FILE *f;

	assert_int_equal(flyd_backend_open("bogus", 0, &be), -EINVAL);
	assert_int_equal(flyd_backend_open("cpu", 0, &be), 0);
	assert_string_equal(be.kb->name, "cpu");
	assert_non_null(be.dev);
	assert_null(be.dl);
	flyd_backend_close(&be);

	assert_non_null(mkdtemp(dir));
	setenv("FLYTUNED_KERNELS_DIR", dir, 1);
	/* No GPU library anywhere on the search path of this test binary. */
	if (flyd_backend_find("libflykernels_cuda.so", found,
			      sizeof(found)) == -ENOENT)
		assert_true(flyd_backend_open("cuda", 0, &be) < 0);
	assert_int_equal(flyd_backend_open("auto", 0, &be), 0);
	assert_non_null(be.kb);
	flyd_backend_close(&be);
	/* $FLYTUNED_KERNELS_DIR comes first; a file that is no library
	 * does not load: explicit is an error, auto falls back to cpu. */
	snprintf(path, sizeof(path), "%s/libflykernels_hip.so", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("not an ELF\n", f);
	fclose(f);
	assert_int_equal(flyd_backend_find("libflykernels_hip.so", found,
					   sizeof(found)), 0);
	assert_string_equal(found, path);
	assert_int_equal(flyd_backend_open("hip", 0, &be), -ENOENT);
	assert_int_equal(flyd_backend_open("auto", 0, &be), 0);
	flyd_backend_close(&be);
	unlink(path);
	rmdir(dir);
	unsetenv("FLYTUNED_KERNELS_DIR");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proto_records),
		cmocka_unit_test(test_proto_fd),
		cmocka_unit_test(test_backend_select),
		cmocka_unit_test(test_job_completes),
		cmocka_unit_test(test_crash_faulted_and_restarted),
		cmocka_unit_test(test_hang_timed_out_and_restarted),
		cmocka_unit_test(test_wrong_recorded),
		cmocka_unit_test(test_stop_while_busy),
		cmocka_unit_test(test_submit_before_ready),
		cmocka_unit_test(test_garbage_peer_killed),
		cmocka_unit_test(test_crash_loop_degraded),
		cmocka_unit_test(test_spawn_failure),
	};

	return cmocka_run_group_tests_name("worker", tests, NULL, NULL);
}
