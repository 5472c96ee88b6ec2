/*
 * gemm/gemm.hip -- BF16 GEMM on the GPU: C[M,N] = alpha * A[M,K] x op(B) + bias,
 * NT (B [N,K]) and NN (B [K,N]), fp32 accumulation, bf16 out; and the gemm
 * op module (flyk_gpu_gemm_op), whose variant table also lists the vendor
 * candidates of kernels/vendor/cublaslt.c under nvcc.
 *
 * Owns: the gemm variants and flyk_gpu_gemm_op; the case state (the
 * reference output, on the device).  Thread: tables are immutable; launches
 * are asynchronous on the caller's stream.
 *
 * Variants, in default-search order (flyk_default takes the first one
 * that is feasible):
 *   cublas_default  (CUDA) cublasGemmEx, CUBLAS_GEMM_DEFAULT
 *   cublaslt        (CUDA) a cuBLASLt algorithm from the heuristic top-N
 *   gemm_stream     (sm_90a; NT, M <= 128) gemm/gemm_stream.h: B's rows
 *                   streamed by TMA as the wgmma's M, A's rows its N (8 to
 *                   128), split-K over a cluster of blocks summed through
 *                   distributed shared memory, one kernel: params rows,
 *                   mrows, split, stages.
 *   gemm_skinny     (NVIDIA sm_80+; NT, M <= 128) gemm/gemm_skinny.h: B's
 *                   rows on the MMA's M dimension, A's on its N, mma.sync
 *                   m16n8k16 from registers, K split over a block's warps,
 *                   one kernel (the decode shapes, where cuBLAS reads B
 *                   well under the HBM rate): params rows, mrows, warps,
 *                   stages.
 *   gemm_tma        (sm_90a) warp-specialised persistent TMA + mbarrier +
 *                   wgmma (gemm_tma.h): params tile_m, tile_n, split_k,
 *                   swizzle, store, cluster, k_tile; NT only (see "tma
 *                   host").
 *   gemm_wgmma      (sm_90a) the gemm_mma kernel with the wgmma engine of
 *                   gemm_tile.h: params tile_m, tile_n, stages, split_k,
 *                   swizzle (shapes of GEMM_WG_CFGS); NT only.  Before
 *                   gemm_mma: the tuner measures in table order, so under
 *                   its budget the likelier winner goes first.
 *   gemm_mma        (NVIDIA sm_80+) our tiled mma.sync kernel: params
 *                   tile_m, tile_n, tile_k, warps, stages (cp.async
 *                   buffers), split_k (fp32 partials in the workspace, then
 *                   a reduce kernel; grids of <= 8 waves), swizzle
 *                   (CTA rasterisation in groups of `swizzle` tile rows,
 *                   for L2 reuse).  Only the tile
 *                   shapes of GEMM_CFGS are built; other points are
 *                   infeasible.  K % 8 == 0 (NN: N % 8 == 0), A and B
 *                   16-byte aligned.
 *   gemm_fma        64x64 FMA tiles: any shape, the portable (AMD) path
 *   gemm_mfma       (AMD gfx90a, gfx940-942, gfx950) the gemm_mma kernel
 *                   with the MFMA engine of gemm_tile.h: params tile_m,
 *                   tile_n, tile_k, waves, mfma (the MFMA block, 32 or
 *                   16), lds_db (LDS double buffering), split_k.  NT and
 *                   NN, any M, N, K and alignment; only the shapes of
 *                   GEMM_MFMA_CFGS are built.  After gemm_fma: the
 *                   untuned default on AMD stays the FMA kernel until an
 *                   MFMA point has been checked and timed on a device (no
 *                   AMD device has run it yet).
 *   gemm_ref        one thread per output (the reference)
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm/gemm_skinny.h"
#include "gemm/gemm_stream.h"
#include "gemm/gemm_tile.h"
#include "gemm/gemm_tma.h"
#include "gpu_int.h"
#include "prim/flyk_gpu.h"
#include "prim/launch.h"
#if FLYK_HAS_CUBLAS
#include "gemm/gemm_vendor.h"
#else
#define FLYK_GEMM_WS_BYTES ((size_t)32 << 20)
#endif

#define GEMM_DT_MASK (1u << FLY_DT_BF16)
#define GEMM_FLAGS   (FLY_F_BIAS | FLY_F_SCALE)
/* alpha of the benchmark case when FLY_F_SCALE (as the CPU backend). */
#define GEMM_CASE_ALPHA 0.75f

static int gemm_problem_ok(const struct fly_problem *p)
{
	if (p->op != FLY_OP_GEMM || p->dtype != FLY_DT_BF16)
		return -EINVAL;
	if (p->layout != FLY_LAYOUT_NT && p->layout != FLY_LAYOUT_NN)
		return -EINVAL;
	if (p->flags & ~GEMM_FLAGS)
		return -EINVAL;
	if (p->dims[0] < 1 || p->dims[1] < 1 || p->dims[2] < 1)
		return -EINVAL;
	if (p->dims[0] > ((int64_t)1 << 31) || p->dims[1] > ((int64_t)1 << 31))
		return -EINVAL;
	return 0;
}

static float gemm_alpha(const struct fly_problem *p,
			const struct flyk_gemm_args *a)
{
	return (p->flags & FLY_F_SCALE) ? a->alpha : 1.0f;
}

static const uint16_t *gemm_bias(const struct fly_problem *p,
				 const struct flyk_gemm_args *a)
{
	return (p->flags & FLY_F_BIAS) ? (const uint16_t *)a->bias : NULL;
}

/* ------------------------------------------------------------ kernels */

