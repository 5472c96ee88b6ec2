/*
 * gemm/grouped_gemm.hip -- grouped (MoE) BF16 GEMM on the GPU in one launch: for
 * each expert g, rows [offsets[g], offsets[g+1]) of A [sum rows, K] times
 * B[g]^T (B [G, N, K], NT per expert) into the same rows of C [sum rows,
 * N]; fp32 accumulation, bf16 out.  Semantics as kernels/cpu/grouped_gemm.c.
 *
 * Owns: the grouped_gemm variants and flyk_gpu_grouped_gemm_op; the case
 * state (device reference).  Thread: tables immutable; launches asynchronous.
 *
 * Tile scheduler: the work is the list of (expert, m-tile, n-tile), experts
 * in order, n fastest.  Every block reads the device offsets (the host never
 * does: launches stay asynchronous and capturable), builds the prefix of
 * per-expert tile counts in shared memory (one warp, a shuffle scan), and
 * finds its expert by binary search over that prefix.  Empty experts have
 * no tiles; offsets are clamped to [0, M] and made monotonic, so bad
 * offsets cannot make a block read out of bounds.  The grid is the upper
 * bound (M / tile_m + G) * tiles_n, the blocks past the real count exit
 * at once; the persistent variant (persist = blocks per SM) instead loops
 * a grid of sms * persist blocks over the tiles.
 *
 * Variants: ggemm_tma (sm_90a: the TMA + wgmma kernel of gemm_tma.h,
 * persistent; params tile_m, tile_n, store, cluster, raster, k_tile),
 * ggemm_mma (NVIDIA
 * sm_80+: the mma engine of gemm_tile.h;
 * params tile_m, tile_n, tile_k, warps, stages, persist), ggemm_wgmma
 * (sm_90a: the wgmma engine; params tile_m, tile_n, stages, persist),
 * ggemm_fma (64x64
 * FMA tiles, any shape: the portable path; param persist), ggemm_mfma
 * (AMD gfx90a, gfx940-942, gfx950: the MFMA engine of gemm_tile.h on the
 * same tile scheduler; params tile_m, tile_n, tile_k, waves, mfma, lds_db,
 * persist; any K and alignment; after ggemm_fma, so the untuned default on
 * AMD stays the FMA kernel), ggemm_ref (one thread per output, the
 * reference).  G <= GG_MAX_G.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm/gemm_tile.h"
#include "gemm/gemm_tma.h"
#include "gpu_int.h"
#include "prim/flyk_gpu.h"
#include "prim/launch.h"

#define GG_MAX_G 1024

static int gg_problem_ok(const struct fly_problem *p)
{
	if (p->op != FLY_OP_GROUPED_GEMM || p->dtype != FLY_DT_BF16)
		return -EINVAL;
	if (p->layout != FLY_LAYOUT_NT && p->layout != FLY_LAYOUT_NONE)
		return -EINVAL;
	if (p->flags)
		return -EINVAL;
	for (int i = 0; i < 4; i++)
		if (p->dims[i] < 1)
			return -EINVAL;
	if (p->dims[0] > GG_MAX_G || p->dims[1] > 0x7fffffff ||
	    p->dims[2] > 0x7fffffff)
		return -EINVAL;
	return 0;
}

/* ------------------------------------------------------------ scheduler */

/* The experts' rows in device memory: [G+1] int64 offsets, or [G] int32
 * cumulative ends (torch._grouped_mm's offs, read as they are: no copy
 * kernel on the caller's path). */
struct gg_offs {
	const int64_t *off;  /* or NULL */
	const int32_t *ends; /* when off is NULL */
};

/* Row range of expert @p g, clamped to [0, M] and monotonic. */
__device__ __forceinline__ void gg_rows(gg_offs o, int g, int64_t M,
					int64_t *r0, int64_t *r1)
{
	int64_t a, b;
	if (o.off) {
		a = o.off[g];
		b = o.off[g + 1];
	} else {
		a = g ? o.ends[g - 1] : 0;
		b = o.ends[g];
	}
	a = a < 0 ? 0 : a > M ? M : a;
	b = b < a ? a : b > M ? M : b;
	*r0 = a;
	*r1 = b;
}

/* pre[g] = tiles of experts < g (pre[0] = 0, pre[G] = total).  All threads
 * call it; returns after a barrier. */
