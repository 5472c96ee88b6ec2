/*
 * test_torture.c -- crash torture (issue 21 item 3, RELIABILITY.md F1):
 * SIGKILL the daemon at a random instant of a stream of imports, forgets
 * and tunes, restart it, and check that every acknowledged winner is
 * there and unchanged, every acknowledged forget stayed forgotten, the
 * one request in flight at the kill took effect all or nothing (all rows
 * of an import, or none), and `PRAGMA integrity_check` passes.
 *
 * The model: import keys (I) carry a unique median_us per import, so a
 * stale or mixed row shows; tune keys (T) are tuned by the worker in the
 * background, and a winner counts as acknowledged once `get` returned it
 * (a result is visible only after its FULL commit).  The killer is a
 * thread that sleeps a random 0..$TORTURE_MAX_MS (default 250; one
 * cycle in 8: 500..1500, so tunes finish) after the daemon is ready, then
 * SIGKILLs it while the main thread streams requests one at a time.
 *
 * A reader thread (RELIABILITY.md F2: a kill mid-publish, for real)
 * decides the I keys all along through libflyclient -- the shm table
 * the daemon fills in place and grows into new memfds, the socket after
 * each restart -- and fails the test on any tuned answer that is not a
 * row once sent for that key (its median names the import row: torn or
 * mixed slots, a row of another key, or a stale table's garbage show).
 *
 * $TORTURE_KILLS kills (default 200 in `make test`; `make torture` runs
 * 10,000), $TORTURE_SEED the generator's seed (default: the time,
 * printed).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "../common/daemon.h"
#include "../common/jreq.h"
#include "flyclient.h"

#define NI 48 /* import keys */
#define NT 12 /* tune keys */
#define MAX_ROWS 4

enum { ABSENT = 0, PRESENT = 1 };

/* One key's acknowledged state, and while a request is in flight the
 * state it would leave (either may be what a restart shows). */
struct ent {
	char key[64];
	int state;	   /* ABSENT / PRESENT */
	double median;	   /* PRESENT: median_us */
	char variant[48];  /* PRESENT: variant and params (T keys) */
	char params[96];
	int uncertain;	   /* a request was in flight at the kill */
	int new_state;	   /* what it would leave */
	double new_median;
	int outstanding;   /* T: a tune sent, not yet seen tuned */
};

struct torture {
	struct fly_test_daemon d;
	struct ent ik[NI], tk[NT];
	char variant[48];  /* a real winner's variant and params, for */
	char params[96];   /* import rows (feasible for m=*,n=256) */
	char device[32];   /* this daemon's device id and libver */
	char libver[32];
	double next_median;
	unsigned seed;
	long kills, imports_acked, forgets_acked, tunes_acked, inflight;
	long checks;
	/* the reader (F2): import row r (median 1000 + r / 4) went to I key
	 * owner[r]; guarded by mu */
	pthread_mutex_t mu;
	int *owner;
	size_t nowner, capowner;
	int64_t wparams[8];
	uint32_t wnparams;
	pthread_t reader;
	int reader_on;
	unsigned rseed;
	volatile int stop;
	long reads, tuned_reads, wrong;
	char first_wrong[256];
};

/* I key i's problem: m a bucket representative (a multiple of 1024), so
 * a client's decide looks up exactly the imported key. */
static void ikey(char *buf, size_t cap, int i)
{
	snprintf(buf, cap, "rmsnorm/fp32/m=%d,n=256", 1024 * (3 + i));
}

struct killer {
	pid_t pid;
	unsigned delay_us;
};

static void *killer_main(void *arg)
{
	struct killer *k = arg;

	usleep(k->delay_us);
	kill(k->pid, SIGKILL);
	return NULL;
}

static int env_int(const char *name, int def)
{
	const char *s = getenv(name);

	return s != NULL && *s != '\0' ? atoi(s) : def;
}

static const char *str_of(const cJSON *o, const char *name)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(x) ? x->valuestring : "";
}

/* One request; @return the parsed reply, NULL when the connection broke
 * (the daemon was killed). */
static cJSON *req(int fd, const char *json)
{
	char *resp = NULL;
	cJSON *o;

	if (fly_test_send_frame(fd, json) != 0 ||
	    fly_test_recv_frame(fd, &resp, fly_test_timeout(20000)) != 0) {
		free(resp);
		return NULL;
	}
	o = cJSON_Parse(resp);
	free(resp);
	assert_non_null(o);
	return o;
}