template <class C>
__global__ void __launch_bounds__(C::THREADS)
    gemm_mma_kernel(const uint16_t *A, const uint16_t *B, uint16_t *Cm,
		    float *ws, const uint16_t *bias, float alpha, int64_t M,
		    int64_t N, int64_t K, int tiles_m, int tiles_n, int swz,
		    int64_t kps)
{
	int pid = blockIdx.x, per = swz * tiles_n, first = (pid / per) * swz;
	int gs = tiles_m - first < swz ? tiles_m - first : swz;
	int local = pid % per, tm = first + local % gs, tn = local / gs;
	FLYK_DYN_SMEM(uint4, gemm_dsmem);
	gemm_opnd o;
	o.a = A;
	o.b = B;
	o.lda = K;
	o.ldb = C::NN ? N : K;
	o.m0 = (int64_t)tm * C::BM;
	o.m_end = M;
	o.n0 = (int64_t)tn * C::BN;
	o.n_end = N;
	int64_t kb = (int64_t)blockIdx.y * kps;
	int64_t ke = kb + kps < K ? kb + kps : K;
	gemm_out out;
	out.ldc = N;
	out.m_end = M;
	out.n_end = N;
	out.alpha = alpha;
	out.bias = bias;
	out.c = gridDim.y > 1 ? NULL : Cm;
	out.ws = ws ? ws + (size_t)blockIdx.y * M * N : NULL;
	gemm_tile_run<C>(o, kb, ke, out, (uint16_t *)gemm_dsmem);
}

/* C = alpha * sum of the split partials + bias. */
__global__ void gemm_splitk_reduce(const float *ws, int splits, int64_t M,
				   int64_t N, uint16_t *Cm,
				   const uint16_t *bias, float alpha)
{
	int64_t n = M * N, stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float v = 0.f;
		for (int s = 0; s < splits; s++)
			v += ws[(size_t)s * n + i];
		v *= alpha;
		if (bias)
			v += flyk_db2f(bias[i % N]);
		Cm[i] = flyk_df2b(v);
	}
}

__global__ void __launch_bounds__(GEMM_FMA_THREADS)
    gemm_fma_kernel(const uint16_t *A, const uint16_t *B, uint16_t *Cm,
		    const uint16_t *bias, float alpha, int64_t M, int64_t N,
		    int64_t K, int nn, int tiles_n)
{
	gemm_opnd o;
	o.a = A;
	o.b = B;
	o.lda = K;
	o.ldb = nn ? N : K;
	o.m0 = (int64_t)(blockIdx.x / tiles_n) * GEMM_FMA_BM;
	o.m_end = M;
	o.n0 = (int64_t)(blockIdx.x % tiles_n) * GEMM_FMA_BN;
	o.n_end = N;
	gemm_out out;
	out.c = Cm;
	out.ws = NULL;
	out.ldc = N;
	out.m_end = M;
	out.n_end = N;
	out.alpha = alpha;
	out.bias = bias;
	gemm_fma_tile(o, nn != 0, K, out);
}

__global__ void gemm_ref_kernel(const uint16_t *A, const uint16_t *B,
				uint16_t *Cm, const uint16_t *bias, float alpha,
				int64_t M, int64_t N, int64_t K, int nn)
{
	int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= N)
		return;
	for (int64_t i = blockIdx.y; i < M; i += gridDim.y) {
		float acc = 0.f;
		for (int64_t q = 0; q < K; q++)
			acc += flyk_db2f(A[i * K + q]) *
			       flyk_db2f(nn ? B[q * N + j] : B[j * K + q]);
		acc *= alpha;
		if (bias)
			acc += flyk_db2f(bias[j]);
		Cm[i * N + j] = flyk_df2b(acc);
	}
}

#if FLYK_HAS_TMA
/* gemm_tma's launch: units = tiles_mc * tiles_n * split, split-major; a
 * unit is cl vertically adjacent tiles (one per block of a cluster). */
struct gemm_tma_job {
	int64_t m, n, k;
	int tiles_mc, tiles_n, swz, split, units, cl;
	int64_t kps; /* k per split, a multiple of the stage depth C::BK */
	uint16_t *c;
	float *ws;
	const uint16_t *bias;
	float alpha;
};

/* Unit u of a dense GEMM: split u / tiles, then gemm_mma_kernel's
 * rasterisation (groups of swz cluster rows, n across a group); block
 * @p rank of a cluster takes tile row tm * cl + rank (past M: a tile that
 * loads zeros, shares its half of B and stores nothing). */
template <int BM, int BN> struct gemm_tma_dense {
	gemm_tma_job j;
	__device__ __forceinline__ void operator()(int u, int rank,
						   gemm_tma_unit *w) const
	{
		int tiles = j.tiles_mc * j.tiles_n;
		int ks = u / tiles, pid = u - ks * tiles;
		int per = j.swz * j.tiles_n, first = (pid / per) * j.swz;
		int gs =
		    j.tiles_mc - first < j.swz ? j.tiles_mc - first : j.swz;
		int local = pid % per, tm = first + local % gs, tn = local / gs;
		tm = tm * j.cl + rank;
		int64_t kb = (int64_t)ks * j.kps;
		int64_t ke = kb + j.kps < j.k ? kb + j.kps : j.k;
		w->a_row = tm * BM;
		w->b_row = tn * BN;
		w->b_z = 0;
		w->k0 = (int)kb;
		w->nk = (int)((ke - kb + 63) / 64);
		w->m0 = (int64_t)tm * BM;
		w->n0 = (int64_t)tn * BN;
		w->out.c = j.split > 1 ? NULL : j.c;
		w->out.ws =
		    j.split > 1 ? j.ws + (size_t)ks * j.m * j.n : NULL;
		w->out.ldc = j.n;
		w->out.m_end = j.m;
		w->out.n_end = j.n;
		w->out.alpha = j.alpha;
		w->out.bias = j.bias;
		w->tstore = j.split == 1; /* the map's bounds are M, N */
	}
};

template <class C>
__global__ void __launch_bounds__(C::THREADS, 1)
    gemm_tma_kernel(const __grid_constant__ CUtensorMap ma,
		    const __grid_constant__ CUtensorMap mb,
		    const __grid_constant__ CUtensorMap mc,
		    const gemm_tma_job j)
{
	FLYK_DYN_SMEM(uint4, gemm_tma_dsmem);
	__shared__ uint64_t gemm_tma_bars[2 * C::ST];
	gemm_tma_dense<C::BM, C::BN> w{j};
	gemm_tma_run<C>(w, j.units, blockIdx.x / C::CL, gridDim.x / C::CL,
			&ma, &mb, false, &mc, (uint16_t *)gemm_tma_dsmem,
			gemm_tma_bars);
}
#endif

/* ------------------------------------------------------------ mma host */

struct mma_job {
	const struct flyk_gemm_args *a;
	int64_t m, n, k;
	int split, swz;
	float alpha;
	const uint16_t *bias;
	hipStream_t s;
};