__device__ void gg_prefix(gg_offs off, int G, int64_t M, int bm,
			  int tiles_n, int *pre)
{
	const int lane = threadIdx.x % FLYK_WARP;
	if (threadIdx.x < FLYK_WARP) {
		int carry = 0;
		for (int base = 0; base < G; base += FLYK_WARP) {
			int g = base + lane, v = 0;
			if (g < G) {
				int64_t r0, r1;
				gg_rows(off, g, M, &r0, &r1);
				v = (int)((r1 - r0 + bm - 1) / bm) * tiles_n;
			}
			for (int o = 1; o < FLYK_WARP; o <<= 1) {
				int y = FLYK_SHFL_UP(v, o);
				if (lane >= o)
					v += y;
			}
			if (g < G)
				pre[g + 1] = carry + v;
			carry += FLYK_SHFL(v, FLYK_WARP - 1);
		}
		if (lane == 0)
			pre[0] = 0;
	}
	__syncthreads();
}

/* The expert e with pre[e] <= t < pre[e + 1]. */
__device__ __forceinline__ int gg_find(const int *pre, int G, int t)
{
	int lo = 0, hi = G;
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;
		if (pre[mid] <= t)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

struct gg_job {
	const uint16_t *a, *b;
	uint16_t *c;
	gg_offs off;
	int g;
	int64_t m, n, k;
	int tiles_n;
	int mfirst; /* tile order in an expert: 1 m fastest, 0 n fastest */
};

/* Operands and output of tile @p t (after gg_prefix).  @return its
 * expert. */
__device__ __forceinline__ int gg_tile(const gg_job &j, const int *pre, int t,
				       int bm, int bn, gemm_opnd *o,
				       gemm_out *out)
{
	int e = gg_find(pre, j.g, t), local = t - pre[e];
	int64_t r0, r1;
	gg_rows(j.off, e, j.m, &r0, &r1);
	o->a = j.a;
	o->b = j.b + (size_t)e * j.n * j.k;
	o->lda = j.k;
	o->ldb = j.k;
	/* n fastest: a row of tiles shares A; m fastest: a column of the
	 * expert's tiles shares B[e], read once while it is in the L2. */
	int tm = (int)((r1 - r0 + bm - 1) / bm);
	int mi = j.mfirst ? local % tm : local / j.tiles_n;
	int ni = j.mfirst ? local / tm : local % j.tiles_n;
	o->m0 = r0 + (int64_t)mi * bm;
	o->m_end = r1;
	o->n0 = (int64_t)ni * bn;
	o->n_end = j.n;
	out->c = j.c;
	out->ws = NULL;
	out->ldc = j.n;
	out->m_end = r1;
	out->n_end = j.n;
	out->alpha = 1.f;
	out->bias = NULL;
	return e;
}

template <class C>
__global__ void __launch_bounds__(C::THREADS) gg_mma_kernel(gg_job j)
{
	FLYK_DYN_SMEM(uint4, gg_dsmem);
	__shared__ int pre[GG_MAX_G + 1];
	gg_prefix(j.off, j.g, j.m, C::BM, j.tiles_n, pre);
	int total = pre[j.g];
	for (int t = blockIdx.x; t < total; t += gridDim.x) {
		gemm_opnd o;
		gemm_out out;
		gg_tile(j, pre, t, C::BM, C::BN, &o, &out);
		gemm_tile_run<C>(o, 0, j.k, out, (uint16_t *)gg_dsmem);
	}
}

#if FLYK_HAS_TMA
/* Tile t of the grouped problem as a TMA work unit: A from the expert's
 * row (rows past the expert are loaded, computed and not stored), B[e]
 * through the 3-D map (expert, n, k).  With clusters of CL blocks the
 * tile list is built with CL * BM rows a tile and block @p rank takes
 * rows rank * BM of it (past the expert: computed, not stored). */
template <int BM, int BN, int CL> struct gg_tma_work {
	gg_job j;
	const int *pre;
	__device__ __forceinline__ void operator()(int t, int rank,
						   gemm_tma_unit *w) const
	{
		gemm_opnd o;
		int e = gg_tile(j, pre, t, CL * BM, BN, &o, &w->out);
		o.m0 += (int64_t)rank * BM;
		w->a_row = (int)o.m0;
		w->b_row = (int)o.n0;
		w->b_z = e;
		w->k0 = 0;
		w->nk = (int)((j.k + 63) / 64);
		w->m0 = o.m0;
		w->n0 = o.n0;
		/* The C map's bound is M, not the expert's end: a tile that
		 * runs into the next expert stores from registers. */
		w->tstore = o.m0 + BM <= o.m_end || o.m_end == j.m;
	}
};

template <class C>
__global__ void __launch_bounds__(C::THREADS, 1)
    gg_tma_kernel(const __grid_constant__ CUtensorMap ma,
		  const __grid_constant__ CUtensorMap mb,
		  const __grid_constant__ CUtensorMap mc, const gg_job j)
{
	FLYK_DYN_SMEM(uint4, gg_tma_dsmem);
	__shared__ int pre[GG_MAX_G + 1];
	__shared__ uint64_t gg_tma_bars[2 * C::ST];
	gg_prefix(j.off, j.g, j.m, C::CL * C::BM, j.tiles_n, pre);
	gg_tma_work<C::BM, C::BN, C::CL> w{j, pre};
	gemm_tma_run<C>(w, pre[j.g], blockIdx.x / C::CL, gridDim.x / C::CL,
			&ma, &mb, true, &mc,
			(uint16_t *)gg_tma_dsmem, gg_tma_bars);
}
#endif

__global__ void __launch_bounds__(GEMM_FMA_THREADS) gg_fma_kernel(gg_job j)
{
	__shared__ int pre[GG_MAX_G + 1];
	gg_prefix(j.off, j.g, j.m, GEMM_FMA_BM, j.tiles_n, pre);
	int total = pre[j.g];
	for (int t = blockIdx.x; t < total; t += gridDim.x) {
		gemm_opnd o;
		gemm_out out;
		gg_tile(j, pre, t, GEMM_FMA_BM, GEMM_FMA_BN, &o, &out);
		gemm_fma_tile(o, false, j.k, out);
	}
}

/* One thread per output; the expert of a row by binary search over the
 * (clamped) offsets; rows outside every expert are left alone. */
__global__ void gg_ref_kernel(gg_job j)
{
	int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (col >= j.n)
		return;
	for (int64_t row = blockIdx.y; row < j.m; row += gridDim.y) {
		int lo = 0, hi = j.g;
		while (hi - lo > 1) {
			int mid = (lo + hi) / 2;
			int64_t r0, r1;
			gg_rows(j.off, mid, j.m, &r0, &r1);
			if (r0 <= row)
				lo = mid;
			else
				hi = mid;
		}
		int64_t r0, r1;
		gg_rows(j.off, lo, j.m, &r0, &r1);
		if (row < r0 || row >= r1)
			continue;
		const uint16_t *ar = j.a + row * j.k;
		const uint16_t *br = j.b + ((size_t)lo * j.n + col) * j.k;
		float acc = 0.f;
		for (int64_t q = 0; q < j.k; q++)
			acc += flyk_db2f(ar[q]) * flyk_db2f(br[q]);
		j.c[row * j.n + col] = flyk_df2b(acc);
	}
}

/* ------------------------------------------------------------ host */

static int gg_job_of(const struct fly_problem *p, const union flyk_args *args,
		     int bn, struct gg_job *j)
{
	const struct flyk_grouped_gemm_args *a = &args->grouped_gemm;
	if (!a->a || !a->b || !a->c || !a->offsets == !a->ends)
		return -EINVAL; /* (exactly one of offsets and ends) */
	j->a = (const uint16_t *)a->a;
	j->b = (const uint16_t *)a->b;
	j->c = (uint16_t *)a->c;
	j->off.off = a->offsets;
	j->off.ends = a->offsets ? NULL : a->ends;
	j->g = (int)p->dims[0];
	j->m = p->dims[1];
	j->n = p->dims[2];
	j->k = p->dims[3];
	j->tiles_n = (int)((j->n + bn - 1) / bn);
	j->mfirst = 0;
	return 0;
}

/* Blocks to launch: the tile count's upper bound, or the persistent grid. */
static int64_t gg_grid(const struct flyk_device *dev,
		       const struct fly_problem *p, int bm, int bn,
		       int64_t persist)
{
	int64_t tn = (p->dims[2] + bn - 1) / bn;
	int64_t ub = (p->dims[1] / bm + p->dims[0]) * tn;
	if (persist > 0 && (int64_t)dev->sms * persist < ub)
		return (int64_t)dev->sms * persist;
	return ub;
}

typedef int (*gg_go_fn)(const struct gg_job *j, unsigned grid, hipStream_t s);

template <class C>
static int gg_go(const struct gg_job *j, unsigned grid, hipStream_t s)
{
	if (flyk_smem_optin<gg_mma_kernel<C>>(C::SMEM))
		return -ENOSPC;
	FLYK_GO(grid, C::THREADS, C::SMEM, s, gg_mma_kernel<C>)(*j);
	return flyk_launch_err();
}

struct gg_ent {
	int bm, bn, bk, warps, st, smem;
	gg_go_fn go;
};

#define GG_ENT(BM, BN, BK, WM, WN, ST)                                         \
	{BM,                                                                   \
	 BN,                                                                   \
	 BK,                                                                   \
	 WM * WN,                                                              \
	 ST,                                                                   \
	 gemm_cfg<BM, BN, BK, WM, WN, ST, false>::SMEM,                        \
	 gg_go<gemm_cfg<BM, BN, BK, WM, WN, ST, false>>},

/* The wgmma shapes: BM, BN, stages (bk 64, warps BM / 16). */
#define GG_WG_ENT(BM, BN, ST)                                                  \
	{BM,                                                                   \
	 BN,                                                                   \
	 64,                                                                   \
	 BM / 16,                                                              \
	 ST,                                                                   \
	 gemm_wg_cfg<BM, BN, ST>::SMEM,                                        \
	 gg_go<gemm_wg_cfg<BM, BN, ST>>},

#if FLYK_HAS_MMA
static const struct gg_ent gg_ents[] = {GEMM_CFGS(GG_ENT)};
#define NGG (sizeof(gg_ents) / sizeof(gg_ents[0]))
static const struct gg_ent gg_wg_ents[] = {GEMM_WG_CFGS(GG_WG_ENT)};
#define NGGWG (sizeof(gg_wg_ents) / sizeof(gg_wg_ents[0]))

/* ggemm_wgmma's entry of (tile_m, tile_n, stages). */
static const struct gg_ent *gg_find_wg(const int64_t *pr)
{
	for (size_t i = 0; i < NGGWG; i++) {
		const struct gg_ent *e = &gg_wg_ents[i];
		if (e->bm == pr[0] && e->bn == pr[1] && e->st == pr[2])
			return e;
	}
	return NULL;
}

static const struct gg_ent *gg_find_ent(const int64_t *pr)
{
	for (size_t i = 0; i < NGG; i++) {
		const struct gg_ent *e = &gg_ents[i];
		if (e->bm == pr[0] && e->bn == pr[1] && e->bk == pr[2] &&
		    e->warps == pr[3] && e->st == pr[4])
			return e;
	}
	return NULL;
}
#endif

static const int64_t gg_tile_m[] = {16, 32, 64, 128, 256};
static const int64_t gg_tile_n[] = {64, 128, 256};
static const int64_t gg_tile_k[] = {32, 64, 128};
static const int64_t gg_warps[] = {4, 8};
static const int64_t gg_stages[] = {2, 3, 4};
static const int64_t gg_persist[] = {0, 1, 2};
static const int64_t gg_wg_tile_m[] = {64, 128, 256};
static const int64_t gg_wg_tile_n[] = {128, 256};
static const int64_t gg_wg_stages[] = {3, 4, 6};

/* persist > 0 only where it shrinks the grid. */
static int gg_persist_ok(const struct flyk_device *dev,
			 const struct fly_problem *p, int bm, int bn,
			 int64_t persist)
{
	if (persist < 0 || persist > 2)
		return 0;
	int64_t tn = (p->dims[2] + bn - 1) / bn;
	int64_t mb = flyk_gemm_bucket_m(p->dims[1]);
	if ((mb / bm + p->dims[0]) * tn > 0x7fffffff)
		return 0;
	/* pruning, on the bucketed M: persistent only where it shrinks */
	return persist == 0 ||
	       (int64_t)dev->sms * persist < (mb / bm + p->dims[0]) * tn;
}

#if FLYK_HAS_MMA
/* The rules shared by ggemm_mma and ggemm_wgmma for entry @p e. */
static int gg_ent_feasible(const struct flyk_device *dev,
			   const struct fly_problem *p,
			   const struct gg_ent *e, int64_t persist)
{
	if (!e)
		return -EINVAL;
	if ((size_t)e->smem + (GG_MAX_G + 1) * sizeof(int) >
	    dev->smem_per_block_optin)
		return -ENOSPC;
	/* Pruning on the bucketed M (flyk_gemm_bucket_m). */
	int64_t avg = flyk_gemm_bucket_m(p->dims[1]) / p->dims[0];
	if ((e->bm > 16 && e->bm / 2 >= avg) ||
	    (e->bn > 64 && e->bn / 2 >= p->dims[2]))
		return -EINVAL;
	if (!gg_persist_ok(dev, p, e->bm, e->bn, persist))
		return -EINVAL;
	return 0;
}
#endif

static int mma_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	if (gg_problem_ok(p))
		return -EINVAL;
#if !FLYK_HAS_MMA
	(void)dev;
	(void)pr;
	return -ENOSPC;
#else
	if (dev->cc_major < 8)
		return -ENOSPC;
	if (p->dims[3] % 8)
		return -EINVAL;
	return gg_ent_feasible(dev, p, gg_find_ent(pr), pr[5]);
#endif
}