/* get @p key: 1 (filled), 0 (not found).  Fails on anything else. */
static int get(int fd, const char *key, double *median, char *variant,
	       size_t vcap, char *params, size_t pcap)
{
	char json[160], *p;
	const cJSON *r;
	cJSON *o;

	snprintf(json, sizeof(json), "{\"req\":\"get\",\"key\":\"%s\"}", key);
	o = fly_test_req(fd, json);
	if (!fly_test_is_ok(o)) {
		const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");

		if (strcmp(str_of(e, "code"), "not_found") != 0)
			fail_msg("get %s: %s", key, str_of(e, "message"));
		cJSON_Delete(o);
		return 0;
	}
	r = cJSON_GetObjectItemCaseSensitive(o, "result");
	*median = cJSON_GetObjectItemCaseSensitive(r, "median_us")->valuedouble;
	snprintf(variant, vcap, "%s", str_of(r, "variant"));
	p = cJSON_PrintUnformatted(
	    cJSON_GetObjectItemCaseSensitive(r, "params"));
	snprintf(params, pcap, "%s", p);
	free(p);
	cJSON_Delete(o);
	return 1;
}

/* An import of 1..MAX_ROWS I keys with fresh medians. */
static void op_import(struct torture *t, int fd, int *broke)
{
	int idx[MAX_ROWS], n = 1 + rand() % MAX_ROWS;
	cJSON *rq = cJSON_CreateObject(), *rows, *o;
	char *json;

	cJSON_AddStringToObject(rq, "req", "import");
	rows = cJSON_AddArrayToObject(rq, "results");
	for (int i = 0; i < n; i++) {
		struct ent *e;
		cJSON *r = cJSON_CreateObject();

		idx[i] = rand() % NI;
		for (int j = 0; j < i; j++)
			if (idx[j] == idx[i])
				idx[i] = -1; /* one row per key */
		if (idx[i] < 0) {
			cJSON_Delete(r);
			continue;
		}
		e = &t->ik[idx[i]];
		e->new_state = PRESENT;
		e->new_median = t->next_median;
		t->next_median += 0.25;
		pthread_mutex_lock(&t->mu);
		if (t->nowner == t->capowner) {
			size_t cap = t->capowner ? 2 * t->capowner : 4096;
			int *no = realloc(t->owner, cap * sizeof(*no));

			assert_non_null(no);
			t->owner = no;
			t->capowner = cap;
		}
		t->owner[t->nowner++] = idx[i];
		pthread_mutex_unlock(&t->mu);
		cJSON_AddStringToObject(r, "key", e->key);
		cJSON_AddStringToObject(r, "device", t->device);
		cJSON_AddStringToObject(r, "libver", t->libver);
		cJSON_AddItemToArray(rows, r);
		cJSON_AddStringToObject(r, "variant", t->variant);
		cJSON_AddRawToObject(r, "params", t->params);
		cJSON_AddNumberToObject(r, "median_us", e->new_median);
		cJSON_AddNumberToObject(r, "mad_us", 0.5);
		cJSON_AddNumberToObject(r, "tune_s", 1);
		cJSON_AddNumberToObject(r, "tuned_at", 1700000000);
	}
	json = cJSON_PrintUnformatted(rq);
	cJSON_Delete(rq);
	for (int i = 0; i < n; i++)
		if (idx[i] >= 0)
			t->ik[idx[i]].uncertain = 1;
	o = req(fd, json);
	free(json);
	if (o == NULL) {
		*broke = 1;
		t->inflight++;
		return;
	}
	if (!fly_test_is_ok(o)) {
		char *txt = cJSON_PrintUnformatted(o);

		fail_msg("import refused: %s", txt);
	}
	cJSON_Delete(o);
	t->imports_acked++;
	for (int i = 0; i < n; i++) {
		struct ent *e;

		if (idx[i] < 0)
			continue;
		e = &t->ik[idx[i]];
		e->uncertain = 0;
		e->state = PRESENT;
		e->median = e->new_median;
	}
}

/* Forget an I key, or a T key whose winner was seen. */
static void op_forget(struct torture *t, int fd, int *broke)
{
	struct ent *e = rand() % 3 == 0 ? &t->tk[rand() % NT]
					 : &t->ik[rand() % NI];
	char json[160];
	cJSON *o;

	if (e->outstanding)
		return;
	snprintf(json, sizeof(json), "{\"req\":\"forget\",\"key\":\"%s\"}",
		 e->key);
	e->uncertain = 1;
	e->new_state = ABSENT;
	o = req(fd, json);
	if (o == NULL) {
		*broke = 1;
		t->inflight++;
		return;
	}
	assert_true(fly_test_is_ok(o));
	cJSON_Delete(o);
	t->forgets_acked++;
	e->uncertain = 0;
	e->state = ABSENT;
}

