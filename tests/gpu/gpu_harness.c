/*
 * gpu_harness.c -- the GPU tests' shared harness (gpu_harness.h).
 *
 * Owns: the pass/fail counters and the per-variant run counts.
 * Thread: single-threaded tests only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

const char *gt_only;

static int npass, nfail;

/* Points run per variant, printed at the end: a variant that never ran
 * on this GPU shows as 0. */
#define NRAN 64
static const char *ran_name[NRAN];
static int ran_n[NRAN];

static void count_ran(const char *name, int n)
{
	for (int i = 0; i < NRAN; i++)
		if (!ran_name[i] || !strcmp(ran_name[i], name)) {
			ran_name[i] = name;
			ran_n[i] += n;
			return;
		}
}

void gt_result(int ok, const char *what, const char *key, int rc)
{
	if (ok) {
		npass++;
		return;
	}
	nfail++;
	printf("FAIL %s %s (rc %d)\n", what, key, rc);
}

void gt_key(const struct fly_problem *p, const char *vname,
	    const int64_t *pt, uint32_t np, char *buf, size_t cap)
{
	int n = snprintf(buf, cap,
			 "op=%u dt=%u layout=%u flags=%u dims=%lld,%lld,%lld,"
			 "%lld %s(",
			 p->op, p->dtype, p->layout, p->flags,
			 (long long)p->dims[0], (long long)p->dims[1],
			 (long long)p->dims[2], (long long)p->dims[3], vname);
	for (uint32_t i = 0; i < np && n > 0 && (size_t)n < cap; i++)
		n += snprintf(buf + n, cap - n, "%s%lld", i ? "," : "",
			      (long long)pt[i]);
	if (n > 0 && (size_t)n < cap)
		snprintf(buf + n, cap - n, ")");
}

void gt_point(const struct flyk_variant *v, const uint32_t *pos,
	      int64_t *pt)
{
	for (uint32_t j = 0; j < v->nparams; j++)
		pt[j] = v->params[j].vals[pos[j]];
}

int gt_next(const struct flyk_variant *v, uint32_t *pos)
{
	uint32_t j = v->nparams;
	for (; j > 0; j--) {
		if (++pos[j - 1] < v->params[j - 1].nvals)
			return 1;
		pos[j - 1] = 0;
	}
	return 0;
}

int gt_run_point(const struct flyk_backend *b, struct flyk_case *c,
		 const struct flyk_variant *v, const int64_t *pt)
{
	double us = 0, err = 0;
	int rc = b->case_poison(c);
	if (!rc)
		rc = b->case_time(c, v, pt, &us);
	if (!rc)
		rc = b->case_check(c, &err);
	if (!rc && !(us > 0))
		rc = -ERANGE; /* the events must have measured something */
	return rc;
}

int gt_variant(const struct flyk_backend *b, struct flyk_device *dev,
	       struct flyk_case *c, const struct fly_problem *p,
	       const struct flyk_variant *v)
{
	char key[320];
	int ran = 0;
	if (v->enumerate) {
		int64_t pts[64][FLY_PARAMS_MAX];
		int n = v->enumerate(dev, p, pts, 64);
		/* aligned operands must get algorithms; unaligned may not */
		int aligned = p->dims[2] % 8 == 0 && p->dims[1] % 8 == 0;
		gt_key(p, v->name, NULL, 0, key, sizeof(key));
		/* -EINVAL: a problem the variant does not take (its
		 * feasible() refuses it too); -EOPNOTSUPP: the vendor has no
		 * algorithm for unaligned operands */
		gt_result(n > 0 || n == -EINVAL ||
			  ((n == 0 || n == -EOPNOTSUPP) && !aligned),
			  "enumerate", key, n);
		for (int i = 0; i < n; i++) {
			gt_key(p, v->name, pts[i], v->nparams, key,
			       sizeof(key));
			if (v->feasible(dev, p, pts[i]) != 0) {
				gt_result(0, "enumerated-infeasible", key, 0);
				continue;
			}
			int rc = gt_run_point(b, c, v, pts[i]);
			gt_result(rc == 0, "variant", key, rc);
			ran++;
		}
		return ran;
	}
	uint32_t pos[FLY_PARAMS_MAX] = {0};
	do {
		int64_t pt[FLY_PARAMS_MAX] = {0};
		gt_point(v, pos, pt);
		if (v->feasible(dev, p, pt) == 0) {
			int rc = gt_run_point(b, c, v, pt);
			gt_key(p, v->name, pt, v->nparams, key, sizeof(key));
			gt_result(rc == 0, "variant", key, rc);
			ran++;
		}
	} while (gt_next(v, pos));
	return ran;
}

int gt_problem(const struct flyk_backend *b, struct flyk_device *dev,
	       const struct fly_problem *p, uint64_t seed)
{
	struct flyk_case *c = NULL;
	char key[320];
	int total = 0;
	gt_key(p, "case", NULL, 0, key, sizeof(key));
	int rc = b->case_new(dev, p, seed, &c);
	gt_result(rc == 0, "case_new", key, rc);
	if (rc)
		return 0;
	for (size_t i = 0; i < b->nvariants; i++) {
		const struct flyk_variant *v = &b->variants[i];
		if (!flyk_variant_supports(v, p) ||
		    (gt_only && !strstr(v->name, gt_only)))
			continue;
		int n = gt_variant(b, dev, c, p, v);
		count_ran(v->name, n);
		total += n;
	}
	struct fly_decision d;
	rc = flyk_default(b, dev, p, &d);
	gt_result(rc == 0, "default", key, rc);
	if (rc == 0) {
		const struct flyk_variant *v =
		    flyk_variant_find(b, p->op, d.variant);
		rc = v ? gt_run_point(b, c, v, d.params) : -ENOENT;
		gt_result(rc == 0 && !v->is_reference, "default-runs", key,
			  rc);
	}
	b->case_free(c);
	return total;
}

int gt_open(const struct flyk_backend **b, struct flyk_device **dev)
{
	*b = flyk_gpu_backend();
	*dev = NULL;
	gt_only = getenv("FLYK_TEST_VARIANTS");
	int rc = (*b)->open(0, dev);
	if (rc)
		printf("no GPU: open failed (%d)\n0 passed, 1 failed\n", rc);
	return rc;
}

int gt_finish(void)
{
	for (int i = 0; i < NRAN && ran_name[i]; i++)
		printf("# ran %s: %d points\n", ran_name[i], ran_n[i]);
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
