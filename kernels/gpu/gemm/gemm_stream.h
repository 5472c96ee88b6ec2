/*
 * gemm/gemm_stream.h -- the decode-shape NT GEMM of Hopper (sm_90a):
 *   C[m, n] = alpha (sa sb) sum_k A[m, k] B[n, k] + bias[n]   (M <= 128)
 * on bf16 operands (the gemm op's gemm_stream) or e4m3 ones with one fp32
 * scale a tensor (the scaled_gemm op's sg_stream), bf16 C, as a stream
 * of B (the weights) at the HBM rate.  At small M the GEMM reads B once
 * and little else; cuBLAS reads it well under the HBM rate there (H200:
 * bf16 M = 8..64, N = K = 4096 at ~2.1 TB/s, 15.5 us for 32 MiB) and
 * 64-row wgmma tiles of A are mostly padding.
 *
 *   - Swapped operands: a block owns BR rows of B (n0 .. n0 + BR - 1) as
 *     the wgmma's M (one m64 slab a 64 rows), and A's rows, padded to MN
 *     (8, 16, 32, 64 or 128), as its N: D[r][c] = sum_k B[n0 + r][k] A[c][k]
 *     = C[c][n0 + r].
 *   - A ring of ST stages, each a BR x 128-byte tile of B and an MN x
 *     128-byte tile of A (64 bf16 or 128 e4m3 of k), 128B-swizzled,
 *     brought in by TMA on one mbarrier a stage (zero fill out of bounds:
 *     ragged M, N and K need no predicates); thread 0 refills a stage once
 *     every warp has passed the block barrier after its wgmma, so ST - 1
 *     tiles are in flight while one is multiplied.
 *     e4m3: the tile's four k32 wgmmas sum into registers of their own
 *     and are added to the fp32 accumulators once a tile (Hopper's fp8
 *     MMA keeps fewer bits in its sums than fp32: as gemm_tma_consume_f8).
 *   - Split-K over a cluster: the S blocks of a cluster (grid.x) take
 *     consecutive k ranges of the same B rows; each leaves its fp32
 *     partial tile in its shared memory, and block s then sums rows
 *     [s MN / S, (s + 1) MN / S) of C over the cluster's partials through
 *     distributed shared memory, in rank order: one kernel, no workspace,
 *     no atomics, the same bits on every run.
 *   - Launched with PDL (flyk_pdl_wait before the first global access):
 *     the barrier set-up overlaps the kernel before it.
 *
 * Owns: nothing (device templates, the launch table).  Thread: the
 * tensor-map cache is per host thread (prim/tma.h).
 * Built only for sm_90a under nvcc (FLYK_HAS_TMA); not emulated (no copy
 * engine in the emulator): the GPU test runs every point.
 */
#ifndef FLYK_GEMM_STREAM_H
#define FLYK_GEMM_STREAM_H

#include <errno.h>
#include <stdint.h>

#include "gemm/gemm_tile.h"
#include "gpu_int.h"
#include "prim/cluster.h"
#include "prim/flyk_gpu.h"
#include "prim/launch.h"
#include "prim/tma.h"
#include "prim/wgmma.h"

/* The params' values: B rows a block, A rows (the wgmma's N), the split
 * (cluster size), the ring's stages. */
static const int64_t gemm_stream_rows[] = {64, 128};
static const int64_t gemm_stream_mrows[] = {8, 16, 32, 64, 128};
static const int64_t gemm_stream_split[] = {1, 2, 4, 8};
static const int64_t gemm_stream_stages[] = {4, 6, 8};

/* Shared memory of (BR, MN, ST): the ring, or the partial tile MN x
 * (BR + 4) fp32 that reuses it (rows padded by 4 words: a warp's stores
 * of 4 columns x 8 rows land in distinct banks), then ST mbarriers, and
 * 1 KiB of alignment slack (the swizzle's atom). */
