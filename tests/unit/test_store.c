/*
 * test_store.c -- unit tests of daemon/store.c against real SQLite files,
 * each test in its own mkdtemp directory.
 *
 * The test inspects and prepares files with the sqlite3 API directly (the
 * store is the only daemon module that includes <sqlite3.h>; a test that
 * checks the store from the outside needs it too).  Contracts only: no
 * timing, no dependence on which candidate is fastest.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "fly_abi.h"
#include "migrations.h"
#include "store.h"
#include "../common/daemon.h"

#define DEV    "0123456789abcdef"
#define LIBVER "flyk-1.0"

struct tdir {
	char dir[256];
	char db[300];
	char sys[300];
};

static int setup_dir(void **state)
{
	struct tdir *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return -1;
	snprintf(t->dir, sizeof(t->dir), "/tmp/test_store.XXXXXX");
	if (mkdtemp(t->dir) == NULL)
		return -1;
	snprintf(t->db, sizeof(t->db), "%s/tuning.db", t->dir);
	snprintf(t->sys, sizeof(t->sys), "%s/system.db", t->dir);
	*state = t;
	return 0;
}

static int teardown_dir(void **state)
{
	struct tdir *t = *state;

	fly_test_rm_tree(t->dir);
	free(t);
	return 0;
}

static int latest(void)
{
	return flyd_migrations[flyd_nmigrations - 1].version;
}

static sqlite3 *raw_open(const char *path)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	return db;
}

static void raw_exec(sqlite3 *db, const char *sql)
{
	char *err = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &err);

	if (rc != SQLITE_OK)
		fail_msg("sql failed: %s: %s", sql, err ? err : "?");
}

static int64_t raw_int(const char *path, const char *sql)
{
	sqlite3 *db = raw_open(path);
	sqlite3_stmt *s = NULL;
	int64_t v;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(db);
	return v;
}

/* First column of the first row as text, into @p out. */
static void raw_text(const char *path, const char *sql, char *out, size_t cap)
{
	sqlite3 *db = raw_open(path);
	sqlite3_stmt *s = NULL;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	snprintf(out, cap, "%s", (const char *)sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
	sqlite3_close(db);
}

static struct flyd_result mkres(const char *key, const char *variant, double us)
{
	struct flyd_result r;

	memset(&r, 0, sizeof(r));
	snprintf(r.key, sizeof(r.key), "%s", key);
	snprintf(r.device, sizeof(r.device), "%s", DEV);
	snprintf(r.libver, sizeof(r.libver), "%s", LIBVER);
	r.d.status = FLY_STATUS_TUNED;
	snprintf(r.d.variant, sizeof(r.d.variant), "%s", variant);
	r.d.nparams = 3;
	r.d.params[0] = 64;
	r.d.params[1] = -7;
	r.d.params[2] = INT64_MAX;
	r.d.median_us = us;
	r.mad_us = us / 10;
	r.tune_s = 1.5;
	r.tuned_at = 1700000000;
	return r;
}

static struct flyd_trial mktrial(const char *variant, int64_t p0, int outcome)
{
	struct flyd_trial t;

	memset(&t, 0, sizeof(t));
	snprintf(t.variant, sizeof(t.variant), "%s", variant);
	t.nparams = 2;
	t.params[0] = p0;
	t.params[1] = 4;
	t.median_us = 12.5;
	t.mad_us = 0.25;
	t.reps = 30;
	t.outcome = outcome;
	snprintf(t.reason, sizeof(t.reason), "reason %d", outcome);
	return t;
}

static struct flyd_store *open_ok(const char *path, const char *sys)
{
	struct flyd_store *st = NULL;

	assert_int_equal(flyd_store_open(path, sys, &st), 0);
	assert_non_null(st);
	return st;
}

/* Read a whole file; caller frees.  *n gets its size. */
static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long sz;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)sz + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
	fclose(f);
	*n = (size_t)sz;
	return buf;
}

/* Collapse whitespace, drop "--" comments and spaces next to ( ) , ;. */
static void normalize(const char *in, char *out, size_t cap)
{
	size_t o = 0;
	int sp = 0;

	for (const char *p = in; *p != '\0' && o + 2 < cap; p++) {
		if (p[0] == '-' && p[1] == '-') {
			while (*p != '\0' && *p != '\n')
				p++;
			if (*p == '\0')
				break;
		}
		if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
			sp = 1;
			continue;
		}
		if (strchr("(),;", *p) != NULL) {
			sp = 0;
			if (o > 0 && out[o - 1] == ' ')
				o--;
		}
		if (sp && o > 0 && strchr("(,;", out[o - 1]) == NULL)
			out[o++] = ' ';
		sp = 0;
		out[o++] = *p;
	}
	out[o] = '\0';
}

