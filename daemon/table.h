/*
 * table.h -- a small chained hash table keyed by a NUL-terminated string,
 * intrusive: the owner embeds a struct flyd_tnode in its records and keeps
 * the records' memory (the queue's jobs, the results map's entries).
 *
 * Owns: the bucket array only, never a record.  Thread: the owner's.
 * Index: fly__hash_mix(fly__hash_str(key)) & (nbuckets - 1) (fly_hash.h).
 * The array doubles when the records reach its size; a failed doubling
 * keeps the old array (only slower).
 * Invariant: a key is in the table at most once (the owner checks with
 * flyd_table_get() before flyd_table_add()).
 */
#ifndef FLYD_TABLE_H
#define FLYD_TABLE_H

#include <stddef.h>

/* The record holding node @p n, a member named @p member of @p type. */
#define FLYD_CONTAINER_OF(n, type, member) \
	((type *)(void *)((char *)(n) - offsetof(type, member)))

struct flyd_tnode {
	struct flyd_tnode *next;  /* bucket chain */
};

struct flyd_table {
	struct flyd_tnode **buckets; /* nbuckets chains */
	size_t nbuckets;             /* power of two */
	size_t count;                /* records in the table */
	ptrdiff_t key_off;           /* from a record's node to its key */
};

/* Set up an empty table of @p nbuckets (a power of two) whose records
 * keep their key @p key_off bytes after their node (offsetof(rec, key) -
 * offsetof(rec, node)).  @return 0 or -ENOMEM. */
int flyd_table_init(struct flyd_table *t, size_t nbuckets, ptrdiff_t key_off);
/* Free the bucket array (the records are the owner's: free them first). */
void flyd_table_fini(struct flyd_table *t);
/* The record with @p key, or NULL. */
struct flyd_tnode *flyd_table_get(const struct flyd_table *t,
				  const char *key);
/* Insert @p n (its key set, not in the table yet). */
void flyd_table_add(struct flyd_table *t, struct flyd_tnode *n);
/* Unlink @p n.  @return 0, or -ENOENT when it is not in the table. */
int flyd_table_del(struct flyd_table *t, struct flyd_tnode *n);
/* Call @p cb on every record, in bucket order; @p cb may unlink and free
 * the record it is given (the next one is read first). */
void flyd_table_foreach(const struct flyd_table *t,
			void (*cb)(void *arg, struct flyd_tnode *n),
			void *arg);
/* Empty the table without touching the records. */
void flyd_table_clear(struct flyd_table *t);

#endif /* FLYD_TABLE_H */
