/*
 * gemm/gemm_tile.h -- the bf16 GEMM tile engines shared by gemm.hip and
 * grouped_gemm.hip: one output tile C[m0:m0+BM, n0:n0+BN] of
 * A[M,K] x B (NT: B[N,K]; NN: B[K,N]) over a K range, fp32 accumulation,
 * and the epilogues (alpha, bias, bf16 store; fp32 split-K partials).
 *
 * Owns: nothing (device templates).  Thread: device code only.
 *
 * Three engines, on the primitives of prim/ (cp_async.h, mma.h, wgmma.h):
 *   wgmma (NVIDIA sm_90a)  warpgroup MMA from 128B-swizzled shared memory
 *        (see its section below); NT only.
 *   mma  (NVIDIA sm_80+)  multistage cp.async pipeline (STAGES buffers,
 *        zero-filled out of bounds), ldmatrix (.trans for NN's B) and
 *        mma.sync.m16n8k16 bf16 -> fp32.  Needs K % 8 == 0
 *        (NN: N % 8 == 0 too) and 16-byte aligned A and B bases, so every
 *        16-byte chunk is either wholly inside or wholly outside.
 *   fma  (anywhere, AMD's portable path)  64x64x16 shared-memory tiles,
 *        256 threads, a 4x4 register micro-tile each; any shape, any
 *        alignment.
 * Under FLYK_EMU (tests/gpu/emu/emu_gemm.cpp) the primitives' PTX is
 * replaced by lane-by-lane emulations, so the same code runs on the CPU.
 * Shared memory rows are padded by 8 halves: every ldmatrix phase (8 rows
 * of 16 bytes) then hits 8 distinct 16-byte bank groups.
 */
#ifndef FLYK_GEMM_TILE_H
#define FLYK_GEMM_TILE_H

#include <errno.h>
#include <stdint.h>

#include "prim/cp_async.h"
#include "prim/flyk_gpu.h"
#include "prim/lds_pipe.h"
#include "prim/mem.h"
#include "prim/mfma.h"
#include "prim/mma.h"
#include "prim/wgmma.h"

/* The mma tile shapes built (gemm_mma and ggemm_mma): BM, BN, BK, warps
 * along M, warps along N, stages. */
#define GEMM_CFGS(X)                                                           \
	X(16, 64, 64, 1, 4, 4)                                                 \
	X(16, 64, 128, 1, 4, 3)                                                \
	X(16, 128, 64, 1, 4, 4)                                                \
	X(16, 256, 64, 1, 4, 3)                                                \
	X(32, 64, 64, 2, 2, 4)                                                 \
	X(32, 128, 64, 2, 2, 4)                                                \
	X(64, 64, 32, 2, 2, 2)                                                 \
	X(64, 64, 64, 2, 2, 3)                                                 \
	X(64, 128, 32, 2, 2, 4)                                                \
	X(64, 128, 64, 2, 2, 3)                                                \
	X(64, 256, 32, 2, 4, 3)                                                \
	X(128, 64, 32, 2, 2, 4)                                                \
	X(128, 128, 32, 2, 2, 3)                                               \
	X(128, 128, 32, 2, 2, 4)                                               \
	X(128, 128, 64, 2, 2, 3)                                               \
	X(128, 128, 32, 2, 4, 4)                                               \
	X(128, 256, 32, 2, 4, 3)                                               \
	X(256, 128, 32, 4, 2, 3)

/* One tile shape: BMxBN block tile, BK deep, WMxWN warps, ST stages. */
template <int BM_, int BN_, int BK_, int WM_, int WN_, int ST_, bool NN_>
struct gemm_cfg {
	enum {
		BM = BM_,
		BN = BN_,
		BK = BK_,
		WM = WM_,
		WN = WN_,
		ST = ST_,
		THREADS = WM_ * WN_ * 32,
		WTM = BM_ / WM_, /* warp tile rows */
		WTN = BN_ / WN_, /* warp tile cols */
		MI = WTM / 16,	 /* m16 fragments per warp */
		NI = WTN / 8,	 /* n8 fragments per warp */
		LDA = BK_ + 8,	 /* smem row stride of A (halves) */
		LDB = NN_ ? BN_ + 8 : BK_ + 8,
		A_ST = BM_ * (BK_ + 8),
		B_ST = NN_ ? BK_ * (BN_ + 8) : BN_ * (BK_ + 8),
		SMEM = (A_ST + B_ST) * ST_ * 2, /* bytes */
		WGMMA = 0,
		MFMA = 0
	};
	static const bool NN = NN_;
	static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tile");
	static_assert(BK_ % 16 == 0, "BK");
};

/* The low-precision formats of scaled GEMM, decoded exactly.
 * One e8m0 scale (e < 256) as fp32: 2^(e - 127), 0xFF NaN (OCP MX v1.0).
 * Without branches: e << 23 is the exponent field, and the mantissa's top
 * bit makes 0 the subnormal 2^-127 and 0xFF (then +inf) a quiet NaN.  (As
 * nested selects nvcc emitted two branches a scale, divergent across a
 * warp's columns, in the MX mainloop's promotion.) */
__device__ __forceinline__ float gemm_e8m0(uint32_t e)
{
	uint32_t edge = (uint32_t)(e == 0u) | (uint32_t)(e == 0xffu);
	return __uint_as_float((e << 23) | (edge << 22));
}

