/*
 * flyclient.h -- libflyclient, the serving engine's side of flytuned.
 *
 * The one installed header.  The Makefile installs build/include/flyclient.h,
 * this file with proto/fly_abi.h inlined where it is included, so users need
 * nothing else.  No GPU dependency.
 *
 * Thread safety: a fly_client may be used from any number of threads at
 * once.  Fork safety: in the child (pthread_atfork), every open client
 * closes its inherited socket without sending on it, unmaps its tables
 * and re-initialises its locks; its next call reconnects and remaps.  The
 * child never uses the parent's session; its process cache is kept.
 * Threads: each open client has one thread of the library's, the
 * session watcher (all signals blocked in it; it sleeps until the
 * daemon's end of the client's socket closes, so that a restarted daemon's
 * answers are taken up without waiting for a miss); fly_client_close
 * joins it.  A fork child starts its own on its first connection.
 * The library never aborts, never exit()s, never raises SIGPIPE in the
 * host process, and never blocks past the timeouts configured here.
 */
#ifndef FLYCLIENT_H
#define FLYCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every function below is exported from libflyclient.so, which is built
 * with -fvisibility=hidden (internals stay private). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

typedef struct fly_client fly_client; /* opaque; defined in client.c */

/* Options for fly_client_open_opts(); zero-initialise, then set. */
struct fly_client_opts {
	const char *socket_path; /* NULL: $FLYTUNED_SOCKET, else
				    /run/flytuned/gpu<device>.sock */
	int device;              /* GPU index for the default path */
	uint32_t timeout_ms;     /* fly_decide socket timeout; 0: 5 ms */
	uint32_t recheck_ms;     /* how often a pending key re-asks the
				    socket; 0: 100 ms */
	uint32_t no_shm;         /* 1: never map the table (tests) */
};

/* Open a client.  Does not require the daemon to be up: connection is
 * lazy and retried with backoff, so fly_decide works (answering
 * `default`) while the daemon is down.
 * Memory: the process cache's entries (~1.1 MiB) are mapped and touched
 * here, and when the client maps its first shm table (its first
 * connect) it reads one byte of every page of the table's slots and
 * written records, so lookups do not take those first-touch faults
 * (issue 19); that costs ~50 ms for a million keys (108 MiB) and ~0.7 ms
 * for an empty 131072-slot table (its 2 MiB of slots, whose never-written
 * pages the read allocates in the shared memfd) on the 2-core VM, paid
 * by the fly_decide that connects.  A later table (grown larger, or a
 * restarted daemon's) is mapped without it: that map happens in a
 * running engine's fly_decide, which must not stall.
 * FLYTUNED_SHM_PREFAULT=0 in the environment (read here) turns the
 * table's pre-fault off.  FLYTUNED_EXACT_AFTER (read here; default 64,
 * 0 off) is the number of answers of a shape between bucket edges after
 * which fly_decide asks for its exact key (see fly_decide).
 * @param[in] socket_path NULL for $FLYTUNED_SOCKET or the device-0 path.
 * Starts the client's session watcher (see the file comment; a failure
 * to start it is not an error: it is tried again at each connection).
 * @param[out] out caller owns result; free with fly_client_close().
 * @return 0, -EINVAL (path too long), -ENOMEM. */
int fly_client_open(const char *socket_path, fly_client **out);
int fly_client_open_opts(const struct fly_client_opts *o, fly_client **out);
/* Close and free (the session watcher joined first).
 * fly_client_close(NULL) is a no-op.  Not concurrent with other calls on
 * the same client. */
void fly_client_close(fly_client *c);

/* Decide which variant to launch for @p p.  Never waits for tuning:
 * answers from the process cache, else the shm table, else one socket
 * round trip bounded by the timeout; if the daemon is down, slow or
 * misbehaving, answers what the client already has for the problem, else
 * the `default` status (variant "" means "use your own default").  Dims
 * are bucketed by the shared policy.
 * Exact shapes (issue 22): a problem whose M is not its bucket's value
 * counts its answers from the process cache (in its cache entry: no
 * lock, no allocation, no syscall); the answer that reaches
 * FLYTUNED_EXACT_AFTER sends one decide of its exact key (FLY_F_EXACT,
 * bounded by the timeout like a miss); whenever its cached answer is
 * re-checked in the table after that, the exact key is looked up
 * first, and its row, once the daemon has tuned it, answers with
 * d->exact = 1.
 * A cached tuned answer costs no lock and no syscall; it is re-checked
 * in the shm table when the table's generation changes (and, when the
 * table does not have it, on the socket at most every recheck_ms, by one
 * thread, the others answering the cached one).  Pending and default
 * answers are re-checked in shm on every call and on the socket at most
 * every recheck_ms.  While the daemon is down, connects are
 * attempted at most every 100 ms, doubling to 2 s.  A reply that misses
 * the timeout does not cost the connection: the next socket call reads
 * it first (and discards it), and meanwhile fly_decide leaves the socket
 * alone for 100 ms, doubling to 2 s while replies stay late.  Without an
 * answer from the daemon (down, late, busy) the call answers what the
 * client already has for the problem -- a tuned or pending answer is
 * never replaced by a worse one because a deadline passed --, else
 * `default`.  A client maps the daemon's shm table once (two mappings
 * only while it swaps to a restarted daemon's table).
 * Thread-safe; fork-safe (see the file comment).
 * @param[out] d always filled, even on error (status default).
 * @return 0; FLY_E_BADOP, FLY_E_BADDTYPE, FLY_E_BADDIM, FLY_E_OVERFLOW,
 *         FLY_E_KEYLEN, FLY_E_INVALID for a bad problem (d is default). */
