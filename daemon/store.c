/*
 * store.c -- persistent tuning results (SQLite): devices, results, trials,
 * jobs.  See store.h for the contracts and tuning-db/README.md for the
 * schema and the migration rules.
 *
 * Owns: the sqlite3 connection and every prepared statement; no other
 * module includes <sqlite3.h>.  Thread: loop thread only (several
 * processes may open the same file: WAL + a 5 s busy timeout, and every
 * write transaction is BEGIN IMMEDIATE so two writers never deadlock on a
 * lock upgrade).
 * Invariants: after flyd_store_open() succeeds, the local DB's
 * PRAGMA user_version == the latest embedded migration; every write goes
 * to main.*, never to the attached read-only system DB ("sys");
 * synchronous=FULL is kept for every commit (not only winners), so any
 * acknowledged write survives a power cut.
 * Open order matters: nothing is written (not even the WAL switch) before
 * user_version has been read and found not newer than this binary.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "fly_abi.h"
#include "fly_hash.h"
#include "log.h"
#include "migrations.h"
#include "store.h"

#define STORE_BUSY_MS	    5000
#define STORE_JOURNAL_LIMIT (16 * 1024 * 1024)
#define STORE_CORRUPT	    1 /* internal: open found a file to quarantine */
#define STORE_PARAMS_TXT    (FLY_PARAMS_MAX * 22 + 4)
#define STORE_PATH_MAX	    4096

/* The cached (hot) statements, indexed by enum store_stmt. */
enum store_stmt {
	S_BEGIN,
	S_COMMIT,
	S_ROLLBACK,
	S_PING,
	S_GET,
	S_PUT,
	S_TRIAL,
	S_JOB_PUT,
	S_JOB_DEL,
	S_FAULTED,
	S_OUTBOX_PUT,
	S_GET_SYS, /* only with a system DB */
	S_COUNT
};

static const char *const stmt_sql[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    [S_PING] = "SELECT 1",
    [S_GET] = "SELECT variant, params, median_us, mad_us, status, tune_s,"
	      " tuned_at FROM main.results"
	      " WHERE key = ?1 AND device = ?2 AND libver = ?3",
    [S_PUT] = "INSERT OR REPLACE INTO main.results (key, device, libver,"
	      " variant, params, median_us, mad_us, status, tune_s,"
	      " tuned_at, source)"
	      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    [S_TRIAL] = "INSERT INTO main.trials (key, device, libver, variant,"
		" params, median_us, mad_us, reps, outcome, reason, at)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    [S_JOB_PUT] = "INSERT OR REPLACE INTO main.jobs (key, device,"
		  " priority, force, queued_at, state, faults)"
		  " VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6)",
    [S_JOB_DEL] = "DELETE FROM main.jobs WHERE key = ?1 AND device = ?2",
    [S_FAULTED] = "SELECT 1 FROM main.trials WHERE key = ?1"
		  " AND device = ?2 AND libver = ?3 AND variant = ?4"
		  " AND params = ?5 AND outcome = 'faulted' LIMIT 1",
    [S_OUTBOX_PUT] = "INSERT OR REPLACE INTO main.fleet_outbox (key, device,"
		     " libver, queued_at) VALUES (?1, ?2, ?3, ?4)",
    [S_GET_SYS] = "SELECT variant, params, median_us, mad_us, status,"
		  " tune_s, tuned_at FROM sys.results"
		  " WHERE key = ?1 AND device = ?2 AND libver = ?3",
};

struct flyd_store {
	sqlite3 *db;		     /* the local DB (main) + sys if any */
	sqlite3_stmt *stmt[S_COUNT]; /* hot statements, NULL if absent */
	int has_sys;		     /* a system DB is attached as "sys" */
	int quarantined;	     /* the last open moved a file aside */
	int outbox;		     /* result_put queues a fleet push */
	char path[STORE_PATH_MAX];   /* the local DB's path, for logs */
	const char *last_err;	     /* sqlite3_errstr() of the last error */
};

static const char *const outcome_names[] = {"ok",      "rejected",   "wrong",
					    "faulted", "infeasible", "error"};

const char *flyd_outcome_name(int outcome)
{
	if (outcome < 0 || outcome > FLYD_OUT_ERROR)
		return "unknown";
	return outcome_names[outcome];
}

int flyd_outcome_parse(const char *s)
{
	for (int i = 0; i <= FLYD_OUT_ERROR; i++)
		if (s != NULL && strcmp(s, outcome_names[i]) == 0)
			return i;
	return -EINVAL;
}

/* ------------------------------------------------------------ helpers */

static int latest_version(void)
{
	return flyd_nmigrations == 0
		   ? 0
		   : flyd_migrations[flyd_nmigrations - 1].version;
}

/* Log a failed SQLite call (naming SQLite's error text) and map it to
 * FLY_E_STORAGE: BUSY after the timeout, FULL, IOERR, CORRUPT alike. */
static int store_err(struct flyd_store *st, int rc, const char *op)
{
	char q1[256], q2[128];

	flyd_log(FLYD_LOG_ERR, "db_error", "op=%s code=%d sqlite=%s msg=%s", op,
		 rc, flyd_log_q(sqlite3_errstr(rc), q2, sizeof(q2)),
		 flyd_log_q(sqlite3_errmsg(st->db), q1, sizeof(q1)));
	st->last_err = sqlite3_errstr(rc);
	return FLY_E_STORAGE;
}

/* Run a cached statement that returns no rows, then reset it. */
static int stmt_run(struct flyd_store *st, enum store_stmt i, const char *op)
{
	sqlite3_stmt *s = st->stmt[i];
	int rc = sqlite3_step(s);

	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	if (rc != SQLITE_DONE)
		return store_err(st, rc, op);
	return 0;
}

static int txn_begin(struct flyd_store *st)
{
	return stmt_run(st, S_BEGIN, "begin");
}

/* Commit when @p rc is 0, else roll back; returns the final status. */
static int txn_end(struct flyd_store *st, int rc)
{
	if (rc == 0)
		rc = stmt_run(st, S_COMMIT, "commit");
	if (rc != 0 && !sqlite3_get_autocommit(st->db))
		(void)stmt_run(st, S_ROLLBACK, "rollback");
	return rc;
}

static int bind_str(sqlite3_stmt *s, int col, const char *v)
{
	return sqlite3_bind_text(s, col, v, -1, SQLITE_TRANSIENT);
}

/* Copy column @p col as text into @p dst (cap bytes), "" when NULL. */
static void col_str(sqlite3_stmt *s, int col, char *dst, size_t cap)
{
	const char *v = (const char *)sqlite3_column_text(s, col);

	snprintf(dst, cap, "%s", v != NULL ? v : "");
}

/* params as the JSON array text "[1,2,3]" (no spaces: the text is
 * compared by is_faulted, so the form is canonical). */
static void params_fmt(char *buf, size_t cap, const int64_t *p, uint32_t n)
{
	size_t off = 1;

	buf[0] = '[';
	for (uint32_t i = 0; i < n && off < cap; i++)
		off += snprintf(buf + off, cap - off, "%s%lld", i ? "," : "",
				(long long)p[i]);
	if (off < cap - 1)
		snprintf(buf + off, cap - off, "]");
}

/* Parse a JSON array of integers (whitespace allowed).
 * @return 0, or -1 when malformed or longer than FLY_PARAMS_MAX. */
static int params_parse(const char *s, int64_t *p, uint32_t *n)
{
	char *end;

	*n = 0;
	if (s == NULL)
		return -1;
	s += strspn(s, " \t\r\n");
	if (*s++ != '[')
		return -1;
	s += strspn(s, " \t\r\n");
	if (*s == ']')
		return s[1 + strspn(s + 1, " \t\r\n")] == '\0' ? 0 : -1;
	for (;;) {
		if (*n >= FLY_PARAMS_MAX)
			return -1;
		errno = 0;
		p[*n] = strtoll(s, &end, 10);
		if (end == s || errno != 0)
			return -1;
		(*n)++;
		s = end + strspn(end, " \t\r\n");
		if (*s == ']')
			break;
		if (*s++ != ',')
			return -1;
	}
	s++;
	return s[strspn(s, " \t\r\n")] == '\0' ? 0 : -1;
}

/* A NUL-terminated, non-empty string shorter than @p cap. */
static int str_ok(const char *s, size_t cap)
{
	if (s == NULL)
		return 0;
	size_t n = strnlen(s, cap);
	return n > 0 && n < cap;
}

static int result_ok(const struct flyd_result *r)
{
	return str_ok(r->key, FLY_KEY_MAX) &&
	       str_ok(r->device, FLYD_DEVID_MAX) &&
	       strnlen(r->libver, FLYD_LIBVER_MAX) < FLYD_LIBVER_MAX &&
	       str_ok(r->d.variant, FLY_VARIANT_MAX) &&
	       r->d.nparams <= FLY_PARAMS_MAX && isfinite(r->d.median_us) &&
	       r->d.median_us >= 0 && isfinite(r->mad_us) &&
	       isfinite(r->tune_s);
}

static int trial_ok(const struct flyd_trial *t)
{
	return str_ok(t->variant, FLY_VARIANT_MAX) &&
	       t->nparams <= FLY_PARAMS_MAX && t->outcome >= 0 &&
	       t->outcome <= FLYD_OUT_ERROR &&
	       strnlen(t->reason, FLYD_REASON_MAX) < FLYD_REASON_MAX &&
	       isfinite(t->median_us) && isfinite(t->mad_us);
}

static int ids_ok(const char *key, const char *device, const char *libver)
{
	return (key == NULL || str_ok(key, FLY_KEY_MAX)) &&
	       str_ok(device, FLYD_DEVID_MAX) && libver != NULL &&
	       strnlen(libver, FLYD_LIBVER_MAX) < FLYD_LIBVER_MAX;
}

/* Read a one-integer pragma/query; returns the SQLite status. */
static int query_int(sqlite3 *db, const char *sql, int64_t *v)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);

	if (rc == SQLITE_OK) {
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW) {
			*v = sqlite3_column_int64(s, 0);
			rc = SQLITE_OK;
		} else if (rc == SQLITE_DONE) {
			rc = SQLITE_ERROR;
		}
	}
	sqlite3_finalize(s);
	return rc;
}

