/*
 * test_disk_full.c -- the DB's file system fills up (issue 21 item 2,
 * RELIABILITY.md F5): the state directory is a small tmpfs, filled to the
 * last byte by a filler file.  The daemon keeps serving the winners it
 * has (decide, get, status, the shm table), refuses a new winner with an
 * error that says the disk is full, and once the filler is removed the
 * same key tunes and commits, survives a restart, and the DB passes
 * integrity_check.
 *
 * Needs root (mount); skipped otherwise.  The tmpfs is mounted over the
 * harness's own state directory after a first start (the DB, config and
 * log copied onto it), and unmounted by the teardown.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "../common/daemon.h"
#include "../common/jreq.h"

#define TMPFS_SIZE "4m"

static const char *key_a = "rmsnorm/fp32/m=8,n=256";
static const char *key_b = "rmsnorm/fp32/m=16,n=512";

struct df {
	struct fly_test_daemon d;
	char save[300]; /* the state directory's files while mounting */
	int mounted;
};

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);

	if (b != NULL)
		x = cJSON_GetObjectItemCaseSensitive(x, b);
	return cJSON_IsString(x) ? x->valuestring : "";
}

static void sh(const char *fmt, ...)
{
	char cmd[1200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("command failed: %s", cmd);
}

/* Decision status of @p key. */
static void decide(int fd, const char *key, char *status, size_t cap)
{
	char json[200];
	cJSON *o;

	snprintf(json, sizeof(json), "{\"req\":\"decide\",\"key\":\"%s\"}",
		 key);
	o = fly_test_req(fd, json);
	assert_true(fly_test_is_ok(o));
	snprintf(status, cap, "%s", str_at(o, "decision", "status"));
	cJSON_Delete(o);
}

static cJSON *tune_wait(int fd, const char *key, int force)
{
	char json[300];

	snprintf(json, sizeof(json), "{\"req\":\"tune\",\"key\":\"%s\","
		 "\"wait\":true,\"force\":%s,\"timeout_ms\":%d}", key,
		 force ? "true" : "false", fly_test_timeout(60000));
	return fly_test_req(fd, json);
}

/* Fill the file system of @p dir: @return the filler's path in @p out. */
static void fill(const char *dir, char *out, size_t cap)
{
	static char block[65536];
	int fd;

	snprintf(out, cap, "%s/filler", dir);
	fd = open(out, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	assert_true(fd >= 0);
	memset(block, 0xa5, sizeof(block));
	for (size_t n = sizeof(block); n > 0;) {
		ssize_t w = write(fd, block, n);

		if (w < 0 && errno == ENOSPC)
			n /= 2; /* down to the last byte */
		else
			assert_true(w > 0);
	}
	close(fd);
}

/* Stop the daemon, move the directory's files aside, mount a tmpfs over
 * it, bring the files back. */
static void mount_small(struct df *f)
{
	assert_int_equal(fly_test_daemon_stop(&f->d), 0);
	snprintf(f->save, sizeof(f->save), "%s.save", f->d.dir);
	sh("rm -rf %s && cp -a %s %s", f->save, f->d.dir, f->save);
	if (mount("none", f->d.dir, "tmpfs", 0, "size=" TMPFS_SIZE ",mode=0755")
	    != 0) {
		sh("rm -rf %s", f->save);
		skip();
	}
	f->mounted = 1;
	sh("cp -a %s/. %s/ && rm -rf %s", f->save, f->d.dir, f->save);
}

static void test_disk_full_serves_refuses_recovers(void **state)
{
	struct df *f = *state;
	char status[16], filler[400], winner_a[64];
	cJSON *o;
	int fd;

	if (geteuid() != 0)
		skip();
	assert_int_equal(fly_test_daemon_start(&f->d, "{\"job_budget_s\":0.2}",
					       NULL), 0);
	fd = fly_test_connect(f->d.sock);
	assert_true(fd >= 0);
	o = tune_wait(fd, key_a, 0);
	assert_true(fly_test_is_ok(o));
	snprintf(winner_a, sizeof(winner_a), "%s",
		 str_at(o, "decision", "variant"));
	cJSON_Delete(o);
	close(fd);
	mount_small(f);
	assert_int_equal(fly_test_daemon_restart(&f->d), 0);
	fill(f->d.dir, filler, sizeof(filler));
	fd = fly_test_connect(f->d.sock);
	assert_true(fd >= 0);

	/* Full: what it has is served. */
	decide(fd, key_a, status, sizeof(status));
	assert_string_equal(status, "tuned");
	o = fly_test_req(fd, "{\"req\":\"status\"}");
	assert_true(fly_test_is_ok(o));
	cJSON_Delete(o);
	/* A new winner is refused, saying why. */
	o = tune_wait(fd, key_b, 0);
	if (fly_test_is_ok(o)) {
		char *t = cJSON_PrintUnformatted(o);

		fly_test_daemon_print_log(&f->d);
		fail_msg("tune on a full disk answered ok: %s", t);
	}
	assert_string_equal(str_at(o, "error", "code"), "storage");
	if (strstr(str_at(o, "error", "message"), "full") == NULL)
		fail_msg("the error does not say the disk is full: %s",
			 str_at(o, "error", "message"));
	cJSON_Delete(o);
	decide(fd, key_b, status, sizeof(status));
	assert_string_not_equal(status, "tuned");
	/* Still serving the old winner, the daemon the same process. */
	decide(fd, key_a, status, sizeof(status));
	assert_string_equal(status, "tuned");
	assert_int_equal(kill(f->d.pid, 0), 0);

	/* Space returns: the same key tunes and commits. */
	assert_int_equal(unlink(filler), 0);
	o = tune_wait(fd, key_b, 0);
	if (!fly_test_is_ok(o)) {
		char *t = cJSON_PrintUnformatted(o);

		fly_test_daemon_print_log(&f->d);
		fail_msg("tune after space returned: %s", t);
	}
	assert_string_equal(str_at(o, "status", NULL), "tuned");
	cJSON_Delete(o);
	close(fd);

	/* Both persisted, the file whole. */
	assert_int_equal(fly_test_daemon_restart(&f->d), 0);
	fd = fly_test_connect(f->d.sock);
	assert_true(fd >= 0);
	decide(fd, key_a, status, sizeof(status));
	assert_string_equal(status, "tuned");
	decide(fd, key_b, status, sizeof(status));
	assert_string_equal(status, "tuned");
	close(fd);
	assert_int_equal(fly_test_daemon_stop(&f->d), 0);
	assert_true(fly_test_db_integrity_ok(f->d.db));
	(void)winner_a;
}

static int setup(void **state)
{
	struct df *f = calloc(1, sizeof(*f));

	*state = f;
	return f == NULL ? -1 : 0;
}

static int teardown(void **state)
{
	struct df *f = *state;

	if (f->d.pid != 0)
		fly_test_daemon_stop(&f->d);
	if (f->mounted)
		umount2(f->d.dir, MNT_DETACH);
	fly_test_daemon_cleanup(&f->d);
	free(f);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_disk_full_serves_refuses_recovers, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("disk_full", tests, NULL, NULL);
}
