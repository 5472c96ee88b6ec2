/*
 * scaled_gemm.hip -- scaled low-precision GEMM on the GPU, NT:
 *   C[m, n] = sum_k A[m, k] B[n, k] (with the format's scales) + bias[n]
 * fp32 accumulation, bf16 C and bias.  Formats (the problem's dtype; the
 * operands as struct flyk_scaled_gemm_args in flyk.h):
 *   fp8_e4m3, fp8_e4m3fnuz  one fp32 scale per tensor (device pointers)
 *   mxfp8                   e4m3fn, one e8m0 scale per 32 k of a row
 *   mxfp4                   e2m1 two per byte (low nibble the even k),
 *                           e8m0 per 32 k
 * MX needs K % 32 == 0.
 *
 * Owns: the scaled_gemm variants and flyk_gpu_scaled_gemm_op; the case
 * state (reference output on the device).  Thread: tables are immutable;
 * launches are asynchronous on the caller's stream.
 *
 * Variants (params in their stable order):
 *   sg_ref     portable (AMD, fnuz, any shape): 16 x 16 outputs a block,
 *              each 32-k block of A and B decoded into shared memory,
 *              fp32 sums per block times the block's scales: the
 *              reference.
 *   sg_simt    portable, the same kernel with `tile` x `tile` outputs a
 *              block (2 x 2 or 4 x 4 a thread): AMD's path off gfx940-942,
 *              and fnuz and K % 16 != 0 on NVIDIA; successor sg_wgmma.
 *   sg_mfma    (AMD gfx940-942; every format) fp8 MFMA (prim/mfma.h's
 *              flyk_mfma8, e4m3 fnuz) from LDS, operands re-encoded to
 *              fnuz in registers on the way in (e4m3fn: exact, as half
 *              values, x 4 in fp32; e2m1: exact), MX promoted per 32-k
 *              block; params tile_m, tile_n, waves, lds_db (below, "mfma").
 *   sg_wgmma   (NVIDIA sm_90a; e4m3fn, mxfp8, mxfp4) the warp-specialised
 *              TMA + wgmma mainloop of gemm_tma.h with fp8 operands
 *              (gemm_tma_consume_f8: fp8 wgmma sums promoted into fp32
 *              registers every 128 k, or every 32 k times the MX scales).
 *              mxfp4 is first unpacked to e4m3 (exact) into the workspace
 *              by one pass, then runs as mxfp8: it needs a workspace of
 *              (M + N) * K bytes (launch: -ENOSPC without).  Params
 *              tile_m, tile_n, store (TMA-store epilogue), cluster (B
 *              multicast to two blocks), swizzle (tile rows per raster
 *              group), split_k (k split over blocks, fp32 partials in
 *              the workspace -- 32 MiB, before mxfp4's unpacked
 *              operands -- then one reduce kernel sums them and applies
 *              the per-tensor scales and the bias; MX partials are
 *              already promoted with their block scales; for the
 *              few-tile shapes, small M).  K % 16 == 0 (fp8 rows 16-byte
 *              aligned for TMA).
 *   sg_dq_tma, sg_dq_lt  (MX) both operands dequantized to bf16 into the
 *              workspace by one pass (exact: e4m3 and e2m1 values times
 *              a power of two are bf16 values), then the gemm op's
 *              gemm_tma (its feasible points) or cuBLASLt (its bf16
 *              algorithms) on them; workspace 32 MiB + 2 (M + N) K bytes.
 *              Hopper has no block-scaled MMA: this is what MX costs
 *              there, against promoting every k32 wgmma (sg_wgmma).
 *   sg_stream  (sm_90a; fp8_e4m3; M <= 128) gemm/gemm_stream.h: B's rows
 *              streamed by TMA as the wgmma's M, A's rows its N (8 to
 *              128), the k32 wgmmas of a 128-k tile promoted into fp32
 *              registers, split-K over a cluster summed in distributed
 *              shared memory, one kernel.  Params rows, mrows, split,
 *              stages.
 *   sg_skinny  (NVIDIA; fp8_e4m3; M <= 128) gemm/gemm_skinny.h: B's rows
 *              on the MMA's M dimension, A's on its N, mma.sync from
 *              registers (m16n8k32 e4m3, sm_89+, or m16n8k16 f16 on
 *              operands converted in registers), K split over a block's
 *              warps, one kernel.  Params rows, mrows, warps, stages,
 *              f16.
 *   sg_cublaslt  (nvcc) every fp8 algorithm cuBLASLt's heuristic proposes
 *              for per-tensor e4m3 (kernels/vendor/cublaslt.c).
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
#include "prim/rand.h"
#if FLYK_HAS_CUBLAS
#include "gemm/gemm_vendor.h"
#endif
#ifndef FLYK_GEMM_WS_BYTES
#define FLYK_GEMM_WS_BYTES ((size_t)32 << 20)
#endif

#define SG_DT_FP8 (1u << FLY_DT_FP8_E4M3)
#define SG_DT_FNUZ (1u << FLY_DT_FP8_E4M3FNUZ)
#define SG_DT_MX8 (1u << FLY_DT_MXFP8)
#define SG_DT_MX4 (1u << FLY_DT_MXFP4)
#define SG_DTYPES (SG_DT_FP8 | SG_DT_FNUZ | SG_DT_MX8 | SG_DT_MX4)

static int sg_is_mx(uint32_t dt)
{
	return dt == FLY_DT_MXFP8 || dt == FLY_DT_MXFP4;
}

static int sg_problem_ok(const struct fly_problem *p)
{
	if (p->op != FLY_OP_SCALED_GEMM || !(SG_DTYPES & (1u << p->dtype)))
		return -EINVAL;
	if (p->layout != FLY_LAYOUT_NT || (p->flags & ~FLY_F_BIAS))
		return -EINVAL;
	for (int i = 0; i < 3; i++)
		if (p->dims[i] < 1 || p->dims[i] > 0x7fffffff)
			return -EINVAL;
	if (sg_is_mx(p->dtype) && p->dims[2] % 32)
		return -EINVAL;
	return 0;
}

/* ------------------------------------------------------------ reference */

/* Element (row, k) of operand @p x in format @p fmt (the dtype code),
 * the block's MX scale not applied. */
__device__ __forceinline__ float sg_elem(const uint8_t *x, int fmt,
					 int64_t row, int64_t k, int64_t kk)
{
	if (fmt == FLY_DT_MXFP4) {
		uint32_t b = x[(row * k + kk) / 2];
		return gemm_e2m1(kk & 1 ? b >> 4 : b & 15u);
	}
	return gemm_e4m3(x[row * k + kk], fmt == FLY_DT_FP8_E4M3FNUZ);
}

/* 16R x 16R outputs a block of 256 threads, R x R a thread (rows ty +
 * 16 r, columns tx + 16 c): each 32-k block of the tile's rows of A and
 * of B decoded to shared memory; sums per block in fp32, times its
 * scales.  R = 1 is the reference. */
template <int R>
__global__ void __launch_bounds__(256)
    sg_tile_kernel(const uint8_t *a, const uint8_t *b, const void *sa,
		   const void *sb, const uint16_t *bias, uint16_t *c,
		   int64_t m, int64_t n, int64_t k, int fmt)
{
	__shared__ float ta[16 * R][33], tb[16 * R][33];
	const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
	const int64_t i0 = (int64_t)blockIdx.y * 16 * R;
	const int64_t j0 = (int64_t)blockIdx.x * 16 * R;
	const bool mx = fmt == FLY_DT_MXFP8 || fmt == FLY_DT_MXFP4;
	const int64_t nb = (k + 31) / 32;
	float acc[R][R];
#pragma unroll
	for (int r = 0; r < R; r++)
#pragma unroll
		for (int q = 0; q < R; q++)
			acc[r][q] = 0.f;
	for (int64_t kb = 0; kb < nb; kb++) {
		for (int e = threadIdx.x; e < 16 * R * 32; e += 256) {
			int r = e / 32, q = e % 32;
			int64_t kk = kb * 32 + q, ra = i0 + r, rb = j0 + r;
			ta[r][q] = ra < m && kk < k ? sg_elem(a, fmt, ra, k, kk)
						    : 0.f;
			tb[r][q] = rb < n && kk < k ? sg_elem(b, fmt, rb, k, kk)
						    : 0.f;
		}
		__syncthreads();
		float part[R][R];
#pragma unroll
		for (int r = 0; r < R; r++)
#pragma unroll
			for (int q = 0; q < R; q++)
				part[r][q] = 0.f;
#pragma unroll 8
		for (int q = 0; q < 32; q++) {
			float av[R], bv[R];
#pragma unroll
			for (int r = 0; r < R; r++) {
				av[r] = ta[ty + 16 * r][q];
				bv[r] = tb[tx + 16 * r][q];
			}
#pragma unroll
			for (int r = 0; r < R; r++)
#pragma unroll
				for (int cc = 0; cc < R; cc++)
					part[r][cc] =
					    fmaf(av[r], bv[cc], part[r][cc]);
		}
#pragma unroll
		for (int r = 0; r < R; r++)
#pragma unroll
			for (int cc = 0; cc < R; cc++) {
				int64_t i = i0 + ty + 16 * r;
				int64_t j = j0 + tx + 16 * cc;
				float f = part[r][cc];
				if (mx && i < m && j < n)
					f *= gemm_e8m0(((const uint8_t *)
							    sa)[i * nb + kb]) *
					     gemm_e8m0(((const uint8_t *)
							    sb)[j * nb + kb]);
				acc[r][cc] += f;
			}
		__syncthreads();
	}
	const float ts = mx ? 1.f : *(const float *)sa * *(const float *)sb;
#pragma unroll
	for (int r = 0; r < R; r++)
#pragma unroll
		for (int cc = 0; cc < R; cc++) {
			int64_t i = i0 + ty + 16 * r, j = j0 + tx + 16 * cc;
			if (i >= m || j >= n)
				continue;
			float v = acc[r][cc] * ts;
			if (bias)
				v += flyk_db2f(bias[j]);
			c[i * n + j] = flyk_df2b(v);
		}
}

