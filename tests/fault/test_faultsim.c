/*
 * test_faultsim.c -- the Nth-call failure sweep (issue 21 item 1,
 * RELIABILITY.md F6, F7): the scenario "start, decide, tune and commit,
 * stop" runs against a daemon under tests/fault/faultsim.c (LD_PRELOAD)
 * with call N failing, for N = 1, 2, ... until the scenario runs without
 * reaching call N.  At every N:
 *
 *   - no crash: the daemon never dies by a signal, and a daemon that
 *     exits on its own exits with a code and an err/crit log line (in
 *     the alloc sweep an abort() on an allocation failure is the
 *     daemon's and libuv's policy, STYLE.md R7: counted apart; a failed
 *     assert is not);
 *   - no hang: start-up, each request and the stop end within their
 *     timeouts (a reply, an error reply, or the connection closed);
 *   - no acknowledged winner lost: a winner the tune answered is there,
 *     unchanged, after a restart without faults, and the DB passes
 *     integrity_check.
 *
 * The io sweep runs twice: from an empty state directory, and as a
 * restart on a DB that already holds an acknowledged winner (a transient
 * error at open must not cost it).  Classes: "io" (open, read, write, pread/pwrite, writev, fsync,
 * fdatasync, sendmsg, recvmsg, mmap, memfd_create) every N;
 * "alloc" (malloc, calloc, realloc) every $FAULTSIM_STRIDE_ALLOC-th N
 * (default 10; 1 for the full sweep).  $FAULTSIM_ONLY=io|io_restart|alloc
 * runs one sweep, $FAULTSIM_FIRST_N starts it later.  $FAULTSIM_PERSIST=1 makes every
 * call from the Nth on fail.  Run by `make faultsim`, not by `make test`.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "../common/daemon.h"

#define KEY "rmsnorm/fp32/m=8,n=256"

struct tally {
	long runs, injected, start_exits, answered, errors, closed, acked;
	long stop_nonzero;
	long oom_aborts; /* SIGABRT on an allocation failure (R7, libuv) */
};

static int env_int(const char *name, int def)
{
	const char *s = getenv(name);

	return s != NULL && *s != '\0' ? atoi(s) : def;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (f == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	n = (long)fread(buf, 1, (size_t)n, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static long count_of(const char *text, const char *needle)
{
	long n = 0;

	for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
		n++;
	return n;
}

/* An abort on an allocation failure is the daemon's policy (STYLE.md R7:
 * flyd_xmalloc aborts and logs the size) and libuv's (uv__malloc users
 * abort on NULL): accepted in the alloc sweep, counted apart.  A failed
 * assert() is not (glibc writes "Assertion" to stderr first). */
static int oom_abort(const char *cls, int status, const char *log)
{
	return strcmp(cls, "alloc") == 0 && status == 128 + SIGABRT &&
	       log != NULL && strstr(log, "Assertion") == NULL;
}

/* A daemon that stopped on its own said why: an err or crit line. */
static int logged_error(const char *log)
{
	return strstr(log, " err ") != NULL || strstr(log, " crit ") != NULL;
}

static void fail_run(struct fly_test_daemon *d, long n, const char *cls,
		     const char *what)
{
	fly_test_daemon_print_log(d);
	fail_msg("faultsim %s N=%ld: %s", cls, n, what);
}

/* One request; 1 ok reply (*out kept), 0 error reply, -1 closed. */
static int ask(int fd, const char *json, int ms, cJSON **out)
{
	char *resp = NULL;
	cJSON *o;
	int rc = fly_test_request(fd, json, &resp, ms);

	*out = NULL;
	if (rc == -ETIMEDOUT)
		return -2;
	if (rc != 0)
		return -1;
	o = cJSON_Parse(resp);
	free(resp);
	if (o == NULL)
		return -1;
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok"))) {
		*out = o;
		return 1;
	}
	cJSON_Delete(o);
	return 0;
}

static const char *winner_of(const cJSON *o, const char *obj, char *buf,
			     size_t cap)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, obj);
	char *p = cJSON_PrintUnformatted(
	    cJSON_GetObjectItemCaseSensitive(d, "params"));
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, "variant");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(d, "median_us");

	snprintf(buf, cap, "%s %s %.17g", cJSON_IsString(v) ? v->valuestring
							     : "?",
		 p ? p : "?", cJSON_IsNumber(m) ? m->valuedouble : -1.0);
	free(p);
	return buf;
}