typedef int (*mma_go_fn)(const struct mma_job *j);

/* The split-K reduction of @p split partials in @p ws into C (for the
 * tile kernels: an AMD build without MFMA configs calls it nowhere). */
[[maybe_unused]] static int gemm_reduce_go(const struct mma_job *j,
					   const float *ws, int split)
{
	int64_t n = j->m * j->n;
	int64_t blocks = (n + 255) / 256;
	if (blocks > 65536)
		blocks = 65536;
	FLYK_GO((unsigned)blocks, 256, 0, j->s, gemm_splitk_reduce)
	(ws, split, j->m, j->n, (uint16_t *)j->a->c, j->bias, j->alpha);
	return flyk_launch_err();
}

template <class C> static int mma_go(const struct mma_job *j)
{
	if (flyk_smem_optin<gemm_mma_kernel<C>>(C::SMEM))
		return -ENOSPC;
	int tiles_m = (int)((j->m + C::BM - 1) / C::BM);
	int tiles_n = (int)((j->n + C::BN - 1) / C::BN);
	int64_t kc = (j->k + j->split - 1) / j->split;
	int64_t kps = (kc + C::BK - 1) / C::BK * C::BK;
	int split = (int)((j->k + kps - 1) / kps);
	float *ws = split > 1 ? (float *)j->a->workspace : NULL;
	dim3 grid((unsigned)tiles_m * tiles_n, (unsigned)split);
	FLYK_GO(grid, C::THREADS, C::SMEM, j->s, gemm_mma_kernel<C>)
	((const uint16_t *)j->a->a, (const uint16_t *)j->a->b,
	 (uint16_t *)j->a->c, ws, j->bias, j->alpha, j->m, j->n, j->k, tiles_m,
	 tiles_n, j->swz < tiles_m ? j->swz : tiles_m, kps);
	int rc = flyk_launch_err();
	if (rc || split == 1)
		return rc;
	return gemm_reduce_go(j, ws, split);
}

struct mma_ent {
	int bm, bn, bk, warps, st;
	int smem[2]; /* NT, NN */
	mma_go_fn go[2];
};

#define GEMM_ENT(BM, BN, BK, WM, WN, ST)                                       \
	{BM,                                                                   \
	 BN,                                                                   \
	 BK,                                                                   \
	 WM * WN,                                                              \
	 ST,                                                                   \
	 {gemm_cfg<BM, BN, BK, WM, WN, ST, false>::SMEM,                       \
	  gemm_cfg<BM, BN, BK, WM, WN, ST, true>::SMEM},                       \
	 {mma_go<gemm_cfg<BM, BN, BK, WM, WN, ST, false>>,                     \
	  mma_go<gemm_cfg<BM, BN, BK, WM, WN, ST, true>>}},

#if FLYK_HAS_MMA
static const struct mma_ent mma_ents[] = {GEMM_CFGS(GEMM_ENT)};
#define NMMA (sizeof(mma_ents) / sizeof(mma_ents[0]))

/* The wgmma shapes (NT only): BM, BN, stages; warps = BM / 16. */
#define GEMM_WG_ENT(BM, BN, ST)                                                \
	{BM,                                                                   \
	 BN,                                                                   \
	 64,                                                                   \
	 BM / 16,                                                              \
	 ST,                                                                   \
	 {gemm_wg_cfg<BM, BN, ST>::SMEM, 0},                                   \
	 {mma_go<gemm_wg_cfg<BM, BN, ST>>, NULL}},
static const struct mma_ent wg_ents[] = {GEMM_WG_CFGS(GEMM_WG_ENT)};
#define NWG (sizeof(wg_ents) / sizeof(wg_ents[0]))
#endif

static const int64_t mma_tile_m[] = {16, 32, 64, 128, 256};
static const int64_t mma_tile_n[] = {64, 128, 256};
static const int64_t mma_tile_k[] = {32, 64, 128};
static const int64_t mma_warps[] = {4, 8};
static const int64_t mma_stages[] = {2, 3, 4};
static const int64_t mma_split[] = {1, 2, 4, 8};
static const int64_t mma_swz[] = {1, 8};
static const int64_t wg_tile_m[] = {64, 128, 256};
static const int64_t wg_tile_n[] = {128, 256};
static const int64_t wg_stages[] = {3, 4, 6};
static const int64_t wg_split[] = {1, 2, 4};

#if FLYK_HAS_MMA
static const struct mma_ent *mma_find(const int64_t *pr)
{
	for (size_t i = 0; i < NMMA; i++) {
		const struct mma_ent *e = &mma_ents[i];
		if (e->bm == pr[0] && e->bn == pr[1] && e->bk == pr[2] &&
		    e->warps == pr[3] && e->st == pr[4])
			return e;
	}
	return NULL;
}

/* gemm_wgmma's point (tile_m, tile_n, stages, split_k, swizzle) as a
 * gemm_mma point of its entry (bk 64, warps tile_m / 16). */
static void wg_point(const int64_t *pr, int64_t *q)
{
	q[0] = pr[0];
	q[1] = pr[1];
	q[2] = 64;
	q[3] = pr[0] / 16;
	q[4] = pr[2];
	q[5] = pr[3];
	q[6] = pr[4];
}

static const struct mma_ent *wg_find(const int64_t *q)
{
	for (size_t i = 0; i < NWG; i++) {
		const struct mma_ent *e = &wg_ents[i];
		if (e->bm == q[0] && e->bn == q[1] && e->warps == q[3] &&
		    e->st == q[4])
			return e;
	}
	return NULL;
}
#endif

/* The least tile_m of the mma shapes: never pruned. */
#define MMA_MIN_BM  16
#define MFMA_MIN_BM 32

#if FLYK_HAS_MMA || FLYK_HAS_MFMA
/* The rules of gemm_mma_kernel on bm x bn x bk tiles of @p smem bytes
 * (tile_m @p min_bm never pruned), at split @p split and rasterisation
 * @p swz. */
