/*
 * decide.c -- tuned-results map, neighbour search, defaults (decide.h).
 *
 * Owns: the entries, a table of them by key (table.h) and, per class
 * (op, dtype, layout, flags), a list of the class's entries so a
 * neighbour search scans only comparable problems.  Thread: loop thread only.
 * Invariant: every entry is in the key table and in exactly one class
 * list; a class record lives while its list is non-empty.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decide.h"
#include "fly_hash.h"
#include "flyk.h"
#include "table.h"

struct rclass;

/* A decision, compact: the map holds every tuned key of the device, so
 * its entry size is the daemon's RSS per key (measured: 344-byte entries
 * put 100,000 keys at 73 MiB; this layout and the key at its own length
 * save ~115 bytes a key). */
struct rdec {
	const char *variant;      /* interned in the map's name table */
	int64_t params[FLY_PARAMS_MAX];
	double median_us;
	uint8_t status;
	uint8_t provisional;
	uint8_t nparams;
};

struct rentry {
	struct flyd_tnode node;   /* in the map's table by key */
	struct rentry *cprev;     /* class list */
	struct rentry *cnext;
	struct rclass *cls;
	struct fly_problem p;
	struct rdec d;
	char key[];               /* NUL-terminated */
};

struct rclass {
	uint32_t op, dtype, layout, flags;
	struct rentry *head;
	struct rclass *hnext;     /* class hash chain */
};

struct flyd_rmap {
	struct flyd_table keys;   /* every entry, by key (table.h) */
	size_t ncbuckets;         /* class buckets, fixed */
	struct rclass **cbuckets;
	char **names;             /* interned variant names (few) */
	size_t nnames;
	size_t cap_names;
	struct fly_decision out;  /* what flyd_rmap_get() lends */
};

/* The map's copy of a variant name, shared by every entry naming it.
 * @return NULL on -ENOMEM. */
static const char *intern(struct flyd_rmap *m, const char *name)
{
	char **grown;

	for (size_t i = 0; i < m->nnames; i++)
		if (strcmp(m->names[i], name) == 0)
			return m->names[i];
	if (m->nnames == m->cap_names) {
		size_t cap = m->cap_names ? m->cap_names * 2 : 16;

		grown = realloc(m->names, cap * sizeof(*grown));
		if (grown == NULL)
			return NULL;
		m->names = grown;
		m->cap_names = cap;
	}
	m->names[m->nnames] = strdup(name);
	return m->names[m->nnames] != NULL ? m->names[m->nnames++] : NULL;
}

static int pack(struct flyd_rmap *m, const struct fly_decision *d,
		struct rdec *out)
{
	char name[FLY_VARIANT_MAX];

	snprintf(name, sizeof(name), "%s", d->variant);
	out->variant = intern(m, name);
	if (out->variant == NULL)
		return -ENOMEM;
	memcpy(out->params, d->params, sizeof(out->params));
	out->median_us = d->median_us;
	out->status = (uint8_t)d->status;
	out->provisional = (uint8_t)d->provisional;
	out->nparams = (uint8_t)(d->nparams < FLY_PARAMS_MAX ? d->nparams
							     : FLY_PARAMS_MAX);
	return 0;
}

static void unpack(const struct rdec *r, struct fly_decision *out)
{
	memset(out, 0, sizeof(*out));
	out->status = r->status;
	out->provisional = r->provisional;
	snprintf(out->variant, sizeof(out->variant), "%s", r->variant);
	out->nparams = r->nparams;
	memcpy(out->params, r->params, sizeof(out->params));
	out->median_us = r->median_us;
}

#define RMAP_CBUCKETS 256

static struct rentry *entry_of(struct flyd_tnode *n)
{
	return n != NULL ? FLYD_CONTAINER_OF(n, struct rentry, node) : NULL;
}

static size_t class_hash(const struct fly_problem *p)
{
	uint32_t c[4] = {p->op, p->dtype, p->layout, p->flags};

	return (size_t)fly__hash_mix(fly__hash(c, sizeof(c))) &
	       (RMAP_CBUCKETS - 1);
}

static int same_class(const struct rclass *c, const struct fly_problem *p)
{
	return c->op == p->op && c->dtype == p->dtype &&
	       c->layout == p->layout && c->flags == p->flags;
}

int flyd_rmap_new(struct flyd_rmap **out)
{
	struct flyd_rmap *m;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (m == NULL)
		return -ENOMEM;
	m->ncbuckets = RMAP_CBUCKETS;
	m->cbuckets = calloc(m->ncbuckets, sizeof(*m->cbuckets));
	if (m->cbuckets == NULL ||
	    flyd_table_init(&m->keys, 1024,
			    offsetof(struct rentry, key) -
			    offsetof(struct rentry, node)) < 0) {
		free(m->cbuckets);
		free(m);
		return -ENOMEM;
	}
	*out = m;
	return 0;
}

void flyd_rmap_free(struct flyd_rmap *m)
{
	if (m == NULL)
		return;
	flyd_rmap_clear(m);
	for (size_t i = 0; i < m->nnames; i++)
		free(m->names[i]);
	free(m->names);
	flyd_table_fini(&m->keys);
	free(m->cbuckets);
	free(m);
}

static void free_entry(void *arg, struct flyd_tnode *n)
{
	(void)arg;
	free(entry_of(n));
}

void flyd_rmap_clear(struct flyd_rmap *m)
{
	flyd_table_foreach(&m->keys, free_entry, NULL);
	flyd_table_clear(&m->keys);
	for (size_t i = 0; i < m->ncbuckets; i++) {
		struct rclass *c = m->cbuckets[i];

		while (c != NULL) {
			struct rclass *n = c->hnext;

			free(c);
			c = n;
		}
		m->cbuckets[i] = NULL;
	}
}

