/*
 * gemm/gemm_api.hip -- exported, ctypes-friendly launchers of the gemm and
 * grouped_gemm decisions in libflykernels_{cuda,hip}.so: a C or Python
 * engine passes the problem, the daemon's decision and its own device
 * pointers and stream, and runs exactly what was measured.
 *
 * Owns: one lazily queried struct flyk_device for the process's current
 * device at the first call (properties only).  Thread: any; the device is
 * queried once (C++ magic static); the cuBLAS handles behind the vendor
 * variants are per device (kernels/vendor/cublaslt.c).
 *
 * Return: 0 or a negative errno: -ENODEV (no GPU), -ENOENT (variant
 * unknown), -EINVAL (params out of space, infeasible, a NULL or
 * misaligned pointer, a workspace too small for the point), -EIO (launch
 * failed).  An empty decision (variant "", status DEFAULT) runs the
 * heuristic default.
 */
#include <errno.h>
#include <string.h>

#include "gpu_int.h"
#include "prim/flyk_gpu.h"

#define FLYK_EXPORT extern "C" __attribute__((visibility("default")))

struct gemm_api_dev {
	struct flyk_device dev;
	int rc;
};

static struct gemm_api_dev *gemm_api_device(void)
{
	static struct gemm_api_dev d = [] {
		struct gemm_api_dev a;
		int idx = 0;
		memset(&a, 0, sizeof(a));
		if (hipGetDevice(&idx) != hipSuccess)
			idx = 0;
		a.rc = flyk_gpu_device_query(idx, &a.dev);
		return a;
	}();
	return &d;
}

/* C = alpha * A op(B) + bias (alpha used with FLY_F_SCALE, bias with
 * FLY_F_BIAS); @p workspace of @p ws_size bytes may be NULL/0 for points
 * that need none (FLYK_GEMM_WS_BYTES covers every candidate). */
FLYK_EXPORT int flyk_gpu_gemm(const struct fly_problem *p,
			      const struct fly_decision *d, const void *a,
			      const void *b, void *c, const void *bias,
			      float alpha, void *workspace, size_t ws_size,
			      void *stream)
{
	struct gemm_api_dev *g = gemm_api_device();
	if (g->rc)
		return g->rc;
	if (!p || !d || p->op != FLY_OP_GEMM)
		return -EINVAL;
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	args.gemm.a = a;
	args.gemm.b = b;
	args.gemm.c = c;
	args.gemm.bias = bias;
	args.gemm.alpha = alpha;
	args.gemm.workspace = workspace;
	args.gemm.workspace_size = ws_size;
	return flyk_launch(flyk_gpu_backend(), &g->dev, p, d, &args, stream);
}

/* Grouped GEMM; @p offsets is [G+1] int64 in device memory. */
FLYK_EXPORT int flyk_gpu_grouped_gemm(const struct fly_problem *p,
				      const struct fly_decision *d,
				      const void *a, const void *b, void *c,
				      const int64_t *offsets, void *stream)
{
	struct gemm_api_dev *g = gemm_api_device();
	if (g->rc)
		return g->rc;
	if (!p || !d || p->op != FLY_OP_GROUPED_GEMM)
		return -EINVAL;
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	args.grouped_gemm.a = a;
	args.grouped_gemm.b = b;
	args.grouped_gemm.c = c;
	args.grouped_gemm.offsets = offsets;
	return flyk_launch(flyk_gpu_backend(), &g->dev, p, d, &args, stream);
}

/* Grouped GEMM with torch._grouped_mm's offsets: @p ends is [G] int32
 * cumulative row ends in device memory (expert g has rows
 * [ends[g-1], ends[g]), ends[-1] = 0), read by the kernels as they are. */
FLYK_EXPORT int flyk_gpu_grouped_gemm_ends(const struct fly_problem *p,
					   const struct fly_decision *d,
					   const void *a, const void *b,
					   void *c, const int32_t *ends,
					   void *stream)
{
	struct gemm_api_dev *g = gemm_api_device();
	if (g->rc)
		return g->rc;
	if (!p || !d || p->op != FLY_OP_GROUPED_GEMM || !ends)
		return -EINVAL;
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	args.grouped_gemm.a = a;
	args.grouped_gemm.b = b;
	args.grouped_gemm.c = c;
	args.grouped_gemm.ends = ends;
	return flyk_launch(flyk_gpu_backend(), &g->dev, p, d, &args, stream);
}

/* The cuBLASLt heuristic's points for @p p (for a standalone sweep), as
 * full decisions; CUDA only.  @return the count or an error. */
FLYK_EXPORT int flyk_gpu_gemm_vendor_candidates(const struct fly_problem *p,
						struct fly_decision *out,
						int max)
{
	struct gemm_api_dev *g = gemm_api_device();
	if (g->rc)
		return g->rc;
	const struct flyk_variant *v =
	    flyk_variant_find(flyk_gpu_backend(), FLY_OP_GEMM, "cublaslt");
	if (!p || !out || max < 0 || !v || !v->enumerate)
		return -ENOENT;
	int64_t pts[16][FLY_PARAMS_MAX];
	int n = v->enumerate(&g->dev, p, pts, max < 16 ? max : 16);
	for (int i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		strncpy(out[i].variant, v->name, sizeof(out[i].variant) - 1);
		out[i].nparams = v->nparams;
		memcpy(out[i].params, pts[i], sizeof(pts[i]));
	}
	return n;
}