static int wg_feasible(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr)
{
	if (gg_problem_ok(p))
		return -EINVAL;
#if !FLYK_HAS_WGMMA
	(void)dev;
	(void)pr;
	return -ENOSPC;
#else
	if (dev->cc_major != 9)
		return -ENOSPC;
	if (p->dims[3] % 8)
		return -EINVAL;
	return gg_ent_feasible(dev, p, gg_find_wg(pr), pr[3]);
#endif
}

#if FLYK_HAS_MMA || FLYK_HAS_MFMA
/* Launch the tile kernel @p go (bm x bn tiles, feasible) with @p persist
 * blocks per SM, tiles in the order @p mfirst (gg_job); A and B aligned
 * to @p ab_al bytes, C to @p c_al. */
static int gg_tiles_launch(const struct flyk_device *dev,
			   const struct fly_problem *p, int bm, int bn,
			   gg_go_fn go, uintptr_t ab_al, uintptr_t c_al,
			   int64_t persist, int mfirst,
			   const union flyk_args *args, void *stream)
{
	struct gg_job j;
	int rc = gg_job_of(p, args, bn, &j);
	if (rc)
		return rc;
	j.mfirst = mfirst;
	if (((uintptr_t)j.a | (uintptr_t)j.b) & (ab_al - 1) ||
	    (uintptr_t)j.c & (c_al - 1))
		return -EINVAL;
	int64_t grid = gg_grid(dev, p, bm, bn, persist);
	return go(&j, (unsigned)grid, (hipStream_t)stream);
}
#endif