/* The schema as `sqlite3 DB .schema` shows it. */
static void dump_schema(const char *path, char *out, size_t cap)
{
	sqlite3 *db = raw_open(path);
	sqlite3_stmt *s = NULL;
	size_t o = 0;

	assert_int_equal(
	    sqlite3_prepare_v2(db,
			       "SELECT sql FROM sqlite_master WHERE"
			       " sql IS NOT NULL ORDER BY rowid",
			       -1, &s, NULL),
	    SQLITE_OK);
	out[0] = '\0';
	while (sqlite3_step(s) == SQLITE_ROW && o < cap)
		o += snprintf(out + o, cap - o, "%s;\n",
			      (const char *)sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
	sqlite3_close(db);
}

static void assert_schema_current(const char *path)
{
	static char got[16384], a[16384], b[16384];

	assert_int_equal(raw_int(path, "PRAGMA user_version"), latest());
	dump_schema(path, got, sizeof(got));
	normalize(got, a, sizeof(a));
	normalize(flyd_schema_sql, b, sizeof(b));
	if (strcmp(a, b) != 0)
		fail_msg("schema differs from tuning-db/schema.sql:\n"
			 "got:  %s\nwant: %s",
			 a, b);
}

/* ------------------------------------------------------------ open */

/* issue 18 item 8: the devices of this hardware under an older software
 * stack (another lib=/blas=/driver=) are pruned with all their rows; other
 * hardware sharing the DB and the current device stay. */
static void test_issue_18_device_prune(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	static const char *const fps[] = {
		/* 0: now */
		"arch=sm_90 units=132 driver=13000 lib=0.2.0 "
		"blas=cublaslt-130100 name=\"NVIDIA H200\"",
		/* 1: the same GPU before a cuBLASLt upgrade */
		"arch=sm_90 units=132 driver=13000 lib=0.2.0 "
		"blas=cublaslt-130000 name=\"NVIDIA H200\"",
		/* 2: the same GPU before a driver upgrade */
		"arch=sm_90 units=132 driver=12080 lib=0.2.0 "
		"blas=cublaslt-130100 name=\"NVIDIA H200\"",
		/* 3: another GPU model sharing the DB */
		"arch=sm_90 units=132 driver=13000 lib=0.2.0 "
		"blas=cublaslt-130100 name=\"NVIDIA H100 80GB HBM3\"",
		/* 4: fewer units (a MIG slice): other hardware */
		"arch=sm_90 units=16 driver=13000 lib=0.2.0 "
		"blas=cublaslt-130000 name=\"NVIDIA H200\"",
	};
	char id[5][FLYD_DEVID_MAX];
	int64_t nd = -1, nr = -1;
	struct flyd_result got;

	for (int i = 0; i < 5; i++) {
		struct flyd_result r = mkres("gemm/bf16/NT/m=64,n=64,k=64",
					     "gemm_mma", 10.0 + i);
		struct flyd_trial tr = mktrial("gemm_mma", 64, 0);

		assert_int_equal(flyd_store_device_put(st, fps[i], id[i]), 0);
		snprintf(r.device, sizeof(r.device), "%.*s",
			 (int)sizeof(r.device) - 1, id[i]);
		assert_int_equal(flyd_store_result_put(st, &r, &tr, 1), 0);
	}
	assert_int_equal(flyd_store_device_prune(st, fps[0], &nd, &nr), 0);
	assert_int_equal(nd, 2);
	assert_int_equal(nr, 2);
	for (int i = 0; i < 5; i++) {
		int rc = flyd_store_result_get(st, "gemm/bf16/NT/m=64,n=64,k=64",
					       id[i], LIBVER, &got);

		assert_int_equal(rc, (i == 1 || i == 2) ? FLY_E_NOTFOUND : 0);
	}
	/* again: nothing left to prune */
	assert_int_equal(flyd_store_device_prune(st, fps[0], &nd, &nr), 0);
	assert_int_equal(nd, 0);
	assert_int_equal(nr, 0);
	flyd_store_close(st);
}

static void test_fresh_open_schema(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	char mode[16];

	assert_int_equal(flyd_store_was_quarantined(st), 0);
	assert_int_equal(flyd_store_ping(st), 0);
	assert_schema_current(t->db);
	raw_text(t->db, "PRAGMA journal_mode", mode, sizeof(mode));
	assert_string_equal(mode, "wal");
	flyd_store_close(st);
	/* Reopening a current DB migrates nothing and quarantines nothing. */
	st = open_ok(t->db, NULL);
	assert_int_equal(flyd_store_was_quarantined(st), 0);
	flyd_store_close(st);
	assert_schema_current(t->db);
}

static void test_migrate_from_every_version(void **state)
{
	struct tdir *t = *state;
	char path[320], src[16];

	for (int v = 0; v < latest(); v++) {
		struct flyd_store *st;
		struct flyd_result r;
		struct flyd_job j;
		sqlite3 *db;

		snprintf(path, sizeof(path), "%s/v%d.db", t->dir, v);
		assert_int_equal(flyd_store_open_at_version(path, v), 0);
		assert_int_equal(raw_int(path, "PRAGMA user_version"), v);
		if (v >= 1) {
			/* Rows as a version-1 binary wrote them (its
			 * columns named: later versions add some). */
			db = raw_open(path);
			raw_exec(db, "INSERT INTO results (key, device, libver,"
				     " variant, params, median_us, mad_us,"
				     " status, tune_s, tuned_at) VALUES"
				     " ('gemm/old',"
				     " '" DEV "', '" LIBVER "', 'tiled',"
				     " '[ 1, 2 ]', 3.5, 0.5, 2, 9.0, 42);"
				     "INSERT INTO jobs (key, device, priority,"
				     " force, queued_at, state) VALUES"
				     " ('gemm/job',"
				     " '" DEV "', 1, 0, 7, 'queued');");
			sqlite3_close(db);
		}
		st = open_ok(path, NULL);
		assert_int_equal(flyd_store_was_quarantined(st), 0);
		if (v >= 1) {
			assert_int_equal(flyd_store_result_get(st, "gemm/old",
							       DEV, LIBVER, &r),
					 0);
			assert_string_equal(r.d.variant, "tiled");
			assert_int_equal(r.d.nparams, 2);
			assert_int_equal(r.d.params[1], 2);
			assert_true(r.d.median_us == 3.5);
			assert_int_equal(r.tuned_at, 42);
			memset(&j, 0, sizeof(j));
			snprintf(j.key, sizeof(j.key), "gemm/new");
			assert_int_equal(flyd_store_job_put(st, DEV, &j), 0);
		}
		flyd_store_close(st);
		assert_schema_current(path);
		if (v >= 1) {
			raw_text(path, "SELECT source FROM results", src,
				 sizeof(src));
			assert_string_equal(src, "tuned");
			assert_int_equal(raw_int(path, "SELECT count(*) FROM"
						       " jobs"),
					 2);
		}
	}
	assert_int_equal(flyd_store_open_at_version(path, latest() + 1),
			 -EINVAL);
}

static void test_newer_schema_refused(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = (struct flyd_store *)&st;
	char *before, *after, wal[320];
	size_t n1, n2;
	sqlite3 *db = raw_open(t->db);

	/* A rollback-journal DB written by a "newer binary": opening it
	 * must not even switch it to WAL (header bytes 18-19). */
	raw_exec(db, "CREATE TABLE results (key TEXT, future BLOB);"
		     "INSERT INTO results VALUES ('k', x'00');"
		     "PRAGMA user_version = 999;");
	sqlite3_close(db);
	before = slurp(t->db, &n1);
	assert_int_equal(flyd_store_open(t->db, NULL, &st), FLY_E_SCHEMA);
	assert_null(st);
	after = slurp(t->db, &n2);
	assert_int_equal(n1, n2);
	assert_memory_equal(before, after, n1);
	snprintf(wal, sizeof(wal), "%s-wal", t->db);
	assert_int_equal(access(wal, F_OK), -1);
	assert_int_equal(raw_int(t->db, "PRAGMA user_version"), 999);
	free(before);
	free(after);
}

/* ------------------------------------------------------------ quarantine */

/* A good DB of several pages (results, trials, jobs), closed. */
static void make_good_db(const char *path)
{
	static struct flyd_result rs[400];
	struct flyd_store *st = open_ok(path, NULL);
	struct flyd_trial tr[3] = {mktrial("a", 1, FLYD_OUT_OK),
				   mktrial("b", 2, FLYD_OUT_REJECTED),
				   mktrial("c", 3, FLYD_OUT_FAULTED)};
	char key[64];

	/* One transaction for the bulk (fast on a slow disk), then a few
	 * winners with trials the ordinary way. */
	for (int i = 0; i < 400; i++) {
		snprintf(key, sizeof(key), "gemm/f16/m%04d/n4096/k4096", i);
		rs[i] = mkres(key, "tiled", 10 + i);
	}
	assert_int_equal(flyd_store_import(st, rs, 400), 0);
	for (int i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "rmsnorm/f32/n%d", i);
		rs[0] = mkres(key, "rows", 1 + i);
		assert_int_equal(flyd_store_result_put(st, &rs[0], tr, 3), 0);
	}
	flyd_store_close(st);
}

