/*
 * gemm/gemm_skinny.h -- the decode-shape (small M) NT GEMM kernel of the
 * gemm op (bf16: gemm_skinny) and the scaled_gemm op (fp8 e4m3 per
 * tensor: sg_skinny):
 *   C[m, n] = alpha (sa sb) sum_k A[m, k] B[n, k] + bias[n], bf16 C, bias
 * where C has a few rows and the GEMM is a stream of B (the weights):
 * cuBLAS reads B well under the HBM rate there (H200: bf16 M = 8..64,
 * N = K = 4096 at ~2.1 TB/s), and 64-row wgmma tiles are mostly padding.
 *
 * Swapped operands: B's rows are the MMA's M dimension (16 a tile), A's
 * rows its N (8 a tile), and mma.sync (prim/mma.h: m16n8k32 e4m3, or
 * m16n8k16 bf16 / f16) takes both from registers.  A block of W warps
 * owns 16 RT rows of B (grid.y) and 8 MT rows of A (grid.x); its warps
 * split K: warp w takes the 64-byte k chunks w, w + W, ... (the block's
 * warps read neighbouring bytes of the same rows), each lane 16 bytes of
 * each row at byte 16 (lane % 4) of the chunk.  Those 16 bytes are the
 * lane's fragment words of two k32 steps (step s: word 2s as the
 * fragment's low k -- e4m3 k 4t.., bf16 k 2t.. -- and word 2s + 1 as its
 * high k -- k 16 + 4t.., k 8 + 2t..; e4m3 as f16: word j, converted, is
 * the k16 step j): one k permutation applied to both operands alike, so
 * the dot products are unchanged.  The loads: stages 0, straight from
 * global memory into two register buffers of G chunks (the next G in
 * flight while this G's MMAs run); stages S, a cp.async ring of S chunks
 * a warp in shared memory (gemm_skinny_cp_kernel).  The warps' sums meet
 * in shared memory and the block writes C: one kernel, no workspace, no
 * atomics, the same bits on every run.  Loads are 16-byte vectors where
 * A, B and K allow (16-byte aligned, a row a multiple of 16 bytes),
 * bytes with zero fill elsewhere (stages 0 then): any shape and
 * alignment.
 *
 * Owns: nothing (templates and one constant table per includer).
 * Thread: device code and immutable tables.  NVIDIA only (FLYK_HAS_MMA;
 * mma.sync e4m3 needs sm_89+, the others sm_80+: gemm_skinny_feasible
 * checks).
 */
#ifndef FLYK_GEMM_SKINNY_H
#define FLYK_GEMM_SKINNY_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "gemm/gemm_tile.h"
#include "gpu_int.h"
#include "prim/cp_async.h"
#include "prim/flyk_gpu.h"
#include "prim/launch.h"
#include "prim/mem.h"
#include "prim/mma.h"

/* The element formats and MMAs: e4m3 on mma.sync m16n8k32 e4m3 (sm_89+;
 * on sm_90 the compiler runs it as f16 MMAs after converting both
 * operands at every use), bf16 on m16n8k16 bf16, and e4m3 converted to
 * f16 in registers here, each operand word once, on m16n8k16 f16 (sm_80+;
 * gemm_skinny_f16x2). */
#define GEMM_SKINNY_E4M3 0
#define GEMM_SKINNY_BF16 1
#define GEMM_SKINNY_E4M3_F16 2

/* The params' values (rows 16 RT, mrows 8 MT, warps W; stages below). */
static const int64_t gemm_skinny_rows[] = {16, 32, 64};
static const int64_t gemm_skinny_mrows[] = {16, 32, 64};
static const int64_t gemm_skinny_warps[] = {4, 8, 16};

/* The stages built (0: the register buffers, no ring). */
#define GEMM_SKINNY_NSTAGES 2
static const int64_t gemm_skinny_stages[GEMM_SKINNY_NSTAGES] = {0, 4};

