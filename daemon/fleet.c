/*
 * fleet.c -- the fleet: winners shared through PostgreSQL (fleet.h).
 *
 * One connection, one query in flight at a time, every libpq call
 * non-blocking: PQconnectStart/PQconnectPoll to connect, PQsendQuery* and
 * PQflush to send, PQconsumeInput/PQisBusy/PQgetResult to read, each
 * driven by a uv_poll on PQsocket.  The steps after a connect, in order:
 * migrate, LISTEN, pull (once the device is known), then the outbox, one
 * push at a time, whenever it is not empty.  A failure closes the
 * connection and retries after fleet_retry_ms; nothing is lost, the
 * outbox is in the local DB.
 *
 * Single flight: the locks this session asked for or holds are a small
 * table (struct fleet_lock); claims go first on an idle connection, then
 * unlocks, then pushes.  A claim is two statements in one query: the
 * try-lock, then the key's fleet row read in a snapshot taken after it,
 * so a holder that pushed and unlocked just before is never missed (its
 * push commits before its unlock).  A lost connection answers the claims
 * in flight "down" and forgets the locks (the server dropped them).
 *
 * A job parked on another node's lock keeps a watch (L_WAIT, with the
 * lock's id as the claim computed it): every fleet_check_ms one query
 * asks which watched locks nobody holds any more.  Such a lock was let
 * go without a winner (a holder unlocks only after its winner's push has
 * committed, and that winner would have been found), so its holder died
 * or lost its connection -- PostgreSQL drops a session's advisory locks
 * with the session.  The parked job is told (FLYD_SF_FREE) and asks
 * again at once instead of after fleet_wait_ms.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "fleet.h"
#include "fly_record.h"
#include "log.h"
#include "migrations.h"
#include "results.h"
#include "scheduler.h"
#include "store.h"

#define FLEET_CHANNEL "flytuned_fleet"
#define FLEET_MIGRATE_LOCK "7460215993"  /* pg_advisory_xact_lock key */
#define FLEET_ERR_MAX 256
/* A claim asked while a connection is being made waits for it this long
 * at most (then the job runs at once, as with the fleet down): a node
 * that starts or restarts learns the fleet's winners (the pull comes
 * before claims) before it benchmarks a key the fleet has, and an
 * unreachable server costs a job no more than this. */
#define CONNECT_HOLD_MS 2000
#define LOCK_ID_SQL FLYD_FLEET_LOCK_ID("$1", "$2", "$3")

enum fleet_state {
	ST_DOWN,        /* waiting for the retry timer */
	ST_CONNECTING,  /* PQconnectPoll */
	ST_UP           /* connected; steps run */
};

enum fleet_query {
	Q_NONE,
	Q_MIGRATE,
	Q_LISTEN,
	Q_PULL,
	Q_PUSH,
	Q_CLAIM,        /* try-lock + the key's fleet row */
	Q_UNLOCK,
	Q_CHECK         /* which watched locks are free */
};

/* A lock of this session (single flight), by key. */
enum lock_state {
	L_CLAIM,        /* to ask for */
	L_CLAIMING,     /* its claim in flight */
	L_HELD,         /* ours; the job runs */
	L_PUSH,         /* to unlock once the key's outbox row is pushed */
	L_UNLOCK,       /* to unlock */
	L_UNLOCKING,    /* its unlock in flight */
	L_WAIT          /* another node's: a job is parked on it (watched) */
};

struct fleet_lock {
	char key[FLY_KEY_MAX];
	int state;      /* enum lock_state */
	long long id;   /* the advisory lock's id (L_WAIT) */
};

struct flyd_fleet {
	struct flyd_ctx *ctx;
	PGconn *conn;
	uv_poll_t *poll;        /* on PQsocket; NULL when none */
	int fd;                 /* the socket polled */
	int events;             /* the events polled */
	uv_timer_t retry;
	uv_timer_t check;       /* fleet_check_ms: watched locks still held? */
	uint64_t connect_ms;    /* when the connection attempt began */
	int check_due;          /* a check is to be sent */
	int state;              /* enum fleet_state */
	int query;              /* enum fleet_query in flight */
	int qfailed;            /* the query in flight returned an error */
	int migrated, listening, pulled, device_known;
	int stopping;
	int closing;            /* handles still closing */
	char node[192];         /* this daemon, for provenance: host (63) ":" socket path (107) */
	char err[FLEET_ERR_MAX];
	struct flyd_result push; /* the push in flight */
	struct flyd_result *batch; /* a pull's valid rows */
	size_t nbatch, capbatch;
	uint64_t since_ms;      /* the outbox has been non-empty since */
	uint64_t pushed, applied, refused, errors;
	struct fleet_lock *locks; /* single flight: asked for or held */
	size_t nlocks, caplocks;
	char qkey[FLY_KEY_MAX]; /* the key of the claim or unlock in flight */
	int nres;               /* the claim's results so far */
	int claim_got;          /* its try-lock answered true */
	long long claim_id;     /* the lock id it tried */
	char *claim_row;        /* its fleet row (a record), NULL: none */
};

static void step(struct flyd_fleet *f);
static void poll_set(struct flyd_fleet *f, int events);

/* ------------------------------------------------------------ errors */

static void set_err(struct flyd_fleet *f, const char *what, const char *msg)
{
	char q[FLEET_ERR_MAX + 8];
	size_t n;

	snprintf(f->err, sizeof(f->err), "%s: %s", what,
		 msg != NULL && msg[0] ? msg : "unknown error");
	n = strlen(f->err);
	while (n > 0 && (f->err[n - 1] == '\n' || f->err[n - 1] == ' '))
		f->err[--n] = '\0';
	flyd_log(FLYD_LOG_WARN, "fleet_error", "msg=%s",
		 flyd_log_q(f->err, q, sizeof(q)));
}

