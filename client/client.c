/*
 * client.c -- libflyclient: fly_client handles, the decide hot path
 * (process cache -> shm table -> socket), reconnect with backoff, fork
 * detection, and the raw request entry point used by flytune-ctl.
 *
 * Owns: the socket fd, the shm readers (current and retired), the process
 * cache, the counters.
 * Thread: any.  The cache and the shm table are read lock-free; the
 * socket and the connection state (fd, pid, backoff, current reader
 * swap) are guarded by c->mu, taken with a deadline so no caller queues
 * past its timeout.
 * Invariants: c->fd >= 0 only after a successful hello; a reader once
 * published stays mapped until fly_client_close (other threads may hold
 * it), so replaced readers go to c->retired_shm.  Fork: an atfork child
 * handler resets every open client (registry below) while the child is
 * single-threaded; getpid() in connect_locked is the fallback.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fly_abi.h"
#include "fly_key.h"
#include "fly_msg.h"
#include "fly_shm.h"
#include "cache.h"
#include "conn.h"
#include "flyclient.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define TIMEOUT_DEFAULT_MS 5
#define RECHECK_DEFAULT_MS 100
#define REQUEST_DEFAULT_MS 30000
#define WAIT_SLACK_MS 500 /* room for the daemon's own timeout reply */
#define SOCK_PATH_MAX 108

struct retired_shm {
	struct fly_shm_reader *r;
	struct retired_shm *next;
};

#define FLY_HIT_SHARDS 16 /* power of two */

struct hit_shard {
	_Atomic uint64_t n;
	char pad[64 - sizeof(uint64_t)];
} __attribute__((aligned(64)));

struct fly_client {
	char path[SOCK_PATH_MAX];  /* socket path */
	uint32_t timeout_ms;       /* fly_decide budget */
	uint32_t recheck_ms;       /* pending keys: socket re-ask period */
	uint32_t no_shm;           /* never map the table */
	struct fly_cache cache;    /* process cache */
	_Atomic(struct fly_shm_reader *) shm; /* current table or NULL */
	_Atomic uint64_t epoch;    /* bumps whenever shm is replaced */
	pthread_mutex_t mu;        /* guards everything below */
	int fd;                    /* connected socket or -1 */
	pid_t pid;                 /* process that opened fd */
	int ever_connected;        /* for the reconnects counter */
	struct fly_client *reg_next; /* registry of open clients (reg_mu) */
	struct fly_client *reg_prev;
	uint64_t next_connect_ns;  /* backoff: no attempt before this */
	uint32_t backoff_ms;       /* current backoff step */
	int64_t next_id;           /* request ids */
	struct retired_shm *retired_shm; /* replaced readers (kept mapped) */
	/* Cache hits are counted per CPU shard: one shared counter bumped by
	 * every hit bounced its cache line between cores and made two
	 * threads 3x slower per call than one (bench_client, 2 threads). */
	struct hit_shard hits[FLY_HIT_SHARDS];
	_Atomic uint64_t n_shm_hits;
	_Atomic uint64_t n_socket_requests;
	_Atomic uint64_t n_socket_errors;
	_Atomic uint64_t n_reconnects;
	_Atomic uint64_t n_shm_refused;
};

/* Per-thread last error message, tagged with the client it belongs to. */
static _Thread_local const fly_client *err_client;
static _Thread_local char err_text[256];

static void set_err(const fly_client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void set_err(const fly_client *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err_text, sizeof(err_text), fmt, ap);
	va_end(ap);
	err_client = c;
}

const char *fly_client_errmsg(const fly_client *c)
{
	return err_client == c ? err_text : "";
}

static void bump(_Atomic uint64_t *ctr)
{
	atomic_fetch_add_explicit(ctr, 1, memory_order_relaxed);
}

/* Count a cache hit on this CPU's shard (sched_getcpu reads the rseq
 * area on current glibc: no syscall). */
static void bump_hit(fly_client *c)
{
	int cpu = sched_getcpu();
	unsigned i = cpu < 0 ? 0 : (unsigned)cpu & (FLY_HIT_SHARDS - 1);

	atomic_fetch_add_explicit(&c->hits[i].n, 1, memory_order_relaxed);
}

