/*
 * cache.c -- the process cache of libflyclient (see cache.h).
 *
 * Owns: entries allocated here.  Thread: lock-free readers, mutex writers.
 * Publication: a writer fills a fresh entry completely, then stores its
 * pointer with release order; a reader loads with acquire order and sees
 * a fully written entry (no seqlock needed, no torn reads by construction).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"

int fly__cache_init(struct fly_cache *c)
{
	int rc;

	for (size_t i = 0; i < FLY_CACHE_SLOTS; i++) {
		atomic_init(&c->slots[i], NULL);
		atomic_init(&c->hashes[i], 0);
	}
	atomic_init(&c->count, 0);
	c->retired = NULL;
	rc = pthread_mutex_init(&c->mu, NULL);
	return rc ? -rc : 0;
}

void fly__cache_fini(struct fly_cache *c)
{
	struct fly_cache_entry *e, *next;

	for (size_t i = 0; i < FLY_CACHE_SLOTS; i++) {
		free(atomic_load_explicit(&c->slots[i], memory_order_relaxed));
		atomic_store_explicit(&c->slots[i], NULL, memory_order_relaxed);
	}
	for (e = c->retired; e != NULL; e = next) {
		next = e->next_retired;
		free(e);
	}
	c->retired = NULL;
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
						uint64_t hash)
{
	size_t mask = FLY_CACHE_SLOTS - 1;

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
	    a->nparams != b->nparams || a->median_us != b->median_us ||
	    strcmp(a->variant, b->variant) != 0)
		return 0;
	return memcmp(a->params, b->params,
		      sizeof(a->params[0]) * a->nparams) == 0;
}

/* A fresh, fully initialised entry. */
static struct fly_cache_entry *entry_new(const char *key, size_t len,
					 uint64_t hash,
					 const struct fly_decision *d,
					 uint64_t generation,
					 uint64_t checked_ns)
{
	struct fly_cache_entry *e = calloc(1, sizeof(*e));

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
	return e;
}

int fly__cache_put(struct fly_cache *c, const char *key, size_t len,
		   uint64_t hash, const struct fly_decision *d,
		   uint64_t generation, uint64_t checked_ns)
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
		e = entry_new(key, len, hash, d, generation, checked_ns);
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
			atomic_fetch_add_explicit(&c->count, 1,
						  memory_order_relaxed);
		}
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}