/* One e4m3 byte as fp32: fn (bias 7, 0x7f/0xff NaN) or fnuz (bias 8,
 * 0x80 the only NaN). */
__device__ __forceinline__ float gemm_e4m3(uint32_t b, bool fnuz)
{
	uint32_t e = (b >> 3) & 15u, m = b & 7u;
	if (fnuz ? b == 0x80u : (b & 0x7fu) == 0x7fu)
		return __uint_as_float(0x7fc00000u);
	float v = e ? __uint_as_float(((e + 127u - (fnuz ? 8u : 7u)) << 23) |
				      (m << 20))
		    : (float)m * (fnuz ? 0x1p-10f : 0x1p-9f);
	return (b & 0x80u) ? -v : v;
}

/* One e2m1 code (low 4 bits) as fp32: 0, .5, 1, 1.5, 2, 3, 4, 6. */
__device__ __forceinline__ float gemm_e2m1(uint32_t c)
{
	uint32_t e = (c >> 1) & 3u, m = c & 1u;
	float v = e ? __uint_as_float(((e + 126u) << 23) | (m << 22))
		    : (float)m * 0.5f;
	return (c & 8u) ? -v : v;
}

/* e2m1 code -> the e4m3fn byte of the same value (every e2m1 value is an
 * e4m3 value): exponent rebiased 1 -> 7, the mantissa bit on top. */
__device__ __forceinline__ uint32_t gemm_e2m1_to_e4m3(uint32_t c)
{
	uint32_t e = (c >> 1) & 3u, m = c & 1u;
	uint32_t v = e ? ((e + 6u) << 3) | (m << 2) : (m ? 0x30u : 0u);
	return v | ((c & 8u) << 4);
}

/* The epilogue's view of the output. */
struct gemm_out {
	uint16_t *c;   /* bf16 C (NULL: write fp32 partials to ws) */
	float *ws;     /* fp32 partials [M, N] of this split */
	int64_t ldc;   /* N */
	int64_t m_end; /* rows valid: row < m_end */
	int64_t n_end; /* cols valid: col < n_end */
	float alpha;
	const uint16_t *bias; /* [N] or NULL */
};

__device__ __forceinline__ float gemm_fin(const gemm_out &o, int64_t col,
					  float v)
{
	v *= o.alpha;
	if (o.bias)
		v += flyk_db2f(o.bias[col]);
	return v;
}

/* Store two adjacent outputs (row, col) and (row, col + 1).  A paired
 * store only where the address itself is aligned: a split's partials start
 * at ws + split * M * N, which is odd-aligned when M * N is odd. */
__device__ __forceinline__ void gemm_store2(const gemm_out &o, int64_t row,
					    int64_t col, float v0, float v1)
{
	if (row >= o.m_end || col >= o.n_end)
		return;
	int64_t i = row * o.ldc + col;
	bool two = col + 1 < o.n_end;
	if (!o.c) {
		if (two && !((uintptr_t)(o.ws + i) & 7)) {
			FLYK_VST_ALIGNED(o.ws + i, 8);
			*(float2 *)(o.ws + i) = make_float2(v0, v1);
		} else {
			o.ws[i] = v0;
			if (two)
				o.ws[i + 1] = v1;
		}
		return;
	}
	uint32_t pk = flyk_df2b2(gemm_fin(o, col, v0),
				 two ? gemm_fin(o, col + 1, v1) : 0.f);
	if (two && !((uintptr_t)(o.c + i) & 3)) {
		FLYK_VST_ALIGNED(o.c + i, 4);
		*(uint32_t *)(o.c + i) = pk;
		return;
	}
	if (two)
		o.c[i + 1] = (uint16_t)(pk >> 16);
	o.c[i] = (uint16_t)pk;
}

/* Store one output (row, col): bf16 with alpha and bias, or the fp32
 * partial. */
__device__ __forceinline__ void gemm_store1(const gemm_out &o, int64_t row,
					    int64_t col, float v)
{
	if (row >= o.m_end || col >= o.n_end)
		return;
	int64_t i = row * o.ldc + col;
	if (!o.c)
		o.ws[i] = v;
	else
		o.c[i] = flyk_df2b(gemm_fin(o, col, v));
}

/* ------------------------------------------------------------ mma engine */

/* Operands of one tile: A rows from m0 (row-major, lda = K), B from the
 * tile's n0 (NT: rows of B[N,K]; NN: columns of B[K,N], ldb = N). */
struct gemm_opnd {
	const uint16_t *a;
	const uint16_t *b;
	int64_t lda, ldb;
	int64_t m0, m_end; /* rows [m0, m_end) are valid in A */
	int64_t n0, n_end; /* cols [n0, n_end) are valid */
};

