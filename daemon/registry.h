/*
 * registry.h -- the worker's kernel registry as the daemon sees it: each
 * variant's name, op, dtypes, flags and declared parameter space, sent by
 * the worker (one FLYD_WP_VARIANT record per variant, before READY), so
 * the daemon can check a result it did not measure (import) against the
 * backend that will serve it without loading that backend itself.
 *
 * Owns: the entry array of a struct flyd_registry.  Thread: loop thread
 * (the worker process only fills single entries).
 *
 * What the registry cannot check: device-dependent feasibility (shared
 * memory, compute capability) of GPU variants, and the points of a variant
 * with an explicit candidate list (vendor BLAS-Lt heuristics), which has no
 * declared space -- only its parameter count.  flyk_launch() still checks
 * feasibility on the device at launch.
 */
#ifndef FLYD_REGISTRY_H
#define FLYD_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"
#include "flyk.h"

#define FLYD_REG_VALS_MAX 32   /* values kept per parameter */
#define FLYD_REG_MAX 256       /* variants kept per backend */

/* One variant; also the payload of the FLYD_WP_VARIANT pipe record. */
struct flyd_reg_variant {
	char name[FLY_VARIANT_MAX];
	uint32_t op;          /* enum fly_op */
	uint32_t dtypes;      /* bit (1u << dtype) per supported dtype */
	uint32_t flags;       /* FLY_F_* bits it supports */
	uint32_t nparams;
	uint32_t enumerated;  /* 1: explicit candidate list, no space */
	uint32_t nvals[FLY_PARAMS_MAX];   /* 0 with enumerated; values over
					     FLYD_REG_VALS_MAX: unchecked */
	int64_t vals[FLY_PARAMS_MAX][FLYD_REG_VALS_MAX];
};

struct flyd_registry {
	struct flyd_reg_variant *v;   /* n entries */
	size_t n;
	size_t cap;
};

/* Describe @p v into @p out (the worker's side). */
void flyd_reg_variant_from(const struct flyk_variant *v,
			   struct flyd_reg_variant *out);

/* Append a copy of @p e.  @return 0, -ENOSPC (FLYD_REG_MAX), -ENOMEM. */
int flyd_registry_add(struct flyd_registry *r,
		      const struct flyd_reg_variant *e);
/* Drop every entry (the storage is freed); a zeroed registry is empty. */
void flyd_registry_clear(struct flyd_registry *r);
/* Move @p from into @p to (clearing @p to first); @p from ends empty. */
void flyd_registry_move(struct flyd_registry *to, struct flyd_registry *from);

/* Check decision @p d (variant, params) for problem @p p: the variant
 * exists for p's op, supports its dtype and flags, takes d->nparams
 * parameters, and every value is in its declared space.
 * @param[out] why  what is wrong (@p cap bytes) when it fails.
 * @return 0, -ENOENT (no such variant for the op), -EINVAL. */
int flyd_registry_check(const struct flyd_registry *r,
			const struct fly_problem *p,
			const struct fly_decision *d, char *why, size_t cap);

#endif /* FLYD_REGISTRY_H */
