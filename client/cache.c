/*
 * cache.c -- the process cache of libflyclient (see cache.h).
 *
 * Owns: entries allocated here (the arena's, then calloc'd ones), the
 * arena mapping.  Thread: lock-free readers, mutex writers.
 * Publication: a writer fills a fresh entry completely, then stores its
 * pointer with release order; a reader loads with acquire order and sees
 * a fully written entry (no seqlock needed, no torn reads by construction).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache.h"

#ifndef MAP_POPULATE
#define MAP_POPULATE 0
#endif

#define ARENA_BYTES (sizeof(struct fly_cache_entry) * FLY_CACHE_SLOTS)

/* The entry arena, its pages populated by the kernel in one call and
 * then written once each, so a put writes to memory that is there.
 * Both steps are needed on the 2-core VM (issue 19, measured with
 * bench/bench_client --shm): MAP_POPULATE alone left the first store to
 * each page at 20-50 us (the hypervisor backs a page on its first use
 * in user space, a cost the guest counts as no fault); populate + one
 * store a page costs ~1.5 ms for the 1.1 MiB here, once, at open.
 * @return NULL when the mapping is refused. */
static struct fly_cache_entry *arena_map(void)
{
	long page = sysconf(_SC_PAGESIZE);
	volatile char *m = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
				-1, 0);

	if (m == MAP_FAILED)
		return NULL;
	if (page <= 0)
		page = 4096;
	for (size_t o = 0; o < ARENA_BYTES; o += (size_t)page)
		m[o] = 0;
	return (struct fly_cache_entry *)(uintptr_t)m;
}

/* Whether @p e lies in the arena (else it was calloc'd). */
static int in_arena(const struct fly_cache *c, const struct fly_cache_entry *e)
{
	return c->arena != NULL && e >= c->arena &&
	       e < c->arena + FLY_CACHE_SLOTS;
}

static void entry_free(const struct fly_cache *c, struct fly_cache_entry *e)
{
	if (!in_arena(c, e))
		free(e);
}

int fly__cache_init(struct fly_cache *c)
{
	int rc;

	for (size_t i = 0; i < FLY_CACHE_SLOTS; i++) {
		atomic_init(&c->slots[i], NULL);
		atomic_init(&c->hashes[i], 0);
	}
	atomic_init(&c->count, 0);
	c->retired = NULL;
	c->arena_used = 0;
	rc = pthread_mutex_init(&c->mu, NULL);
	if (rc)
		return -rc;
	c->arena = arena_map();
	return 0;
}

void fly__cache_fini(struct fly_cache *c)
{
	struct fly_cache_entry *e, *next;

	for (size_t i = 0; i < FLY_CACHE_SLOTS; i++) {
		entry_free(c, atomic_load_explicit(&c->slots[i],
						   memory_order_relaxed));
		atomic_store_explicit(&c->slots[i], NULL, memory_order_relaxed);
	}
	for (e = c->retired; e != NULL; e = next) {
		next = e->next_retired;
		entry_free(c, e);
	}
	c->retired = NULL;
	if (c->arena != NULL)
		munmap(c->arena, ARENA_BYTES);
	c->arena = NULL;
	c->arena_used = 0;
	pthread_mutex_destroy(&c->mu);
}

/* Whether entry @p e holds exactly this key. */
static int entry_is(const struct fly_cache_entry *e, const char *key,
		    size_t len, uint64_t hash)
{
	return e->hash == hash && e->keylen == len &&
	       memcmp(e->key, key, len) == 0;
}

/* Whether slot @p j holds a key of another hash than @p hash. */
static int slot_is_other(const struct fly_cache *c, size_t j, uint64_t hash)
{
	uint64_t h = atomic_load_explicit(&c->hashes[j], memory_order_relaxed);

	return h != 0 && h != hash;
}

/* Whether the probe window of @p hash holds only other keys: then a put
 * finds no slot, and needs no lock to know it (keys are never removed,
 * so a window full of other keys stays full). */
static int window_full_of_others(const struct fly_cache *c, uint64_t hash)
{
	size_t mask = FLY_CACHE_SLOTS - 1;

	for (size_t i = 0; i < FLY_CACHE_PROBE; i++) {
		if (!slot_is_other(c, (hash + i) & mask, hash))
			return 0;
	}
	return 1;
}

const struct fly_cache_entry *fly__cache_lookup(const struct fly_cache *c,
						const char *key, size_t len,
						uint64_t hash, int *room)
{
	size_t mask = FLY_CACHE_SLOTS - 1;

	if (room != NULL)
		*room = 1;
	for (size_t i = 0; i < FLY_CACHE_PROBE; i++) {
		size_t j = (hash + i) & mask;
		const struct fly_cache_entry *e;

		/* another key's slot (its hash is set before its entry and
		 * never changes); 0 may be an empty slot or a key hashing
		 * to 0: the entry decides */
		if (slot_is_other(c, j, hash))
			continue;
		e = atomic_load_explicit(&c->slots[j], memory_order_acquire);
		if (e == NULL)
			return NULL;
		if (entry_is(e, key, len, hash))
			return e;
	}
	/* every slot of the window held another key (a slot whose hash
	 * was 0 or this key's and whose entry was another key's is
	 * counted as full too: it is, and stays so) */
	if (room != NULL)
		*room = 0;
	return NULL;
}

