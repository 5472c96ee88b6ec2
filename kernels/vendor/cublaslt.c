/*
 * cublaslt.c -- the vendor candidates of the CUDA backend's gemm op:
 * "cublaslt" (one cuBLASLt algorithm, as the heuristic reported it, replayed
 * exactly from its config attributes) and "cublas_default" (cublasGemmEx
 * with CUBLAS_GEMM_DEFAULT, what most engines call today); and of the
 * scaled_gemm op: "sg_cublaslt", the same for e4m3 operands with one fp32
 * scale per tensor (A/B scale pointers, fp32 accumulation without
 * CUBLASLT_MATMUL_DESC_FAST_ACCUM: what torch._scaled_mm runs by default).
 *
 * Owns: one cublasLt handle and one cublas handle per device (lazily
 * created, process lifetime), and a small cache of matmul descriptors and
 * initialised algorithms keyed by (problem, params), so a launch does no
 * descriptor work on the hot path.  Thread: handle creation and the cache
 * are under one mutex; cublasGemmEx's stream binding is per handle, so a
 * device's launches must come from one thread at a time (the backend's
 * contract).  Params: see gemm_vendor.h.
 *
 * Row-major mapping: C[M,N] = A[M,K] op(B) is, column-major, C^T = op(B)^T
 * A^T: cuBLAS m = N, n = M, k = K, its "A" is our B (NT: transposed,
 * ld K; NN: not, ld N), its "B" is our A (ld K), ldc = N.  The bias
 * epilogue adds a vector over cuBLAS's rows, i.e. over our N.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cublasLt.h declares cublasLtLoggerForceDisable() without (void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop

#include "gemm/gemm_vendor.h"
#include "gpu_int.h"

#define LT_MAX_DEV 16
#define LT_CACHE   64

struct lt_dev {
	int ready; /* handles created (or failed: rc) */
	int rc;
	cublasLtHandle_t lt;
	cublasHandle_t blas;
};

/* One problem's descriptors and, once replayed, one algorithm. */
struct lt_entry {
	int used;
	int dev;
	struct fly_problem p;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	int has_algo;
	int64_t params[FLY_PARAMS_MAX];
	cublasLtMatmulAlgo_t algo;
	size_t ws_need; /* from cublasLtMatmulAlgoCheck */
};

static pthread_mutex_t lt_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lt_dev lt_devs[LT_MAX_DEV];
static struct lt_entry lt_cache[LT_CACHE];
static unsigned lt_next;

/* The operands' cuBLAS type: bf16 GEMM, or scaled GEMM with e4m3 operands
 * and one fp32 scale per tensor (bf16 C either way). */
static int lt_scaled(const struct fly_problem *p)
{
	return p->op == FLY_OP_SCALED_GEMM;
}

static cudaDataType_t lt_ab_type(const struct fly_problem *p)
{
	return lt_scaled(p) ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
}

static int lt_problem_ok(const struct fly_problem *p)
{
	if (lt_scaled(p)) {
		/* cuBLASLt's fp8 wants "TN" (our NT), K % 16 == 0 */
		if (p->dtype != FLY_DT_FP8_E4M3 ||
		    p->layout != FLY_LAYOUT_NT || (p->flags & ~FLY_F_BIAS) ||
		    p->dims[2] % 16)
			return -EINVAL;
	} else if (p->op != FLY_OP_GEMM || p->dtype != FLY_DT_BF16) {
		return -EINVAL;
	}
	if (p->layout != FLY_LAYOUT_NT && p->layout != FLY_LAYOUT_NN)
		return -EINVAL;
	if (p->flags & ~(FLY_F_BIAS | FLY_F_SCALE))
		return -EINVAL;
	for (int i = 0; i < 3; i++)
		if (p->dims[i] < 1 || p->dims[i] > 0x7fffffff)
			return -EINVAL;
	return 0;
}

/* The calling thread's current device's handles (created on first use).
 * Called with lt_mu held. */
