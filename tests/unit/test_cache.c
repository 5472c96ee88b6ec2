/*
 * test_cache.c -- unit tests of libflyclient's process cache
 * (client/cache.c): insert, lookup, replace, stamps (generation
 * invalidation is the caller comparing stamps), a full probe window, and
 * concurrent readers against a writer never seeing a torn entry.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "fly_key.h"

static struct fly_decision mk(uint32_t status, const char *variant,
			      int64_t p0)
{
	struct fly_decision d;

	memset(&d, 0, sizeof(d));
	d.status = status;
	snprintf(d.variant, sizeof(d.variant), "%s", variant);
	d.nparams = 2;
	d.params[0] = p0;
	d.params[1] = -p0;
	d.median_us = (double)p0;
	return d;
}

static void test_insert_lookup(void **state)
{
	struct fly_cache *c = malloc(sizeof(*c));
	const char *k = "gemm/bf16/NT/m=64,n=64,k=64";
	uint64_t h = fly_key_hash(k, strlen(k));
	struct fly_decision d = mk(FLY_STATUS_TUNED, "tiled", 32);
	const struct fly_cache_entry *e;

	(void)state;
	assert_int_equal(fly__cache_init(c), 0);
	assert_null(fly__cache_lookup(c, k, strlen(k), h, NULL));
	assert_int_equal(fly__cache_put(c, k, strlen(k), h, &d, 7, 100, 0), 0);
	e = fly__cache_lookup(c, k, strlen(k), h, NULL);
	assert_non_null(e);
	assert_string_equal(e->key, k);
	assert_string_equal(e->dec.variant, "tiled");
	assert_int_equal(e->dec.params[0], 32);
	assert_int_equal(atomic_load(&e->generation), 7);
	assert_int_equal(atomic_load(&e->checked_ns), 100);
	/* a prefix of the key, or the same hash with other bytes, misses */
	assert_null(fly__cache_lookup(c, k, strlen(k) - 1, h, NULL));
	assert_null(fly__cache_lookup(c, "gemm/bf16/NT/m=64,n=64,k=65",
				      strlen(k), h, NULL));
	fly__cache_fini(c);
	free(c);
}

static void test_replace_and_stamps(void **state)
{
	struct fly_cache *c = malloc(sizeof(*c));
	const char *k = "rmsnorm/fp16/m=8,n=4096";
	uint64_t h = fly_key_hash(k, strlen(k));
	struct fly_decision d1 = mk(FLY_STATUS_PENDING, "naive", 1);
	struct fly_decision d2 = mk(FLY_STATUS_TUNED, "vec4", 4);
	const struct fly_cache_entry *e1, *e2, *e3;

	(void)state;
	assert_int_equal(fly__cache_init(c), 0);
	assert_int_equal(fly__cache_put(c, k, strlen(k), h, &d1, 1, 10, 0), 0);
	e1 = fly__cache_lookup(c, k, strlen(k), h, NULL);
	/* same answer: stamps move, no new entry */
	assert_int_equal(fly__cache_put(c, k, strlen(k), h, &d1, 2, 20, 0), 0);
	e2 = fly__cache_lookup(c, k, strlen(k), h, NULL);
	assert_ptr_equal(e1, e2);
	assert_int_equal(atomic_load(&e2->generation), 2);
	/* generation invalidation: a caller holding stamp 2 matches, 3 not */
	assert_true(atomic_load(&e2->generation) != 3);
	/* a different answer: a new entry; the old one stays readable */
	assert_int_equal(fly__cache_put(c, k, strlen(k), h, &d2, 3, 30, 0), 0);
	e3 = fly__cache_lookup(c, k, strlen(k), h, NULL);
	assert_ptr_not_equal(e3, e1);
	assert_int_equal(e3->dec.status, FLY_STATUS_TUNED);
	assert_string_equal(e3->dec.variant, "vec4");
	assert_string_equal(e1->dec.variant, "naive"); /* retired, not freed */
	assert_int_equal(atomic_load(&c->count), 1);
	fly__cache_touch(e3, 9, 90);
	assert_int_equal(atomic_load(&e3->generation), 9);
	assert_int_equal(atomic_load(&e3->checked_ns), 90);
	fly__cache_fini(c);
	free(c);
}

static void test_probe_window_full(void **state)
{
	struct fly_cache *c = malloc(sizeof(*c));
	struct fly_decision d = mk(FLY_STATUS_TUNED, "v", 1);
	char k[64];
	int i;

	int room = -1;

	(void)state;
	assert_int_equal(fly__cache_init(c), 0);
	/* every key with the same hash: the window holds FLY_CACHE_PROBE;
	 * while it has a free slot a miss says there is room (issue 19:
	 * fly_decide skips the put, and its preparation, when there is
	 * none) */
	for (i = 0; i < FLY_CACHE_PROBE; i++) {
		snprintf(k, sizeof(k), "topk/fp32/m=%d,n=8,k=1", i + 1);
		assert_null(fly__cache_lookup(c, k, strlen(k), 42, &room));
		assert_int_equal(room, 1);
		assert_int_equal(fly__cache_put(c, k, strlen(k), 42, &d, 0, 0, 0),
				 0);
	}
	snprintf(k, sizeof(k), "topk/fp32/m=%d,n=8,k=1", i + 1);
	assert_int_equal(fly__cache_put(c, k, strlen(k), 42, &d, 0, 0, 0),
			 -ENOSPC);
	assert_null(fly__cache_lookup(c, k, strlen(k), 42, &room));
	assert_int_equal(room, 0);
	/* another hash whose window overlaps the full one only in part */
	assert_null(fly__cache_lookup(c, k, strlen(k), 42 + 5, &room));
	assert_int_equal(room, 1);
	assert_int_equal(fly__cache_put(c, k, strlen(k), 42 + 5, &d, 0, 0, 0),
			 0);
	snprintf(k, sizeof(k), "topk/fp32/m=%d,n=8,k=1", FLY_CACHE_PROBE);
	assert_non_null(fly__cache_lookup(c, k, strlen(k), 42, NULL));
	/* over-long keys are refused */
	memset(k, 'a', sizeof(k));
	assert_int_equal(fly__cache_put(c, k, FLY_KEY_MAX, 1, &d, 0, 0, 0),
			 FLY_E_KEYLEN);
	fly__cache_fini(c);
	free(c);
}