/* Issue the cp.async copies of k-tile @p kt into stage buffers sa/sb. */
template <class C>
__device__ __forceinline__ void gemm_load_stage(const gemm_opnd &o,
						uint16_t *sa, uint16_t *sb,
						int64_t k0, int64_t k_end)
{
	const int tid = threadIdx.x;
	const int KC = C::BK / 8;
	for (int c = tid; c < C::BM * KC; c += C::THREADS) {
		int r = c / KC, kc = (c % KC) * 8;
		int64_t gr = o.m0 + r, gk = k0 + kc;
		bool ok = gr < o.m_end && gk < k_end;
		const uint16_t *src = ok ? o.a + gr * o.lda + gk : o.a;
		flyk_cp16(sa + r * C::LDA + kc, src, ok);
	}
	if (!C::NN) {
		for (int c = tid; c < C::BN * KC; c += C::THREADS) {
			int r = c / KC, kc = (c % KC) * 8;
			int64_t gn = o.n0 + r, gk = k0 + kc;
			bool ok = gn < o.n_end && gk < k_end;
			const uint16_t *src = ok ? o.b + gn * o.ldb + gk : o.b;
			flyk_cp16(sb + r * C::LDB + kc, src, ok);
		}
	} else {
		const int NC = C::BN / 8;
		for (int c = tid; c < C::BK * NC; c += C::THREADS) {
			int r = c / NC, nc = (c % NC) * 8;
			int64_t gk = k0 + r, gn = o.n0 + nc;
			bool ok = gk < k_end && gn < o.n_end;
			const uint16_t *src = ok ? o.b + gk * o.ldb + gn : o.b;
			flyk_cp16(sb + r * C::LDB + nc, src, ok);
		}
	}
}

/* acc += the tile products of one stage. */
template <class C>
__device__ __forceinline__ void gemm_compute_stage(const uint16_t *sa,
						   const uint16_t *sb,
						   float (*acc)[C::NI][4])
{
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	const int wm = warp / C::WN, wn = warp % C::WN;
#pragma unroll
	for (int kk = 0; kk < C::BK / 16; kk++) {
		uint32_t af[C::MI][4], bf[C::NI][2];
#pragma unroll
		for (int mi = 0; mi < C::MI; mi++) {
			int r = wm * C::WTM + mi * 16 + (lane % 8) +
				((lane / 8) % 2) * 8;
			int k = kk * 16 + (lane / 16) * 8;
			flyk_ldm4(af[mi], sa + r * C::LDA + k);
		}
#pragma unroll
		for (int nj = 0; nj < C::NI / 2; nj++) {
			uint32_t t[4];
			if (!C::NN) {
				int n = wn * C::WTN + nj * 16 + (lane % 8) +
					(lane / 16) * 8;
				int k = kk * 16 + ((lane / 8) % 2) * 8;
				flyk_ldm4(t, sb + n * C::LDB + k);
			} else {
				int k =
				    kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
				int n = wn * C::WTN + nj * 16 + (lane / 16) * 8;
				flyk_ldm4t(t, sb + k * C::LDB + n);
			}
			bf[2 * nj][0] = t[0];
			bf[2 * nj][1] = t[1];
			bf[2 * nj + 1][0] = t[2];
			bf[2 * nj + 1][1] = t[3];
		}
#pragma unroll
		for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
			for (int ni = 0; ni < C::NI; ni++)
				flyk_mma16816(acc[mi][ni], af[mi], bf[ni]);
	}
}

/*
 * One output tile over k in [k_begin, k_end) (k_begin a multiple of BK),
 * then the epilogue.  All threads of the block must call it; @p smem is
 * C::SMEM bytes of dynamic shared memory.  Safe to call again for another
 * tile (it synchronises before reusing the buffers).
 */
