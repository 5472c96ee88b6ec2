/*
 * cache.h -- libflyclient's process cache: key -> decision, lock-free on a
 * hit.
 *
 * Owns: the slot array, the entry arena and every entry ever published
 * (entries are immutable once published, except their atomic stamps and
 * exact-shape counters;
 * a replaced entry is retired, not freed, until fly__cache_fini, so a
 * reader that loaded the old pointer never touches freed memory).
 * Entries come from one arena of FLY_CACHE_SLOTS entries, mapped and
 * populated and touched when the cache is initialised (issue 19: calloc'd
 * one by one, the ~270 pages of a full cache were each first touched by a
 * put on the table path: 264 of the 10,000 timed calls of `bench_client
 * --shm` took a minor fault, 74 with the arena); once it is used up
 * (replaced answers), entries are calloc'd.
 * Thread: any number of readers concurrently with writers; readers take
 * no lock and make no syscall; writers serialize on an internal mutex.
 * Invariant: a slot's pointer, once non-NULL, only ever changes to an
 * entry with the same key (keys are never removed), so a probe sequence
 * is stable; a slot's hash is stored once, before its first entry.
 */
#ifndef FLY_CLIENT_CACHE_H
#define FLY_CLIENT_CACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"

#define FLY_CACHE_SLOTS 4096 /* power of two */
#define FLY_CACHE_PROBE 32   /* longest probe, readers and writers */

/* One published answer.  Immutable after publication except the stamps. */
struct fly_cache_entry {
	uint64_t hash;                /* fly_key_hash of key */
	uint32_t keylen;              /* bytes of key, no NUL */
	/* The key's exact-shape state (client.c, issue 22), beside the
	 * fields a hit reads anyway, so the hit path's test of it touches
	 * no other line; mutable after publication like the stamps, and
	 * carried over to an entry that replaces this one, with xuses. */
	_Atomic uint32_t xstate;
	char key[FLY_KEY_MAX];        /* NUL-terminated canonical key */
	struct fly_decision dec;      /* the answer */
	_Atomic uint64_t generation;  /* shm generation it was valid at */
	_Atomic uint64_t checked_ns;  /* last socket check (monotonic ns) */
	_Atomic uint32_t xuses;       /* answers counted (xstate) */
	struct fly_cache_entry *next_retired; /* writer-only list link */
};

struct fly_cache {
	_Atomic(struct fly_cache_entry *) slots[FLY_CACHE_SLOTS];
	/* The hash of each slot's key, stored before the slot's first
	 * entry and never changed after (a slot keeps its key): a probe
	 * passes over another key's slot without loading its entry.  With
	 * the cache full, a miss read 32 entries scattered over ~1.3 MiB
	 * (issue 19, the shm path at 1M keys); it reads 4 lines of this. */
	_Atomic uint64_t hashes[FLY_CACHE_SLOTS];
	pthread_mutex_t mu;                   /* serializes writers */
	struct fly_cache_entry *retired;      /* replaced entries (mu) */
	/* FLY_CACHE_SLOTS entries, mapped populated at init; NULL when the
	 * mapping failed (then every entry is calloc'd) */
	struct fly_cache_entry *arena;
	uint32_t arena_used;                  /* entries handed out (mu) */
	_Atomic uint32_t count;               /* occupied slots */
};

/* Initialise an empty cache in caller storage, its entry arena mapped
 * and populated (~1.1 MiB; a failed mapping is not an error: entries are
 * then calloc'd).  @return 0 or -errno. */
int fly__cache_init(struct fly_cache *c);
/* Free every entry and the arena; no reader may be running. */
void fly__cache_fini(struct fly_cache *c);

/* Find the entry of a key.  Lock-free, no syscall.
 * @param[out] room (may be NULL) on a miss, 0 when the key's probe window
 *   holds only other keys, so a put of it cannot succeed, now or ever
 *   (keys are never removed); else 1.
 * @return borrowed; valid until fly__cache_fini; NULL on a miss. */
const struct fly_cache_entry *fly__cache_lookup(const struct fly_cache *c,
						const char *key, size_t len,
						uint64_t hash, int *room);

/* Insert or replace the answer for a key, stamped with @p generation and
 * @p checked_ns.  When the stored decision is identical, only the stamps
 * are updated (no allocation).  A new key's entry starts with xstate
 * @p xstate and no uses; a replacing entry keeps its predecessor's.
 * @return 0, -ENOMEM, -ENOSPC (probe window full: the key is simply not
 * cached), FLY_E_KEYLEN. */
int fly__cache_put(struct fly_cache *c, const char *key, size_t len,
		   uint64_t hash, const struct fly_decision *d,
		   uint64_t generation, uint64_t checked_ns, uint32_t xstate);

/* Update the stamps of an existing entry (no allocation, no lock). */
void fly__cache_touch(const struct fly_cache_entry *e, uint64_t generation,
		      uint64_t checked_ns);

#endif /* FLY_CLIENT_CACHE_H */