#if FLYK_HAS_MMA
/* Launch entry @p e (feasible) with @p persist blocks per SM. */
static int gg_ent_launch(const struct flyk_device *dev,
			 const struct fly_problem *p, const struct gg_ent *e,
			 int64_t persist, const union flyk_args *args,
			 void *stream)
{
	return gg_tiles_launch(dev, p, e->bm, e->bn, e->go, 16, 4, persist, 0,
			       args, stream);
}
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
	return gg_ent_launch(dev, p, gg_find_ent(pr), pr[5], args, stream);
#endif
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
	return gg_ent_launch(dev, p, gg_find_wg(pr), pr[3], args, stream);
#endif
}

/*
 * ggemm_tma (sm_90a): the warp-specialised TMA + wgmma kernel of
 * gemm_tma.h over the grouped tile list, persistent (grid = min(tile
 * bound, SMs)); params tile_m, tile_n (the shapes of GEMM_TMA_CFGS),
 * store (1: C through shared memory and a TMA store, except on a tile that
 * runs into the next expert; needs N % 8 == 0 and a 16-byte aligned C;
 * 2 or 4: the same in as many passes through that part of the buffer,
 * a stage more: the shapes with TS 2 and GEMM_TMA_CFGS_GROUPED),
 * cluster (2: blocks in pairs on an expert's adjacent tile rows share B[e]
 * by TMA multicast; where the experts average two tile rows), raster (the
 * tile order in an expert: 0 n fastest, 1 m fastest, so that the blocks
 * at work read each tile column of B[e] once; only where the experts
 * average two tile rows (of a cluster's rows)), k_tile (64 or 128: the k
 * depth of a stage, 128 on the shapes of GEMM_TMA_CFGS with KP 2).
 * B[e] comes through a 3-D tensor map, so an n-tile past N is zero-filled
 * per expert.
 */