/* A handle closed: once stopping and the last one is closed, free. */
static void handle_closed(struct flyd_fleet *f)
{
	if (--f->closing == 0 && f->stopping) {
		free(f->batch);
		free(f->locks);
		free(f->claim_row);
		free(f);
	}
}

static void on_poll_closed(uv_handle_t *h)
{
	struct flyd_fleet *f = h->data;

	free(h);
	handle_closed(f);
}

static void on_timer_closed(uv_handle_t *h)
{
	handle_closed(h->data);
}

static void on_retry(uv_timer_t *t);

static void poll_close(struct flyd_fleet *f)
{
	if (f->poll == NULL)
		return;
	uv_poll_stop(f->poll);
	f->closing++;
	uv_close((uv_handle_t *)f->poll, on_poll_closed);
	f->poll = NULL;
	f->fd = -1;
	f->events = 0;
}

/* The connection is gone: so are its locks (the server released them);
 * the claims not answered yet are answered "down" (their jobs run). */
static void locks_lost(struct flyd_fleet *f)
{
	struct fleet_lock *l = f->locks;
	size_t n = f->nlocks, keep = 0;

	free(f->claim_row);
	f->claim_row = NULL;
	for (size_t i = 0; i < n; i++) {
		if (l[i].state == L_WAIT) { /* another node's: still watched */
			l[keep++] = l[i];
			continue;
		}
		if (l[i].state == L_CLAIM || l[i].state == L_CLAIMING)
			flyd_sched_fleet_answer(f->ctx->sched, l[i].key,
						FLYD_SF_DOWN);
	}
	f->nlocks = keep;
}

/* Drop the connection (after @p what failed) and retry later. */
static void fail(struct flyd_fleet *f, const char *what)
{
	set_err(f, what, f->conn != NULL ? PQerrorMessage(f->conn) : NULL);
	f->errors++;
	locks_lost(f);
	poll_close(f);
	if (f->conn != NULL)
		PQfinish(f->conn);
	f->conn = NULL;
	f->state = ST_DOWN;
	f->query = Q_NONE;
	f->migrated = f->listening = 0;
	f->nbatch = 0;
	if (!f->stopping)
		uv_timer_start(&f->retry, on_retry, f->ctx->cfg.fleet_retry_ms,
			       0);
}

/* ------------------------------------------------------------ validation */

/* A fleet record (JSON text) into @p r, validated like an import row:
 * the record's fields (fly_record_check), this device and libver, then
 * the variant and the point against the kernel registry.
 * @return 0 valid, 1 another device's or version's row (not ours),
 * -1 refused (@p why says why). */
static int record_read(struct flyd_fleet *f, const char *txt,
		       struct flyd_result *r, char *why, size_t cap)
{
	struct flyd_ctx *ctx = f->ctx;
	cJSON *o = cJSON_Parse(txt), *it;
	int rc = -1;

	if (o == NULL) {
		snprintf(why, cap, "not JSON");
		return -1;
	}
	if (fly_record_check(o, why, cap) < 0)
		goto out;
	if (strcmp(cJSON_GetObjectItem(o, "device")->valuestring,
		   ctx->device_id) != 0 ||
	    strcmp(cJSON_GetObjectItem(o, "libver")->valuestring,
		   ctx->libver) != 0) {
		rc = 1;
		goto out;
	}
	memset(r, 0, sizeof(*r));
	snprintf(r->key, sizeof(r->key), "%s",
		 cJSON_GetObjectItem(o, "key")->valuestring);
	snprintf(r->device, sizeof(r->device), "%s", ctx->device_id);
	snprintf(r->libver, sizeof(r->libver), "%s", ctx->libver);
	snprintf(r->d.variant, sizeof(r->d.variant), "%s",
		 cJSON_GetObjectItem(o, "variant")->valuestring);
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "params"))
		r->d.params[r->d.nparams++] = (int64_t)it->valuedouble;
	r->d.median_us = cJSON_GetObjectItem(o, "median_us")->valuedouble;
	r->mad_us = cJSON_GetObjectItem(o, "mad_us")->valuedouble;
	r->tune_s = cJSON_GetObjectItem(o, "tune_s")->valuedouble;
	r->tuned_at = (int64_t)cJSON_GetObjectItem(o, "tuned_at")->valuedouble;
	r->d.status = FLY_STATUS_TUNED;
	rc = flyd_sched_check_result(ctx->sched, r->key, &r->d, why, cap) == 0
		     ? 0 : -1;
out:
	cJSON_Delete(o);
	return rc;
}

static int same_winner(const struct flyd_result *a, const struct flyd_result *b)
{
	return strcmp(a->d.variant, b->d.variant) == 0 &&
	       a->d.nparams == b->d.nparams &&
	       memcmp(a->d.params, b->d.params,
		      a->d.nparams * sizeof(a->d.params[0])) == 0 &&
	       a->d.median_us == b->d.median_us;
}

/* Whether the fleet's row @p r should replace what this node serves: not
 * while our own push of the key is queued (its reply carries the merged
 * winner), nor when the local row is the same winner. */
static int wanted(struct flyd_fleet *f, const struct flyd_result *r)
{
	struct flyd_ctx *ctx = f->ctx;
	struct flyd_result cur;

	if (flyd_store_outbox_has(ctx->store, r->key, r->device, r->libver))
		return 0;
	if (flyd_store_result_get(ctx->store, r->key, r->device, r->libver,
				  &cur) == 0 && same_winner(&cur, r))
		return 0;
	return 1;
}

/* Fleet winners @p rs were applied: a job parked on their keys is
 * adopted (scheduler.h). */