static int count_quarantined(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "tuning.db.corrupt-", 18) == 0 &&
		    strchr(e->d_name + 18, '-') == NULL)
			n++;
	closedir(d);
	return n;
}

/* Quarantined side files (PATH.corrupt-<ts>@p sfx) in @p dir. */
static int count_side(const char *dir, const char *sfx)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t ls = strlen(sfx);
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);

		if (strncmp(e->d_name, "tuning.db.corrupt-", 18) == 0 &&
		    len > 18 + ls && strcmp(e->d_name + len - ls, sfx) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* Open must move the bad file aside and start fresh and usable. */
static void assert_quarantines(struct tdir *t)
{
	struct flyd_store *st = open_ok(t->db, NULL);
	struct flyd_result r = mkres("gemm/after", "v", 1);

	assert_int_equal(flyd_store_was_quarantined(st), 1);
	assert_int_equal(count_quarantined(t->dir), 1);
	assert_int_equal(flyd_store_result_count(st, DEV, LIBVER), 0);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	flyd_store_close(st);
	assert_schema_current(t->db);
	assert_int_equal(raw_int(t->db, "SELECT count(*) FROM results"), 1);
	/* The fresh file is fine: the next open keeps it. */
	st = open_ok(t->db, NULL);
	assert_int_equal(flyd_store_was_quarantined(st), 0);
	flyd_store_close(st);
}

/* assert_quarantines(), checking the crit line on stderr too. */
static void assert_quarantines_logged(struct tdir *t)
{
	char logp[320], *text;
	size_t n;
	int fd, saved = dup(STDERR_FILENO);

	snprintf(logp, sizeof(logp), "%s/stderr.log", t->dir);
	fd = open(logp, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	assert_true(fd >= 0 && saved >= 0);
	dup2(fd, STDERR_FILENO);
	close(fd);
	assert_quarantines(t);
	dup2(saved, STDERR_FILENO);
	close(saved);
	text = slurp(logp, &n);
	text[n] = '\0';
	assert_non_null(strstr(text, "crit db_quarantined path="));
	assert_non_null(strstr(text, " moved_to="));
	assert_non_null(strstr(text, " reason="));
	free(text);
}

static void flip_at(const char *path, long off)
{
	int fd = open(path, O_RDWR);
	unsigned char b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= 0xff;
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

static void test_quarantine_truncated(void **state)
{
	struct tdir *t = *state;
	struct stat sb;

	make_good_db(t->db);
	assert_int_equal(stat(t->db, &sb), 0);
	assert_true(sb.st_size > 8 * 4096);
	assert_int_equal(truncate(t->db, sb.st_size / 2), 0);
	assert_quarantines(t);
}

static void test_quarantine_truncated_short(void **state)
{
	struct tdir *t = *state;

	make_good_db(t->db);
	assert_int_equal(truncate(t->db, 60), 0);
	assert_quarantines(t);
}

static void test_quarantine_flipped(void **state)
{
	struct tdir *t = *state;
	/* Page-1 header: magic, page size, and the schema b-tree page
	 * header; then the b-tree header of page 2 and of a middle page. */
	const long offs[] = {0, 16, 100, 4096, -1};
	char cmd[320];

	for (int i = 0; i < 5; i++) {
		struct stat sb;
		long off = offs[i];

		make_good_db(t->db);
		if (off < 0) {
			assert_int_equal(stat(t->db, &sb), 0);
			off = (sb.st_size / 4096 / 2) * 4096;
		}
		flip_at(t->db, off);
		assert_quarantines(t);
		/* Clear the quarantined copies for the next case. */
		snprintf(cmd, sizeof(cmd), "rm -f %s/tuning.db*", t->dir);
		assert_int_equal(system(cmd), 0);
	}
}

static void test_quarantine_garbage(void **state)
{
	struct tdir *t = *state;
	char wal[320];
	FILE *f = fopen(t->db, "wb");

	assert_non_null(f);
	for (int i = 0; i < 3000; i++)
		fprintf(f, "this is not a database %d\n", i);
	fclose(f);
	/* A stale -wal/-shm beside it must move aside too. */
	snprintf(wal, sizeof(wal), "%s-wal", t->db);
	f = fopen(wal, "wb");
	assert_non_null(f);
	fputs("garbage wal", f);
	fclose(f);
	assert_quarantines_logged(t);
	assert_int_equal(count_side(t->dir, "-wal"), 1);
}

static void test_zero_length_is_fresh(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st;
	int fd = open(t->db, O_CREAT | O_WRONLY, 0644);

	assert_true(fd >= 0);
	close(fd);
	st = open_ok(t->db, NULL);
	assert_int_equal(flyd_store_was_quarantined(st), 0);
	flyd_store_close(st);
	assert_int_equal(count_quarantined(t->dir), 0);
	assert_schema_current(t->db);
}

static void test_quarantine_unreadable(void **state)
{
	struct tdir *t = *state;

	if (geteuid() != 0) {
		make_good_db(t->db);
		assert_int_equal(chmod(t->db, 0), 0);
		assert_quarantines(t);
		return;
	}
	skip();
}

/* A directory where the file should be fails for root as well. */
static void test_quarantine_directory(void **state)
{
	struct tdir *t = *state;

	assert_int_equal(mkdir(t->db, 0755), 0);
	assert_quarantines(t);
}

/* First column of @p pragma's first row is "ok" (raw connection). */
static int raw_check_ok(const char *path, const char *pragma)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	int ok = 0;

	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) ==
		SQLITE_OK &&
	    sqlite3_prepare_v2(db, pragma, -1, &s, NULL) == SQLITE_OK &&
	    sqlite3_step(s) == SQLITE_ROW)
		ok = strcmp((const char *)sqlite3_column_text(s, 0), "ok") == 0;
	sqlite3_finalize(s);
	sqlite3_close(db);
	return ok;
}

