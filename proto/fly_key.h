/*
 * fly_key.h -- shape keys: problem <-> canonical key string, validation,
 * and the bucketing policy for dims that vary per step.
 *
 * Owns: nothing (pure functions).  Thread: any; no global state except the
 * read-only tables of op/dtype/layout names.
 *
 * Canonical key grammar (no spaces, lower case names, decimal dims):
 *
 *   key    = op "/" dtype [ "/" layout ] "/" dims [ "/" flags ]
 *   dims   = name "=" int { "," name "=" int }     (per-op order, all dims)
 *   flags  = flag { "+" flag }                     (sorted by bit value)
 *   layout is present exactly for ops that have one (gemm, grouped_gemm,
 *   scaled_gemm: NT, NN, TN, TT).
 *
 *   gemm/bf16/NT/m=4096,n=6144,k=4096
 *   rmsnorm/fp16/m=8192,n=4097/residual
 *   topk/fp32/m=4096,n=1024,k=8/det
 *   gemm/fp32/NT/m=100,n=64,k=64/exact
 *
 * Exact shapes (issue 22): the flag `exact` (FLY_F_EXACT, any op) names
 * the shape itself, never re-bucketed: fly_problem_bucket leaves it as
 * it is and its bucket floor is itself (only that M is launched from
 * it).  A problem has an exact key only when its varying dim differs
 * from its bucket's representative under the default policy
 * (gemm m=100 -> m=128): `.../m=128,.../exact` does not validate, the
 * bucket key being exact for m=128.  A bucket key never carries the
 * flag, so the two can never collide.  Kernels never see the flag: the
 * daemon drops it (fly_problem_shape) before a problem reaches them.
 *
 * Names: ops gemm grouped_gemm scaled_gemm rmsnorm topk attention
 * mqa_logits; dtypes fp32 fp16 bf16 fp8_e4m3 fp8_e5m2 mxfp8 mxfp4
 * fp8_e4m3fnuz; flags bias scale residual det causal clean kvfnuz exact.
 */
#ifndef FLY_KEY_H
#define FLY_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"

/* Bucketing policy for one op. */
struct fly_bucket_policy {
	int dim;          /* index into dims of the varying dim; -1: none */
	int64_t pow2_max; /* round up to a power of two up to this value */
	int64_t step;     /* above pow2_max, round up to a multiple of step */
};

/* Name tables: return NULL for out-of-range values. */
const char *fly_op_name(uint32_t op);
const char *fly_dtype_name(uint32_t dtype);
const char *fly_layout_name(uint32_t layout);
/* Parse a name; returns the enum value or 0 (NONE) when unknown. */
uint32_t fly_op_parse(const char *s, size_t len);
uint32_t fly_dtype_parse(const char *s, size_t len);
uint32_t fly_layout_parse(const char *s, size_t len);

/* Number of dims of an op and their names (NULL-terminated array), or 0 /
 * NULL for an unknown op. */
int fly_op_ndims(uint32_t op);
const char *const *fly_op_dim_names(uint32_t op);
/* Whether the op's key has a layout segment. */
int fly_op_has_layout(uint32_t op);

/* Validate a problem: known op and dtype allowed for it, layout present
 * iff the op has one, every dim of the op > 0 and unused dims 0, product of
 * dims fits int64, flags within the op's (FLY_F_EXACT: any op, only
 * when the varying dim is off its bucket's representative); per op: scaled_gemm's MX
 * formats need k % 32 == 0, attention needs d in 64/128/256 and hkv
 * dividing hq (FLY_E_BADDIM).
 * @return 0, FLY_E_BADOP, FLY_E_BADDTYPE, FLY_E_BADDIM, FLY_E_OVERFLOW,
 *         FLY_E_INVALID (layout or flags). */
int fly_problem_validate(const struct fly_problem *p);

/* Encode a valid problem into its canonical key.
 * @param[out] buf  at least @p cap bytes; NUL-terminated on success.
 * @return length (excluding NUL) or a validation error, FLY_E_KEYLEN when
 *         the key does not fit in min(cap, FLY_KEY_MAX). */
int fly_key_format(const struct fly_problem *p, char *buf, size_t cap);
/* fly_key_format of a problem the caller has just validated
 * (fly_problem_validate returned 0 for it): the same key, without the
 * second validation (issue 19: fly_decide's table path validates, buckets
 * and hashes the problem before it formats the key). */
int fly__key_format_valid(const struct fly_problem *p, char *buf,
			  size_t cap);

/* Parse a key (need not be NUL-terminated: @p len bytes).  Accepts only
 * canonical keys: fly_key_format(parse(s)) == s.
 * @return 0, FLY_E_KEYLEN, FLY_E_BADKEY (syntax), or a validation error. */
int fly_key_parse(const char *s, size_t len, struct fly_problem *out);

/* Say what is wrong with a key, for people: which part is missing or
 * unknown (op, dtype, layout, dims, flags) and which names are allowed
 * there, e.g. "the layout is missing: gemm needs one of NT, NN, TN, TT
 * after the dtype (e.g. gemm/fp32/NT/m=64,n=64,k=64)".  Exported from
 * libflyclient (flyclient.h).
 * @param[out] buf NUL-terminated; "" when the key parses.
 * @return 0 (the key parses) or the error fly_key_parse returns;
 *         -EINVAL without @p buf. */
__attribute__((visibility("default"))) int
fly_key_explain(const char *key, char *buf, size_t cap);

/* The default policy for an op: M rounded up to a power of two up to 1024,
 * then to a multiple of 1024 (gemm, grouped_gemm, scaled_gemm, rmsnorm,
 * topk: dim "m"; attention: "sq"; mqa_logits: "sq"). */
void fly_bucket_policy_default(uint32_t op, struct fly_bucket_policy *out);

/* Apply a policy in place (after validation).  A bucketed dim never
 * shrinks and never overflows (saturates at the original on overflow).
 * An exact problem (FLY_F_EXACT) is left as it is. */
void fly_problem_bucket(struct fly_problem *p,
			const struct fly_bucket_policy *pol);

/* The smallest problem that buckets to the same key as @p bucketed under
 * @p pol (only the policy's dim differs): a winner tuned on the bucketed
 * problem must also be feasible there, since an engine launches it for
 * every M in the bucket.  Without a varying dim, or for an exact problem
 * (FLY_F_EXACT: only its own M is launched from it), *lo = *bucketed. */
void fly_problem_bucket_floor(const struct fly_problem *bucketed,
			      const struct fly_bucket_policy *pol,
			      struct fly_problem *lo);

/* The exact-shape problem of a valid problem @p p: @p p with FLY_F_EXACT
 * when its varying dim differs from its bucket's representative under
 * the default policy (or @p p already has the flag), else @p p as is.
 * @return 1 when *out is an exact key's problem, 0 when @p p's bucket
 * key is already exact for it. */
int fly_problem_exact(const struct fly_problem *p, struct fly_problem *out);

/* Whether the canonical key @p s (@p len bytes) carries FLY_F_EXACT: the
 * highest flag, so always the last one ("/exact" or "+exact" at the
 * end).  A suffix test, no parse: for keys already known canonical. */
int fly_key_is_exact(const char *s, size_t len);

/* The shape a key's problem launches: @p p without FLY_F_EXACT (which
 * the kernels do not take). */
void fly_problem_shape(struct fly_problem *p);

/* 64-bit FNV-1a of a key's bytes; used by the shm table. */
uint64_t fly_key_hash(const char *s, size_t len);

#endif /* FLY_KEY_H */