/* ------------------------------------------------------------ open */

/* Errors at open that mean the file itself is bad (quarantine it).  An
 * I/O error (EIO) is not one: a transient read error moved a good DB
 * aside and its winners with it (issue 21, test_faultsim io_restart); the
 * open fails instead (FLY_E_STORAGE, the daemon exits and is restarted). */
static int is_bad_file(int rc)
{
	return (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB ||
	       (rc & 0xff) == SQLITE_CANTOPEN || rc == SQLITE_IOERR_SHORT_READ;
}

/* Move PATH (and PATH-wal, PATH-shm) to PATH.corrupt-<unix seconds>. */
static int store_quarantine(const char *path, const char *reason)
{
	char dst[STORE_PATH_MAX + 48], a[STORE_PATH_MAX + 8];
	char b[STORE_PATH_MAX + 56], q1[512], q2[512], q3[256];
	static const char *const side[] = {"-wal", "-shm"};
	long long now = (long long)time(NULL);

	snprintf(dst, sizeof(dst), "%s.corrupt-%lld", path, now);
	for (int i = 1; access(dst, F_OK) == 0 && i < 1000; i++)
		snprintf(dst, sizeof(dst), "%s.corrupt-%lld.%d", path, now, i);
	if (rename(path, dst) != 0) {
		flyd_log(FLYD_LOG_CRIT, "db_quarantine_failed",
			 "path=%s errno=%d err=%s",
			 flyd_log_q(path, q1, sizeof(q1)), errno,
			 flyd_log_q(strerror(errno), q3, sizeof(q3)));
		return FLY_E_STORAGE;
	}
	for (int i = 0; i < 2; i++) {
		snprintf(a, sizeof(a), "%s%s", path, side[i]);
		snprintf(b, sizeof(b), "%s%s", dst, side[i]);
		if (rename(a, b) != 0 && errno != ENOENT)
			(void)unlink(a); /* never replay a stale log */
	}
	flyd_log(
	    FLYD_LOG_CRIT, "db_quarantined", "path=%s moved_to=%s reason=%s",
	    flyd_log_q(path, q1, sizeof(q1)), flyd_log_q(dst, q2, sizeof(q2)),
	    flyd_log_q(reason, q3, sizeof(q3)));
	return 0;
}

/* Check what the file holds, before writing anything to it: its
 * user_version (newer: FLY_E_SCHEMA) and integrity_check (STORE_CORRUPT).
 * Not quick_check: it does not compare indexes with their tables, and a
 * file whose index no longer matched was served and lost a winner
 * committed into it (issue 21, test_issue_21_index_damage_quarantined).
 * Measured: 0.12 s for 100,000 results (18 MB), quick_check 0.05 s. */
static int store_probe(struct flyd_store *st, char *why, size_t cap)
{
	sqlite3_stmt *s = NULL;
	int64_t v = 0;
	int rc = query_int(st->db, "PRAGMA main.user_version", &v);

	if (rc != SQLITE_OK) {
		snprintf(why, cap, "user_version: %s", sqlite3_errstr(rc));
		return is_bad_file(rc) ? STORE_CORRUPT
				       : store_err(st, rc, "probe");
	}
	if (v > latest_version()) {
		flyd_log(FLYD_LOG_ERR, "db_schema_newer",
			 "path=%s user_version=%lld supported=%d", st->path,
			 (long long)v, latest_version());
		return FLY_E_SCHEMA;
	}
	rc = sqlite3_prepare_v2(st->db, "PRAGMA main.integrity_check(1)", -1, &s,
				NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(s, 0);
		rc = t != NULL && strcmp(t, "ok") == 0 ? 0 : STORE_CORRUPT;
		snprintf(why, cap, "integrity_check: %s", t != NULL ? t : "?");
	} else {
		snprintf(why, cap, "integrity_check: %s", sqlite3_errstr(rc));
		rc = is_bad_file(rc) ? STORE_CORRUPT
				     : store_err(st, rc, "probe");
	}
	sqlite3_finalize(s);
	return rc;
}

/* Apply one migration inside BEGIN IMMEDIATE, re-reading user_version
 * under the write lock so two processes opening a fresh file at once
 * apply it once.  On failure @p err gets SQLite's message, taken before
 * the ROLLBACK resets it (issue 21: the log said "not an error"). */
static int store_migrate_one(sqlite3 *db, const struct flyd_migration *m,
			     char *err, size_t cap)
{
	char sql[64];
	int64_t cur = 0;
	int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);

	if (rc == SQLITE_OK)
		rc = query_int(db, "PRAGMA main.user_version", &cur);
	if (rc == SQLITE_OK && cur < m->version) {
		rc = sqlite3_exec(db, m->sql, NULL, NULL, NULL);
		snprintf(sql, sizeof(sql), "PRAGMA main.user_version = %d",
			 m->version);
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		snprintf(err, cap, "%s", sqlite3_errmsg(db));
		if (!sqlite3_get_autocommit(db))
			sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	}
	return rc;
}

