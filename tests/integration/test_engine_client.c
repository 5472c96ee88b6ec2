/*
 * test_engine_client.c -- libflyclient driven the way a serving engine
 * drives it (issue 18, items 1 and 2): many threads deciding on one
 * shared client, forks, a daemon that is restarted or stopped for a
 * while, against the real daemon (flytuned-test, CPU backend).
 *
 * Contracts checked:
 *   - a client holds at most one mapping of the shm table, two while it
 *     swaps tables, however often it reconnects (counted in
 *     /proc/self/maps: the daemon's memfd is "flytuned-table");
 *   - once a key was answered `tuned`, no later answer of the same client
 *     (or of a fork child, which keeps the process cache) for that key is
 *     worse because a deadline was missed;
 *   - a missed deadline does not cost the connection: with the daemon
 *     alive (slow or stopped for a moment), the reconnect counter stays
 *     where it was.
 * And (item 15) what README.md says about finding the daemon:
 * fly_client_open(NULL, ...) uses $FLYTUNED_SOCKET, else
 * /run/flytuned/gpu0.sock (named by fly_client_errmsg when it is not
 * there), and the README's Python command line, run as written from a
 * directory laid out like the repository after `run` (./.state/gpu0.sock),
 * imports the package and answers from the daemon.
 * No assertion depends on how fast anything runs; the sanity checks
 * (socket errors happened, reconnects happened) make sure each test did
 * exercise the path it is about.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/daemon.h"
#include "flyclient.h"

#define TUNE_MS 120000 /* generous: a noisy 2-core box */
#define THREADS 16
#define RESTARTS 6

static const char *key_a = "rmsnorm/fp32/m=8,n=64";

/* The daemon of the running test; file-scope so the teardown can stop it
 * when an assertion ended the test early. */
static struct fly_test_daemon dm;

static void engines_join(void);

static void cleanup_dm(void)
{
	engines_join();
	if (dm.dir[0] == '\0')
		return;
	if (dm.pid > 0)
		fly_test_daemon_kill(&dm, SIGCONT); /* if left stopped */
	fly_test_daemon_cleanup(&dm);
	memset(&dm, 0, sizeof(dm));
}

static int teardown(void **state)
{
	(void)state;
	unsetenv("FLYTUNED_SOCKET");
	unsetenv("FLYCLIENT_LIB");
	cleanup_dm();
	return 0;
}

static void start(void)
{
	int rc;

	memset(&dm, 0, sizeof(dm));
	rc = fly_test_daemon_start(&dm, NULL, NULL);
	if (rc < 0)
		fly_test_daemon_print_log(&dm);
	assert_int_equal(rc, 0);
}

static struct fly_problem prob(const char *key)
{
	struct fly_problem p;

	assert_int_equal(fly_problem_from_key(key, &p), 0);
	return p;
}

/* A problem of its own per @p i (n is not bucketed): never tuned, so a
 * decide of it goes to the socket. */
static struct fly_problem prob_n(int i)
{
	struct fly_problem p = prob(key_a);

	p.dims[1] = 1000 + i;
	return p;
}

static fly_client *client(uint32_t timeout_ms)
{
	struct fly_client_opts o = { .socket_path = dm.sock,
				     .timeout_ms = timeout_ms };
	fly_client *c;

	assert_int_equal(fly_client_open_opts(&o, &c), 0);
	return c;
}

/* Mappings of the daemon's shm table in this process. */
static int table_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (f == NULL)
		return -errno;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strstr(line, "flytuned-table") != NULL)
			n++;
	fclose(f);
	return n;
}

/* Decide_wait until the daemon answers `tuned` (it may still be starting). */
static void wait_tuned(fly_client *c, const struct fly_problem *p,
		       struct fly_decision *d)
{
	struct timespec t0, t;
	int rc = -1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		rc = fly_decide_wait(c, p, fly_test_timeout(TUNE_MS), d);
		if (rc == 0)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > fly_test_timeout(TUNE_MS) / 1000)
			break;
		usleep(50000);
	}
	assert_int_equal(rc, 0);
	assert_int_equal(d->status, FLY_STATUS_TUNED);
}

/* Whether @p d is the tuned answer @p t (same variant and parameters). */
static int same_tuned(const struct fly_decision *d,
		      const struct fly_decision *t)
{
	return d->status == FLY_STATUS_TUNED &&
	       strcmp(d->variant, t->variant) == 0 &&
	       d->nparams == t->nparams &&
	       memcmp(d->params, t->params,
		      sizeof(d->params[0]) * d->nparams) == 0;
}

/* One engine thread: decides the tuned key and keys of its own (socket
 * traffic) until told to stop; counts answers worse than tuned. */
struct engine {
	fly_client *c;
	struct fly_decision tuned; /* a copy: outlives the test's frame */
	int base;
	long calls;
	long worse;
	long errors;
};

/* File-scope: an assertion that ends a test early leaves them running
 * until the teardown joins them. */
static struct engine eng[THREADS];
static pthread_t eng_th[THREADS];
static atomic_int eng_stop;
static int eng_running;

