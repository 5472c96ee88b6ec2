/*
 * client.c -- libflyclient: fly_client handles, the decide hot path
 * (process cache -> shm table -> socket), reconnect with backoff, fork
 * detection, and the raw request entry point used by flytune-ctl.
 *
 * Owns: the socket fd and its receive state, the shm readers (current
 * and retired), the process cache, the counters, the session watcher.
 * Thread: any.  The cache and the shm table are read lock-free; the
 * socket and the connection state (fd, pid, backoff, owed reply) are
 * guarded by c->mu, taken with a deadline so no caller queues past its
 * timeout; table swaps and the retired tables by c->shm_mu, held only
 * briefly (the atfork prepare handler takes it).
 * Invariants: c->fd >= 0 only after a successful hello.  A thread uses a
 * table only inside a read section (rd_enter/rd_exit) or while holding
 * c->mu; a replaced table is retired and unmapped once every section
 * that could have loaded it has ended (grace periods below), so a client
 * holds one table mapping, two while it swaps (issue 18, item 1).  At
 * most one request is outstanding on the socket: a reply that missed its
 * caller's deadline is owed, and the next caller reads it first (issue
 * 18, item 2: a missed deadline does not cost the connection).  An
 * answer the client has is never replaced by a worse one because a
 * deadline passed.  Fork: an atfork child handler resets every open
 * client (registry below) while the child is single-threaded (its
 * copies of the watcher's fds closed: the parent's thread is not in the
 * child, which starts its own on its first hello); getpid() in
 * connect_locked and in watch.c is the fallback.
 * Sessions (issue 21, RELIABILITY.md F19): a table, and the answers the
 * process cache holds, are trusted only while the session that brought
 * them is open.  A dead daemon cannot mark its table superseded, but its
 * end of the socket closes: a watcher thread per client (watch.c,
 * started at open) polls a duplicate of each session's socket for a
 * hangup, never for input, and then orphans the table and bumps the
 * epoch (conn_hup), so every cached stamp mismatches and the next
 * fly_decide of a key takes the miss path, which reconnects (through the
 * backoff) and maps the new daemon's table; until a daemon answers, the
 * cached answers are served as unconfirmed ones are (one thread a key
 * asks the socket every recheck_ms), and the orphaned table answers only
 * a key the process cache lacks, unconfirmed too (try_orphaned).  A
 * session the client drops itself is orphaned the same way.  Sessions
 * are numbered (c->lease) so a hangup reported late ends nothing newer;
 * a reconnect that brings the same table back (the daemon's idle
 * timeout) trusts it again without remapping.  The hot path is
 * unchanged: the watcher only moves the epoch.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fly_abi.h"
#include "fly_frame.h"
#include "fly_hash.h"
#include "fly_key.h"
#include "fly_msg.h"
#include "fly_shm.h"
#include "cache.h"
#include "conn.h"
#include "flyclient.h"
#include "watch.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define TIMEOUT_DEFAULT_MS 5
#define RECHECK_DEFAULT_MS 100
#define REQUEST_DEFAULT_MS 30000
#define WAIT_SLACK_MS 500 /* room for the daemon's own timeout reply */
#define SOCK_PATH_MAX 108
/* An owed reply this late (past the deadline it missed) means the session
 * is broken, not slow: drop it and reconnect. */
#define OWED_STALE_MS 10000
/* Issue 22: answers from the process cache of a shape off its bucket's
 * representative before its exact key is asked for
 * ($FLYTUNED_EXACT_AFTER, 0: never). */
#define EXACT_AFTER_DEFAULT 64

/* A cached problem's exact-shape state (fly_cache_entry.xstate).  The
 * process cache is the bounded per-process table of use counts: a
 * problem is counted in its own entry (keyed by the problem's bytes, so
 * each M of a bucket has one), with no allocation and no syscall, and
 * only while it is XS_COUNT. */
enum {
	XS_NONE = 0,   /* on its bucket's representative, or exact is off */
	XS_COUNT = 1,  /* off its bucket: counting answers in xuses */
	XS_ASKING = 2, /* the threshold passed: one caller asks the daemon */
	XS_ASKED = 3   /* asked: the exact key is looked up in the table
			  first whenever the entry is re-checked there */
};

struct retired_shm {
	struct fly_shm_reader *r;
	uint64_t flip;             /* c->gp_flips when it was retired */
	struct retired_shm *next;
};

#define FLY_RD_SHARDS 16 /* power of two */

/* Per-CPU counters: the read sections in progress in each of the two
 * grace-period phases, cache hits and table hits.  One shared counter
 * bumped by every hit bounced its cache line between cores and made two
 * threads 3x slower per call than one (bench_client, 2 threads).  A
 * section's count and the hit it ends with share one word
 * (RD_ACTIVE_MASK: sections; then table hits; on top cache hits), so a
 * hit of either kind costs two atomic additions, not three (bench_client,
 * hot key: 27 ns -> 21 ns; 17 ns before read sections existed; issue 19:
 * a table hit's own locked add on one shared counter was ~7 ns of the shm
 * path).  Every RD_FOLD cache hits of a word move to @c folded, every
 * RD_SHM_FOLD table hits to @c shm_folded; a field holds up to 4x its
 * fold, so the hits that land while one fold is under way fit. */
struct rd_shard {
	_Atomic uint64_t w[2];     /* per phase: hits << 40 | table hits
				      << 20 | sections */
	_Atomic uint64_t folded;   /* cache hits moved out of w[] */
	_Atomic uint64_t shm_folded; /* table hits moved out of w[], and
					those counted outside a section */
	char pad[64 - 4 * sizeof(uint64_t)];
} __attribute__((aligned(64)));

#define RD_SHM_SHIFT 20
#define RD_ACTIVE_MASK ((1ull << RD_SHM_SHIFT) - 1)
#define RD_SHM_ONE (1ull << RD_SHM_SHIFT)
#define RD_SHM_MASK ((1ull << 20) - 1) /* after the shift */
#define RD_SHM_FOLD (1ull << 18)
#define RD_HIT_SHIFT 40
#define RD_HIT_ONE (1ull << RD_HIT_SHIFT)
#define RD_FOLD (1ull << 22)

/* What a read section ended with (rd_exit). */
enum rd_end { RD_END_MISS, RD_END_HIT, RD_END_SHM };

/* A read section: where its count was taken. */
struct rd_token {
	unsigned shard;
	unsigned phase;
};