static int tile_rules(const struct flyk_device *dev,
		      const struct fly_problem *p, int bm, int bn, int bk,
		      int smem, int min_bm, int64_t split, int64_t swz)
{
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	if ((size_t)smem > dev->smem_per_block_optin)
		return -ENOSPC;
	if (((m + bm - 1) / bm) * ((n + bn - 1) / bn) > 0x7fffffff)
		return -EINVAL;
	/* Pruning (on the bucketed M, see flyk_gemm_bucket_m): a tile over
	 * twice the problem does what a smaller one does. */
	m = flyk_gemm_bucket_m(m);
	if ((bm > min_bm && bm / 2 >= m) || (bn > 64 && bn / 2 >= n))
		return -EINVAL;
	int64_t tiles = ((m + bm - 1) / bm) * ((n + bn - 1) / bn);
	if (split > 1) {
		/* Only for a grid of a few waves at most (split-K then fills
		 * the last wave), with >= 2 k-tiles a split. */
		if (tiles * split > 8 * (int64_t)dev->sms || k / split < 2 * bk)
			return -EINVAL;
		if ((uint64_t)split * m * n * 4 > FLYK_GEMM_WS_BYTES)
			return -EINVAL;
	}
	/* Rasterisation groups need several tile rows and columns. */
	if (swz > 1 && ((m + bm - 1) / bm < 2 * swz || (n + bn - 1) / bn < 2))
		return -EINVAL;
	return 0;
}
#endif

#if FLYK_HAS_MMA
/* The rules shared by gemm_mma and gemm_wgmma, for entry @p e and the
 * point @p pr in gemm_mma's order. */
static int ent_feasible(const struct flyk_device *dev,
			const struct fly_problem *p,
			const struct mma_ent *e, const int64_t *pr)
{
	int nn = p->layout == FLY_LAYOUT_NN;
	if (p->dims[2] % 8 || (nn && p->dims[1] % 8))
		return -EINVAL;
	if (!e || !e->go[nn])
		return -EINVAL;
	return tile_rules(dev, p, e->bm, e->bn, e->bk, e->smem[nn],
			  MMA_MIN_BM, pr[5], pr[6]);
}
#endif

static int mma_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	if (gemm_problem_ok(p))
		return -EINVAL;
#if !FLYK_HAS_MMA
	(void)dev;
	(void)pr;
	return -ENOSPC;
#else
	if (dev->cc_major < 8)
		return -ENOSPC;
	return ent_feasible(dev, p, mma_find(pr), pr);
#endif
}

static int wg_feasible(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr)
{
	if (gemm_problem_ok(p))
		return -EINVAL;
#if !FLYK_HAS_WGMMA
	(void)dev;
	(void)pr;
	return -ENOSPC;
#else
	if (dev->cc_major != 9)
		return -ENOSPC;
	if (p->layout != FLY_LAYOUT_NT)
		return -EINVAL;
	int64_t q[7];
	wg_point(pr, q);
	return ent_feasible(dev, p, wg_find(q), q);
#endif
}

#if FLYK_HAS_MMA || FLYK_HAS_MFMA
/* Whether @p ptr is aligned to @p al bytes. */
static int gemm_al(const void *ptr, uintptr_t al)
{
	return ((uintptr_t)ptr & (al - 1)) == 0;
}
#endif

#if FLYK_HAS_MMA
static int ent_launch(const struct mma_ent *e, const struct fly_problem *p,
		      const int64_t *pr, const union flyk_args *args,
		      void *stream);
#endif

static int mma_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int rc = mma_feasible(dev, p, pr);
	if (rc)
		return rc;
#if !FLYK_HAS_MMA
	(void)args;
	(void)stream;
	return -EOPNOTSUPP;
#else
	return ent_launch(mma_find(pr), p, pr, args, stream);
#endif
}

/* gemm_skinny: gemm/gemm_skinny.h on bf16 (NT; NVIDIA sm_80+, M <= 128):
 * B's rows on the MMA's M dimension, A's on its N, K split over a
 * block's warps, one kernel. */
static int skinny_feasible(const struct flyk_device *dev,
			   const struct fly_problem *p, const int64_t *pr)
{
	if (gemm_problem_ok(p) || p->layout != FLY_LAYOUT_NT)
		return -EINVAL;
	return gemm_skinny_feasible(dev, GEMM_SKINNY_BF16, p->dims[0],
				    p->dims[1], pr);
}

static int skinny_launch(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *pr,
			 const union flyk_args *args, void *stream)
{
	int rc = skinny_feasible(dev, p, pr);
	if (rc)
		return rc;
	const struct flyk_gemm_args *a = &args->gemm;
	if (!a->a || !a->b || !a->c || ((p->flags & FLY_F_BIAS) && !a->bias))
		return -EINVAL;
	gemm_skinny_args x = {(const uint8_t *)a->a,
			      (const uint8_t *)a->b,
			      NULL,
			      NULL,
			      gemm_alpha(p, a),
			      gemm_bias(p, a),
			      (uint16_t *)a->c,
			      p->dims[0],
			      p->dims[1],
			      p->dims[2] * 2,
			      false};
	return gemm_skinny_launch(GEMM_SKINNY_BF16, pr, &x, stream);
}

/* gemm_stream: gemm/gemm_stream.h (NT; sm_90a, bucketed M <= 128): B
 * streamed by TMA as the wgmma's M, A's rows its N, split-K over a
 * cluster summed in distributed shared memory, one kernel. */
static int stream_feasible(const struct flyk_device *dev,
			   const struct fly_problem *p, const int64_t *pr)
{
	if (gemm_problem_ok(p) || p->layout != FLY_LAYOUT_NT)
		return -EINVAL;
	return gemm_stream_feasible(dev, false, p->dims[0], p->dims[1],
				    p->dims[2], pr);
}

static int stream_launch(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *pr,
			 const union flyk_args *args, void *stream)
{
	int rc = stream_feasible(dev, p, pr);
	if (rc)
		return rc;
	const struct flyk_gemm_args *a = &args->gemm;
	if (!a->a || !a->b || !a->c || ((p->flags & FLY_F_BIAS) && !a->bias))
		return -EINVAL;
	gemm_stream_job j;
	memset(&j, 0, sizeof(j));
	j.c = (uint16_t *)a->c;
	j.bias = gemm_bias(p, a);
	j.alpha = gemm_alpha(p, a);
	j.m = (int)p->dims[0];
	j.n = (int)p->dims[1];
	return gemm_stream_launch(false, pr, a->a, a->b, p->dims[2], &j,
				  stream);
}