static uint64_t hits_total(const fly_client *c)
{
	uint64_t n = 0;

	for (int i = 0; i < FLY_HIT_SHARDS; i++)
		n += atomic_load_explicit(&((fly_client *)c)->hits[i].n,
					  memory_order_relaxed);
	return n;
}

/* ------------------------------------------------------------ fork */

/* Every open client, so the atfork child handler can reset them while the
 * child is still single-threaded: close the inherited socket (sending
 * nothing on it), unmap the tables (no other thread can be reading them
 * yet), and re-initialise the mutexes (a parent thread may have held
 * one at fork time; it does not exist in the child). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fly_client *reg_head;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
	pthread_mutex_lock(&reg_mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&reg_mu);
}

/* Unmap every table of @p c.  Only when no other thread can read them. */
static void shm_unmap_all(fly_client *c)
{
	struct fly_shm_reader *r = atomic_exchange(&c->shm, NULL);
	struct retired_shm *rs, *next;

	if (r != NULL)
		fly__shm_reader_close(r);
	for (rs = c->retired_shm; rs != NULL; rs = next) {
		next = rs->next;
		fly__shm_reader_close(rs->r);
		free(rs);
	}
	c->retired_shm = NULL;
	atomic_fetch_add(&c->epoch, 1);
}

static void fork_child(void)
{
	for (fly_client *c = reg_head; c != NULL; c = c->reg_next) {
		if (c->fd >= 0)
			close(c->fd);
		c->fd = -1;
		c->next_connect_ns = 0;
		c->backoff_ms = BACKOFF_MIN_MS;
		shm_unmap_all(c);
		pthread_mutex_init(&c->mu, NULL);
		pthread_mutex_init(&c->cache.mu, NULL);
	}
	pthread_mutex_unlock(&reg_mu);
}