static int store_migrate(struct flyd_store *st, int upto)
{
	for (size_t i = 0; i < flyd_nmigrations; i++) {
		const struct flyd_migration *m = &flyd_migrations[i];
		char err[200] = "", q[256];
		int rc;

		if (m->version > upto)
			break;
		rc = store_migrate_one(st->db, m, err, sizeof(err));
		if (rc != SQLITE_OK) {
			flyd_log(FLYD_LOG_ERR, "db_migrate_failed",
				 "path=%s migration=%s code=%d err=%s",
				 st->path, m->name, rc,
				 flyd_log_q(err, q, sizeof(q)));
			return FLY_E_STORAGE;
		}
	}
	return 0;
}

/* Switch to WAL.  The switch upgrades a read lock, and SQLite does not
 * call the busy handler for an upgrade, so a second process opening the
 * same file at the same moment gets SQLITE_BUSY at once: retry here for
 * up to the busy timeout (seen in test_two_processes under load). */
static int store_wal(struct flyd_store *st)
{
	char mode[16] = "";
	int rc;

	for (int waited = 0;; waited += 10) {
		sqlite3_stmt *s = NULL;

		rc = sqlite3_prepare_v2(
		    st->db, "PRAGMA main.journal_mode = WAL", -1, &s, NULL);
		if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
			col_str(s, 0, mode, sizeof(mode));
			rc = SQLITE_OK;
		}
		sqlite3_finalize(s);
		if (((rc & 0xff) != SQLITE_BUSY &&
		     (rc & 0xff) != SQLITE_LOCKED) ||
		    waited >= STORE_BUSY_MS)
			break;
		usleep(10 * 1000);
	}
	if (rc != SQLITE_OK)
		return store_err(st, rc, "journal_mode");
	if (strcmp(mode, "wal") != 0)
		flyd_log(FLYD_LOG_WARN, "db_not_wal", "path=%s journal_mode=%s",
			 st->path, mode);
	return 0;
}

/* The connection settings, applied only after store_probe() passed. */
static int store_pragmas(struct flyd_store *st)
{
	static const char *const sql =
	    "PRAGMA main.synchronous = FULL;"
	    "PRAGMA foreign_keys = ON;"
	    "PRAGMA main.journal_size_limit = 16777216;";
	int rc = store_wal(st);

	if (rc != 0)
		return rc;
	rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
	return rc == SQLITE_OK ? 0 : store_err(st, rc, "pragmas");
}

/* Open st->path: 0, STORE_CORRUPT (@p why says why), or an error.  On any
 * non-zero return st->db is closed. */
static int store_open_local(struct flyd_store *st, int upto, char *why,
			    size_t cap)
{
	struct stat sb;
	int rc = sqlite3_open_v2(
	    st->path, &st->db,
	    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, NULL);

	if (rc != SQLITE_OK) {
		snprintf(why, cap, "open: %s", sqlite3_errstr(rc));
		rc = stat(st->path, &sb) == 0 && is_bad_file(rc)
			 ? STORE_CORRUPT
			 : store_err(st, rc, "open");
		goto err_close;
	}
	sqlite3_extended_result_codes(st->db, 1);
	sqlite3_busy_timeout(st->db, STORE_BUSY_MS);
	if (sqlite3_db_readonly(st->db, "main") == 1) {
		flyd_log(FLYD_LOG_ERR, "db_readonly", "path=%s", st->path);
		rc = FLY_E_STORAGE;
		goto err_close;
	}
	/* Until the probe passes, closing must not checkpoint a WAL into
	 * the file nor delete the WAL: a refused or quarantined DB is left
	 * as it was found. */
	sqlite3_db_config(st->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
	rc = store_probe(st, why, cap);
	if (rc == 0) {
		sqlite3_db_config(st->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0,
				  NULL);
		rc = store_pragmas(st);
	}
	if (rc == 0)
		rc = store_migrate(st, upto);
	if (rc != 0)
		goto err_close;
	return 0;

err_close:
	sqlite3_close(st->db);
	st->db = NULL;
	return rc;
}

/* "file:" URI for a path, percent-encoding all but unreserved bytes. */
static void uri_ro(char *dst, size_t cap, const char *path)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = (size_t)snprintf(dst, cap, "file:");

	for (const unsigned char *p = (const unsigned char *)path;
	     *p != '\0' && o + 4 < cap; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("/._-~", *p) != NULL) {
			dst[o++] = (char)*p;
		} else {
			dst[o++] = '%';
			dst[o++] = hex[*p >> 4];
			dst[o++] = hex[*p & 15];
		}
	}
	snprintf(dst + o, cap - o, "?mode=ro");
}

/* Attach the read-only system DB as "sys".  A missing or unusable system
 * DB is logged and ignored: it only adds answers. */
static void store_attach_sys(struct flyd_store *st, const char *sys_path)
{
	char uri[3 * STORE_PATH_MAX + 32], q[512];
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(st->db, "ATTACH DATABASE ?1 AS sys", -1, &s,
				    NULL);

	uri_ro(uri, sizeof(uri), sys_path);
	if (rc == SQLITE_OK)
		rc = bind_str(s, 1, uri);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s) == SQLITE_DONE ? SQLITE_OK
						    : sqlite3_errcode(st->db);
	sqlite3_finalize(s);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(st->db, stmt_sql[S_GET_SYS], -1,
					&st->stmt[S_GET_SYS], NULL);
	if (rc == SQLITE_OK) {
		st->has_sys = 1;
		return;
	}
	flyd_log(FLYD_LOG_WARN, "db_system_unavailable", "path=%s err=%s",
		 flyd_log_q(sys_path, q, sizeof(q)), sqlite3_errstr(rc));
	sqlite3_exec(st->db, "DETACH DATABASE sys", NULL, NULL, NULL);
}