static int sg_launch_err(void)
{
	hipError_t e = hipGetLastError();
	return e == hipSuccess ? 0 : e == hipErrorInvalidValue ? -EINVAL : -EIO;
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	(void)dev;
	(void)pr;
	return sg_problem_ok(p);
}

/* sg_tile_kernel<@p r> over the problem. */
static int tile_go(const struct fly_problem *p, const union flyk_args *args,
		   int r, void *stream)
{
	const struct flyk_scaled_gemm_args *g = &args->scaled_gemm;
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	if (!g->a || !g->b || !g->c || !g->scale_a || !g->scale_b ||
	    ((p->flags & FLY_F_BIAS) && !g->bias))
		return -EINVAL;
	int64_t t = 16 * r;
	dim3 grid((unsigned)((n + t - 1) / t), (unsigned)((m + t - 1) / t));
	if ((m + t - 1) / t > 65535)
		return -EINVAL;
	const uint8_t *a = (const uint8_t *)g->a, *b = (const uint8_t *)g->b;
	const uint16_t *bias =
	    (p->flags & FLY_F_BIAS) ? (const uint16_t *)g->bias : NULL;
	hipStream_t s = (hipStream_t)stream;
	int fmt = (int)p->dtype;
	if (r == 1)
		FLYK_GO(grid, 256, 0, s, sg_tile_kernel<1>)(
		    a, b, g->scale_a, g->scale_b, bias, (uint16_t *)g->c, m, n,
		    k, fmt);
	else if (r == 2)
		FLYK_GO(grid, 256, 0, s, sg_tile_kernel<2>)(
		    a, b, g->scale_a, g->scale_b, bias, (uint16_t *)g->c, m, n,
		    k, fmt);
	else
		FLYK_GO(grid, 256, 0, s, sg_tile_kernel<4>)(
		    a, b, g->scale_a, g->scale_b, bias, (uint16_t *)g->c, m, n,
		    k, fmt);
	return sg_launch_err();
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int rc = ref_feasible(dev, p, pr);
	return rc ? rc : tile_go(p, args, 1, stream);
}

/* sg_simt: the same kernel, R x R outputs a thread (R = tile / 16). */
static const int64_t sg_simt_tile[] = {32, 64};

static int simt_feasible(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *pr)
{
	(void)dev;
	if (sg_problem_ok(p) || (pr[0] != 32 && pr[0] != 64))
		return -EINVAL;
	/* a tile twice the problem buys nothing over the smaller one */
	if (pr[0] > 32 && p->dims[0] <= 32 && p->dims[1] <= 32)
		return -EINVAL;
	return (p->dims[0] + pr[0] - 1) / pr[0] > 65535 ? -EINVAL : 0;
}

static int simt_launch(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr,
		       const union flyk_args *args, void *stream)
{
	int rc = simt_feasible(dev, p, pr);
	return rc ? rc : tile_go(p, args, (int)(pr[0] / 16), stream);
}

/* ------------------------------------------------------------ mfma */

/*
 * sg_mfma: AMD gfx940-942, the fp8 MFMAs of prim/mfma.h (flyk_mfma8: e4m3
 * fnuz).  A block of WM x WN waves computes a BM x BN tile of C; a wave's
 * WTM x WTN tile is MI x NI MFMA blocks (MF 32: 32x32x16, MF 16:
 * 16x16x32).  k-tiles of BK = 64: each thread fetches its 16-k chunks of
 * A and B into registers (16-byte loads where whole and aligned, bytes
 * with zero fill elsewhere: any M, N, K and alignment), re-encodes them
 * to fnuz there, and writes them to LDS, rows K-contiguous and padded by
 * 8 bytes (a lane's operand is one 8-byte read).  The k-tile loop is
 * gemm_mfma_tile's, prim/lds_pipe.h: DB 1 two LDS buffers, the next k-tile
 * fetched before this one's MFMAs, one barrier a k-tile; DB 0 one buffer,
 * two barriers.  The accumulators' zeroing and the epilogue are
 * gemm_tile.h's (gemm_mfma_zero, gemm_mfma_store: gemm_out, gemm_store1).
 *
 * The formats, all fed to the fnuz MFMA:
 *   fp8_e4m3fnuz  as they are; alpha = scale_a scale_b
 *   fp8_e4m3 (fn) flyk_mfma8_fn4: fnuz bytes of half the value (exact over
 *                 fn's whole range), alpha = 4 scale_a scale_b
 *   mxfp8 (fn)    the same bytes; each 32-k block's MFMA sums go to a
 *                 fresh accumulator, then acc += 4 part sa[row] sb[col]
 *                 (promotion per K-block; the block's e8m0 scales staged
 *                 in LDS as fp32 with its k-tile)
 *   mxfp4         e2m1 codes (low nibble the even k) unpacked to the
 *                 fnuz bytes of the same values in registers
 *                 (flyk_mfma8_e2m1), promoted as mxfp8 without the 4
 */
/* BM, BN, waves along M, along N, MFMA block. */
#define SG_MFMA_CFGS(X)                                                        \
	X(32, 32, 1, 1, 32)                                                    \
	X(32, 32, 2, 2, 16)                                                    \
	X(64, 64, 1, 1, 32)                                                    \
	X(64, 64, 2, 2, 32)                                                    \
	X(64, 128, 2, 2, 32)                                                   \
	X(128, 64, 2, 2, 32)                                                   \
	X(128, 128, 2, 2, 32)

static const int64_t sgm_tile_m[] = {32, 64, 128};
static const int64_t sgm_tile_n[] = {32, 64, 128};
static const int64_t sgm_waves[] = {1, 4};
static const int64_t sgm_db[] = {0, 1};

#if FLYK_HAS_MFMA
template <int BM_, int BN_, int WM_, int WN_, int MF_, bool DB_, bool MX_>
struct sg_mfma_cfg {
	enum {
		BM = BM_,
		BN = BN_,
		BK = 64,
		WN = WN_,
		MF = MF_,
		ST = DB_ ? 2 : 1,	    /* LDS buffers */
		THREADS = WM_ * WN_ * 64,
		WTM = BM_ / WM_,	    /* wave tile rows */
		WTN = BN_ / WN_,	    /* wave tile cols */
		MI = WTM / MF_,
		NI = WTN / MF_,
		LDS = BK + 8,		    /* LDS row stride, bytes */
		A_ST = BM_ * LDS,	    /* bytes a buffer */
		B_ST = BN_ * LDS,
		KB = BK / 32,		    /* MX blocks a k-tile */
		S_ST = MX_ ? (BM_ + BN_) * KB : 0, /* fp32 scales a buffer */
		SMEM = (A_ST + B_ST) * ST + S_ST * 4 * ST,
		CA = BM_ * BK / 16,	    /* 16-k chunks of a k-tile of A */
		CB = BN_ * BK / 16,
		RA = (CA + THREADS - 1) / THREADS,
		RB = (CB + THREADS - 1) / THREADS
	};
	static const bool DB = DB_;
	static const bool MX = MX_;
	static_assert(WTM % MF_ == 0 && WTN % MF_ == 0, "wave tile");
};

/* What the kernel reads: A [m, k], B [n, k] in format fmt (the dtype;
 * mxfp4 rows k / 2 bytes), the MX scales [rows, k / 32]. */
struct sg_mfma_opnd {
	const uint8_t *a, *b;
	const uint8_t *sa, *sb;
	int64_t m, n, k;
	int fmt;
};

/* Bytes c .. c + 3 of @p row, zero from @p end on, c the low byte. */
__device__ __forceinline__ uint32_t sgm_ld4(const uint8_t *row, int64_t c,
					    int64_t end)
{
	uint32_t w = 0;
#pragma unroll
	for (int e = 0; e < 4; e++)
		w |= (c + e < end ? (uint32_t)row[c + e] : 0u) << (8 * e);
	return w;
}