static const int64_t gg_tma_tile_m[] = {64, 128, 256};
static const int64_t gg_tma_tile_n[] = {64, 128, 256};
static const int64_t gg_tma_store[] = {0, 1, 2, 4};
static const int64_t gg_tma_cluster[] = {1, 2};
static const int64_t gg_tma_raster[] = {0, 1};
static const int64_t gg_tma_k_tile[] = {64, 128};

#if FLYK_HAS_TMA
template <class C>
static int gg_tma_go(const struct gg_job *j, unsigned grid, hipStream_t s)
{
	if (flyk_smem_optin<gg_tma_kernel<C>>(C::SMEM))
		return -ENOSPC;
	CUtensorMap ma, mb, mc;
	if (gemm_tma_maps<C>(j->a, j->b, j->c, j->m, j->n, j->k, j->g, &ma,
			     &mb, &mc))
		return -EINVAL;
	/* @p grid counts clusters (gg_grid over tiles of CL * BM rows, at
	 * most one per SM): flyk_cluster_go caps it at the resident ones. */
	return flyk_cluster_go(gg_tma_kernel<C>, grid, C::THREADS, C::SMEM, C::CL,
			   s, ma, mb, mc, *j);
}

typedef gemm_tma_ent<gg_go_fn> gg_tma_ent;
#define GG_TMA_ENT(...) GEMM_TMA_ENT_OF(gg_tma_go, __VA_ARGS__)
static const gg_tma_ent gg_tma_ents[] = {GEMM_TMA_CFGS(GG_TMA_ENT)
					 GEMM_TMA_CFGS_GROUPED(GG_TMA_ENT)};

/* The entry of point @p pr (tile_m, tile_n, store, cluster, raster,
 * k_tile). */