static struct lt_dev *lt_dev_get_locked(int *index)
{
	int d = 0;
	if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= LT_MAX_DEV)
		return NULL;
	*index = d;
	struct lt_dev *ld = &lt_devs[d];
	if (!ld->ready) {
		ld->ready = 1;
		ld->rc = 0;
		if (cublasLtCreate(&ld->lt) != CUBLAS_STATUS_SUCCESS)
			ld->rc = -ENODEV;
		else if (cublasCreate(&ld->blas) != CUBLAS_STATUS_SUCCESS)
			ld->rc = -ENODEV;
	}
	return ld->rc ? NULL : ld;
}

static void lt_entry_clear(struct lt_entry *e)
{
	if (!e->used)
		return;
	cublasLtMatrixLayoutDestroy(e->la);
	cublasLtMatrixLayoutDestroy(e->lb);
	cublasLtMatrixLayoutDestroy(e->lc);
	cublasLtMatmulDescDestroy(e->op);
	memset(e, 0, sizeof(*e));
}

/* Build the descriptors of @p p into @p e.  @return 0 or -EINVAL. */
static int lt_entry_build(struct lt_entry *e, int dev,
			  const struct fly_problem *p)
{
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	int nn = p->layout == FLY_LAYOUT_NN;
	cublasOperation_t ta = nn ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
	memset(e, 0, sizeof(*e));
	if (cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) !=
	    CUBLAS_STATUS_SUCCESS)
		return -EINVAL;
	cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
				       sizeof(ta));
	cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
				       sizeof(tb));
	if (p->flags & FLY_F_BIAS) {
		cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
		cudaDataType_t bt = CUDA_R_16BF;
		cublasLtMatmulDescSetAttribute(
		    e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep));
		cublasLtMatmulDescSetAttribute(
		    e->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
		    sizeof(bt));
	}
	/* cuBLAS's A is our B: [k x n_cublas] stored (NT) as N rows of K. */
	cudaDataType_t ab = lt_ab_type(p);
	cublasStatus_t s1 =
	    nn ? cublasLtMatrixLayoutCreate(&e->la, ab, n, k, n)
	       : cublasLtMatrixLayoutCreate(&e->la, ab, k, n, k);
	cublasStatus_t s2 = cublasLtMatrixLayoutCreate(&e->lb, ab, k, m, k);
	cublasStatus_t s3 =
	    cublasLtMatrixLayoutCreate(&e->lc, CUDA_R_16BF, n, m, n);
	e->used = 1;
	e->dev = dev;
	e->p = *p;
	if (s1 != CUBLAS_STATUS_SUCCESS || s2 != CUBLAS_STATUS_SUCCESS ||
	    s3 != CUBLAS_STATUS_SUCCESS) {
		lt_entry_clear(e);
		return -EINVAL;
	}
	return 0;
}

/* Find or make the cache entry of (@p p, @p params on @p dev); params NULL:
 * any entry of the problem.  Called with lt_mu held. */
static struct lt_entry *
lt_entry_get_locked(int dev, const struct fly_problem *p, const int64_t *params)
{
	struct lt_entry *any = NULL;
	for (int i = 0; i < LT_CACHE; i++) {
		struct lt_entry *e = &lt_cache[i];
		if (!e->used || e->dev != dev || memcmp(&e->p, p, sizeof(*p)))
			continue;
		if (!params)
			return e;
		if (e->has_algo &&
		    !memcmp(e->params, params,
			    sizeof(int64_t) * FLYK_CUBLASLT_NPARAMS))
			return e;
		if (!e->has_algo)
			any = e;
	}
	if (any)
		return any;
	struct lt_entry *e = &lt_cache[lt_next++ % LT_CACHE];
	lt_entry_clear(e);
	return lt_entry_build(e, dev, p) ? NULL : e;
}