static int store_prepare(struct flyd_store *st)
{
	for (int i = 0; i < S_GET_SYS; i++) {
		int rc = sqlite3_prepare_v3(st->db, stmt_sql[i], -1,
					    SQLITE_PREPARE_PERSISTENT,
					    &st->stmt[i], NULL);
		if (rc != SQLITE_OK)
			return store_err(st, rc, "prepare");
	}
	return 0;
}

/* Open (create) and migrate @p path up to version @p upto, quarantining a
 * bad file once. */
static int store_open_upto(const char *path, const char *system_path, int upto,
			   struct flyd_store **out)
{
	struct flyd_store *st;
	char why[256] = "";
	int rc;

	*out = NULL;
	if (path == NULL || *path == '\0' || strlen(path) >= STORE_PATH_MAX - 2)
		return -EINVAL;
	st = calloc(1, sizeof(*st));
	if (st == NULL)
		return -ENOMEM;
	/* "file:..." would be read as a URI (SQLITE_OPEN_URI is on for the
	 * system DB's mode=ro): make such a relative name plainly a path. */
	snprintf(st->path, sizeof(st->path), "%s%s",
		 strncmp(path, "file:", 5) == 0 ? "./" : "", path);
	rc = store_open_local(st, upto, why, sizeof(why));
	if (rc == STORE_CORRUPT) {
		/* Look twice before moving a file aside: SQLite reports a
		 * transient read error on some paths as corruption, and a
		 * good DB was quarantined with its winners (issue 21,
		 * test_faultsim io_restart).  A damaged file fails again. */
		flyd_log(FLYD_LOG_WARN, "db_open_retry", "path=%s reason=%s",
			 st->path, why);
		rc = store_open_local(st, upto, why, sizeof(why));
	}
	if (rc == STORE_CORRUPT) {
		rc = store_quarantine(st->path, why);
		if (rc == 0) {
			st->quarantined = 1;
			rc = store_open_local(st, upto, why, sizeof(why));
			if (rc == STORE_CORRUPT)
				rc = FLY_E_STORAGE;
		}
	}
	if (rc != 0)
		goto err_free;
	if (system_path != NULL)
		store_attach_sys(st, system_path);
	rc = store_prepare(st);
	if (rc != 0)
		goto err_close;
	*out = st;
	return 0;

err_close:
	flyd_store_close(st);
	return rc;
err_free:
	free(st);
	return rc;
}

int flyd_store_open(const char *path, const char *system_path,
		    struct flyd_store **out)
{
	return store_open_upto(path, system_path, latest_version(), out);
}

int flyd_store_open_at_version(const char *path, int version)
{
	struct flyd_store *st;
	char why[256] = "";
	int rc;

	if (version < 0 || version > latest_version() || path == NULL ||
	    strlen(path) >= STORE_PATH_MAX)
		return -EINVAL;
	st = calloc(1, sizeof(*st));
	if (st == NULL)
		return -ENOMEM;
	snprintf(st->path, sizeof(st->path), "%s", path);
	/* No statements: an old schema may lack what they name. */
	rc = store_open_local(st, version, why, sizeof(why));
	if (rc == 0)
		sqlite3_close(st->db);
	free(st);
	return rc == STORE_CORRUPT ? FLY_E_STORAGE : rc;
}

void flyd_store_close(struct flyd_store *st)
{
	if (st == NULL)
		return;
	for (int i = 0; i < S_COUNT; i++)
		sqlite3_finalize(st->stmt[i]);
	sqlite3_close(st->db);
	free(st);
}

int flyd_store_set_system(struct flyd_store *st, const char *system_path)
{
	if (st->has_sys) {
		int rc;

		sqlite3_finalize(st->stmt[S_GET_SYS]);
		st->stmt[S_GET_SYS] = NULL;
		rc = sqlite3_exec(st->db, "DETACH DATABASE sys", NULL, NULL,
				  NULL);
		if (rc != SQLITE_OK) {
			/* still attached: its statement back, as it was */
			(void)sqlite3_prepare_v2(st->db, stmt_sql[S_GET_SYS],
						 -1, &st->stmt[S_GET_SYS],
						 NULL);
			return store_err(st, rc, "detach system db");
		}
		st->has_sys = 0;
	}
	if (system_path != NULL)
		store_attach_sys(st, system_path);
	return st->has_sys;
}

const char *flyd_store_last_error(const struct flyd_store *st)
{
	return st->last_err != NULL ? st->last_err : "unknown error";
}

int flyd_store_was_quarantined(const struct flyd_store *st)
{
	return st->quarantined;
}

int flyd_store_ping(struct flyd_store *st)
{
	sqlite3_stmt *s = st->stmt[S_PING];
	int rc = sqlite3_step(s);

	sqlite3_reset(s);
	return rc == SQLITE_ROW ? 0 : store_err(st, rc, "ping");
}

/* ------------------------------------------------------------ devices */

void flyd_store_device_id(const char *fingerprint, char id_out[FLYD_DEVID_MAX])
{
	uint64_t h = fly__hash_str(fingerprint != NULL ? fingerprint : "");

	snprintf(id_out, FLYD_DEVID_MAX, "%016llx", (unsigned long long)h);
}

int flyd_store_device_put(struct flyd_store *st, const char *fingerprint,
			  char id_out[FLYD_DEVID_MAX])
{
	static const char *const sql =
	    "INSERT INTO main.devices (id, fingerprint, first_seen,"
	    " last_seen) VALUES (?1, ?2, ?3, ?3) ON CONFLICT (id) DO UPDATE"
	    " SET fingerprint = excluded.fingerprint,"
	    " last_seen = excluded.last_seen";
	char id[FLYD_DEVID_MAX];
	sqlite3_stmt *s = NULL;
	int rc;

	if (fingerprint == NULL || *fingerprint == '\0')
		return -EINVAL;
	flyd_store_device_id(fingerprint, id);
	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		bind_str(s, 1, id);
		bind_str(s, 2, fingerprint);
		sqlite3_bind_int64(s, 3, (sqlite3_int64)time(NULL));
		rc = sqlite3_step(s);
	}
	sqlite3_finalize(s);
	if (rc != SQLITE_DONE)
		return store_err(st, rc, "device_put");
	memcpy(id_out, id, FLYD_DEVID_MAX);
	return 0;
}

/* The value of field @p name ("arch", "name"...) of a fingerprint line
 * (space-separated name=value, a value may be "quoted"), into @p out;
 * empty when absent. */