static const gg_tma_ent *gg_tma_find(const int64_t *pr)
{
	return gemm_tma_find(gg_tma_ents,
			     sizeof(gg_tma_ents) / sizeof(gg_tma_ents[0]),
			     pr[0], pr[1], pr[2], pr[3], pr[5]);
}
#endif

static int tma_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	if (gg_problem_ok(p))
		return -EINVAL;
#if !FLYK_HAS_TMA
	(void)dev;
	(void)pr;
	return -ENOSPC;
#else
	if (dev->cc_major != 9)
		return -ENOSPC;
	const gg_tma_ent *e = gg_tma_find(pr);
	if (!e || p->dims[3] % 8 || (e->ts && p->dims[2] % 8))
		return -EINVAL;
	if ((size_t)e->smem + (GG_MAX_G + 1) * sizeof(int) + 256 >
	    dev->smem_per_block_optin)
		return -ENOSPC;
	/* Pruning on the bucketed M; tile_m 64 (wgmma's least) stays. */
	int64_t avg = flyk_gemm_bucket_m(p->dims[1]) / p->dims[0];
	if ((e->bm > 64 && e->bm / 2 >= avg) ||
	    (e->bn > 64 && e->bn / 2 >= p->dims[2]))
		return -EINVAL;
	/* A cluster pairs two tile rows of an expert: only where the
	 * experts have two. */
	if (e->cl > 1 && avg < (int64_t)e->cl * e->bm)
		return -EINVAL;
	/* m first differs from n first where an expert has two rows of
	 * (cluster) tiles. */
	if (pr[4] && avg < 2 * (int64_t)e->cl * e->bm)
		return -EINVAL;
	/* k tiles of 128 where there are two of them. */
	if (e->bk > 64 && p->dims[3] < 2 * e->bk)
		return -EINVAL;
	if (!gg_persist_ok(dev, p, e->bm * e->cl, e->bn, 0))
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
	/* Persistent: one block per SM; the TMA store (ts) reads C's rows
	 * 16 bytes at a time. */
	const gg_tma_ent *e = gg_tma_find(pr);
	return gg_tiles_launch(dev, p, e->bm * e->cl, e->bn, e->go, 16,
			       e->ts ? 16 : 4, 1, (int)pr[4], args, stream);
#endif
}

/*
 * ggemm_mfma: gg_mma_kernel (the tile scheduler above) on the MFMA engine
 * of gemm_tile.h, the shapes of GEMM_MFMA_CFGS with and without LDS double
 * buffering.  A point is (tile_m, tile_n, tile_k, waves, mfma, lds_db,
 * persist).  Feasible where the device has the bf16 MFMA instructions
 * (flyk_mfma_arch_ok), -EINVAL elsewhere.
 */
static const int64_t gg_mf_tile_m[] = {32, 64, 128, 256};
static const int64_t gg_mf_tile_n[] = {32, 64, 128};
static const int64_t gg_mf_tile_k[] = {32, 64};
static const int64_t gg_mf_waves[] = {1, 2, 4, 8};
static const int64_t gg_mf_block[] = {32, 16};
static const int64_t gg_mf_db[] = {0, 1};

#if FLYK_HAS_MFMA
struct gg_mfma_ent {
	int bm, bn, bk, waves, mf, db, smem;
	gg_go_fn go;
};

#define GG_MFMA_ENT_DB(BM, BN, BK, WM, WN, MF, DB)                             \
	{BM,                                                                   \
	 BN,                                                                   \
	 BK,                                                                   \
	 WM * WN,                                                              \
	 MF,                                                                   \
	 DB,                                                                   \
	 gemm_mfma_cfg<BM, BN, BK, WM, WN, MF, DB, false>::SMEM,               \
	 gg_go<gemm_mfma_cfg<BM, BN, BK, WM, WN, MF, DB, false>>},
#define GG_MFMA_ENT(BM, BN, BK, WM, WN, MF)                                    \
	GG_MFMA_ENT_DB(BM, BN, BK, WM, WN, MF, false)                          \
	GG_MFMA_ENT_DB(BM, BN, BK, WM, WN, MF, true)
static const struct gg_mfma_ent gg_mfma_ents[] = {
    GEMM_MFMA_CFGS(GG_MFMA_ENT)};