/* Ask for a T key's tuning; poll the outstanding ones. */
static void op_tune(struct torture *t, int fd, int *broke)
{
	struct ent *e = &t->tk[rand() % NT];
	char json[160], v[48], p[96];
	double m;
	cJSON *o;

	if (e->state == ABSENT) { /* again if outstanding: idempotent */
		snprintf(json, sizeof(json),
			 "{\"req\":\"tune\",\"key\":\"%s\"}", e->key);
		/* From here on a resumed job may tune it: absent or
		 * tuned are both right until a get sees the winner. */
		e->outstanding = 1;
		o = req(fd, json);
		if (o == NULL) {
			*broke = 1;
			return;
		}
		cJSON_Delete(o);
	}
	for (int i = 0; i < NT; i++) {
		struct ent *x = &t->tk[i];
		char gj[160], *resp = NULL;
		cJSON *g;

		if (!x->outstanding)
			continue;
		snprintf(gj, sizeof(gj), "{\"req\":\"get\",\"key\":\"%s\"}",
			 x->key);
		if (fly_test_send_frame(fd, gj) != 0 ||
		    fly_test_recv_frame(fd, &resp, fly_test_timeout(20000)) !=
			0) {
			free(resp);
			*broke = 1;
			return;
		}
		g = cJSON_Parse(resp);
		free(resp);
		if (fly_test_is_ok(g)) {
			const cJSON *r =
			    cJSON_GetObjectItemCaseSensitive(g, "result");
			char *ps = cJSON_PrintUnformatted(
			    cJSON_GetObjectItemCaseSensitive(r, "params"));

			m = cJSON_GetObjectItemCaseSensitive(r, "median_us")
				->valuedouble;
			snprintf(v, sizeof(v), "%s", str_of(r, "variant"));
			snprintf(p, sizeof(p), "%s", ps);
			free(ps);
			x->outstanding = 0;
			x->state = PRESENT;
			x->median = m;
			snprintf(x->variant, sizeof(x->variant), "%s", v);
			snprintf(x->params, sizeof(x->params), "%s", p);
			t->tunes_acked++;
		}
		cJSON_Delete(g);
	}
}