/* Issue 21 (test_corrupt_inputs): a byte flip that quick_check lets
 * through -- an index no longer matching its table -- was opened and
 * served, and a winner committed into it then read back as not found (an
 * acknowledged winner lost).  Such a file is quarantined at open.  The
 * flip is searched for here (the first byte of a good DB's pages whose
 * change passes quick_check and fails integrity_check). */
static void test_issue_21_index_damage_quarantined(void **state)
{
	struct tdir *t = *state;
	struct stat sb;
	long found = -1;

	make_good_db(t->db);
	assert_int_equal(stat(t->db, &sb), 0);
	for (long off = 4096 + 100; off < sb.st_size && found < 0; off += 13) {
		flip_at(t->db, off);
		if (raw_check_ok(t->db, "PRAGMA quick_check") &&
		    !raw_check_ok(t->db, "PRAGMA integrity_check"))
			found = off;
		else
			flip_at(t->db, off); /* back as it was */
	}
	if (found < 0)
		fail_msg("no flip passes quick_check and fails "
			 "integrity_check");
	assert_quarantines_logged(t);
}

/* Issue 21 (test_corrupt_inputs): a file whose user_version is older
 * than its tables is refused (FLY_E_STORAGE, not altered), and the log
 * names SQLite's reason -- it said msg="not an error", the message read
 * after the ROLLBACK. */
static void test_issue_21_migrate_failure_names_cause(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = NULL;
	char logp[320], *text;
	size_t n;
	int fd, saved = dup(STDERR_FILENO), rc;
	sqlite3 *db;

	make_good_db(t->db);
	db = raw_open(t->db);
	raw_exec(db, "PRAGMA user_version = 0");
	sqlite3_close(db);
	snprintf(logp, sizeof(logp), "%s/stderr.log", t->dir);
	fd = open(logp, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	assert_true(fd >= 0 && saved >= 0);
	dup2(fd, STDERR_FILENO);
	close(fd);
	rc = flyd_store_open(t->db, NULL, &st);
	dup2(saved, STDERR_FILENO);
	close(saved);
	assert_int_equal(rc, FLY_E_STORAGE);
	assert_null(st);
	text = slurp(logp, &n);
	text[n] = '\0';
	if (strstr(text, "db_migrate_failed") == NULL ||
	    strstr(text, "already exists") == NULL)
		fail_msg("no cause in the log:\n%s", text);
	free(text);
	assert_int_equal(raw_int(t->db, "PRAGMA user_version"), 0);
	assert_int_equal(raw_int(t->db, "SELECT count(*) FROM results"), 410);
}

/* Nothing to quarantine: the directory of the DB does not exist. */
static void test_open_missing_dir(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = NULL;
	char path[320];

	snprintf(path, sizeof(path), "%s/nope/tuning.db", t->dir);
	assert_int_equal(flyd_store_open(path, NULL, &st), FLY_E_STORAGE);
	assert_null(st);
	assert_int_equal(flyd_store_open("", NULL, &st), -EINVAL);
}

/* ------------------------------------------------------------ concurrency */

static int child_writer(const char *path, int id)
{
	struct flyd_store *st = NULL;
	char key[64];

	if (flyd_store_open(path, NULL, &st) != 0)
		return 1;
	for (int i = 0; i < 200; i++) {
		struct flyd_result r;
		struct flyd_trial tr = mktrial("x", i, FLYD_OUT_OK);

		snprintf(key, sizeof(key), "c%d/k%03d", id, i);
		r = mkres(key, "v", i + 1);
		if (flyd_store_result_put(st, &r, &tr, 1) != 0)
			return 2;
	}
	flyd_store_close(st);
	return 0;
}

static void test_two_processes(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st;
	pid_t pid[2];
	char ok[16];

	for (int c = 0; c < 2; c++) {
		pid[c] = fork();
		assert_true(pid[c] >= 0);
		if (pid[c] == 0)
			_exit(child_writer(t->db, c));
	}
	for (int c = 0; c < 2; c++) {
		int ws = 0;

		assert_int_equal(waitpid(pid[c], &ws, 0), pid[c]);
		assert_true(WIFEXITED(ws));
		assert_int_equal(WEXITSTATUS(ws), 0);
	}
	st = open_ok(t->db, NULL);
	assert_int_equal(flyd_store_result_count(st, DEV, LIBVER), 400);
	flyd_store_close(st);
	assert_int_equal(raw_int(t->db, "SELECT count(*) FROM trials"), 400);
	raw_text(t->db, "PRAGMA integrity_check", ok, sizeof(ok));
	assert_string_equal(ok, "ok");
	assert_schema_current(t->db);
}

/* A writer holding the lock past the busy timeout: FLY_E_STORAGE, and
 * nothing half-written. */
static void test_busy_is_storage_error(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	struct flyd_result r = mkres("gemm/busy", "v", 1);
	sqlite3 *db = raw_open(t->db);

	raw_exec(db, "BEGIN IMMEDIATE");
	sqlite3_busy_timeout(db, 0);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), FLY_E_STORAGE);
	raw_exec(db, "ROLLBACK");
	sqlite3_close(db);
	assert_int_equal(
	    flyd_store_result_get(st, "gemm/busy", DEV, LIBVER, &r),
	    FLY_E_NOTFOUND);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	flyd_store_close(st);
}

/* ------------------------------------------------------------ results */

struct collect {
	int n;
	int stop_after;
	char keys[16][FLY_KEY_MAX];
	double us[16];
};

