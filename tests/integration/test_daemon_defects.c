/*
 * test_daemon_defects.c -- regression tests of issue 18's daemon items,
 * each against the real daemon (flytuned-test, CPU backend) and, where
 * the contract is the CLI's, flytune-ctl run as a program:
 *   4  import is checked against the kernel registry (exit 8, the row named)
 *   5  a world-writable --state-dir is refused
 *   6  admin peers get reserved connections past max_clients; others get
 *      "too many clients" and their own exit code
 *   3  a job whose set-up faults goes to the back of the queue, its fault
 *      count persisted, recorded failed after the limit; forget cancels
 *   8  fingerprints no longer present are pruned on start
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "../common/daemon.h"
#include "../common/jreq.h"

/* Run "flytune-ctl --socket SOCK ARGS 2>&1"; @return its exit code;
 * *out (caller frees, may be NULL) is its stdout and stderr. */
static int ctl(const struct fly_test_daemon *d, char **out, const char *fmt,
	       ...) __attribute__((format(printf, 3, 4)));
static int ctl(const struct fly_test_daemon *d, char **out, const char *fmt,
	       ...)
{
	char args[2048], cmd[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s/flytune-ctl --socket %s %s 2>&1",
		 FLY_BUILD_DIR, d->sock, args);
	return fly_test_run(cmd, out);
}

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);

	if (b != NULL)
		x = cJSON_GetObjectItemCaseSensitive(x, b);
	return cJSON_IsString(x) ? x->valuestring : "";
}