static void announce(struct flyd_fleet *f, const struct flyd_result *rs,
		     size_t n)
{
	for (size_t i = 0; i < n; i++)
		flyd_sched_fleet_answer(f->ctx->sched, rs[i].key,
					FLYD_SF_WINNER);
}

/* One fleet record (a push's or a claim's reply): validate, then adopt.
 * @return 0 served (applied, or the winner already served), -1 not (not
 * ours, refused, not committed). */
static int record_apply(struct flyd_fleet *f, const char *txt,
			const char *from)
{
	char why[200], q[240];
	struct flyd_result r;
	int rc = record_read(f, txt, &r, why, sizeof(why));

	if (rc == 1)
		return -1;
	if (rc < 0) {
		f->refused++;
		flyd_log(FLYD_LOG_WARN, "fleet_row_refused", "from=%s why=%s",
			 from, flyd_log_q(why, q, sizeof(q)));
		return -1;
	}
	if (!wanted(f, &r))
		return 0;
	if (flyd_results_adopt(f->ctx->results, &r, 1) != 0)
		return -1;
	f->applied++;
	flyd_log(FLYD_LOG_DEBUG, "fleet_applied", "key=%s variant=%s "
		 "median_us=%.3f from=%s", r.key, r.d.variant, r.d.median_us,
		 from);
	announce(f, &r, 1);
	return 0;
}

/* ------------------------------------------------------------ locks */

static struct fleet_lock *lock_find(struct flyd_fleet *f, const char *key,
				    int state)
{
	for (size_t i = 0; i < f->nlocks; i++)
		if (f->locks[i].state == state &&
		    strcmp(f->locks[i].key, key) == 0)
			return &f->locks[i];
	return NULL;
}

/* The first lock in @p state (the next to send), or NULL. */
static struct fleet_lock *lock_next(struct flyd_fleet *f, int state)
{
	for (size_t i = 0; i < f->nlocks; i++)
		if (f->locks[i].state == state)
			return &f->locks[i];
	return NULL;
}

static struct fleet_lock *lock_add(struct flyd_fleet *f, const char *key,
				   int state)
{
	struct fleet_lock *l;

	if (f->nlocks == f->caplocks) {
		size_t cap = f->caplocks ? f->caplocks * 2 : 16;

		l = realloc(f->locks, cap * sizeof(*l));
		if (l == NULL)
			return NULL;
		f->locks = l;
		f->caplocks = cap;
	}
	l = &f->locks[f->nlocks++];
	snprintf(l->key, sizeof(l->key), "%s", key);
	l->state = state;
	return l;
}

static void lock_del(struct flyd_fleet *f, struct fleet_lock *l)
{
	*l = f->locks[--f->nlocks];
}

/* ------------------------------------------------------------ queries */

/* Flush what libpq holds; poll for writable until it is all sent. */
static void flush(struct flyd_fleet *f)
{
	int rc = PQflush(f->conn);

	if (rc < 0) {
		fail(f, "send");
		return;
	}
	poll_set(f, UV_READABLE | (rc == 1 ? UV_WRITABLE : 0));
}

static void sent(struct flyd_fleet *f, int q, int ok)
{
	if (!ok) {
		fail(f, "send");
		return;
	}
	f->query = q;
	f->qfailed = 0;
	flush(f);
}

/* The migrations not yet applied, in one transaction under an advisory
 * lock (the first node to connect applies them; the others wait, then
 * find them done), then the schema's version.  A migration's text goes
 * through EXECUTE, so it is dollar-quoted with a tag no file uses. */
static char *migrate_sql(void)
{
	size_t cap = 1024, len;
	char *s, *p;

	for (size_t i = 0; i < flyd_fleet_nmigrations; i++)
		cap += strlen(flyd_fleet_migrations[i].sql) + 512;
	s = malloc(cap);
	if (s == NULL)
		return NULL;
	len = (size_t)snprintf(s, cap,
		"BEGIN;\n"
		"SELECT pg_advisory_xact_lock(" FLEET_MIGRATE_LOCK ");\n"
		"CREATE TABLE IF NOT EXISTS fleet_schema (version integer "
		"NOT NULL);\n");
	for (size_t i = 0; i < flyd_fleet_nmigrations; i++) {
		const struct flyd_migration *m = &flyd_fleet_migrations[i];

		p = s + len;
		len += (size_t)snprintf(p, cap - len,
			"DO $flytuned_m$ BEGIN IF (SELECT coalesce(max(version),"
			" 0) FROM fleet_schema) < %d THEN EXECUTE "
			"$flytuned_s$%s$flytuned_s$; INSERT INTO fleet_schema "
			"VALUES (%d); END IF; END $flytuned_m$;\n",
			m->version, m->sql, m->version);
	}
	snprintf(s + len, cap - len, "COMMIT;\n"
		 "SELECT coalesce(max(version), 0) FROM fleet_schema;\n");
	return s;
}

static void send_migrate(struct flyd_fleet *f)
{
	char *sql = migrate_sql();

	if (sql == NULL) {
		set_err(f, "migrate", "out of memory");
		return;
	}
	sent(f, Q_MIGRATE, PQsendQuery(f->conn, sql));
	free(sql);
}

static void send_pull(struct flyd_fleet *f)
{
	const char *v[2] = {f->ctx->device_id, f->ctx->libver};
	int ok;

	ok = PQsendQueryParams(f->conn, "SELECT fleet_record(r) FROM "
			       "fleet_results r WHERE device = $1 AND "
			       "libver = $2", 2, NULL, v, NULL, NULL, 0);
	if (ok)
		ok = PQsetSingleRowMode(f->conn);
	f->nbatch = 0;
	sent(f, Q_PULL, ok);
}

static int first_push(void *arg, const struct flyd_result *r)
{
	*(struct flyd_result *)arg = *r;
	return 1;
}

