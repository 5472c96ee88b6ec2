/*
 * decide.c -- tuned-results map, neighbour search, defaults (decide.h).
 *
 * Owns: the entries (compact records: key, packed dims and params, an
 * interned variant), a table of them by key (table.h) and, per class
 * (op, dtype, layout, flags), an array of the class's entries so a
 * neighbour search scans only comparable problems.  Thread: loop thread only.
 * Invariant: every entry is in the key table and in exactly one class
 * array, at its cpos; a class record lives while its array is non-empty.
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
#include "fly_key.h"
#include "flyk.h"
#include "table.h"

struct rclass;

/* One tuned key, compact: the map holds every tuned key of the device, so
 * its entry size is the daemon's heap per key (issue 19: a parsed
 * fly_problem, a fixed params array and two list pointers an entry came
 * to ~250 bytes, 243 MiB of heap at 1M keys against a 256 MiB RSS
 * target).  After the fixed fields, data[] holds the key (NUL-terminated,
 * klen bytes before the NUL), then the problem's dims and the decision's
 * params as varints (pack_rec()); the variant is an index into the map's
 * interned names. */
struct rentry {
	struct flyd_tnode node;   /* in the map's table by key */
	struct rclass *cls;       /* the class whose array holds it */
	double median_us;         /* the decision's median, exact */
	uint32_t cpos;            /* its index in cls->ents */
	uint32_t variant;         /* index into the map's names */
	uint8_t status;           /* enum fly_status */
	uint8_t provisional;
	uint8_t nparams;          /* the decision's nparams (<= 8) */
	uint8_t klen;             /* strlen(key) < FLY_KEY_MAX */
	char data[];              /* key, NUL, packed dims and params */
};

/* Every entry of one (op, dtype, layout, flags), in an array: a
 * neighbour search scans only comparable problems. */
struct rclass {
	uint32_t op, dtype, layout, flags;
	struct rentry **ents;     /* n entries, each with cpos = its index */
	uint32_t n;
	uint32_t cap;
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

/* The index of the map's copy of a variant name, shared by every entry
 * naming it.  @return the index, or -ENOMEM. */
static int64_t intern(struct flyd_rmap *m, const char *name)
{
	char **grown;

	for (size_t i = 0; i < m->nnames; i++)
		if (strcmp(m->names[i], name) == 0)
			return (int64_t)i;
	if (m->nnames == m->cap_names) {
		size_t cap = m->cap_names ? m->cap_names * 2 : 16;

		if (cap > UINT32_MAX)
			return -ENOMEM;
		grown = realloc(m->names, cap * sizeof(*grown));
		if (grown == NULL)
			return -ENOMEM;
		m->names = grown;
		m->cap_names = cap;
	}
	m->names[m->nnames] = strdup(name);
	if (m->names[m->nnames] == NULL)
		return -ENOMEM;
	return (int64_t)m->nnames++;
}

/* The most bytes pack_rec() writes: two counts, 16 varints of 10. */
#define RMAP_PACK_MAX (2 + (FLY_DIMS_MAX + FLY_PARAMS_MAX) * 10)

/* Write @p v zigzag-encoded as a varint at @p b.  @return bytes written. */
static size_t put_varint(uint8_t *b, int64_t v)
{
	uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
	size_t n = 0;

	while (z >= 0x80) {
		b[n++] = (uint8_t)(z | 0x80);
		z >>= 7;
	}
	b[n++] = (uint8_t)z;
	return n;
}

/* Read a varint written by put_varint() at @p b into @p v.
 * @return bytes read. */
static size_t get_varint(const uint8_t *b, int64_t *v)
{
	uint64_t z = 0;
	size_t n = 0;
	unsigned shift = 0;

	do {
		z |= (uint64_t)(b[n] & 0x7f) << shift;
		shift += 7;
	} while (b[n++] & 0x80);
	*v = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
	return n;
}

/* Write a count (the values up to the last non-zero one of @p v[0..max))
 * then those values.  @return bytes written. */
static size_t pack_vals(uint8_t *b, const int64_t *v, int max)
{
	int cnt = max;
	size_t n = 1;

	while (cnt > 0 && v[cnt - 1] == 0)
		cnt--;
	b[0] = (uint8_t)cnt;
	for (int i = 0; i < cnt; i++)
		n += put_varint(b + n, v[i]);
	return n;
}

/* Read what pack_vals() wrote into @p v[0..max) (the rest 0).
 * @return bytes read. */
static size_t unpack_vals(const uint8_t *b, int64_t *v, int max)
{
	int cnt = b[0];
	size_t n = 1;

	for (int i = 0; i < max; i++)
		v[i] = 0;
	for (int i = 0; i < cnt && i < max; i++)
		n += get_varint(b + n, &v[i]);
	return n;
}

/* The packed dims (then params) of @p e: after its key's NUL. */
static const uint8_t *packed_of(const struct rentry *e)
{
	return (const uint8_t *)e->data + e->klen + 1;
}

/* @p e's dims into @p p (class fields from its class). */
static void unpack_problem(const struct rentry *e, struct fly_problem *p)
{
	p->op = e->cls->op;
	p->dtype = e->cls->dtype;
	p->layout = e->cls->layout;
	p->flags = e->cls->flags;
	(void)unpack_vals(packed_of(e), p->dims, FLY_DIMS_MAX);
}

/* The bytes pack_vals() wrote at @p b. */
static size_t skip_vals(const uint8_t *b)
{
	int cnt = b[0];
	size_t n = 1;

	for (int i = 0; i < cnt; i++)
		while (b[n++] & 0x80)
			;
	return n;
}

static void unpack(const struct flyd_rmap *m, const struct rentry *e,
		   struct fly_decision *out)
{
	const uint8_t *b = packed_of(e);

