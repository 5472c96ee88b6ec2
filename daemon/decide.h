/*
 * decide.h -- the in-memory map of tuned results for this device and
 * kernel-library version, the nearest-tuned-neighbour search, and the
 * heuristic default.
 *
 * Owns: its entries (copies of keys, problems and decisions).
 * Thread: loop thread only.  Pure: no I/O; results.c keeps it coherent
 * with the store (loaded at start, updated on put/forget/import).
 *
 * Neighbours: same op, dtype, layout and flags; distance is the sum over
 * the dims of |log2(a / b)|; ties resolve to the smaller key (strcmp), so
 * every daemon and every client sees the same answer.
 */
#ifndef FLYD_DECIDE_H
#define FLYD_DECIDE_H

#include <stddef.h>

#include "fly_abi.h"

struct flyk_backend;
struct flyd_rmap;

/* @return 0 or -ENOMEM. */
int flyd_rmap_new(struct flyd_rmap **out);
/* NULL: no-op. */
void flyd_rmap_free(struct flyd_rmap *m);
/* Insert or replace the decision of @p key (@p p its parsed problem).
 * @return 0 (inserted), 1 (replaced an existing entry), -ENOMEM,
 * FLY_E_KEYLEN. */
int flyd_rmap_put(struct flyd_rmap *m, const char *key,
		  const struct fly_problem *p, const struct fly_decision *d);
/* @return 0 or FLY_E_NOTFOUND. */
int flyd_rmap_del(struct flyd_rmap *m, const char *key);
void flyd_rmap_clear(struct flyd_rmap *m);
size_t flyd_rmap_count(const struct flyd_rmap *m);
/* The decision of @p key, or NULL.  Borrowed (a copy the map keeps);
 * valid until the next call on @p m. */
const struct fly_decision *flyd_rmap_get(struct flyd_rmap *m,
					 const char *key);
/* The nearest entry of the same class as @p p other than @p key itself.
 * @param[out] out its decision with provisional = 1.
 * @param[out] nkey (may be NULL) its key, FLY_KEY_MAX bytes.
 * @return 0 or FLY_E_NOTFOUND. */
int flyd_rmap_nearest(const struct flyd_rmap *m, const char *key,
		      const struct fly_problem *p, struct fly_decision *out,
		      char *nkey);

/* Sum over dims of |log2(a / b)|; a negative value when the problems have
 * different dims present (not comparable). */
double flyd_problem_distance(const struct fly_problem *a,
			     const struct fly_problem *b);

/* The heuristic default of @p b for @p p (status DEFAULT, not
 * provisional).  With @p b NULL, or when the backend does not support the
 * problem, @p out is the empty decision (variant "").
 * @return 0, or -EOPNOTSUPP (unsupported: do not queue a job). */
int flyd_decide_default(const struct flyk_backend *b,
			const struct fly_problem *p, struct fly_decision *out);

#endif /* FLYD_DECIDE_H */