static void fp_field(const char *fp, const char *name, char *out, size_t cap)
{
	size_t n = strlen(name), o = 0;
	const char *p = fp;

	out[0] = '\0';
	while (p != NULL && *p != '\0') {
		if ((p == fp || p[-1] == ' ') && strncmp(p, name, n) == 0 &&
		    p[n] == '=') {
			const char *v = p + n + 1;
			char end = ' ';

			if (*v == '"')
				end = *v++;
			while (*v != '\0' && *v != end && o + 1 < cap)
				out[o++] = *v++;
			out[o] = '\0';
			return;
		}
		p = strchr(p, ' ');
		if (p != NULL)
			p++;
	}
}

static int same_hardware(const char *a, const char *b)
{
	static const char *const f[] = { "arch", "units", "name" };
	char x[128], y[128];

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		fp_field(a, f[i], x, sizeof(x));
		fp_field(b, f[i], y, sizeof(y));
		if (x[0] == '\0' || strcmp(x, y) != 0)
			return 0;
	}
	return 1;
}

int flyd_store_device_prune(struct flyd_store *st, const char *fingerprint,
			    int64_t *ndev, int64_t *nres)
{
	static const char *const del[] = {
		"DELETE FROM main.results WHERE device = ?1",
		"DELETE FROM main.trials WHERE device = ?1",
		"DELETE FROM main.jobs WHERE device = ?1",
		"DELETE FROM main.failed_jobs WHERE device = ?1",
		"DELETE FROM main.devices WHERE id = ?1",
	};
	enum { MAXDEV = 64 };
	char ids[MAXDEV][FLYD_DEVID_MAX], me[FLYD_DEVID_MAX];
	int nids = 0, rc;
	int64_t nd = 0, nr = 0;
	sqlite3_stmt *s = NULL;

	if (fingerprint == NULL || *fingerprint == '\0')
		return -EINVAL;
	flyd_store_device_id(fingerprint, me);
	rc = sqlite3_prepare_v2(st->db,
				"SELECT id, fingerprint FROM main.devices"
				" WHERE id <> ?1", -1, &s, NULL);
	if (rc != SQLITE_OK)
		return store_err(st, rc, "device_prune");
	bind_str(s, 1, me);
	while (nids < MAXDEV && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		const char *fp = (const char *)sqlite3_column_text(s, 1);

		if (fp != NULL && same_hardware(fp, fingerprint))
			col_str(s, 0, ids[nids++], FLYD_DEVID_MAX);
	}
	sqlite3_finalize(s);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return store_err(st, rc, "device_prune");
	rc = nids ? txn_begin(st) : 0;
	for (int i = 0; rc == 0 && i < nids; i++) {
		for (size_t q = 0; rc == 0 && q < sizeof(del) / sizeof(del[0]);
		     q++) {
			s = NULL;
			rc = sqlite3_prepare_v2(st->db, del[q], -1, &s, NULL);
			if (rc == SQLITE_OK) {
				bind_str(s, 1, ids[i]);
				rc = sqlite3_step(s);
			}
			sqlite3_finalize(s);
			rc = rc == SQLITE_DONE ? 0
					       : store_err(st, rc,
							   "device_prune");
			if (rc == 0 && q == 0)
				nr += sqlite3_changes(st->db);
		}
		nd++;
	}
	if (nids)
		rc = txn_end(st, rc);
	if (rc == 0) {
		if (ndev != NULL)
			*ndev = nd;
		if (nres != NULL)
			*nres = nr;
	}
	return rc;
}

/* ------------------------------------------------------------ results */

/* Fill @p r's row fields from columns variant, params, median_us, mad_us,
 * status, tune_s, tuned_at starting at @p c.  @return 0, or -1 when the
 * stored params do not parse. */
static int row_result(sqlite3_stmt *s, int c, struct flyd_result *r)
{
	col_str(s, c, r->d.variant, sizeof(r->d.variant));
	if (params_parse((const char *)sqlite3_column_text(s, c + 1),
			 r->d.params, &r->d.nparams) != 0)
		return -1;
	r->d.median_us = sqlite3_column_double(s, c + 2);
	r->mad_us = sqlite3_column_double(s, c + 3);
	r->d.status = (uint32_t)sqlite3_column_int(s, c + 4);
	r->tune_s = sqlite3_column_double(s, c + 5);
	r->tuned_at = sqlite3_column_int64(s, c + 6);
	return 0;
}

/* One lookup in main or sys: 0, FLY_E_NOTFOUND or FLY_E_STORAGE. */
static int result_get_in(struct flyd_store *st, enum store_stmt i,
			 const char *key, const char *device,
			 const char *libver, struct flyd_result *out)
{
	sqlite3_stmt *s = st->stmt[i];
	int rc;

	bind_str(s, 1, key);
	bind_str(s, 2, device);
	bind_str(s, 3, libver);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		memset(out, 0, sizeof(*out));
		snprintf(out->key, sizeof(out->key), "%s", key);
		snprintf(out->device, sizeof(out->device), "%s", device);
		snprintf(out->libver, sizeof(out->libver), "%s", libver);
		rc = row_result(s, 0, out) == 0 ? 0 : FLY_E_STORAGE;
		if (rc != 0)
			flyd_log(FLYD_LOG_ERR, "db_bad_row",
				 "table=results key=%s", key);
	} else {
		rc = rc == SQLITE_DONE ? FLY_E_NOTFOUND
				       : store_err(st, rc, "result_get");
	}
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return rc;
}

int flyd_store_result_get(struct flyd_store *st, const char *key,
			  const char *device, const char *libver,
			  struct flyd_result *out)
{
	int rc;

	if (key == NULL || !ids_ok(key, device, libver))
		return -EINVAL;
	rc = result_get_in(st, S_GET, key, device, libver, out);
	if (rc == FLY_E_NOTFOUND && st->has_sys)
		rc = result_get_in(st, S_GET_SYS, key, device, libver, out);
	return rc;
}

static int trials_insert(struct flyd_store *st, const char *key,
			 const char *device, const char *libver,
			 const struct flyd_trial *t, size_t n)
{
	char pj[STORE_PARAMS_TXT];
	sqlite3_stmt *s = st->stmt[S_TRIAL];
	int64_t now = (int64_t)time(NULL);

	for (size_t i = 0; i < n; i++) {
		params_fmt(pj, sizeof(pj), t[i].params, t[i].nparams);
		bind_str(s, 1, key);
		bind_str(s, 2, device);
		bind_str(s, 3, libver);
		bind_str(s, 4, t[i].variant);
		bind_str(s, 5, pj);
		sqlite3_bind_double(s, 6, t[i].median_us);
		sqlite3_bind_double(s, 7, t[i].mad_us);
		sqlite3_bind_int64(s, 8, t[i].reps);
		bind_str(s, 9, flyd_outcome_name(t[i].outcome));
		bind_str(s, 10, t[i].reason);
		sqlite3_bind_int64(s, 11, now);
		if (stmt_run(st, S_TRIAL, "trial_insert") != 0)
			return FLY_E_STORAGE;
	}
	return 0;
}

