/*
 * launch_api.hip -- exported, ctypes-friendly C entry points of
 * libflykernels_{cuda,hip}.so, so a Python or C engine launches exactly
 * what the daemon decided (struct fly_decision) on its own tensors and
 * stream.
 *
 * Owns: one lazily queried struct flyk_device for the calling process's
 * current device (properties only: no stream, no flush buffer).  Thread:
 * any; the device is queried once (C++ magic static).  A process that
 * switches devices after its first launch keeps the first one's limits.
 *
 * Every function returns 0 or a negative errno: -ENODEV (no GPU), -ENOENT
 * (variant unknown), -EINVAL (params out of space, infeasible, or
 * misaligned pointers), -EIO (launch failed).
 */
#include <errno.h>
#include <string.h>

#include "gpu_int.h"
#include "prim/flyk_gpu.h"

#define FLYK_EXPORT extern "C" __attribute__((visibility("default")))

struct api_dev {
	struct flyk_device dev;
	int rc;
};

static struct api_dev *api_device(void)
{
	static struct api_dev d = [] {
		struct api_dev a;
		int idx = 0;
		memset(&a, 0, sizeof(a));
		if (hipGetDevice(&idx) != hipSuccess)
			idx = 0;
		a.rc = flyk_gpu_device_query(idx, &a.dev);
		return a;
	}();
	return &d;
}

FLYK_EXPORT int flyk_gpu_rmsnorm(const struct fly_problem *p,
				 const struct fly_decision *d, const void *x,
				 const void *w, void *y, void *residual,
				 float eps, void *stream)
{
	struct api_dev *a = api_device();
	if (a->rc)
		return a->rc;
	if (!p || !d || p->op != FLY_OP_RMSNORM)
		return -EINVAL;
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	args.rmsnorm.x = x;
	args.rmsnorm.w = w;
	args.rmsnorm.y = y;
	args.rmsnorm.residual = residual;
	args.rmsnorm.eps = eps;
	return flyk_launch(flyk_gpu_backend(), &a->dev, p, d, &args, stream);
}

/* TopK with a workspace (flyk.h FLYK_TOPK_WS_BYTES: zeroed once, for
 * topk alone; NULL refuses the points that need one, topk_mb's, with
 * -EINVAL). */
FLYK_EXPORT int flyk_gpu_topk_ws(const struct fly_problem *p,
				 const struct fly_decision *d, const void *x,
				 void *values, int64_t *indices,
				 void *workspace, size_t workspace_size,
				 void *stream)
{
	struct api_dev *a = api_device();
	if (a->rc)
		return a->rc;
	if (!p || !d || p->op != FLY_OP_TOPK)
		return -EINVAL;
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	args.topk.x = x;
	args.topk.values = values;
	args.topk.indices = indices;
	args.topk.workspace = workspace;
	args.topk.workspace_size = workspace_size;
	return flyk_launch(flyk_gpu_backend(), &a->dev, p, d, &args, stream);
}

/* TopK without a workspace: flyk_gpu_topk_ws(..., NULL, 0, stream). */
FLYK_EXPORT int flyk_gpu_topk(const struct fly_problem *p,
			      const struct fly_decision *d, const void *x,
			      void *values, int64_t *indices, void *stream)
{
	return flyk_gpu_topk_ws(p, d, x, values, indices, NULL, 0, stream);
}

/* FP8 MQA logits (struct flyk_mqa_logits_args: q [sq,h,d] and kv [skv,d]
 * e4m3 bytes, kv_scale [skv], weights [sq,h], ks/ke [sq] int32, logits
 * [sq, ld] fp32, ld 0 for skv), all device pointers. */
FLYK_EXPORT int flyk_gpu_mqa_logits(const struct fly_problem *p,
				    const struct fly_decision *d,
				    const void *q, const void *kv,
				    const float *kv_scale,
				    const float *weights, const int32_t *ks,
				    const int32_t *ke, float *logits,
				    int64_t ld, void *stream)
{
	struct api_dev *a = api_device();
	if (a->rc)
		return a->rc;
	if (!p || !d || p->op != FLY_OP_MQA_LOGITS || ld < 0 ||
	    (ld && ld < p->dims[1]))
		return -EINVAL;
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	args.mqa_logits.q = q;
	args.mqa_logits.kv = kv;
	args.mqa_logits.kv_scale = kv_scale;
	args.mqa_logits.weights = weights;
	args.mqa_logits.ks = ks;
	args.mqa_logits.ke = ke;
	args.mqa_logits.logits = logits;
	args.mqa_logits.ld = ld;
	return flyk_launch(flyk_gpu_backend(), &a->dev, p, d, &args, stream);
}

/* Scaled GEMM, NT (struct flyk_scaled_gemm_args): a [m,k] and b [n,k] in
 * the problem's format (mxfp4: [m,k/2], [n,k/2] bytes, low nibble the
 * even k), scale_a/scale_b one fp32 each (fp8 per tensor) or [m,k/32] and
 * [n,k/32] e8m0 bytes (MX), bias [n] bf16 or NULL, c [m,n] bf16; all
 * device pointers.  The workspace (may be NULL) serves the variants that
 * need one: sg_wgmma on mxfp4 needs (m + n) * k bytes, a cuBLASLt
 * algorithm its own (else -ENOSPC / -EINVAL). */