void fly__cache_touch(const struct fly_cache_entry *e, uint64_t generation,
		      uint64_t checked_ns)
{
	struct fly_cache_entry *w = (struct fly_cache_entry *)e;

	atomic_store_explicit(&w->generation, generation,
			      memory_order_relaxed);
	atomic_store_explicit(&w->checked_ns, checked_ns,
			      memory_order_relaxed);
}

/* Whether two decisions are the same answer (stamps aside). */
static int same_decision(const struct fly_decision *a,
			 const struct fly_decision *b)
{
	if (a->status != b->status || a->provisional != b->provisional ||
	    a->exact != b->exact || a->nparams != b->nparams || a->median_us != b->median_us ||
	    strcmp(a->variant, b->variant) != 0)
		return 0;
	return memcmp(a->params, b->params,
		      sizeof(a->params[0]) * a->nparams) == 0;
}

/* Zeroed memory for a new entry: the arena's next one, else calloc's.
 * Caller holds c->mu. */
static struct fly_cache_entry *entry_alloc(struct fly_cache *c)
{
	if (c->arena != NULL && c->arena_used < FLY_CACHE_SLOTS)
		return &c->arena[c->arena_used++];
	return calloc(1, sizeof(struct fly_cache_entry));
}

/* A fresh, fully initialised entry.  Caller holds c->mu. */
static struct fly_cache_entry *entry_new(struct fly_cache *c, const char *key,
					 size_t len, uint64_t hash,
					 const struct fly_decision *d,
					 uint64_t generation,
					 uint64_t checked_ns, uint32_t xstate,
					 uint32_t xuses)
{
	struct fly_cache_entry *e = entry_alloc(c);

	if (e == NULL)
		return NULL;
	e->hash = hash;
	e->keylen = (uint32_t)len;
	memcpy(e->key, key, len);
	e->key[len] = '\0';
	e->dec = *d;
	e->dec.variant[FLY_VARIANT_MAX - 1] = '\0';
	if (e->dec.nparams > FLY_PARAMS_MAX)
		e->dec.nparams = FLY_PARAMS_MAX;
	e->dec.generation = generation;
	atomic_init(&e->generation, generation);
	atomic_init(&e->checked_ns, checked_ns);
	atomic_init(&e->xstate, xstate);
	atomic_init(&e->xuses, xuses);
	return e;
}

int fly__cache_put(struct fly_cache *c, const char *key, size_t len,
		   uint64_t hash, const struct fly_decision *d,
		   uint64_t generation, uint64_t checked_ns, uint32_t xstate)
{
	size_t mask = FLY_CACHE_SLOTS - 1;
	int rc = -ENOSPC;

	if (len == 0 || len >= FLY_KEY_MAX)
		return FLY_E_KEYLEN;
	if (window_full_of_others(c, hash))
		return -ENOSPC;
	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < FLY_CACHE_PROBE; i++) {
		size_t j = (hash + i) & mask;
		_Atomic(struct fly_cache_entry *) *slot = &c->slots[j];
		struct fly_cache_entry *old;
		struct fly_cache_entry *e;

		if (slot_is_other(c, j, hash))
			continue;
		old = atomic_load_explicit(slot, memory_order_relaxed);
		if (old != NULL && !entry_is(old, key, len, hash))
			continue;
		if (old != NULL && same_decision(&old->dec, d)) {
			fly__cache_touch(old, generation, checked_ns);
			rc = 0;
			break;
		}
		/* a replacement carries the exact-shape state (a use
		 * counted on the old entry meanwhile may be lost: counts
		 * only pace a request) */
		if (old != NULL)
			e = entry_new(c, key, len, hash, d, generation,
				      checked_ns,
				      atomic_load_explicit(&old->xstate,
							   memory_order_relaxed),
				      atomic_load_explicit(&old->xuses,
							   memory_order_relaxed));
		else
			e = entry_new(c, key, len, hash, d, generation,
				      checked_ns, xstate, 0);
		if (e == NULL) {
			rc = -ENOMEM;
			break;
		}
		/* the hash first: a reader that sees the entry sees it */
		if (old == NULL)
			atomic_store_explicit(&c->hashes[j], hash,
					      memory_order_relaxed);
		atomic_store_explicit(slot, e, memory_order_release);
		if (old != NULL) {
			old->next_retired = c->retired;
			c->retired = old;
		} else {
			/* writers hold mu: a plain store, no locked add on
			 * the table path's put (issue 19) */
			atomic_store_explicit(
				&c->count,
				atomic_load_explicit(&c->count,
						     memory_order_relaxed) + 1,
				memory_order_relaxed);
		}
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}
