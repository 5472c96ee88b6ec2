/*
 * flyk.c -- backend-independent helpers of the kernels' C ABI: finding a
 * variant, matching it to a problem, the heuristic default and the
 * checked launch.  Also compiled into the GPU shared libraries, so it knows
 * nothing about any one backend.
 *
 * Owns: nothing.  Thread: any (reads only immutable variant tables).
 *
 * The default: the op's preferred variant (topk: topk_heap for k <= 64,
 * else topk_select; others: the first non-reference, non-test variant in
 * table order), at the first feasible point of its space searched with
 * each parameter's values ranked by preference: "threads" largest first,
 * every other parameter its middle value first, then outward.  The
 * reference is the last resort; test-only variants ("test_*") never.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "flyk.h"

#define RANK_MAX 64

const struct flyk_variant *flyk_variant_find(const struct flyk_backend *b,
					     uint32_t op, const char *name)
{
	if (!b || !name)
		return NULL;
	for (size_t i = 0; i < b->nvariants; i++) {
		const struct flyk_variant *v = &b->variants[i];

		if (v->op == op && strcmp(v->name, name) == 0)
			return v;
	}
	return NULL;
}

int flyk_variant_supports(const struct flyk_variant *v,
			  const struct fly_problem *p)
{
	if (!v || !p || v->op != p->op || p->dtype >= 32)
		return 0;
	if (!(v->dtypes & (1u << p->dtype)))
		return 0;
	return (p->flags & ~v->flags) == 0;
}

/* Order of value indices for one parameter, most preferred first. */
static void rank_values(const struct flyk_param *pp, uint32_t *order)
{
	uint32_t n = pp->nvals < RANK_MAX ? pp->nvals : RANK_MAX;
	uint32_t mid = n / 2, k = 0;

	if (strcmp(pp->name, "threads") == 0) {
		for (uint32_t i = 0; i < n; i++)
			order[i] = n - 1 - i;
		return;
	}
	order[k++] = mid;
	for (uint32_t d = 1; k < n; d++) {
		if (mid + d < n)
			order[k++] = mid + d;
		if (d <= mid && k < n)
			order[k++] = mid - d;
	}
}

/* First feasible point of @p v for @p p in preference order, into @p out.
 * @return 0 or -ENOENT. */
static int first_feasible(const struct flyk_variant *v,
			  const struct flyk_device *dev,
			  const struct fly_problem *p, int64_t *out)
{
	uint32_t order[FLY_PARAMS_MAX][RANK_MAX];
	uint32_t pos[FLY_PARAMS_MAX] = { 0 };
	uint32_t np = v->nparams < FLY_PARAMS_MAX ? v->nparams : FLY_PARAMS_MAX;

	if (v->enumerate) {
		int64_t cand[16][FLY_PARAMS_MAX];
		int n = v->enumerate(dev, p, cand, 16);

		for (int i = 0; i < n; i++)
			if (v->feasible(dev, p, cand[i]) == 0) {
				memcpy(out, cand[i], sizeof(cand[i]));
				return 0;
			}
		return -ENOENT;
	}
	for (uint32_t i = 0; i < np; i++) {
		if (v->params[i].nvals == 0)
			return -ENOENT;
		rank_values(&v->params[i], order[i]);
	}
	for (;;) {
		uint32_t i;

		for (i = 0; i < np; i++)
			out[i] = v->params[i].vals[order[i][pos[i]]];
		if (v->feasible(dev, p, out) == 0)
			return 0;
		/* odometer, last parameter fastest */
		for (i = np; i > 0; i--) {
			uint32_t lim = v->params[i - 1].nvals < RANK_MAX ?
				v->params[i - 1].nvals : RANK_MAX;

			if (++pos[i - 1] < lim)
				break;
			pos[i - 1] = 0;
		}
		if (i == 0)
			return -ENOENT;
	}
}