/* The daemon's device id and kernel library version (from hello). */
static void identity(int fd, char *dev, size_t dcap, char *lv, size_t lcap)
{
	cJSON *o = fly_test_req(fd, "{\"req\":\"hello\",\"version\":1}");

	assert_true(fly_test_is_ok(o));
	snprintf(dev, dcap, "%s", str_at(o, "device", "id"));
	snprintf(lv, lcap, "%s", str_at(o, "libver", NULL));
	cJSON_Delete(o);
	assert_true(dev[0] != '\0' && lv[0] != '\0');
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* ---------------------------------------------------------------- item 4 */

#define GOOD_KEY "rmsnorm/fp32/m=32,n=4096"
#define BAD_KEY "rmsnorm/fp32/m=8,n=4096"

/* Write an export file of this daemon with two rows: a valid one for
 * GOOD_KEY, then BAD_KEY with @p variant and @p params. */
static void export_file(const char *path, const char *dev, const char *lv,
			const char *variant, const char *params)
{
	char text[2048];
	const char *row = "{\"key\":\"%s\",\"device\":\"%s\",\"libver\":"
			  "\"%s\",\"variant\":\"%s\",\"params\":[%s],"
			  "\"median_us\":3.5,\"mad_us\":0.1,\"tune_s\":0.5,"
			  "\"tuned_at\":1700000000}";
	char good[512], bad[512];

	snprintf(good, sizeof(good), row, GOOD_KEY, dev, lv, "rms_twopass",
		 "4,1");
	snprintf(bad, sizeof(bad), row, BAD_KEY, dev, lv, variant, params);
	snprintf(text, sizeof(text),
		 "{\"format\":\"flytuned-export\",\"version\":1,\"device\":"
		 "{\"index\":0,\"backend\":\"cpu\",\"fingerprint\":\"f\","
		 "\"id\":\"%s\"},\"libver\":\"%s\",\"results\":[%s,%s]}",
		 dev, lv, good, bad);
	write_file(path, text);
}

/* One refused import through the CLI: exit 8, the message names the row
 * and says why, and nothing of the file landed. */
static void import_refused(struct fly_test_daemon *d, const char *dev,
			   const char *lv, const char *variant,
			   const char *params, const char *why)
{
	char path[400], *out = NULL;

	snprintf(path, sizeof(path), "%s/import.json", d->dir);
	export_file(path, dev, lv, variant, params);
	assert_int_equal(ctl(d, &out, "import %s", path), 8);
	if (strstr(out, "results[1]") == NULL ||
	    strstr(out, BAD_KEY) == NULL || strstr(out, why) == NULL)
		fail_msg("%s [%s]: no row or reason in: %s", variant, params,
			 out);
	free(out);
	assert_int_equal(ctl(d, NULL, "get " GOOD_KEY), 4);
	assert_int_equal(ctl(d, NULL, "get " BAD_KEY), 4);
}

static void test_issue_18_import_checked_against_registry(void **state)
{
	struct fly_test_daemon *d = *state;
	char dev[64], lv[64], path[400], req[1024];
	int fd;
	cJSON *o;

	assert_int_equal(fly_test_daemon_start(d, NULL, NULL), 0);
	fd = fly_test_connect(d->sock);
	assert_true(fd >= 0);
	identity(fd, dev, sizeof(dev), lv, sizeof(lv));
	/* No such variant; a variant of another op; values outside the
	 * variant's space; the wrong number of params; a point of the space
	 * that is infeasible for the key (rows_per_chunk 64 on m=8). */
	import_refused(d, dev, lv, "no_such_variant", "1", "no_such_variant");
	import_refused(d, dev, lv, "gemm_blocked", "64,64,64,0,1",
		       "gemm_blocked");
	import_refused(d, dev, lv, "rms_vec", "99999999,-7,0", "params[0]");
	import_refused(d, dev, lv, "rms_vec", "8,4", "parameters");
	import_refused(d, dev, lv, "rms_twopass", "64,1", "feasible");
	/* retarget does not bypass the registry. */
	snprintf(req, sizeof(req), "{\"req\":\"import\",\"retarget\":true,"
		 "\"results\":[{\"key\":\"" BAD_KEY "\",\"device\":\"other\","
		 "\"libver\":\"0\",\"variant\":\"no_such_variant\",\"params\":"
		 "[],\"median_us\":1,\"mad_us\":0,\"tune_s\":0,\"tuned_at\":0}]}");
	o = fly_test_req(fd, req);
	assert_string_equal(str_at(o, "error", "code"), "invalid");
	cJSON_Delete(o);
	/* The same file with a valid second row imports both. */
	snprintf(path, sizeof(path), "%s/import.json", d->dir);
	export_file(path, dev, lv, "rms_twopass", "1,1");
	assert_int_equal(ctl(d, NULL, "import %s", path), 0);
	assert_int_equal(ctl(d, NULL, "get " BAD_KEY), 0);
	close(fd);
}

/* ---------------------------------------------------------------- item 5 */

/* A --state-dir that group or others may write is refused, sticky or
 * not, before the database is created there -- also when the socket is
 * elsewhere (before, only the socket's directory was checked, so
 * --socket in a safe directory let root create tuning.db in /tmp-like
 * directories). */
static void test_issue_18_state_dir_writable_refused(void **state)
{
	char dir[] = "/tmp/flytest-sdir.XXXXXX", safe[] = "/tmp/flytest-"
		"sock.XXXXXX", cfg[96], db[96], cmd[1024], out[4096];
	static const mode_t modes[] = { 0777, 0770, 0720, 01777 };
	size_t n;
	FILE *p;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_non_null(mkdtemp(safe));
	snprintf(cfg, sizeof(cfg), "%s/c.json", safe);
	write_file(cfg, "{\"backend\":\"cpu\",\"policy\":\"on-request\"}\n");
	snprintf(db, sizeof(db), "%s/tuning.db", dir);
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		assert_int_equal(chmod(dir, modes[i]), 0);
		/* timeout(1): a daemon that starts is stopped, and fails. */
		snprintf(cmd, sizeof(cmd), "timeout -s KILL %d %s/flytuned-test "
			 "--state-dir %s --socket %s/gpu0.sock --config %s 2>&1",
			 fly_test_timeout(10000) / 1000, FLY_BUILD_DIR, dir,
			 safe, cfg);
		p = popen(cmd, "r");
		assert_non_null(p);
		n = fread(out, 1, sizeof(out) - 1, p);
		out[n] = '\0';
		assert_int_equal(WEXITSTATUS(pclose(p)), 1);
		if (strstr(out, "state_dir_error") == NULL ||
		    strstr(out, "writable by group or others") == NULL)
			fail_msg("mode %o: %s", (unsigned)modes[i], out);
		assert_int_not_equal(access(db, F_OK), 0);
	}
	unlink(cfg);
	assert_int_equal(rmdir(dir), 0);
	assert_int_equal(rmdir(safe), 0);
}

/* ---------------------------------------------------------------- item 6 */

#define NOBODY 65534

/* Run "sh -c CMD 2>&1" as uid/gid NOBODY (the caller is root); @return
 * its exit code, *out (caller frees) its output. */