/* Start fault-free, tune KEY (its winner into @p acked), stop: the DB a
 * restart under faults must keep. */
static void preseed(struct fly_test_daemon *d, char *acked, size_t cap)
{
	char json[200];
	cJSON *o = NULL;
	int fd;

	assert_int_equal(fly_test_daemon_start(d, "{\"job_budget_s\":0.05}",
					       NULL), 0);
	fd = fly_test_connect(d->sock);
	assert_true(fd >= 0);
	snprintf(json, sizeof(json), "{\"req\":\"tune\",\"key\":\"" KEY
		 "\",\"wait\":true,\"timeout_ms\":%d}",
		 fly_test_timeout(20000));
	assert_int_equal(ask(fd, json, fly_test_timeout(30000), &o), 1);
	winner_of(o, "decision", acked, cap);
	cJSON_Delete(o);
	close(fd);
	assert_int_equal(fly_test_daemon_stop(d), 0);
}

/* The scenario with call @p n of @p cls failing; with @p restart, on a
 * DB that already holds an acknowledged winner (start = restart).
 * @return 1 when a fault was injected, 0 when the run reached no call n. */
static int run_one(const char *cls, long n, int restart, struct tally *t)
{
	struct fly_test_daemon d;
	char nenv[48], cenv[48], penv[48], pre[400], acked[300] = "";
	char json[200], got[300], *log;
	const char *env[] = {pre, nenv, cenv, penv, NULL};
	int rc, fd, r, hit;
	cJSON *o = NULL;

	memset(&d, 0, sizeof(d));
	snprintf(pre, sizeof(pre), "LD_PRELOAD=%s/faultsim/libfaultsim.so",
		 FLY_BUILD_DIR);
	snprintf(nenv, sizeof(nenv), "FLY_FAULT_N=%ld", n);
	snprintf(cenv, sizeof(cenv), "FLY_FAULT_CLASS=%s", cls);
	snprintf(penv, sizeof(penv), "FLY_FAULT_PERSIST=%d",
		 env_int("FAULTSIM_PERSIST", 0));
	t->runs++;
	if (restart) {
		preseed(&d, acked, sizeof(acked));
		d.env = env;
		rc = fly_test_daemon_restart(&d);
	} else {
		rc = fly_test_daemon_start(&d, "{\"job_budget_s\":0.05}",
					   env);
	}
	if (rc == -ECHILD) {
		/* Exited during start-up: with a code and a reason. */
		log = slurp(d.log);
		if (oom_abort(cls, d.exit_status, log)) {
			t->oom_aborts++;
			goto check_winner;
		}
		if (d.exit_status >= 128 || log == NULL || !logged_error(log))
			fail_run(&d, n, cls, "died at start-up without an "
				 "exit code and an error line");
		t->start_exits++;
		goto check_winner;
	}
	if (rc != 0)
		fail_run(&d, n, cls, "start-up hung");
	fd = fly_test_connect(d.sock);
	if (fd >= 0) {
		snprintf(json, sizeof(json),
			 "{\"req\":\"decide\",\"key\":\"" KEY "\"}");
		r = ask(fd, json, fly_test_timeout(10000), &o);
		cJSON_Delete(o);
		if (r == -2)
			fail_run(&d, n, cls, "decide hung");
		snprintf(json, sizeof(json), "{\"req\":\"tune\",\"key\":\""
			 KEY "\",\"wait\":true,\"timeout_ms\":%d}",
			 fly_test_timeout(20000));
		r = r == -1 ? -1 : ask(fd, json, fly_test_timeout(30000), &o);
		if (r == -2)
			fail_run(&d, n, cls, "tune hung");
		if (r == 1 && strcmp(cJSON_GetObjectItemCaseSensitive(
					 o, "status")->valuestring,
				     "tuned") == 0) {
			winner_of(o, "decision", got, sizeof(got));
			if (acked[0] != '\0' && strcmp(got, acked) != 0)
				fail_run(&d, n, cls, "the stored winner "
					 "changed under faults");
			snprintf(acked, sizeof(acked), "%s", got);
		}
		t->answered += r == 1;
		t->errors += r == 0;
		t->closed += r == -1;
		cJSON_Delete(o);
		close(fd);
	}
	rc = fly_test_daemon_stop(&d);
	log = slurp(d.log);
	if (oom_abort(cls, rc, log))
		t->oom_aborts++;
	else if (rc >= 128)
		fail_run(&d, n, cls, "died by a signal (or hung at stop)");
	else if (rc != 0) {
		if (log == NULL || !logged_error(log))
			fail_run(&d, n, cls, "exited non-zero without an "
				 "error line");
		t->stop_nonzero++;
	}
check_winner:
	if (acked[0] != '\0') {
		/* The acknowledged winner, after a restart without faults. */
		t->acked++;
		d.env = NULL;
		if (fly_test_daemon_restart(&d) != 0)
			fail_run(&d, n, cls, "no clean restart");
		fd = fly_test_connect(d.sock);
		assert_true(fd >= 0);
		r = ask(fd, "{\"req\":\"get\",\"key\":\"" KEY "\"}",
			fly_test_timeout(10000), &o);
		if (r != 1 || strcmp(winner_of(o, "result", got, sizeof(got)),
				     acked) != 0) {
			fprintf(stderr, "acked %s, now %s\n", acked,
				r == 1 ? got : "absent");
			fail_run(&d, n, cls, "acknowledged winner lost or "
				 "changed");
		}
		cJSON_Delete(o);
		close(fd);
		assert_int_equal(fly_test_daemon_stop(&d), 0);
	}
	if (access(d.db, F_OK) == 0 && !fly_test_db_integrity_ok(d.db))
		fail_run(&d, n, cls, "integrity_check failed");
	hit = log != NULL && strstr(log, "faultsim: injected") != NULL;
	t->injected += log != NULL ? count_of(log, "faultsim: injected") : 0;
	free(log);
	fly_test_daemon_cleanup(&d);
	return hit;
}