	memset(out, 0, sizeof(*out));
	out->status = e->status;
	out->provisional = e->provisional;
	snprintf(out->variant, sizeof(out->variant), "%s",
		 m->names[e->variant]);
	out->nparams = e->nparams;
	(void)unpack_vals(b + skip_vals(b), out->params, FLY_PARAMS_MAX);
	out->median_us = e->median_us;
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
			    offsetof(struct rentry, data) -
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

void flyd_rmap_clear(struct flyd_rmap *m)
{
	for (size_t i = 0; i < m->ncbuckets; i++) {
		struct rclass *c = m->cbuckets[i];

		while (c != NULL) {
			struct rclass *n = c->hnext;

			for (uint32_t j = 0; j < c->n; j++)
				free(c->ents[j]);
			free(c->ents);
			free(c);
			c = n;
		}
		m->cbuckets[i] = NULL;
	}
	flyd_table_clear(&m->keys);
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
	unpack(m, e, &m->out);
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

/* Free class @p c when it holds no entry (a class record lives while it
 * has entries). */
static void class_drop_if_empty(struct flyd_rmap *m, struct rclass *c)
{
	struct fly_problem cp;
	struct rclass **pp;

	if (c->n > 0)
		return;
	cp.op = c->op;
	cp.dtype = c->dtype;
	cp.layout = c->layout;
	cp.flags = c->flags;
	pp = &m->cbuckets[class_hash(&cp)];
	while (*pp != c)
		pp = &(*pp)->hnext;
	*pp = c->hnext;
	free(c->ents);
	free(c);
}

/* Take @p e out of its class's array (the last entry moves into its
 * place); an emptied class is freed. */
static void class_unlink(struct flyd_rmap *m, struct rentry *e)
{
	struct rclass *c = e->cls;

	c->ents[e->cpos] = c->ents[c->n - 1];
	c->ents[e->cpos]->cpos = e->cpos;
	c->n--;
	e->cls = NULL;
	class_drop_if_empty(m, c);
}

/* Append @p e to class @p c's array.  @return 0 or -ENOMEM. */
static int class_link(struct rclass *c, struct rentry *e)
{
	if (c->n == c->cap) {
		uint32_t cap = c->cap ? c->cap * 2 : 8;
		struct rentry **grown;

		if (cap < c->cap)
			return -ENOMEM;
		grown = realloc(c->ents, (size_t)cap * sizeof(*grown));
		if (grown == NULL)
			return -ENOMEM;
		c->ents = grown;
		c->cap = cap;
	}
	e->cls = c;
	e->cpos = c->n;
	c->ents[c->n++] = e;
	return 0;
}

/* A new entry for @p key, @p p and @p d, in no table or class yet.
 * @return NULL on -ENOMEM. */
static struct rentry *entry_new(struct flyd_rmap *m, const char *key,
				size_t len, const struct fly_problem *p,
				const struct fly_decision *d)
{
	char name[FLY_VARIANT_MAX];
	uint8_t packed[RMAP_PACK_MAX];
	size_t np;
	int64_t vi;
	struct rentry *e;

	snprintf(name, sizeof(name), "%s", d->variant);
	vi = intern(m, name);
	if (vi < 0)
		return NULL;
	np = pack_vals(packed, p->dims, FLY_DIMS_MAX);
	np += pack_vals(packed + np, d->params, FLY_PARAMS_MAX);
	e = malloc(offsetof(struct rentry, data) + len + 1 + np);
	if (e == NULL)
		return NULL;
	memset(e, 0, offsetof(struct rentry, data));
	e->median_us = d->median_us;
	e->variant = (uint32_t)vi;
	e->status = (uint8_t)d->status;
	e->provisional = (uint8_t)d->provisional;
	e->nparams = (uint8_t)(d->nparams < FLY_PARAMS_MAX ? d->nparams
							   : FLY_PARAMS_MAX);
	e->klen = (uint8_t)len;
	memcpy(e->data, key, len + 1);
	memcpy(e->data + len + 1, packed, np);
	return e;
}

/* Unlink @p e from the key table and its class, and free it. */
static void entry_drop(struct flyd_rmap *m, struct rentry *e)
{
	(void)flyd_table_del(&m->keys, &e->node);
	class_unlink(m, e);
	free(e);
}

int flyd_rmap_put(struct flyd_rmap *m, const char *key,
		  const struct fly_problem *p, const struct fly_decision *d)
{
	size_t len = strlen(key);
	struct rentry *e, *old;
	struct rclass *c;

	if (len >= FLY_KEY_MAX)
		return FLY_E_KEYLEN;
	e = entry_new(m, key, len, p, d);
	if (e == NULL)
		return -ENOMEM;
	c = class_get(m, p, 1);
	if (c == NULL || class_link(c, e) < 0) {
		if (c != NULL)
			class_drop_if_empty(m, c);
		free(e);
		return -ENOMEM;
	}
	/* the entry's size follows its key and values: a replaced one is
	 * dropped, the new one added */
	old = find(m, key);
	if (old != NULL)
		entry_drop(m, old);
	flyd_table_add(&m->keys, &e->node);
	return old != NULL;
}

int flyd_rmap_del(struct flyd_rmap *m, const char *key)
{
	struct rentry *e = find(m, key);

	if (e == NULL)
		return FLY_E_NOTFOUND;
	entry_drop(m, e);
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
	struct fly_problem q;

	if (c == NULL)
		return FLY_E_NOTFOUND;
	for (uint32_t i = 0; i < c->n; i++) {
		const struct rentry *e = c->ents[i];
		double dist;

		if (key != NULL && strcmp(e->data, key) == 0)
			continue;
		unpack_problem(e, &q);
		dist = flyd_problem_distance(p, &q);
		if (dist < 0)
			continue;
		/* Exact comparison is fine: distances are sums of the same
		 * log2 terms computed the same way on one machine; the
		 * smallest (distance, key) wins whatever the scan order. */
		if (best == NULL || dist < best_d ||
		    (dist == best_d && strcmp(e->data, best->data) < 0)) {
			best = e;
			best_d = dist;
		}
	}
	if (best == NULL)
		return FLY_E_NOTFOUND;
	unpack(m, best, out);
	out->provisional = 1;
	if (nkey != NULL)
		memcpy(nkey, best->data, (size_t)best->klen + 1);
	return 0;
}

int flyd_decide_default(const struct flyk_backend *b,
			const struct fly_problem *p, struct fly_decision *out)
{
	struct fly_problem shape = *p;
	int rc;

	memset(out, 0, sizeof(*out));
	if (b == NULL)
		return 0;
	fly_problem_shape(&shape); /* the kernels never see FLY_F_EXACT */
	rc = flyk_default(b, NULL, &shape, out);
	if (rc < 0) {
		memset(out, 0, sizeof(*out));
		return -EOPNOTSUPP;
	}
	out->status = FLY_STATUS_DEFAULT;
	out->provisional = 0;
	out->median_us = 0.0;
	return 0;
}
