/*
 * cudnn_attn.h -- cuDNN 9's fused attention (forward, bf16) as a vendor
 * candidate of the attention op: the engine configurations cuDNN's
 * heuristics propose for one problem, each as a parameter vector that
 * replays exactly (kernels/vendor/cudnn_attn.c).  Built into the CUDA
 * backend only when the Makefile finds cuDNN 9 (FLYK_HAS_CUDNN); the
 * attention op lists the candidate under `#if FLYK_HAS_CUDNN`.  Not
 * installed.
 *
 * Owns: nothing (declarations).  Thread: every function may be called
 * from any thread; the cuDNN handles (one per device) and the plan cache
 * are under one mutex, and a launch binds the handle to the caller's
 * stream under it.
 *
 * The problem: O = softmax(scale * Q K^T [+ causal mask]) V per (batch,
 * query head), query head h reading kv head h / (hq / hkv) (GQA/MQA);
 * bf16 Q/K/V/O, fp32 accumulation; Q [b, sq, hq, d], K and V [b, skv, hkv,
 * d], O [b, sq, hq, d], each through its strides in elements (batch, seq,
 * head), head_dim contiguous.  The causal mask keeps key j for query i
 * when j <= i + skv - sq (aligned bottom-right: prefill after a KV
 * prefix); sq > skv with the mask (rows with no key) is not offered.
 * Optional LSE: fp32 [b][hq][sq], natural log of the row's sum of
 * exp(scale * q.k) over the kept keys.
 *
 * Params (FLYK_CUDNN_ATTN_NPARAMS, every value read back from cuDNN):
 *   [0]     CUDNN_ATTR_ENGINE_GLOBAL_INDEX of the engine
 *   [1]     bits 0..7: knob count n (0..6); bits 8..15: the graph form
 *           (0: the composite graph of matmul, pointwise and reduction
 *           operations; 1: the one SDPA_FWD operation of cuDNN >= 9.13.1,
 *           offered without a mask only); bits 16..23: which heuristic
 *           proposed it (0 CUDNN_HEUR_MODE_A, 1 CUDNN_HEUR_MODE_FALLBACK);
 *           bits 24..39: its rank there; bits 40..47: the caller's
 *           (attn_cudnn's bit 40: a call without the LSE runs the LSE
 *           graph).  Replay reads bits 0..15 only: the rest tells
 *           explain where the point came from.
 *   [2..7]  knob i < n: CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE << 32 | the low
 *           32 bits of CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE (sign-extended
 *           back), sorted by type; unused slots 0.
 * A configuration with more than 6 knobs, or a knob value outside int32,
 * is not offered.  Engine indices belong to one cuDNN version: a point
 * tuned under another version (a daemon whose cuDNN is not the launching
 * process's: PyTorch loads its own) may not build here; the launch then
 * runs the plan of the first configuration cuDNN's heuristics propose for
 * the same graph (the same result; not the tuned speed), counted by
 * flyk_cudnn_attn_substituted() and told by flyk_cudnn_attn_last_error().
 */
#ifndef FLYK_CUDNN_ATTN_H
#define FLYK_CUDNN_ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Length of a parameter vector (FLY_PARAMS_MAX). */
#define FLYK_CUDNN_ATTN_NPARAMS 8
/* Knob slots in a vector. */
#define FLYK_CUDNN_ATTN_MAX_KNOBS 6
/* Configurations needing more workspace than this are not offered. */
#define FLYK_CUDNN_ATTN_WS_MAX ((size_t)64 << 20)

/* One attention problem: the graph's shape.  Zero it before filling (the
 * cache compares it whole). */
struct flyk_cudnn_attn_problem {
	int64_t b;	     /* batch */
	int64_t sq;	     /* query length */
	int64_t skv;	     /* key/value length */
	int64_t hq;	     /* query heads */
	int64_t hkv;	     /* key/value heads, divides hq */
	int64_t d;	     /* head_dim (Q, K and V), multiple of 8, <= 256 */
	int64_t q_stride[3]; /* batch, seq, head, in elements */
	int64_t k_stride[3];
	int64_t v_stride[3];
	int64_t o_stride[3];
	int32_t causal; /* 1: bottom-right causal mask */
	int32_t lse;	/* 1: write the fp32 LSE */
};

