/*
 * flyk.h -- the kernels' C ABI: backends, their variants, parameter spaces,
 * feasibility checks, launchers, and the benchmark cases the daemon's
 * worker times them on.
 *
 * Owns: nothing (declarations).  Thread: the variant tables are immutable
 * and may be read from any thread; a flyk_device and the cases made on it
 * belong to one thread at a time.
 *
 * Backends:
 *   cpu   always built, linked statically (flyk_cpu_backend()).
 *   cuda  libflykernels_cuda.so, the .hip sources of kernels/gpu/ built with
 *         nvcc through hip_on_cuda.h; exports flyk_gpu_backend().
 *   hip   libflykernels_hip.so, the same sources built with hipcc;
 *         exports flyk_gpu_backend().
 * The daemon dlopen()s a GPU backend (daemon/backend.c); a client can link
 * or dlopen the same library to launch exactly what was measured.
 *
 * Pointers in flyk_args are device pointers for GPU backends and host
 * pointers for the CPU backend.  Tensors are dense row-major unless the
 * layout says otherwise.
 */
#ifndef FLYK_H
#define FLYK_H

#include <stddef.h>
#include <stdint.h>

#include "fly_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kernel library's release.  A result's identity is flyk_libver(),
 * this and the kernels' source id, so a build whose kernels changed in
 * any byte re-tunes even when nobody bumped this. */
#define FLYK_VERSION "0.1.0"

/* "FLYK_VERSION+SOURCE_ID" (kernels/libver.c, tools/srcid.sh): the lib=
 * of every device fingerprint. */
const char *flyk_libver(void);

enum flyk_backend_kind {
	FLYK_BACKEND_CPU = 1,
	FLYK_BACKEND_CUDA = 2,
	FLYK_BACKEND_HIP = 3
};

/* One tunable parameter: a name and its candidate values, in the stable
 * order used to break near-ties. */
struct flyk_param {
	const char *name;
	uint32_t nvals;
	const int64_t *vals;
};

/* Operands, by op.  Element types follow the problem's dtype; fp32 math. */
struct flyk_gemm_args {
	const void *a;     /* [M,K] */
	const void *b;     /* NT: [N,K]; NN: [K,N] */
	void *c;           /* [M,N], same dtype as a (fp32 for fp32) */
	const void *bias;  /* [N] or NULL (FLY_F_BIAS) */
	float alpha;       /* scale when FLY_F_SCALE, else 1 */
	void *workspace;   /* may be NULL */
	size_t workspace_size;
};

struct flyk_grouped_gemm_args {
	const void *a;          /* [sum(rows), K] */
	const void *b;          /* [G, N, K] */
	void *c;                /* [sum(rows), N] */
	const int64_t *offsets; /* [G+1] row offsets, offsets[0] = 0, in the
				   backend's memory (device for GPU) */
	void *workspace;
	size_t workspace_size;
	const int32_t *ends;    /* GPU only, instead of offsets: [G] int32
				   cumulative row ends (torch._grouped_mm's
				   offs), device memory */
};

struct flyk_rmsnorm_args {
	const void *x;    /* [M,N] */
	const void *w;    /* [N] */
	void *y;          /* [M,N] */
	void *residual;   /* FLY_F_RESIDUAL: [M,N] in, x+residual written back */
	float eps;        /* 1e-6 in the benchmark cases */
};

/* TopK's workspace: the variants that take one (topk_mb, few long rows)
 * need at most this much, 8-byte aligned, its first 4 * M bytes (a
 * counter a row) zero before the first launch: each launch leaves them
 * zero again, so allocate it zeroed once and give it to topk alone (a
 * GEMM's split-K partials there would break the next topk).  Without one
 * such a point's launch fails with -EINVAL; the others ignore it. */
#define FLYK_TOPK_WS_BYTES ((size_t)1 << 20)

struct flyk_topk_args {
	const void *x;     /* [M,N] */
	void *values;      /* [M,K], same dtype as x, sorted descending */
	int64_t *indices;  /* [M,K] */
	void *workspace;   /* FLYK_TOPK_WS_BYTES, counters zero; may be NULL */
	size_t workspace_size;
};

/* Scaled low-precision GEMM, NT: C[m,n] = sum_k A[m,k] B[n,k] * scales,
 * fp32 accumulate, bf16 out.  By the problem's dtype:
 *   FP8_E4M3 / FP8_E4M3FNUZ  a, b one byte per element; scale_a, scale_b
 *                            each one fp32 (per tensor)
 *   MXFP8                    e4m3 data; scale_a [M, K/32], scale_b
 *                            [N, K/32] e8m0 bytes (2^(e-127), 0xFF NaN)
 *   MXFP4                    e2m1 data, two per byte, the low nibble the
 *                            even k: a [M, K/2], b [N, K/2] bytes; e8m0
 *                            scales as MXFP8
 * MX formats need K % 32 == 0. */