static const char *preferred_name(const struct fly_problem *p)
{
	if (p->op == FLY_OP_TOPK)
		return p->dims[2] <= 64 ? "topk_heap" : "topk_select";
	if (p->op == FLY_OP_RMSNORM)
		return "rms_vec";
	if (p->op == FLY_OP_GEMM)
		return "gemm_blocked";
	if (p->op == FLY_OP_GROUPED_GEMM)
		return "ggemm_blocked";
	if (p->op == FLY_OP_MQA_LOGITS)
		return "mqa_blocked";
	if (p->op == FLY_OP_SCALED_GEMM)
		return "sg_blocked";
	if (p->op == FLY_OP_ATTENTION)
		return "attn_blocked";
	return NULL;
}

static int try_variant(const struct flyk_variant *v,
		       const struct flyk_device *dev,
		       const struct fly_problem *p, struct fly_decision *out)
{
	int64_t params[FLY_PARAMS_MAX] = { 0 };

	if (!v || !flyk_variant_supports(v, p) ||
	    strncmp(v->name, "test_", 5) == 0)
		return -ENOENT;
	if (first_feasible(v, dev, p, params) < 0)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->status = FLY_STATUS_DEFAULT;
	snprintf(out->variant, sizeof(out->variant), "%s", v->name);
	out->nparams = v->nparams;
	memcpy(out->params, params, sizeof(params));
	return 0;
}

int flyk_default(const struct flyk_backend *b, const struct flyk_device *dev,
		 const struct fly_problem *p, struct fly_decision *out)
{
	const char *pref;

	if (!b || !p || !out)
		return -EINVAL;
	pref = preferred_name(p);
	if (pref && try_variant(flyk_variant_find(b, p->op, pref), dev, p,
				out) == 0)
		return 0;
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < b->nvariants; i++) {
			const struct flyk_variant *v = &b->variants[i];

			if (v->is_reference == (pass == 0))
				continue;
			if (try_variant(v, dev, p, out) == 0)
				return 0;
		}
	return -EOPNOTSUPP;
}

/* Whether every parameter value is in the variant's declared space. */
static int in_space(const struct flyk_variant *v, const int64_t *params)
{
	for (uint32_t i = 0; i < v->nparams; i++) {
		const struct flyk_param *pp = &v->params[i];
		uint32_t j;

		for (j = 0; j < pp->nvals; j++)
			if (pp->vals[j] == params[i])
				break;
		if (j == pp->nvals)
			return 0;
	}
	return 1;
}

/* Whether decision @p d names a launchable point for @p p here.
 * @return 0 (*out: its variant), -ENOENT or -EINVAL. */
static int launchable(const struct flyk_backend *b,
		      const struct flyk_device *dev,
		      const struct fly_problem *p, const struct fly_decision *d,
		      const struct flyk_variant **out)
{
	const struct flyk_variant *v;

	if (memchr(d->variant, '\0', sizeof(d->variant)) == NULL)
		return -EINVAL;
	v = flyk_variant_find(b, p->op, d->variant);
	if (!v)
		return -ENOENT;
	if (!flyk_variant_supports(v, p) || d->nparams != v->nparams ||
	    d->nparams > FLY_PARAMS_MAX)
		return -EINVAL;
	if (!v->enumerate && !in_space(v, d->params))
		return -EINVAL;
	if (v->feasible(dev, p, d->params) != 0)
		return -EINVAL;
	*out = v;
	return 0;
}

int flyk_launch(const struct flyk_backend *b, const struct flyk_device *dev,
		const struct fly_problem *p, const struct fly_decision *d,
		const union flyk_args *args, void *stream)
{
	struct fly_decision def;
	const struct flyk_variant *v = NULL;
	int rc;

	if (!b || !p || !d || !args)
		return -EINVAL;
	/* A tuned decision is launched exactly or refused.  Anything else
	 * (DEFAULT, or PENDING: a neighbour's winner lent while this key is
	 * tuned, whose point need not fit this shape -- the torch ops met
	 * rmsnorm_rows and topk_wq points borrowed from larger rows) falls
	 * back to the default when it names no launchable point. */
	rc = launchable(b, dev, p, d, &v); /* no name: -ENOENT */
	if (rc < 0 && d->status != FLY_STATUS_TUNED) {
		rc = flyk_default(b, dev, p, &def);
		if (rc < 0)
			return rc;
		rc = launchable(b, dev, p, &def, &v);
		d = &def;
	}
	if (rc < 0)
		return rc;
	return v->launch(dev, p, d->params, args, stream);
}