static const struct gg_mfma_ent *gg_mfma_find(const int64_t *pr)
{
	for (size_t i = 0; i < sizeof(gg_mfma_ents) / sizeof(gg_mfma_ents[0]);
	     i++) {
		const struct gg_mfma_ent *e = &gg_mfma_ents[i];
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
	if (gg_problem_ok(p))
		return -EINVAL;
#if !FLYK_HAS_MFMA
	(void)dev;
	(void)pr;
	return -EINVAL;
#else
	const struct gg_mfma_ent *e = gg_mfma_find(pr);
	if (!e || !flyk_mfma_arch_ok(dev->arch))
		return -EINVAL;
	if ((size_t)e->smem + (GG_MAX_G + 1) * sizeof(int) >
	    dev->smem_per_block_optin)
		return -ENOSPC;
	/* Pruning on the bucketed M (flyk_gemm_bucket_m), tile_m 32 kept. */
	int64_t avg = flyk_gemm_bucket_m(p->dims[1]) / p->dims[0];
	if ((e->bm > 32 && e->bm / 2 >= avg) ||
	    (e->bn > 64 && e->bn / 2 >= p->dims[2]))
		return -EINVAL;
	if (!gg_persist_ok(dev, p, e->bm, e->bn, pr[6]))
		return -EINVAL;
	return 0;
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
	/* Any alignment: the engine loads and stores element by element
	 * what is not aligned. */
	const struct gg_mfma_ent *e = gg_mfma_find(pr);
	return gg_tiles_launch(dev, p, e->bm, e->bn, e->go, 2, 2, pr[6], 0,
			       args, stream);
#endif
}

static int fma_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	if (gg_problem_ok(p))
		return -EINVAL;
	if (!gg_persist_ok(dev, p, GEMM_FMA_BM, GEMM_FMA_BN, pr[0]))
		return -EINVAL;
	return 0;
}

static int fma_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int rc = fma_feasible(dev, p, pr);
	if (rc)
		return rc;
	struct gg_job j;
	rc = gg_job_of(p, args, GEMM_FMA_BN, &j);
	if (rc)
		return rc;
	int64_t grid = gg_grid(dev, p, GEMM_FMA_BM, GEMM_FMA_BN, pr[0]);
	FLYK_GO((unsigned)grid, GEMM_FMA_THREADS, 0, (hipStream_t)stream,
		gg_fma_kernel)
	(j);
	return flyk_launch_err();
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	(void)dev;
	(void)pr;
	return gg_problem_ok(p);
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int rc = ref_feasible(dev, p, pr);
	if (rc)
		return rc;
	struct gg_job j;
	rc = gg_job_of(p, args, 128, &j);
	if (rc)
		return rc;
	dim3 grid((unsigned)((j.n + 127) / 128),
		  (unsigned)(j.m < 65535 ? j.m : 65535));
	FLYK_GO(grid, 128, 0, (hipStream_t)stream, gg_ref_kernel)(j);
	return flyk_launch_err();
}

/* ------------------------------------------------------------ table */

#if !FLYK_DEVICE_PASS

static const struct flyk_variant gg_variants[] = {
    {"ggemm_tma",
     FLY_OP_GROUPED_GEMM,
     1u << FLY_DT_BF16,
     0,
     0,
     6,
     {{"tile_m", FLYK_NV(gg_tma_tile_m)},
      {"tile_n", FLYK_NV(gg_tma_tile_n)},
      {"store", FLYK_NV(gg_tma_store)},
      {"cluster", FLYK_NV(gg_tma_cluster)},
      {"raster", FLYK_NV(gg_tma_raster)},
      {"k_tile", FLYK_NV(gg_tma_k_tile)}},
     tma_feasible,
     NULL,
     tma_launch},
    {"ggemm_wgmma",
     FLY_OP_GROUPED_GEMM,
     1u << FLY_DT_BF16,
     0,
     0,
     4,
     {{"tile_m", FLYK_NV(gg_wg_tile_m)},
      {"tile_n", FLYK_NV(gg_wg_tile_n)},
      {"stages", FLYK_NV(gg_wg_stages)},
      {"persist", FLYK_NV(gg_persist)}},
     wg_feasible,
     NULL,
     wg_launch,
     "ggemm_tma"},
    {"ggemm_mma",
     FLY_OP_GROUPED_GEMM,
     1u << FLY_DT_BF16,
     0,
     0,
     6,
     {{"tile_m", FLYK_NV(gg_tile_m)},
      {"tile_n", FLYK_NV(gg_tile_n)},
      {"tile_k", FLYK_NV(gg_tile_k)},
      {"warps", FLYK_NV(gg_warps)},
      {"stages", FLYK_NV(gg_stages)},
      {"persist", FLYK_NV(gg_persist)}},
     mma_feasible,
     NULL,
     mma_launch,
     "ggemm_tma"},
    {"ggemm_fma",
     FLY_OP_GROUPED_GEMM,
     1u << FLY_DT_BF16,
     0,
     0,
     1,
     {{"persist", FLYK_NV(gg_persist)}},
     fma_feasible,
     NULL,
     fma_launch,
     "ggemm_mma"},
    {"ggemm_mfma",
     FLY_OP_GROUPED_GEMM,
     1u << FLY_DT_BF16,
     0,
     0,
     7,
     {{"tile_m", FLYK_NV(gg_mf_tile_m)},
      {"tile_n", FLYK_NV(gg_mf_tile_n)},
      {"tile_k", FLYK_NV(gg_mf_tile_k)},
      {"waves", FLYK_NV(gg_mf_waves)},
      {"mfma", FLYK_NV(gg_mf_block)},
      {"lds_db", FLYK_NV(gg_mf_db)},
      {"persist", FLYK_NV(gg_persist)}},
     mfma_feasible,
     NULL,
     mfma_launch},
    {"ggemm_ref",
     FLY_OP_GROUPED_GEMM,
     1u << FLY_DT_BF16,
     0,
     1,
     0,
     {},
     ref_feasible,
     NULL,
     ref_launch},
};
#endif