static void *engine_main(void *arg)
{
	struct engine *e = arg;
	struct fly_problem a = prob(key_a);

	for (int i = 0; !atomic_load(&eng_stop); i++) {
		struct fly_problem q = prob_n(e->base + i % 4096);
		struct fly_decision d;

		if (fly_decide(e->c, &a, &d) != 0)
			e->errors++;
		else if (!same_tuned(&d, &e->tuned))
			e->worse++;
		if (fly_decide(e->c, &q, &d) != 0)
			e->errors++;
		e->calls += 2;
	}
	return NULL;
}

static void engines_start(fly_client *c, const struct fly_decision *tuned)
{
	atomic_store(&eng_stop, 0);
	for (int i = 0; i < THREADS; i++) {
		eng[i] = (struct engine){ .c = c, .tuned = *tuned,
					  .base = 10000 * (i + 1) };
		assert_int_equal(pthread_create(&eng_th[i], NULL, engine_main,
						&eng[i]), 0);
		eng_running = i + 1;
	}
}

static void engines_join(void)
{
	atomic_store(&eng_stop, 1);
	for (int i = 0; i < eng_running; i++)
		pthread_join(eng_th[i], NULL);
	eng_running = 0;
}

/* Stop the engine threads and check what they saw. */
static void engines_stop(void)
{
	long calls = 0;

	engines_join();
	for (int i = 0; i < THREADS; i++) {
		assert_int_equal(eng[i].errors, 0);
		assert_int_equal(eng[i].worse, 0);
		calls += eng[i].calls;
	}
	assert_true(calls > 0);
}

/* A fork child: the cached tuned answer survives the fork (the process
 * cache is kept), whatever state the daemon is in; the child makes its
 * own session and holds at most one table mapping.  Returns the child's
 * exit status: 0 ok, 1 a worse answer, 2 too many mappings. */