static int wg_launch(const struct flyk_device *dev,
		     const struct fly_problem *p, const int64_t *pr,
		     const union flyk_args *args, void *stream)
{
	int rc = wg_feasible(dev, p, pr);
	if (rc)
		return rc;
#if !FLYK_HAS_MMA
	(void)args;
	(void)stream;
	return -EOPNOTSUPP;
#else
	int64_t q[7];
	wg_point(pr, q);
	return ent_launch(wg_find(q), p, q, args, stream);
#endif
}

#if FLYK_HAS_MMA || FLYK_HAS_MFMA
/* The job of a launch with @p split and @p swz, its arguments checked
 * (pointers, A and B aligned to @p ab_al bytes, C to @p c_al, bias,
 * workspace).  @return 0 or -EINVAL. */
static int gemm_job_of(const struct fly_problem *p, const union flyk_args *args,
		       int64_t split, int64_t swz, uintptr_t ab_al,
		       uintptr_t c_al, void *stream, struct mma_job *j)
{
	const struct flyk_gemm_args *a = &args->gemm;
	if (!a->a || !a->b || !a->c || !gemm_al(a->a, ab_al) ||
	    !gemm_al(a->b, ab_al) || !gemm_al(a->c, c_al))
		return -EINVAL;
	if ((p->flags & FLY_F_BIAS) && !a->bias)
		return -EINVAL;
	j->a = a;
	j->m = p->dims[0];
	j->n = p->dims[1];
	j->k = p->dims[2];
	j->split = (int)split;
	j->swz = (int)swz;
	j->alpha = gemm_alpha(p, a);
	j->bias = gemm_bias(p, a);
	j->s = (hipStream_t)stream;
	if (j->split > 1 &&
	    (!a->workspace || !gemm_al(a->workspace, 16) ||
	     a->workspace_size < (size_t)j->split * j->m * j->n * 4))
		return -EINVAL;
	return 0;
}
#endif

#if FLYK_HAS_MMA
/* Launch entry @p e at the point @p pr (gemm_mma's order), feasible. */
static int ent_launch(const struct mma_ent *e, const struct fly_problem *p,
		      const int64_t *pr, const union flyk_args *args,
		      void *stream)
{
	struct mma_job j;
	int rc = gemm_job_of(p, args, pr[5], pr[6], 16, 4, stream, &j);
	return rc ? rc : e->go[p->layout == FLY_LAYOUT_NN](&j);
}
#endif

/* ------------------------------------------------------------ mfma host */

/*
 * gemm_mfma: gemm_mma_kernel (split-K, the reduce kernel) on the MFMA
 * engine of gemm_tile.h.  A point is (tile_m, tile_n, tile_k, waves, mfma,
 * lds_db, split_k); the shapes of GEMM_MFMA_CFGS, each with and without
 * LDS double buffering, are built.  Feasible where the device has the
 * bf16 MFMA instructions (flyk_mfma_arch_ok), -EINVAL elsewhere.
 */
static const int64_t mf_tile_m[] = {32, 64, 128, 256};
static const int64_t mf_tile_n[] = {32, 64, 128};
static const int64_t mf_tile_k[] = {32, 64};
static const int64_t mf_waves[] = {1, 2, 4, 8};
static const int64_t mf_block[] = {32, 16};
static const int64_t mf_db[] = {0, 1};
static const int64_t mf_split[] = {1, 2, 4};

#if FLYK_HAS_MFMA
struct mfma_ent {
	int bm, bn, bk, waves, mf, db;
	int smem[2];	 /* NT, NN */
	mma_go_fn go[2];
};

#define GEMM_MFMA_ENT_DB(BM, BN, BK, WM, WN, MF, DB)                           \
	{BM,                                                                   \
	 BN,                                                                   \
	 BK,                                                                   \
	 WM * WN,                                                              \
	 MF,                                                                   \
	 DB,                                                                   \
	 {gemm_mfma_cfg<BM, BN, BK, WM, WN, MF, DB, false>::SMEM,              \
	  gemm_mfma_cfg<BM, BN, BK, WM, WN, MF, DB, true>::SMEM},              \
	 {mma_go<gemm_mfma_cfg<BM, BN, BK, WM, WN, MF, DB, false>>,            \
	  mma_go<gemm_mfma_cfg<BM, BN, BK, WM, WN, MF, DB, true>>}},
#define GEMM_MFMA_ENT(BM, BN, BK, WM, WN, MF)                                  \
	GEMM_MFMA_ENT_DB(BM, BN, BK, WM, WN, MF, false)                        \
	GEMM_MFMA_ENT_DB(BM, BN, BK, WM, WN, MF, true)
static const struct mfma_ent mfma_ents[] = {GEMM_MFMA_CFGS(GEMM_MFMA_ENT)};

static const struct mfma_ent *mfma_find(const int64_t *pr)
{
	for (size_t i = 0; i < sizeof(mfma_ents) / sizeof(mfma_ents[0]); i++) {
		const struct mfma_ent *e = &mfma_ents[i];
		if (e->bm == pr[0] && e->bn == pr[1] && e->bk == pr[2] &&
		    e->waves == pr[3] && e->mf == pr[4] && e->db == pr[5])
			return e;
	}
	return NULL;
}
#endif

static int mfma_feasible(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *pr)
{
	if (gemm_problem_ok(p))
		return -EINVAL;
#if !FLYK_HAS_MFMA
	(void)dev;
	(void)pr;
	return -EINVAL;
#else
	const struct mfma_ent *e = mfma_find(pr);
	if (!e || !flyk_mfma_arch_ok(dev->arch))
		return -EINVAL;
	int nn = p->layout == FLY_LAYOUT_NN;
	return tile_rules(dev, p, e->bm, e->bn, e->bk, e->smem[nn],
			  MFMA_MIN_BM, pr[6], 1);
#endif
}

static int mfma_launch(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr,
		       const union flyk_args *args, void *stream)
{
	int rc = mfma_feasible(dev, p, pr);
	if (rc)
		return rc;
#if !FLYK_HAS_MFMA
	(void)args;
	(void)stream;
	return -EOPNOTSUPP;
#else
	/* Any alignment of A, B and C: the engine loads and stores what is
	 * not aligned element by element. */
	struct mma_job j;
	rc = gemm_job_of(p, args, pr[6], 1, 2, 2, stream, &j);
	return rc ? rc : mfma_find(pr)->go[p->layout == FLY_LAYOUT_NN](&j);
#endif
}