/* The oldest outbox row, if any, to fleet_push().  @return 1 sent (or
 * failed), 0 nothing queued. */
static int send_push(struct flyd_fleet *f)
{
	struct flyd_ctx *ctx = f->ctx;
	struct flyd_result *r = &f->push;
	char params[8 * 24 + 4], med[40], mad[40], tune[40], at[24], h[40];
	char reps[16];
	const char *v[12];
	size_t n = 0;
	int rc;

	rc = flyd_store_outbox_iter(ctx->store, 1, first_push, r);
	if (rc != 1) {
		if (rc == 0)
			f->since_ms = 0;
		return 0;
	}
	n += (size_t)snprintf(params, sizeof(params), "{");
	for (uint32_t i = 0; i < r->d.nparams; i++)
		n += (size_t)snprintf(params + n, sizeof(params) - n, "%s%lld",
				      i ? "," : "",
				      (long long)r->d.params[i]);
	snprintf(params + n, sizeof(params) - n, "}");
	snprintf(med, sizeof(med), "%.17g", r->d.median_us);
	snprintf(mad, sizeof(mad), "%.17g", r->mad_us);
	snprintf(tune, sizeof(tune), "%.17g", r->tune_s);
	snprintf(at, sizeof(at), "%lld", (long long)r->tuned_at);
	snprintf(h, sizeof(h), "%.17g", ctx->cfg.fleet_hysteresis);
	snprintf(reps, sizeof(reps), "%u", r->reps);
	v[0] = r->device; v[1] = r->libver; v[2] = r->key; v[3] = f->node;
	v[4] = r->d.variant; v[5] = params; v[6] = med; v[7] = mad;
	v[8] = tune; v[9] = at; v[10] = h;
	v[11] = r->reps > 0 ? reps : NULL; /* NULL: unknown (0002_reps) */
	sent(f, Q_PUSH, PQsendQueryParams(f->conn,
		"SELECT fleet_push($1, $2, $3, $4, $5, $6::bigint[], $7, $8, "
		"$9, $10, $11, $12::integer)", 12, NULL, v, NULL, NULL, 0));
	return 1;
}

/* Claim @p l's key: try the lock, then read the key's fleet row in a
 * new snapshot (two statements, so literals, not parameters). */
static void send_claim(struct flyd_fleet *f, struct fleet_lock *l)
{
	struct flyd_ctx *ctx = f->ctx;
	char *dev, *lib, *key, *sql = NULL;
	int ok = 0;

	dev = PQescapeLiteral(f->conn, ctx->device_id, strlen(ctx->device_id));
	lib = PQescapeLiteral(f->conn, ctx->libver, strlen(ctx->libver));
	key = PQescapeLiteral(f->conn, l->key, strlen(l->key));
	if (dev != NULL && lib != NULL && key != NULL &&
	    asprintf(&sql, "SELECT pg_try_advisory_lock(i), i FROM (SELECT "
		     FLYD_FLEET_LOCK_ID("%s", "%s", "%s") " AS i) s; "
		     "SELECT fleet_record(r) FROM fleet_results r WHERE "
		     "device = %s AND libver = %s AND key = %s",
		     dev, lib, key, dev, lib, key) >= 0)
		ok = 1;
	PQfreemem(dev);
	PQfreemem(lib);
	PQfreemem(key);
	snprintf(f->qkey, sizeof(f->qkey), "%s", l->key);
	l->state = L_CLAIMING;
	f->nres = 0;
	f->claim_got = 0;
	f->claim_id = 0;
	free(f->claim_row);
	f->claim_row = NULL;
	sent(f, Q_CLAIM, ok && PQsendQuery(f->conn, sql));
	free(sql);
}

static void send_unlock(struct flyd_fleet *f, struct fleet_lock *l)
{
	const char *v[3] = {f->ctx->device_id, f->ctx->libver, l->key};

	snprintf(f->qkey, sizeof(f->qkey), "%s", l->key);
	l->state = L_UNLOCKING;
	sent(f, Q_UNLOCK, PQsendQueryParams(f->conn, "SELECT "
		"pg_advisory_unlock(" LOCK_ID_SQL ")", 3, NULL, v, NULL,
		NULL, 0));
}

/* Which watched locks (L_WAIT) nobody holds now, and whether their key
 * has a fleet row: the watches as one JSON parameter ([{"id": "<lock
 * id>", "key": KEY}]; the id as text, a double would round it), less
 * those pg_locks shows granted in this database (an advisory lock on a
 * bigint is classid:objid, objsubid 1).  A key with a winner: its holder
 * pushed, then unlocked, and the NOTIFY may not be here yet. */
static void send_check(struct flyd_fleet *f)
{
	struct flyd_ctx *ctx = f->ctx;
	cJSON *ws = cJSON_CreateArray(), *w;
	char id[24], *wj = NULL;
	const char *v[3];

	f->check_due = 0;
	for (size_t i = 0; ws != NULL && i < f->nlocks; i++) {
		if (f->locks[i].state != L_WAIT)
			continue;
		w = cJSON_CreateObject();
		if (w == NULL)
			break;
		snprintf(id, sizeof(id), "%lld", f->locks[i].id);
		cJSON_AddStringToObject(w, "id", id);
		cJSON_AddStringToObject(w, "key", f->locks[i].key);
		cJSON_AddItemToArray(ws, w);
	}
	wj = ws != NULL ? cJSON_PrintUnformatted(ws) : NULL;
	cJSON_Delete(ws);
	if (wj == NULL)
		return;
	v[0] = wj; v[1] = ctx->device_id; v[2] = ctx->libver;
	sent(f, Q_CHECK, PQsendQueryParams(f->conn,
		"SELECT w.id, EXISTS (SELECT 1 FROM fleet_results r WHERE "
		"r.device = $2 AND r.libver = $3 AND r.key = w.key) FROM "
		"json_to_recordset($1::json) AS w(id bigint, key text) WHERE "
		"NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = "
		"'advisory' AND l.granted AND l.objsubid = 1 AND l.database = "
		"(SELECT oid FROM pg_database WHERE datname = "
		"current_database()) AND ((l.classid::bigint << 32) | "
		"l.objid::bigint) = w.id)", 3, NULL, v, NULL, NULL, 0));
	free(wj);
}

