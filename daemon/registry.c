/*
 * registry.c -- the daemon's copy of the worker's kernel registry (see
 * registry.h).
 *
 * Owns: the entry array.  Thread: loop thread.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fly_key.h"
#include "registry.h"

void flyd_reg_variant_from(const struct flyk_variant *v,
			   struct flyd_reg_variant *out)
{
	uint32_t np = v->nparams < FLY_PARAMS_MAX ? v->nparams
						  : FLY_PARAMS_MAX;

	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", v->name);
	out->op = v->op;
	out->dtypes = v->dtypes;
	out->flags = v->flags;
	out->nparams = np;
	out->enumerated = v->enumerate != NULL;
	for (uint32_t i = 0; i < np && !out->enumerated; i++) {
		const struct flyk_param *pp = &v->params[i];

		out->nvals[i] = pp->nvals;
		for (uint32_t j = 0; j < pp->nvals && j < FLYD_REG_VALS_MAX;
		     j++)
			out->vals[i][j] = pp->vals[j];
	}
}

int flyd_registry_add(struct flyd_registry *r,
		      const struct flyd_reg_variant *e)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 32;
		struct flyd_reg_variant *v;

		if (r->n >= FLYD_REG_MAX)
			return -ENOSPC;
		v = realloc(r->v, cap * sizeof(*v));
		if (v == NULL)
			return -ENOMEM;
		r->v = v;
		r->cap = cap;
	}
	r->v[r->n] = *e;
	r->v[r->n].name[FLY_VARIANT_MAX - 1] = '\0';
	r->n++;
	return 0;
}

void flyd_registry_clear(struct flyd_registry *r)
{
	free(r->v);
	memset(r, 0, sizeof(*r));
}

void flyd_registry_move(struct flyd_registry *to, struct flyd_registry *from)
{
	flyd_registry_clear(to);
	*to = *from;
	memset(from, 0, sizeof(*from));
}

static const struct flyd_reg_variant *find(const struct flyd_registry *r,
					   uint32_t op, const char *name)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->v[i].op == op && strcmp(r->v[i].name, name) == 0)
			return &r->v[i];
	return NULL;
}

/* Whether value @p x is in parameter @p i's space (an over-long space is
 * not kept whole: unchecked). */
static int in_space(const struct flyd_reg_variant *e, uint32_t i, int64_t x)
{
	if (e->nvals[i] > FLYD_REG_VALS_MAX)
		return 1;
	for (uint32_t j = 0; j < e->nvals[i]; j++)
		if (e->vals[i][j] == x)
			return 1;
	return 0;
}

int flyd_registry_check(const struct flyd_registry *r,
			const struct fly_problem *p,
			const struct fly_decision *d, char *why, size_t cap)
{
	const struct flyd_reg_variant *e = find(r, p->op, d->variant);

	if (e == NULL) {
		snprintf(why, cap, "variant \"%s\" is not a %s variant of "
			 "this backend", d->variant, fly_op_name(p->op));
		return -ENOENT;
	}
	if (p->dtype >= 32 || !(e->dtypes & (1u << p->dtype)) ||
	    (p->flags & ~e->flags) != 0) {
		snprintf(why, cap, "variant \"%s\" does not support the key's "
			 "dtype or flags", d->variant);
		return -EINVAL;
	}
	if (d->nparams != e->nparams) {
		snprintf(why, cap, "variant \"%s\" takes %u parameters, not %u",
			 d->variant, e->nparams, d->nparams);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < e->nparams && !e->enumerated; i++)
		if (!in_space(e, i, d->params[i])) {
			snprintf(why, cap, "params[%u] = %" PRId64 " is "
				 "outside variant \"%s\"'s space", i,
				 d->params[i], d->variant);
			return -EINVAL;
		}
	return 0;
}