/* Elements k0 .. k0 + 15 of row @p r of @p x as fnuz bytes (zero from k
 * on and past the last row). */
__device__ __forceinline__ uint4 sgm_chunk(const uint8_t *x, int64_t r,
					   int64_t rows, int64_t k, int64_t k0,
					   int fmt)
{
	uint4 v;
	v.x = v.y = v.z = v.w = 0;
	if (r >= rows || k0 >= k)
		return v;
	if (fmt == FLY_DT_MXFP4) { /* k % 32 == 0: the 8 bytes are whole */
		const uint8_t *p = x + (r * k + k0) / 2;
		uint32_t in[2];
		if (!((uintptr_t)p & 7)) {
			uint2 q = *(const uint2 *)p;
			in[0] = q.x;
			in[1] = q.y;
		} else {
			in[0] = sgm_ld4(p, 0, 4);
			in[1] = sgm_ld4(p, 4, 8);
		}
		uint32_t o[4];
#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t h = in[i / 2] >> (16 * (i % 2));
			o[i] = flyk_mfma8_e2m1(h & 15u) |
			       flyk_mfma8_e2m1((h >> 4) & 15u) << 8 |
			       flyk_mfma8_e2m1((h >> 8) & 15u) << 16 |
			       flyk_mfma8_e2m1((h >> 12) & 15u) << 24;
		}
		v.x = o[0];
		v.y = o[1];
		v.z = o[2];
		v.w = o[3];
		return v;
	}
	const uint8_t *row = x + r * k;
	if (k0 + 16 <= k && !((uintptr_t)(row + k0) & 15)) {
		v = *(const uint4 *)(row + k0);
	} else {
		v.x = sgm_ld4(row, k0, k);
		v.y = sgm_ld4(row, k0 + 4, k);
		v.z = sgm_ld4(row, k0 + 8, k);
		v.w = sgm_ld4(row, k0 + 12, k);
	}
	if (fmt != FLY_DT_FP8_E4M3FNUZ) { /* e4m3fn: half values in fnuz */
		v.x = flyk_mfma8_fn4(v.x);
		v.y = flyk_mfma8_fn4(v.y);
		v.z = flyk_mfma8_fn4(v.z);
		v.w = flyk_mfma8_fn4(v.w);
	}
	return v;
}

/* This thread's chunks of the k-tile at @p k0 of the tile (m0, n0). */
template <class C>
__device__ __forceinline__ void sgm_fetch(const sg_mfma_opnd &o, int64_t m0,
					  int64_t n0, int64_t k0, uint4 *ra,
					  uint4 *rb)
{
	const int KC = C::BK / 16;
#pragma unroll
	for (int i = 0; i < C::RA; i++) {
		int c = threadIdx.x + i * C::THREADS;
		ra[i] = sgm_chunk(o.a, c < C::CA ? m0 + c / KC : o.m, o.m, o.k,
				  k0 + (c % KC) * 16, o.fmt);
	}
#pragma unroll
	for (int i = 0; i < C::RB; i++) {
		int c = threadIdx.x + i * C::THREADS;
		rb[i] = sgm_chunk(o.b, c < C::CB ? n0 + c / KC : o.n, o.n, o.k,
				  k0 + (c % KC) * 16, o.fmt);
	}
}

/* A chunk into LDS at @p d, 8-byte aligned (rows are BK + 8 bytes
 * apart): four 4-byte stores, as gemm_mfma_put. */
__device__ __forceinline__ void sgm_st16(uint8_t *d, const uint4 &v)
{
	uint32_t *w = (uint32_t *)d;
	w[0] = v.x;
	w[1] = v.y;
	w[2] = v.z;
	w[3] = v.w;
}

/* The fetched chunks into the LDS buffer @p s (A then B); MX: the
 * k-tile's block scales as fp32 into @p ss (A's rows, then B's; 1 past
 * the ends and past K). */
template <class C>
__device__ __forceinline__ void sgm_put(const sg_mfma_opnd &o, int64_t m0,
					int64_t n0, int64_t k0, const uint4 *ra,
					const uint4 *rb, uint8_t *s, float *ss)
{
	const int KC = C::BK / 16;
#pragma unroll
	for (int i = 0; i < C::RA; i++) {
		int c = threadIdx.x + i * C::THREADS;
		if (c < C::CA)
			sgm_st16(s + (c / KC) * C::LDS + (c % KC) * 16, ra[i]);
	}
#pragma unroll
	for (int i = 0; i < C::RB; i++) {
		int c = threadIdx.x + i * C::THREADS;
		if (c < C::CB)
			sgm_st16(s + C::A_ST + (c / KC) * C::LDS +
					 (c % KC) * 16,
				 rb[i]);
	}
	if (!C::MX)
		return;
	const int64_t nb = o.k / 32, kb0 = k0 / 32;
	for (int t = threadIdx.x; t < C::S_ST; t += C::THREADS) {
		int r = t / C::KB, q = t % C::KB;
		bool isa = r < C::BM;
		int64_t g = isa ? m0 + r : n0 + (r - C::BM);
		int64_t rows = isa ? o.m : o.n;
		const uint8_t *sc = isa ? o.sa : o.sb;
		ss[t] = g < rows && kb0 + q < nb
			    ? gemm_e8m0(sc[g * nb + kb0 + q])
			    : 1.f;
	}
}

/* acc += the products of one k-tile in LDS (@p s, scales @p ss);
 * MX: per 32-k block, acc += fold * part * sa[row] * sb[col]. */
template <class C>
__device__ __forceinline__ void
sgm_step(const uint8_t *s, const float *ss, float fold,
	 typename flyk_mfma8<C::MF>::acc_t (*acc)[C::NI])
{
	typedef flyk_mfma8<C::MF> M;
	const int l = threadIdx.x % FLYK_WARP, w = threadIdx.x / FLYK_WARP;
	const int wm = w / C::WN, wn = w % C::WN;
	const uint8_t *pa =
	    s + (wm * C::WTM + M::ab_idx(l)) * C::LDS + M::ab_k(l);
	const uint8_t *pb =
	    s + C::A_ST + (wn * C::WTN + M::ab_idx(l)) * C::LDS + M::ab_k(l);
#pragma unroll
	for (int q = 0; q < C::KB; q++) {
		[[maybe_unused]] typename M::acc_t part[C::MI][C::NI];
		if constexpr (C::MX)
			gemm_mfma_zero<C, M>(part);
#pragma unroll
		for (int kk = q * 32; kk < q * 32 + 32; kk += M::K)
			gemm_mfma_kk<C, M>(pa, pb, kk, C::MX ? part : acc);
		if constexpr (!C::MX)
			continue;
#pragma unroll
		for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
			for (int ni = 0; ni < C::NI; ni++) {
				int jb = C::BM + wn * C::WTN + ni * C::MF +
					 M::d_col(l);
				float sb = ss[jb * C::KB + q];
#pragma unroll
				for (int v = 0; v < M::REGS; v++) {
					int ib = wm * C::WTM + mi * C::MF +
						 M::d_row(l, v);
					float sa = ss[ib * C::KB + q];
					acc[mi][ni][v] +=
					    part[mi][ni][v] * fold * sa * sb;
				}
			}
	}
}

/* One BM x BN tile of C a block (blockIdx.x along N, .y along M). */
template <class C>
__global__ void __launch_bounds__(C::THREADS)
    sg_mfma_kernel(const sg_mfma_opnd o, gemm_out out, const float *tsa,
		   const float *tsb, float fold)
{
	FLYK_DYN_SMEM(uint4, sg_mfma_dsmem);
	typedef flyk_mfma8<C::MF> M;
	uint8_t *s = (uint8_t *)sg_mfma_dsmem;
	float *ss = (float *)(s + (C::A_ST + C::B_ST) * C::ST);
	const int64_t m0 = (int64_t)blockIdx.y * C::BM;
	const int64_t n0 = (int64_t)blockIdx.x * C::BN;
	typename M::acc_t acc[C::MI][C::NI];
	gemm_mfma_zero<C, M>(acc);
	uint4 ra[C::RA], rb[C::RB];
	const int SB = C::A_ST + C::B_ST;
	flyk_lds_pipe<C::DB>(
	    (o.k + C::BK - 1) / C::BK,
	    [&](int64_t kt) FLYK_PIPE_STEP {
		    sgm_fetch<C>(o, m0, n0, kt * C::BK, ra, rb);
	    },
	    [&](int64_t kt, int buf) FLYK_PIPE_STEP {
		    sgm_put<C>(o, m0, n0, kt * C::BK, ra, rb, s + buf * SB,
			       ss + buf * C::S_ST);
	    },
	    [&](int buf) FLYK_PIPE_STEP {
		    sgm_step<C>(s + buf * SB, ss + buf * C::S_ST, fold, acc);
	    });
	if (!C::MX)
		out.alpha = fold * *tsa * *tsb;
	gemm_mfma_store<C, M>(out, m0, n0, acc);
}