static inline int gemm_skinny_stage_index(int64_t stages)
{
	for (int i = 0; i < GEMM_SKINNY_NSTAGES; i++)
		if (gemm_skinny_stages[i] == stages)
			return i;
	return -1;
}

/* Dynamic shared memory of a launch: the ring (S stages) or the
 * reduction, whichever is larger. */
static inline size_t gemm_skinny_smem(int rt, int mt, int w, int s)
{
	size_t ring = (size_t)w * s * (2 * rt + mt) * 32 * 16;
	size_t red = (size_t)w * 8 * mt * (16 * rt + 1) * 4;
	return ring > red ? ring : red;
}

/* RT, MT, W built: RT MT <= 16 (accumulators), W RT MT <= 64 (the
 * reduction's shared memory, <= 35 KiB); 16 warps (128 registers a
 * thread) only on the smallest tile. */
#define GEMM_SKINNY_CFGS(X)                                                    \
	X(1, 2, 4) X(1, 2, 8) X(1, 2, 16) X(2, 2, 4) X(2, 2, 8) X(4, 2, 4)     \
	    X(4, 2, 8) X(1, 4, 4) X(1, 4, 8) X(2, 4, 4) X(2, 4, 8) X(4, 4, 4)  \
		X(1, 8, 4) X(1, 8, 8) X(2, 8, 4)

/* The launch's arguments: @p kb bytes a row of A and B; C = acc alpha
 * (*sa) (*sb) (sa, sb: device fp32 scales, or NULL) + bias. */
struct gemm_skinny_args {
	const uint8_t *a, *b;
	const float *sa, *sb;
	float alpha;
	const uint16_t *bias;
	uint16_t *c;
	int64_t m, n, kb;
	bool vec;
};

#if FLYK_HAS_MMA
/* The byte path of gemm_skinny_ld (operands off 16-byte alignment, or
 * rows not a multiple of 16 bytes): out of line, so the vector path's
 * loop carries none of it. */
static __device__ __noinline__ uint4
gemm_skinny_ld_bytes(const uint8_t *p, int64_t left)
{
	uint32_t w[4] = {0u, 0u, 0u, 0u};
	for (int i = 0; i < 16 && i < left; i++)
		w[i / 4] |= (uint32_t)p[i] << (8 * (i % 4));
	uint4 v;
	memcpy(&v, w, 16);
	return v;
}

/* 16 bytes of row @p row of @p x (rows of @p kb bytes) from byte @p k0:
 * zero for bytes >= kb.  Rows past the operand's last are clamped to it
 * by the caller (their sums land in rows of C never written). */
__device__ __forceinline__ uint4 gemm_skinny_ld(const uint8_t *x, int64_t row,
						int64_t kb, int64_t k0, bool vec,
						uint64_t pol)
{
	if (k0 >= kb)
		return uint4{0u, 0u, 0u, 0u};
	const uint8_t *p = x + row * kb + k0;
	if (vec)
		return flyk_ld_pol_ro((const uint4 *)p, pol);
	return gemm_skinny_ld_bytes(p, kb - k0);
}