template <int BR, int MN, int ST> struct gemm_stream_cfg {
	enum {
		B_BYTES = BR * 128,
		A_BYTES = (MN * 128 + 1023) / 1024 * 1024,
		STAGE = B_BYTES + A_BYTES,
		LD = BR + 4,
		RED = MN * LD * 4,
		BODY = ST * STAGE > RED ? ST * STAGE : RED,
		SMEM = 1024 + BODY + ST * 8,
		NACC = MN / 2, /* fp32 accumulators a thread a slab */
		SLABS = BR / 64,
	};
	static_assert(BR == 64 || BR == 128, "rows");
	static_assert(MN == 8 || MN == 16 || MN == 32 || MN == 64 ||
			  (MN == 128 && BR == 64),
		      "mrows (128: one slab, its fp8 sums and accumulators"
		      " in 128 registers)");
};

/* The launch's arguments (the maps are kernel parameters). */
struct gemm_stream_job {
	uint16_t *c;
	const uint16_t *bias;
	const float *sa, *sb; /* e4m3: the device scales of A and B */
	float alpha;
	int m, n;
	int kt;	  /* k-tiles of 128 bytes */
	int kper; /* k-tiles a split (grid.x splits, a cluster) */
};

#if FLYK_HAS_TMA
template <int BR, int MN, int ST, int F8>
__global__ void __launch_bounds__(128, 1)
    gemm_stream_kernel(const __grid_constant__ CUtensorMap ma,
		       const __grid_constant__ CUtensorMap mb,
		       const gemm_stream_job j)
{
	typedef gemm_stream_cfg<BR, MN, ST> C;
	enum { KE = F8 ? 128 : 64 }; /* k of a 128-byte row */
	FLYK_DYN_SMEM(uint8_t, raw);
	uint8_t *smem =
	    (uint8_t *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
	uint64_t *full = (uint64_t *)(smem + C::BODY);
	const int t = threadIdx.x, S = (int)gridDim.x, rank = (int)blockIdx.x;
	const int n0 = (int)blockIdx.y * BR;
	const int k0 = rank * j.kper;
	int nk = j.kt - k0 < j.kper ? j.kt - k0 : j.kper;
	nk = nk < 0 ? 0 : nk;
	if (t == 0) {
		flyk_tma_prefetch_map(&ma);
		flyk_tma_prefetch_map(&mb);
#pragma unroll
		for (int s = 0; s < ST; s++)
			flyk_bar_init(&full[s], 1);
		flyk_bar_init_fence();
	}
	__syncthreads();
	/* PDL: the kernel before on the stream has completed from here */
	flyk_pdl_wait();
	flyk_pdl_trigger();
	auto load = [&](int x) { /* k-tile x of this block into its stage */
		uint8_t *st = smem + (x % ST) * C::STAGE;
		flyk_bar_expect(&full[x % ST], BR * 128 + MN * 128);
		flyk_tma_2d(st, &mb, &full[x % ST], (k0 + x) * KE, n0);
		flyk_tma_2d(st + C::B_BYTES, &ma, &full[x % ST], (k0 + x) * KE,
			    0);
	};
	if (t == 0)
		for (int x = 0; x < ST && x < nk; x++)
			load(x);
	float acc[C::SLABS][C::NACC];
#pragma unroll
	for (int s = 0; s < C::SLABS; s++)
#pragma unroll
		for (int i = 0; i < C::NACC; i++)
			acc[s][i] = 0.f;
#pragma unroll
	for (int s = 0; s < C::SLABS; s++)
		flyk_wg_fence_acc<C::NACC>(acc[s]);
	const uint64_t d0 = flyk_wg_desc((const uint16_t *)smem);
	for (int it = 0; it < nk; it++) {
		const int sl = it % ST;
		flyk_bar_wait(&full[sl], (unsigned)((it / ST) & 1));
		/* the descriptor's address field counts 16 bytes: a stage
		 * is STAGE / 16 on, a slab 64 rows (8 KiB) 512, a k step
		 * (32 bytes: k16 bf16, k32 e4m3) 2, A's tile B_BYTES / 16 */
		const uint64_t db = d0 + (uint64_t)(sl * (C::STAGE / 16));
		const uint64_t da = db + (uint64_t)(C::B_BYTES / 16);
		flyk_wg_fence();
		if constexpr (F8) {
			float part[C::SLABS][C::NACC];
#pragma unroll
			for (int s = 0; s < C::SLABS; s++)
#pragma unroll
				for (int kk = 0; kk < 4; kk++)
					flyk_wgmma_fp8<MN>(
					    part[s],
					    db + (uint64_t)(512 * s + 2 * kk),
					    da + (uint64_t)(2 * kk), kk > 0);
			flyk_wg_commit();
			flyk_wg_wait<0>();
#pragma unroll
			for (int s = 0; s < C::SLABS; s++) {
				flyk_wg_fence_acc<C::NACC>(part[s]);
#pragma unroll
				for (int i = 0; i < C::NACC; i++)
					acc[s][i] += part[s][i];
			}
		} else {
#pragma unroll
			for (int s = 0; s < C::SLABS; s++)
#pragma unroll
				for (int kk = 0; kk < 4; kk++)
					flyk_wgmma_bf16<MN>(
					    acc[s],
					    db + (uint64_t)(512 * s + 2 * kk),
					    da + (uint64_t)(2 * kk));
			flyk_wg_commit();
			flyk_wg_wait<0>();
		}
#pragma unroll
		for (int s = 0; s < C::SLABS; s++)
			flyk_wg_fence_acc<C::NACC>(acc[s]);
		__syncthreads(); /* every warp is past stage sl's wgmma */
		if (t == 0 && it + ST < nk)
			load(it + ST);
	}
	/* The partial tile, red[c][r] (c: A's row, r: B's row in the block),
	 * over the ring: every copy has landed and been read.  Fragment:
	 * warp w rows 16 w + l / 4 (+ 8) of the slab, columns 8 q + 2 (l %
	 * 4) (+ 1). */
	float *red = (float *)smem;
	{
		const int w = t / 32, l = t % 32;
#pragma unroll
		for (int s = 0; s < C::SLABS; s++)
#pragma unroll
			for (int q = 0; q < MN / 8; q++)
#pragma unroll
				for (int h = 0; h < 2; h++)
#pragma unroll
					for (int e = 0; e < 2; e++) {
						int r = 64 * s + 16 * w +
							l / 4 + 8 * h;
						int c = 8 * q + 2 * (l % 4) + e;
						red[c * C::LD + r] =
						    acc[s][4 * q + 2 * h + e];
					}
	}
	if (S > 1)
		flyk_cluster_sync();
	else
		__syncthreads();
	/* This block's rows of C: [rank MN / S, (rank + 1) MN / S), two
	 * columns a thread a step, the partials summed in rank order, then
	 * stored as every GEMM epilogue here (gemm_store2: alpha, bias,
	 * bounds, a paired store where aligned). */
	const int rows = MN / S, pairs = rows * BR / 2, c_lo = rank * rows;
	const gemm_out o = {j.c,
			    NULL,
			    j.n,
			    j.m,
			    j.n,
			    F8 ? j.alpha * *j.sa * *j.sb : j.alpha,
			    j.bias};
#if FLYK_HAS_CLUSTERS
	cg::cluster_group cl = cg::this_cluster();
#endif
	for (int i = t; i < pairs; i += 128) {
		const int c = c_lo + i / (BR / 2), r = 2 * (i % (BR / 2));
		float v0 = 0.f, v1 = 0.f;
		for (int s = 0; s < S; s++) {
			const float *p = red;
#if FLYK_HAS_CLUSTERS
			if (S > 1)
				p = cl.map_shared_rank(red, s);
#endif
			const float2 v = *(const float2 *)(p + c * C::LD + r);
			v0 += v.x;
			v1 += v.y;
		}
		gemm_store2(o, c, (int64_t)n0 + r, v0, v1);
	}
	/* No block leaves while a peer may still read its partials. */
	if (S > 1)
		flyk_cluster_sync();
}
#endif /* FLYK_HAS_TMA */

/* ------------------------------------------------------------ host */

#if FLYK_HAS_TMA && !FLYK_DEVICE_PASS
typedef int (*gemm_stream_go_fn)(const void *a, const void *b, int64_t k,
				 int s, const gemm_stream_job &j,
				 hipStream_t st);

/* Launch (BR, MN, ST, F8) over @p s splits: grid (s, N / BR), clusters
 * of s blocks along x, PDL where enabled.  @return 0, -EINVAL (a tensor
 * map refused: A or B off 16-byte alignment), -ENOSPC or -EIO. */
template <int BR, int MN, int ST, int F8>
static int gemm_stream_go(const void *a, const void *b, int64_t k, int s,
			  const gemm_stream_job &j, hipStream_t st)
{
	typedef gemm_stream_cfg<BR, MN, ST> C;
	if (flyk_smem_optin<gemm_stream_kernel<BR, MN, ST, F8>>(C::SMEM))
		return -ENOSPC;
	CUtensorMap ma, mb;
	uint64_t da[2] = {(uint64_t)k, (uint64_t)j.m};
	uint64_t db[2] = {(uint64_t)k, (uint64_t)j.n};
	if (flyk_tma_map(&ma, a, 2, da, MN, F8) ||
	    flyk_tma_map(&mb, b, 2, db, BR, F8))
		return -EINVAL;
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[2] = {};
	unsigned na = 0;
	cfg.gridDim = dim3((unsigned)s, (unsigned)((j.n + BR - 1) / BR));
	cfg.blockDim = dim3(128);
	cfg.dynamicSmemBytes = C::SMEM;
	cfg.stream = st;
	if (s > 1) {
		at[na].id = cudaLaunchAttributeClusterDimension;
		at[na].val.clusterDim.x = (unsigned)s;
		at[na].val.clusterDim.y = 1;
		at[na].val.clusterDim.z = 1;
		na++;
	}
	if (flyk_pdl_enabled()) {
		at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[na].val.programmaticStreamSerializationAllowed = 1;
		na++;
	}
	cfg.attrs = at;
	cfg.numAttrs = na;
	cudaError_t e =
	    cudaLaunchKernelEx(&cfg, gemm_stream_kernel<BR, MN, ST, F8>, ma, mb,
			       j);
	(void)cudaGetLastError(); /* returned here, not left for the next */
	return e == cudaSuccess ? 0 : e == cudaErrorInvalidValue ? -EINVAL
								 : -EIO;
}

/* A point's kernel: go[0] bf16, go[1] e4m3. */
struct gemm_stream_ent {
	int br, mn, st, smem;
	gemm_stream_go_fn go[2];
};

#define GEMM_STREAM_ENT(BR, MN, ST)                                            \
	{BR,                                                                   \
	 MN,                                                                   \
	 ST,                                                                   \
	 gemm_stream_cfg<BR, MN, ST>::SMEM,                                    \
	 {gemm_stream_go<BR, MN, ST, 0>, gemm_stream_go<BR, MN, ST, 1>}},
#define GEMM_STREAM_ENT_ST(BR, MN)                                             \
	GEMM_STREAM_ENT(BR, MN, 4)                                             \
	GEMM_STREAM_ENT(BR, MN, 6) GEMM_STREAM_ENT(BR, MN, 8)
#define GEMM_STREAM_ENT_MN(BR)                                                 \
	GEMM_STREAM_ENT_ST(BR, 8)                                              \
	GEMM_STREAM_ENT_ST(BR, 16)                                             \
	GEMM_STREAM_ENT_ST(BR, 32) GEMM_STREAM_ENT_ST(BR, 64)

/* mrows 128 on rows 64 only (gemm_stream_cfg). */
static const gemm_stream_ent gemm_stream_ents[] = {
    GEMM_STREAM_ENT_MN(64) GEMM_STREAM_ENT_MN(128)
	GEMM_STREAM_ENT_ST(64, 128)};

/* The entry of point @p pr (rows, mrows, split, stages), or NULL. */
static inline const gemm_stream_ent *gemm_stream_find(const int64_t *pr)
{
	for (size_t i = 0;
	     i < sizeof(gemm_stream_ents) / sizeof(gemm_stream_ents[0]); i++) {
		const gemm_stream_ent *e = &gemm_stream_ents[i];
		if (e->br == pr[0] && e->mn == pr[1] && e->st == pr[3])
			return e;
	}
	return NULL;
}
#endif /* FLYK_HAS_TMA && !FLYK_DEVICE_PASS */

/* K's tiles of 128 bytes (64 bf16, 128 e4m3: @p f8). */
static inline int64_t gemm_stream_ktiles(bool f8, int64_t k)
{
	const int64_t ke = f8 ? 128 : 64;
	return (k + ke - 1) / ke;
}

/*
 * Point @p pr (rows, mrows, split, stages) on M, N, K (NT; @p f8: e4m3,
 * else bf16): sm_90a only; rows of K a multiple of 16 bytes (the tensor
 * maps'); on the bucketed M (flyk_gemm_bucket_m: a decision holds for
 * every M of its bucket) <= 128, mrows the fewest of 8, 16, 32, 64, 128
 * that cover it; rows 128 only where N >= 256 (and mrows <= 64: the
 * table); a split of >= 2 k-tiles of 128 bytes each, stages beyond 4
 * only where a split has as many k-tiles; grid.y <= 65535; shared memory
 * within the device's.  0, -EINVAL, or -ENOSPC (not this device).
 */
static inline int gemm_stream_feasible(const struct flyk_device *dev,
				       bool f8, int64_t m, int64_t n,
				       int64_t k, const int64_t *pr)
{
#if !FLYK_HAS_TMA
	(void)dev;
	(void)f8;
	(void)m;
	(void)n;
	(void)k;
	(void)pr;
	return -ENOSPC;
#else
	if (dev->cc_major != 9)
		return -ENOSPC;
	const gemm_stream_ent *e = gemm_stream_find(pr);
	int64_t s = pr[2];
	if (!e || (s != 1 && s != 2 && s != 4 && s != 8))
		return -EINVAL;
	if (k % (f8 ? 16 : 8) || k > 0x7fffffff || n > 0x7fffffff)
		return -EINVAL;
	int64_t mb = flyk_gemm_bucket_m(m);
	if (mb > 128 || e->mn != (mb < 8 ? 8 : mb))
		return -EINVAL;
	if (e->br > 64 && n < 256)
		return -EINVAL;
	int64_t kt = gemm_stream_ktiles(f8, k), kper = (kt + s - 1) / s;
	if ((s > 1 && kt < 2 * s) || (e->st > 4 && kper < e->st))
		return -EINVAL;
	if ((n + e->br - 1) / e->br > 65535)
		return -EINVAL;
	if ((size_t)e->smem > dev->smem_per_block_optin)
		return -ENOSPC;
	return 0;
#endif
}

/* Host: launch point @p pr (feasible on m, n, k) on @p j's output,
 * A [m, k] at @p a and B [n, k] at @p b (@p f8: e4m3, scales in @p j).
 * 0 or a negative errno. */
static inline int gemm_stream_launch(bool f8, const int64_t *pr,
				     const void *a, const void *b, int64_t k,
				     gemm_stream_job *j, void *stream)
{
#if !FLYK_HAS_TMA
	(void)f8;
	(void)pr;
	(void)a;
	(void)b;
	(void)k;
	(void)j;
	(void)stream;
	return -EOPNOTSUPP;
#else
	const gemm_stream_ent *e = gemm_stream_find(pr);
	if (!e)
		return -EINVAL;
	int s = (int)pr[2];
	j->kt = (int)gemm_stream_ktiles(f8, k);
	j->kper = (j->kt + s - 1) / s;
	return e->go[f8](a, b, k, s, *j, (hipStream_t)stream);
#endif
}

#endif /* FLYK_GEMM_STREAM_H */