typedef int (*sgm_go_fn)(const sg_mfma_opnd &o, const gemm_out &out,
			 const float *tsa, const float *tsb, float fold,
			 hipStream_t s);

template <class C>
static int sgm_go(const sg_mfma_opnd &o, const gemm_out &out,
		  const float *tsa, const float *tsb, float fold, hipStream_t s)
{
	dim3 grid((unsigned)((o.n + C::BN - 1) / C::BN),
		  (unsigned)((o.m + C::BM - 1) / C::BM));
	FLYK_GO(grid, C::THREADS, C::SMEM, s, sg_mfma_kernel<C>)(o, out, tsa,
								 tsb, fold);
	return sg_launch_err();
}

struct sgm_ent {
	int bm, bn, waves, db;
	int smem[2];	  /* per tensor, MX */
	sgm_go_fn go[2];
};

#define SG_MFMA_ENT_DB(BM, BN, WM, WN, MF, DB)                                 \
	{BM,                                                                   \
	 BN,                                                                   \
	 WM * WN,                                                              \
	 DB,                                                                   \
	 {sg_mfma_cfg<BM, BN, WM, WN, MF, DB, false>::SMEM,                    \
	  sg_mfma_cfg<BM, BN, WM, WN, MF, DB, true>::SMEM},                    \
	 {sgm_go<sg_mfma_cfg<BM, BN, WM, WN, MF, DB, false>>,                  \
	  sgm_go<sg_mfma_cfg<BM, BN, WM, WN, MF, DB, true>>}},
#define SG_MFMA_ENT(BM, BN, WM, WN, MF)                                        \
	SG_MFMA_ENT_DB(BM, BN, WM, WN, MF, false)                              \
	SG_MFMA_ENT_DB(BM, BN, WM, WN, MF, true)
static const sgm_ent sgm_ents[] = {SG_MFMA_CFGS(SG_MFMA_ENT)};

static const sgm_ent *sgm_find(const int64_t *pr)
{
	for (size_t i = 0; i < sizeof(sgm_ents) / sizeof(sgm_ents[0]); i++)
		if (sgm_ents[i].bm == pr[0] && sgm_ents[i].bn == pr[1] &&
		    sgm_ents[i].waves == pr[2] && sgm_ents[i].db == pr[3])
			return &sgm_ents[i];
	return NULL;
}
#endif

/* A point is (tile_m, tile_n, waves, lds_db): the shapes of SG_MFMA_CFGS,
 * each with one or two LDS buffers (14 points).  Feasible on gfx940-942
 * (flyk_mfma8_arch_ok), every dtype of the op (e4m3fn re-encoded), any
 * shape and alignment; a tile more than twice the (bucketed) problem is
 * pruned. */
static int mfma_feasible(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *pr)
{
	if (sg_problem_ok(p))
		return -EINVAL;
#if !FLYK_HAS_MFMA
	(void)dev;
	(void)pr;
	return -EINVAL;
#else
	const sgm_ent *e = sgm_find(pr);
	if (!e || !flyk_mfma8_arch_ok(dev->arch))
		return -EINVAL;
	if ((size_t)e->smem[sg_is_mx(p->dtype)] > dev->smem_per_block_optin)
		return -ENOSPC;
	int64_t mb = flyk_gemm_bucket_m(p->dims[0]);
	if ((e->bm > 32 && e->bm / 2 >= mb) ||
	    (e->bn > 32 && e->bn / 2 >= p->dims[1]))
		return -EINVAL;
	return (p->dims[0] + e->bm - 1) / e->bm > 65535 ? -EINVAL : 0;
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
	const struct flyk_scaled_gemm_args *g = &args->scaled_gemm;
	if (!g->a || !g->b || !g->c || !g->scale_a || !g->scale_b ||
	    ((p->flags & FLY_F_BIAS) && !g->bias))
		return -EINVAL;
	int mx = sg_is_mx(p->dtype);
	sg_mfma_opnd o = {(const uint8_t *)g->a, (const uint8_t *)g->b,
			  (const uint8_t *)g->scale_a,
			  (const uint8_t *)g->scale_b,
			  p->dims[0], p->dims[1], p->dims[2], (int)p->dtype};
	gemm_out out;
	out.c = (uint16_t *)g->c;
	out.ws = NULL;
	out.ldc = p->dims[1];
	out.m_end = p->dims[0];
	out.n_end = p->dims[1];
	out.alpha = 1.f; /* per tensor: the kernel's scales x fold */
	out.bias = (p->flags & FLY_F_BIAS) ? (const uint16_t *)g->bias : NULL;
	/* fn bytes run as fnuz of half the value: x 2 an operand */
	float fold = p->dtype == FLY_DT_FP8_E4M3 || p->dtype == FLY_DT_MXFP8
			 ? 4.f
			 : 1.f;
	return sgm_find(pr)->go[mx](o, out, (const float *)g->scale_a,
				    (const float *)g->scale_b, fold,
				    (hipStream_t)stream);
#endif
}

/* ------------------------------------------------------------ skinny */

/* sg_skinny: gemm/gemm_skinny.h on e4m3 (per tensor; NVIDIA, M <= 128):
 * B's rows on the MMA's M dimension, A's on its N, K split over a
 * block's warps, one kernel; f16 0: mma.sync m16n8k32 e4m3 (sm_89+; on
 * sm_90 the compiler converts both operands at every use), 1: each
 * operand word converted to f16 once in registers, m16n8k16 f16 (sm_80+). */
static const int64_t sgs_f16[] = {0, 1};
/* pr[4] (f16): 0 mma.sync on e4m3, 1 e4m3 converted to f16 in registers */
static int skinny_dt(const int64_t *pr)
{
	return pr[4] ? GEMM_SKINNY_E4M3_F16 : GEMM_SKINNY_E4M3;
}

static int skinny_feasible(const struct flyk_device *dev,
			   const struct fly_problem *p, const int64_t *pr)
{
	if (sg_problem_ok(p) || p->dtype != FLY_DT_FP8_E4M3 ||
	    (pr[4] != 0 && pr[4] != 1))
		return -EINVAL;
	return gemm_skinny_feasible(dev, skinny_dt(pr), p->dims[0],
				    p->dims[1], pr);
}

static int skinny_launch(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *pr,
			 const union flyk_args *args, void *stream)
{
	int rc = skinny_feasible(dev, p, pr);
	if (rc)
		return rc;
	const struct flyk_scaled_gemm_args *g = &args->scaled_gemm;
	if (!g->a || !g->b || !g->c || !g->scale_a || !g->scale_b ||
	    ((p->flags & FLY_F_BIAS) && !g->bias))
		return -EINVAL;
	gemm_skinny_args x = {
	    (const uint8_t *)g->a,
	    (const uint8_t *)g->b,
	    (const float *)g->scale_a,
	    (const float *)g->scale_b,
	    1.f,
	    (p->flags & FLY_F_BIAS) ? (const uint16_t *)g->bias : NULL,
	    (uint16_t *)g->c,
	    p->dims[0],
	    p->dims[1],
	    p->dims[2],
	    false};
	return gemm_skinny_launch(skinny_dt(pr), pr, &x, stream);
}

/* ------------------------------------------------------------ stream */

/* sg_stream: gemm/gemm_stream.h on e4m3 (per tensor; sm_90a, bucketed M
 * <= 128): B streamed by TMA as the wgmma's M, A's rows its N, split-K
 * over a cluster, one kernel. */
static int stream_feasible(const struct flyk_device *dev,
			   const struct fly_problem *p, const int64_t *pr)
{
	if (sg_problem_ok(p) || p->dtype != FLY_DT_FP8_E4M3)
		return -EINVAL;
	return gemm_stream_feasible(dev, true, p->dims[0], p->dims[1],
				    p->dims[2], pr);
}

static int stream_launch(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *pr,
			 const union flyk_args *args, void *stream)
{
	int rc = stream_feasible(dev, p, pr);
	if (rc)
		return rc;
	const struct flyk_scaled_gemm_args *g = &args->scaled_gemm;
	if (!g->a || !g->b || !g->c || !g->scale_a || !g->scale_b ||
	    ((p->flags & FLY_F_BIAS) && !g->bias))
		return -EINVAL;
	gemm_stream_job j;
	memset(&j, 0, sizeof(j));
	j.c = (uint16_t *)g->c;
	j.bias = (p->flags & FLY_F_BIAS) ? (const uint16_t *)g->bias : NULL;
	j.sa = (const float *)g->scale_a;
	j.sb = (const float *)g->scale_b;
	j.alpha = 1.f;
	j.m = (int)p->dims[0];
	j.n = (int)p->dims[1];
	return gemm_stream_launch(true, pr, g->a, g->b, p->dims[2], &j,
				  stream);
}