/* The next thing to do on an idle connection. */
static void step(struct flyd_fleet *f)
{
	struct fleet_lock *l;

	if (f->state != ST_UP || f->query != Q_NONE || f->stopping)
		return;
	if (!f->migrated) {
		send_migrate(f);
	} else if (!f->listening) {
		sent(f, Q_LISTEN, PQsendQuery(f->conn, "LISTEN "
					      FLEET_CHANNEL));
	} else if (f->device_known && !f->pulled) {
		send_pull(f);
	} else if ((l = lock_next(f, L_CLAIM)) != NULL) {
		send_claim(f, l);
	} else if ((l = lock_next(f, L_UNLOCK)) != NULL) {
		send_unlock(f, l);
	} else if (f->check_due && lock_next(f, L_WAIT) != NULL) {
		send_check(f);
	} else if (f->device_known) {
		(void)send_push(f);
	}
}

/* ------------------------------------------------------------ results */

static const char *query_name(int q)
{
	static const char *const name[] = {
		[Q_NONE] = "none", [Q_MIGRATE] = "migrate",
		[Q_LISTEN] = "listen", [Q_PULL] = "pull", [Q_PUSH] = "push",
		[Q_CLAIM] = "claim", [Q_UNLOCK] = "unlock",
		[Q_CHECK] = "check",
	};

	return q >= Q_NONE && q <= Q_CHECK ? name[q] : "query";
}

static void batch_add(struct flyd_fleet *f, const char *txt,
		      const char *from)
{
	char why[200], q[240];
	struct flyd_result r;
	int rc = record_read(f, txt, &r, why, sizeof(why));

	if (rc == 1)
		return;
	if (rc < 0) {
		f->refused++;
		flyd_log(FLYD_LOG_WARN, "fleet_row_refused", "from=%s why=%s",
			 from, flyd_log_q(why, q, sizeof(q)));
		return;
	}
	if (!wanted(f, &r))
		return;
	if (f->nbatch == f->capbatch) {
		size_t cap = f->capbatch ? f->capbatch * 2 : 1024;
		struct flyd_result *b = realloc(f->batch, cap * sizeof(*b));

		if (b == NULL)
			return; /* the next pull (a reconnect) brings it */
		f->batch = b;
		f->capbatch = cap;
	}
	f->batch[f->nbatch++] = r;
}

/* The watched lock @p id is free: no longer watched; with no winner in
 * the fleet DB (@p won 0), the jobs parked on it ask again.  With one,
 * its NOTIFY adopts them (its holder pushed, then unlocked). */
static void lock_freed(struct flyd_fleet *f, long long id, int won)
{
	char key[FLY_KEY_MAX];

	for (size_t i = f->nlocks; i-- > 0;) {
		if (f->locks[i].state != L_WAIT || f->locks[i].id != id)
			continue;
		snprintf(key, sizeof(key), "%s", f->locks[i].key);
		lock_del(f, &f->locks[i]);
		flyd_log(FLYD_LOG_DEBUG, "fleet_lock_free", "key=%s won=%d", key,
			 won);
		if (!won)
			flyd_sched_fleet_answer(f->ctx->sched, key,
						FLYD_SF_FREE);
	}
}

/* One PGresult of the query in flight. */
static void on_result(struct flyd_fleet *f, PGresult *res)
{
	ExecStatusType st = PQresultStatus(res);

	if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE ||
	    st == PGRES_NONFATAL_ERROR) {
		if (!f->qfailed)
			set_err(f, query_name(f->query),
				PQresultErrorMessage(res));
		f->qfailed = 1;
		return;
	}
	if (f->query == Q_MIGRATE && st == PGRES_TUPLES_OK &&
	    PQntuples(res) == 1) {
		long v = strtol(PQgetvalue(res, 0, 0), NULL, 10);
		long mine = flyd_fleet_nmigrations == 0 ? 0 :
			flyd_fleet_migrations[flyd_fleet_nmigrations - 1]
				.version;

		if (v > mine) {
			char m[120];

			snprintf(m, sizeof(m), "fleet schema version %ld is "
				 "newer than this flytuned's %ld", v, mine);
			set_err(f, "migrate", m);
			f->qfailed = 1;
		}
	} else if (f->query == Q_PULL && st == PGRES_SINGLE_TUPLE) {
		batch_add(f, PQgetvalue(res, 0, 0), "pull");
	} else if (f->query == Q_PUSH && st == PGRES_TUPLES_OK &&
		   PQntuples(res) == 1) {
		struct flyd_result *r = &f->push;
		struct fleet_lock *l;

		/* The fleet DB committed it: out of the outbox, then the
		 * merged winner, which may be another node's; then the key's
		 * lock may go (the waiters have the winner by NOTIFY). */
		(void)flyd_store_outbox_del(f->ctx->store, r->key, r->device,
					    r->libver);
		f->pushed++;
		(void)record_apply(f, PQgetvalue(res, 0, 0), "push");
		l = lock_find(f, r->key, L_PUSH);
		if (l != NULL) /* the winner is in: waiters have it */
			l->state = L_UNLOCK;
	} else if (f->query == Q_CHECK && st == PGRES_TUPLES_OK) {
		for (int i = 0; i < PQntuples(res); i++)
			lock_freed(f, strtoll(PQgetvalue(res, i, 0), NULL, 10),
				   strcmp(PQgetvalue(res, i, 1), "t") == 0);
	} else if (f->query == Q_CLAIM && st == PGRES_TUPLES_OK) {
		if (f->nres++ == 0 && PQntuples(res) == 1) {
			f->claim_got = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
			f->claim_id = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
		} else if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
			f->claim_row = strdup(PQgetvalue(res, 0, 0));
	}
}