/* One launch's operands (device pointers, 16-byte aligned). */
struct flyk_cudnn_attn_args {
	const void *q;	 /* bf16 */
	const void *k;	 /* bf16 */
	const void *v;	 /* bf16 */
	void *o;	 /* bf16 */
	float *lse;	 /* [b][hq][sq] when problem.lse, else NULL */
	float scale;	 /* softmax scale (e.g. 1/sqrt(d)) */
	void *workspace; /* flyk_cudnn_attn_workspace() bytes or more */
	size_t workspace_size;
};

/* Whether @p p is a problem this module builds a graph for and @p params
 * (NULL: skip) a well-formed vector; no cuDNN call.  @return 0, -EINVAL
 * (malformed), -EOPNOTSUPP (causal with sq > skv, or d/heads/strides
 * outside what the graph takes). */
int flyk_cudnn_attn_feasible(const struct flyk_cudnn_attn_problem *p,
			     const int64_t *params);

/* The configurations cuDNN's heuristics (mode A, then fallback) propose
 * for @p p's graph (each form that applies) on the calling thread's
 * current device whose execution plan
 * finalizes (built by the same replay a launch uses, and kept in the
 * plan cache), deduplicated, at most @p max, into @p out.  A candidate
 * that fails is skipped and its error kept for
 * flyk_cudnn_attn_last_error().  @return how many (0: none, e.g. causal
 * sq > skv), -EINVAL, -ENODEV (no cuDNN handle), -EIO (the graph or the
 * heuristics failed: see flyk_cudnn_attn_last_error()). */
int flyk_cudnn_attn_enumerate(const struct flyk_cudnn_attn_problem *p,
			      int64_t (*out)[FLYK_CUDNN_ATTN_NPARAMS], int max);

/* Workspace bytes of the plan of (@p p, @p params) into @p bytes (building
 * and caching the plan on first use).  @return 0, -EINVAL (the point does
 * not replay), -EOPNOTSUPP, -ENODEV. */
int flyk_cudnn_attn_workspace(const struct flyk_cudnn_attn_problem *p,
			      const int64_t *params, size_t *bytes);

/* Whether the point @p params builds as itself on @p p's graph (in its
 * own graph form, no stand-in from the heuristics), and then its
 * workspace bytes into @p bytes; the plan is cached as by
 * flyk_cudnn_attn_workspace(), and a point found not to build is
 * remembered (the last 16) so asking again costs no rebuild.  A launch
 * uses it to run a point tuned on one graph (with the LSE) on another
 * (without).  @return 0, -EINVAL (does not build as itself), -EOPNOTSUPP,
 * -ENODEV. */
int flyk_cudnn_attn_replays(const struct flyk_cudnn_attn_problem *p,
			    const int64_t *params, size_t *bytes);

/* Enqueue one forward pass of (@p p, @p params) on @p stream (a
 * cudaStream_t; NULL: the default stream), building and caching the
 * plan on first use.  @return 0, -EINVAL (bad pointers, alignment or a
 * point that does not replay), -ENOSPC (workspace too small),
 * -EOPNOTSUPP, -ENODEV, -EIO (cudnnBackendExecute failed). */
int flyk_cudnn_attn_run(const struct flyk_cudnn_attn_problem *p,
			const int64_t *params,
			const struct flyk_cudnn_attn_args *a, void *stream);

/* The calling thread's last failure in this module: the step, the cuDNN
 * status (cudnnGetErrorString) and cudnnGetLastErrorString's message; ""
 * when none.  Borrowed; valid until this thread's next call here. */
/** Launches since load whose tuned point did not build on this cuDNN
 * and ran the heuristics' first configuration instead. */
unsigned long flyk_cudnn_attn_substituted(void);

const char *flyk_cudnn_attn_last_error(void);

/* Load cuDNN's handle, engine libraries and one plan's kernels on the
 * calling thread's device (a causal d128 problem), so the first key tuned
 * does not pay them (0.5-0.8 s on the H200); the time it took goes to
 * stderr.  @return 0 or a negative error (nothing else depends on it). */
int flyk_cudnn_attn_warm(void);

/* "cudnn-<cudnnGetVersion()>" into @p buf (for the device fingerprint,
 * as flyk_vendor_blas).  @return snprintf's. */
int flyk_cudnn_attn_version(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* FLYK_CUDNN_ATTN_H */