/* ------------------------------------------------------------ wgmma */

/* mxfp4 -> e4m3fn bytes, two codes a byte in, two bytes out. */
__global__ void sg_unpack4_kernel(const uint8_t *in, uint16_t *out, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		uint32_t b = in[i];
		out[i] = (uint16_t)(gemm_e2m1_to_e4m3(b & 15u) |
				    (gemm_e2m1_to_e4m3(b >> 4) << 8));
	}
}

static const int64_t sg_tile_m[] = {64, 128};
static const int64_t sg_tile_n[] = {64, 128};
static const int64_t sg_store[] = {0, 1};
static const int64_t sg_cluster[] = {1, 2};
static const int64_t sg_swizzle[] = {1, 4, 8};
static const int64_t sg_split[] = {1, 2, 4, 8};
/* fp32 partials of a split sg_wgmma: at most this much workspace */
#define SG_SPLIT_WS ((size_t)32 << 20)

#if FLYK_HAS_TMA
/* A dense scaled GEMM's launch: units = tiles_mc * tiles_n (no split). */
struct sg_job {
	int64_t m, n, k;
	int tiles_mc, tiles_n, swz, units, cl, kblocks, split;
	int64_t kps; /* k per split, a multiple of 128 */
	uint16_t *c;
	float *ws; /* split > 1: fp32 partials [split, m, n] */
	const uint16_t *bias;
	const float *tsa, *tsb; /* per-tensor scales (F8 1) */
	const uint8_t *sa, *sb; /* MX scales (F8 2) */
};

/* Unit u: split u / tiles, then gemm_tma_dense's rasterisation (groups of
 * swz cluster rows, n across a group), 128-k tiles, the scales of the
 * format; a split writes unscaled fp32 partials (sg_reduce_kernel scales,
 * sums and adds the bias). */
template <int BM, int BN, int F8> struct sg_unit {
	sg_job j;
	__device__ __forceinline__ void operator()(int u, int rank,
						   gemm_tma_unit *w) const
	{
		int tiles = j.tiles_mc * j.tiles_n, ks = u / tiles;
		u -= ks * tiles;
		int per = j.swz * j.tiles_n, first = (u / per) * j.swz;
		int gs =
		    j.tiles_mc - first < j.swz ? j.tiles_mc - first : j.swz;
		int local = u % per, tm = first + local % gs, tn = local / gs;
		int64_t kb = (int64_t)ks * j.kps;
		int64_t ke = kb + j.kps < j.k ? kb + j.kps : j.k;
		tm = tm * j.cl + rank;
		w->a_row = tm * BM;
		w->b_row = tn * BN;
		w->b_z = 0;
		w->k0 = (int)kb;
		w->nk = (int)((ke - kb + 127) / 128);
		w->m0 = (int64_t)tm * BM;
		w->n0 = (int64_t)tn * BN;
		w->out.c = j.split > 1 ? NULL : j.c;
		w->out.ws = j.split > 1 ? j.ws + (size_t)ks * j.m * j.n : NULL;
		w->out.ldc = j.n;
		w->out.m_end = j.m;
		w->out.n_end = j.n;
		w->out.alpha = F8 == 1 && j.split == 1
				   ? __ldg(j.tsa) * __ldg(j.tsb)
				   : 1.f;
		w->out.bias = j.split > 1 ? NULL : j.bias;
		w->tstore = j.split == 1;
		w->sa = j.sa;
		w->sb = j.sb;
		w->kblocks = j.kblocks;
	}
};

template <class C>
__global__ void __launch_bounds__(C::THREADS, 1)
    sg_tma_kernel(const __grid_constant__ CUtensorMap ma,
		  const __grid_constant__ CUtensorMap mb,
		  const __grid_constant__ CUtensorMap mc, const sg_job j)
{
	FLYK_DYN_SMEM(uint4, sg_tma_dsmem);
	__shared__ uint64_t sg_tma_bars[2 * C::ST];
	sg_unit<C::BM, C::BN, C::F8> w{j};
	gemm_tma_run<C>(w, j.units, blockIdx.x / C::CL, gridDim.x / C::CL,
			&ma, &mb, false, &mc, (uint16_t *)sg_tma_dsmem,
			sg_tma_bars);
}

/* C = bf16(sa * sb * sum of the splits' partials + bias); MX (@p tsa
 * NULL): the partials are already scaled block by block. */
__global__ void sg_reduce_kernel(const float *ws, int split, size_t mn,
				 int64_t n, const float *tsa, const float *tsb,
				 const uint16_t *bias, uint16_t *c)
{
	const float al = tsa ? __ldg(tsa) * __ldg(tsb) : 1.f;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < mn;
	     i += stride) {
		float v = 0.f;
		for (int s = 0; s < split; s++)
			v += ws[(size_t)s * mn + i];
		v *= al;
		if (bias)
			v += flyk_db2f(bias[i % (size_t)n]);
		c[i] = flyk_df2b(v);
	}
}

/* The shapes of GEMM_TMA_CFGS whose fp32 sums and promoted sums fit in a
 * consumer's registers (one m64 slab of at most 128 columns), one k
 * panel: BM, BN, stages, TS, CL. */
#define SG_TMA_CFGS(X)                                                         \
	X(64, 64, 12, 0, 1)                                                    \
	X(64, 128, 8, 0, 1)                                                    \
	X(128, 128, 6, 0, 1)                                                   \
	X(64, 128, 7, 1, 1)                                                    \
	X(128, 128, 5, 1, 1)                                                   \
	X(64, 128, 8, 0, 2)                                                    \
	X(128, 128, 6, 0, 2)                                                   \
	X(128, 128, 5, 1, 2)

struct sg_args {
	const void *a, *b; /* e4m3 (mxfp4: unpacked) */
	const struct flyk_scaled_gemm_args *g;
	int mx;
	int swz;
	int split;
	hipStream_t s;
};

typedef int (*sg_go_fn)(const struct fly_problem *p, const sg_args *x,
			int sms);

template <class C> static int sg_go(const struct fly_problem *p,
				    const sg_args *x, int sms)
{
	if (flyk_smem_optin<sg_tma_kernel<C>>(C::SMEM))
		return -ENOSPC;
	sg_job j;
	j.m = p->dims[0];
	j.n = p->dims[1];
	j.k = p->dims[2];
	int tiles_m = (int)((j.m + C::BM - 1) / C::BM);
	j.cl = C::CL;
	j.tiles_mc = (tiles_m + C::CL - 1) / C::CL;
	j.tiles_n = (int)((j.n + C::BN - 1) / C::BN);
	j.swz = x->swz < j.tiles_mc ? x->swz : j.tiles_mc;
	j.kps = ((j.k + x->split - 1) / x->split + 127) / 128 * 128;
	j.split = (int)((j.k + j.kps - 1) / j.kps);
	j.units = j.tiles_mc * j.tiles_n * j.split;
	j.ws = (float *)x->g->workspace;
	j.kblocks = (int)(j.k / 32);
	j.c = (uint16_t *)x->g->c;
	j.bias = (const uint16_t *)x->g->bias;
	j.tsa = (const float *)x->g->scale_a;
	j.tsb = (const float *)x->g->scale_b;
	j.sa = (const uint8_t *)x->g->scale_a;
	j.sb = (const uint8_t *)x->g->scale_b;
	CUtensorMap ma, mb, mc;
	if (gemm_tma_maps<C>(x->a, x->b, x->g->c, j.m, j.n, j.k, 0, &ma, &mb,
			     &mc))
		return -EINVAL;
	int clusters = j.units < sms / C::CL ? j.units : sms / C::CL;
	int rc = flyk_cluster_go(sg_tma_kernel<C>, clusters, C::THREADS, C::SMEM,
			     C::CL, x->s, ma, mb, mc, j);
	if (rc || j.split == 1)
		return rc;
	size_t mn = (size_t)j.m * j.n;
	unsigned blocks = (unsigned)((mn + 255) / 256);
	if (blocks > (unsigned)sms * 8)
		blocks = (unsigned)sms * 8;
	FLYK_GO(blocks, 256, 0, x->s, sg_reduce_kernel)(
	    j.ws, j.split, mn, j.n, x->mx ? NULL : j.tsa, j.tsb, j.bias, j.c);
	return sg_launch_err();
}

struct sg_ent {
	int bm, bn, ts, cl, smem;
	sg_go_fn go[2]; /* per tensor, MX */
};

#define SG_ENT(BM, BN, ST, TS, CL)                                             \
	{BM, BN, TS, CL, gemm_tma_cfg<BM, BN, ST, TS, CL, 1, 1>::SMEM,          \
	 {sg_go<gemm_tma_cfg<BM, BN, ST, TS, CL, 1, 1>>,                        \
	  sg_go<gemm_tma_cfg<BM, BN, ST, TS, CL, 1, 2>>}},
static const sg_ent sg_ents[] = {SG_TMA_CFGS(SG_ENT)};