/* A claim's answer: the fleet's row when it has one (served, and the
 * lock, if taken, given back), else the lock taken or not. */
static void claim_done(struct flyd_fleet *f)
{
	struct fleet_lock *l = lock_find(f, f->qkey, L_CLAIMING);
	char *row = f->claim_row;
	int got = f->claim_got, answer;

	f->claim_row = NULL;
	if (row != NULL && record_apply(f, row, "claim") == 0)
		answer = FLYD_SF_HAD;
	else if (row != NULL)
		answer = got ? FLYD_SF_GOT : FLYD_SF_DOWN; /* unusable row */
	else
		answer = got ? FLYD_SF_GOT : FLYD_SF_BUSY;
	free(row);
	if (l != NULL) {
		if (answer == FLYD_SF_GOT) {
			l->state = L_HELD;
		} else if (got) {
			l->state = L_UNLOCK;
		} else if (answer == FLYD_SF_BUSY) {
			l->state = L_WAIT; /* watched until the job ends */
			l->id = f->claim_id;
		} else {
			lock_del(f, l);
		}
	}
	flyd_log(FLYD_LOG_DEBUG, "fleet_claim", "key=%s got=%d row=%d",
		 f->qkey, got, answer == FLYD_SF_HAD);
	flyd_sched_fleet_answer(f->ctx->sched, f->qkey, answer);
}

/* The query in flight has ended (PQgetResult gave NULL). */
static void on_query_done(struct flyd_fleet *f)
{
	int q = f->query;

	f->query = Q_NONE;
	if (f->qfailed) {
		/* a push the fleet DB refuses: kept, retried later with the
		 * others (logged) */
		f->errors++;
		fail(f, query_name(q));
		return;
	}
	if (q == Q_MIGRATE) {
		f->migrated = 1;
	} else if (q == Q_LISTEN) {
		f->listening = 1;
		flyd_log(FLYD_LOG_INFO, "fleet_connected", "node=%s", f->node);
		f->err[0] = '\0';
	} else if (q == Q_PULL) {
		size_t n = f->nbatch;

		f->pulled = 1;
		if (n > 0 && flyd_store_import(f->ctx->store, f->batch, n) == 0) {
			f->applied += n;
			flyd_results_refill(f->ctx->results);
		} else {
			n = 0;
		}
		f->nbatch = 0;
		flyd_log(FLYD_LOG_INFO, "fleet_pulled", "rows=%zu results=%zu",
			 n, flyd_results_count(f->ctx->results));
		announce(f, f->batch, n);
	} else if (q == Q_CLAIM) {
		claim_done(f);
	} else if (q == Q_UNLOCK) {
		struct fleet_lock *l = lock_find(f, f->qkey, L_UNLOCKING);

		if (l != NULL)
			lock_del(f, l);
	}
	step(f);
}

static void read_input(struct flyd_fleet *f)
{
	PGnotify *nt;
	PGresult *res;

	if (!PQconsumeInput(f->conn)) {
		fail(f, "receive");
		return;
	}
	while (f->conn != NULL && f->query != Q_NONE && !PQisBusy(f->conn)) {
		res = PQgetResult(f->conn);
		if (res == NULL) {
			on_query_done(f);
			break;
		}
		on_result(f, res);
		PQclear(res);
	}
	/* Every notification read: validated one by one, committed in one
	 * transaction (a burst of other nodes' winners is one fsync).  While
	 * a pull runs they join its batch (committed when it ends); before
	 * the device is known the pull to come covers them. */
	while (f->conn != NULL && (nt = PQnotifies(f->conn)) != NULL) {
		if (f->device_known)
			batch_add(f, nt->extra, "notify");
		PQfreemem(nt);
	}
	if (f->nbatch > 0 && f->query != Q_PULL) {
		if (flyd_results_adopt(f->ctx->results, f->batch,
				       f->nbatch) == 0) {
			f->applied += f->nbatch;
			announce(f, f->batch, f->nbatch);
		}
		f->nbatch = 0;
	}
}

/* ------------------------------------------------------------ connect */

static void connect_poll(struct flyd_fleet *f)
{
	PostgresPollingStatusType ps = PQconnectPoll(f->conn);

	switch (ps) {
	case PGRES_POLLING_READING:
		poll_set(f, UV_READABLE);
		break;
	case PGRES_POLLING_WRITING:
		poll_set(f, UV_WRITABLE);
		break;
	case PGRES_POLLING_OK:
		if (PQsetnonblocking(f->conn, 1) != 0) {
			fail(f, "connect");
			return;
		}
		f->state = ST_UP;
		poll_set(f, UV_READABLE);
		step(f);
		break;
	default:
		fail(f, "connect");
		break;
	}
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct flyd_fleet *f = h->data;

	if (f->stopping || f->conn == NULL)
		return;
	if (status < 0) {
		fail(f, "poll");
		return;
	}
	if (f->state == ST_CONNECTING) {
		connect_poll(f);
		return;
	}
	if (events & UV_WRITABLE) {
		flush(f);
		if (f->conn == NULL)
			return;
	}
	if (events & UV_READABLE)
		read_input(f);
}

/* Poll @p events on the connection's socket, which libpq may change
 * while it connects (another host, an SSL retry): a new socket gets a
 * new handle. */
