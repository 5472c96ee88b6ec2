/*
 * test_powercut.c -- power cuts under the tuning DB (issue 21,
 * RELIABILITY.md F3): the store (daemon/store.c) over crashvfs, a VFS that
 * keeps every write not yet covered by an xSync in memory and, at the cut,
 * drops it, tears it at a sector boundary, or keeps a random part of it.
 *
 * Why the store's own code in one process rather than the daemon: the VFS
 * must live in the process that holds the connection, and the store is
 * where the daemon acknowledges persistence (results.c answers a winner
 * only after flyd_store_result_put() returned 0; imports and forgets
 * likewise).  Driving the store directly needs no test-only code in the
 * daemon's binaries, and a cut point is one replay of a short workload
 * (milliseconds), so a sweep can cut after every single write and sync.
 *
 * Each cut point: a fresh directory; a seeded workload of three "daemon
 * lives" (open, device, then puts of winners with trials, imports of 1-4
 * rows, forgets, trials; close -- which checkpoints and deletes the WAL --
 * except after the last), power cut after mutating VFS call N; the power
 * back, the DB reopened by flyd_store_open() (with its own integrity probe:
 * a damaged file would be quarantined, which fails here), every key read
 * back: each acknowledged state exactly (median, variant, params), the one
 * operation in flight either all done or not at all (all rows of an
 * import), then PRAGMA integrity_check on the platter == "ok".
 *
 * $POWERCUT_POINTS cut points (default 300, spread over the whole workload;
 * `make powercut` runs 10,000: every call N of successive workloads, the
 * three modes in turn), $POWERCUT_SEED the first workload's seed (1).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "../common/crashvfs.h"
#include "fly_abi.h"
#include "log.h"
#include "store.h"
#include "../common/daemon.h"

#define LIBVER	"flyk-1.0"
#define FP	"backend=cpu arch=test units=4 name=powercut lib=1.0"
#define NW	16 /* winner keys (put with trials) */
#define NI	16 /* import keys */
#define NKEYS	(NW + NI)
#define LIVES	3
#define OPS	24 /* operations per life */
#define MAXROWS 4

struct ent {
	int present;
	double median;	/* unique per write: a stale row shows */
	int variant;
	int unc;	/* the operation in flight touches it */
	int new_present;
	double new_median;
	int new_variant;
	int batch;	/* an import in flight: all its rows or none */
};

struct run {
	char dir[64];
	char db[96];
	char dev[FLYD_DEVID_MAX];
	struct ent e[NKEYS];
	uint64_t rnd;
	double seq;
	long acked;	/* operations acknowledged */
	int inflight;	/* one failed: its rows uncertain */
};

static struct {
	long points, modes[3], acked, inflight, lost_bytes, kept_bytes;
	long present;
} tot;