static void check_integrity(const char *db)
{
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;

	assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL),
			 SQLITE_OK);
	sqlite3_busy_timeout(h, 5000);
	assert_int_equal(sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1,
					    &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	if (strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0)
		fail_msg("integrity_check: %s", sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	sqlite3_close(h);
}

/* After a restart: every I key as acknowledged (or, in flight, old or
 * new, all rows of the import alike); every T key's winner unchanged. */
static void verify(struct torture *t, int fd, int kill_no)
{
	int saw_old = 0, saw_new = 0;
	char v[48], p[96];
	double m;

	for (int i = 0; i < NI; i++) {
		struct ent *e = &t->ik[i];
		int has = get(fd, e->key, &m, v, sizeof(v), p, sizeof(p));
		int is_old = has == e->state &&
			     (!has || m == e->median);
		int is_new = e->uncertain && has == e->new_state &&
			     (!has || m == e->new_median);

		t->checks++;
		if (!is_old && !is_new)
			fail_msg("kill %d: %s is %s (median %g), acknowledged "
				 "%s (median %g)%s", kill_no, e->key,
				 has ? "present" : "absent", has ? m : 0,
				 e->state ? "present" : "absent", e->median,
				 e->uncertain ? ", or the request in flight"
					      : "");
		if (e->uncertain && is_old != is_new) {
			saw_old |= is_old;
			saw_new |= is_new;
		}
		e->state = has;
		e->median = has ? m : 0;
		e->uncertain = 0;
	}
	if (saw_old && saw_new)
		fail_msg("kill %d: the import in flight was applied in part",
			 kill_no);
	for (int i = 0; i < NT; i++) {
		struct ent *e = &t->tk[i];
		int has = get(fd, e->key, &m, v, sizeof(v), p, sizeof(p));

		t->checks++;
		if (e->uncertain && !has) { /* the forget in flight */
			e->state = ABSENT;
		} else if (e->state == PRESENT) {
			if (!has || m != e->median ||
			    strcmp(v, e->variant) != 0 ||
			    strcmp(p, e->params) != 0)
				fail_msg("kill %d: acknowledged winner of %s "
					 "(%s %s %g) is %s %s %g", kill_no,
					 e->key, e->variant, e->params,
					 e->median, has ? v : "absent",
					 has ? p : "", has ? m : 0);
		} else if (has && !e->outstanding) {
			fail_msg("kill %d: %s forgotten, now tuned", kill_no,
				 e->key);
		}
		e->uncertain = 0;
	}
	check_integrity(t->d.db);
}

/* Tune the first T key to learn a real variant and params. */
static void learn_winner(struct torture *t)
{
	int fd = fly_test_connect(t->d.sock);
	char json[200];
	double m;
	cJSON *o;

	assert_true(fd >= 0);
	snprintf(json, sizeof(json), "{\"req\":\"tune\",\"key\":\"%s\","
		 "\"wait\":true,\"timeout_ms\":%d}", t->tk[0].key,
		 fly_test_timeout(60000));
	o = fly_test_req(fd, json);
	assert_true(fly_test_is_ok(o));
	cJSON_Delete(o);
	assert_int_equal(get(fd, t->tk[0].key, &m, t->variant,
			     sizeof(t->variant), t->params,
			     sizeof(t->params)), 1);
	snprintf(json, sizeof(json), "{\"req\":\"get\",\"key\":\"%s\"}",
		 t->tk[0].key);
	o = fly_test_req(fd, json);
	{
		const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "result");

		snprintf(t->device, sizeof(t->device), "%s",
			 str_of(r, "device"));
		snprintf(t->libver, sizeof(t->libver), "%s",
			 str_of(r, "libver"));
	}
	cJSON_Delete(o);
	t->tk[0].state = PRESENT;
	t->tk[0].median = m;
	snprintf(t->tk[0].variant, sizeof(t->tk[0].variant), "%s", t->variant);
	snprintf(t->tk[0].params, sizeof(t->tk[0].params), "%s", t->params);
	close(fd);
}

/* Whether @p d, a tuned answer for I key @p i, is a row once sent for
 * it.  @return 1 yes; 0 no (described into t->first_wrong once). */
static int reader_ok(struct torture *t, int i, const struct fly_decision *d)
{
	double r = (d->median_us - 1000.0) * 4.0;
	int ok = r >= 0 && r == (double)(int64_t)r &&
		 strcmp(d->variant, t->variant) == 0 &&
		 d->nparams == t->wnparams &&
		 memcmp(d->params, t->wparams,
			sizeof(int64_t) * t->wnparams) == 0;

	pthread_mutex_lock(&t->mu);
	ok = ok && (size_t)r < t->nowner && t->owner[(size_t)r] == i;
	if (!ok && t->first_wrong[0] == '\0')
		snprintf(t->first_wrong, sizeof(t->first_wrong),
			 "I key %d answered %s (%u params) median %.17g", i,
			 d->variant, d->nparams, d->median_us);
	pthread_mutex_unlock(&t->mu);
	return ok;
}

static void *reader_main(void *arg)
{
	struct torture *t = arg;
	struct fly_client_opts o;
	fly_client *c = NULL;

	memset(&o, 0, sizeof(o));
	o.socket_path = t->d.sock;
	if (fly_client_open_opts(&o, &c) != 0)
		return NULL;
	while (!t->stop) {
		struct fly_problem p;
		struct fly_decision d;
		int i = rand_r(&t->rseed) % NI;

		memset(&p, 0, sizeof(p));
		p.op = FLY_OP_RMSNORM;
		p.dtype = FLY_DT_FP32;
		p.dims[0] = 1024 * (3 + i);
		p.dims[1] = 256;
		/* a pause every 32 decides: the storm's own requests and
		 * restarts keep a core (CI has two) */
		if (++t->reads % 32 == 0)
			usleep(50);
		if (fly_decide(c, &p, &d) != 0 || d.status != FLY_STATUS_TUNED)
			continue;
		t->tuned_reads++;
		if (!reader_ok(t, i, &d))
			t->wrong++;
	}
	fly_client_close(c);
	return NULL;
}