static const sg_ent *sg_find(const int64_t *pr)
{
	for (size_t i = 0; i < sizeof(sg_ents) / sizeof(sg_ents[0]); i++)
		if (sg_ents[i].bm == pr[0] && sg_ents[i].bn == pr[1] &&
		    sg_ents[i].ts == pr[2] && sg_ents[i].cl == pr[3])
			return &sg_ents[i];
	return NULL;
}
#endif

static int wgmma_feasible(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *pr)
{
	if (sg_problem_ok(p))
		return -EINVAL;
	if (p->dtype == FLY_DT_FP8_E4M3FNUZ)
		return -EINVAL; /* fn only: fnuz goes to sg_ref on NVIDIA */
#if !FLYK_HAS_TMA
	(void)dev;
	(void)pr;
	return -ENOSPC;
#else
	if (dev->cc_major != 9)
		return -ENOSPC;
	const sg_ent *e = sg_find(pr);
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	if (!e || k % 16)
		return -EINVAL;
	if (e->ts && n % 8)
		return -EINVAL;
	if ((size_t)e->smem > dev->smem_per_block_optin)
		return -ENOSPC;
	int64_t mb = flyk_gemm_bucket_m(m);
	if ((e->bm > 64 && e->bm / 2 >= mb) || (e->bn > 64 && e->bn / 2 >= n))
		return -EINVAL;
	int64_t tm = (mb + e->bm - 1) / e->bm, tn = (n + e->bn - 1) / e->bn;
	if (tm * tn > 0x7fffffff / 8)
		return -EINVAL;
	if (e->cl > 1 && tm < e->cl)
		return -EINVAL;
	tm = (tm + e->cl - 1) / e->cl;
	if (pr[4] > 1 && (tm < 2 * pr[4] || tn < 2))
		return -EINVAL;
	int64_t split = pr[5];
	if (split > 1) {
		/* while the tiles are fewer than two waves, >= 2 k-tiles a
		 * split, the partials in SG_SPLIT_WS, no TMA store (the
		 * reduce writes C).  MX: each split's partials are promoted
		 * block by block with their scales, as without a split. */
		if (e->ts ||
		    tm * tn * split > 2 * (int64_t)dev->sms / e->cl ||
		    k / split < 256 ||
		    (uint64_t)split * m * n * 4 > SG_SPLIT_WS)
			return -EINVAL;
	}
	return 0;
#endif
}

static int wgmma_launch(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr,
			const union flyk_args *args, void *stream)
{
	int rc = wgmma_feasible(dev, p, pr);
	if (rc)
		return rc;
#if !FLYK_HAS_TMA
	(void)args;
	(void)stream;
	return -EOPNOTSUPP;
#else
	const struct flyk_scaled_gemm_args *g = &args->scaled_gemm;
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	if (!g->a || !g->b || !g->c || !g->scale_a || !g->scale_b ||
	    ((p->flags & FLY_F_BIAS) && !g->bias))
		return -EINVAL;
	if (((uintptr_t)g->c & 15) && pr[2])
		return -EINVAL;
	if (pr[5] > 1 && (!g->workspace || g->workspace_size < SG_SPLIT_WS ||
			  ((uintptr_t)g->workspace & 15)))
		return -ENOSPC;
	sg_args x = {g->a, g->b, g, sg_is_mx(p->dtype), (int)pr[4],
		     (int)pr[5], (hipStream_t)stream};
	if (p->dtype == FLY_DT_MXFP4) {
		/* the unpacked operands after the split's partials */
		size_t at = pr[5] > 1 ? SG_SPLIT_WS : 0;
		size_t need = at + (size_t)(m + n) * (size_t)k;
		if (!g->workspace || g->workspace_size < need)
			return -ENOSPC;
		uint8_t *ua = (uint8_t *)g->workspace + at;
		uint8_t *ub = ua + (size_t)m * k;
		unsigned blocks = (unsigned)(dev->sms * 4);
		FLYK_GO(blocks, 256, 0, x.s, sg_unpack4_kernel)(
		    (const uint8_t *)g->a, (uint16_t *)ua, (size_t)m * k / 2);
		FLYK_GO(blocks, 256, 0, x.s, sg_unpack4_kernel)(
		    (const uint8_t *)g->b, (uint16_t *)ub, (size_t)n * k / 2);
		if ((rc = sg_launch_err()))
			return rc;
		x.a = ua;
		x.b = ub;
	}
	const sg_ent *e = sg_find(pr);
	return e->go[x.mx](p, &x, dev->sms);
#endif
}

/* ------------------------------------------------------------ dequant */

/* MX operand -> bf16 [rows, k] with its block scales folded in: one
 * thread per 32-k block.  Exact (every e4m3 / e2m1 value times a power of
 * two is a bf16 value) while the product stays in bf16's range; a NaN
 * scale makes the block NaN, as the spec says. */
__global__ void sg_dequant_kernel(const uint8_t *x, const uint8_t *sc,
				  uint16_t *out, int64_t rows, int64_t k,
				  int fp4)
{
	const int64_t nb = k / 32;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	     t < (size_t)(rows * nb); t += stride) {
		float s = gemm_e8m0(sc[t]);
		uint32_t w[16];
		if (fp4) {
			const uint4 v = ((const uint4 *)x)[t];
			const uint32_t in[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
			for (int i = 0; i < 16; i++) {
				uint32_t b = (in[i / 4] >> (8 * (i % 4))) & 0xffu;
				w[i] = flyk_df2b2(gemm_e2m1(b & 15u) * s,
						  gemm_e2m1(b >> 4) * s);
			}
		} else {
			const uint4 *p = (const uint4 *)(x + t * 32);
			const uint4 v0 = p[0], v1 = p[1];
			const uint32_t in[8] = {v0.x, v0.y, v0.z, v0.w,
						v1.x, v1.y, v1.z, v1.w};
#pragma unroll
			for (int i = 0; i < 16; i++) {
				uint32_t h = in[i / 2] >> (16 * (i % 2));
				w[i] = flyk_df2b2(gemm_e4m3(h & 0xffu, false) * s,
						  gemm_e4m3((h >> 8) & 0xffu,
							    false) * s);
			}
		}
		uint4 *o = (uint4 *)(out + t * 32);
#pragma unroll
		for (int i = 0; i < 4; i++)
			o[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2],
					  w[4 * i + 3]);
	}
}

/* The dequantizing variants: both MX operands to bf16 in the workspace
 * (one pass, sg_dequant_kernel), then a bf16 GEMM variant of the gemm op
 * on them -- sg_dq_tma runs gemm_tma, sg_dq_lt cuBLASLt -- with that
 * variant's own points (its space, or its enumerate()).  Workspace:
 * SG_DQ_WS for the inner GEMM, then A and B as bf16: 32 MiB + 2 (m + n) k
 * bytes (launch: -ENOSPC without). */
#define SG_DQ_WS ((size_t)32 << 20)

static size_t sg_dq_ws_bytes(const struct fly_problem *p)
{
	return SG_DQ_WS +
	       2 * (size_t)(p->dims[0] + p->dims[1]) * (size_t)p->dims[2];
}

static const char *sg_dq_inner_name(const char *outer)
{
	return strcmp(outer, "sg_dq_lt") == 0 ? "cublaslt" : "gemm_tma";
}

static const struct flyk_variant *sg_dq_inner(const char *outer)
{
	const struct flyk_gpu_op *g = &flyk_gpu_gemm_op;
	const char *nm = sg_dq_inner_name(outer);
	if (!g->variants)
		return NULL;
	for (size_t i = 0; i < g->nvariants; i++)
		if (strcmp(g->variants[i].name, nm) == 0)
			return &g->variants[i];
	return NULL;
}

/* The bf16 GEMM problem the inner variant runs. */
static struct fly_problem sg_dq_problem(const struct fly_problem *p)
{
	struct fly_problem g;
	memset(&g, 0, sizeof(g));
	g.op = FLY_OP_GEMM;
	g.dtype = FLY_DT_BF16;
	g.layout = FLY_LAYOUT_NT;
	g.flags = p->flags & FLY_F_BIAS;
	g.dims[0] = p->dims[0];
	g.dims[1] = p->dims[1];
	g.dims[2] = p->dims[2];
	return g;
}

static int sg_dq_feasible_of(const char *outer, const struct flyk_device *dev,
			     const struct fly_problem *p, const int64_t *pr)
{
	if (sg_problem_ok(p) || !sg_is_mx(p->dtype))
		return -EINVAL;
	const struct flyk_variant *in = sg_dq_inner(outer);
	if (!in)
		return -ENOSPC;
	struct fly_problem g = sg_dq_problem(p);
	return in->feasible(dev, &g, pr);
}