template <class C>
__device__ __forceinline__ void
gemm_mma_tile(const gemm_opnd &o, int64_t k_begin, int64_t k_end,
	      const gemm_out &out, uint16_t *smem)
{
	float acc[C::MI][C::NI][4];
#pragma unroll
	for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
		for (int ni = 0; ni < C::NI; ni++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[mi][ni][e] = 0.f;
	uint16_t *sa = smem, *sb = smem + C::A_ST * C::ST;
	int64_t nk = (k_end - k_begin + C::BK - 1) / C::BK;
	if (nk < 0)
		nk = 0;
	__syncthreads(); /* a previous tile may still read the buffers */
#pragma unroll
	for (int s = 0; s < C::ST - 1; s++) {
		if (s < nk)
			gemm_load_stage<C>(o, sa + s * C::A_ST,
					   sb + s * C::B_ST,
					   k_begin + (int64_t)s * C::BK, k_end);
		flyk_cp_commit();
	}
	for (int64_t kt = 0; kt < nk; kt++) {
		flyk_cp_wait<C::ST - 2>();
		__syncthreads();
		int64_t pf = kt + C::ST - 1;
		if (pf < nk) {
			int ps = (int)(pf % C::ST);
			gemm_load_stage<C>(o, sa + ps * C::A_ST,
					   sb + ps * C::B_ST,
					   k_begin + pf * C::BK, k_end);
		}
		flyk_cp_commit();
		int cs = (int)(kt % C::ST);
		gemm_compute_stage<C>(sa + cs * C::A_ST, sb + cs * C::B_ST,
				      acc);
	}
	flyk_cp_wait<0>();
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	const int wm = warp / C::WN, wn = warp % C::WN;
	const int g = lane / 4, t = lane % 4;
#pragma unroll
	for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
		for (int ni = 0; ni < C::NI; ni++) {
			int64_t r = o.m0 + wm * C::WTM + mi * 16 + g;
			int64_t c = o.n0 + wn * C::WTN + ni * 8 + 2 * t;
			gemm_store2(out, r, c, acc[mi][ni][0], acc[mi][ni][1]);
			gemm_store2(out, r + 8, c, acc[mi][ni][2],
				    acc[mi][ni][3]);
		}
}

/* ------------------------------------------------------------ wgmma engine */

/*
 * Hopper's warpgroup MMA (sm_90a): wgmma.mma_async m64nBNk16, both operands
 * read from shared memory through descriptors, fp32 accumulators in
 * registers.  NT only (A [M,K] and B [N,K] both K-major).  One warpgroup
 * (128 threads) per 64 rows of the block tile; BK = 64 bf16 = 128 bytes,
 * so every tile row is one 128-byte swizzle row: 16-byte chunk c of row r
 * is stored at chunk c ^ (r % 8) (the 128B swizzle the descriptors name,
 * which TMA's SWIZZLE_128B also produces), 8-row groups 1024 bytes apart.
 * Stages are filled by cp.async (zero-filled out of bounds) ST - 2 k-tiles
 * ahead, with one wgmma group left in flight; generic-proxy writes are
 * made visible to wgmma (the async proxy) by fence.proxy.async before the
 * barrier.  Needs K % 8 == 0 and 16-byte
 * aligned A and B bases.  Under FLYK_EMU the descriptor carries the host
 * address and flyk_emu_wgmma() computes each thread's fragment.
 */

/* The wgmma tile shapes built (gemm_wgmma and ggemm_wgmma): BM, BN,
 * stages. */
#define GEMM_WG_CFGS(X)                                                        \
	X(64, 128, 4)                                                          \
	X(64, 128, 6)                                                          \
	X(64, 256, 4)                                                          \
	X(128, 128, 4)                                                         \
	X(128, 128, 6)                                                         \
	X(128, 256, 3)                                                         \
	X(128, 256, 4)                                                         \
	X(256, 128, 4)

/* One wgmma tile shape: BM (a multiple of 64: BM / 64 warpgroups) x BN
 * (128 or 256), ST stages. */
template <int BM_, int BN_, int ST_> struct gemm_wg_cfg {
	enum {
		BM = BM_,
		BN = BN_,
		BK = 64,
		ST = ST_,
		WGS = BM_ / 64,
		THREADS = WGS * 128,
		A_ST = BM_ * 64, /* halves per stage */
		B_ST = BN_ * 64,
		SMEM = (A_ST + B_ST) * ST_ * 2 + 1024, /* + alignment slack */
		NACC = BN_ / 2, /* fp32 accumulators per thread */
		WGMMA = 1,
		MFMA = 0
	};
	static const bool NN = false;
	static_assert(BM_ % 64 == 0 && (BN_ == 128 || BN_ == 256), "tile");
	static_assert(ST_ >= 3, "two stages besides the one in flight");
};


/* Issue the cp.async copies of one k-tile (64 deep) into the swizzled
 * stage buffers @p sa (BM rows) and @p sb (BN rows). */
template <class C>
__device__ __forceinline__ void gemm_wg_load(const gemm_opnd &o, uint16_t *sa,
					     uint16_t *sb, int64_t k0,
					     int64_t k_end)
{
	for (int c = threadIdx.x; c < C::BM * 8; c += C::THREADS) {
		int r = c / 8, ch = c % 8;
		int64_t gr = o.m0 + r, gk = k0 + ch * 8;
		bool ok = gr < o.m_end && gk < k_end;
		const uint16_t *src = ok ? o.a + gr * o.lda + gk : o.a;
		flyk_cp16(sa + r * 64 + (ch ^ (r & 7)) * 8, src, ok);
	}
	for (int c = threadIdx.x; c < C::BN * 8; c += C::THREADS) {
		int r = c / 8, ch = c % 8;
		int64_t gn = o.n0 + r, gk = k0 + ch * 8;
		bool ok = gn < o.n_end && gk < k_end;
		const uint16_t *src = ok ? o.b + gn * o.ldb + gk : o.b;
		flyk_cp16(sb + r * 64 + (ch ^ (r & 7)) * 8, src, ok);
	}
}

/*
 * One output tile over k in [k_begin, k_end) (k_begin a multiple of 64)
 * with wgmma, then the epilogue; the interface of gemm_mma_tile.  @p smem
 * is C::SMEM bytes of dynamic shared memory (aligned here to 1024).
 */
template <class C>
__device__ __forceinline__ void
gemm_wgmma_tile(const gemm_opnd &o, int64_t k_begin, int64_t k_end,
		const gemm_out &out, uint16_t *smem_raw)
{
	uint16_t *smem =
	    (uint16_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
	uint16_t *sa = smem, *sb = smem + C::A_ST * C::ST;
	const int wg = threadIdx.x / 128;
	float acc[C::NACC];
#pragma unroll
	for (int i = 0; i < C::NACC; i++)
		acc[i] = 0.f;
	int64_t nk = (k_end - k_begin + C::BK - 1) / C::BK;
	if (nk < 0)
		nk = 0;
	flyk_wg_fence_acc<C::NACC>(acc);
	__syncthreads(); /* a previous tile may still read the buffers */
	/* Pipeline: ST - 2 k-tiles of loads ahead, one wgmma group in flight
	 * behind the one just issued.  At k-tile kt the stage refilled,
	 * (kt - 2) % ST, was last read by wgmma kt - 2, which every
	 * warpgroup has waited for (wait_group 1 at the end of kt - 1)
	 * before the barrier; wgmma kt - 1 may still read (kt - 1) % ST. */
#pragma unroll
	for (int s = 0; s < C::ST - 2; s++) {
		if (s < nk)
			gemm_wg_load<C>(o, sa + s * C::A_ST, sb + s * C::B_ST,
					k_begin + (int64_t)s * C::BK, k_end);
		flyk_cp_commit();
	}
	for (int64_t kt = 0; kt < nk; kt++) {
		flyk_cp_wait<C::ST - 3>(); /* this thread's copies of kt */
		flyk_fence_async_smem();
		__syncthreads();
		int64_t pf = kt + C::ST - 2;
		if (pf < nk) {
			int ps = (int)(pf % C::ST);
			gemm_wg_load<C>(o, sa + ps * C::A_ST, sb + ps * C::B_ST,
					k_begin + pf * C::BK, k_end);
		}
		flyk_cp_commit();
		int cs = (int)(kt % C::ST);
		const uint16_t *a = sa + cs * C::A_ST + wg * 64 * 64;
		const uint16_t *b = sb + cs * C::B_ST;
		flyk_wg_fence();
#pragma unroll
		for (int kk = 0; kk < 4; kk++) /* k16 steps: +32 bytes */
			flyk_wgmma_bf16<C::BN>(acc, flyk_wg_desc(a + kk * 16),
					  flyk_wg_desc(b + kk * 16));
		flyk_wg_commit();
		flyk_wg_wait<1>();
	}
	flyk_wg_wait<0>();
	flyk_wg_fence_acc<C::NACC>(acc);
	flyk_cp_wait<0>();
	/* D fragment: warp w of the warpgroup owns rows 16w..16w+15; lane l
	 * holds rows l/4 and l/4 + 8, columns 8j + 2(l%4) + {0,1}. */
	const int t = threadIdx.x % 128, w = t / 32, l = t % 32;
	const int64_t r = o.m0 + wg * 64 + w * 16 + l / 4;
#pragma unroll
	for (int j = 0; j < C::BN / 8; j++) {
		int64_t c = o.n0 + j * 8 + 2 * (l % 4);
		gemm_store2(out, r, c, acc[4 * j], acc[4 * j + 1]);
		gemm_store2(out, r + 8, c, acc[4 * j + 2], acc[4 * j + 3]);
	}
}

/* ------------------------------------------------------------ mfma engine */

#if FLYK_HAS_MFMA
/*
 * AMD CDNA2/CDNA3 (wave64): bf16 MFMA (prim/mfma.h) from LDS.  The block
 * tile BM x BN is split over WM x WN waves; a wave's WTM x WTN tile is
 * MI x NI blocks of one MFMA (MF x MF, 32 or 16).  A and B sit in LDS
 * K-contiguous (NT's B as it is, NN's B transposed on the way in), rows
 * padded by 4 halves: a lane's operand is one 8-byte read, and the 32 (or
 * 16) rows a wave reads at once start on distinct even banks.
 *
 * Global -> LDS goes through registers (AMD has no cp.async): each thread
 * fetches its 8-element chunks of the next k-tile, 16-byte loads where a
 * chunk is whole and aligned, element loads with zero fill at the ends
 * (any M, N, K, any alignment).  The k-tile loop is prim/lds_pipe.h's
 * (shared with scaled_gemm.hip's sg_mfma): DB (LDS double buffering) 1:
 * two LDS buffers, the next k-tile's global loads issued before this
 * one's MFMAs and written to the other buffer after them, one barrier a
 * k-tile; DB 0: one buffer, loads then two barriers a k-tile.  The
 * accumulators' zeroing and the epilogue (gemm_mfma_zero, gemm_mfma_store)
 * are sg_mfma's too, for either MFMA type (flyk_mfma, flyk_mfma8).
 */

/* The MFMA tile shapes built (gemm_mfma and ggemm_mfma): BM, BN, BK,
 * waves along M, waves along N, MFMA block (32: 32x32x8, 16: 16x16x16). */
#define GEMM_MFMA_CFGS(X)                                                      \
	X(32, 32, 64, 1, 1, 32)                                                \
	X(32, 64, 32, 1, 2, 16)                                                \
	X(64, 64, 32, 2, 2, 16)                                                \
	X(64, 64, 32, 2, 2, 32)                                                \
	X(64, 128, 32, 2, 2, 32)                                               \
	X(128, 128, 32, 2, 2, 32)                                              \
	X(128, 128, 64, 2, 2, 32)                                              \
	X(256, 128, 32, 4, 2, 32)

template <int BM_, int BN_, int BK_, int WM_, int WN_, int MF_, bool DB_,
	  bool NN_>
struct gemm_mfma_cfg {
	enum {
		BM = BM_,
		BN = BN_,
		BK = BK_,
		WM = WM_,
		WN = WN_,
		MF = MF_,
		ST = DB_ ? 2 : 1,    /* LDS buffers */
		THREADS = WM_ * WN_ * 64,
		WTM = BM_ / WM_,     /* wave tile rows */
		WTN = BN_ / WN_,     /* wave tile cols */
		MI = WTM / MF_,      /* MFMA blocks per wave, along M */
		NI = WTN / MF_,      /* ... along N */
		LDS = BK_ + 4,       /* LDS row stride (halves), A and B */
		A_ST = BM_ * LDS,    /* halves per buffer */
		B_ST = BN_ * LDS,
		SMEM = (A_ST + B_ST) * ST * 2, /* bytes */
		CA = BM_ * BK_ / 8,  /* 8-element chunks of a k-tile of A */
		CB = BN_ * BK_ / 8,  /* ... of B */
		RA = (CA + THREADS - 1) / THREADS, /* chunks a thread carries */
		RB = (CB + THREADS - 1) / THREADS,
		WGMMA = 0,
		MFMA = 1
	};
	static const bool NN = NN_;
	static const bool DB = DB_;
	static_assert(WTM % MF_ == 0 && WTN % MF_ == 0, "wave tile");
	static_assert(BK_ % flyk_mfma<MF_>::K == 0 && BK_ % 8 == 0, "BK");
};

/* Elements c and c + 1 of @p row packed (c low), zero from @p end on. */
__device__ __forceinline__ uint32_t gemm_ld2(const uint16_t *row, int64_t c,
					     int64_t end)
{
	uint32_t lo = c < end ? row[c] : 0u, hi = c + 1 < end ? row[c + 1] : 0u;
	return lo | hi << 16;
}

/* Elements c0 .. c0 + 7 of @p row, zero from @p end on: one 16-byte load
 * where the chunk is whole and aligned.  (No local array: it would live
 * in scratch.) */
__device__ __forceinline__ uint4 gemm_ld8(const uint16_t *row, int64_t c0,
					  int64_t end)
{
	uint4 v;
	if (c0 + 8 <= end && !((uintptr_t)(row + c0) & 15))
		return *(const uint4 *)(row + c0);
	v.x = gemm_ld2(row, c0, end);
	v.y = gemm_ld2(row, c0 + 2, end);
	v.z = gemm_ld2(row, c0 + 4, end);
	v.w = gemm_ld2(row, c0 + 6, end);
	return v;
}

__device__ __forceinline__ uint4 gemm_zero8(void)
{
	uint4 v;
	v.x = v.y = v.z = v.w = 0;
	return v;
}

/* Element @p e (0..7) of the chunk @p v. */
__device__ __forceinline__ uint16_t gemm_half8(const uint4 &v, int e)
{
	uint32_t w = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
	return (uint16_t)(w >> (16 * (e & 1)));
}

/* This thread's chunks of the k-tile at @p k0 into @p ra and @p rb. */
template <class C>
__device__ __forceinline__ void gemm_mfma_fetch(const gemm_opnd &o, int64_t k0,
						int64_t k_end, uint4 *ra,
						uint4 *rb)
{
	const int KC = C::BK / 8, NC = C::BN / 8;
#pragma unroll
	for (int i = 0; i < C::RA; i++) {
		int c = threadIdx.x + i * C::THREADS;
		int64_t gr = o.m0 + c / KC;
		ra[i] = c < C::CA && gr < o.m_end
			    ? gemm_ld8(o.a + gr * o.lda, k0 + (c % KC) * 8,
				       k_end)
			    : gemm_zero8();
	}
#pragma unroll
	for (int i = 0; i < C::RB; i++) {
		int c = threadIdx.x + i * C::THREADS;
		if (!C::NN) {
			int64_t gn = o.n0 + c / KC;
			rb[i] = c < C::CB && gn < o.n_end
				    ? gemm_ld8(o.b + gn * o.ldb,
					       k0 + (c % KC) * 8, k_end)
				    : gemm_zero8();
		} else { /* a row of B [K, N]: 8 columns at one k */
			int64_t gk = k0 + c / NC;
			rb[i] = c < C::CB && gk < k_end
				    ? gemm_ld8(o.b + gk * o.ldb,
					       o.n0 + (c % NC) * 8, o.n_end)
				    : gemm_zero8();
		}
	}
}

/* The fetched chunks into the LDS buffers @p sa and @p sb. */
template <class C>
__device__ __forceinline__ void gemm_mfma_put(const uint4 *ra, const uint4 *rb,
					      uint16_t *sa, uint16_t *sb)
{
	const int KC = C::BK / 8, NC = C::BN / 8;
#pragma unroll
	for (int i = 0; i < C::RA; i++) {
		int c = threadIdx.x + i * C::THREADS;
		if (c >= C::CA)
			break;
		uint32_t *d = (uint32_t *)(sa + (c / KC) * C::LDS + (c % KC) * 8);
		d[0] = ra[i].x;
		d[1] = ra[i].y;
		d[2] = ra[i].z;
		d[3] = ra[i].w;
	}
#pragma unroll
	for (int i = 0; i < C::RB; i++) {
		int c = threadIdx.x + i * C::THREADS;
		if (c >= C::CB)
			break;
		if (!C::NN) {
			uint32_t *d = (uint32_t *)(sb + (c / KC) * C::LDS +
						   (c % KC) * 8);
			d[0] = rb[i].x;
			d[1] = rb[i].y;
			d[2] = rb[i].z;
			d[3] = rb[i].w;
		} else { /* transposed: column n of the chunk is LDS row n */
			int k = c / NC, n = (c % NC) * 8;
#pragma unroll
			for (int e = 0; e < 8; e++)
				sb[(n + e) * C::LDS + k] = gemm_half8(rb[i], e);
		}
	}
}

/* One MFMA operand of a lane from LDS (8-byte aligned): 4 bf16 for
 * flyk_mfma, 8 fp8 bytes for flyk_mfma8. */
__device__ __forceinline__ flyk_bf16x4 gemm_mfma_ld(const uint16_t *p)
{
	return flyk_mfma_ld4(p);
}
__device__ __forceinline__ flyk_fp8x8 gemm_mfma_ld(const uint8_t *p)
{
	return flyk_mfma8_ld8(p);
}

/* acc += the MFMAs (type @p M) of the wave tile's MI x NI blocks at k
 * @p kk of the LDS k-tile, this lane's operands at @p pa (A's first row of
 * the wave, at the lane's row and k) and @p pb (B's likewise). */
template <class C, class M, class T>
__device__ __forceinline__ void
gemm_mfma_kk(const T *pa, const T *pb, int kk,
	     typename M::acc_t (*acc)[C::NI])
{
	decltype(gemm_mfma_ld(pa)) a[C::MI], b[C::NI];
#pragma unroll
	for (int mi = 0; mi < C::MI; mi++)
		a[mi] = gemm_mfma_ld(pa + mi * C::MF * C::LDS + kk);
#pragma unroll
	for (int ni = 0; ni < C::NI; ni++)
		b[ni] = gemm_mfma_ld(pb + ni * C::MF * C::LDS + kk);
#pragma unroll
	for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
		for (int ni = 0; ni < C::NI; ni++)
			M::run(acc[mi][ni], a[mi], b[ni]);
}

/* acc += the products of one k-tile in LDS. */
template <class C>
__device__ __forceinline__ void
gemm_mfma_step(const uint16_t *sa, const uint16_t *sb,
	       typename flyk_mfma<C::MF>::acc_t (*acc)[C::NI])
{
	typedef flyk_mfma<C::MF> M;
	const int l = threadIdx.x % FLYK_WARP, w = threadIdx.x / FLYK_WARP;
	const int wm = w / C::WN, wn = w % C::WN;
	const uint16_t *pa =
	    sa + (wm * C::WTM + M::ab_idx(l)) * C::LDS + M::ab_k(l);
	const uint16_t *pb =
	    sb + (wn * C::WTN + M::ab_idx(l)) * C::LDS + M::ab_k(l);
#pragma unroll
	for (int kk = 0; kk < C::BK; kk += M::K)
		gemm_mfma_kk<C, M>(pa, pb, kk, acc);
}

/* Zeroes the accumulators of MFMA type @p M (flyk_mfma or flyk_mfma8). */
template <class C, class M>
__device__ __forceinline__ void gemm_mfma_zero(typename M::acc_t (*acc)[C::NI])
{
#pragma unroll
	for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
		for (int ni = 0; ni < C::NI; ni++)
#pragma unroll
			for (int v = 0; v < M::REGS; v++)
				acc[mi][ni][v] = 0.f;
}

/* The epilogue of the block tile at (@p m0, @p n0): each wave's
 * accumulators of MFMA type @p M through gemm_store1. */
template <class C, class M>
__device__ __forceinline__ void gemm_mfma_store(const gemm_out &out, int64_t m0,
						int64_t n0,
						typename M::acc_t (*acc)[C::NI])
{
	const int l = threadIdx.x % FLYK_WARP, w = threadIdx.x / FLYK_WARP;
	const int64_t r0 = m0 + (w / C::WN) * C::WTM;
	const int64_t c0 = n0 + (w % C::WN) * C::WTN + M::d_col(l);
#pragma unroll
	for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
		for (int ni = 0; ni < C::NI; ni++)
#pragma unroll
			for (int v = 0; v < M::REGS; v++)
				gemm_store1(out,
					    r0 + mi * C::MF + M::d_row(l, v),
					    c0 + ni * C::MF, acc[mi][ni][v]);
}

/*
 * One output tile over k in [k_begin, k_end) (k_begin a multiple of BK)
 * with MFMA, then the epilogue; the interface of gemm_mma_tile.  All
 * threads of the block call it; @p smem is C::SMEM bytes of LDS.
 */
template <class C>
__device__ __forceinline__ void
gemm_mfma_tile(const gemm_opnd &o, int64_t k_begin, int64_t k_end,
	       const gemm_out &out, uint16_t *smem)
{
	typedef flyk_mfma<C::MF> M;
	typename M::acc_t acc[C::MI][C::NI];
	gemm_mfma_zero<C, M>(acc);
	uint16_t *sa = smem, *sb = smem + C::A_ST * C::ST;
	uint4 ra[C::RA], rb[C::RB];
	__syncthreads(); /* a previous tile may still read the buffers */
	flyk_lds_pipe<C::DB>(
	    (k_end - k_begin + C::BK - 1) / C::BK,
	    [&](int64_t kt) FLYK_PIPE_STEP {
		    gemm_mfma_fetch<C>(o, k_begin + kt * C::BK, k_end, ra, rb);
	    },
	    [&](int64_t, int buf) FLYK_PIPE_STEP {
		    gemm_mfma_put<C>(ra, rb, sa + buf * C::A_ST,
				     sb + buf * C::B_ST);
	    },
	    [&](int buf) FLYK_PIPE_STEP {
		    gemm_mfma_step<C>(sa + buf * C::A_ST, sb + buf * C::B_ST,
				      acc);
	    });
	gemm_mfma_store<C, M>(out, o.m0, o.n0, acc);
}
#endif /* FLYK_HAS_MFMA */

/* The tile engine of config @p C: wgmma, MFMA or mma.sync. */
template <class C>
__device__ __forceinline__ void gemm_tile_run(const gemm_opnd &o,
					      int64_t k_begin, int64_t k_end,
					      const gemm_out &out,
					      uint16_t *smem)
{
	if constexpr (C::WGMMA)
		gemm_wgmma_tile<C>(o, k_begin, k_end, out, smem);
#if FLYK_HAS_MFMA
	else if constexpr (C::MFMA)
		gemm_mfma_tile<C>(o, k_begin, k_end, out, smem);
#endif
	else
		gemm_mma_tile<C>(o, k_begin, k_end, out, smem);
}

/* ------------------------------------------------------------ fma engine */

#define GEMM_FMA_BM	 64
#define GEMM_FMA_BN	 64
#define GEMM_FMA_BK	 16
#define GEMM_FMA_THREADS 256

/* One 64x64 tile with plain FMAs; any shape and alignment.  All 256
 * threads of the block must call it. */
__device__ __forceinline__ void
gemm_fma_tile(const gemm_opnd &o, bool nn, int64_t k_end, const gemm_out &out)
{
	__shared__ float sa[GEMM_FMA_BK][GEMM_FMA_BM + 4];
	__shared__ float sb[GEMM_FMA_BK][GEMM_FMA_BN + 4];
	const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
	float acc[4][4];
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.f;
	for (int64_t k0 = 0; k0 < k_end; k0 += GEMM_FMA_BK) {
		__syncthreads();
		for (int e = tid; e < GEMM_FMA_BK * GEMM_FMA_BM;
		     e += GEMM_FMA_THREADS) {
			int r = e / GEMM_FMA_BK, k = e % GEMM_FMA_BK;
			int64_t gr = o.m0 + r, gk = k0 + k;
			sa[k][r] = gr < o.m_end && gk < k_end
				       ? flyk_db2f(o.a[gr * o.lda + gk])
				       : 0.f;
		}
		for (int e = tid; e < GEMM_FMA_BK * GEMM_FMA_BN;
		     e += GEMM_FMA_THREADS) {
			int n, k;
			if (nn) {
				k = e / GEMM_FMA_BN;
				n = e % GEMM_FMA_BN;
			} else {
				n = e / GEMM_FMA_BK;
				k = e % GEMM_FMA_BK;
			}
			int64_t gn = o.n0 + n, gk = k0 + k;
			float v = 0.f;
			if (gn < o.n_end && gk < k_end)
				v = flyk_db2f(nn ? o.b[gk * o.ldb + gn]
						 : o.b[gn * o.ldb + gk]);
			sb[k][n] = v;
		}
		__syncthreads();
#pragma unroll
		for (int k = 0; k < GEMM_FMA_BK; k++) {
			float av[4], bv[4];
			for (int i = 0; i < 4; i++)
				av[i] = sa[k][ty * 4 + i];
			for (int j = 0; j < 4; j++)
				bv[j] = sb[k][tx * 4 + j];
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 4; j++)
					acc[i][j] += av[i] * bv[j];
		}
	}
	for (int i = 0; i < 4; i++) {
		int64_t r = o.m0 + ty * 4 + i, c = o.n0 + tx * 4;
		gemm_store2(out, r, c, acc[i][0], acc[i][1]);
		gemm_store2(out, r, c + 2, acc[i][2], acc[i][3]);
	}
}

/* Host: M as the daemon's default key bucketing rounds it (a power of two
 * up to 1024, then a multiple of 1024: fly_bucket_policy_default).  The
 * feasible() rules that only prune the search use it, so a decision tuned
 * on a bucket stays feasible on every M of the bucket. */
static inline int64_t flyk_gemm_bucket_m(int64_t m)
{
	if (m <= 1024) {
		int64_t r = 1;
		while (r < m)
			r *= 2;
		return r;
	}
	return (m + 1023) / 1024 * 1024;
}


/* Host: compare the bf16 device buffers @p got and @p ref (@p n elements)
 * on the device, through the two device words @p d_cmp: *max_err = max
 * abs error; -EDOM on NaN or an element off by more than |ref| / 64 +
 * 2e-3 * sqrt(k).  Only 8 bytes come back: a 128 MiB output is compared
 * in microseconds, not downloaded (defined in gemm.hip, shared with
 * grouped_gemm.hip). */
struct flyk_device;
extern "C" int flyk_gpu_gemm_compare(struct flyk_device *dev,
				     const void *got, const void *ref,
				     size_t n, int64_t k, unsigned *d_cmp,
				     double *max_err);

#endif /* FLYK_GEMM_TILE_H */