/* ------------------------------------------------------------ tma host */

/*
 * gemm_tma (sm_90a): the warp-specialised TMA + wgmma kernel of
 * gemm_tma.h, persistent (grid = min(units, SMs)).  Params tile_m, tile_n
 * (the shapes of GEMM_TMA_CFGS and GEMM_TMA_CFGS_DENSE; stages fixed per
 * shape), split_k (fp32 partials, then gemm_splitk_reduce), swizzle,
 * store (1: the epilogue writes C through shared memory and a TMA store,
 * overlapping the next tile; needs N % 8 == 0, a 16-byte aligned C and
 * split_k 1; 2: the same in two passes through half the buffer, a stage
 * more: the shapes with TS 2), cluster (2: two blocks on vertically
 * adjacent tiles share B by TMA multicast; needs two tile rows), k_tile
 * (64 or 128: the k depth of a stage; 128 on the shapes of GEMM_TMA_CFGS
 * with KP 2).  NT only, K % 8 == 0, A and B 16-byte aligned (the tensor
 * maps' rules).
 */
static const int64_t tma_tile_m[] = {64, 128, 256};
static const int64_t tma_tile_n[] = {64, 128, 256};
static const int64_t tma_split[] = {1, 2, 4, 8};
static const int64_t tma_store[] = {0, 1, 2};
static const int64_t tma_cluster[] = {1, 2};
static const int64_t tma_k_tile[] = {64, 128};

#if FLYK_HAS_TMA
typedef int (*tma_go_fn)(const struct mma_job *j, int sms);

template <class C> static int tma_go(const struct mma_job *j, int sms)
{
	if (flyk_smem_optin<gemm_tma_kernel<C>>(C::SMEM))
		return -ENOSPC;
	gemm_tma_job g;
	g.m = j->m;
	g.n = j->n;
	g.k = j->k;
	int tiles_m = (int)((j->m + C::BM - 1) / C::BM);
	g.cl = C::CL;
	g.tiles_mc = (tiles_m + C::CL - 1) / C::CL;
	g.tiles_n = (int)((j->n + C::BN - 1) / C::BN);
	g.swz = j->swz < g.tiles_mc ? j->swz : g.tiles_mc;
	int64_t kc = (j->k + j->split - 1) / j->split;
	g.kps = (kc + C::BK - 1) / C::BK * C::BK; /* whole stages */
	g.split = (int)((j->k + g.kps - 1) / g.kps);
	g.units = g.tiles_mc * g.tiles_n * g.split;
	g.c = (uint16_t *)j->a->c;
	g.ws = g.split > 1 ? (float *)j->a->workspace : NULL;
	g.bias = j->bias;
	g.alpha = j->alpha;
	CUtensorMap ma, mb, mc;
	if (gemm_tma_maps<C>(j->a->a, j->a->b, j->a->c, j->m, j->n, j->k, 0,
			     &ma, &mb, &mc))
		return -EINVAL;
	int clusters = g.units < sms / C::CL ? g.units : sms / C::CL;
	int rc = flyk_cluster_go(gemm_tma_kernel<C>, clusters, C::THREADS, C::SMEM,
			     C::CL, j->s, ma, mb, mc, g);
	if (rc || g.split == 1)
		return rc;
	return gemm_reduce_go(j, g.ws, g.split);
}

typedef gemm_tma_ent<tma_go_fn> tma_ent;
#define GEMM_TMA_ENT(...) GEMM_TMA_ENT_OF(tma_go, __VA_ARGS__)
static const tma_ent tma_ents[] = {GEMM_TMA_CFGS(GEMM_TMA_ENT)
				       GEMM_TMA_CFGS_DENSE(GEMM_TMA_ENT)};

/* The entry of point @p pr (tile_m, tile_n, split_k, swizzle, store,
 * cluster, k_tile). */
static const tma_ent *tma_find(const int64_t *pr)
{
	return gemm_tma_find(tma_ents, sizeof(tma_ents) / sizeof(tma_ents[0]),
			     pr[0], pr[1], pr[4], pr[5], pr[6]);
}
#endif

static int tma_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	if (gemm_problem_ok(p))
		return -EINVAL;
#if !FLYK_HAS_TMA
	(void)dev;
	(void)pr;
	return -ENOSPC;
#else
	if (dev->cc_major != 9)
		return -ENOSPC;
	const tma_ent *e = tma_find(pr);
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	if (!e || p->layout != FLY_LAYOUT_NT || k % 8)
		return -EINVAL;
	/* The TMA store: rows of C 16-byte aligned, bf16 out (no split). */
	if (e->ts && (n % 8 || pr[2] > 1))
		return -EINVAL;
	if (m > 0x7fffffff || n > 0x7fffffff || k > 0x7fffffff)
		return -EINVAL;
	if ((size_t)e->smem > dev->smem_per_block_optin)
		return -ENOSPC;
	/* Pruning on the bucketed M (flyk_gemm_bucket_m); 64 rows is
	 * wgmma's least, so tile_m 64 stays for every M. */
	int64_t mb = flyk_gemm_bucket_m(m);
	if ((e->bm > 64 && e->bm / 2 >= mb) || (e->bn > 64 && e->bn / 2 >= n))
		return -EINVAL;
	int64_t tm = (mb + e->bm - 1) / e->bm, tn = (n + e->bn - 1) / e->bn;
	if (tm * tn * 8 > 0x7fffffff)
		return -EINVAL;
	/* A cluster pairs two tile rows: only where there are two. */
	if (e->cl > 1 && tm < e->cl)
		return -EINVAL;
	/* k tiles of 128 where there are two of them. */
	if (e->bk > 64 && k < 2 * e->bk)
		return -EINVAL;
	tm = (tm + e->cl - 1) / e->cl; /* units per tile column */
	int64_t split = pr[2], swz = pr[3];
	if (split > 1) {
		/* Only while the grid has fewer units than two waves of
		 * clusters, with >= 2 k-tiles a split. */
		if (tm * tn * split > 2 * (int64_t)dev->sms / e->cl ||
		    k / split < 128)
			return -EINVAL;
		if ((uint64_t)split * m * n * 4 > FLYK_GEMM_WS_BYTES)
			return -EINVAL;
	}
	if (swz > 1 && (tm < 2 * swz || tn < 2))
		return -EINVAL;
	return 0;