struct flyk_scaled_gemm_args {
	const void *a;
	const void *b;
	void *c;               /* [M,N] bf16 */
	const void *bias;      /* [N] bf16 or NULL (FLY_F_BIAS) */
	const void *scale_a;   /* see above */
	const void *scale_b;
	void *workspace;       /* may be NULL */
	size_t workspace_size;
};

/* Attention forward, bf16/fp16 in and out, fp32 math.  Tensors are
 * [batch, seq, heads, head_dim] with head_dim contiguous; the other three
 * strides are in elements (0: dense for that tensor's shape).  Causal
 * masks align bottom-right when sq != skv (query i sees key j <=
 * i + skv - sq); a row that sees no key (causal with sq > skv: rows
 * i < sq - skv) is written 0, its lse -inf.  Query head h reads kv head
 * h / (hq / hkv) (GQA/MQA).  lse = log(sum_j exp(scale * q.k_j)). */
struct flyk_attention_args {
	const void *q;         /* [B, Sq, Hq, D] */
	const void *k;         /* [B, Skv, Hkv, D] */
	const void *v;         /* [B, Skv, Hkv, D] */
	void *o;               /* [B, Sq, Hq, D] */
	float *lse;            /* [B, Hq, Sq] fp32 natural-log LSE, or NULL */
	float scale;           /* softmax scale (1/sqrt(D) usually) */
	int64_t q_stride[3];   /* batch, seq, head */
	int64_t k_stride[3];
	int64_t v_stride[3];
	int64_t o_stride[3];
	void *workspace;       /* split-KV partials; may be NULL */
	size_t workspace_size;
};

/* FP8 MQA logits (the DeepSeek lightning indexer):
 *   logits[i, j] = sum_h w[i, h] * relu(q[i, h, :] . kv[j, :]) * kv_scale[j]
 * for ks[i] <= j < ke[i]; with FLY_F_CLEAN every other position of the row
 * is -inf, without it unspecified.  q's format is the key's dtype, kv's
 * the same unless FLY_F_KV_FNUZ. */
struct flyk_mqa_logits_args {
	const void *q;         /* [Sq, H, D] fp8 */
	const void *kv;        /* [Skv, D] fp8 */
	const float *kv_scale; /* [Skv] */
	const float *weights;  /* [Sq, H] */
	const int32_t *ks;     /* [Sq] */
	const int32_t *ke;     /* [Sq] */
	float *logits;         /* [Sq, ld] */
	int64_t ld;            /* row stride of logits, >= Skv (0: Skv) */
	void *workspace;       /* may be NULL */
	size_t workspace_size;
};

/* The (batch, seq, head) element strides of an attention tensor of @p s
 * rows of @p h heads of @p d elements: @p given's where non-zero (NULL:
 * none given), else the dense ones. */
static inline void flyk_attention_strides(int64_t out[3],
					  const int64_t *given, int64_t s,
					  int64_t h, int64_t d)
{
	const int64_t dense[3] = { s * h * d, h * d, d };

	for (int i = 0; i < 3; i++)
		out[i] = given && given[i] ? given[i] : dense[i];
}

union flyk_args {
	struct flyk_gemm_args gemm;
	struct flyk_grouped_gemm_args grouped_gemm;
	struct flyk_rmsnorm_args rmsnorm;
	struct flyk_topk_args topk;
	struct flyk_scaled_gemm_args scaled_gemm;
	struct flyk_attention_args attention;
	struct flyk_mqa_logits_args mqa_logits;
};

struct flyk_device; /* opaque, one per backend instance */