static int result_insert(struct flyd_store *st, const struct flyd_result *r,
			 const char *source)
{
	char pj[STORE_PARAMS_TXT];
	sqlite3_stmt *s = st->stmt[S_PUT];

	params_fmt(pj, sizeof(pj), r->d.params, r->d.nparams);
	bind_str(s, 1, r->key);
	bind_str(s, 2, r->device);
	bind_str(s, 3, r->libver);
	bind_str(s, 4, r->d.variant);
	bind_str(s, 5, pj);
	sqlite3_bind_double(s, 6, r->d.median_us);
	sqlite3_bind_double(s, 7, r->mad_us);
	sqlite3_bind_int64(s, 8, r->d.status);
	sqlite3_bind_double(s, 9, r->tune_s);
	sqlite3_bind_int64(s, 10, r->tuned_at);
	bind_str(s, 11, source);
	return stmt_run(st, S_PUT, source[0] == 'i' ? "import" : "result_put");
}

static int outbox_insert(struct flyd_store *st, const struct flyd_result *r)
{
	sqlite3_stmt *s = st->stmt[S_OUTBOX_PUT];

	bind_str(s, 1, r->key);
	bind_str(s, 2, r->device);
	bind_str(s, 3, r->libver);
	sqlite3_bind_int64(s, 4, (int64_t)time(NULL));
	return stmt_run(st, S_OUTBOX_PUT, "outbox_put");
}

static int job_delete(struct flyd_store *st, const char *device,
		      const char *key)
{
	bind_str(st->stmt[S_JOB_DEL], 1, key);
	bind_str(st->stmt[S_JOB_DEL], 2, device);
	return stmt_run(st, S_JOB_DEL, "job_del");
}

static int trials_valid(const struct flyd_trial *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!trial_ok(&t[i]))
			return 0;
	return t != NULL || n == 0;
}

int flyd_store_result_put(struct flyd_store *st, const struct flyd_result *r,
			  const struct flyd_trial *trials, size_t ntrials)
{
	int rc;

	if (r == NULL || !result_ok(r) || !trials_valid(trials, ntrials))
		return -EINVAL;
	rc = txn_begin(st);
	if (rc != 0)
		return rc;
	rc = result_insert(st, r, "tuned");
	if (rc == 0)
		rc = trials_insert(st, r->key, r->device, r->libver, trials,
				   ntrials);
	if (rc == 0)
		rc = job_delete(st, r->device, r->key);
	if (rc == 0 && st->outbox)
		rc = outbox_insert(st, r);
	return txn_end(st, rc);
}

int flyd_store_trials_add(struct flyd_store *st, const char *key,
			  const char *device, const char *libver,
			  const struct flyd_trial *trials, size_t ntrials)
{
	int rc;

	if (key == NULL || !ids_ok(key, device, libver) ||
	    !trials_valid(trials, ntrials))
		return -EINVAL;
	rc = txn_begin(st);
	if (rc != 0)
		return rc;
	rc = trials_insert(st, key, device, libver, trials, ntrials);
	return txn_end(st, rc);
}

/* Run a DELETE with ?1 key (NULL: any), ?2 device, ?3 libver. */
static int forget_in(struct flyd_store *st, const char *sql, const char *key,
		     const char *device, const char *libver, int64_t *n)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);

	if (rc == SQLITE_OK) {
		if (key != NULL)
			bind_str(s, 1, key);
		bind_str(s, 2, device);
		bind_str(s, 3, libver);
		rc = sqlite3_step(s);
	}
	sqlite3_finalize(s);
	if (rc != SQLITE_DONE)
		return store_err(st, rc, "forget");
	if (n != NULL)
		*n = sqlite3_changes64(st->db);
	return 0;
}

int flyd_store_forget(struct flyd_store *st, const char *key,
		      const char *device, const char *libver, int64_t *n)
{
	int64_t removed = 0;
	int rc;

	if (!ids_ok(key, device, libver))
		return -EINVAL;
	rc = txn_begin(st);
	if (rc != 0)
		return rc;
	rc = forget_in(st,
		       "DELETE FROM main.results WHERE (?1 IS NULL OR"
		       " key = ?1) AND device = ?2 AND libver = ?3",
		       key, device, libver, &removed);
	if (rc == 0)
		rc = forget_in(st,
			       "DELETE FROM main.trials WHERE (?1 IS NULL"
			       " OR key = ?1) AND device = ?2 AND"
			       " libver = ?3",
			       key, device, libver, NULL);
	rc = txn_end(st, rc);
	if (rc == 0 && n != NULL)
		*n = removed;
	return rc;
}

/* The results of ?1 device / ?2 libver: local rows, plus (with a system
 * DB) the system rows no local row shadows.  %s is the select list. */
#define RESULTS_LOCAL                                                          \
	"SELECT key, variant, params, median_us, mad_us, status, tune_s,"      \
	" tuned_at FROM main.results WHERE device = ?1 AND libver = ?2"
#define RESULTS_MERGED                                                         \
	"SELECT * FROM (" RESULTS_LOCAL " UNION ALL SELECT s.key,"             \
	" s.variant, s.params, s.median_us, s.mad_us, s.status, s.tune_s,"     \
	" s.tuned_at FROM sys.results s WHERE s.device = ?1 AND"               \
	" s.libver = ?2 AND NOT EXISTS (SELECT 1 FROM main.results m"          \
	" WHERE m.key = s.key AND m.device = s.device AND"                     \
	" m.libver = s.libver))"

int flyd_store_result_iter(struct flyd_store *st, const char *device,
			   const char *libver, const char *after, int64_t limit,
			   flyd_result_cb cb, void *ctx)
{
	const char *sql =
	    st->has_sys ? RESULTS_MERGED " WHERE key > ?3 ORDER BY key LIMIT ?4"
			: "SELECT * FROM (" RESULTS_LOCAL ") WHERE key > ?3"
			  " ORDER BY key LIMIT ?4";
	struct flyd_result r;
	sqlite3_stmt *s = NULL;
	int rc, stop = 0;

	if (!ids_ok(NULL, device, libver) || cb == NULL)
		return -EINVAL;
	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return store_err(st, rc, "result_iter");
	bind_str(s, 1, device);
	bind_str(s, 2, libver);
	bind_str(s, 3, after != NULL ? after : "");
	sqlite3_bind_int64(s, 4, limit > 0 ? limit : -1);
	while (stop == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		memset(&r, 0, sizeof(r));
		col_str(s, 0, r.key, sizeof(r.key));
		snprintf(r.device, sizeof(r.device), "%s", device);
		snprintf(r.libver, sizeof(r.libver), "%s", libver);
		if (row_result(s, 1, &r) != 0) {
			flyd_log(FLYD_LOG_WARN, "db_bad_row",
				 "table=results key=%s", r.key);
			continue;
		}
		stop = cb(ctx, &r);
	}
	sqlite3_finalize(s);
	if (stop != 0)
		return stop;
	return rc == SQLITE_DONE ? 0 : store_err(st, rc, "result_iter");
}