static void poll_set(struct flyd_fleet *f, int events)
{
	int fd = f->conn != NULL ? PQsocket(f->conn) : -1;

	if (fd < 0) {
		fail(f, "socket");
		return;
	}
	if (f->poll != NULL && f->fd != fd)
		poll_close(f);
	if (f->poll == NULL) {
		f->poll = malloc(sizeof(*f->poll));
		if (f->poll == NULL ||
		    uv_poll_init_socket(f->ctx->loop, f->poll, fd) != 0) {
			free(f->poll);
			f->poll = NULL;
			set_err(f, "poll", "cannot watch the socket");
			return;
		}
		f->poll->data = f;
		f->fd = fd;
		f->events = 0;
	}
	if (f->events != events) {
		uv_poll_start(f->poll, events, on_poll);
		f->events = events;
	}
}

/* The server's notices ("already exists, skipping") go to the log at
 * debug level, not to stderr as libpq's default does. */
static void on_notice(void *arg, const char *msg)
{
	char q[300];

	(void)arg;
	flyd_log(FLYD_LOG_DEBUG, "fleet_notice", "msg=%s",
		 flyd_log_q(msg, q, sizeof(q)));
}

static void connect_begin(struct flyd_fleet *f)
{
	f->conn = PQconnectStart(f->ctx->cfg.fleet_url);
	if (f->conn == NULL || PQstatus(f->conn) == CONNECTION_BAD) {
		fail(f, "connect");
		return;
	}
	PQsetNoticeProcessor(f->conn, on_notice, f);
	f->state = ST_CONNECTING;
	f->connect_ms = uv_now(f->ctx->loop);
	f->pulled = 0; /* another node may have pushed while we were away */
	poll_set(f, UV_WRITABLE);
}

static void on_retry(uv_timer_t *t)
{
	struct flyd_fleet *f = t->data;

	if (!f->stopping && f->state == ST_DOWN)
		connect_begin(f);
}

/* Whether a claim may wait for the connection being made. */
static int connect_held(const struct flyd_fleet *f)
{
	return f->state == ST_CONNECTING &&
	       uv_now(f->ctx->loop) - f->connect_ms < CONNECT_HOLD_MS;
}

/* Claims still waiting for a connection past CONNECT_HOLD_MS: answered
 * "down" (their jobs run at once). */
static void connect_hold_end(struct flyd_fleet *f)
{
	char key[FLY_KEY_MAX];

	if (f->state != ST_CONNECTING || connect_held(f))
		return;
	for (size_t i = f->nlocks; i-- > 0;) {
		if (f->locks[i].state != L_CLAIM)
			continue;
		snprintf(key, sizeof(key), "%s", f->locks[i].key);
		lock_del(f, &f->locks[i]);
		flyd_sched_fleet_answer(f->ctx->sched, key, FLYD_SF_DOWN);
	}
}

/* Every fleet_check_ms (re-read each time: SIGHUP applies it; while 0,
 * looked at again every second; at most CONNECT_HOLD_MS / 4 while
 * connecting): a check when jobs are parked. */
static void on_check(uv_timer_t *t)
{
	struct flyd_fleet *f = t->data;
	uint32_t ms = f->ctx->cfg.fleet_check_ms;

	if (f->stopping)
		return;
	connect_hold_end(f);
	if (ms > 0 && lock_next(f, L_WAIT) != NULL) {
		f->check_due = 1;
		step(f);
	}
	if (ms == 0 || (f->state == ST_CONNECTING && ms > CONNECT_HOLD_MS / 4))
		ms = f->state == ST_CONNECTING ? CONNECT_HOLD_MS / 4 : 1000;
	uv_timer_start(&f->check, on_check, ms, 0);
}

/* ------------------------------------------------------------ lifecycle */

int flyd_fleet_start(struct flyd_ctx *ctx, struct flyd_fleet **out)
{
	struct flyd_fleet *f;
	char host[64] = "";

	*out = NULL;
	if (ctx->cfg.fleet_url[0] == '\0')
		return 0;
	f = calloc(1, sizeof(*f));
	if (f == NULL)
		return -ENOMEM;
	f->ctx = ctx;
	f->fd = -1;
	(void)gethostname(host, sizeof(host) - 1);
	snprintf(f->node, sizeof(f->node), "%s:%s", host, ctx->socket_path);
	uv_timer_init(ctx->loop, &f->retry);
	f->retry.data = f;
	uv_timer_init(ctx->loop, &f->check);
	f->check.data = f;
	uv_timer_start(&f->check, on_check, ctx->cfg.fleet_check_ms > 0 ?
		       ctx->cfg.fleet_check_ms : 1000, 0);
	flyd_store_set_outbox(ctx->store, 1);
	if (flyd_store_outbox_count(ctx->store) > 0)
		f->since_ms = uv_now(ctx->loop);
	f->state = ST_DOWN;
	flyd_log(FLYD_LOG_INFO, "fleet_starting", "node=%s", f->node);
	connect_begin(f);
	*out = f;
	return 0;
}

void flyd_fleet_ready(struct flyd_fleet *f)
{
	if (f == NULL)
		return;
	f->device_known = 1;
	step(f);
}

void flyd_fleet_kick(void *arg)
{
	struct flyd_fleet *f = arg;

	if (f == NULL)
		return;
	if (f->since_ms == 0)
		f->since_ms = uv_now(f->ctx->loop);
	step(f);
}