static int collect_cb(void *ctx, const struct flyd_result *r)
{
	struct collect *c = ctx;

	assert_true(c->n < 16);
	snprintf(c->keys[c->n], FLY_KEY_MAX, "%s", r->key);
	c->us[c->n] = r->d.median_us;
	assert_string_equal(r->device, DEV);
	assert_string_equal(r->libver, LIBVER);
	c->n++;
	return c->stop_after > 0 && c->n >= c->stop_after ? 7 : 0;
}

static void test_result_put_get_forget(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	struct flyd_result r = mkres("gemm/a", "tiled", 5), g;
	struct flyd_job j;
	int64_t n = -1;

	assert_int_equal(flyd_store_result_get(st, "gemm/a", DEV, LIBVER, &g),
			 FLY_E_NOTFOUND);
	memset(&j, 0, sizeof(j));
	snprintf(j.key, sizeof(j.key), "gemm/a");
	assert_int_equal(flyd_store_job_put(st, DEV, &j), 0);
	r.d.nparams = FLY_PARAMS_MAX;
	for (int i = 0; i < FLY_PARAMS_MAX; i++)
		r.d.params[i] = i == 7 ? INT64_MIN : i * 1000;
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	assert_int_equal(flyd_store_result_get(st, "gemm/a", DEV, LIBVER, &g),
			 0);
	assert_string_equal(g.key, "gemm/a");
	assert_string_equal(g.d.variant, "tiled");
	assert_int_equal(g.d.status, FLY_STATUS_TUNED);
	assert_int_equal(g.d.nparams, FLY_PARAMS_MAX);
	assert_memory_equal(g.d.params, r.d.params, sizeof(r.d.params));
	assert_true(g.d.median_us == 5 && g.mad_us == 0.5 && g.tune_s == 1.5);
	assert_int_equal(g.tuned_at, 1700000000);
	/* The put removed the key's job. */
	assert_int_equal(raw_int(t->db, "SELECT count(*) FROM jobs"), 0);
	/* Other device or libver: not found. */
	assert_int_equal(
	    flyd_store_result_get(st, "gemm/a", "ffff", LIBVER, &g),
	    FLY_E_NOTFOUND);
	assert_int_equal(flyd_store_result_get(st, "gemm/a", DEV, "x", &g),
			 FLY_E_NOTFOUND);
	/* Replace. */
	r = mkres("gemm/a", "wide", 3);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	assert_int_equal(flyd_store_result_get(st, "gemm/a", DEV, LIBVER, &g),
			 0);
	assert_string_equal(g.d.variant, "wide");
	assert_int_equal(flyd_store_result_count(st, DEV, LIBVER), 1);
	/* Validation: empty key or variant, too many params. */
	r = mkres("", "v", 1);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), -EINVAL);
	r = mkres("gemm/b", "", 1);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), -EINVAL);
	r = mkres("gemm/b", "v", 1);
	r.d.nparams = FLY_PARAMS_MAX + 1;
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), -EINVAL);
	/* Forget one, then all. */
	r = mkres("gemm/b", "v", 1);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	r = mkres("gemm/c", "v", 1);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	assert_int_equal(flyd_store_forget(st, "gemm/a", DEV, LIBVER, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(flyd_store_result_get(st, "gemm/a", DEV, LIBVER, &g),
			 FLY_E_NOTFOUND);
	assert_int_equal(flyd_store_forget(st, "gemm/zzz", DEV, LIBVER, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(flyd_store_forget(st, NULL, DEV, LIBVER, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(flyd_store_result_count(st, DEV, LIBVER), 0);
	flyd_store_close(st);
}

static void test_result_iter_pages(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	const char *keys[] = {"k/d", "k/a", "k/e", "k/b", "k/c"};
	struct collect c;
	struct flyd_result r;

	for (int i = 0; i < 5; i++) {
		r = mkres(keys[i], "v", i);
		assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	}
	r = mkres("k/other-dev", "v", 1);
	snprintf(r.device, sizeof(r.device), "fedcba9876543210");
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);

	memset(&c, 0, sizeof(c));
	assert_int_equal(
	    flyd_store_result_iter(st, DEV, LIBVER, NULL, 0, collect_cb, &c),
	    0);
	assert_int_equal(c.n, 5);
	for (int i = 0; i < 5; i++)
		assert_int_equal(c.keys[i][2], 'a' + i);
	/* Pages of 2, each continuing after the last key seen. */
	memset(&c, 0, sizeof(c));
	assert_int_equal(
	    flyd_store_result_iter(st, DEV, LIBVER, NULL, 2, collect_cb, &c),
	    0);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.keys[1], "k/b");
	assert_int_equal(flyd_store_result_iter(st, DEV, LIBVER, c.keys[1], 2,
						collect_cb, &c),
			 0);
	assert_int_equal(c.n, 4);
	assert_string_equal(c.keys[2], "k/c");
	assert_string_equal(c.keys[3], "k/d");
	assert_int_equal(flyd_store_result_iter(st, DEV, LIBVER, c.keys[3], 2,
						collect_cb, &c),
			 0);
	assert_int_equal(c.n, 5);
	assert_string_equal(c.keys[4], "k/e");
	/* A callback returning non-zero stops; its value is returned. */
	memset(&c, 0, sizeof(c));
	c.stop_after = 3;
	assert_int_equal(
	    flyd_store_result_iter(st, DEV, LIBVER, NULL, 0, collect_cb, &c),
	    7);
	assert_int_equal(c.n, 3);
	assert_int_equal(flyd_store_result_count(st, DEV, LIBVER), 5);
	assert_int_equal(
	    flyd_store_result_count(st, "fedcba9876543210", LIBVER), 1);
	flyd_store_close(st);
}

/* ------------------------------------------------------------ trials */

struct tcollect {
	int n;
	struct flyd_trial t[8];
};

static int tcollect_cb(void *ctx, const struct flyd_trial *t)
{
	struct tcollect *c = ctx;

	assert_true(c->n < 8);
	c->t[c->n++] = *t;
	return 0;
}

static void test_trials_and_faulted(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	struct flyd_trial tr[3] = {mktrial("a", 1, FLYD_OUT_OK),
				   mktrial("b", 2, FLYD_OUT_WRONG),
				   mktrial("c", 3, FLYD_OUT_FAULTED)};
	struct flyd_trial bad = mktrial("", 1, FLYD_OUT_OK);
	struct flyd_result r = mkres("gemm/t", "a", 12.5);
	const int64_t p3[2] = {3, 4}, p9[2] = {9, 4};
	struct tcollect c;

	assert_int_equal(
	    flyd_store_is_faulted(st, "gemm/t", DEV, LIBVER, "c", p3, 2), 0);
	assert_int_equal(
	    flyd_store_trials_add(st, "gemm/t", DEV, LIBVER, &tr[2], 1), 0);
	assert_int_equal(
	    flyd_store_is_faulted(st, "gemm/t", DEV, LIBVER, "c", p3, 2), 1);
	assert_int_equal(
	    flyd_store_is_faulted(st, "gemm/t", DEV, LIBVER, "c", p9, 2), 0);
	assert_int_equal(
	    flyd_store_is_faulted(st, "gemm/t", DEV, LIBVER, "c", p3, 1), 0);
	assert_int_equal(
	    flyd_store_is_faulted(st, "gemm/t", DEV, LIBVER, "b", p3, 2), 0);
	assert_int_equal(
	    flyd_store_is_faulted(st, "gemm/u", DEV, LIBVER, "c", p3, 2), 0);
	assert_int_equal(
	    flyd_store_trials_add(st, "gemm/t", DEV, LIBVER, &bad, 1), -EINVAL);
	assert_int_equal(flyd_store_result_put(st, &r, tr, 2), 0);

	memset(&c, 0, sizeof(c));
	assert_int_equal(
	    flyd_store_trial_iter(st, "gemm/t", DEV, LIBVER, tcollect_cb, &c),
	    0);
	assert_int_equal(c.n, 3);
	assert_string_equal(c.t[0].variant, "c");
	assert_int_equal(c.t[0].outcome, FLYD_OUT_FAULTED);
	assert_string_equal(c.t[1].variant, "a");
	assert_int_equal(c.t[1].outcome, FLYD_OUT_OK);
	assert_string_equal(c.t[2].variant, "b");
	assert_int_equal(c.t[2].outcome, FLYD_OUT_WRONG);
	assert_int_equal(c.t[2].nparams, 2);
	assert_int_equal(c.t[2].params[0], 2);
	assert_int_equal(c.t[2].params[1], 4);
	assert_int_equal(c.t[2].reps, 30);
	assert_true(c.t[2].median_us == 12.5 && c.t[2].mad_us == 0.25);
	assert_string_equal(c.t[2].reason, "reason 2");
	/* Forgetting the key removes its trials too. */
	assert_int_equal(flyd_store_forget(st, "gemm/t", DEV, LIBVER, NULL), 0);
	memset(&c, 0, sizeof(c));
	assert_int_equal(
	    flyd_store_trial_iter(st, "gemm/t", DEV, LIBVER, tcollect_cb, &c),
	    0);
	assert_int_equal(c.n, 0);
	assert_int_equal(
	    flyd_store_is_faulted(st, "gemm/t", DEV, LIBVER, "c", p3, 2), 0);
	flyd_store_close(st);
}

static void test_outcome_names(void **state)
{
	(void)state;
	for (int i = FLYD_OUT_OK; i <= FLYD_OUT_ERROR; i++)
		assert_int_equal(flyd_outcome_parse(flyd_outcome_name(i)), i);
	assert_string_equal(flyd_outcome_name(FLYD_OUT_FAULTED), "faulted");
	assert_true(flyd_outcome_parse("bogus") < 0);
	assert_true(flyd_outcome_parse(NULL) < 0);
}

/* ------------------------------------------------------------ jobs */

struct jcollect {
	int n;
	struct flyd_job j[8];
};

static int jcollect_cb(void *ctx, const struct flyd_job *j)
{
	struct jcollect *c = ctx;

	assert_true(c->n < 8);
	c->j[c->n++] = *j;
	return 0;
}

static void test_jobs(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	struct flyd_job j;
	struct jcollect c;

	memset(&j, 0, sizeof(j));
	snprintf(j.key, sizeof(j.key), "bg/1");
	j.queued_at = 10;
	assert_int_equal(flyd_store_job_put(st, DEV, &j), 0);
	snprintf(j.key, sizeof(j.key), "explicit");
	j.priority = 1;
	j.force = 1;
	j.queued_at = 20;
	assert_int_equal(flyd_store_job_put(st, DEV, &j), 0);
	snprintf(j.key, sizeof(j.key), "bg/0");
	j.priority = 0;
	j.force = 0;
	j.queued_at = 5;
	assert_int_equal(flyd_store_job_put(st, DEV, &j), 0);
	assert_int_equal(flyd_store_job_put(st, "fedcba9876543210", &j), 0);
	/* Re-putting a job replaces it, it does not duplicate it. */
	assert_int_equal(flyd_store_job_put(st, DEV, &j), 0);
	snprintf(j.key, sizeof(j.key), "%s", "");
	assert_int_equal(flyd_store_job_put(st, DEV, &j), -EINVAL);

	memset(&c, 0, sizeof(c));
	assert_int_equal(flyd_store_job_iter(st, DEV, jcollect_cb, &c), 0);
	assert_int_equal(c.n, 3);
	assert_string_equal(c.j[0].key, "explicit");
	assert_int_equal(c.j[0].priority, 1);
	assert_int_equal(c.j[0].force, 1);
	assert_int_equal(c.j[0].queued_at, 20);
	assert_string_equal(c.j[1].key, "bg/0");
	assert_string_equal(c.j[2].key, "bg/1");

	assert_int_equal(flyd_store_job_del(st, DEV, "explicit"), 0);
	assert_int_equal(flyd_store_job_del(st, DEV, "not-there"), 0);
	flyd_store_close(st);
	/* Jobs survive a restart. */
	st = open_ok(t->db, NULL);
	memset(&c, 0, sizeof(c));
	assert_int_equal(flyd_store_job_iter(st, DEV, jcollect_cb, &c), 0);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.j[0].key, "bg/0");
	flyd_store_close(st);
}

/* ------------------------------------------------------------ import */

static void test_import_all_or_nothing(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	struct flyd_result rs[3] = {mkres("i/a", "v", 1), mkres("i/b", "v", 2),
				    mkres("i/c", "v", 3)};
	struct flyd_result g;
	char src[16];

	assert_int_equal(flyd_store_import(st, rs, 3), 0);
	assert_int_equal(flyd_store_result_count(st, DEV, LIBVER), 3);
	raw_text(t->db, "SELECT DISTINCT source FROM results", src,
		 sizeof(src));
	assert_string_equal(src, "imported");

	/* One invalid row (empty key) among new and changed rows. */
	rs[0] = mkres("i/a", "changed", 9);
	rs[1] = mkres("", "v", 2);
	rs[2] = mkres("i/new", "v", 3);
	assert_int_equal(flyd_store_import(st, rs, 3), FLY_E_INVALID);
	rs[1] = mkres("i/b", "", 2);
	assert_int_equal(flyd_store_import(st, rs, 3), FLY_E_INVALID);
	assert_int_equal(flyd_store_result_count(st, DEV, LIBVER), 3);
	assert_int_equal(flyd_store_result_get(st, "i/a", DEV, LIBVER, &g), 0);
	assert_string_equal(g.d.variant, "v");
	assert_int_equal(flyd_store_result_get(st, "i/new", DEV, LIBVER, &g),
			 FLY_E_NOTFOUND);
	assert_int_equal(flyd_store_import(st, NULL, 0), 0);
	flyd_store_close(st);
}

/* A failure inside the transaction (forced by a trigger) leaves nothing:
 * no result row, no trial, the job still queued; import likewise. */
static void test_put_and_import_atomic(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	struct flyd_trial tr[2] = {mktrial("a", 1, FLYD_OUT_OK),
				   mktrial("boom", 2, FLYD_OUT_OK)};
	struct flyd_result r = mkres("gemm/atomic", "a", 1), g;
	struct flyd_result rs[3] = {mkres("i/1", "v", 1),
				    mkres("i/boom", "v", 2),
				    mkres("i/3", "v", 3)};
	struct flyd_job j;
	sqlite3 *db = raw_open(t->db);

	raw_exec(db, "CREATE TRIGGER boom_t BEFORE INSERT ON trials"
		     " WHEN NEW.variant = 'boom' BEGIN"
		     " SELECT RAISE(ABORT, 'boom'); END;"
		     "CREATE TRIGGER boom_r BEFORE INSERT ON results"
		     " WHEN NEW.key = 'i/boom' BEGIN"
		     " SELECT RAISE(ABORT, 'boom'); END;");
	sqlite3_close(db);
	memset(&j, 0, sizeof(j));
	snprintf(j.key, sizeof(j.key), "gemm/atomic");
	assert_int_equal(flyd_store_job_put(st, DEV, &j), 0);
	assert_int_equal(flyd_store_result_put(st, &r, tr, 2), FLY_E_STORAGE);
	assert_int_equal(
	    flyd_store_result_get(st, "gemm/atomic", DEV, LIBVER, &g),
	    FLY_E_NOTFOUND);
	assert_int_equal(raw_int(t->db, "SELECT count(*) FROM trials"), 0);
	assert_int_equal(raw_int(t->db, "SELECT count(*) FROM jobs"), 1);
	assert_int_equal(flyd_store_import(st, rs, 3), FLY_E_STORAGE);
	assert_int_equal(flyd_store_result_count(st, DEV, LIBVER), 0);
	/* The store is still usable afterwards. */
	assert_int_equal(flyd_store_result_put(st, &r, tr, 1), 0);
	assert_int_equal(raw_int(t->db, "SELECT count(*) FROM jobs"), 0);
	assert_int_equal(flyd_store_ping(st), 0);
	flyd_store_close(st);
}

/* ------------------------------------------------------------ system DB */

/* flyd_store_set_system: attach, detach, a missing file (none, logged),
 * attach again; the local DB is untouched throughout. */
static void test_system_db_swap(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->sys, NULL);
	struct flyd_result r, g;

	r = mkres("s/a", "sysvariant", 1);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	flyd_store_close(st);
	st = open_ok(t->db, NULL);
	r = mkres("l/a", "local", 2);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	assert_int_equal(flyd_store_result_get(st, "s/a", DEV, LIBVER, &g),
			 FLY_E_NOTFOUND);
	assert_int_equal(flyd_store_set_system(st, t->sys), 1);
	assert_int_equal(flyd_store_result_get(st, "s/a", DEV, LIBVER, &g), 0);
	assert_string_equal(g.d.variant, "sysvariant");
	assert_int_equal(flyd_store_set_system(st, NULL), 0);
	assert_int_equal(flyd_store_result_get(st, "s/a", DEV, LIBVER, &g),
			 FLY_E_NOTFOUND);
	assert_int_equal(flyd_store_set_system(st, "/nonexistent/sys.db"), 0);
	assert_int_equal(flyd_store_result_get(st, "s/a", DEV, LIBVER, &g),
			 FLY_E_NOTFOUND);
	assert_int_equal(flyd_store_set_system(st, t->sys), 1);
	assert_int_equal(flyd_store_result_get(st, "s/a", DEV, LIBVER, &g), 0);
	assert_int_equal(flyd_store_result_get(st, "l/a", DEV, LIBVER, &g), 0);
	assert_string_equal(g.d.variant, "local");
	flyd_store_close(st);
}

static void test_system_db_layering(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->sys, NULL);
	struct flyd_result r, g;
	struct collect c;
	struct stat s1, s2;
	char *before, *after;
	size_t n1, n2;
	int64_t n = 0;

	r = mkres("s/a", "sysvariant", 1);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	r = mkres("s/b", "sysvariant", 2);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	flyd_store_close(st);
	/* As a package would ship it: rollback journal, read-only. */
	{
		sqlite3 *db = raw_open(t->sys);
		raw_exec(db, "PRAGMA journal_mode = DELETE");
		sqlite3_close(db);
	}
	assert_int_equal(chmod(t->sys, 0444), 0);
	assert_int_equal(stat(t->sys, &s1), 0);
	before = slurp(t->sys, &n1);

	st = open_ok(t->db, t->sys);
	assert_int_equal(flyd_store_result_get(st, "s/a", DEV, LIBVER, &g), 0);
	assert_string_equal(g.d.variant, "sysvariant");
	assert_int_equal(g.d.nparams, 3);
	assert_int_equal(g.d.params[2], INT64_MAX);
	/* Local shadows system. */
	r = mkres("s/b", "local", 20);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	r = mkres("s/c", "local", 30);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	assert_int_equal(flyd_store_result_get(st, "s/b", DEV, LIBVER, &g), 0);
	assert_string_equal(g.d.variant, "local");
	/* Iteration merges, ordered by key, local wins per key. */
	memset(&c, 0, sizeof(c));
	assert_int_equal(
	    flyd_store_result_iter(st, DEV, LIBVER, NULL, 0, collect_cb, &c),
	    0);
	assert_int_equal(c.n, 3);
	assert_string_equal(c.keys[0], "s/a");
	assert_true(c.us[0] == 1);
	assert_string_equal(c.keys[1], "s/b");
	assert_true(c.us[1] == 20);
	assert_string_equal(c.keys[2], "s/c");
	memset(&c, 0, sizeof(c));
	assert_int_equal(
	    flyd_store_result_iter(st, DEV, LIBVER, "s/a", 1, collect_cb, &c),
	    0);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.keys[0], "s/b");
	assert_int_equal(flyd_store_result_count(st, DEV, LIBVER), 3);
	/* Forget touches local rows only: the system answer reappears. */
	assert_int_equal(flyd_store_forget(st, NULL, DEV, LIBVER, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(flyd_store_result_get(st, "s/b", DEV, LIBVER, &g), 0);
	assert_string_equal(g.d.variant, "sysvariant");
	assert_int_equal(flyd_store_import(st, &r, 1), 0);
	flyd_store_close(st);

	assert_int_equal(stat(t->sys, &s2), 0);
	assert_true(s1.st_mtim.tv_sec == s2.st_mtim.tv_sec &&
		    s1.st_mtim.tv_nsec == s2.st_mtim.tv_nsec);
	after = slurp(t->sys, &n2);
	assert_int_equal(n1, n2);
	assert_memory_equal(before, after, n1);
	free(before);
	free(after);
	/* A missing system DB is not an error: no extra answers. */
	st = open_ok(t->db, "/nonexistent/system.db");
	assert_int_equal(flyd_store_result_get(st, "s/a", DEV, LIBVER, &g),
			 FLY_E_NOTFOUND);
	flyd_store_close(st);
}

/* ------------------------------------------------------------ devices */

static void test_device_id(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	char id[FLYD_DEVID_MAX], id2[FLYD_DEVID_MAX], fp[64];
	const char *line = "cpu x86_64 flyk-1.0";

	/* FNV-1a 64 reference values. */
	flyd_store_device_id("", id);
	assert_string_equal(id, "cbf29ce484222325");
	flyd_store_device_id("a", id);
	assert_string_equal(id, "af63dc4c8601ec8c");
	flyd_store_device_id("foobar", id);
	assert_string_equal(id, "85944171f73967e8");

	assert_int_equal(flyd_store_device_put(st, line, id), 0);
	flyd_store_device_id(line, id2);
	assert_string_equal(id, id2);
	assert_int_equal(strlen(id), 16);
	assert_int_equal(flyd_store_device_put(st, line, id2), 0);
	assert_int_equal(flyd_store_device_put(st, "", id2), -EINVAL);
	flyd_store_close(st);
	assert_int_equal(raw_int(t->db, "SELECT count(*) FROM devices"), 1);
	raw_text(t->db, "SELECT fingerprint FROM devices", fp, sizeof(fp));
	assert_string_equal(fp, line);
}

static int outbox_first(void *arg, const struct flyd_result *r)
{
	*(struct flyd_result *)arg = *r;
	return 1;
}

/* The fleet outbox (issue 24): off, a commit queues nothing; on, the
 * commit's own transaction queues the key, iterated with the current
 * winner, until deleted; an import (another node's winner) never does. */
static void test_fleet_outbox(void **state)
{
	struct tdir *t = *state;
	struct flyd_store *st = open_ok(t->db, NULL);
	struct flyd_result r = mkres("gemm/a", "v1", 2.0), got;

	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	assert_int_equal(flyd_store_outbox_count(st), 0);
	flyd_store_set_outbox(st, 1);
	r = mkres("gemm/b", "v2", 3.0);
	assert_int_equal(flyd_store_result_put(st, &r, NULL, 0), 0);
	assert_int_equal(flyd_store_outbox_count(st), 1);
	assert_int_equal(flyd_store_outbox_has(st, "gemm/b", DEV, LIBVER), 1);
	assert_int_equal(flyd_store_outbox_has(st, "gemm/a", DEV, LIBVER), 0);
	r = mkres("gemm/c", "v3", 4.0);
	assert_int_equal(flyd_store_import(st, &r, 1), 0);
	assert_int_equal(flyd_store_outbox_count(st), 1);
	memset(&got, 0, sizeof(got));
	assert_int_equal(flyd_store_outbox_iter(st, 1, outbox_first, &got), 1);
	assert_string_equal(got.key, "gemm/b");
	assert_string_equal(got.d.variant, "v2");
	assert_true(got.d.median_us == 3.0);
	assert_int_equal(got.d.nparams, 3);
	assert_true(got.d.params[2] == INT64_MAX);
	/* Durable: still queued after a reopen. */
	flyd_store_close(st);
	st = open_ok(t->db, NULL);
	assert_int_equal(flyd_store_outbox_count(st), 1);
	assert_int_equal(flyd_store_outbox_del(st, "gemm/b", DEV, LIBVER), 0);
	assert_int_equal(flyd_store_outbox_count(st), 0);
	flyd_store_close(st);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup_dir, teardown_dir)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_issue_18_device_prune),
	    T(test_fleet_outbox),
	    T(test_fresh_open_schema),
	    T(test_migrate_from_every_version),
	    T(test_newer_schema_refused),
	    T(test_quarantine_truncated),
	    T(test_quarantine_truncated_short),
	    T(test_quarantine_flipped),
	    T(test_quarantine_garbage),
	    T(test_zero_length_is_fresh),
	    T(test_quarantine_unreadable),
	    T(test_quarantine_directory),
	    T(test_issue_21_index_damage_quarantined),
	    T(test_issue_21_migrate_failure_names_cause),
	    T(test_open_missing_dir),
	    T(test_two_processes),
	    T(test_busy_is_storage_error),
	    T(test_result_put_get_forget),
	    T(test_result_iter_pages),
	    T(test_trials_and_faulted),
	    T(test_outcome_names),
	    T(test_jobs),
	    T(test_import_all_or_nothing),
	    T(test_put_and_import_atomic),
	    T(test_system_db_layering),
	    T(test_system_db_swap),
	    T(test_device_id),
	};

	return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