#endif
}

static int tma_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int rc = tma_feasible(dev, p, pr);
	if (rc)
		return rc;
#if !FLYK_HAS_TMA
	(void)args;
	(void)stream;
	return -EOPNOTSUPP;
#else
	/* The TMA store (ts) reads C's rows 16 bytes at a time. */
	const tma_ent *e = tma_find(pr);
	struct mma_job j;
	rc = gemm_job_of(p, args, pr[2], pr[3], 16, e->ts ? 16 : 4, stream,
			 &j);
	return rc ? rc : e->go(&j, dev->sms);
#endif
}

/* ------------------------------------------------------------ fma, ref */

static int simple_feasible(const struct flyk_device *dev,
			   const struct fly_problem *p, const int64_t *pr)
{
	(void)dev;
	(void)pr;
	return gemm_problem_ok(p);
}

static int fma_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int rc = simple_feasible(dev, p, pr);
	if (rc)
		return rc;
	const struct flyk_gemm_args *a = &args->gemm;
	if (!a->a || !a->b || !a->c || ((p->flags & FLY_F_BIAS) && !a->bias))
		return -EINVAL;
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	int64_t tm = (m + GEMM_FMA_BM - 1) / GEMM_FMA_BM;
	int64_t tn = (n + GEMM_FMA_BN - 1) / GEMM_FMA_BN;
	if (tm * tn > 0x7fffffff)
		return -EINVAL;
	FLYK_GO((unsigned)(tm * tn), GEMM_FMA_THREADS, 0, (hipStream_t)stream,
		gemm_fma_kernel)
	((const uint16_t *)a->a, (const uint16_t *)a->b, (uint16_t *)a->c,
	 gemm_bias(p, a), gemm_alpha(p, a), m, n, k, p->layout == FLY_LAYOUT_NN,
	 (int)tn);
	return flyk_launch_err();
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int rc = simple_feasible(dev, p, pr);
	if (rc)
		return rc;
	const struct flyk_gemm_args *a = &args->gemm;
	if (!a->a || !a->b || !a->c || ((p->flags & FLY_F_BIAS) && !a->bias))
		return -EINVAL;
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	dim3 grid((unsigned)((n + 127) / 128),
		  (unsigned)(m < 65535 ? m : 65535));
	FLYK_GO(grid, 128, 0, (hipStream_t)stream, gemm_ref_kernel)
	((const uint16_t *)a->a, (const uint16_t *)a->b, (uint16_t *)a->c,
	 gemm_bias(p, a), gemm_alpha(p, a), m, n, k,
	 p->layout == FLY_LAYOUT_NN);
	return flyk_launch_err();
}

/* ------------------------------------------------------------ table */

#if !FLYK_DEVICE_PASS

#if FLYK_HAS_CUBLAS
/* cuBLASLt's points come from enumerate(); this placeholder is never
 * feasible (see gemm_vendor.h). */
static const int64_t lt_none[] = {-1};
#endif

static const struct flyk_variant gemm_variants[] = {
#if FLYK_HAS_CUBLAS
    {"cublas_default",
     FLY_OP_GEMM,
     GEMM_DT_MASK,
     FLY_F_SCALE,
     0,
     0,
     {},
     flyk_cublas_default_feasible,
     NULL,
     flyk_cublas_default_launch},
    {"cublaslt",
     FLY_OP_GEMM,
     GEMM_DT_MASK,
     GEMM_FLAGS,
     0,
     FLYK_CUBLASLT_NPARAMS,
     {{"algo", FLYK_NV(lt_none)},
      {"tile", FLYK_NV(lt_none)},
      {"stages", FLYK_NV(lt_none)},
      {"splitk", FLYK_NV(lt_none)},
      {"reduction", FLYK_NV(lt_none)},
      {"swizzle", FLYK_NV(lt_none)},
      {"custom", FLYK_NV(lt_none)},
      {"shape", FLYK_NV(lt_none)}},
     flyk_cublaslt_feasible,
     flyk_cublaslt_enumerate,
     flyk_cublaslt_launch},
#endif
    {"gemm_stream",
     FLY_OP_GEMM,
     GEMM_DT_MASK,
     GEMM_FLAGS,
     0,
     4,
     {{"rows", FLYK_NV(gemm_stream_rows)},
      {"mrows", FLYK_NV(gemm_stream_mrows)},
      {"split", FLYK_NV(gemm_stream_split)},
      {"stages", FLYK_NV(gemm_stream_stages)}},
     stream_feasible,
     NULL,
     stream_launch},
    {"gemm_skinny",
     FLY_OP_GEMM,
     GEMM_DT_MASK,
     GEMM_FLAGS,
     0,
     4,
     {{"rows", FLYK_NV(gemm_skinny_rows)},
      {"mrows", FLYK_NV(gemm_skinny_mrows)},
      {"warps", FLYK_NV(gemm_skinny_warps)},
      {"stages", FLYK_NV(gemm_skinny_stages)}},
     skinny_feasible,
     NULL,
     skinny_launch},
    {"gemm_tma",
     FLY_OP_GEMM,
     GEMM_DT_MASK,
     GEMM_FLAGS,
     0,
     7,
     {{"tile_m", FLYK_NV(tma_tile_m)},
      {"tile_n", FLYK_NV(tma_tile_n)},
      {"split_k", FLYK_NV(tma_split)},
      {"swizzle", FLYK_NV(mma_swz)},
      {"store", FLYK_NV(tma_store)},
      {"cluster", FLYK_NV(tma_cluster)},
      {"k_tile", FLYK_NV(tma_k_tile)}},
     tma_feasible,
     NULL,
     tma_launch},
    {"gemm_wgmma",
     FLY_OP_GEMM,
     GEMM_DT_MASK,
     GEMM_FLAGS,
     0,
     5,
     {{"tile_m", FLYK_NV(wg_tile_m)},
      {"tile_n", FLYK_NV(wg_tile_n)},
      {"stages", FLYK_NV(wg_stages)},
      {"split_k", FLYK_NV(wg_split)},
      {"swizzle", FLYK_NV(mma_swz)}},
     wg_feasible,
     NULL,
     wg_launch,
     "gemm_tma"},
    {"gemm_mma",
     FLY_OP_GEMM,
     GEMM_DT_MASK,
     GEMM_FLAGS,
     0,
     7,
     {{"tile_m", FLYK_NV(mma_tile_m)},
      {"tile_n", FLYK_NV(mma_tile_n)},
      {"tile_k", FLYK_NV(mma_tile_k)},
      {"warps", FLYK_NV(mma_warps)},
      {"stages", FLYK_NV(mma_stages)},
      {"split_k", FLYK_NV(mma_split)},
      {"swizzle", FLYK_NV(mma_swz)}},
     mma_feasible,
     NULL,
     mma_launch,
     "gemm_tma"},
    {"gemm_fma",
     FLY_OP_GEMM,
     GEMM_DT_MASK,
     GEMM_FLAGS,
     0,
     0,
     {},
     simple_feasible,
     NULL,
     fma_launch,
     "gemm_mma"},
    {"gemm_mfma",
     FLY_OP_GEMM,
     GEMM_DT_MASK,
     GEMM_FLAGS,
     0,
     7,
     {{"tile_m", FLYK_NV(mf_tile_m)},
      {"tile_n", FLYK_NV(mf_tile_n)},
      {"tile_k", FLYK_NV(mf_tile_k)},
      {"waves", FLYK_NV(mf_waves)},
      {"mfma", FLYK_NV(mf_block)},
      {"lds_db", FLYK_NV(mf_db)},
      {"split_k", FLYK_NV(mf_split)}},
     mfma_feasible,
     NULL,
     mfma_launch},
    {"gemm_ref",
     FLY_OP_GEMM,
     GEMM_DT_MASK,
     GEMM_FLAGS,
     1,
     0,
     {},
     simple_feasible,
     NULL,
     ref_launch},
};
#endif