static int sg_dq_enumerate_of(const char *outer, const struct flyk_device *dev,
			      const struct fly_problem *p,
			      int64_t (*out)[FLY_PARAMS_MAX], int max)
{
	if (sg_problem_ok(p) || !sg_is_mx(p->dtype))
		return -EINVAL;
	const struct flyk_variant *in = sg_dq_inner(outer);
	if (!in)
		return 0;
	struct fly_problem g = sg_dq_problem(p);
	if (in->enumerate)
		return in->enumerate(dev, &g, out, max);
	/* the inner variant's space, last parameter fastest, feasible only */
	uint32_t pos[FLY_PARAMS_MAX] = {0};
	int n = 0;
	for (;;) {
		int64_t pt[FLY_PARAMS_MAX] = {0};
		for (uint32_t i = 0; i < in->nparams; i++)
			pt[i] = in->params[i].vals[pos[i]];
		if (n < max && in->feasible(dev, &g, pt) == 0)
			memcpy(out[n++], pt, sizeof(pt));
		uint32_t i = in->nparams;
		for (; i > 0; i--) {
			if (++pos[i - 1] < in->params[i - 1].nvals)
				break;
			pos[i - 1] = 0;
		}
		if (i == 0 || n >= max)
			return n;
	}
}

static int sg_dq_launch_of(const char *outer, const struct flyk_device *dev,
			   const struct fly_problem *p, const int64_t *pr,
			   const union flyk_args *args, void *stream)
{
	int rc = sg_dq_feasible_of(outer, dev, p, pr);
	if (rc)
		return rc;
	const struct flyk_scaled_gemm_args *g = &args->scaled_gemm;
	int64_t m = p->dims[0], n = p->dims[1], k = p->dims[2];
	if (!g->a || !g->b || !g->c || !g->scale_a || !g->scale_b ||
	    ((p->flags & FLY_F_BIAS) && !g->bias))
		return -EINVAL;
	if (!g->workspace || g->workspace_size < sg_dq_ws_bytes(p) ||
	    ((uintptr_t)g->workspace & 15) ||
	    ((uintptr_t)g->a & 15) || ((uintptr_t)g->b & 15))
		return -ENOSPC;
	uint16_t *da = (uint16_t *)((char *)g->workspace + SG_DQ_WS);
	uint16_t *db = da + (size_t)m * k;
	int fp4 = p->dtype == FLY_DT_MXFP4;
	hipStream_t s = (hipStream_t)stream;
	unsigned blocks = (unsigned)(dev->sms * 8);
	FLYK_GO(blocks, 256, 0, s, sg_dequant_kernel)(
	    (const uint8_t *)g->a, (const uint8_t *)g->scale_a, da, m, k, fp4);
	FLYK_GO(blocks, 256, 0, s, sg_dequant_kernel)(
	    (const uint8_t *)g->b, (const uint8_t *)g->scale_b, db, n, k, fp4);
	if ((rc = sg_launch_err()))
		return rc;
	struct fly_problem gp = sg_dq_problem(p);
	union flyk_args ga;
	memset(&ga, 0, sizeof(ga));
	ga.gemm.a = da;
	ga.gemm.b = db;
	ga.gemm.c = g->c;
	ga.gemm.bias = (p->flags & FLY_F_BIAS) ? g->bias : NULL;
	ga.gemm.alpha = 1.0f;
	ga.gemm.workspace = g->workspace;
	ga.gemm.workspace_size = SG_DQ_WS;
	return sg_dq_inner(outer)->launch(dev, &gp, pr, &ga, stream);
}

#define SG_DQ_HOOKS(NAME, FN)                                                  \
	static int FN##_feasible(const struct flyk_device *dev,                \
				 const struct fly_problem *p,                  \
				 const int64_t *pr)                            \
	{                                                                      \
		return sg_dq_feasible_of(NAME, dev, p, pr);                    \
	}                                                                      \
	static int FN##_enumerate(const struct flyk_device *dev,               \
				  const struct fly_problem *p,                 \
				  int64_t (*out)[FLY_PARAMS_MAX], int max)     \
	{                                                                      \
		return sg_dq_enumerate_of(NAME, dev, p, out, max);             \
	}                                                                      \
	static int FN##_launch(const struct flyk_device *dev,                  \
			       const struct fly_problem *p, const int64_t *pr, \
			       const union flyk_args *args, void *stream)      \
	{                                                                      \
		return sg_dq_launch_of(NAME, dev, p, pr, args, stream);        \
	}
SG_DQ_HOOKS("sg_dq_tma", dq_tma)
#if FLYK_HAS_CUBLAS
SG_DQ_HOOKS("sg_dq_lt", dq_lt)
#endif

/* ------------------------------------------------------------ variants */

#if !FLYK_DEVICE_PASS
/* The points of the enumerating variants come from enumerate(): each
 * declared list holds one placeholder (-1), never feasible. */
static const int64_t sg_dq_none[] = {-1};
#if FLYK_HAS_CUBLAS
static const int64_t sg_lt_placeholder[] = {-1};
#endif
static const struct flyk_variant sg_variants[] = {
    {"sg_ref", FLY_OP_SCALED_GEMM, SG_DTYPES, FLY_F_BIAS, 1, 0, {},
     ref_feasible, NULL, ref_launch, NULL},
    {"sg_simt", FLY_OP_SCALED_GEMM, SG_DTYPES, FLY_F_BIAS, 0, 1,
     {{"tile", FLYK_NV(sg_simt_tile)}}, simt_feasible, NULL, simt_launch,
     "sg_wgmma"},
    {"sg_mfma",
     FLY_OP_SCALED_GEMM,
     SG_DTYPES,
     FLY_F_BIAS,
     0,
     4,
     {{"tile_m", FLYK_NV(sgm_tile_m)},
      {"tile_n", FLYK_NV(sgm_tile_n)},
      {"waves", FLYK_NV(sgm_waves)},
      {"lds_db", FLYK_NV(sgm_db)}},
     mfma_feasible,
     NULL,
     mfma_launch,
     NULL},
    {"sg_wgmma",
     FLY_OP_SCALED_GEMM,
     SG_DT_FP8 | SG_DT_MX8 | SG_DT_MX4,
     FLY_F_BIAS,
     0,
     6,
     {{"tile_m", FLYK_NV(sg_tile_m)},
      {"tile_n", FLYK_NV(sg_tile_n)},
      {"store", FLYK_NV(sg_store)},
      {"cluster", FLYK_NV(sg_cluster)},
      {"swizzle", FLYK_NV(sg_swizzle)},
      {"split_k", FLYK_NV(sg_split)}},
     wgmma_feasible,
     NULL,
     wgmma_launch,
     /* on MX (where sg_dq_tma runs) promoting every k32 wgmma measured
      * 5-20x slower than dequantizing: checked last, on a small budget */
     "sg_dq_tma"},
    {"sg_stream",
     FLY_OP_SCALED_GEMM,
     SG_DT_FP8,
     FLY_F_BIAS,
     0,
     4,
     {{"rows", FLYK_NV(gemm_stream_rows)},
      {"mrows", FLYK_NV(gemm_stream_mrows)},
      {"split", FLYK_NV(gemm_stream_split)},
      {"stages", FLYK_NV(gemm_stream_stages)}},
     stream_feasible,
     NULL,
     stream_launch,
     NULL},
    {"sg_skinny",
     FLY_OP_SCALED_GEMM,
     SG_DT_FP8,
     FLY_F_BIAS,
     0,
     5,
     {{"rows", FLYK_NV(gemm_skinny_rows)},
      {"mrows", FLYK_NV(gemm_skinny_mrows)},
      {"warps", FLYK_NV(gemm_skinny_warps)},
      {"stages", FLYK_NV(gemm_skinny_stages)},
      {"f16", FLYK_NV(sgs_f16)}},
     skinny_feasible,
     NULL,
     skinny_launch,
     NULL},
    {"sg_dq_tma",
     FLY_OP_SCALED_GEMM,
     SG_DT_MX8 | SG_DT_MX4,
     FLY_F_BIAS,
     0,
     7,
     {{"tile_m", FLYK_NV(sg_dq_none)},
      {"tile_n", FLYK_NV(sg_dq_none)},
      {"split_k", FLYK_NV(sg_dq_none)},
      {"swizzle", FLYK_NV(sg_dq_none)},
      {"store", FLYK_NV(sg_dq_none)},
      {"cluster", FLYK_NV(sg_dq_none)},
      {"k_tile", FLYK_NV(sg_dq_none)}},
     dq_tma_feasible,
     dq_tma_enumerate,
     dq_tma_launch,
     NULL},
#if FLYK_HAS_CUBLAS
    {"sg_dq_lt",
     FLY_OP_SCALED_GEMM,
     SG_DT_MX8 | SG_DT_MX4,
     FLY_F_BIAS,
     0,
     FLYK_CUBLASLT_NPARAMS,
     {{"algo", FLYK_NV(sg_lt_placeholder)},
      {"tile", FLYK_NV(sg_lt_placeholder)},
      {"stages", FLYK_NV(sg_lt_placeholder)},
      {"splitk", FLYK_NV(sg_lt_placeholder)},
      {"reduction", FLYK_NV(sg_lt_placeholder)},
      {"swizzle", FLYK_NV(sg_lt_placeholder)},
      {"custom", FLYK_NV(sg_lt_placeholder)},
      {"shape", FLYK_NV(sg_lt_placeholder)}},
     dq_lt_feasible,
     dq_lt_enumerate,
     dq_lt_launch,
     NULL},
    {"sg_cublaslt",
     FLY_OP_SCALED_GEMM,
     SG_DT_FP8,
     FLY_F_BIAS,
     0,
     FLYK_CUBLASLT_NPARAMS,
     {{"algo", FLYK_NV(sg_lt_placeholder)},
      {"tile", FLYK_NV(sg_lt_placeholder)},
      {"stages", FLYK_NV(sg_lt_placeholder)},
      {"splitk", FLYK_NV(sg_lt_placeholder)},
      {"reduction", FLYK_NV(sg_lt_placeholder)},
      {"swizzle", FLYK_NV(sg_lt_placeholder)},
      {"custom", FLYK_NV(sg_lt_placeholder)},
      {"shape", FLYK_NV(sg_lt_placeholder)}},
     flyk_cublaslt_feasible,
     flyk_cublaslt_enumerate,
     flyk_cublaslt_launch,
     NULL},
#endif
};
#endif