int64_t flyd_store_result_count(struct flyd_store *st, const char *device,
				const char *libver)
{
	const char *sql =
	    st->has_sys
		? "SELECT count(*) FROM (" RESULTS_MERGED ")"
		: "SELECT count(*) FROM main.results WHERE device = ?1 AND"
		  " libver = ?2";
	sqlite3_stmt *s = NULL;
	int64_t n = FLY_E_STORAGE;
	int rc;

	if (!ids_ok(NULL, device, libver))
		return -EINVAL;
	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		bind_str(s, 1, device);
		bind_str(s, 2, libver);
		rc = sqlite3_step(s);
	}
	if (rc == SQLITE_ROW)
		n = sqlite3_column_int64(s, 0);
	else
		store_err(st, rc, "result_count");
	sqlite3_finalize(s);
	return n;
}

int flyd_store_import(struct flyd_store *st, const struct flyd_result *rs,
		      size_t n)
{
	int rc;

	if (rs == NULL && n > 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (!result_ok(&rs[i])) {
			flyd_log(FLYD_LOG_WARN, "db_import_rejected",
				 "row=%zu reason=invalid", i);
			return FLY_E_INVALID;
		}
	}
	rc = txn_begin(st);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = result_insert(st, &rs[i], "imported");
	return txn_end(st, rc);
}

/* ------------------------------------------------------------ trials */

int flyd_store_trial_iter(struct flyd_store *st, const char *key,
			  const char *device, const char *libver,
			  flyd_trial_cb cb, void *ctx)
{
	static const char *const sql =
	    "SELECT variant, params, median_us, mad_us, reps, outcome,"
	    " reason FROM main.trials WHERE key = ?1 AND device = ?2 AND"
	    " libver = ?3 ORDER BY id";
	struct flyd_trial t;
	sqlite3_stmt *s = NULL;
	int rc, stop = 0;

	if (key == NULL || !ids_ok(key, device, libver) || cb == NULL)
		return -EINVAL;
	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return store_err(st, rc, "trial_iter");
	bind_str(s, 1, key);
	bind_str(s, 2, device);
	bind_str(s, 3, libver);
	while (stop == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		memset(&t, 0, sizeof(t));
		col_str(s, 0, t.variant, sizeof(t.variant));
		if (params_parse((const char *)sqlite3_column_text(s, 1),
				 t.params, &t.nparams) != 0)
			continue;
		t.median_us = sqlite3_column_double(s, 2);
		t.mad_us = sqlite3_column_double(s, 3);
		t.reps = (uint32_t)sqlite3_column_int64(s, 4);
		t.outcome =
		    flyd_outcome_parse((const char *)sqlite3_column_text(s, 5));
		if (t.outcome < 0)
			t.outcome = FLYD_OUT_ERROR;
		col_str(s, 6, t.reason, sizeof(t.reason));
		stop = cb(ctx, &t);
	}
	sqlite3_finalize(s);
	if (stop != 0)
		return stop;
	return rc == SQLITE_DONE ? 0 : store_err(st, rc, "trial_iter");
}

int flyd_store_is_faulted(struct flyd_store *st, const char *key,
			  const char *device, const char *libver,
			  const char *variant, const int64_t *params,
			  uint32_t nparams)
{
	char pj[STORE_PARAMS_TXT];
	sqlite3_stmt *s = st->stmt[S_FAULTED];
	int rc;

	if (key == NULL || !ids_ok(key, device, libver) || variant == NULL ||
	    nparams > FLY_PARAMS_MAX || (params == NULL && nparams > 0))
		return 0;
	params_fmt(pj, sizeof(pj), params, nparams);
	bind_str(s, 1, key);
	bind_str(s, 2, device);
	bind_str(s, 3, libver);
	bind_str(s, 4, variant);
	bind_str(s, 5, pj);
	rc = sqlite3_step(s);
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		store_err(st, rc, "is_faulted");
	return rc == SQLITE_ROW;
}

/* ------------------------------------------------------------ jobs */

int flyd_store_job_put(struct flyd_store *st, const char *device,
		       const struct flyd_job *j)
{
	sqlite3_stmt *s = st->stmt[S_JOB_PUT];

	if (j == NULL || !ids_ok(j->key, device, ""))
		return -EINVAL;
	bind_str(s, 1, j->key);
	bind_str(s, 2, device);
	sqlite3_bind_int(s, 3, j->priority);
	sqlite3_bind_int(s, 4, j->force);
	sqlite3_bind_int64(s, 5, j->queued_at);
	sqlite3_bind_int64(s, 6, j->faults);
	return stmt_run(st, S_JOB_PUT, "job_put");
}

int flyd_store_job_del(struct flyd_store *st, const char *device,
		       const char *key)
{
	if (key == NULL || !ids_ok(key, device, ""))
		return -EINVAL;
	return job_delete(st, device, key);
}

int flyd_store_job_iter(struct flyd_store *st, const char *device,
			flyd_job_cb cb, void *ctx)
{
	static const char *const sql =
	    "SELECT key, priority, force, queued_at, faults FROM main.jobs"
	    " WHERE device = ?1 ORDER BY priority DESC, queued_at, key";
	struct flyd_job j;
	sqlite3_stmt *s = NULL;
	int rc, stop = 0;

	if (!ids_ok(NULL, device, "") || cb == NULL)
		return -EINVAL;
	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return store_err(st, rc, "job_iter");
	bind_str(s, 1, device);
	while (stop == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		memset(&j, 0, sizeof(j));
		col_str(s, 0, j.key, sizeof(j.key));
		j.priority = sqlite3_column_int(s, 1);
		j.force = sqlite3_column_int(s, 2);
		j.queued_at = sqlite3_column_int64(s, 3);
		j.faults = (uint32_t)sqlite3_column_int64(s, 4);
		stop = cb(ctx, &j);
	}
	sqlite3_finalize(s);
	if (stop != 0)
		return stop;
	return rc == SQLITE_DONE ? 0 : store_err(st, rc, "job_iter");
}

/* ------------------------------------------------------------ failed jobs */

/* Prepare @p sql and bind ?1 device, ?2 key (NULL: left NULL). */
static int failed_prepare(struct flyd_store *st, const char *sql,
			  const char *device, const char *key,
			  sqlite3_stmt **out)
{
	int rc = sqlite3_prepare_v2(st->db, sql, -1, out, NULL);

	if (rc != SQLITE_OK) {
		sqlite3_finalize(*out);
		*out = NULL;
		return store_err(st, rc, "failed_prepare");
	}
	bind_str(*out, 1, device);
	if (key != NULL)
		bind_str(*out, 2, key);
	return 0;
}

/* Run a one-step statement of failed_prepare.  @return 0 or an error. */
static int failed_run(struct flyd_store *st, sqlite3_stmt *s, const char *op)
{
	int rc = sqlite3_step(s);

	sqlite3_finalize(s);
	return rc == SQLITE_DONE ? 0 : store_err(st, rc, op);
}

