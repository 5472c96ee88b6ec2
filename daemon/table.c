/*
 * table.c -- chained string-keyed hash table (see table.h).
 *
 * Owns: the bucket array.  Thread: the owner's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fly_hash.h"
#include "table.h"

static const char *key_of(const struct flyd_table *t,
			  const struct flyd_tnode *n)
{
	return (const char *)n + t->key_off;
}

static size_t index_of(const char *key, size_t nbuckets)
{
	return (size_t)fly__hash_mix(fly__hash_str(key)) & (nbuckets - 1);
}

int flyd_table_init(struct flyd_table *t, size_t nbuckets, ptrdiff_t key_off)
{
	memset(t, 0, sizeof(*t));
	t->buckets = calloc(nbuckets, sizeof(*t->buckets));
	if (t->buckets == NULL)
		return -ENOMEM;
	t->nbuckets = nbuckets;
	t->key_off = key_off;
	return 0;
}

void flyd_table_fini(struct flyd_table *t)
{
	free(t->buckets);
	t->buckets = NULL;
	t->nbuckets = 0;
	t->count = 0;
}

struct flyd_tnode *flyd_table_get(const struct flyd_table *t,
				  const char *key)
{
	struct flyd_tnode *n = t->buckets[index_of(key, t->nbuckets)];

	for (; n != NULL; n = n->next)
		if (strcmp(key_of(t, n), key) == 0)
			return n;
	return NULL;
}

/* Double the bucket array; on allocation failure keep the old one. */
static void grow(struct flyd_table *t)
{
	size_t nb = t->nbuckets * 2;
	struct flyd_tnode **b = calloc(nb, sizeof(*b));

	if (b == NULL)
		return;
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct flyd_tnode *n = t->buckets[i];

		while (n != NULL) {
			struct flyd_tnode *next = n->next;
			size_t h = index_of(key_of(t, n), nb);

			n->next = b[h];
			b[h] = n;
			n = next;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = nb;
}

void flyd_table_add(struct flyd_table *t, struct flyd_tnode *n)
{
	struct flyd_tnode **b;

	if (t->count >= t->nbuckets)
		grow(t);
	b = &t->buckets[index_of(key_of(t, n), t->nbuckets)];
	n->next = *b;
	*b = n;
	t->count++;
}

int flyd_table_del(struct flyd_table *t, struct flyd_tnode *n)
{
	struct flyd_tnode **pp =
	    &t->buckets[index_of(key_of(t, n), t->nbuckets)];

	while (*pp != NULL && *pp != n)
		pp = &(*pp)->next;
	if (*pp == NULL)
		return -ENOENT;
	*pp = n->next;
	t->count--;
	return 0;
}

void flyd_table_foreach(const struct flyd_table *t,
			void (*cb)(void *arg, struct flyd_tnode *n),
			void *arg)
{
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct flyd_tnode *n = t->buckets[i];

		while (n != NULL) {
			struct flyd_tnode *next = n->next;

			cb(arg, n);
			n = next;
		}
	}
}

void flyd_table_clear(struct flyd_table *t)
{
	memset(t->buckets, 0, t->nbuckets * sizeof(*t->buckets));
	t->count = 0;
}