struct fly_client {
	char path[SOCK_PATH_MAX];  /* socket path */
	uint32_t timeout_ms;       /* fly_decide budget */
	uint32_t recheck_ms;       /* pending keys: socket re-ask period */
	uint32_t no_shm;           /* never map the table */
	uint32_t no_prefault;      /* FLYTUNED_SHM_PREFAULT=0 at open */
	uint32_t exact_after;      /* $FLYTUNED_EXACT_AFTER: 0 off */
	struct fly_cache cache;    /* process cache */
	_Atomic(struct fly_shm_reader *) shm; /* current table or NULL */
	_Atomic uint64_t epoch;    /* bumps whenever shm is replaced */
	_Atomic unsigned rd_phase; /* phase new read sections count in */
	_Atomic int reclaim_wanted; /* retired tables wait for a grace period */
	_Atomic uint64_t quiet_until_ns; /* fly_decide skips the socket until
					    then (a reply is late) */
	pthread_mutex_t mu;        /* guards everything below */
	int fd;                    /* connected socket or -1 */
	pid_t pid;                 /* process that opened fd */
	int ever_connected;        /* for the reconnects counter */
	struct fly_client *reg_next; /* registry of open clients (reg_mu) */
	struct fly_client *reg_prev;
	uint64_t next_connect_ns;  /* backoff: no attempt before this */
	uint32_t backoff_ms;       /* current backoff step */
	uint32_t quiet_ms;         /* current quiet step after a late reply */
	int64_t next_id;           /* request ids */
	struct fly_conn_rx rx;     /* the reply being received */
	int owed;                  /* a reply missed its deadline, unread */
	int64_t owed_id;           /* its request id */
	uint64_t owed_since_ns;    /* the deadline it missed */
	dev_t shm_dev;             /* identity of the current table's memfd */
	ino_t shm_ino;
	/* Watches the session for a hangup (issue 21); its thread calls
	 * conn_hup, which takes shm_mu only. */
	struct fly_watch watch;
	/* The sessions whose hangups the watcher reports, numbered: hup_lease
	 * is the last one reported (conn_hup), c->lease is the current one,
	 * written under both c->mu and c->shm_mu, so either lock reads it. */
	_Atomic uint64_t hup_lease;
	/* Table swaps and reclaims: held for a few instructions and munmap
	 * only (never across I/O), so the atfork prepare handler can take it
	 * and the child never sees a table half swapped or half unmapped. */
	pthread_mutex_t shm_mu;    /* guards the four below and c->shm writes */
	struct retired_shm *retired_shm; /* replaced readers, still mapped */
	uint64_t gp_flips;         /* grace periods started */
	unsigned gp_old;           /* phase being drained */
	int gp_busy;               /* a grace period is in progress */
	uint64_t lease;            /* sessions hello'd (also under c->mu) */
	int lease_live;            /* the current table and the cached
				      answers are trusted: the session that
				      brought them is open (issue 21) */
	struct rd_shard rd[FLY_RD_SHARDS];
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

/* Cache hits (@p shm 0) or table hits (1) counted so far. */
static uint64_t hits_total(const fly_client *c, int shm)
{
	struct rd_shard *sh = ((fly_client *)c)->rd;
	uint64_t n = 0;

	for (int i = 0; i < FLY_RD_SHARDS; i++) {
		n += atomic_load_explicit(shm ? &sh[i].shm_folded
					      : &sh[i].folded,
					  memory_order_relaxed);
		for (int ph = 0; ph < 2; ph++) {
			uint64_t w = atomic_load_explicit(
				&sh[i].w[ph], memory_order_relaxed);

			n += shm ? w >> RD_SHM_SHIFT & RD_SHM_MASK
				 : w >> RD_HIT_SHIFT;
		}
	}
	return n;
}

/* Count a cache hit outside a read section. */
static void bump_hit(fly_client *c, unsigned shard)
{
	atomic_fetch_add_explicit(&c->rd[shard].folded, 1,
				  memory_order_relaxed);
}

/* The per-CPU shard of the calling thread (sched_getcpu reads the rseq
 * area on current glibc: no syscall). */
static unsigned cpu_shard(void)
{
	int cpu = sched_getcpu();

	return cpu < 0 ? 0 : (unsigned)cpu & (FLY_RD_SHARDS - 1);
}

/* Count a table hit outside a read section (decide_socket, under c->mu). */
static void bump_shm_hit(fly_client *c)
{
	atomic_fetch_add_explicit(&c->rd[cpu_shard()].shm_folded, 1,
				  memory_order_relaxed);
}

/* ------------------------------------------------------------ tables */

/* Table lifetime, without a lock on the hot path (a sharded variant of
 * SRCU).  A reader enters a section by counting itself in its CPU's shard
 * for the current phase, then loads c->shm; it uses that table only
 * until it leaves (rd_exit).  Under c->mu a writer replaces c->shm, puts
 * the old table on c->retired_shm, flips the phase and waits -- without
 * blocking: it checks now and again later -- for the old phase's counts to
 * drain.  Correctness: a reader whose count the writer did not see
 * counted itself after the writer read that shard (seq_cst), so after
 * the flip, hence after the swap, and its load of c->shm returns a table
 * newer than every retired one.  Sections are short (a cache probe and
 * a bounded shm lookup), so a grace period ends within microseconds; the
 * reader that ends it finishes the reclaim (rd_exit). */

static void reclaim_shm_locked(fly_client *c);

/* Enter a read section in this CPU's shard.  The same shard is left,
 * wherever the thread runs by then. */
static struct rd_token rd_enter(fly_client *c)
{
	struct rd_token t;