static uint64_t rnd(struct run *r)
{
	uint64_t z = (r->rnd += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void key_name(int k, char *buf, size_t cap)
{
	if (k < NW)
		snprintf(buf, cap, "rmsnorm/fp32/m=%d,n=4096", 1 + k);
	else
		snprintf(buf, cap, "gemm/bf16/NT/m=%d,n=64,k=64", 1 + k - NW);
}

static struct flyd_result mkres(struct run *r, int k, int variant,
				double median)
{
	struct flyd_result x;

	memset(&x, 0, sizeof(x));
	key_name(k, x.key, sizeof(x.key));
	snprintf(x.device, sizeof(x.device), "%s", r->dev);
	snprintf(x.libver, sizeof(x.libver), "%s", LIBVER);
	x.d.status = FLY_STATUS_TUNED;
	snprintf(x.d.variant, sizeof(x.d.variant), "v%d", variant);
	x.d.nparams = 2;
	x.d.params[0] = 16 * variant;
	x.d.params[1] = (int64_t)median;
	x.d.median_us = median;
	x.mad_us = median / 100;
	x.tune_s = 0.5;
	x.tuned_at = 1700000000 + (int64_t)median;
	return x;
}

static struct flyd_trial mktrial(int i, double median)
{
	struct flyd_trial t;

	memset(&t, 0, sizeof(t));
	snprintf(t.variant, sizeof(t.variant), "v%d", i);
	t.nparams = 1;
	t.params[0] = i;
	t.median_us = median + i;
	t.mad_us = 0.5;
	t.reps = 20;
	t.outcome = FLYD_OUT_OK;
	return t;
}

/* What the operation would leave for key @p k, once it is acknowledged. */
static void pend(struct run *r, int k, int present, double median,
		 int variant, int batch)
{
	struct ent *e = &r->e[k];

	e->unc = 1;
	e->new_present = present;
	e->new_median = median;
	e->new_variant = variant;
	e->batch = batch;
}

/* Acknowledged: the pending states become the states. */
static void ack(struct run *r)
{
	for (int k = 0; k < NKEYS; k++) {
		struct ent *e = &r->e[k];

		if (!e->unc)
			continue;
		e->present = e->new_present;
		e->median = e->new_median;
		e->variant = e->new_variant;
		e->unc = 0;
		e->batch = 0;
	}
	r->acked++;
}

static int op_put(struct run *r, struct flyd_store *st)
{
	int k = (int)(rnd(r) % NW), v = (int)(rnd(r) % 4);
	double m = (r->seq += 1.0) + 0.5;
	struct flyd_result x = mkres(r, k, v, m);
	struct flyd_trial t[3];
	size_t nt = 1 + rnd(r) % 3;

	for (size_t i = 0; i < nt; i++)
		t[i] = mktrial((int)i, m);
	pend(r, k, 1, m, v, 0);
	return flyd_store_result_put(st, &x, t, nt);
}

static int op_import(struct run *r, struct flyd_store *st)
{
	struct flyd_result x[MAXROWS];
	int n = 1 + (int)(rnd(r) % MAXROWS), first = (int)(rnd(r) % NI);

	for (int i = 0; i < n; i++) {
		int k = NW + (first + i) % NI, v = (int)(rnd(r) % 4);
		double m = (r->seq += 1.0) + 0.25;

		x[i] = mkres(r, k, v, m);
		pend(r, k, 1, m, v, 1);
	}
	return flyd_store_import(st, x, (size_t)n);
}

static int op_forget(struct run *r, struct flyd_store *st)
{
	int k = (int)(rnd(r) % NKEYS);
	char key[FLY_KEY_MAX];

	key_name(k, key, sizeof(key));
	pend(r, k, 0, 0, 0, 0);
	return flyd_store_forget(st, key, r->dev, LIBVER, NULL);
}

static int op_trials(struct run *r, struct flyd_store *st)
{
	char key[FLY_KEY_MAX];
	struct flyd_trial t = mktrial(7, r->seq);

	key_name((int)(rnd(r) % NKEYS), key, sizeof(key));
	return flyd_store_trials_add(st, key, r->dev, LIBVER, &t, 1);
}

/* One operation: 0 acknowledged, else it failed (the power is off). */
static int op_one(struct run *r, struct flyd_store *st)
{
	uint64_t p = rnd(r) % 100;
	int rc;

	if (p < 50)
		rc = op_put(r, st);
	else if (p < 75)
		rc = op_import(r, st);
	else if (p < 90)
		rc = op_forget(r, st);
	else
		rc = op_trials(r, st);
	if (rc == 0)
		ack(r);
	else
		r->inflight = 1;
	return rc;
}

/* The workload, until its end or the first failure (after the cut every
 * write fails).  A workload that ran to its end without a cut leaves the
 * last life's store open in *@p open (the caller closes it); else NULL. */
static void workload(struct run *r, struct flyd_store **open)
{
	*open = NULL;
	for (int life = 0; life < LIVES; life++) {
		struct flyd_store *st = NULL;

		if (flyd_store_open(r->db, NULL, &st) != 0)
			return;
		if (flyd_store_device_put(st, FP, r->dev) != 0) {
			flyd_store_close(st);
			return;
		}
		for (int i = 0; i < OPS; i++) {
			if (op_one(r, st) != 0) {
				flyd_store_close(st);
				return;
			}
		}
		/* The last life is cut with the connection still open: the
		 * WAL not checkpointed. */
		if (life == LIVES - 1 && !crashvfs_is_cut()) {
			*open = st;
			return;
		}
		flyd_store_close(st);
	}
}

static void run_init(struct run *r, uint64_t seed)
{
	memset(r, 0, sizeof(*r));
	r->rnd = seed;
	snprintf(r->dir, sizeof(r->dir), "/tmp/test_powercut.XXXXXX");
	assert_non_null(mkdtemp(r->dir));
	snprintf(r->db, sizeof(r->db), "%s/tuning.db", r->dir);
	flyd_store_device_id(FP, r->dev);
}

static void run_fini(struct run *r)
{
	fly_test_rm_tree(r->dir);
}

/* Key @p k as the store has it matches state (present, median, variant). */
static int ent_is(const struct flyd_result *got, int found, int present,
		  double median, int variant)
{
	char v[16];

	if (!present)
		return !found;
	snprintf(v, sizeof(v), "v%d", variant);
	return found && got->d.median_us == median &&
	       strcmp(got->d.variant, v) == 0 && got->d.nparams == 2 &&
	       got->d.params[0] == 16 * variant &&
	       got->d.params[1] == (int64_t)median &&
	       got->tuned_at == 1700000000 + (int64_t)median;
}

static void fail_key(const struct run *r, int k, uint64_t n, int mode,
		     const struct flyd_result *got, int found)
{
	const struct ent *e = &r->e[k];
	char key[FLY_KEY_MAX];

	key_name(k, key, sizeof(key));
	print_error("cut after call %llu (mode %d): %s: have %s %.2f %s; "
		    "acknowledged %s %.2f v%d (in flight: %d, %s %.2f)\n",
		    (unsigned long long)n, mode, key,
		    found ? "present" : "absent", found ? got->d.median_us : 0,
		    found ? got->d.variant : "-",
		    e->present ? "present" : "absent", e->median, e->variant,
		    e->unc, e->new_present ? "present" : "absent",
		    e->new_median);
	fail();
}

/* After the power is back: the store opens (not quarantined), every key
 * is as acknowledged (or, in flight, all old or all new). */
static void check_keys(struct run *r, uint64_t n, int mode)
{
	struct flyd_store *st = NULL;
	int batch_new = -1;

	assert_int_equal(flyd_store_open(r->db, NULL, &st), 0);
	assert_int_equal(flyd_store_was_quarantined(st), 0);
	for (int k = 0; k < NKEYS; k++) {
		struct ent *e = &r->e[k];
		struct flyd_result got;
		char key[FLY_KEY_MAX];
		int rc, old, new;

		key_name(k, key, sizeof(key));
		rc = flyd_store_result_get(st, key, r->dev, LIBVER, &got);
		assert_true(rc == 0 || rc == FLY_E_NOTFOUND);
		old = ent_is(&got, rc == 0, e->present, e->median, e->variant);
		new = e->unc && ent_is(&got, rc == 0, e->new_present,
				       e->new_median, e->new_variant);
		if (!old && !new)
			fail_key(r, k, n, mode, &got, rc == 0);
		if (e->batch && old != new) {
			if (batch_new >= 0 && batch_new != new)
				fail_key(r, k, n, mode, &got, rc == 0);
			batch_new = new;
		}
		tot.present += rc == 0;
	}
	flyd_store_close(st);
}

/* PRAGMA integrity_check on the platter (the real VFS, not the overlay). */
static void check_integrity(const struct run *r)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;

	assert_int_equal(sqlite3_open_v2(r->db, &db, SQLITE_OPEN_READWRITE,
					 "unix"),
			 SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1,
					    &s, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(s, 0), "ok");
	sqlite3_finalize(s);
	sqlite3_close(db);
}

/* Mutating calls of the whole workload of @p seed, without a cut. */
static uint64_t workload_calls(uint64_t seed)
{
	struct flyd_store *st;
	struct run r;
	uint64_t n;

	run_init(&r, seed);
	crashvfs_arm(0, CRASHVFS_DROP, 0);
	workload(&r, &st);
	n = crashvfs_calls();
	flyd_store_close(st);
	assert_int_equal(r.inflight, 0);
	assert_int_equal(r.acked, LIVES * OPS);
	crashvfs_restore();
	run_fini(&r);
	return n;
}

static void cut_point(uint64_t seed, uint64_t n, int mode)
{
	struct flyd_store *st;
	struct run r;

	run_init(&r, seed);
	crashvfs_arm(n, (enum crashvfs_mode)mode, seed * 1000003u + n);
	workload(&r, &st);
	/* n is at most the workload's calls: the cut came. */
	assert_true(crashvfs_is_cut());
	assert_null(st);
	tot.lost_bytes += (long)crashvfs_lost_bytes();
	tot.kept_bytes += (long)crashvfs_kept_bytes();
	crashvfs_restore();
	check_keys(&r, n, mode);
	check_integrity(&r);
	tot.points++;
	tot.modes[mode]++;
	tot.acked += r.acked;
	tot.inflight += r.inflight;
	run_fini(&r);
}

static long env_long(const char *name, long dflt)
{
	const char *s = getenv(name);

	return s != NULL && *s != '\0' ? strtol(s, NULL, 10) : dflt;
}

static void test_power_cut_sweep(void **state)
{
	long points = env_long("POWERCUT_POINTS", 300);
	uint64_t seed = (uint64_t)env_long("POWERCUT_SEED", 1);
	uint64_t t = workload_calls(seed);

	(void)state;
	printf("powercut: seed %llu, %llu mutating calls in the workload, "
	       "%ld cut points\n",
	       (unsigned long long)seed, (unsigned long long)t, points);
	if ((uint64_t)points < t) {
		/* Spread over the whole workload, the modes in turn. */
		for (long i = 0; i < points; i++)
			cut_point(seed, 1 + (uint64_t)i * t / (uint64_t)points,
				  (int)(i % 3));
	} else {
		/* Every call of successive workloads. */
		for (uint64_t s = seed; tot.points < points; s++) {
			uint64_t ts = s == seed ? t : workload_calls(s);

			for (uint64_t n = 1; n <= ts && tot.points < points;
			     n++)
				cut_point(s, n, (int)((n + s) % 3));
		}
	}
	printf("powercut: %ld cuts (drop %ld, tear %ld, random %ld): "
	       "%ld acknowledged operations checked, %ld in flight at the cut "
	       "(each all or nothing), %ld keys found present; unsynced bytes "
	       "lost %ld, kept by tear/random %ld; integrity ok after every "
	       "cut\n",
	       tot.points, tot.modes[0], tot.modes[1], tot.modes[2],
	       tot.acked, tot.inflight, tot.present, tot.lost_bytes,
	       tot.kept_bytes);
	assert_int_equal(tot.points, points);
}

/* The VFS is not a no-op: a raw connection with synchronous=OFF commits
 * without a sync, and the cut loses that commit; with FULL it is kept. */
static int raw_commit_survives(const char *sync)
{
	struct run r;
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	char sql[256];
	int n = -1;

	run_init(&r, 7);
	crashvfs_arm(0, CRASHVFS_DROP, 0);
	assert_int_equal(sqlite3_open(r.db, &db), SQLITE_OK);
	snprintf(sql, sizeof(sql),
		 "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
		 "CREATE TABLE t(x); PRAGMA synchronous=%s;"
		 "INSERT INTO t VALUES (1);", sync);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	crashvfs_arm(1, CRASHVFS_DROP, 0);
	/* The next write cuts the power; it and all that follows fail. */
	(void)sqlite3_exec(db, "INSERT INTO t VALUES (2)", NULL, NULL, NULL);
	sqlite3_close(db);
	assert_true(crashvfs_is_cut());
	crashvfs_restore();
	assert_int_equal(sqlite3_open_v2(r.db, &db, SQLITE_OPEN_READWRITE,
					 "unix"),
			 SQLITE_OK);
	if (sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &s, NULL) ==
		SQLITE_OK &&
	    sqlite3_step(s) == SQLITE_ROW)
		n = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(db);
	run_fini(&r);
	return n;
}

static void test_crashvfs_drops_unsynced(void **state)
{
	(void)state;
	assert_int_equal(raw_commit_survives("FULL"), 1);
	assert_true(raw_commit_survives("OFF") < 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_crashvfs_drops_unsynced),
	    cmocka_unit_test(test_power_cut_sweep),
	};

	/* Every cut makes the store log its I/O errors. */
	flyd_log_set_level(FLYD_LOG_CRIT + 1);
	if (crashvfs_install() != 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