FLYK_EXPORT int flyk_gpu_scaled_gemm(const struct fly_problem *p,
				     const struct fly_decision *d,
				     const void *a, const void *b,
				     const void *scale_a, const void *scale_b,
				     const void *bias, void *c,
				     void *workspace, size_t workspace_size,
				     void *stream)
{
	struct api_dev *ad = api_device();
	if (ad->rc)
		return ad->rc;
	if (!p || !d || p->op != FLY_OP_SCALED_GEMM)
		return -EINVAL;
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	args.scaled_gemm.a = a;
	args.scaled_gemm.b = b;
	args.scaled_gemm.c = c;
	args.scaled_gemm.bias = bias;
	args.scaled_gemm.scale_a = scale_a;
	args.scaled_gemm.scale_b = scale_b;
	args.scaled_gemm.workspace = workspace;
	args.scaled_gemm.workspace_size = workspace_size;
	return flyk_launch(flyk_gpu_backend(), &ad->dev, p, d, &args, stream);
}

/* Attention forward (struct flyk_attention_args): q [b,sq,hq,d], k and v
 * [b,skv,hkv,d], o [b,sq,hq,d] (bf16/fp16, d contiguous), lse [b,hq,sq]
 * fp32 or NULL; all device pointers.  @p strides: NULL (every tensor
 * dense) or 12 element strides, (batch, seq, head) of q, k, v and o in
 * that order, 0 for dense.  The workspace (may be NULL) serves
 * attn_fa2_split: split * b * hq * sq * (d + 1) * 4 bytes (at most
 * 32 MiB; else -ENOSPC). */
FLYK_EXPORT int flyk_gpu_attention(const struct fly_problem *p,
				   const struct fly_decision *d,
				   const void *q, const void *k, const void *v,
				   void *o, float *lse, float scale,
				   const int64_t *strides, void *workspace,
				   size_t workspace_size, void *stream)
{
	struct api_dev *ad = api_device();
	if (ad->rc)
		return ad->rc;
	if (!p || !d || p->op != FLY_OP_ATTENTION)
		return -EINVAL;
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	struct flyk_attention_args *a = &args.attention;
	a->q = q;
	a->k = k;
	a->v = v;
	a->o = o;
	a->lse = lse;
	a->scale = scale;
	if (strides) {
		for (int i = 0; i < 3; i++) {
			if (strides[i] < 0 || strides[3 + i] < 0 ||
			    strides[6 + i] < 0 || strides[9 + i] < 0)
				return -EINVAL;
			a->q_stride[i] = strides[i];
			a->k_stride[i] = strides[3 + i];
			a->v_stride[i] = strides[6 + i];
			a->o_stride[i] = strides[9 + i];
		}
	}
	a->workspace = workspace;
	a->workspace_size = workspace_size;
	return flyk_launch(flyk_gpu_backend(), &ad->dev, p, d, &args, stream);
}

/* The heuristic default for @p p (flyk_default). */
FLYK_EXPORT int flyk_gpu_default(const struct fly_problem *p,
				 struct fly_decision *out)
{
	struct api_dev *a = api_device();
	if (a->rc)
		return a->rc;
	return flyk_default(flyk_gpu_backend(), &a->dev, p, out);
}

/* Every feasible (variant, point) for @p p, reference included, in table
 * and odometer order, into @p out (at most @p max).  For standalone sweeps
 * (bench/gpu_kernels_standalone.py).  @return the count or an error. */
FLYK_EXPORT int flyk_gpu_candidates(const struct fly_problem *p,
				    struct fly_decision *out, int max)
{
	struct api_dev *a = api_device();
	if (a->rc)
		return a->rc;
	const struct flyk_backend *b = flyk_gpu_backend();
	int n = 0;
	for (size_t i = 0; i < b->nvariants; i++) {
		const struct flyk_variant *v = &b->variants[i];
		if (!flyk_variant_supports(v, p))
			continue;
		uint32_t pos[FLY_PARAMS_MAX] = {0}, np = v->nparams;
		for (;;) {
			int64_t pt[FLY_PARAMS_MAX] = {0};
			for (uint32_t j = 0; j < np; j++)
				pt[j] = v->params[j].vals[pos[j]];
			if (v->feasible(&a->dev, p, pt) == 0 && n < max) {
				struct fly_decision *d = &out[n++];
				memset(d, 0, sizeof(*d));
				strncpy(d->variant, v->name,
					sizeof(d->variant) - 1);
				d->nparams = np;
				memcpy(d->params, pt, sizeof(pt));
			}
			uint32_t j = np;
			for (; j > 0; j--) {
				if (++pos[j - 1] < v->params[j - 1].nvals)
					break;
				pos[j - 1] = 0;
			}
			if (j == 0)
				break;
		}
	}
	return n;
}