int flyd_fleet_claim(void *arg, const char *key)
{
	struct flyd_fleet *f = arg;
	struct fleet_lock *l;

	/* Down, or connecting for too long: run at once.  Connecting (for
	 * a while) or syncing: asked, sent after the pull. */
	if (f == NULL || f->stopping || f->state == ST_DOWN ||
	    (f->state == ST_CONNECTING && !connect_held(f)))
		return 0;
	l = lock_find(f, key, L_HELD);
	if (l == NULL)
		l = lock_find(f, key, L_PUSH);
	if (l == NULL)
		l = lock_find(f, key, L_UNLOCK);
	if (l != NULL) { /* still ours: kept */
		l->state = L_HELD;
		return 2;
	}
	l = lock_find(f, key, L_WAIT);
	if (l != NULL) /* asked again: the claim's answer says what now */
		lock_del(f, l);
	if (lock_add(f, key, L_CLAIM) == NULL)
		return 0;
	step(f);
	/* Asked: sent now (up), or after the connection and its pull
	 * (connecting: connect_hold_end answers "down" past the hold).  A
	 * send that failed dropped the connection and answered "down"
	 * before the scheduler waits: say so here instead.  (It said "run
	 * now" while connecting too, so a job resumed at start ran before
	 * the fleet could tell it the key was measured.) */
	return f->state == ST_DOWN ? 0 : 1;
}

void flyd_fleet_release(void *arg, const char *key, int won)
{
	struct flyd_fleet *f = arg;
	struct fleet_lock *l;
	struct flyd_ctx *ctx;

	if (f == NULL || f->stopping)
		return;
	ctx = f->ctx;
	l = lock_find(f, key, L_HELD);
	if (l == NULL) {
		/* a parked job that ended (adopted, timed out, forgotten) */
		l = lock_find(f, key, L_WAIT);
		if (l != NULL)
			lock_del(f, l);
		return;
	}
	l->state = won && flyd_store_outbox_has(ctx->store, key,
						ctx->device_id, ctx->libver) ?
		   L_PUSH : L_UNLOCK;
	step(f);
}

void flyd_fleet_stop(struct flyd_fleet *f)
{
	if (f == NULL)
		return;
	f->stopping = 1;
	uv_timer_stop(&f->retry);
	uv_timer_stop(&f->check);
	poll_close(f);
	if (f->conn != NULL)
		PQfinish(f->conn);
	f->conn = NULL;
	f->closing += 2;
	f->retry.data = f;
	uv_close((uv_handle_t *)&f->retry, on_timer_closed);
	uv_close((uv_handle_t *)&f->check, on_timer_closed);
}

/* ------------------------------------------------------------ status */

const char *flyd_fleet_state(const struct flyd_fleet *f)
{
	if (f == NULL)
		return "off";
	if (f->state == ST_DOWN)
		return "down";
	if (f->state == ST_CONNECTING)
		return "connecting";
	if (!f->migrated || !f->listening || (f->device_known && !f->pulled))
		return "syncing";
	return "connected";
}

const char *flyd_fleet_last_error(const struct flyd_fleet *f)
{
	return f != NULL ? f->err : "";
}

/* The single-flight counters (the scheduler's, stats.h). */
static void sf_gauges(struct flyd_ctx *ctx, struct flyd_fleet_gauges *g)
{
	struct flyd_sched_gauges sg;

	g->locked = ctx->stats.fleet_locked;
	g->waits = ctx->stats.fleet_waits;
	g->satisfied = ctx->stats.fleet_satisfied;
	g->wait_timeouts = ctx->stats.fleet_wait_timeouts;
	g->holders_lost = ctx->stats.fleet_holders_lost;
	flyd_sched_gauges(ctx->sched, &sg);
	g->waiting = sg.fleet_waiting;
}

void flyd_fleet_gauges(const struct flyd_fleet *f, struct flyd_fleet_gauges *g)
{
	memset(g, 0, sizeof(*g));
	if (f == NULL)
		return;
	g->enabled = 1;
	g->connected = strcmp(flyd_fleet_state(f), "connected") == 0;
	g->outbox = flyd_store_outbox_count(f->ctx->store);
	if (g->outbox > 0 && f->since_ms != 0)
		g->lag_s = (double)(uv_now(f->ctx->loop) - f->since_ms) / 1e3;
	g->pushed = f->pushed;
	g->applied = f->applied;
	g->refused = f->refused;
	g->errors = f->errors;
	sf_gauges(f->ctx, g);
}

void flyd_fleet_status(const struct flyd_fleet *f, cJSON *resp)
{
	struct flyd_fleet_gauges g;
	cJSON *o = cJSON_AddObjectToObject(resp, "fleet");

	if (o == NULL)
		return;
	flyd_fleet_gauges(f, &g);
	cJSON_AddStringToObject(o, "state", flyd_fleet_state(f));
	cJSON_AddNumberToObject(o, "outbox", (double)(g.outbox > 0 ?
						      g.outbox : 0));
	cJSON_AddNumberToObject(o, "lag_s", g.lag_s);
	cJSON_AddNumberToObject(o, "pushed", (double)g.pushed);
	cJSON_AddNumberToObject(o, "applied", (double)g.applied);
	cJSON_AddNumberToObject(o, "refused", (double)g.refused);
	cJSON_AddNumberToObject(o, "errors", (double)g.errors);
	cJSON_AddNumberToObject(o, "locked", (double)g.locked);
	cJSON_AddNumberToObject(o, "waits", (double)g.waits);
	cJSON_AddNumberToObject(o, "satisfied", (double)g.satisfied);
	cJSON_AddNumberToObject(o, "wait_timeouts", (double)g.wait_timeouts);
	cJSON_AddNumberToObject(o, "holders_lost", (double)g.holders_lost);
	cJSON_AddNumberToObject(o, "waiting", g.waiting);
	cJSON_AddStringToObject(o, "last_error", flyd_fleet_last_error(f));
	if (f != NULL)
		cJSON_AddStringToObject(o, "node", f->node);
}