/* Read one algorithm config attribute, whatever its size. */
static int64_t lt_attr_get(const cublasLtMatmulAlgo_t *a,
			   cublasLtMatmulAlgoConfigAttributes_t attr)
{
	uint64_t v = 0;
	size_t need = 0;
	if (cublasLtMatmulAlgoConfigGetAttribute(a, attr, NULL, 0, &need) !=
		CUBLAS_STATUS_SUCCESS ||
	    need == 0 || need > sizeof(v))
		return 0;
	if (cublasLtMatmulAlgoConfigGetAttribute(a, attr, &v, need, &need) !=
	    CUBLAS_STATUS_SUCCESS)
		return 0;
	switch (need) {
	case 1:
		return (int64_t)(uint8_t)v;
	case 2:
		return (int64_t)(uint16_t)v;
	case 4:
		return (int64_t)(int32_t)(uint32_t)v;
	default:
		return (int64_t)v;
	}
}

/* Write one attribute at its own size (little-endian truncation). */
static int lt_attr_set(cublasLtMatmulAlgo_t *a,
		       cublasLtMatmulAlgoConfigAttributes_t attr, int64_t val)
{
	size_t need = 0;
	if (cublasLtMatmulAlgoConfigGetAttribute(a, attr, NULL, 0, &need) !=
		CUBLAS_STATUS_SUCCESS ||
	    need == 0 || need > 8)
		return -EINVAL;
	uint64_t v = (uint64_t)val;
	return cublasLtMatmulAlgoConfigSetAttribute(a, attr, &v, need) ==
		       CUBLAS_STATUS_SUCCESS
		   ? 0
		   : -EINVAL;
}