int fly_decide(fly_client *c, const struct fly_problem *p,
	       struct fly_decision *d);
/* Like fly_decide, but waits up to @p timeout_ms for the key to be tuned
 * (sends `tune` with wait:true; the reply may take up to timeout_ms +
 * 500 ms).  Connects at once (ignores the backoff).  Thread-safe; blocks
 * the calling thread, never fly_decide callers on other threads' cache
 * or shm hits.
 * @return 0 (d->status TUNED), FLY_E_TIMEOUT (d holds the best so far),
 *         FLY_E_DOWN, FLY_E_MAXCLIENTS (too many clients), FLY_E_BUSY,
 *         or a problem error. */
int fly_decide_wait(fly_client *c, const struct fly_problem *p,
		    uint32_t timeout_ms, struct fly_decision *d);

/* Send one raw request object (JSON text, one frame) and receive the
 * response text, waiting up to @p timeout_ms (0: 30 s).  Used by
 * flytune-ctl for admin requests.  Connects at once (ignores the
 * reconnect backoff).  Any fd passed with the response is closed.
 * Responses are capped at 16 MiB.  Thread-safe: requests on one client
 * are serialized (a caller that cannot get the connection before its
 * deadline gets FLY_E_TIMEOUT).  A request with an integer "id" whose
 * reply is late keeps the connection (the reply is read and discarded
 * by the next request); without an id the connection is dropped.
 * @param[out] resp caller owns result; free with fly_free().
 * @return 0 (the daemon answered; the response may be an error object),
 *         FLY_E_DOWN, FLY_E_MAXCLIENTS (the daemon is up but refused the
 *         connection: too many clients), FLY_E_TIMEOUT, FLY_E_PROTO,
 *         FLY_E_TOOBIG, -ENOMEM. */
int fly_request(fly_client *c, const char *req, size_t len,
		uint32_t timeout_ms, char **resp, size_t *resp_len);
void fly_free(void *p);

/* Canonical key of a problem after bucketing (what the daemon tunes).
 * @return length, or a problem error (see fly_decide). */
int fly_problem_key(const struct fly_problem *p, char *buf, size_t cap);
/* Parse a canonical key (as printed by fly_problem_key). */
int fly_problem_from_key(const char *key, struct fly_problem *out);
/* Say what is wrong with a key, for people: which part is missing or
 * unknown (op, dtype, layout, dims, flags) and the names allowed there,
 * e.g. "the layout is missing: gemm needs one of NT, NN, TN, TT after
 * the dtype (e.g. gemm/fp32/NT/m=64,n=64,k=64)".
 * @param[out] buf NUL-terminated, truncated to @p cap; "" when the key
 *   parses.
 * @return 0 (the key parses) or the error fly_problem_from_key returns. */
int fly_key_explain(const char *key, char *buf, size_t cap);

/* Counters for benchmarks and tests (relaxed atomics; any thread). */
struct fly_client_stats {
	uint64_t cache_hits;
	uint64_t shm_hits;
	uint64_t socket_requests;
	uint64_t socket_errors;
	uint64_t reconnects;
	uint64_t shm_refused;
};
void fly_client_stats_get(const fly_client *c, struct fly_client_stats *out);
/* cache_hits: answers from the process cache; shm_hits: from the table;
 * socket_requests: frames sent (hello included); socket_errors: failed
 * round trips, late replies included (a late reply keeps the
 * connection); reconnects: sessions after the first (a fork child's
 * counts too); shm_refused: tables that failed validation (the client
 * then uses the socket only). */

/* Last error message from the daemon or the library, for this thread and
 * client; borrowed, valid until the next call on @p c from this thread. */
const char *fly_client_errmsg(const fly_client *c);
/* Text for any error code returned here.  Never NULL. */
const char *fly_strerror(int err);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* FLYCLIENT_H */