/* ------------------------------------------------------------ case */

struct gg_state {
	void *d_ref;	 /* reference C (device) */
	unsigned *d_cmp; /* flyk_gpu_gemm_compare's two words */
	size_t n;	 /* M * N */
};

/* The benchmark case's experts: M split evenly (the key carries no
 * distribution; the serving router balances experts on average). */
static void gg_even_offsets(int64_t g, int64_t m, int64_t *off)
{
	for (int64_t i = 0; i <= g; i++)
		off[i] = m * i / g;
}

static int gg_setup(struct flyk_case *c, uint64_t seed)
{
	const struct fly_problem *p = &c->p;
	if (gg_problem_ok(p))
		return -EOPNOTSUPP;
	int64_t g = p->dims[0], m = p->dims[1], n = p->dims[2], k = p->dims[3];
	struct gg_state *st = (struct gg_state *)calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	c->state = st;
	st->n = (size_t)m * n;
	void *x, *y, *out, *ref, *doff, *cmp;
	if (flyk_gpu_case_alloc(c, (size_t)m * k * 2, 0, &x) < 0 ||
	    flyk_gpu_case_alloc(c, (size_t)g * n * k * 2, 0, &y) < 0 ||
	    flyk_gpu_case_alloc(c, st->n * 2, 1, &out) < 0 ||
	    flyk_gpu_case_alloc(c, st->n * 2, 0, &ref) < 0 ||
	    flyk_gpu_case_alloc(c, (size_t)(g + 1) * 8, 0, &doff) < 0 ||
	    flyk_gpu_case_alloc(c, 2 * sizeof(unsigned), 0, &cmp) < 0)
		return -ENOMEM;
	int64_t *off = (int64_t *)malloc((size_t)(g + 1) * 8);
	if (!off)
		return -ENOMEM;
	gg_even_offsets(g, m, off);
	struct flyk_device *dev = c->dev;
	int rc = flyk_gpu_upload(dev, doff, off, (size_t)(g + 1) * 8);
	free(off);
	if (!rc)
		rc = flyk_gpu_fill_random(dev, x, (size_t)m * k, FLY_DT_BF16,
					  -1.f, 1.f, seed);
	if (!rc)
		rc = flyk_gpu_fill_random(dev, y, (size_t)g * n * k,
					  FLY_DT_BF16, -1.f, 1.f, seed + 1);
	if (rc)
		return rc;
	struct flyk_grouped_gemm_args *a = &c->args.grouped_gemm;
	a->a = x;
	a->b = y;
	a->c = ref;
	a->offsets = (const int64_t *)doff;
	a->workspace = NULL;
	a->workspace_size = 0;
	/* The reference: ggemm_ref where it is quick; above 2^32
	 * multiply-adds ggemm_fma (checked against ggemm_ref on every shape
	 * of test_gpu_gemm), as in gemm.hip. */
	static const int64_t no_persist[] = {0};
	if ((double)m * n * k > 4294967296.0)
		rc = fma_launch(dev, p, no_persist, &c->args, dev->stream);
	else
		rc = ref_launch(dev, p, NULL, &c->args, dev->stream);
	a->c = out;
	st->d_ref = ref;
	st->d_cmp = (unsigned *)cmp;
	return rc;
}

static int gg_check(struct flyk_case *c, double *max_err)
{
	struct gg_state *st = (struct gg_state *)c->state;
	return flyk_gpu_gemm_compare(c->dev, c->args.grouped_gemm.c, st->d_ref,
				     st->n, c->p.dims[3], st->d_cmp, max_err);
}

static void gg_fini(struct flyk_case *c)
{
	free(c->state);
	c->state = NULL;
}

#if !FLYK_DEVICE_PASS
extern "C" const struct flyk_gpu_op flyk_gpu_grouped_gemm_op = {
    FLY_OP_GROUPED_GEMM,
    gg_variants,
    sizeof(gg_variants) / sizeof(gg_variants[0]),
    gg_setup,
    gg_check,
    gg_fini,
    NULL,
};
#endif