	t.shard = cpu_shard();
	t.phase = atomic_load(&c->rd_phase) & 1;
	atomic_fetch_add(&c->rd[t.shard].w[t.phase], 1);
	return t;
}

/* Leave a read section, counting what it ended with (@p end: a cache
 * hit, a table hit, or neither); help a pending reclaim along when its
 * lock is free.  Never called with c->shm_mu held. */
static void rd_exit(fly_client *c, struct rd_token t, enum rd_end end)
{
	struct rd_shard *sh = &c->rd[t.shard];
	uint64_t old;

	old = atomic_fetch_add_explicit(&sh->w[t.phase],
					end == RD_END_HIT   ? RD_HIT_ONE - 1
					: end == RD_END_SHM ? RD_SHM_ONE - 1
							    : (uint64_t)-1,
					memory_order_release);
	/* exactly one hit sees its count reach the fold: it moves them out */
	if (end == RD_END_HIT && (old >> RD_HIT_SHIFT) == RD_FOLD - 1) {
		atomic_fetch_add_explicit(&sh->folded, RD_FOLD,
					  memory_order_relaxed);
		atomic_fetch_sub_explicit(&sh->w[t.phase],
					  RD_FOLD << RD_HIT_SHIFT,
					  memory_order_relaxed);
	}
	if (end == RD_END_SHM &&
	    (old >> RD_SHM_SHIFT & RD_SHM_MASK) == RD_SHM_FOLD - 1) {
		atomic_fetch_add_explicit(&sh->shm_folded, RD_SHM_FOLD,
					  memory_order_relaxed);
		atomic_fetch_sub_explicit(&sh->w[t.phase],
					  RD_SHM_FOLD << RD_SHM_SHIFT,
					  memory_order_relaxed);
	}
	if (atomic_load_explicit(&c->reclaim_wanted, memory_order_relaxed) &&
	    pthread_mutex_trylock(&c->shm_mu) == 0) {
		reclaim_shm_locked(c);
		pthread_mutex_unlock(&c->shm_mu);
	}
}

/* Read sections in progress that counted in @p phase. */
static uint64_t rd_active(fly_client *c, unsigned phase)
{
	uint64_t n = 0;

	for (int i = 0; i < FLY_RD_SHARDS; i++)
		n += atomic_load(&c->rd[i].w[phase]) & RD_ACTIVE_MASK;
	return n;
}

/* Unmap the retired tables retired before grace period @p flip began. */
static void free_retired_before(fly_client *c, uint64_t flip)
{
	struct retired_shm **pp = &c->retired_shm, *rs;

	while ((rs = *pp) != NULL) {
		if (rs->flip < flip) {
			*pp = rs->next;
			fly__shm_reader_close(rs->r);
			free(rs);
		} else {
			pp = &rs->next;
		}
	}
}

/* Drive grace periods: finish the one in progress when its phase has
 * drained, start one for tables retired since, finish it at once when
 * no reader is in a section.  Never waits.  Caller holds c->shm_mu. */
static void reclaim_shm_locked(fly_client *c)
{
	if (c->gp_busy) {
		if (rd_active(c, c->gp_old) != 0)
			return;
		c->gp_busy = 0;
		free_retired_before(c, c->gp_flips);
	}
	if (c->retired_shm == NULL) {
		atomic_store(&c->reclaim_wanted, 0);
		return;
	}
	c->gp_old = atomic_load(&c->rd_phase) & 1;
	atomic_store(&c->rd_phase, c->gp_old ^ 1);
	c->gp_flips++;
	c->gp_busy = 1;
	atomic_store(&c->reclaim_wanted, 1);
	if (rd_active(c, c->gp_old) != 0)
		return;
	c->gp_busy = 0;
	free_retired_before(c, c->gp_flips);
	if (c->retired_shm == NULL)
		atomic_store(&c->reclaim_wanted, 0);
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
	for (fly_client *c = reg_head; c != NULL; c = c->reg_next) {
		fly__watch_lock(&c->watch);
		pthread_mutex_lock(&c->shm_mu);
	}
}

static void fork_parent(void)
{
	for (fly_client *c = reg_head; c != NULL; c = c->reg_next) {
		pthread_mutex_unlock(&c->shm_mu);
		fly__watch_unlock(&c->watch);
	}
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
	c->gp_busy = 0;
	c->shm_dev = 0;
	c->shm_ino = 0;
	atomic_store(&c->reclaim_wanted, 0);
	atomic_fetch_add(&c->epoch, 1);
}

/* Close the socket (sending nothing on it) and drop any partial or owed
 * reply.  Caller holds c->mu, or is the fork child, or is closing. */
static void conn_close(fly_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	fly__conn_rx_reset(&c->rx);
	c->owed = 0;
	c->quiet_ms = BACKOFF_MIN_MS;
	atomic_store(&c->quiet_until_ns, 0);
}

/* ------------------------------------------------------------ sessions */

/* Issue 21: what a client learned from a daemon -- its table, and the
 * answers the process cache holds -- is trusted only while the session
 * that brought it is open.  A dead daemon cannot mark its table
 * superseded, but its end of the socket closes; the watcher (watch.c)
 * sees that at once, whatever the call rate.  Sessions are numbered
 * (c->lease, one per successful hello) so that a hangup reported late,
 * of a session already replaced, ends nothing. */

/* The current session is over, or may be: orphan its table (it answers
 * nothing until a hello brings the same table back) and bump the epoch,
 * so no cached stamp matches and fly_decide takes the miss path, which
 * reconnects (with the backoff) and answers what it has meanwhile.
 * Once per session.  Caller holds c->shm_mu. */
static void lease_end_shm_locked(fly_client *c)
{
	struct fly_shm_reader *r;

	if (!c->lease_live)
		return;
	c->lease_live = 0;
	r = atomic_load_explicit(&c->shm, memory_order_relaxed);
	if (r != NULL)
		fly__shm_reader_orphan_set(r, 1);
	/* after the mark (release): a stamp with the new epoch sees it */
	atomic_fetch_add(&c->epoch, 1);
}

/* The watcher's callback (its thread): the session numbered @p lease
 * hung up.  connect_locked then replaces it before any use. */
static void conn_hup(void *arg, uint64_t lease)
{
	fly_client *c = arg;

	pthread_mutex_lock(&c->shm_mu);
	if (lease == c->lease) {
		atomic_store(&c->hup_lease, lease);
		lease_end_shm_locked(c);
	}
	pthread_mutex_unlock(&c->shm_mu);
}

/* A hello succeeded on c->fd: a new session, whose table (c->shm as
 * hello_map_locked left it: this daemon's, or NULL) is trusted, its
 * socket watched.  Unwatched when the watcher cannot take it (no fd, no
 * thread left): the client then works as before issue 21.  Caller holds
 * c->mu. */
static void lease_begin_locked(fly_client *c)
{
	struct fly_shm_reader *r;

	pthread_mutex_lock(&c->shm_mu);
	c->lease++;
	c->lease_live = 1;
	r = atomic_load_explicit(&c->shm, memory_order_relaxed);
	if (r != NULL)
		fly__shm_reader_orphan_set(r, 0);
	pthread_mutex_unlock(&c->shm_mu);
	(void)fly__watch_set(&c->watch, c->fd, c->lease);
}

/* Forget the session: conn_close, stop watching its socket, end its
 * trust.  Caller holds c->mu. */
static void conn_reset_locked(fly_client *c)
{
	if (c->fd >= 0)
		(void)fly__watch_set(&c->watch, -1, 0);
	conn_close(c);
	pthread_mutex_lock(&c->shm_mu);
	lease_end_shm_locked(c);
	pthread_mutex_unlock(&c->shm_mu);
}

static void fork_child(void)
{
	for (fly_client *c = reg_head; c != NULL; c = c->reg_next) {
		/* the parent's watcher thread is not in the child: close
		 * its copies of the fds, start one here on a connection */
		fly__watch_forked(&c->watch);
		conn_close(c);
		c->lease_live = 0;
		c->next_connect_ns = 0;
		c->backoff_ms = BACKOFF_MIN_MS;
		shm_unmap_all(c);
		/* the parent's threads, and their read sections, are gone
		 * (their hits stay counted) */
		for (int i = 0; i < FLY_RD_SHARDS; i++)
			for (int ph = 0; ph < 2; ph++)
				atomic_fetch_and(&c->rd[i].w[ph],
						 ~RD_ACTIVE_MASK);
		pthread_mutex_init(&c->mu, NULL);
		pthread_mutex_init(&c->shm_mu, NULL);
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

/* Whether $FLYTUNED_SHM_PREFAULT turns the table's pre-fault off ("0"). */
static uint32_t prefault_off(void)
{
	const char *env = getenv("FLYTUNED_SHM_PREFAULT");

	return env != NULL && strcmp(env, "0") == 0;
}

/* $FLYTUNED_EXACT_AFTER: the answers of an off-bucket shape after which
 * its exact key is asked for; unset, empty or malformed: the default;
 * "0": never. */
static uint32_t exact_after_env(void)
{
	const char *env = getenv("FLYTUNED_EXACT_AFTER");
	unsigned long v;
	char *end;

	if (env == NULL || env[0] == '\0')
		return EXACT_AFTER_DEFAULT;
	errno = 0;
	v = strtoul(env, &end, 10);
	if (errno != 0 || *end != '\0' || env[0] == '-' || v > UINT32_MAX)
		return EXACT_AFTER_DEFAULT;
	return (uint32_t)v;
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
	rc = -pthread_mutex_init(&c->shm_mu, NULL);
	if (rc < 0)
		goto err_mu;
	rc = fly__watch_init(&c->watch, conn_hup, c);
	if (rc < 0)
		goto err_shm_mu;
	/* here, not on the first decide's connect (+~200 us there on the
	 * 2-core box, bench_client fresh client); a failure is retried at
	 * each hello */
	(void)fly__watch_start(&c->watch);
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : TIMEOUT_DEFAULT_MS;
	c->recheck_ms = o->recheck_ms ? o->recheck_ms : RECHECK_DEFAULT_MS;
	c->no_shm = o->no_shm;
	c->no_prefault = prefault_off();
	c->exact_after = exact_after_env();
	c->fd = -1;
	c->backoff_ms = BACKOFF_MIN_MS;
	c->quiet_ms = BACKOFF_MIN_MS;
	c->next_id = 1;
	fly__conn_rx_init(&c->rx);
	atomic_init(&c->shm, NULL);
	reg_add(c);
	*out = c;
	return 0;

err_shm_mu:
	pthread_mutex_destroy(&c->shm_mu);
err_mu:
	pthread_mutex_destroy(&c->mu);
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
	fly__watch_fini(&c->watch); /* joins the thread: no callback after */
	conn_close(c);
	shm_unmap_all(c);
	fly__cache_fini(&c->cache);
	pthread_mutex_destroy(&c->shm_mu);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

void fly_client_stats_get(const fly_client *c, struct fly_client_stats *out)
{
	fly_client *w = (fly_client *)c;

	memset(out, 0, sizeof(*out));
	if (c == NULL)
		return;
	out->cache_hits = hits_total(w, 0);
	out->shm_hits = hits_total(w, 1);
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
 * another thread may be reading it right now.  It is unmapped after a
 * grace period (reclaim_shm_locked), at once when no reader is in a
 * section.  Caller holds c->mu. */
static void shm_replace_locked(fly_client *c, struct fly_shm_reader *r)
{
	struct retired_shm *rs = malloc(sizeof(*rs));
	struct fly_shm_reader *old;

	pthread_mutex_lock(&c->shm_mu);
	old = atomic_exchange(&c->shm, r);
	atomic_fetch_add(&c->epoch, 1);
	if (old != NULL && rs != NULL) {
		rs->r = old;
		rs->flip = c->gp_flips;
		rs->next = c->retired_shm;
		c->retired_shm = rs;
		rs = NULL;
	}
	/* (old and no memory to retire it: leak the mapping rather than
	 * risk a reader touching unmapped memory) */
	reclaim_shm_locked(c);
	pthread_mutex_unlock(&c->shm_mu);
	free(rs);
}

/* Drop the connection (EOF, garbage, a broken stream); reconnect after
 * backoff.  Caller holds c->mu. */
static void drop_locked(fly_client *c)
{
	conn_reset_locked(c);
	c->next_connect_ns = fly__now_ns() + c->backoff_ms * 1000000ull;
	c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ?
				BACKOFF_MAX_MS : c->backoff_ms * 2;
}

/* A reply missed its caller's deadline; the connection stays.  fly_decide
 * leaves the socket alone for a while (100 ms, doubling to 2 s while
 * replies stay late) and answers from what it has.  Caller holds c->mu. */
static void missed_locked(fly_client *c)
{
	bump(&c->n_socket_errors);
	set_err(c, "socket %s: %s", c->path, fly_strerror(FLY_E_TIMEOUT));
	atomic_store(&c->quiet_until_ns,
		     fly__now_ns() + c->quiet_ms * 1000000ull);
	c->quiet_ms = c->quiet_ms * 2 > BACKOFF_MAX_MS ?
			      BACKOFF_MAX_MS : c->quiet_ms * 2;
}

/* A round trip failed for good: count it, drop the connection. */
static void failed_locked(fly_client *c, int rc)
{
	bump(&c->n_socket_errors);
	set_err(c, "socket %s: %s", c->path, fly_strerror(rc));
	drop_locked(c);
}

/* The id a reply echoes: 0 (id in *id), 1 (none), FLY_E_PROTO. */
static int reply_id(const char *buf, size_t len, int64_t *id)
{
	cJSON *o = NULL;
	int rc;

	if (fly_msg_parse((const uint8_t *)buf, len, &o) < 0)
		return FLY_E_PROTO;
	rc = fly_msg_opt_int(o, "id", id);
	cJSON_Delete(o);
	return rc < 0 ? FLY_E_PROTO : rc;
}

/* Read the owed reply, if any, before @p deadline_ns (and discard it).
 * @return 0 (nothing owed now), FLY_E_TIMEOUT (still owed; nothing was
 * sent), or an error after which the connection is dropped.  Caller
 * holds c->mu and c->fd >= 0. */
static int drain_locked(fly_client *c, uint64_t deadline_ns)
{
	char *buf = NULL;
	size_t len;
	int64_t id = 0;
	int rc;

	if (!c->owed)
		return 0;
	if (fly__now_ns() > c->owed_since_ns + OWED_STALE_MS * 1000000ull) {
		failed_locked(c, FLY_E_TIMEOUT);
		return FLY_E_DOWN;
	}
	rc = fly__conn_recv(c->fd, &c->rx, FLY_CONN_RESP_CAP, deadline_ns,
			    &buf, &len, NULL);
	if (rc == FLY_E_TIMEOUT) {
		missed_locked(c);
		return rc;
	}
	if (rc == 0 && (reply_id(buf, len, &id) != 0 || id != c->owed_id))
		rc = FLY_E_PROTO; /* a late reply always echoes its id */
	free(buf);
	if (rc < 0) {
		failed_locked(c, rc);
		return rc;
	}
	c->owed = 0;
	return 0;
}

/* Send @p req and receive the reply.  A reply that misses the deadline is
 * owed when @p id is known (>= 0): the connection stays and the next
 * caller reads it first; otherwise, and on any other failure, the
 * connection is dropped (a late reply would be read as the answer to the
 * next request).  Caller holds c->mu and c->fd >= 0. */
static int roundtrip_locked(fly_client *c, const char *req, size_t len,
			    int64_t id, uint64_t deadline_ns, char **resp,
			    size_t *resp_len, int *fd_out)
{
	size_t sent = 0;
	int rc;

	*resp = NULL;
	rc = drain_locked(c, deadline_ns);
	if (rc < 0)
		return rc;
	bump(&c->n_socket_requests);
	rc = fly__conn_send(c->fd, req, len, deadline_ns, &sent);
	if (rc == FLY_E_TIMEOUT && sent == 0) {
		missed_locked(c); /* nothing went out: the stream is intact */
		return rc;
	}
	if (rc == 0)
		rc = fly__conn_recv(c->fd, &c->rx, FLY_CONN_RESP_CAP,
				    deadline_ns, resp, resp_len, fd_out);
	if (rc == FLY_E_TIMEOUT && sent == len + FLY_FRAME_HDR && id >= 0) {
		c->owed = 1;
		c->owed_id = id;
		c->owed_since_ns = deadline_ns;
		missed_locked(c);
		return rc;
	}
	if (rc < 0) {
		failed_locked(c, rc);
		return rc;
	}
	c->quiet_ms = BACKOFF_MIN_MS;
	return 0;
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

/* Map the table passed with hello.  The same table as the current one
 * (a reconnect to the same daemon: same memfd) is kept as it is, so a
 * reconnect neither maps it again nor makes cached answers stale.
 * Caller holds c->mu; takes @p fd. */
static void hello_map_locked(fly_client *c, int fd)
{
	struct fly_shm_reader *r;
	struct stat st = { 0 };
	int rc;

	if (fd < 0) {
		/* this daemon passed no table: one kept from another
		 * session is not its (issue 21) */
		if (atomic_load(&c->shm) != NULL)
			shm_replace_locked(c, NULL);
		return;
	}
	if (c->no_shm) {
		close(fd);
		return;
	}
	if (fstat(fd, &st) == 0 && atomic_load(&c->shm) != NULL &&
	    st.st_dev == c->shm_dev && st.st_ino == c->shm_ino) {
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
	/* before it is published: a lookup of this table never takes a
	 * first-touch fault on a page that was written before the map.
	 * The client's first table only: a later one (grown, or a restarted
	 * daemon's) is mapped by whichever fly_decide missed while a
	 * serving engine runs, and reading a large table there (~50 ms at
	 * a million keys) would stall that call; its pages are touched as
	 * lookups come */
	if (!c->no_prefault && atomic_load(&c->shm) == NULL)
		fly__shm_reader_prefault(r);
	c->shm_dev = st.st_dev;
	c->shm_ino = st.st_ino;
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
	/* no id: a session without its hello answered is not kept */
	rc = roundtrip_locked(c, req, strlen(req), -1, deadline_ns, &resp,
			      &rlen, &fd);
	if (rc < 0) {
		if (c->fd >= 0)
			drop_locked(c);
		return rc;
	}
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
		lease_begin_locked(c);
	}
	cJSON_Delete(o);
	free(resp);
	return rc;
}

/* After fork without the atfork handler having run (a raw clone()): the
 * inherited socket belongs to the parent's session.  Close our copy
 * without sending anything and forget the table (retired, not unmapped:
 * other threads of this process may be reading it).  Caller holds c->mu. */
static void forked_locked(fly_client *c)
{
	conn_reset_locked(c);
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
	/* the watcher saw this session hang up: a new one, never a request
	 * on the dead socket (issue 21) */
	if (c->fd >= 0 && atomic_load(&c->hup_lease) == c->lease)
		conn_reset_locked(c);
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
 * @return 0 (d filled), or an error (d untouched; the connection is
 * dropped unless the daemon answered with an error object or the reply
 * is only late). */
static int socket_decide_locked(fly_client *c, const char *key,
				uint64_t deadline_ns, struct fly_decision *d)
{
	char req[FLY_KEY_MAX + 64], *resp = NULL;
	int64_t id = c->next_id++;
	const char *msg = "";
	struct fly_decision got;
	size_t rlen;
	cJSON *o = NULL;
	int rc;

	snprintf(req, sizeof(req), "{\"req\":\"decide\",\"id\":%lld,"
		 "\"key\":\"%s\"}", (long long)id, key);
	rc = roundtrip_locked(c, req, strlen(req), id, deadline_ns, &resp,
			      &rlen, NULL);
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
			cJSON_GetObjectItemCaseSensitive(o, "decision"), &got);
	if (rc == FLY_E_PROTO) {
		set_err(c, "decide %s: malformed reply", key);
		bump(&c->n_socket_errors);
		drop_locked(c);
	}
	if (rc == 0)
		*d = got;
	cJSON_Delete(o);
	free(resp);
	return rc;
}

/* Cache stamp of the current table: its generation, mixed with the epoch
 * so a new table (daemon restart) never matches an old stamp.  Inside a
 * read section or with c->mu held. */
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
 * several, so the two can never be confused.  Hash: the project's one
 * hash (fly_hash.h) a word at a time, through its finalizer, since the
 * cache masks it. */
static uint64_t problem_hash(const struct fly_problem *p)
{
	uint64_t w[sizeof(*p) / 8];

	memcpy(w, p, sizeof(w));
	return fly__hash_mix(fly__hash_words2(w, sizeof(w) / 8));
}

static const struct fly_cache_entry *cache_get(fly_client *c,
					       const struct fly_problem *p,
					       uint64_t hash)
{
	return fly__cache_lookup(&c->cache, (const char *)p, sizeof(*p), hash,
				 NULL);
}

static void cache_put(fly_client *c, const struct fly_problem *p,
		      uint64_t hash, const struct fly_decision *d,
		      uint64_t stamp, uint32_t xs)
{
	fly__cache_put(&c->cache, (const char *)p, sizeof(*p), hash, d, stamp,
		       fly__now_ns(), xs);
}

/* The answer when the socket gave none (down, late, busy, refused): what
 * the process cache holds for the problem now -- never worse than what
 * this client already answered --, else the default. */
static void fallback(fly_client *c, const struct fly_problem *p,
		     uint64_t hash, uint64_t gen, struct fly_decision *d)
{
	const struct fly_cache_entry *e = cache_get(c, p, hash);

	if (e != NULL)
		from_entry(e, gen, d);
	else
		decision_default(d);
}

/* Whether the daemon has moved to a larger table than @p r. */
static int grown(const struct fly_shm_reader *r)
{
	return r != NULL && fly__shm_reader_superseded(r);
}

/* Whether @p r answers nothing: the daemon moved to a larger table, or
 * the session that brought it ended (orphaned, issue 21).  The fence
 * orders this after the caller's relaxed epoch load (stamp_of): a stamp
 * with the epoch lease_end_shm_locked bumped sees the orphan mark. */
static int superseded(const struct fly_shm_reader *r)
{
	atomic_thread_fence(memory_order_acquire);
	return r != NULL && (fly__shm_reader_superseded(r) ||
			     fly__shm_reader_is_orphaned(r));
}

/* Try the shm table.  @p room 0: the process cache has no room for @p p
 * (its probe window is full of other keys), so the answer is not put
 * there.  @return 1 on a hit (d filled, cached; the caller counts it),
 * else 0 (a superseded table answers nothing: the caller moves to the
 * new one). */
static int try_shm(fly_client *c, struct fly_shm_reader *r,
		   const struct fly_problem *p, const char *key, size_t len,
		   uint64_t hash, uint64_t shash, uint64_t stamp, uint32_t xs,
		   int room, struct fly_decision *d)
{
	if (r == NULL || superseded(r) ||
	    fly__shm_lookup_hashed(r, shash, key, len, d) != 0)
		return 0;
	/* checked_ns 0: the table answered, not the socket (and the hit
	 * path reads no clock) */
	if (room)
		fly__cache_put(&c->cache, (const char *)p, sizeof(*p), hash, d,
			       stamp, 0, xs);
	return 1;
}

/* A stamp no table gives (generation + epoch << 48 reaches it only
 * after 2^16 epochs with a generation of 2^48 - 1): an answer cached
 * with it is never a hot-path hit, only an unconfirmed answer. */
#define STAMP_NONE UINT64_MAX

/* Issue 21: an orphaned table (its session hung up; its daemon may be
 * gone) is trusted for nothing, but its row is still the best answer the
 * client has for a key it never cached, while no daemon answers (before
 * issue 21 such a table was served as it was).  Cached unconfirmed:
 * stamped STAMP_NONE and never checked, so fly_decide serves it as any
 * unconfirmed answer, re-asking the socket at once and then every
 * recheck_ms, one thread a key (the reconnect, through the backoff).
 * @return 1 on a hit (d filled, cached), else 0. */
static int try_orphaned(fly_client *c, struct fly_shm_reader *r,
			const struct fly_problem *p, const char *key,
			size_t len, uint64_t hash, uint64_t shash, uint32_t xs,
			struct fly_decision *d)
{
	if (r == NULL || fly__shm_reader_superseded(r) ||
	    !fly__shm_reader_is_orphaned(r) ||
	    fly__shm_lookup_hashed(r, shash, key, len, d) != 0)
		return 0;
	fly__cache_put(&c->cache, (const char *)p, sizeof(*p), hash, d,
		       STAMP_NONE, 0, xs);
	return 1;
}

/* fallback() when the socket step of fly_decide got no answer, keeping
 * @p in, the table's answer this call found, over the default: a key the
 * process cache cannot hold (it is full) is still answered from an
 * orphaned table while no daemon answers (issue 21). */
static void fallback_table(fly_client *c, const struct fly_problem *p,
			   uint64_t hash, uint64_t gen,
			   const struct fly_decision *in,
			   struct fly_decision *d)
{
	fallback(c, p, hash, gen, d);
	if (d->status == FLY_STATUS_DEFAULT && d->variant[0] == '\0' &&
	    in->variant[0] != '\0')
		*d = *in;
}

/* The socket step of fly_decide: bounded by @p deadline_ns.  On entry d
 * holds the table's answer of this call, or the default.  Without an
 * answer from the daemon, d is fallback_table()'s. */
static void decide_socket(fly_client *c, const struct fly_problem *p,
			  const char *key, size_t len, uint64_t hash,
			  uint64_t shash, uint64_t deadline_ns, uint64_t gen,
			  uint32_t xs, struct fly_decision *d)
{
	struct fly_decision in = *d;
	struct fly_shm_reader *r;
	uint64_t stamp;
	int rc;

	if (lock_until(c, deadline_ns) < 0) {
		fallback_table(c, p, hash, gen, &in, d);
		return;
	}
	/* The daemon grew its table: the next hello hands out the larger
	 * one (one reconnect per growth; the old mapping is released once
	 * no reader holds it). */
	if (c->fd >= 0 &&
	    superseded(atomic_load_explicit(&c->shm, memory_order_acquire))) {
		conn_reset_locked(c);
		rc = connect_locked(c, deadline_ns, 1);
	} else {
		rc = connect_locked(c, deadline_ns, 0);
	}
	/* a fresh connection may have brought a table that answers */
	r = atomic_load_explicit(&c->shm, memory_order_acquire);
	stamp = stamp_of(c, r, &gen);
	if (rc == 0 && try_shm(c, r, p, key, len, hash, shash, stamp, xs, 1, d)) {
		bump_shm_hit(c);
		if (d->status == FLY_STATUS_TUNED) {
			pthread_mutex_unlock(&c->mu);
			return;
		}
	}
	if (rc == 0)
		rc = socket_decide_locked(c, key, deadline_ns, d);
	if (rc == 0) {
		r = atomic_load_explicit(&c->shm, memory_order_acquire);
		stamp = stamp_of(c, r, &gen);
		d->generation = gen;
		cache_put(c, p, hash, d, stamp, xs);
	}
	pthread_mutex_unlock(&c->mu);
	if (rc < 0)
		fallback_table(c, p, hash, gen, &in, d);
}

/* Whether a cached answer is fresh enough to serve without asking the
 * socket: a pending/default answer, or a tuned one the current table no
 * longer confirms (stale stamp, shm miss), is re-asked at most every
 * recheck_ms, by one thread only (the one whose CAS wins); the others
 * serve it meanwhile. */
static int recheck_not_due(fly_client *c, const struct fly_cache_entry *e,
			   uint64_t now)
{
	uint64_t checked = atomic_load_explicit(&e->checked_ns,
						memory_order_relaxed);

	if (now - checked < c->recheck_ms * 1000000ull)
		return 1;
	return !atomic_compare_exchange_strong(
		&((struct fly_cache_entry *)e)->checked_ns, &checked, now);
}

/* Whether fly_decide should leave the socket alone now: a reply is late
 * (the daemon is slow or stopped), so the call answers from what it has. */
static int socket_quiet(fly_client *c, uint64_t now)
{
	return now < atomic_load_explicit(&c->quiet_until_ns,
					  memory_order_relaxed);
}

/* ------------------------------------------------------ exact shapes */

/* The exact-shape state a new cache entry of @p p (valid) starts in. */
static uint32_t exact_init(const fly_client *c, const struct fly_problem *p)
{
	struct fly_problem x;

	if (c->exact_after == 0 || (p->flags & FLY_F_EXACT))
		return XS_NONE;
	return fly_problem_exact(p, &x) == 1 ? XS_COUNT : XS_NONE;
}

/* Count one answer of @p e from the process cache.  @return 1 when this
 * caller is the one to ask for the exact key (the count reached the
 * threshold and it moved the entry to XS_ASKING), else 0.  One relaxed
 * atomic add per answer, and only while the entry is XS_COUNT. */
static int exact_due(fly_client *c, const struct fly_cache_entry *e)
{
	struct fly_cache_entry *w = (struct fly_cache_entry *)e;
	uint32_t want = XS_COUNT;

	if (atomic_fetch_add_explicit(&w->xuses, 1, memory_order_relaxed) + 1 <
	    c->exact_after)
		return 0;
	return atomic_compare_exchange_strong(&w->xstate, &want, XS_ASKING);
}

/* Set the exact-shape state of @p p's entry (its uses to 0 with
 * XS_COUNT: the count starts again). */
static void exact_set(fly_client *c, const struct fly_problem *p,
		      uint64_t hash, uint32_t xs)
{
	struct fly_cache_entry *e =
		(struct fly_cache_entry *)cache_get(c, p, hash);

	if (e == NULL)
		return;
	if (xs == XS_COUNT)
		atomic_store_explicit(&e->xuses, 0, memory_order_relaxed);
	atomic_store_explicit(&e->xstate, xs, memory_order_relaxed);
}

/* The exact key of @p p (valid, off its bucket) into @p key.
 * @return its length, its hash into *xhash; or an error. */
static int exact_key(const struct fly_problem *p, char *key, uint64_t *xhash)
{
	struct fly_problem x;

	if (fly_problem_exact(p, &x) != 1)
		return FLY_E_NOTFOUND;
	*xhash = fly__shm_problem_hash(&x);
	return fly_key_format(&x, key, FLY_KEY_MAX);
}

/* Look @p p's exact key up in the table.  @return 1 on a hit (d filled,
 * d->exact 1, cached for @p p), else 0. */
static int try_shm_exact(fly_client *c, struct fly_shm_reader *r,
			 const struct fly_problem *p, uint64_t hash,
			 uint64_t stamp, struct fly_decision *d)
{
	char xkey[FLY_KEY_MAX];
	uint64_t xhash;
	int n;

	if (r == NULL || superseded(r))
		return 0;
	n = exact_key(p, xkey, &xhash);
	if (n < 0 || fly__shm_lookup_hashed(r, xhash, xkey, (size_t)n, d) != 0)
		return 0;
	d->exact = 1;
	fly__cache_put(&c->cache, (const char *)p, sizeof(*p), hash, d, stamp,
		       0, XS_ASKED);
	return 1;
}

/* The one caller that moved @p p's entry to XS_ASKING: ask the daemon
 * for the exact key once, as a miss asks (a `decide`, bounded by the
 * timeout; the daemon queues it and answers at once, never waiting for
 * the tuning).  A tuned answer is served and cached from now on; any
 * other reply (or a late one: the request went out) leaves the entry
 * XS_ASKED, served by its bucket until the table has the exact row; no
 * answer at all (down, busy, refused) counts again from 0.
 * @p d holds the cached (bucket) answer on entry; replaced only by a
 * tuned exact answer. */
static void exact_ask(fly_client *c, const struct fly_problem *p,
		      uint64_t hash, uint64_t start, struct fly_decision *d)
{
	uint64_t deadline = start + c->timeout_ms * 1000000ull, xhash, gen;
	struct fly_decision xd;
	char xkey[FLY_KEY_MAX];
	int rc;

	rc = exact_key(p, xkey, &xhash);
	if (rc < 0) {
		exact_set(c, p, hash, XS_NONE);
		return;
	}
	if (socket_quiet(c, start) || lock_until(c, deadline) < 0) {
		exact_set(c, p, hash, XS_COUNT);
		return;
	}
	rc = connect_locked(c, deadline, 0);
	if (rc == 0)
		rc = socket_decide_locked(c, xkey, deadline, &xd);
	if (rc == 0 && xd.status == FLY_STATUS_TUNED) {
		uint64_t stamp = stamp_of(
			c, atomic_load_explicit(&c->shm, memory_order_acquire),
			&gen);

		xd.exact = 1;
		xd.generation = gen;
		cache_put(c, p, hash, &xd, stamp, XS_ASKED);
		*d = xd;
	}
	pthread_mutex_unlock(&c->mu);
	exact_set(c, p, hash, rc == 0 || rc == FLY_E_TIMEOUT ? XS_ASKED
							      : XS_COUNT);
}

int fly_decide(fly_client *c, const struct fly_problem *p,
	       struct fly_decision *d)
{
	char key[FLY_KEY_MAX];
	const struct fly_cache_entry *e;
	struct fly_shm_reader *r;
	struct rd_token t;
	uint64_t start, hash, shash = 0, gen, stamp;
	uint32_t xs;
	int n, moved, room, hit = 0;

	if (d == NULL)
		return FLY_E_INVALID;
	if (c == NULL || p == NULL) {
		decision_default(d);
		return FLY_E_INVALID;
	}
	/* hot path: no validation, no formatting, no lock, no syscall */
	hash = problem_hash(p);
	t = rd_enter(c);
	r = atomic_load(&c->shm);
	stamp = stamp_of(c, r, &gen);
	e = fly__cache_lookup(&c->cache, (const char *)p, sizeof(*p), hash,
			      &room);
	xs = e != NULL ? atomic_load_explicit(&e->xstate, memory_order_relaxed)
		       : XS_NONE;
	if (e != NULL && e->dec.status == FLY_STATUS_TUNED &&
	    atomic_load_explicit(&e->generation, memory_order_relaxed) ==
		    stamp) {
		/* an off-bucket shape counts its answers until the one
		 * that asks for its exact key (issue 22) */
		int ask = xs == XS_COUNT && exact_due(c, e);

		from_entry(e, gen, d);
		rd_exit(c, t, RD_END_HIT);
		if (ask)
			exact_ask(c, p, hash, fly__now_ns(), d);
		return 0;
	}
	/* the key first: its home slot's line is asked for at once
	 * (issue 19: the slot's miss is the table path's cost); d is
	 * written by a table hit, and cleared only without one */
	n = fly__shm_problem_key(r, p, key, &shash);
	/* asked for its exact key: the exact row first (issue 22) */
	if (n >= 0 && xs == XS_ASKED &&
	    try_shm_exact(c, r, p, hash, stamp, d)) {
		rd_exit(c, t, RD_END_SHM);
		return 0;
	}
	/* a new entry's exact-shape state: only when it can be cached
	 * (issue 19: with the process cache full, a miss bucketed the
	 * problem a second time here for an entry never made) */
	if (n >= 0 && e == NULL && room)
		xs = exact_init(c, p);
	if (n >= 0)
		hit = try_shm(c, r, p, key, (size_t)n, hash, shash, stamp, xs,
			      room, d);
	if (hit && d->status == FLY_STATUS_TUNED) {
		rd_exit(c, t, RD_END_SHM);
		return 0;
	}
	/* (an orphaned table is never a superseded one: try_shm missed) */
	if (n >= 0 && e == NULL && !hit)
		hit = try_orphaned(c, r, p, key, (size_t)n, hash, shash, xs, d);
	if (!hit)
		decision_default(d);
	/* read while r is still ours: past rd_exit a swap may unmap it
	 * (issue 21 made that race show: test_engine_client) */
	moved = grown(r);
	rd_exit(c, t, hit ? RD_END_SHM : RD_END_MISS);
	start = fly__now_ns(); /* (past the table: no clock on its hits) */
	if (n < 0)
		return n;
	e = cache_get(c, p, hash); /* the shm step may have replaced it */
	/* a grown table needs the reconnect now; an orphaned one's answers
	 * are served as any unconfirmed answer is, one thread a key going
	 * to the socket every recheck_ms (issue 21: no lock per call while
	 * no daemon answers) */
	if (e != NULL && !moved &&
	    (socket_quiet(c, start) || recheck_not_due(c, e, start))) {
		from_entry(e, gen, d);
		bump_hit(c, t.shard);
		return 0;
	}
	if (socket_quiet(c, start))
		return 0; /* d: the table's answer, else the default */
	decide_socket(c, p, key, (size_t)n, hash, shash,
		      start + c->timeout_ms * 1000000ull, gen, xs, d);
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
	rc = roundtrip_locked(c, req, strlen(req), id, deadline_ns, &resp,
			      &rlen, NULL);
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
	uint64_t deadline, hash, gen = 0, stamp;
	const struct fly_cache_entry *e;
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
	hash = problem_hash(p);
	deadline = fly__now_ns() + (timeout_ms + WAIT_SLACK_MS) * 1000000ull;
	if (lock_until(c, deadline) < 0) {
		fallback(c, p, hash, gen, d);
		return FLY_E_TIMEOUT;
	}
	rc = connect_locked(c, deadline, 1);
	if (rc == 0)
		rc = tune_wait_locked(c, key, timeout_ms, deadline, d, &have);
	/* answered without a decision (the daemon's own timeout): ask */
	if ((rc == 0 || rc == FLY_E_TIMEOUT) && !have && c->fd >= 0 &&
	    socket_decide_locked(c, key, deadline, d) == 0)
		have = 1;
	r = atomic_load_explicit(&c->shm, memory_order_acquire);
	stamp = stamp_of(c, r, &gen);
	/* waits for the bucket key; an exact row the process cache holds
	 * for the shape (issue 22) stays its answer */
	e = cache_get(c, p, hash);
	if (have && e != NULL && e->dec.exact &&
	    e->dec.status == FLY_STATUS_TUNED)
		have = 0;
	if (have) {
		d->generation = gen;
		cache_put(c, p, hash, d, stamp, exact_init(c, p));
	}
	pthread_mutex_unlock(&c->mu);
	if (!have)
		fallback(c, p, hash, gen, d);
	if (rc == 0 && d->status != FLY_STATUS_TUNED)
		rc = FLY_E_TIMEOUT;
	return rc;
}

/* ------------------------------------------------------------ raw */

int fly_request(fly_client *c, const char *req, size_t len,
		uint32_t timeout_ms, char **resp, size_t *resp_len)
{
	uint64_t deadline;
	int64_t id = -1;
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
	/* a request that carries an id can be owed when its reply is late;
	 * one without is dropped with the connection */
	if (reply_id(req, len, &id) != 0)
		id = -1;
	rc = connect_locked(c, deadline, 1);
	if (rc == 0)
		rc = roundtrip_locked(c, req, len, id, deadline, resp, &rl,
				      NULL);
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