/* ------------------------------------------------------------ case */

/* Random operand bytes: @p kind 0 e4m3 (sign, exponent field 4..9, any
 * mantissa: never zero or NaN in fn or fnuz), 1 any byte (two e2m1
 * codes), 2 e8m0 scales 2^-3 .. 2^3. */
__global__ void sg_fill_kernel(uint8_t *p, size_t n, int kind, uint64_t seed)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		uint32_t r = (uint32_t)(flyk_rand64(seed, i) >> 32);
		p[i] = kind == 0   ? flyk_rand_e4m3(seed, i)
		       : kind == 1 ? (uint8_t)r
				   : (uint8_t)(124u + r % 7u);
	}
}

/* out[0]: max |ref| (float bits) */
__global__ void sg_max_kernel(const uint16_t *ref, size_t n, unsigned *out)
{
	float mx = 0.f;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float r = fabsf(flyk_db2f(ref[i]));
		if (r == r)
			mx = fmaxf(mx, r);
	}
	atomicMax(&out[0], __float_as_uint(mx));
}

/* out[1]: max |got - ref| (+inf for NaN); out[2]: elements off by more
 * than 2^-6 |ref| + 2^-8 max|ref| (the CPU backend's rule, case.c). */
__global__ void sg_cmp_kernel(const uint16_t *got, const uint16_t *ref,
			      size_t n, unsigned *out)
{
	float big = __uint_as_float(out[0]), mx = 0.f;
	unsigned bad = 0;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float g = flyk_db2f(got[i]), r = flyk_db2f(ref[i]);
		float e = fabsf(g - r);
		if (!(e == e)) {
			e = INFINITY;
			bad++;
		} else if (e > fabsf(r) * 0x1p-6f + big * 0x1p-8f) {
			bad++;
		}
		mx = fmaxf(mx, e);
	}
	atomicMax(&out[1], __float_as_uint(mx));
	if (bad)
		atomicAdd(&out[2], bad);
}

struct sg_state {
	void *d_ref;
	unsigned *d_cmp; /* max |ref|, max err, bad */
	size_t n;
};

/* Operand of @p rows and its scales (see sg_fill_kernel). */
static int sg_operand(struct flyk_case *c, int64_t rows, uint64_t seed,
		      void **x, void **sc)
{
	const struct fly_problem *p = &c->p;
	int64_t k = p->dims[2];
	int fp4 = p->dtype == FLY_DT_MXFP4, mx = sg_is_mx(p->dtype);
	size_t bytes = (size_t)rows * (size_t)k / (fp4 ? 2 : 1);
	size_t sbytes = mx ? (size_t)rows * (size_t)(k / 32) : 4;
	if (flyk_gpu_case_alloc(c, bytes ? bytes : 1, 0, x) < 0 ||
	    flyk_gpu_case_alloc(c, sbytes, 0, sc) < 0)
		return -ENOMEM;
	hipStream_t s = (hipStream_t)c->dev->stream;
	unsigned blocks = (unsigned)(c->dev->sms * 8);
	FLYK_GO(blocks, 256, 0, s, sg_fill_kernel)((uint8_t *)*x, bytes,
						   fp4 ? 1 : 0, seed);
	if (mx)
		FLYK_GO(blocks, 256, 0, s, sg_fill_kernel)((uint8_t *)*sc,
							   sbytes, 2, seed + 7);
	int rc = sg_launch_err();
	if (!rc && !mx)
		rc = flyk_gpu_fill_random(c->dev, *sc, 1, FLY_DT_FP32, 0.5f,
					  1.5f, seed + 7);
	return rc;
}

static int sg_setup(struct flyk_case *c, uint64_t seed)
{
	const struct fly_problem *p = &c->p;
	if (sg_problem_ok(p))
		return -EOPNOTSUPP;
	int64_t m = p->dims[0], n = p->dims[1];
	if ((m + 15) / 16 > 65535)
		return -EOPNOTSUPP;
	struct sg_state *st = (struct sg_state *)calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	c->state = st;
	st->n = (size_t)m * n;
	struct flyk_scaled_gemm_args *a = &c->args.scaled_gemm;
	void *x, *y, *sx, *sy, *out, *ref, *bias = NULL, *ws, *cmp;
	size_t wsb = sg_dq_ws_bytes(p); /* >= the mxfp4 unpack's (m + n) k */
	int rc = sg_operand(c, m, seed, &x, &sx);
	if (!rc)
		rc = sg_operand(c, n, seed + 1, &y, &sy);
	if (rc)
		return rc;
	/* (8 buffers a case: the compare words ride behind the reference) */
	size_t refb = (st->n * 2 + 15) / 16 * 16;
	if (flyk_gpu_case_alloc(c, st->n * 2, 1, &out) < 0 ||
	    flyk_gpu_case_alloc(c, refb + 16, 0, &ref) < 0 ||
	    flyk_gpu_case_alloc(c, wsb, 0, &ws) < 0)
		return -ENOMEM;
	cmp = (char *)ref + refb;
	if ((p->flags & FLY_F_BIAS) &&
	    (flyk_gpu_case_alloc(c, (size_t)n * 2, 0, &bias) < 0 ||
	     flyk_gpu_fill_random(c->dev, bias, (size_t)n, FLY_DT_BF16, -1.f,
				  1.f, seed + 2)))
		return -ENOMEM;
	*a = (struct flyk_scaled_gemm_args){x, y, ref, bias, sx, sy, ws, wsb};
	st->d_ref = ref;
	st->d_cmp = (unsigned *)cmp;
	rc = ref_launch(c->dev, p, NULL, &c->args, c->dev->stream);
	a->c = out;
	if (rc)
		return rc;
	unsigned h[4] = {0, 0, 0, 0};
	rc = flyk_gpu_upload(c->dev, st->d_cmp, h, sizeof(h));
	if (rc)
		return rc;
	FLYK_GO((unsigned)(c->dev->sms * 8), 256, 0,
		(hipStream_t)c->dev->stream,
		sg_max_kernel)((const uint16_t *)ref, st->n, st->d_cmp);
	return sg_launch_err();
}

static int sg_check(struct flyk_case *c, double *max_err)
{
	struct sg_state *st = (struct sg_state *)c->state;
	unsigned h[4];
	*max_err = 0;
	int rc = flyk_gpu_download(c->dev, h, st->d_cmp, sizeof(h));
	if (rc)
		return rc;
	h[1] = h[2] = 0; /* keep max |ref| */
	if ((rc = flyk_gpu_upload(c->dev, st->d_cmp, h, sizeof(h))))
		return rc;
	FLYK_GO((unsigned)(c->dev->sms * 8), 256, 0,
		(hipStream_t)c->dev->stream,
		sg_cmp_kernel)((const uint16_t *)c->args.scaled_gemm.c,
			       (const uint16_t *)st->d_ref, st->n, st->d_cmp);
	if ((rc = sg_launch_err()) ||
	    (rc = flyk_gpu_download(c->dev, h, st->d_cmp, sizeof(h))))
		return rc;
	float e;
	memcpy(&e, &h[1], 4);
	*max_err = e;
	return h[2] ? -EDOM : 0;
}

static void sg_fini(struct flyk_case *c)
{
	free(c->state);
	c->state = NULL;
}

#if !FLYK_DEVICE_PASS
extern "C" const struct flyk_gpu_op flyk_gpu_scaled_gemm_op = {
    FLY_OP_SCALED_GEMM,
    sg_variants,
    sizeof(sg_variants) / sizeof(sg_variants[0]),
    sg_setup,
    sg_check,
    sg_fini,
    NULL,
};
#endif