static void sweep(const char *cls, int stride, int restart)
{
	struct tally t;
	long n, max = env_int("FAULTSIM_MAX_N", 100000);
	const char *only = getenv("FAULTSIM_ONLY");
	char name[32];

	snprintf(name, sizeof(name), "%s%s", cls, restart ? "_restart" : "");
	if (only != NULL && strcmp(only, name) != 0)
		skip();

	memset(&t, 0, sizeof(t));
	for (n = env_int("FAULTSIM_FIRST_N", 1); n <= max; n += stride)
		if (!run_one(cls, n, restart, &t))
			break;
	fprintf(stderr, "faultsim %s%s: N = %d..%ld step %d, %ld runs, %ld faults "
		"injected, 0 crashes, 0 hangs, 0 acknowledged winners lost; "
		"%ld exited at start-up with an error line, %ld tunes answered "
		"(%ld winners acknowledged and found after a restart), %ld "
		"error replies, %ld connections closed, %ld non-zero exits "
		"at stop; %ld aborts on an allocation failure (by policy)\n",
		cls, restart ? " (restart on a DB with a winner)" : "",
		env_int("FAULTSIM_FIRST_N", 1), n, stride, t.runs, t.injected,
		t.start_exits, t.answered, t.acked, t.errors, t.closed, t.stop_nonzero,
		t.oom_aborts);
	if (n > max)
		fail_msg("faultsim %s: still injecting at N=%ld", cls, max);
}

static void test_faultsim_io(void **state)
{
	(void)state;
	sweep("io", env_int("FAULTSIM_STRIDE_IO", 1), 0);
}

static void test_faultsim_io_restart(void **state)
{
	(void)state;
	sweep("io", env_int("FAULTSIM_STRIDE_IO", 1), 1);
}

static void test_faultsim_alloc(void **state)
{
	(void)state;
	sweep("alloc", env_int("FAULTSIM_STRIDE_ALLOC", 10), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_faultsim_io),
		cmocka_unit_test(test_faultsim_io_restart),
		cmocka_unit_test(test_faultsim_alloc),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("faultsim", tests, NULL, NULL);
}