static void lt_algo_to_params(const cublasLtMatmulAlgo_t *a, int hidx,
			      int64_t *out)
{
	memset(out, 0, sizeof(int64_t) * FLY_PARAMS_MAX);
	out[0] = lt_attr_get(a, CUBLASLT_ALGO_CONFIG_ID);
	out[1] = lt_attr_get(a, CUBLASLT_ALGO_CONFIG_TILE_ID);
	out[2] = lt_attr_get(a, CUBLASLT_ALGO_CONFIG_STAGES_ID);
	out[3] = lt_attr_get(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
	out[4] = lt_attr_get(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
	out[5] = lt_attr_get(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
	out[6] = lt_attr_get(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
	out[7] =
	    (int64_t)(hidx & 0xffff) |
	    ((lt_attr_get(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID) & 0xffff)
	     << 16) |
	    ((lt_attr_get(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID) & 0xffff)
	     << 32);
}

/* Whether out[n] replays like an earlier out[j] (every attribute equal;
 * the heuristic index in the low 16 bits of params[7] aside): such a
 * point would measure the same kernel twice. */
static int lt_params_seen(int64_t (*out)[FLY_PARAMS_MAX], int n)
{
	for (int j = 0; j < n; j++) {
		int same = (out[j][7] >> 16) == (out[n][7] >> 16);
		for (int i = 0; same && i < 7; i++)
			same = out[j][i] == out[n][i];
		if (same)
			return 1;
	}
	return 0;
}

/* Rebuild the algorithm of @p pr on @p e (AlgoInit + config attributes +
 * AlgoCheck for its workspace).  @return 0 or -EINVAL. */
static int lt_algo_replay(struct lt_dev *ld, struct lt_entry *e,
			  const int64_t *pr)
{
	cublasLtMatmulAlgo_t a;
	if (cublasLtMatmulAlgoInit(ld->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F,
				   lt_ab_type(&e->p), lt_ab_type(&e->p),
				   CUDA_R_16BF, CUDA_R_16BF, (int)pr[0],
				   &a) != CUBLAS_STATUS_SUCCESS)
		return -EINVAL;
	int64_t inner = (pr[7] >> 16) & 0xffff;
	int64_t cluster = (pr[7] >> 32) & 0xffff;
	if (lt_attr_set(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, pr[1]) ||
	    lt_attr_set(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, pr[2]) ||
	    lt_attr_set(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, pr[3]) ||
	    lt_attr_set(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, pr[4]) ||
	    lt_attr_set(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, pr[5]) ||
	    lt_attr_set(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, pr[6]))
		return -EINVAL;
	/* Hopper-era attributes: absent on older cuBLASLt, then left alone. */
	(void)lt_attr_set(&a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, inner);
	(void)lt_attr_set(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster);
	cublasLtMatmulHeuristicResult_t chk;
	memset(&chk, 0, sizeof(chk));
	if (cublasLtMatmulAlgoCheck(ld->lt, e->op, e->la, e->lb, e->lc, e->lc,
				    &a, &chk) != CUBLAS_STATUS_SUCCESS)
		return -EINVAL;
	e->algo = a;
	e->ws_need = chk.workspaceSize;
	memcpy(e->params, pr, sizeof(int64_t) * FLYK_CUBLASLT_NPARAMS);
	e->has_algo = 1;
	return 0;
}

/* The vendor BLAS in the fingerprint: "cublaslt-<cublasLtGetVersion()>",
 * so a library upgrade is a new device identity (its algorithm indices
 * and timings are not the old one's).  @return snprintf's. */
int flyk_vendor_blas(char *buf, size_t cap)
{
	return snprintf(buf, cap, "cublaslt-%zu", cublasLtGetVersion());
}

int flyk_cublaslt_feasible(const struct flyk_device *dev,
			   const struct fly_problem *p, const int64_t *params)
{
	(void)dev;
	if (lt_problem_ok(p))
		return -EINVAL;
	/* Algorithm ids are >= 0: -1 is the declared placeholder.  Other
	 * attributes may be -1 for real (SPLITK_NUM of some algorithms). */
	if (params[0] < 0 || params[0] > 0x7fffffff)
		return -EINVAL;
	return 0;
}

int flyk_cublaslt_enumerate(const struct flyk_device *dev,
			    const struct fly_problem *p,
			    int64_t (*out)[FLY_PARAMS_MAX], int max)
{
	cublasLtMatmulHeuristicResult_t res[FLYK_CUBLASLT_TOPN];
	cublasLtMatmulPreference_t pref = NULL;
	size_t ws = FLYK_GEMM_WS_BYTES;
	int want = max < FLYK_CUBLASLT_TOPN ? max : FLYK_CUBLASLT_TOPN;
	int got = 0, n = 0, d = 0, rc = -EOPNOTSUPP;
	(void)dev;
	if (lt_problem_ok(p) || want < 1)
		return lt_problem_ok(p) ? -EINVAL : 0;
	pthread_mutex_lock(&lt_mu);
	struct lt_dev *ld = lt_dev_get_locked(&d);
	struct lt_entry *e = ld ? lt_entry_get_locked(d, p, NULL) : NULL;
	if (!e)
		goto out;
	if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
		goto out;
	cublasLtMatmulPreferenceSetAttribute(
	    pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
	if (cublasLtMatmulAlgoGetHeuristic(ld->lt, e->op, e->la, e->lb, e->lc,
					   e->lc, pref, want, res,
					   &got) != CUBLAS_STATUS_SUCCESS)
		goto out;
	for (int i = 0; i < got; i++) {
		if (res[i].state != CUBLAS_STATUS_SUCCESS)
			continue;
		lt_algo_to_params(&res[i].algo, i, out[n]);
		/* Split-K reduced in the output type (bf16) loses the fp32
		 * accumulation the op promises (seen on the H200: off by more
		 * than |C| / 64 at K = 72, 66 splits). */
		if (out[n][4] == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)
			continue;
		if (!lt_params_seen(out, n))
			n++;
	}
	rc = n;
out:
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	pthread_mutex_unlock(&lt_mu);
	return rc;
}

int flyk_cublaslt_launch(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *params,
			 const union flyk_args *args, void *stream)
{
	struct flyk_gemm_args gg;
	const struct flyk_gemm_args *g = &args->gemm;
	const struct flyk_scaled_gemm_args *sg = &args->scaled_gemm;
	int rc = flyk_cublaslt_feasible(dev, p, params), d = 0;
	if (rc)
		return rc;
	if (lt_scaled(p)) {
		if (!sg->scale_a || !sg->scale_b)
			return -EINVAL;
		gg = (struct flyk_gemm_args){ sg->a, sg->b, sg->c, sg->bias,
					      1.0f, sg->workspace,
					      sg->workspace_size };
		g = &gg;
	}
	if (!g->a || !g->b || !g->c || ((p->flags & FLY_F_BIAS) && !g->bias))
		return -EINVAL;
	float alpha = (p->flags & FLY_F_SCALE) ? g->alpha : 1.0f, beta = 0.f;
	pthread_mutex_lock(&lt_mu);
	rc = -EINVAL;
	struct lt_dev *ld = lt_dev_get_locked(&d);
	struct lt_entry *e = ld ? lt_entry_get_locked(d, p, params) : NULL;
	if (!e)
		goto out;
	if (!e->has_algo && lt_algo_replay(ld, e, params))
		goto out;
	if (e->ws_need > 0 && (!g->workspace || g->workspace_size < e->ws_need))
		goto out;
	if (p->flags & FLY_F_BIAS)
		cublasLtMatmulDescSetAttribute(
		    e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
		    sizeof(g->bias));
	if (lt_scaled(p)) {
		/* cuBLAS's A is our B: its scale is scale_b */
		cublasLtMatmulDescSetAttribute(
		    e->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sg->scale_b,
		    sizeof(sg->scale_b));
		cublasLtMatmulDescSetAttribute(
		    e->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sg->scale_a,
		    sizeof(sg->scale_a));
	}
	rc = cublasLtMatmul(ld->lt, e->op, &alpha, g->b, e->la, g->a, e->lb,
			    &beta, g->c, e->lc, g->c, e->lc, &e->algo,
			    g->workspace, g->workspace_size,
			    (cudaStream_t)stream) == CUBLAS_STATUS_SUCCESS
		 ? 0
		 : -EIO;
out:
	pthread_mutex_unlock(&lt_mu);
	return rc;
}

int flyk_cublas_default_feasible(const struct flyk_device *dev,
				 const struct fly_problem *p,
				 const int64_t *params)
{
	(void)dev;
	(void)params;
	if (lt_problem_ok(p) || lt_scaled(p) || (p->flags & FLY_F_BIAS))
		return -EINVAL;
	return 0;
}

int flyk_cublas_default_launch(const struct flyk_device *dev,
			       const struct fly_problem *p,
			       const int64_t *params,
			       const union flyk_args *args, void *stream)
{
	const struct flyk_gemm_args *g = &args->gemm;
	int rc = flyk_cublas_default_feasible(dev, p, params), d = 0;
	if (rc)
		return rc;
	if (!g->a || !g->b || !g->c)
		return -EINVAL;
	int m = (int)p->dims[0], n = (int)p->dims[1], k = (int)p->dims[2];
	int nn = p->layout == FLY_LAYOUT_NN;
	float alpha = (p->flags & FLY_F_SCALE) ? g->alpha : 1.0f, beta = 0.f;
	pthread_mutex_lock(&lt_mu);
	struct lt_dev *ld = lt_dev_get_locked(&d);
	pthread_mutex_unlock(&lt_mu);
	if (!ld)
		return -ENODEV;
	if (cublasSetStream(ld->blas, (cudaStream_t)stream) !=
	    CUBLAS_STATUS_SUCCESS)
		return -EIO;
	cublasStatus_t s = cublasGemmEx(
	    ld->blas, nn ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, n, m, k,
	    &alpha, g->b, CUDA_R_16BF, nn ? n : k, g->a, CUDA_R_16BF, k, &beta,
	    g->c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	return s == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
}