static void reg_init(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void reg_add(fly_client *c)
{
	pthread_once(&reg_once, reg_init);
	pthread_mutex_lock(&reg_mu);
	c->reg_next = reg_head;
	if (reg_head != NULL)
		reg_head->reg_prev = c;
	reg_head = c;
	pthread_mutex_unlock(&reg_mu);
}

static void reg_del(fly_client *c)
{
	pthread_mutex_lock(&reg_mu);
	if (c->reg_prev != NULL)
		c->reg_prev->reg_next = c->reg_next;
	else
		reg_head = c->reg_next;
	if (c->reg_next != NULL)
		c->reg_next->reg_prev = c->reg_prev;
	pthread_mutex_unlock(&reg_mu);
}

/* ------------------------------------------------------------ open/close */

int fly_client_open(const char *socket_path, fly_client **out)
{
	struct fly_client_opts o;

	memset(&o, 0, sizeof(o));
	o.socket_path = socket_path;
	return fly_client_open_opts(&o, out);
}

/* Resolve the socket path: explicit, $FLYTUNED_SOCKET, or the default. */
static int resolve_path(const struct fly_client_opts *o, char *buf,
			size_t cap)
{
	const char *env = getenv("FLYTUNED_SOCKET");
	int n;

	if (o->socket_path != NULL)
		n = snprintf(buf, cap, "%s", o->socket_path);
	else if (env != NULL && env[0] != '\0')
		n = snprintf(buf, cap, "%s", env);
	else
		n = snprintf(buf, cap, "/run/flytuned/gpu%d.sock", o->device);
	return (n <= 0 || (size_t)n >= cap) ? -EINVAL : 0;
}

int fly_client_open_opts(const struct fly_client_opts *o, fly_client **out)
{
	struct fly_client *c;
	int rc;

	if (out == NULL)
		return -EINVAL;
	*out = NULL;
	if (o == NULL || o->device < 0)
		return -EINVAL;
	/* 64-byte aligned for the hit shards */
	c = aligned_alloc(64, (sizeof(*c) + 63) & ~(size_t)63);
	if (c == NULL)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	rc = resolve_path(o, c->path, sizeof(c->path));
	if (rc < 0)
		goto err_free;
	rc = fly__cache_init(&c->cache);
	if (rc < 0)
		goto err_free;
	rc = -pthread_mutex_init(&c->mu, NULL);
	if (rc < 0)
		goto err_cache;
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : TIMEOUT_DEFAULT_MS;
	c->recheck_ms = o->recheck_ms ? o->recheck_ms : RECHECK_DEFAULT_MS;
	c->no_shm = o->no_shm;
	c->fd = -1;
	c->backoff_ms = BACKOFF_MIN_MS;
	c->next_id = 1;
	atomic_init(&c->shm, NULL);
	reg_add(c);
	*out = c;
	return 0;

err_cache:
	fly__cache_fini(&c->cache);
err_free:
	free(c);
	return rc;
}

void fly_client_close(fly_client *c)
{
	if (c == NULL)
		return;
	reg_del(c);
	if (c->fd >= 0)
		close(c->fd);
	shm_unmap_all(c);
	fly__cache_fini(&c->cache);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

void fly_client_stats_get(const fly_client *c, struct fly_client_stats *out)
{
	fly_client *w = (fly_client *)c;

	memset(out, 0, sizeof(*out));
	if (c == NULL)
		return;
	out->cache_hits = hits_total(w);
	out->shm_hits = atomic_load(&w->n_shm_hits);
	out->socket_requests = atomic_load(&w->n_socket_requests);
	out->socket_errors = atomic_load(&w->n_socket_errors);
	out->reconnects = atomic_load(&w->n_reconnects);
	out->shm_refused = atomic_load(&w->n_shm_refused);
}

void fly_free(void *p)
{
	free(p);
}

/* ------------------------------------------------------------ keys */

int fly_problem_key(const struct fly_problem *p, char *buf, size_t cap)
{
	struct fly_bucket_policy pol;
	struct fly_problem q;
	int rc;

	if (p == NULL || buf == NULL || cap == 0)
		return FLY_E_INVALID;
	rc = fly_problem_validate(p);
	if (rc < 0)
		return rc;
	q = *p;
	fly_bucket_policy_default(q.op, &pol);
	fly_problem_bucket(&q, &pol);
	return fly_key_format(&q, buf, cap);
}

int fly_problem_from_key(const char *key, struct fly_problem *out)
{
	if (key == NULL || out == NULL)
		return FLY_E_INVALID;
	return fly_key_parse(key, strlen(key), out);
}

/* ------------------------------------------------------------ connection */

/* Take c->mu, waiting no later than @p deadline_ns (monotonic).
 * pthread_mutex_timedlock takes a CLOCK_REALTIME deadline, so the wait
 * goes in slices of at most 10 ms, each re-checked against the monotonic
 * deadline: a wall-clock jump cannot stretch it past one slice.  (Not
 * pthread_mutex_clocklock: TSan in gcc 12 does not intercept it and then
 * reports every unlock as bogus.)
 * @return 0 or FLY_E_TIMEOUT. */
static int lock_until(fly_client *c, uint64_t deadline_ns)
{
	for (;;) {
		struct timespec ts;
		uint64_t now = fly__now_ns(), left, rt;

		if (pthread_mutex_trylock(&c->mu) == 0)
			return 0;
		if (now >= deadline_ns)
			return FLY_E_TIMEOUT;
		left = deadline_ns - now;
		if (left > 10000000ull)
			left = 10000000ull;
		clock_gettime(CLOCK_REALTIME, &ts);
		rt = (uint64_t)ts.tv_sec * 1000000000ull +
		     (uint64_t)ts.tv_nsec + left;
		ts.tv_sec = (time_t)(rt / 1000000000ull);
		ts.tv_nsec = (long)(rt % 1000000000ull);
		if (pthread_mutex_timedlock(&c->mu, &ts) == 0)
			return 0;
	}
}

/* Install a new current table; the old one is retired, not unmapped:
 * another thread may be reading it right now.  Caller holds c->mu. */
static void shm_replace_locked(fly_client *c, struct fly_shm_reader *r)
{
	struct fly_shm_reader *old = atomic_exchange(&c->shm, r);
	struct retired_shm *rs;

	atomic_fetch_add(&c->epoch, 1);
	if (old == NULL)
		return;
	rs = malloc(sizeof(*rs));
	if (rs == NULL) {
		/* cannot retire safely: leak the mapping rather than risk a
		 * reader touching unmapped memory */
		return;
	}
	rs->r = old;
	rs->next = c->retired_shm;
	c->retired_shm = rs;
}

/* Drop the connection (timeout, EOF, garbage); reconnect after backoff.
 * Caller holds c->mu. */
static void drop_locked(fly_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->next_connect_ns = fly__now_ns() + c->backoff_ms * 1000000ull;
	c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ?
				BACKOFF_MAX_MS : c->backoff_ms * 2;
}

/* Send @p req and receive the reply; drop the connection on any failure
 * (a late reply would be read as the answer to the next request).
 * Caller holds c->mu and c->fd >= 0. */
static int roundtrip_locked(fly_client *c, const char *req, size_t len,
			    uint64_t deadline_ns, char **resp,
			    size_t *resp_len, int *fd_out)
{
	int rc;

	bump(&c->n_socket_requests);
	rc = fly__conn_send(c->fd, req, len, deadline_ns);
	if (rc == 0)
		rc = fly__conn_recv(c->fd, FLY_CONN_RESP_CAP, deadline_ns,
				    resp, resp_len, fd_out);
	if (rc < 0) {
		bump(&c->n_socket_errors);
		set_err(c, "socket %s: %s", c->path, fly_strerror(rc));
		drop_locked(c);
	}
	return rc;
}

/* Parse a reply strictly; check its id when it echoes one.
 * @return 0 (caller owns *out), FLY_E_PROTO. */
static int parse_reply(const char *buf, size_t len, int64_t id, cJSON **out)
{
	int64_t got;
	int rc;

	rc = fly_msg_parse((const uint8_t *)buf, len, out);
	if (rc < 0)
		return FLY_E_PROTO;
	rc = fly_msg_opt_int(*out, "id", &got);
	if (rc < 0 || (rc == 0 && got != id)) {
		cJSON_Delete(*out);
		*out = NULL;
		return FLY_E_PROTO;
	}
	return 0;
}

/* Map the table passed with hello.  Caller holds c->mu; takes @p fd. */
static void hello_map_locked(fly_client *c, int fd)
{
	struct fly_shm_reader *r;
	int rc;

	if (fd < 0)
		return;
	if (c->no_shm) {
		close(fd);
		return;
	}
	rc = fly__shm_reader_open(fd, &r);
	if (rc < 0) {
		bump(&c->n_shm_refused);
		set_err(c, "shm table refused: %s (socket only)",
			fly_strerror(rc));
		shm_replace_locked(c, NULL);
		return;
	}
	shm_replace_locked(c, r);
}

/* Exchange hello on a fresh c->fd.  Caller holds c->mu. */
static int hello_locked(fly_client *c, uint64_t deadline_ns)
{
	char req[128], *resp = NULL;
	int64_t id = c->next_id++, ver;
	size_t rlen;
	cJSON *o = NULL;
	int rc, fd = -1;

	snprintf(req, sizeof(req),
		 "{\"req\":\"hello\",\"id\":%lld,\"version\":%d,"
		 "\"client\":\"libflyclient\"}",
		 (long long)id, FLY_PROTO_VERSION);
	rc = roundtrip_locked(c, req, strlen(req), deadline_ns, &resp, &rlen,
			      &fd);
	if (rc < 0)
		return rc;
	rc = parse_reply(resp, rlen, id, &o);
	if (rc == 0) {
		const char *msg = "";

		rc = fly_msg_get_error(o, &msg);
		if (rc < 0)
			set_err(c, "hello refused: %s", msg);
		else if (fly_msg_get_int(o, "version", &ver) < 0 ||
			 ver != FLY_PROTO_VERSION)
			rc = FLY_E_VERSION;
	}
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		drop_locked(c);
	} else {
		hello_map_locked(c, fd);
	}
	cJSON_Delete(o);
	free(resp);
	return rc;
}

/* After fork without the atfork handler having run (a raw clone()): the
 * inherited socket belongs to the parent's session.  Close our copy
 * without sending anything and forget the table (kept mapped: other
 * threads of this process may be reading it).  Caller holds c->mu. */
static void forked_locked(fly_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->next_connect_ns = 0;
	c->backoff_ms = BACKOFF_MIN_MS;
	shm_replace_locked(c, NULL);
}

/* Make sure c->fd is a live, hello'd session.  @p force ignores the
 * backoff (admin requests, decide_wait).  Caller holds c->mu. */
static int connect_locked(fly_client *c, uint64_t deadline_ns, int force)
{
	pid_t me = getpid();
	uint64_t now;
	int rc;

	if (c->fd >= 0 && c->pid != me)
		forked_locked(c);
	if (c->fd >= 0)
		return 0;
	now = fly__now_ns();
	if (!force && now < c->next_connect_ns)
		return FLY_E_DOWN;
	rc = fly__conn_connect(c->path, &c->fd);
	if (rc < 0) {
		set_err(c, "connect %s: %s", c->path, fly_strerror(rc));
		drop_locked(c);
		return rc == -EACCES ? FLY_E_PERM : FLY_E_DOWN;
	}
	c->pid = me;
	rc = hello_locked(c, deadline_ns);
	if (rc < 0) /* a full server is up: say so (issue 18) */
		return rc == FLY_E_TIMEOUT || rc == FLY_E_MAXCLIENTS ?
		       rc : FLY_E_DOWN;
	c->backoff_ms = BACKOFF_MIN_MS;
	if (c->ever_connected)
		bump(&c->n_reconnects);
	c->ever_connected = 1;
	return 0;
}

/* ------------------------------------------------------------ decide */

static void decision_default(struct fly_decision *d)
{
	memset(d, 0, sizeof(*d));
	d->status = FLY_STATUS_DEFAULT;
}

/* Ask the socket for a decision.  Caller holds c->mu, connected.
 * @return 0 (d filled), or an error (connection dropped unless the daemon
 * answered with an error object). */
static int socket_decide_locked(fly_client *c, const char *key,
				uint64_t deadline_ns, struct fly_decision *d)
{
	char req[FLY_KEY_MAX + 64], *resp = NULL;
	int64_t id = c->next_id++;
	const char *msg = "";
	size_t rlen;
	cJSON *o = NULL;
	int rc;

	snprintf(req, sizeof(req), "{\"req\":\"decide\",\"id\":%lld,"
		 "\"key\":\"%s\"}", (long long)id, key);
	rc = roundtrip_locked(c, req, strlen(req), deadline_ns, &resp, &rlen,
			      NULL);
	if (rc < 0)
		return rc;
	rc = parse_reply(resp, rlen, id, &o);
	if (rc == 0) {
		rc = fly_msg_get_error(o, &msg);
		if (rc < 0)
			set_err(c, "decide %s: %s", key, msg);
	}
	if (rc == 0)
		rc = fly_msg_decision_from_json(
			cJSON_GetObjectItemCaseSensitive(o, "decision"), d);
	if (rc == FLY_E_PROTO) {
		set_err(c, "decide %s: malformed reply", key);
		bump(&c->n_socket_errors);
		drop_locked(c);
	}
	cJSON_Delete(o);
	free(resp);
	return rc;
}

/* Cache stamp of the current table: its generation, mixed with the epoch
 * so a new table (daemon restart) never matches an old stamp. */
static uint64_t stamp_of(fly_client *c, struct fly_shm_reader *r,
			 uint64_t *gen)
{
	*gen = r != NULL ? fly__shm_reader_generation(r) : 0;
	return *gen + (atomic_load_explicit(&c->epoch, memory_order_relaxed)
		       << 48);
}

/* Copy a cached entry out, generation set. */
static void from_entry(const struct fly_cache_entry *e, uint64_t gen,
		       struct fly_decision *d)
{
	*d = e->dec;
	d->generation = gen;
}

/* The process cache is keyed by the problem's raw bytes, so a hit needs
 * neither validation nor key formatting (a problem only gets an entry
 * after it validated).  A canonical key has no NUL byte, a problem has
 * several, so the two can never be confused.  Hash: 64-bit multiply-mix
 * over the ten words. */
static uint64_t problem_hash(const struct fly_problem *p)
{
	uint64_t w[sizeof(*p) / 8], h = 0x9e3779b97f4a7c15ull;

	memcpy(w, p, sizeof(w));
	for (size_t i = 0; i < sizeof(w) / 8; i++) {
		h ^= w[i];
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 33;
	}
	return h;
}

static void cache_put(fly_client *c, const struct fly_problem *p,
		      uint64_t hash, const struct fly_decision *d,
		      uint64_t stamp)
{
	fly__cache_put(&c->cache, (const char *)p, sizeof(*p), hash, d, stamp,
		       fly__now_ns());
}

/* Try the shm table.  @return 1 on a hit (d filled, cached), else 0. */
static int try_shm(fly_client *c, struct fly_shm_reader *r,
		   const struct fly_problem *p, const char *key, size_t len,
		   uint64_t hash, uint64_t stamp, struct fly_decision *d)
{
	if (r == NULL || fly_shm_lookup(r, key, len, d) != 0)
		return 0;
	bump(&c->n_shm_hits);
	cache_put(c, p, hash, d, stamp);
	return 1;
}

/* The socket step of fly_decide: bounded by @p deadline_ns. */
static void decide_socket(fly_client *c, const struct fly_problem *p,
			  const char *key, size_t len,
			  uint64_t hash, uint64_t deadline_ns,
			  struct fly_decision *d)
{
	struct fly_shm_reader *r;
	uint64_t gen, stamp;
	int rc;

	if (lock_until(c, deadline_ns) < 0)
		return;
	rc = connect_locked(c, deadline_ns, 0);
	/* a fresh connection may have brought a table that answers */
	r = atomic_load_explicit(&c->shm, memory_order_acquire);
	stamp = stamp_of(c, r, &gen);
	if (rc == 0 && try_shm(c, r, p, key, len, hash, stamp, d) &&
	    d->status == FLY_STATUS_TUNED) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	if (rc == 0)
		rc = socket_decide_locked(c, key, deadline_ns, d);
	pthread_mutex_unlock(&c->mu);
	if (rc < 0) {
		decision_default(d);
		return;
	}
	r = atomic_load_explicit(&c->shm, memory_order_acquire);
	stamp = stamp_of(c, r, &gen);
	d->generation = gen;
	cache_put(c, p, hash, d, stamp);
}

/* Whether a cached pending/default answer is still fresh enough to serve
 * (only one thread re-asks the socket: the one whose CAS wins). */
static int pending_fresh(fly_client *c, const struct fly_cache_entry *e,
			 uint64_t now)
{
	uint64_t checked = atomic_load_explicit(&e->checked_ns,
						memory_order_relaxed);

	if (now - checked < c->recheck_ms * 1000000ull)
		return 1;
	return !atomic_compare_exchange_strong(
		&((struct fly_cache_entry *)e)->checked_ns, &checked, now);
}

int fly_decide(fly_client *c, const struct fly_problem *p,
	       struct fly_decision *d)
{
	char key[FLY_KEY_MAX];
	const struct fly_cache_entry *e;
	struct fly_shm_reader *r;
	uint64_t start, hash, gen, stamp;
	int n;

	if (d == NULL)
		return FLY_E_INVALID;
	if (c == NULL || p == NULL) {
		decision_default(d);
		return FLY_E_INVALID;
	}
	/* hot path: no validation, no formatting, no lock, no syscall */
	hash = problem_hash(p);
	r = atomic_load_explicit(&c->shm, memory_order_acquire);
	stamp = stamp_of(c, r, &gen);
	e = fly__cache_lookup(&c->cache, (const char *)p, sizeof(*p), hash);
	if (e != NULL && e->dec.status == FLY_STATUS_TUNED &&
	    atomic_load_explicit(&e->generation, memory_order_relaxed) ==
		    stamp) {
		bump_hit(c);
		from_entry(e, gen, d);
		return 0;
	}
	start = fly__now_ns();
	decision_default(d);
	n = fly_problem_key(p, key, sizeof(key));
	if (n < 0)
		return n;
	if (try_shm(c, r, p, key, (size_t)n, hash, stamp, d) &&
	    d->status == FLY_STATUS_TUNED)
		return 0;
	if (e != NULL && e->dec.status != FLY_STATUS_TUNED &&
	    pending_fresh(c, e, start)) {
		bump_hit(c);
		from_entry(e, gen, d);
		return 0;
	}
	decide_socket(c, p, key, (size_t)n, hash,
		      start + c->timeout_ms * 1000000ull, d);
	return 0;
}

/* Send tune{wait} and read its reply.  Caller holds c->mu, connected.
 * @return 0 (tuned or at least answered), FLY_E_TIMEOUT, FLY_E_BUSY, ...
 * *have_dec says whether the reply carried a decision (then in d). */
static int tune_wait_locked(fly_client *c, const char *key,
			    uint32_t timeout_ms, uint64_t deadline_ns,
			    struct fly_decision *d, int *have_dec)
{
	char req[FLY_KEY_MAX + 128], *resp = NULL;
	int64_t id = c->next_id++;
	const char *msg = "";
	size_t rlen;
	cJSON *o = NULL, *dj;
	int rc;

	*have_dec = 0;
	snprintf(req, sizeof(req), "{\"req\":\"tune\",\"id\":%lld,"
		 "\"key\":\"%s\",\"wait\":true,\"timeout_ms\":%u}",
		 (long long)id, key, timeout_ms);
	rc = roundtrip_locked(c, req, strlen(req), deadline_ns, &resp, &rlen,
			      NULL);
	if (rc < 0)
		return rc;
	rc = parse_reply(resp, rlen, id, &o);
	if (rc < 0) {
		bump(&c->n_socket_errors);
		drop_locked(c);
	} else {
		rc = fly_msg_get_error(o, &msg);
		if (rc < 0)
			set_err(c, "tune %s: %s", key, msg);
	}
	dj = o != NULL ? cJSON_GetObjectItemCaseSensitive(o, "decision")
		       : NULL;
	if (rc == 0 && dj != NULL && fly_msg_decision_from_json(dj, d) == 0)
		*have_dec = 1;
	cJSON_Delete(o);
	free(resp);
	return rc;
}

int fly_decide_wait(fly_client *c, const struct fly_problem *p,
		    uint32_t timeout_ms, struct fly_decision *d)
{
	char key[FLY_KEY_MAX];
	uint64_t deadline, gen, stamp;
	struct fly_shm_reader *r;
	int n, rc, have = 0;

	if (d == NULL)
		return FLY_E_INVALID;
	decision_default(d);
	if (c == NULL || p == NULL)
		return FLY_E_INVALID;
	n = fly_problem_key(p, key, sizeof(key));
	if (n < 0)
		return n;
	deadline = fly__now_ns() + (timeout_ms + WAIT_SLACK_MS) * 1000000ull;
	if (lock_until(c, deadline) < 0)
		return FLY_E_TIMEOUT;
	rc = connect_locked(c, deadline, 1);
	if (rc == 0)
		rc = tune_wait_locked(c, key, timeout_ms, deadline, d, &have);
	if ((rc == 0 || rc == FLY_E_TIMEOUT) && !have && c->fd >= 0 &&
	    socket_decide_locked(c, key, deadline, d) < 0)
		decision_default(d);
	pthread_mutex_unlock(&c->mu);
	if (rc == FLY_E_TIMEOUT || rc == 0) {
		r = atomic_load_explicit(&c->shm, memory_order_acquire);
		stamp = stamp_of(c, r, &gen);
		d->generation = gen;
		cache_put(c, p, problem_hash(p), d, stamp);
	}
	if (rc == 0 && d->status != FLY_STATUS_TUNED)
		rc = FLY_E_TIMEOUT;
	return rc;
}

/* ------------------------------------------------------------ raw */

int fly_request(fly_client *c, const char *req, size_t len,
		uint32_t timeout_ms, char **resp, size_t *resp_len)
{
	uint64_t deadline;
	size_t rl = 0;
	int rc;

	if (resp != NULL)
		*resp = NULL;
	if (resp_len != NULL)
		*resp_len = 0;
	if (c == NULL || req == NULL || len == 0 || resp == NULL)
		return FLY_E_INVALID;
	if (timeout_ms == 0)
		timeout_ms = REQUEST_DEFAULT_MS;
	deadline = fly__now_ns() + timeout_ms * 1000000ull;
	if (lock_until(c, deadline) < 0)
		return FLY_E_TIMEOUT;
	rc = connect_locked(c, deadline, 1);
	if (rc == 0)
		rc = roundtrip_locked(c, req, len, deadline, resp, &rl, NULL);
	pthread_mutex_unlock(&c->mu);
	if (rc == -ENOMEM || rc == FLY_E_TOOBIG || rc == FLY_E_TIMEOUT ||
	    rc == FLY_E_PROTO || rc == FLY_E_PERM || rc == FLY_E_MAXCLIENTS)
		return rc;
	if (rc < 0)
		return FLY_E_DOWN;
	if (resp_len != NULL)
		*resp_len = rl;
	return 0;
}