__device__ __forceinline__ uint32_t gemm_skinny_word(const uint4 &v, int i)
{
	return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* G k chunks a buffer: at most 12 16-byte vectors a lane a buffer (two
 * buffers: 96 registers; ptxas -v on sm_90a: 104-255 in all, no
 * spills). */
template <int RT, int MT> struct gemm_skinny_shape {
	static constexpr int G = 2 * RT + MT <= 6 ? 2 : 1;
	/* 8 warps an SM: up to 255 registers a thread (two buffers of
	 * 16-byte vectors, the accumulators, and -- e4m3 on sm_90, where
	 * mma.sync m16n8k32 runs as f16 MMAs -- the operands' f16 copies) */
	static constexpr int WARPS_SM = 8;
};

/* Buffer @p bv / @p av <- the G chunks from chunk @p ch (step W); rows
 * @p rb (B: 16 r + 8 h + g, clamped) and @p ra (A: 8 q + g, clamped). */
template <int RT, int MT, int W, int G>
__device__ __forceinline__ void gemm_skinny_fetch(const gemm_skinny_args &x,
						  uint4 (&bv)[G][RT][2],
						  uint4 (&av)[G][MT],
						  const int64_t (&rb)[RT][2],
						  const int64_t (&ra)[MT],
						  int64_t ch, int t,
						  uint64_t bpol, uint64_t apol)
{
#pragma unroll
	for (int u = 0; u < G; u++) {
		int64_t k0 = (ch + (int64_t)u * W) * 64 + 16 * t;
#pragma unroll
		for (int r = 0; r < RT; r++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				bv[u][r][h] = gemm_skinny_ld(x.b, rb[r][h], x.kb,
							     k0, x.vec, bpol);
#pragma unroll
		for (int q = 0; q < MT; q++)
			av[u][q] = gemm_skinny_ld(x.a, ra[q], x.kb, k0, x.vec,
						  apol);
	}
}

/* Four e4m3fn bytes -> two f16x2 words (bytes 0, 1 in @p h0; 2, 3 in
 * @p h1), each value times 2^-8, exactly: the sign to bit 15, exponent
 * and mantissa shifted into f16's fields, whose bias is 8 more (e4m3
 * subnormals land on f16 subnormals of the same scale; 0x7f, fn's NaN,
 * becomes a finite value: the op takes no NaN operands).  Shifts and
 * masks only -- full-rate integer ops, where sm_90's e4m3 -> f16 converts
 * run at a quarter of that. */
__device__ __forceinline__ void gemm_skinny_f16x2(uint32_t w, uint32_t &h0,
						  uint32_t &h1)
{
	uint32_t p0 = ((w << 8) & 0xff00u) | ((w << 16) & 0xff000000u);
	uint32_t p1 = ((w >> 8) & 0xff00u) | (w & 0xff000000u);
	h0 = (p0 & 0x80008000u) | ((p0 >> 1) & 0x3f803f80u);
	h1 = (p1 & 0x80008000u) | ((p1 >> 1) & 0x3f803f80u);
}

/* acc += the MMAs of one buffer (e4m3 and bf16: two k steps a chunk of
 * words 2s and 2s + 1; e4m3 as f16: four k16 steps, word j of every row
 * converted once and used by all RT x MT MMAs). */
template <int DT, int RT, int MT, int G>
__device__ __forceinline__ void gemm_skinny_mma(float (&acc)[RT][MT][4],
						const uint4 (&bv)[G][RT][2],
						const uint4 (&av)[G][MT])
{
	if constexpr (DT == GEMM_SKINNY_E4M3_F16) {
#pragma unroll
		for (int u = 0; u < G; u++)
#pragma unroll
			for (int j = 0; j < 4; j++) {
				uint32_t fb[MT][2];
#pragma unroll
				for (int q = 0; q < MT; q++)
					gemm_skinny_f16x2(
					    gemm_skinny_word(av[u][q], j),
					    fb[q][0], fb[q][1]);
#pragma unroll
				for (int r = 0; r < RT; r++) {
					uint32_t fa[4];
					gemm_skinny_f16x2(
					    gemm_skinny_word(bv[u][r][0], j),
					    fa[0], fa[2]);
					gemm_skinny_f16x2(
					    gemm_skinny_word(bv[u][r][1], j),
					    fa[1], fa[3]);
#pragma unroll
					for (int q = 0; q < MT; q++)
						flyk_mma16816_f16(acc[r][q], fa,
								  fb[q]);
				}
			}
	} else {
#pragma unroll
		for (int u = 0; u < G; u++)
#pragma unroll
			for (int s = 0; s < 2; s++)
#pragma unroll
				for (int q = 0; q < MT; q++) {
					uint32_t fb[2] = {
					    gemm_skinny_word(av[u][q], 2 * s),
					    gemm_skinny_word(av[u][q], 2 * s + 1)};
#pragma unroll
					for (int r = 0; r < RT; r++) {
						const uint4 &lo = bv[u][r][0];
						const uint4 &hi = bv[u][r][1];
						uint32_t fa[4] = {
						    gemm_skinny_word(lo, 2 * s),
						    gemm_skinny_word(hi, 2 * s),
						    gemm_skinny_word(lo, 2 * s + 1),
						    gemm_skinny_word(hi, 2 * s + 1)};
						if (DT == GEMM_SKINNY_E4M3)
							flyk_mma16832_e4m3(acc[r][q],
									   fa, fb);
						else
							flyk_mma16816(acc[r][q], fa,
								      fb);
					}
				}
	}
}

/* The block's epilogue: each warp's sums to @p red ([W][8 MT][16 RT + 1]
 * floats), then C = the sum over warps, scaled, plus the bias.
 * D[i][j]: i a row of B (16 r + g, + 8 for e >= 2), j a row of A
 * (8 q + 2 t + e % 2). */
template <int DT, int RT, int MT, int W>
__device__ __forceinline__ void gemm_skinny_store(const gemm_skinny_args &x,
						  const float (&acc)[RT][MT][4],
						  float *red, int64_t n0,
						  int64_t m0)
{
	constexpr int NR = 16 * RT, MR = 8 * MT, LD = NR + 1;
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const int g = lane / 4, t = lane % 4;
	float *mine = red + warp * MR * LD;
#pragma unroll
	for (int r = 0; r < RT; r++)
#pragma unroll
		for (int q = 0; q < MT; q++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				mine[(8 * q + 2 * t + (e & 1)) * LD + 16 * r + g +
				     (e >= 2 ? 8 : 0)] = acc[r][q][e];
	__syncthreads();
	/* (e4m3 as f16: both operands were scaled by 2^-8) */
	float ts = x.alpha * (DT == GEMM_SKINNY_E4M3_F16 ? 65536.f : 1.f);
	if (x.sa)
		ts *= *x.sa * *x.sb;
	for (int e = threadIdx.x; e < NR * MR; e += W * 32) {
		int j = e % NR, i = e / NR;
		int64_t row = m0 + i, col = n0 + j;
		if (row >= x.m || col >= x.n)
			continue;
		float v = 0.f;
#pragma unroll
		for (int w = 0; w < W; w++)
			v += red[(w * MR + i) * LD + j];
		v *= ts;
		if (x.bias)
			v += flyk_db2f(x.bias[col]);
		x.c[row * x.n + col] = flyk_df2b(v);
	}
}

/* A block's start: its first rows of B (@p n0, grid.y) and A (@p m0,
 * grid.x), the lane's rows @p rb (B: 16 r + 8 h + g) and @p ra (A:
 * 8 q + g) clamped to the operands' last, the sums zeroed. */
template <int RT, int MT>
__device__ __forceinline__ void
gemm_skinny_begin(const gemm_skinny_args &x, int64_t &n0, int64_t &m0,
		  int64_t (&rb)[RT][2], int64_t (&ra)[MT],
		  float (&acc)[RT][MT][4])
{
	const int g = threadIdx.x % 32 / 4;
	n0 = (int64_t)blockIdx.y * 16 * RT;
	m0 = (int64_t)blockIdx.x * 8 * MT;
#pragma unroll
	for (int r = 0; r < RT; r++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int64_t i = n0 + 16 * r + 8 * h + g;
			rb[r][h] = i < x.n ? i : x.n - 1;
		}
#pragma unroll
	for (int q = 0; q < MT; q++) {
		int64_t i = m0 + 8 * q + g;
		ra[q] = i < x.m ? i : x.m - 1;
	}
#pragma unroll
	for (int r = 0; r < RT; r++)
#pragma unroll
		for (int q = 0; q < MT; q++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[r][q][e] = 0.f;
}

template <int DT, int RT, int MT, int W>
__global__ void __launch_bounds__(
    W * 32, gemm_skinny_shape<RT, MT>::WARPS_SM / W > 0
		? gemm_skinny_shape<RT, MT>::WARPS_SM / W
		: 1) gemm_skinny_kernel(const gemm_skinny_args x)
{
	constexpr int NR = 16 * RT, MR = 8 * MT;
	constexpr int G = gemm_skinny_shape<RT, MT>::G;
	__shared__ float red[W][MR][NR + 1];
	const int warp = threadIdx.x / 32, t = threadIdx.x % 4;
	/* A is read by every block (evict last); B once a call (evict
	 * normal: evict first cost 0.68x of cuBLAS under graph replay at
	 * M8 N4096 K4096 bf16, B's 32 MB no longer surviving in L2 between
	 * calls) */
	const uint64_t bpol = flyk_l2_policy_normal();
	const uint64_t apol = flyk_l2_policy(true);
	int64_t n0, m0, rb[RT][2], ra[MT];
	float acc[RT][MT][4];
	gemm_skinny_begin<RT, MT>(x, n0, m0, rb, ra, acc);
	/* two register buffers: the next G chunks are in flight while
	 * this G's MMAs run */
	const int64_t chunks = (x.kb + 63) / 64, step = (int64_t)W * G;
	uint4 b0[G][RT][2], a0[G][MT], b1[G][RT][2], a1[G][MT];
	if (warp < chunks)
		gemm_skinny_fetch<RT, MT, W, G>(x, b0, a0, rb, ra, warp, t,
						bpol, apol);
	for (int64_t ch = warp; ch < chunks; ch += 2 * step) {
		if (ch + step < chunks)
			gemm_skinny_fetch<RT, MT, W, G>(x, b1, a1, rb, ra,
							ch + step, t, bpol,
							apol);
		gemm_skinny_mma<DT, RT, MT, G>(acc, b0, a0);
		if (ch + step >= chunks)
			break;
		if (ch + 2 * step < chunks)
			gemm_skinny_fetch<RT, MT, W, G>(x, b0, a0, rb, ra,
							ch + 2 * step, t, bpol,
							apol);
		gemm_skinny_mma<DT, RT, MT, G>(acc, b1, a1);
	}
	gemm_skinny_store<DT, RT, MT, W>(x, acc, &red[0][0][0], n0, m0);
}

/* The same with a cp.async ring (S >= 2 stages, one k chunk a stage) in
 * dynamic shared memory in place of the register buffers: S - 1 chunks
 * in flight a warp at a few registers' cost.  Each lane copies its own
 * 16-byte vectors to its own slots ([warp][stage][slot][lane]) and reads
 * them back itself, so the ring needs no barrier: cp.async.wait_group
 * orders a lane's copies for that lane.  16-byte vectors only (x.vec);
 * the reduction reuses the ring after the loop.  16 warps an SM on the
 * small tiles, 8 on the others. */
template <int DT, int RT, int MT, int W, int S>
__global__ void __launch_bounds__(W * 32,
				  (RT * MT <= 4 ? 16 : 8) / W > 0
				      ? (RT * MT <= 4 ? 16 : 8) / W
				      : 1) gemm_skinny_cp_kernel(const gemm_skinny_args x)
{
	constexpr int SLOTS = 2 * RT + MT;
	FLYK_DYN_SMEM(uint4, ring);
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const int t = lane % 4;
	int64_t n0, m0, rb[RT][2], ra[MT];
	float acc[RT][MT][4];
	gemm_skinny_begin<RT, MT>(x, n0, m0, rb, ra, acc);
	uint4 *mine = ring + (size_t)warp * S * SLOTS * 32 + lane;
	const int64_t chunks = (x.kb + 63) / 64;
	const int64_t nit = warp < chunks ? (chunks - warp + W - 1) / W : 0;
	/* iteration i's chunk warp + W i into stage i % S (zero-filled past
	 * K: the copy's predicate) */
	auto issue = [&](int64_t i) {
		int64_t k0 = (warp + i * W) * 64 + 16 * t;
		bool in = k0 < x.kb;
		int64_t kk = in ? k0 : 0;
		uint4 *st = mine + (size_t)(i % S) * SLOTS * 32;
#pragma unroll
		for (int r = 0; r < RT; r++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				flyk_cp16(st + (2 * r + h) * 32,
					  x.b + rb[r][h] * x.kb + kk, in);
#pragma unroll
		for (int q = 0; q < MT; q++)
			flyk_cp16(st + (2 * RT + q) * 32,
				  x.a + ra[q] * x.kb + kk, in);
	};
#pragma unroll
	for (int i = 0; i < S - 1; i++) {
		issue(i);
		flyk_cp_commit();
	}
	for (int64_t i = 0; i < nit; i++) {
		flyk_cp_wait<S - 2>();
		issue(i + S - 1);
		flyk_cp_commit();
		const uint4 *st = mine + (size_t)(i % S) * SLOTS * 32;
		uint4 bv[1][RT][2], av[1][MT];
#pragma unroll
		for (int r = 0; r < RT; r++)
#pragma unroll
			for (int h = 0; h < 2; h++)
				bv[0][r][h] = st[(2 * r + h) * 32];
#pragma unroll
		for (int q = 0; q < MT; q++)
			av[0][q] = st[(2 * RT + q) * 32];
		gemm_skinny_mma<DT, RT, MT, 1>(acc, bv, av);
	}
	flyk_cp_wait<0>();
	__syncthreads();
	gemm_skinny_store<DT, RT, MT, W>(x, acc, (float *)ring, n0, m0);
}

typedef int (*gemm_skinny_go_fn)(dim3 grid, hipStream_t s,
				 const gemm_skinny_args &x);

template <int DT, int RT, int MT, int W, int S>
static int gemm_skinny_go(dim3 grid, hipStream_t s, const gemm_skinny_args &x)
{
	if constexpr (S == 0) {
		FLYK_GO(grid, W * 32, 0, s, gemm_skinny_kernel<DT, RT, MT, W>)(x);
	} else {
		size_t smem = gemm_skinny_smem(RT, MT, W, S);
		if (flyk_smem_optin<gemm_skinny_cp_kernel<DT, RT, MT, W, S>>(
			(int)smem))
			return -ENOSPC;
		FLYK_GO(grid, W * 32, smem, s,
			gemm_skinny_cp_kernel<DT, RT, MT, W, S>)(x);
	}
	return 0;
}

struct gemm_skinny_ent {
	int rt, mt, w;
	/* [e4m3, bf16, e4m3 as f16][stages 0, 4] */
	gemm_skinny_go_fn go[3][GEMM_SKINNY_NSTAGES];
};

#define GEMM_SKINNY_GO2(DT, RT, MT, W)                                         \
	{gemm_skinny_go<DT, RT, MT, W, 0>, gemm_skinny_go<DT, RT, MT, W, 4>}
#define GEMM_SKINNY_ENT(RT, MT, W)                                             \
	{RT,                                                                   \
	 MT,                                                                   \
	 W,                                                                    \
	 {GEMM_SKINNY_GO2(GEMM_SKINNY_E4M3, RT, MT, W),                        \
	  GEMM_SKINNY_GO2(GEMM_SKINNY_BF16, RT, MT, W),                        \
	  GEMM_SKINNY_GO2(GEMM_SKINNY_E4M3_F16, RT, MT, W)}},
static const gemm_skinny_ent gemm_skinny_ents[] = {
    GEMM_SKINNY_CFGS(GEMM_SKINNY_ENT)};

static inline const gemm_skinny_ent *gemm_skinny_find(const int64_t *pr)
{
	if (pr[0] % 16 || pr[1] % 8)
		return NULL;
	for (size_t i = 0;
	     i < sizeof(gemm_skinny_ents) / sizeof(gemm_skinny_ents[0]); i++)
		if (gemm_skinny_ents[i].rt == pr[0] / 16 &&
		    gemm_skinny_ents[i].mt == pr[1] / 8 &&
		    gemm_skinny_ents[i].w == pr[2])
			return &gemm_skinny_ents[i];
	return NULL;
}

#endif

/* Host: whether point @p pr (rows, mrows, warps, stages) may run an M x N
 * problem of format @p dt on @p dev: a built config; M's bucket <= 128,
 * and the fewest A rows a block that cover it (64 with grid.x 2 on
 * 65..128: a larger tile is padding, a smaller one reads B again); a
 * block of B rows no wider than half of N, at most 65535 of them (grid.y:
 * N <= ~1M); the ring within the device's shared memory.  0, -EINVAL,
 * or -ENOSPC (not this device). */
static inline int gemm_skinny_feasible(const struct flyk_device *dev, int dt,
				       int64_t m, int64_t n, const int64_t *pr)
{
#if !FLYK_HAS_MMA
	(void)dev;
	(void)dt;
	(void)m;
	(void)n;
	(void)pr;
	return -ENOSPC;
#else
	int cc = dev->cc_major * 10 + dev->cc_minor;
	if (cc < (dt == GEMM_SKINNY_E4M3 ? 89 : 80))
		return -ENOSPC;
	int si = gemm_skinny_stage_index(pr[3]);
	if (!gemm_skinny_find(pr) || si < 0)
		return -EINVAL;
	if (gemm_skinny_smem((int)(pr[0] / 16), (int)(pr[1] / 8), (int)pr[2],
			     (int)pr[3]) > dev->smem_per_block_optin)
		return -ENOSPC;
	int64_t mb = flyk_gemm_bucket_m(m);
	if (mb > 128)
		return -EINVAL;
	int64_t want = mb < 16 ? 16 : mb > 64 ? 64 : mb;
	if (pr[1] != want || (pr[0] > 16 && pr[0] / 2 >= n))
		return -EINVAL;
	return (n + pr[0] - 1) / pr[0] > 65535 ? -EINVAL : 0;
#endif
}

/* Host: launch point @p pr (feasible) on @p x (x->vec set here). */
static inline int gemm_skinny_launch(int dt, const int64_t *pr,
				     gemm_skinny_args *x, void *stream)
{
#if !FLYK_HAS_MMA
	(void)dt;
	(void)pr;
	(void)x;
	(void)stream;
	return -EOPNOTSUPP;
#else
	const gemm_skinny_ent *e = gemm_skinny_find(pr);
	int si = gemm_skinny_stage_index(pr[3]);
	if (!e || si < 0)
		return -EINVAL;
	x->vec = x->kb % 16 == 0 &&
		 (((uintptr_t)x->a | (uintptr_t)x->b) & 15) == 0;
	if (!x->vec)
		si = 0; /* the ring takes 16-byte vectors only */
	/* the A row tiles of one block of B rows run side by side (grid.x):
	 * on M 65..128 the second reads B from L2, not HBM */
	dim3 grid((unsigned)((x->m + pr[1] - 1) / pr[1]),
		  (unsigned)((x->n + pr[0] - 1) / pr[0]));
	int rc = e->go[dt][si](grid, (hipStream_t)stream, *x);
	if (rc)
		return rc;
	hipError_t err = hipGetLastError();
	return err == hipSuccess ? 0 : err == hipErrorInvalidValue ? -EINVAL
								 : -EIO;
#endif
}

#endif /* FLYK_GEMM_SKINNY_H */