struct flyk_variant {
	const char *name;      /* unique within its op; < FLY_VARIANT_MAX */
	uint32_t op;           /* enum fly_op */
	uint32_t dtypes;       /* bit (1u << dtype) per supported dtype */
	uint32_t flags;        /* FLY_F_* bits it supports */
	int is_reference;      /* the op's reference for numerical checks */
	uint32_t nparams;
	struct flyk_param params[FLY_PARAMS_MAX];
	/* 0 when the point may run on this problem and device, else a
	 * negative errno (-EINVAL: out of its space; -ENOSPC: resources). */
	int (*feasible)(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params);
	/* Explicit candidate list instead of the cartesian product of params
	 * (vendor BLAS-Lt heuristics).  Writes up to @p max param vectors;
	 * returns how many, or a negative error.  NULL: use params. */
	int (*enumerate)(const struct flyk_device *dev,
			 const struct fly_problem *p,
			 int64_t (*out)[FLY_PARAMS_MAX], int max);
	/* Launch on @p stream (a hipStream_t / cudaStream_t, NULL for the
	 * default stream; ignored by the CPU backend, which runs to
	 * completion).  @return 0 or a negative error. */
	int (*launch)(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream);
	/* The variant that supersedes this one where it runs (NULL: none):
	 * when the successor has a feasible point for a problem, the tuner
	 * checks this variant's points after the others' and only within a
	 * smaller share of the budget (an older kernel that has not won a
	 * key since its successor came keeps its place as the fallback, not
	 * the budget of the largest keys). */
	const char *successor;
	/* 1: on a near-tie (a trial within the job's margin of the best)
	 * the tuner prefers this variant over every other, not only over
	 * those declared after it.  For a vendor variant that cannot come
	 * first in the table: attn_cudnn (the first feasible variant is the
	 * op's default, which must not build cuDNN plans in the daemon or
	 * stall an untuned launch). */
	int prefer_on_tie;
};

struct flyk_case; /* inputs, outputs and reference output of one problem */

struct flyk_backend {
	const char *name;  /* "cpu", "cuda", "hip" */
	uint32_t kind;     /* enum flyk_backend_kind */
	const struct flyk_variant *variants;
	size_t nvariants;

	/* Open device @p index.  @return 0, -ENODEV (no such device). */
	int (*open)(int index, struct flyk_device **out);
	void (*close)(struct flyk_device *dev);
	/* One line of space-separated key=value pairs naming what makes
	 * results comparable: arch=sm_90 (or gfx942, or x86_64 model),
	 * units=132 (SMs/CUs/cores), clock_mhz=, mem_clock_mhz=, driver=,
	 * runtime=, l2_kb= (or cache sizes), lib=flyk_libver(), blas= (the
	 * vendor BLAS and its version, "none" without one), name="...".
	 * @return length or -ENOSPC. */
	int (*fingerprint)(const struct flyk_device *dev, char *buf,
			   size_t cap);

	/* Make a benchmark case: random inputs from @p seed (never zeros),
	 * the reference output computed with the op's reference variant, and
	 * whatever the backend needs to clean caches between reps (a read of
	 * >= 4x the L2 on GPUs, not a memset).  @return 0, -ENOMEM,
	 * -EOPNOTSUPP (op/dtype not supported by this backend). */
	int (*case_new)(struct flyk_device *dev, const struct fly_problem *p,
			uint64_t seed, struct flyk_case **out);
	void (*case_free)(struct flyk_case *c);
	/* Fill the case's outputs with NaN (0xFF.. for indices). */
	int (*case_poison)(struct flyk_case *c);
	/* Clean caches, then launch the candidate once and time it (device
	 * events around the launch on GPUs).  @param[out] us elapsed.
	 * @return 0 or the launch's error. */
	int (*case_time)(struct flyk_case *c, const struct flyk_variant *v,
			 const int64_t *params, double *us);
	/* Compare the last outputs with the reference within the op's
	 * per-dtype tolerance.  @param[out] max_err max abs error seen.
	 * @return 0 when correct, -EDOM when wrong (NaN left, or error over
	 * tolerance), or another error. */
	int (*case_check)(struct flyk_case *c, double *max_err);
};

/* The CPU backend (always present). */
const struct flyk_backend *flyk_cpu_backend(void);
/* Exported by libflykernels_{cuda,hip}.so. */
const struct flyk_backend *flyk_gpu_backend(void);
typedef const struct flyk_backend *(*flyk_backend_fn)(void);

/* Find a variant by op and name.  @return NULL when absent. */
const struct flyk_variant *flyk_variant_find(const struct flyk_backend *b,
					     uint32_t op, const char *name);
/* Whether a variant supports the problem's dtype and flags. */
int flyk_variant_supports(const struct flyk_variant *v,
			  const struct fly_problem *p);
/* The op's heuristic default for a problem (no measurement): a variant
 * and parameters that are feasible.  @return 0 or -EOPNOTSUPP. */
int flyk_default(const struct flyk_backend *b, const struct flyk_device *dev,
		 const struct fly_problem *p, struct fly_decision *out);
/* Launch exactly what a TUNED decision names on @p stream.  A DEFAULT or
 * PENDING one (provisional: maybe a neighbour's point) that names no
 * launchable point for @p p launches flyk_default's choice instead.
 * @return 0, -ENOENT (variant unknown to this backend), -EINVAL
 * (parameters out of the variant's space or infeasible), launch error. */
int flyk_launch(const struct flyk_backend *b, const struct flyk_device *dev,
		const struct fly_problem *p, const struct fly_decision *d,
		const union flyk_args *args, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* FLYK_H */
