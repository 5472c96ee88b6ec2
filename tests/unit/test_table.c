/*
 * test_table.c -- the chained string table (daemon/table.c) and the one
 * hash it indexes with (proto/fly_hash.c): lookups across doublings,
 * unlinking, iteration that frees, an even spread of keys that differ
 * only in a digit, and the hash's FNV-1a test vectors.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fly_hash.h"
#include "fly_key.h"
#include "table.h"

struct rec {
	int value;
	struct flyd_tnode node;
	char key[64];
};

static struct rec *rec_of(struct flyd_tnode *n)
{
	return n != NULL ? FLYD_CONTAINER_OF(n, struct rec, node) : NULL;
}

static void table_new(struct flyd_table *t, size_t nb)
{
	assert_int_equal(flyd_table_init(t, nb, offsetof(struct rec, key) -
					 offsetof(struct rec, node)), 0);
}

static struct rec *rec_add(struct flyd_table *t, const char *fmt, int i)
{
	struct rec *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	snprintf(r->key, sizeof(r->key), fmt, i);
	r->value = i;
	assert_null(flyd_table_get(t, r->key));
	flyd_table_add(t, &r->node);
	return r;
}

static void free_rec(void *arg, struct flyd_tnode *n)
{
	int *count = arg;

	if (count != NULL)
		(*count)++;
	free(rec_of(n));
}

static void test_grow_get_del(void **state)
{
	struct flyd_table t;
	char key[64];

	(void)state;
	table_new(&t, 4);
	for (int i = 0; i < 1000; i++)
		rec_add(&t, "gemm/bf16/NT/m=%d,n=4096,k=4096", i);
	assert_int_equal(t.count, 1000);
	assert_true(t.nbuckets >= 1000);
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "gemm/bf16/NT/m=%d,n=4096,k=4096", i);
		assert_int_equal(rec_of(flyd_table_get(&t, key))->value, i);
	}
	assert_null(flyd_table_get(&t, "gemm/bf16/NT/m=1000,n=4096,k=4096"));
	for (int i = 0; i < 1000; i += 2) {
		struct flyd_tnode *n;

		snprintf(key, sizeof(key), "gemm/bf16/NT/m=%d,n=4096,k=4096", i);
		n = flyd_table_get(&t, key);
		assert_int_equal(flyd_table_del(&t, n), 0);
		assert_int_equal(flyd_table_del(&t, n), -ENOENT);
		free(rec_of(n));
	}
	assert_int_equal(t.count, 500);
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "gemm/bf16/NT/m=%d,n=4096,k=4096", i);
		if (i % 2 == 0)
			assert_null(flyd_table_get(&t, key));
		else
			assert_int_equal(rec_of(flyd_table_get(&t, key))->value,
					 i);
	}
	{
		int freed = 0;

		flyd_table_foreach(&t, free_rec, &freed);
		assert_int_equal(freed, 500);
	}
	flyd_table_clear(&t);
	assert_int_equal(t.count, 0);
	assert_null(flyd_table_get(&t, "gemm/bf16/NT/m=1,n=4096,k=4096"));
	flyd_table_fini(&t);
}

/* 4096 keys differing only in their last digits, in 4096 buckets: the
 * longest chain stays short (5 measured; a uniform hash gives ~6). */
static void test_spread(void **state)
{
	enum { N = 4096 };
	struct flyd_table t;
	size_t longest = 0;

	(void)state;
	table_new(&t, N);
	for (int i = 0; i < N; i++)
		rec_add(&t, "rmsnorm/fp16/m=8192,n=%d", i + 1);
	assert_int_equal(t.nbuckets, N);
	for (size_t b = 0; b < t.nbuckets; b++) {
		size_t len = 0;

		for (struct flyd_tnode *n = t.buckets[b]; n; n = n->next)
			len++;
		if (len > longest)
			longest = len;
	}
	assert_true(longest <= 8);
	flyd_table_foreach(&t, free_rec, NULL);
	flyd_table_fini(&t);
}

/* The one hash is FNV-1a 64: the published test vectors, the key hash
 * and the string form agree, and concatenation composes. */
static void test_hash_vectors(void **state)
{
	(void)state;
	assert_true(fly__hash("", 0) == 0xcbf29ce484222325ull);
	assert_true(fly__hash("a", 1) == 0xaf63dc4c8601ec8cull);
	assert_true(fly__hash("foobar", 6) == 0x85944171f73967e8ull);
	assert_true(fly__hash_str("foobar") == 0x85944171f73967e8ull);
	assert_true(fly_key_hash("foobar", 6) == 0x85944171f73967e8ull);
	assert_true(fly__hash_more(fly__hash("foo", 3), "bar", 3) ==
		    0x85944171f73967e8ull);
	assert_true(fly__hash_mix(0) == 0);
	assert_true(fly__hash_mix(1) != 1);
	assert_true(fly__hash_fold32(0x0000000100000002ull) == 3u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grow_get_del),
		cmocka_unit_test(test_spread),
		cmocka_unit_test(test_hash_vectors),
	};

	return cmocka_run_group_tests_name("table", tests, NULL, NULL);
}