/* t->variant's params ("[a,b]") as integers, for the reader. */
static void parse_params(struct torture *t)
{
	cJSON *a = cJSON_Parse(t->params);
	const cJSON *x;

	assert_true(cJSON_IsArray(a));
	t->wnparams = 0;
	cJSON_ArrayForEach(x, a)
		if (t->wnparams < 8)
			t->wparams[t->wnparams++] = (int64_t)x->valuedouble;
	cJSON_Delete(a);
}

static void test_kill_storm(void **state)
{
	struct torture *t = *state;
	int kills = env_int("TORTURE_KILLS", 200);
	int max_ms = env_int("TORTURE_MAX_MS", 250);

	t->seed = (unsigned)env_int("TORTURE_SEED", (int)time(NULL));
	fprintf(stderr, "torture: %d kills, TORTURE_SEED=%u\n", kills,
		t->seed);
	srand(t->seed);
	t->next_median = 1000;
	for (int i = 0; i < NI; i++)
		ikey(t->ik[i].key, sizeof(t->ik[i].key), i);
	for (int i = 0; i < NT; i++)
		snprintf(t->tk[i].key, sizeof(t->tk[i].key),
			 "rmsnorm/fp32/m=%d,n=%d", 1 << (i % 6),
			 512 + 256 * i);
	assert_int_equal(fly_test_daemon_start(&t->d, "{\"job_budget_s\":0.05}",
					       NULL), 0);
	learn_winner(t);
	parse_params(t);
	t->rseed = t->seed ^ 0x5eedu;
	assert_int_equal(pthread_create(&t->reader, NULL, reader_main, t), 0);
	t->reader_on = 1;
	for (int k = 0; k < kills; k++) {
		/* One cycle in 8 lives long enough for tunes to finish. */
		int ms = rand() % 8 == 0 ? 500 + rand() % 1000
					 : rand() % (max_ms + 1);
		struct killer kl = {t->d.pid, (unsigned)ms * 1000u};
		pthread_t th;
		int fd = fly_test_connect(t->d.sock), broke = 0;

		assert_true(fd >= 0);
		assert_int_equal(pthread_create(&th, NULL, killer_main, &kl),
				 0);
		while (!broke) {
			int r = rand() % 10;

			if (r < 6)
				op_import(t, fd, &broke);
			else if (r < 8)
				op_forget(t, fd, &broke);
			else
				op_tune(t, fd, &broke);
		}
		pthread_join(th, NULL);
		close(fd);
		/* Reap (it is dead already) and start again. */
		assert_int_equal(fly_test_daemon_kill(&t->d, SIGKILL), 0);
		t->kills++;
		if (fly_test_daemon_restart(&t->d) != 0) {
			fly_test_daemon_print_log(&t->d);
			fail_msg("kill %d: no restart", k);
		}
		fd = fly_test_connect(t->d.sock);
		assert_true(fd >= 0);
		verify(t, fd, k);
		close(fd);
		if ((k + 1) % 1000 == 0)
			fprintf(stderr, "torture: %d kills survived\n", k + 1);
	}
	t->stop = 1;
	pthread_join(t->reader, NULL);
	t->reader_on = 0;
	if (t->wrong > 0)
		fail_msg("reader: %ld wrong answers of %ld tuned; first: %s",
			 t->wrong, t->tuned_reads, t->first_wrong);
	/* the reader ran and saw the table's rows */
	assert_true(t->tuned_reads > 0);
	fprintf(stderr, "torture: reader (libflyclient, shm and socket): %ld "
		"decides, %ld tuned answers, 0 wrong or torn\n", t->reads,
		t->tuned_reads);
	fprintf(stderr, "torture: %ld kills, 0 acknowledged winners lost or "
		"changed, integrity_check ok after each; %ld imports, %ld "
		"forgets, %ld tuned winners acknowledged; %ld requests in "
		"flight at a kill (all or nothing); %ld key checks\n",
		t->kills, t->imports_acked, t->forgets_acked, t->tunes_acked,
		t->inflight, t->checks);
}

static int setup(void **state)
{
	struct torture *t = calloc(1, sizeof(*t));

	*state = t;
	if (t == NULL)
		return -1;
	pthread_mutex_init(&t->mu, NULL);
	return 0;
}

static int teardown(void **state)
{
	struct torture *t = *state;

	if (t->reader_on) { /* an assertion cut the storm short */
		t->stop = 1;
		pthread_join(t->reader, NULL);
	}
	fly_test_daemon_cleanup(&t->d);
	pthread_mutex_destroy(&t->mu);
	free(t->owner);
	free(t);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_kill_storm, setup,
						teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("torture", tests, NULL, NULL);
}