size_t flyd_rmap_count(const struct flyd_rmap *m)
{
	return m->keys.count;
}

static struct rentry *find(const struct flyd_rmap *m, const char *key)
{
	return entry_of(flyd_table_get(&m->keys, key));
}

const struct fly_decision *flyd_rmap_get(struct flyd_rmap *m,
					 const char *key)
{
	struct rentry *e = find(m, key);

	if (e == NULL)
		return NULL;
	unpack(&e->d, &m->out);
	return &m->out;
}

/* The class record of @p p, created when @p create. */
static struct rclass *class_get(struct flyd_rmap *m,
				const struct fly_problem *p, int create)
{
	struct rclass **b = &m->cbuckets[class_hash(p)];
	struct rclass *c;

	for (c = *b; c != NULL; c = c->hnext)
		if (same_class(c, p))
			return c;
	if (!create)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return NULL;
	c->op = p->op;
	c->dtype = p->dtype;
	c->layout = p->layout;
	c->flags = p->flags;
	c->hnext = *b;
	*b = c;
	return c;
}

static void class_unlink(struct flyd_rmap *m, struct rentry *e)
{
	struct rclass *c = e->cls;

	if (e->cprev != NULL)
		e->cprev->cnext = e->cnext;
	else
		c->head = e->cnext;
	if (e->cnext != NULL)
		e->cnext->cprev = e->cprev;
	if (c->head == NULL) {
		struct rclass **pp = &m->cbuckets[class_hash(&e->p)];

		while (*pp != c)
			pp = &(*pp)->hnext;
		*pp = c->hnext;
		free(c);
	}
	e->cls = NULL;
}

static void class_link(struct rclass *c, struct rentry *e)
{
	e->cls = c;
	e->cprev = NULL;
	e->cnext = c->head;
	if (c->head != NULL)
		c->head->cprev = e;
	c->head = e;
}

int flyd_rmap_put(struct flyd_rmap *m, const char *key,
		  const struct fly_problem *p, const struct fly_decision *d)
{
	size_t len = strlen(key);
	struct rentry *e;
	struct rclass *c;
	struct rdec rd;

	if (len >= FLY_KEY_MAX)
		return FLY_E_KEYLEN;
	if (pack(m, d, &rd) < 0)
		return -ENOMEM;
	e = find(m, key);
	if (e != NULL) {
		class_unlink(m, e);
		e->p = *p;
		e->d = rd;
		c = class_get(m, p, 1);
		if (c == NULL)
			abort(); /* a few bytes; the daemon's OOM policy */
		class_link(c, e);
		return 1;
	}
	e = calloc(1, sizeof(*e) + len + 1);
	if (e == NULL)
		return -ENOMEM;
	c = class_get(m, p, 1);
	if (c == NULL) {
		free(e);
		return -ENOMEM;
	}
	memcpy(e->key, key, len + 1);
	e->p = *p;
	e->d = rd;
	class_link(c, e);
	flyd_table_add(&m->keys, &e->node);
	return 0;
}

int flyd_rmap_del(struct flyd_rmap *m, const char *key)
{
	struct rentry *e = find(m, key);

	if (e == NULL)
		return FLY_E_NOTFOUND;
	(void)flyd_table_del(&m->keys, &e->node);
	class_unlink(m, e);
	free(e);
	return 0;
}

double flyd_problem_distance(const struct fly_problem *a,
			     const struct fly_problem *b)
{
	double dist = 0.0;

	for (int i = 0; i < FLY_DIMS_MAX; i++) {
		int64_t x = a->dims[i], y = b->dims[i];

		if (x == 0 && y == 0)
			continue;
		if (x <= 0 || y <= 0)
			return -1.0;
		dist += fabs(log2((double)x) - log2((double)y));
	}
	return dist;
}

int flyd_rmap_nearest(const struct flyd_rmap *m, const char *key,
		      const struct fly_problem *p, struct fly_decision *out,
		      char *nkey)
{
	struct rclass *c = class_get((struct flyd_rmap *)m, p, 0);
	const struct rentry *best = NULL;
	double best_d = 0.0;

	if (c == NULL)
		return FLY_E_NOTFOUND;
	for (const struct rentry *e = c->head; e != NULL; e = e->cnext) {
		double dist;

		if (key != NULL && strcmp(e->key, key) == 0)
			continue;
		dist = flyd_problem_distance(p, &e->p);
		if (dist < 0)
			continue;
		/* Exact comparison is fine: distances are sums of the same
		 * log2 terms computed the same way on one machine. */
		if (best == NULL || dist < best_d ||
		    (dist == best_d && strcmp(e->key, best->key) < 0)) {
			best = e;
			best_d = dist;
		}
	}
	if (best == NULL)
		return FLY_E_NOTFOUND;
	unpack(&best->d, out);
	out->provisional = 1;
	if (nkey != NULL)
		memcpy(nkey, best->key, strlen(best->key) + 1);
	return 0;
}

int flyd_decide_default(const struct flyk_backend *b,
			const struct fly_problem *p, struct fly_decision *out)
{
	int rc;

	memset(out, 0, sizeof(*out));
	if (b == NULL)
		return 0;
	rc = flyk_default(b, NULL, p, out);
	if (rc < 0) {
		memset(out, 0, sizeof(*out));
		return -EOPNOTSUPP;
	}
	out->status = FLY_STATUS_DEFAULT;
	out->provisional = 0;
	out->median_us = 0.0;
	return 0;
}