int flyd_store_failed_put(struct flyd_store *st, const char *device,
			  const struct flyd_failed *f)
{
	sqlite3_stmt *s = NULL;
	int rc;

	if (f == NULL || !ids_ok(f->key, device, ""))
		return -EINVAL;
	rc = txn_begin(st);
	if (rc != 0)
		return rc;
	rc = failed_prepare(st, "INSERT OR REPLACE INTO main.failed_jobs"
			    " (device, key, faults, why, at)"
			    " VALUES (?1, ?2, ?3, ?4, ?5)", device, f->key, &s);
	if (rc == 0) {
		sqlite3_bind_int64(s, 3, f->faults);
		bind_str(s, 4, f->why);
		sqlite3_bind_int64(s, 5, f->at);
		rc = failed_run(st, s, "failed_put");
	}
	if (rc == 0)
		rc = job_delete(st, device, f->key);
	return txn_end(st, rc);
}

int flyd_store_failed_get(struct flyd_store *st, const char *device,
			  const char *key, struct flyd_failed *out)
{
	sqlite3_stmt *s = NULL;
	int rc;

	if (key == NULL || out == NULL || !ids_ok(key, device, ""))
		return -EINVAL;
	rc = failed_prepare(st, "SELECT faults, why, at FROM main.failed_jobs"
			    " WHERE device = ?1 AND key = ?2", device, key, &s);
	if (rc != 0)
		return rc;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		memset(out, 0, sizeof(*out));
		snprintf(out->key, sizeof(out->key), "%s", key);
		out->faults = (uint32_t)sqlite3_column_int64(s, 0);
		col_str(s, 1, out->why, sizeof(out->why));
		out->at = sqlite3_column_int64(s, 2);
	}
	sqlite3_finalize(s);
	if (rc == SQLITE_ROW)
		return 0;
	return rc == SQLITE_DONE ? FLY_E_NOTFOUND
				 : store_err(st, rc, "failed_get");
}

int flyd_store_failed_del(struct flyd_store *st, const char *device,
			  const char *key)
{
	sqlite3_stmt *s = NULL;
	int rc;

	if (!ids_ok(key, device, ""))
		return -EINVAL;
	rc = failed_prepare(st, "DELETE FROM main.failed_jobs WHERE"
			    " device = ?1 AND (?2 IS NULL OR key = ?2)",
			    device, key, &s);
	return rc != 0 ? rc : failed_run(st, s, "failed_del");
}

int flyd_store_failed_iter(struct flyd_store *st, const char *device,
			   flyd_failed_cb cb, void *ctx)
{
	struct flyd_failed f;
	sqlite3_stmt *s = NULL;
	int rc, stop = 0;

	if (!ids_ok(NULL, device, "") || cb == NULL)
		return -EINVAL;
	rc = failed_prepare(st, "SELECT key, faults, why, at FROM"
			    " main.failed_jobs WHERE device = ?1 ORDER BY key",
			    device, NULL, &s);
	if (rc != 0)
		return rc;
	while (stop == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		memset(&f, 0, sizeof(f));
		col_str(s, 0, f.key, sizeof(f.key));
		f.faults = (uint32_t)sqlite3_column_int64(s, 1);
		col_str(s, 2, f.why, sizeof(f.why));
		f.at = sqlite3_column_int64(s, 3);
		stop = cb(ctx, &f);
	}
	sqlite3_finalize(s);
	if (stop != 0)
		return stop;
	return rc == SQLITE_DONE ? 0 : store_err(st, rc, "failed_iter");
}

/* ------------------------------------------------------------ fleet outbox */

void flyd_store_set_outbox(struct flyd_store *st, int on)
{
	st->outbox = on != 0;
}

int flyd_store_outbox_iter(struct flyd_store *st, int64_t limit,
			   flyd_outbox_cb cb, void *ctx)
{
	static const char sql[] =
	    "SELECT o.key, r.device, r.libver, r.variant, r.params,"
	    " r.median_us, r.mad_us, r.status, r.tune_s, r.tuned_at,"
	    " (SELECT t.reps FROM main.trials t WHERE t.key = r.key"
	    "  AND t.device = r.device AND t.libver = r.libver"
	    "  AND t.variant = r.variant AND t.params = r.params"
	    "  AND t.outcome = 'ok' ORDER BY t.id DESC LIMIT 1)"
	    " FROM main.fleet_outbox o JOIN main.results r"
	    " ON r.key = o.key AND r.device = o.device AND r.libver = o.libver"
	    " ORDER BY o.queued_at, o.key LIMIT ?1";
	sqlite3_stmt *s = NULL;
	struct flyd_result r;
	int rc, stop = 0;

	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_finalize(s);
		return store_err(st, rc, "outbox_iter");
	}
	sqlite3_bind_int64(s, 1, limit > 0 ? limit : -1);
	while (!stop && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		memset(&r, 0, sizeof(r));
		col_str(s, 0, r.key, sizeof(r.key));
		col_str(s, 1, r.device, sizeof(r.device));
		col_str(s, 2, r.libver, sizeof(r.libver));
		if (row_result(s, 3, &r) != 0)
			continue; /* unparsable params: nothing to push */
		r.reps = (uint32_t)sqlite3_column_int64(s, 10); /* NULL: 0 */
		stop = cb(ctx, &r);
	}
	if (!stop && rc != SQLITE_DONE)
		stop = store_err(st, rc, "outbox_iter");
	sqlite3_finalize(s);
	return stop;
}

int flyd_store_outbox_del(struct flyd_store *st, const char *key,
			  const char *device, const char *libver)
{
	static const char sql[] =
	    "DELETE FROM main.fleet_outbox WHERE key = ?1 AND device = ?2"
	    " AND libver = ?3";
	sqlite3_stmt *s = NULL;
	int rc;

	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		bind_str(s, 1, key);
		bind_str(s, 2, device);
		bind_str(s, 3, libver);
		rc = sqlite3_step(s);
	}
	sqlite3_finalize(s);
	return rc == SQLITE_DONE ? 0 : store_err(st, rc, "outbox_del");
}

int flyd_store_outbox_has(struct flyd_store *st, const char *key,
			  const char *device, const char *libver)
{
	static const char sql[] =
	    "SELECT 1 FROM main.fleet_outbox WHERE key = ?1 AND device = ?2"
	    " AND libver = ?3";
	sqlite3_stmt *s = NULL;
	int rc;

	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		bind_str(s, 1, key);
		bind_str(s, 2, device);
		bind_str(s, 3, libver);
		rc = sqlite3_step(s);
	}
	sqlite3_finalize(s);
	return rc == SQLITE_ROW;
}

int64_t flyd_store_outbox_count(struct flyd_store *st)
{
	sqlite3_stmt *s = NULL;
	int64_t n = FLY_E_STORAGE;
	int rc;

	rc = sqlite3_prepare_v2(st->db, "SELECT count(*) FROM "
				"main.fleet_outbox", -1, &s, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		n = sqlite3_column_int64(s, 0);
	else
		store_err(st, rc, "outbox_count");
	sqlite3_finalize(s);
	return n;
}