static int run_as_nobody(const char *cmd, char **out)
{
	size_t n = 0, cap = 8192;
	char *buf = malloc(cap);
	int pfd[2], st = 0;
	pid_t pid;
	ssize_t r;

	assert_non_null(buf);
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		close(pfd[0]);
		if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 ||
		    setuid(NOBODY) < 0)
			_exit(126);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	while ((r = read(pfd[0], buf + n, cap - n - 1)) > 0)
		if ((n += (size_t)r) + 1 >= cap)
			buf = realloc(buf, cap *= 2);
	buf[n] = '\0';
	close(pfd[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	*out = buf;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Open a raw connection and check it is a live session (hello ok). */
static int hold_session(const struct fly_test_daemon *d)
{
	int fd = fly_test_connect(d->sock);
	cJSON *o;

	assert_true(fd >= 0);
	o = fly_test_req(fd, "{\"req\":\"hello\",\"version\":1}");
	assert_true(fly_test_is_ok(o));
	cJSON_Delete(o);
	return fd;
}

/* At max_clients the administrator still gets in (a reserve of 4 more
 * connections for uid 0 and the daemon's own uid); anyone else, and the
 * administrator once the reserve is used, gets a "too many clients"
 * error frame, and flytune-ctl exits 11 saying so.  Before, root's
 * `flytune-ctl status` said "daemon not running", exit 3. */
static void test_issue_18_admin_reserve_at_max_clients(void **state)
{
	struct fly_test_daemon *d = *state;
	int fds[8], n = 0, rc;
	char cmd[1024], *out = NULL;

	assert_int_equal(fly_test_daemon_start(d, "{\"max_clients\":4}",
					       NULL), 0);
	while (n < 4)
		fds[n++] = hold_session(d);
	/* The administrator (this test runs as the daemon's uid). */
	rc = ctl(d, &out, "status");
	if (rc != 0)
		fail_msg("admin status at max_clients: exit %d: %s", rc, out);
	free(out);
	/* Another user is refused with its own exit code. */
	if (geteuid() == 0) {
		assert_int_equal(chmod(d->dir, 0755), 0);
		assert_int_equal(chmod(d->sock, 0666), 0);
		/* the build dir may be where nobody cannot reach (a clone
		 * under /root): a copy of the ctl beside the socket */
		snprintf(cmd, sizeof(cmd),
			 "cp %s/flytune-ctl %s/ctl-copy && chmod 0755 "
			 "%s/ctl-copy", FLY_BUILD_DIR, d->dir, d->dir);
		assert_int_equal(fly_test_run(cmd, NULL), 0);
		snprintf(cmd, sizeof(cmd), "%s/ctl-copy --socket %s status",
			 d->dir, d->sock);
		rc = run_as_nobody(cmd, &out);
		if (rc != 11 || strstr(out, "too many clients") == NULL)
			fail_msg("non-admin at max_clients: exit %d: %s", rc,
				 out);
		free(out);
	}
	/* The reserve is 4: with it used, the administrator is refused too. */
	while (n < 8)
		fds[n++] = hold_session(d);
	rc = ctl(d, &out, "status");
	if (rc != 11 || strstr(out, "too many clients") == NULL)
		fail_msg("admin past the reserve: exit %d: %s", rc, out);
	free(out);
	/* The raw refusal: one max_clients frame, then the connection ends. */
	{
		int fd = fly_test_connect(d->sock);
		char *resp = NULL;

		assert_true(fd >= 0);
		assert_int_equal(fly_test_recv_frame(fd, &resp,
						     fly_test_timeout(5000)), 0);
		assert_non_null(strstr(resp, "\"code\":\"max_clients\""));
		assert_non_null(strstr(resp, "too many clients"));
		free(resp);
		assert_int_equal(fly_test_wait_closed(fd,
						      fly_test_timeout(5000)), 0);
		close(fd);
	}
	while (n > 0)
		close(fds[--n]);
}

/* ---------------------------------------------------------------- item 3 */

#define SETUP_KEY "rmsnorm/fp32/m=8,n=4093" /* set-up crashes (faulty.c) */
#define OTHER_KEY "rmsnorm/fp32/m=8,n=64"

/* One integer from the daemon's DB (read-only), or -1 (no row, error). */
static int64_t db_int(const struct fly_test_daemon *d, const char *sql)
{
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;
	int64_t v = -1;

	if (sqlite3_open_v2(d->db, &h, SQLITE_OPEN_READONLY, NULL) ==
		    SQLITE_OK &&
	    sqlite3_busy_timeout(h, 5000) == SQLITE_OK &&
	    sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(h);
	return v;
}

/* The explain "failed" member of @p key (caller frees), or NULL. */
static cJSON *failed_of(int fd, const char *key)
{
	char json[200];
	cJSON *o, *f;

	snprintf(json, sizeof(json), "{\"req\":\"explain\",\"key\":\"%s\"}",
		 key);
	o = fly_test_req(fd, json);
	assert_true(fly_test_is_ok(o));
	f = cJSON_DetachItemFromObject(o, "failed");
	cJSON_Delete(o);
	return f;
}

/* Poll until @p key's job is recorded failed; @return its member. */
static cJSON *wait_failed(int fd, const char *key)
{
	uint64_t end = fly_test_now_ms() + (uint64_t)fly_test_timeout(120000);
	cJSON *f;

	while ((f = failed_of(fd, key)) == NULL && fly_test_now_ms() < end)
		usleep(200 * 1000);
	if (f == NULL)
		fail_msg("%s never recorded failed", key);
	return f;
}

/* A job whose case set-up crashes the worker every time: it goes to the
 * back of the queue with a backoff (another key is tuned meanwhile, while
 * its fault count is in its jobs row), after 8 faults it is recorded
 * failed -- explain's "failed", get's message, across a restart -- and
 * queued again only by a forced tune; forget cancels its job.  Before, it
 * was requeued at the front up to 8 times while every other key waited,
 * and its count started over at a restart. */
static void test_issue_18_faulting_setup_back_of_queue_then_failed(void **state)
{
	struct fly_test_daemon *d = *state;
	static const char *const env[] = { "FLYK_TESTING_FAULTS=setup_crash",
					   NULL };
	int64_t faults;
	cJSON *o, *f;
	char *out = NULL;
	int fd;

	assert_int_equal(fly_test_daemon_start(d, "{\"job_budget_s\":0.2}",
					       env), 0);
	fd = fly_test_connect(d->sock);
	assert_true(fd >= 0);
	o = fly_test_req(fd, "{\"req\":\"tune\",\"key\":\"" SETUP_KEY "\"}");
	assert_true(fly_test_is_ok(o));
	cJSON_Delete(o);
	o = fly_test_req(fd, "{\"req\":\"tune\",\"key\":\"" OTHER_KEY "\","
			 "\"wait\":true,\"timeout_ms\":120000}");
	assert_true(fly_test_is_ok(o));
	assert_string_equal(str_at(o, "status", NULL), "tuned");
	cJSON_Delete(o);
	/* Tuned while the faulting job is still queued, its count kept. */
	faults = db_int(d, "SELECT faults FROM jobs WHERE key = '" SETUP_KEY
			"'");
	if (faults < 1 || faults >= 8)
		fail_msg("faults of the set-up job when the other was tuned: "
			 "%lld", (long long)faults);
	f = failed_of(fd, SETUP_KEY);
	assert_null(f);
	/* Recorded failed after the limit, with a reason. */
	f = wait_failed(fd, SETUP_KEY);
	assert_int_equal((int)cJSON_GetObjectItem(f, "faults")->valuedouble, 8);
	cJSON_Delete(f);
	assert_true(fly_test_daemon_log_has(d, "job_faulted"));
	assert_int_equal(ctl(d, &out, "get " SETUP_KEY), 4);
	if (strstr(out, "tuning failed after 8 worker faults") == NULL)
		fail_msg("get does not say the job failed: %s", out);
	free(out);
	close(fd);
	/* Across a restart: still failed; a plain tune is refused, a forced
	 * one queues it again. */
	assert_int_equal(fly_test_daemon_restart(d), 0);
	fd = fly_test_connect(d->sock);
	assert_true(fd >= 0);
	f = failed_of(fd, SETUP_KEY);
	assert_non_null(f);
	cJSON_Delete(f);
	o = fly_test_req(fd, "{\"req\":\"tune\",\"key\":\"" SETUP_KEY "\"}");
	assert_false(fly_test_is_ok(o));
	assert_non_null(strstr(str_at(o, "error", "message"), "force"));
	cJSON_Delete(o);
	o = fly_test_req(fd, "{\"req\":\"tune\",\"key\":\"" SETUP_KEY "\","
			 "\"force\":true}");
	assert_true(fly_test_is_ok(o));
	cJSON_Delete(o);
	assert_null(failed_of(fd, SETUP_KEY));
	/* forget cancels the job (queued, or running its set-up). */
	o = fly_test_req(fd, "{\"req\":\"forget\",\"key\":\"" SETUP_KEY "\"}");
	assert_true(fly_test_is_ok(o));
	cJSON_Delete(o);
	assert_int_equal(db_int(d, "SELECT count(*) FROM jobs"), 0);
	o = fly_test_req(fd, "{\"req\":\"status\"}");
	assert_true(fly_test_is_ok(o));
	cJSON_Delete(o);
	assert_true(fly_test_daemon_log_has(d, "job_cancelled key="
					    SETUP_KEY));
	close(fd);
}

/* ---------------------------------------------------------------- main */

#define T(fn)                                                                  \
	cmocka_unit_test_setup_teardown(fn, fly_test_daemon_setup,             \
					fly_test_daemon_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_issue_18_import_checked_against_registry),
		T(test_issue_18_state_dir_writable_refused),
		T(test_issue_18_admin_reserve_at_max_clients),
		T(test_issue_18_faulting_setup_back_of_queue_then_failed),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("daemon_defects", tests, NULL,
					   NULL);
}