/* The entry arena (issue 19): the first FLY_CACHE_SLOTS entries come
 * from it, later ones (replaced answers) from the heap; either kind is
 * found, kept readable once retired, and freed by fini (the leak check
 * of the sanitizer builds). */
static void test_arena_then_heap(void **state)
{
	struct fly_cache *c = malloc(sizeof(*c));
	char k[64];

	(void)state;
	assert_int_equal(fly__cache_init(c), 0);
	for (uint64_t i = 0; i < FLY_CACHE_SLOTS; i++) {
		struct fly_decision d = mk(FLY_STATUS_TUNED, "a", (int64_t)i);

		snprintf(k, sizeof(k), "topk/fp32/m=%d,n=8,k=1", (int)i + 1);
		/* hash i: slot i, so every key has a slot */
		assert_int_equal(fly__cache_put(c, k, strlen(k), i, &d, 1, 0, 0),
				 0);
	}
	assert_int_equal(atomic_load(&c->count), FLY_CACHE_SLOTS);
	for (uint64_t i = 0; i < 8; i++) {
		struct fly_decision d = mk(FLY_STATUS_TUNED, "b", 100 + (int)i);
		const struct fly_cache_entry *old, *e;

		snprintf(k, sizeof(k), "topk/fp32/m=%d,n=8,k=1", (int)i + 1);
		old = fly__cache_lookup(c, k, strlen(k), i, NULL);
		assert_non_null(old);
		assert_int_equal(fly__cache_put(c, k, strlen(k), i, &d, 2, 0, 0),
				 0);
		e = fly__cache_lookup(c, k, strlen(k), i, NULL);
		assert_ptr_not_equal(e, old);
		assert_string_equal(e->dec.variant, "b");
		assert_int_equal(e->dec.params[0], 100 + (int)i);
		assert_string_equal(old->dec.variant, "a"); /* retired */
	}
	/* every other key still holds its first answer */
	for (uint64_t i = 8; i < FLY_CACHE_SLOTS; i += 97) {
		const struct fly_cache_entry *e;

		snprintf(k, sizeof(k), "topk/fp32/m=%d,n=8,k=1", (int)i + 1);
		e = fly__cache_lookup(c, k, strlen(k), i, NULL);
		assert_non_null(e);
		assert_int_equal(e->dec.params[0], (int64_t)i);
	}
	assert_int_equal(atomic_load(&c->count), FLY_CACHE_SLOTS);
	fly__cache_fini(c);
	free(c);
}

/* Concurrency: the writer flips one key between answers whose fields are
 * all derived from one number; a reader checks the derivation. */
struct race {
	struct fly_cache *c;
	_Atomic int stop;
	_Atomic long seen;
	_Atomic long torn;
};

static const char *race_key = "gemm/fp16/NN/m=128,n=128,k=128";

static void *race_reader(void *arg)
{
	struct race *r = arg;
	size_t len = strlen(race_key);
	uint64_t h = fly_key_hash(race_key, len);

	while (!atomic_load(&r->stop)) {
		const struct fly_cache_entry *e =
			fly__cache_lookup(r->c, race_key, len, h, NULL);
		char want[FLY_VARIANT_MAX];
		int64_t v;

		if (e == NULL)
			continue;
		v = e->dec.params[0];
		snprintf(want, sizeof(want), "v%lld", (long long)v);
		if (e->dec.params[1] != -v || e->dec.median_us != (double)v ||
		    strcmp(e->dec.variant, want) != 0)
			atomic_fetch_add(&r->torn, 1);
		atomic_fetch_add(&r->seen, 1);
	}
	return NULL;
}

static void test_concurrent_readers(void **state)
{
	struct race r = { 0 };
	pthread_t th[2];
	size_t len = strlen(race_key);
	uint64_t h = fly_key_hash(race_key, len);
	char name[FLY_VARIANT_MAX];

	(void)state;
	r.c = malloc(sizeof(*r.c));
	assert_int_equal(fly__cache_init(r.c), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, race_reader, &r),
				 0);
	for (int i = 1; i <= 20000; i++) {
		struct fly_decision d;

		snprintf(name, sizeof(name), "v%d", i);
		d = mk(FLY_STATUS_TUNED, name, i);
		assert_int_equal(fly__cache_put(r.c, race_key, len, h, &d,
						(uint64_t)i, 0, 0), 0);
	}
	for (int i = 0; i < 5000 && atomic_load(&r.seen) == 0; i++)
		usleep(1000); /* let a reader see at least one entry */
	atomic_store(&r.stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&r.torn), 0);
	assert_true(atomic_load(&r.seen) > 0);
	assert_string_equal(fly__cache_lookup(r.c, race_key, len, h, NULL)->dec.variant,
			    "v20000");
	fly__cache_fini(r.c);
	free(r.c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_insert_lookup),
		cmocka_unit_test(test_replace_and_stamps),
		cmocka_unit_test(test_probe_window_full),
		cmocka_unit_test(test_arena_then_heap),
		cmocka_unit_test(test_concurrent_readers),
	};

	return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