/* ------------------------------------------------------------ case */

struct gemm_state {
	void *d_ref;	 /* reference C (device) */
	unsigned *d_cmp; /* flyk_gpu_gemm_compare's two words */
	size_t n;	 /* M * N */
};

static int gemm_setup(struct flyk_case *c, uint64_t seed)
{
	const struct fly_problem *p = &c->p;
	if (gemm_problem_ok(p))
		return -EOPNOTSUPP;
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	struct gemm_state *st = (struct gemm_state *)calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	c->state = st;
	st->n = (size_t)m * n;
	struct flyk_gemm_args *a = &c->args.gemm;
	void *x, *y, *out, *ref, *bias = NULL, *ws, *cmp;
	if (flyk_gpu_case_alloc(c, (size_t)m * k * 2, 0, &x) < 0 ||
	    flyk_gpu_case_alloc(c, (size_t)n * k * 2, 0, &y) < 0 ||
	    flyk_gpu_case_alloc(c, st->n * 2, 1, &out) < 0 ||
	    flyk_gpu_case_alloc(c, st->n * 2, 0, &ref) < 0 ||
	    flyk_gpu_case_alloc(c, 2 * sizeof(unsigned), 0, &cmp) < 0 ||
	    flyk_gpu_case_alloc(c, FLYK_GEMM_WS_BYTES, 0, &ws) < 0)
		return -ENOMEM;
	if ((p->flags & FLY_F_BIAS) &&
	    flyk_gpu_case_alloc(c, (size_t)n * 2, 0, &bias) < 0)
		return -ENOMEM;
	struct flyk_device *dev = c->dev;
	int rc = flyk_gpu_fill_random(dev, x, (size_t)m * k, FLY_DT_BF16, -1.f,
				      1.f, seed);
	if (!rc)
		rc = flyk_gpu_fill_random(dev, y, (size_t)n * k, FLY_DT_BF16,
					  -1.f, 1.f, seed + 1);
	if (!rc && bias)
		rc = flyk_gpu_fill_random(dev, bias, (size_t)n, FLY_DT_BF16,
					  -1.f, 1.f, seed + 2);
	if (rc)
		return rc;
	a->a = x;
	a->b = y;
	a->c = ref;
	a->bias = bias;
	a->alpha = (p->flags & FLY_F_SCALE) ? GEMM_CASE_ALPHA : 1.0f;
	a->workspace = ws;
	a->workspace_size = FLYK_GEMM_WS_BYTES;
	/* The reference: gemm_ref (one thread per output) where it is quick;
	 * above 2^32 multiply-adds gemm_fma (FMA tiles through shared memory,
	 * itself checked against gemm_ref on every shape of test_gpu_gemm):
	 * gemm_ref took ~1 s of the tuning of an 8192^3 key. */
	if ((double)m * n * k > 4294967296.0)
		rc = fma_launch(dev, p, NULL, &c->args, dev->stream);
	else
		rc = ref_launch(dev, p, NULL, &c->args, dev->stream);
	a->c = out;
	st->d_ref = ref;
	st->d_cmp = (unsigned *)cmp;
	return rc;
}

/* The GEMM check: |got - ref| <= |ref| / 64 + 2e-3 * sqrt(k) (one bf16
 * rounding each side, fp32 summation order), no NaN. */
extern "C" int flyk_gpu_gemm_compare(struct flyk_device *dev,
				     const void *got, const void *ref,
				     size_t n, int64_t k, unsigned *d_cmp,
				     double *max_err)
{
	return flyk_gpu_compare(dev, FLY_DT_BF16, got, ref, n, 1.f / 64.f, 0.f,
				(float)(2e-3 * sqrt((double)k)), d_cmp,
				max_err);
}

static int gemm_check(struct flyk_case *c, double *max_err)
{
	struct gemm_state *st = (struct gemm_state *)c->state;
	return flyk_gpu_gemm_compare(c->dev, c->args.gemm.c, st->d_ref, st->n,
				     c->p.dims[2], st->d_cmp, max_err);
}

static void gemm_fini(struct flyk_case *c)
{
	free(c->state);
	c->state = NULL;
}

#if !FLYK_DEVICE_PASS
extern "C" const struct flyk_gpu_op flyk_gpu_gemm_op = {
    FLY_OP_GEMM,
    gemm_variants,
    sizeof(gemm_variants) / sizeof(gemm_variants[0]),
    gemm_setup,
    gemm_check,
    gemm_fini,
    NULL,
};
#endif