static int child_check(fly_client *c, const struct fly_decision *t,
		       int expect_connect)
{
	struct fly_problem a = prob(key_a);
	struct fly_decision d;
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (pid == 0) {
		for (int i = 0; i < 200; i++) {
			struct fly_problem q = prob_n(900000 + i);

			if (fly_decide(c, &a, &d) != 0 || !same_tuned(&d, t))
				_exit(1);
			fly_decide(c, &q, &d);
		}
		if (expect_connect &&
		    (fly_decide_wait(c, &a, fly_test_timeout(TUNE_MS), &d) != 0
		     || !same_tuned(&d, t)))
			_exit(1);
		if (table_mappings() > 1)
			_exit(2);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* Item 1: reconnects to a restarted daemon swap the table; the old one is
 * unmapped, so the count of mappings stays at one (two while swapping),
 * not one per reconnect; meanwhile the tuned key stays tuned in every
 * thread and in fork children. */
static void test_issue_18_mappings_bounded(void **state)
{
	struct fly_client_stats s0, s1;
	struct fly_problem a = prob(key_a);
	struct fly_decision t, d;
	fly_client *c;

	(void)state;
	start();
	c = client(5);
	wait_tuned(c, &a, &t);
	assert_int_equal(table_mappings(), 1);
	fly_client_stats_get(c, &s0);
	engines_start(c, &t);
	for (int i = 0; i < RESTARTS; i++) {
		int n;

		assert_int_equal(fly_test_daemon_kill(&dm, SIGKILL), 0);
		assert_int_equal(child_check(c, &t, 0), 0); /* daemon down */
		assert_int_equal(fly_test_daemon_restart(&dm), 0);
		wait_tuned(c, &a, &d); /* reconnected: a new table */
		assert_true(same_tuned(&d, &t));
		n = table_mappings();
		assert_true(n >= 1);
		assert_true(n <= 2);
		assert_int_equal(child_check(c, &t, 1), 0); /* daemon up */
	}
	engines_stop();
	fly_client_stats_get(c, &s1);
	assert_true(s1.reconnects >= s0.reconnects + RESTARTS);
	/* quiet now: one more call on the connection, and only the current
	 * table is left */
	wait_tuned(c, &a, &d);
	assert_int_equal(table_mappings(), 1);
	fly_client_close(c);
	assert_int_equal(table_mappings(), 0);
	cleanup_dm();
}

/* Item 2: with the daemon alive but too slow for the decide deadline
 * (stopped with SIGSTOP for a while, several times, so deadlines are
 * missed for sure), no thread and no fork child is ever answered worse
 * than tuned for the tuned key, and the client keeps its connection. */
static void test_issue_18_no_downgrade_when_slow(void **state)
{
	struct fly_client_stats s0, s1;
	struct fly_problem a = prob(key_a);
	struct fly_decision t, d;
	fly_client *c;

	(void)state;
	start();
	c = client(2);
	wait_tuned(c, &a, &t);
	fly_client_stats_get(c, &s0);
	engines_start(c, &t);
	for (int i = 0; i < 5; i++) {
		usleep(100000);
		assert_int_equal(fly_test_daemon_kill(&dm, SIGSTOP), 0);
		usleep(150000);
		assert_int_equal(child_check(c, &t, 0), 0);
		assert_int_equal(fly_test_daemon_kill(&dm, SIGCONT), 0);
	}
	usleep(100000);
	engines_stop();
	fly_client_stats_get(c, &s1);
	/* deadlines were missed (the test did what it says) ... */
	assert_true(s1.socket_errors > s0.socket_errors);
	/* ... and none of them cost the connection */
	assert_int_equal(s1.reconnects, s0.reconnects);
	/* the connection still answers */
	assert_int_equal(fly_decide_wait(c, &a, fly_test_timeout(TUNE_MS), &d),
			 0);
	assert_true(same_tuned(&d, &t));
	fly_client_stats_get(c, &s1);
	assert_int_equal(s1.reconnects, s0.reconnects);
	fly_client_close(c);
	cleanup_dm();
}

/* The line of README.md that starts with @p prefix, or NULL. */
static char *readme_line(const char *prefix)
{
	FILE *f = fopen(FLY_SRC_DIR "/README.md", "r");
	char line[1024], *found = NULL;

	assert_non_null(f);
	while (found == NULL && fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, prefix, strlen(prefix)) == 0) {
			line[strcspn(line, "\n")] = '\0';
			found = strdup(line);
		}
	fclose(f);
	return found;
}

/* Run @p cmd with sh in @p dir; its output (stdout and stderr) in @p out.
 * @return its exit status, or -1. */
static int run_in(const char *dir, const char *cmd, char *out, size_t cap)
{
	char *full;
	size_t n = 0;
	FILE *p;
	int st;

	assert_true(asprintf(&full, "cd '%s' && %s 2>&1", dir, cmd) > 0);
	p = popen(full, "r");
	free(full);
	assert_non_null(p);
	while (n + 1 < cap && fgets(out + n, (int)(cap - n), p) != NULL)
		n += strlen(out + n);
	out[n] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Item 15: the README's account of how a client finds the daemon. */
static void test_issue_18_readme_client(void **state)
{
	const char *key = "rmsnorm/fp32/m=64,n=4096";
	struct fly_problem p = prob(key);
	struct fly_decision t, d;
	char dir[] = "/tmp/fly-readme-XXXXXX", path[512], out[4096];
	char *line;
	fly_client *c;
	int rc;

	(void)state;
	start();
	/* fly_client_open(NULL, ...) with $FLYTUNED_SOCKET: the daemon */
	assert_int_equal(setenv("FLYTUNED_SOCKET", dm.sock, 1), 0);
	assert_int_equal(fly_client_open(NULL, &c), 0);
	wait_tuned(c, &p, &t);
	fly_client_close(c);
	/* without it: /run/flytuned/gpu0.sock, named when it is missing */
	assert_int_equal(unsetenv("FLYTUNED_SOCKET"), 0);
	assert_int_equal(fly_client_open(NULL, &c), 0);
	assert_int_equal(fly_decide(c, &p, &d), 0);
	if (access("/run/flytuned/gpu0.sock", F_OK) != 0) {
		assert_int_equal(d.status, FLY_STATUS_DEFAULT);
		assert_non_null(strstr(fly_client_errmsg(c),
				       "/run/flytuned/gpu0.sock"));
	}
	fly_client_close(c);

	/* the Python line, as written, from a directory laid out like the
	 * repository after `run`: client/ and .state/gpu0.sock */
	line = readme_line("FLYTUNED_SOCKET=$PWD/.state/gpu0.sock "
			   "PYTHONPATH=client/python python3 -c ");
	assert_non_null(line);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* python cannot load a libflyclient.so built with this sanitizer
	 * (its runtime must come first); test_python.py covers it there */
	free(line);
	cleanup_dm();
	return;
#endif
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/client", dir);
	assert_int_equal(symlink(FLY_SRC_DIR "/client", path), 0);
	snprintf(path, sizeof(path), "%s/.state", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/.state/gpu0.sock", dir);
	assert_int_equal(symlink(dm.sock, path), 0);
	/* the library of this build (the README's line leaves it to the
	 * package's search, which would find the tree's build/) */
	assert_int_equal(setenv("FLYCLIENT_LIB",
				FLY_BUILD_DIR "/libflyclient.so", 1), 0);
	rc = run_in(dir, line, out, sizeof(out));
	unsetenv("FLYCLIENT_LIB");
	free(line);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	if (system(path) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	if (rc != 0)
		fprintf(stderr, "README python line: exit %d:\n%s\n", rc, out);
	assert_int_equal(rc, 0);
	/* answered from the daemon: the key tuned above */
	assert_non_null(strstr(out, "'status': 'tuned'"));
	assert_non_null(strstr(out, t.variant));
	cleanup_dm();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_issue_18_mappings_bounded,
					  teardown),
		cmocka_unit_test_teardown(test_issue_18_no_downgrade_when_slow,
					  teardown),
		cmocka_unit_test_teardown(test_issue_18_readme_client,
					  teardown),
	};

	signal(SIGPIPE, SIG_DFL); /* the library must never raise it */
	return cmocka_run_group_tests_name("engine_client", tests, NULL, NULL);
}
