/*
 * mqa/mqa_logits.hip -- FP8 MQA logits on the GPU (the DeepSeek lightning
 * indexer):
 *   logits[i, j] = sum_h w[i, h] * relu(q[i, h, :] . kv[j, :]) * kv_scale[j]
 * for ks[i] <= j < ke[i] (clamped to [0, skv)); with FLY_F_CLEAN every
 * other position of row i is -inf, without it those positions are not
 * written.  Dims sq, skv, h, d; q [sq, h, d] and kv [skv, d] e4m3 bytes
 * (dtype fp8_e4m3: fn; fp8_e4m3fnuz: both fnuz; FLY_F_KV_FNUZ: q fn, kv
 * fnuz), kv_scale [skv] and w [sq, h] fp32, logits [sq, ld] fp32.
 * relu is torch's (mqa_relu): a NaN score, from a NaN fp8 code, makes
 * the position NaN in every variant.
 *
 * Owns: the mqa_logits variants and flyk_gpu_mqa_logits_op.  Thread:
 * tables are immutable; launches are asynchronous on the caller's stream.
 *
 * Variants (params in their stable order):
 *   mqa_ref    one thread per (i, j), every byte decoded, fp32 sums: the
 *              reference (any format, any h and d).
 *   mqa_simt   portable (AMD's path and every format): a block owns one
 *              query row and `threads` KV columns; the row's q is decoded
 *              once into shared memory, each thread decodes its KV row 16
 *              bytes at a time and keeps 16 heads' dots in registers.
 *              Blocks outside the row's window only write -inf (CLEAN) or
 *              return.  Needs d % 16 == 0 and h * d <= 12288.
 *   mqa_wgmma  (NVIDIA sm_90a, e4m3fn, d = 128, h = 64) Hopper fp8 wgmma:
 *              KV rows on the MMA's M (64 per tile), the block's `rows`
 *              query rows x 64 heads on N (64, 128 or 256; 136 with
 *              lin), so the head reduction is in registers, then one
 *              reduce-scatter over the lane quad after which every lane
 *              stores its own query row's sums (mqa_epilogue).  q and
 *              the weights are loaded once per block (the weights into
 *              registers where they fit, 4 blocks an SM); with `lin`
 *              1 (2 rows, pipe 0, the TMA ring) the block appends q . w
 *              of each row as 4 e4m3 parts to N (136) and sums w |x|
 *              plus those (mqa_lin_parts: one FFMA an accumulator, where
 *              relu took an FADD more); `lin` 2 is that form in blocks of
 *              two warpgroups (4 query rows) that share one KV ring, each
 *              slot freed by an mbarrier once both have read it, so one
 *              warpgroup's epilogue runs under the other's wgmma and each
 *              KV tile is read from L2 once for 4 rows; KV tiles stream
 *              through a `stages`-deep cp.async ring of 128B-swizzled
 *              tiles.  The grid is (KV chunks, query blocks), heaviest
 *              causal blocks first; KV tiles outside every window of the
 *              block are skipped, and `split` (target blocks per SM) sets
 *              how finely KV is chunked for block-starved shapes (few
 *              query rows, long context: FlyDSL's grid.y split).
 *              `pipe` 1 keeps the next tile's wgmma in flight during a
 *              tile's epilogue (two accumulator sets); `tma` 1 fills the
 *              ring with one thread's TMA copies on per-slot mbarriers
 *              instead of every thread's cp.async.  Launched with
 *              programmatic dependent launch (prim/launch.h; FLYK_PDL=0:
 *              without), q and the weights copied while the block reads
 *              its rows' windows, each tile's kv_scale read before its
 *              wgmma is waited for.
 *   mqa_mfma   (AMD gfx940-942, every format: fn, fnuz, q fn with kv
 *              fnuz) the fnuz fp8 MFMA: heads x KV rows per MFMA tile,
 *              fn operands re-encoded to fnuz of half the value in LDS
 *              staging and the sum scaled back after the relu (below,
 *              "mfma").  Params waves (32 KV rows each), rows (query rows
 *              a block).  Needs d % 16 == 0.
 * e4m3fnuz inputs go to mqa_simt/mqa_ref on NVIDIA (the wgmma takes fn
 * only; fnuz 0x7f = 240 has no fn encoding at twice the value).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_int.h"
#include "prim/cp_async.h"
#include "prim/flyk_gpu.h"
#include "prim/launch.h"
#include "prim/mfma.h"
#include "prim/rand.h"
#include "prim/tma.h"
#include "prim/wgmma.h"

/* The KV tensor map parameter of the wgmma kernel (a dummy where there is
 * no TMA, so the kernel keeps one signature). */
#if FLYK_HAS_TMA
typedef CUtensorMap mqa_map_t;
#define MQA_GRID_CONST __grid_constant__
#else
struct mqa_map_t {
	uint64_t unused;
};
#define MQA_GRID_CONST
#endif

/* mqa_wgmma's launchers are built where wgmma and TMA both are: an sm_90a
 * build, where the two macros agree.  The emulator's NVIDIA model has
 * wgmma but no TMA (its `tma` 1 ring), so there mqa_wgmma is infeasible
 * and the other variants run (tests/gpu/emu/emu_tally.h lists it). */
#define MQA_HAS_WGMMA (FLYK_HAS_WGMMA && FLYK_HAS_TMA)

#define MQA_DTYPES ((1u << FLY_DT_FP8_E4M3) | (1u << FLY_DT_FP8_E4M3FNUZ))
#define MQA_FLAGS (FLY_F_CLEAN | FLY_F_KV_FNUZ)

/* ------------------------------------------------------------ helpers */

/* One e4m3 byte as fp32 (fn: bias 7, 0x7f/0xff NaN; fnuz: bias 8, 0x80
 * NaN).  Exact. */
__device__ __forceinline__ float mqa_fp8(uint32_t b, bool fnuz)
{
	uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
	bool nan = fnuz ? b == 0x80u : (b & 0x7fu) == 0x7fu;
	float v = e ? __uint_as_float(((e + 127u - (fnuz ? 8u : 7u)) << 23) |
				      (m << 20))
		    : (float)m * (fnuz ? 0.0009765625f : 0.001953125f);
	v = (b & 0x80u) ? -v : v;
	return nan ? __uint_as_float(0x7fc00000u) : v;
}

/* relu as torch's: a NaN score (from a NaN fp8 code only) stays NaN,
 * where fmaxf would drop it -- every variant alike, mqa_wgmma's x + |x|
 * and its lin form's |x| included, so the tuned variant cannot change
 * what a NaN input gives. */
__device__ __forceinline__ float mqa_relu(float x)
{
	return x > 0.f || x != x ? x : 0.f;
}

struct mqa_dims {
	int64_t sq, skv, h, d, ld;
	bool qfnuz, kvfnuz, clean;
};

static int mqa_dims_of(const struct fly_problem *p,
		       const struct flyk_mqa_logits_args *a,
		       struct mqa_dims *m)
{
	m->sq = p->dims[0];
	m->skv = p->dims[1];
	m->h = p->dims[2];
	m->d = p->dims[3];
	m->ld = a && a->ld ? a->ld : m->skv;
	m->qfnuz = p->dtype == FLY_DT_FP8_E4M3FNUZ;
	m->kvfnuz = m->qfnuz || (p->flags & FLY_F_KV_FNUZ);
	m->clean = (p->flags & FLY_F_CLEAN) != 0;
	return 0;
}

static int mqa_problem_ok(const struct fly_problem *p)
{
	if (p->op != FLY_OP_MQA_LOGITS || !(MQA_DTYPES & (1u << p->dtype)))
		return -EINVAL;
	if (p->flags & ~MQA_FLAGS)
		return -EINVAL;
	if ((p->flags & FLY_F_KV_FNUZ) && p->dtype == FLY_DT_FP8_E4M3FNUZ)
		return -EINVAL;
	for (int i = 0; i < 4; i++)
		if (p->dims[i] < 1)
			return -EINVAL;
	/* grid.y and int32 windows */
	if (p->dims[0] > 0x7fffffff || p->dims[1] > 0x7fffffff)
		return -EINVAL;
	return 0;
}

/* The window [s, e) clamped to [0, skv) (empty: lo == hi). */
__device__ __forceinline__ void mqa_clamp(int64_t s, int64_t e, int64_t skv,
					  int64_t *lo, int64_t *hi)
{
	*lo = s < 0 ? 0 : (s > skv ? skv : s);
	*hi = e > skv ? skv : (e < *lo ? *lo : e);
}

/* Row i's window clamped to [0, skv). */
__device__ __forceinline__ void mqa_window(const int32_t *ks,
					   const int32_t *ke, int64_t i,
					   int64_t skv, int64_t *lo,
					   int64_t *hi)
{
	mqa_clamp(ks[i], ke[i], skv, lo, hi);
}

/* ------------------------------------------------------------ reference */

/* Heads a reference thread sums at once (registers), each over one
 * decode of the KV row's k-th element. */
#define MQA_REF_HG 16

/*
 * The reference: one thread per output (row i, column j), fp32 sums in
 * the order of the definition -- per head over k = 0..d-1, then
 * relu(dot) * w over the heads in order -- so the result does not depend
 * on how the loops below are blocked.  The block's query row is decoded
 * once into shared memory when @p q_smem (h * d floats fit), and each
 * KV element is decoded once per MQA_REF_HG heads: the per-element fp8
 * decodes and byte loads made a case's reference of 128 rows x 131072
 * columns take 0.55 s on the H200.  Row blockIdx.y of @p out (stride
 * @p ldo) is query row rows[blockIdx.y] (rows NULL: row blockIdx.y).
 */
__global__ void mqa_ref_kernel(const uint8_t *q, const uint8_t *kv,
			       const float *sc, const float *w,
			       const int32_t *ks, const int32_t *ke,
			       const int32_t *rows, float *out, int64_t ldo,
			       struct mqa_dims m, int q_smem)
{
	FLYK_DYN_SMEM(float, qs);
	int64_t i = rows ? rows[blockIdx.y] : (int64_t)blockIdx.y;
	const uint8_t *qi = q + i * m.h * m.d;
	if (q_smem) {
		for (int64_t x = threadIdx.x; x < m.h * m.d; x += blockDim.x)
			qs[x] = mqa_fp8(qi[x], m.qfnuz);
		__syncthreads();
	}
	int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= m.skv)
		return;
	int64_t lo, hi;
	mqa_window(ks, ke, i, m.skv, &lo, &hi);
	float *o = out + (int64_t)blockIdx.y * ldo + j;
	if (j < lo || j >= hi) {
		if (m.clean)
			*o = -INFINITY;
		return;
	}
	const uint8_t *kr = kv + j * m.d;
	float acc = 0.f;
	for (int64_t h0 = 0; h0 < m.h; h0 += MQA_REF_HG) {
		float dot[MQA_REF_HG];
#pragma unroll
		for (int g = 0; g < MQA_REF_HG; g++)
			dot[g] = 0.f;
		for (int64_t k = 0; k < m.d; k++) {
			float kvv = mqa_fp8(kr[k], m.kvfnuz);
#pragma unroll
			for (int g = 0; g < MQA_REF_HG; g++) {
				int64_t h = h0 + g;
				if (h >= m.h)
					break;
				float qv = q_smem ? qs[h * m.d + k]
						  : mqa_fp8(qi[h * m.d + k],
							    m.qfnuz);
				dot[g] += qv * kvv;
			}
		}
#pragma unroll
		for (int g = 0; g < MQA_REF_HG; g++)
			if (h0 + g < m.h)
				acc += mqa_relu(dot[g]) * w[i * m.h + h0 + g];
	}
	*o = acc * sc[j];
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	if (mqa_problem_ok(p) < 0 || p->dims[0] > 65535)
		return -EINVAL;
	return 0;
}

/* The reference of @p nrows query rows (@p rows, or the first nrows
 * when NULL) into @p out, row k at out + k * ldo. */
static int ref_go(const struct fly_problem *p,
		  const struct flyk_mqa_logits_args *a, const int32_t *rows,
		  int64_t nrows, float *out, int64_t ldo, void *stream)
{
	struct mqa_dims m;
	mqa_dims_of(p, a, &m);
	dim3 grid((unsigned)((m.skv + 127) / 128), (unsigned)nrows);
	size_t qb = (size_t)(m.h * m.d) * 4;
	int q_smem = qb <= 48 * 1024;
	FLYK_GO(grid, 128, q_smem ? qb : 0, (hipStream_t)stream,
		mqa_ref_kernel)(
		(const uint8_t *)a->q, (const uint8_t *)a->kv, a->kv_scale,
		a->weights, a->ks, a->ke, rows, out, ldo, m, q_smem);
	return hipGetLastError() == hipSuccess ? 0 : -EIO;
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	const struct flyk_mqa_logits_args *a = &args->mqa_logits;
	return ref_go(p, a, NULL, p->dims[0], a->logits,
		      a->ld ? a->ld : p->dims[1], stream);
}

/* ------------------------------------------------------------ simt */

#define SIMT_HG 16 /* heads per register group */

__global__ void mqa_simt_kernel(const uint8_t *q, const uint8_t *kv,
				const float *sc, const float *w,
				const int32_t *ks, const int32_t *ke,
				float *out, struct mqa_dims m)
{
	FLYK_DYN_SMEM(float, qs);
	int64_t i = blockIdx.y;
	int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t j0 = (int64_t)blockIdx.x * blockDim.x, lo, hi;
	mqa_window(ks, ke, i, m.skv, &lo, &hi);
	float *o = out + i * m.ld + j;
	bool in = j >= lo && j < hi;
	if (j0 >= hi || j0 + blockDim.x <= lo) { /* block-uniform */
		if (m.clean && j < m.skv)
			*o = -INFINITY;
		return;
	}
	int64_t hd = m.h * m.d;
	for (int64_t x = threadIdx.x; x < hd; x += blockDim.x)
		qs[x] = mqa_fp8(q[i * hd + x], m.qfnuz);
	__syncthreads();
	if (!in) {
		if (m.clean && j < m.skv)
			*o = -INFINITY;
		return;
	}
	const uint4 *kr = (const uint4 *)(kv + j * m.d);
	const float *wr = w + i * m.h;
	float acc = 0.f;
	for (int64_t h0 = 0; h0 < m.h; h0 += SIMT_HG) {
		float dot[SIMT_HG];
#pragma unroll
		for (int hh = 0; hh < SIMT_HG; hh++)
			dot[hh] = 0.f;
		for (int64_t c = 0; c < m.d / 16; c++) {
			uint4 v = kr[c];
			uint32_t wd[4] = {v.x, v.y, v.z, v.w};
			float kf[16];
#pragma unroll
			for (int b = 0; b < 16; b++)
				kf[b] = mqa_fp8((wd[b / 4] >> (8 * (b % 4))) &
						       0xffu,
					       m.kvfnuz);
#pragma unroll
			for (int hh = 0; hh < SIMT_HG; hh++) {
				if (h0 + hh >= m.h)
					break;
				const float *qr = qs + (h0 + hh) * m.d + c * 16;
#pragma unroll
				for (int b = 0; b < 16; b++)
					dot[hh] += qr[b] * kf[b];
			}
		}
#pragma unroll
		for (int hh = 0; hh < SIMT_HG; hh++)
			if (h0 + hh < m.h)
				acc += mqa_relu(dot[hh]) * wr[h0 + hh];
	}
	*o = acc * sc[j];
}

static const int64_t simt_threads_vals[] = {64, 128, 256};

static int simt_feasible(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *params)
{
	if (mqa_problem_ok(p) < 0 || p->dims[0] > 65535)
		return -EINVAL;
	if (p->dims[3] % 16 || p->dims[2] * p->dims[3] > 12288)
		return -EINVAL;
	int64_t t = params[0];
	if (t != 64 && t != 128 && t != 256)
		return -EINVAL;
	/* a block twice as small would already cover every column */
	if (t > 64 && t / 2 >= p->dims[1])
		return -EINVAL;
	return 0;
}

static int simt_launch(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *params,
		       const union flyk_args *args, void *stream)
{
	const struct flyk_mqa_logits_args *a = &args->mqa_logits;
	struct mqa_dims m;
	mqa_dims_of(p, a, &m);
	/* 16-byte KV row loads */
	if ((uintptr_t)a->kv % 16)
		return -EINVAL;
	unsigned t = (unsigned)params[0];
	dim3 grid((unsigned)((m.skv + t - 1) / t), (unsigned)m.sq);
	size_t smem = (size_t)(m.h * m.d) * sizeof(float);
	FLYK_GO(grid, t, smem, (hipStream_t)stream, mqa_simt_kernel)(
		(const uint8_t *)a->q, (const uint8_t *)a->kv, a->kv_scale,
		a->weights, a->ks, a->ke, a->logits, m);
	return hipGetLastError() == hipSuccess ? 0 : -EIO;
}

/* ------------------------------------------------------------ wgmma */

#define MQA_H 64   /* heads of the wgmma variant */
#define MQA_D 128  /* head dim: one 128-byte swizzle row per operand row */
#define MQA_BKV 64 /* KV rows per tile: the wgmma's M */

/* Where the linear-part form (`lin` 1 and 2, mqa_lin_parts) is built: 2
 * query rows a warpgroup, one accumulator set, the TMA ring -- the form
 * of every winner of the primary cases on the H100 before it. */
#define MQA_LIN_OK(BQ, PIPE, TMA) ((BQ) == 2 && !(PIPE) && (TMA))

/* Bytes of shared memory a block of `wgs` warpgroups of `rows` query
 * rows each, `st` stages (and `lin`) takes: 1 KiB of alignment slack,
 * then mqa_wg_cfg's regions.  The kernel's launch and wg_feasible both
 * take it from here. */
__host__ __device__ constexpr int mqa_wg_smem(int rows, int st, bool lin,
					      int wgs)
{
	return 1024 + wgs * (rows * MQA_H + (lin ? 8 : 0)) * MQA_D +
	       st * MQA_BKV * MQA_D + wgs * rows * MQA_H * 4 +
	       st * 8 * (wgs > 1 ? 2 : 1) + wgs * (lin ? 64 : 0);
}

/* Shared memory of one block: each warpgroup's q (BQ * 64 rows, then
 * with LIN the 8 rows of the linear parts: B has NB rows), the KV ring,
 * each warpgroup's weights, the ring's barriers (full; with WG 2 also
 * empty), with LIN each warpgroup's parts' scales and rows' maxima. */
template <int BQ, int ST, bool LIN = false, int WG = 1> struct mqa_wg_cfg {
	enum {
		N = BQ * MQA_H,
		NB = N + (LIN ? 8 : 0),
		Q_BYTES = NB * MQA_D, /* a multiple of 1024: the ring aligned */
		KV_BYTES = MQA_BKV * MQA_D,
		W_BYTES = N * 4,
		L_BYTES = LIN ? 64 : 0,
		SMEM = mqa_wg_smem(BQ, ST, LIN, WG),
	};
	static_assert(SMEM == 1024 + WG * Q_BYTES + ST * KV_BYTES +
				      WG * W_BYTES + ST * 8 * (WG > 1 ? 2 : 1) +
				      WG * L_BYTES,
		      "mqa_wg_smem and the regions agree");
};

/* The thread's index in its warpgroup: every helper below works on one
 * warpgroup's rows (a block of `wgs` 2 holds two, sharing the KV ring). */
__device__ __forceinline__ int mqa_tid(void) { return threadIdx.x % 128; }

/* Where the 16-byte chunk @p ch of row @p r lies in a 128B-swizzled
 * tile of 128-byte rows: at chunk ch ^ (r % 8) of the row. */
__device__ __forceinline__ int mqa_sw128(int r, int ch)
{
	return r * MQA_D + ((ch ^ (r & 7)) * 16);
}

/* Copy @p rows rows of 128 bytes from @p g (row stride 128; rows at or
 * past @p valid zero-filled) into the 128B-swizzled tile @p s
 * (mqa_sw128); the warpgroup's threads. */
__device__ __forceinline__ void mqa_load_rows(uint8_t *s, const uint8_t *g,
					      int rows, int64_t valid)
{
	for (int c = mqa_tid(); c < rows * 8; c += 128) {
		int r = c / 8, ch = c % 8;
		bool ok = r < valid;
		const uint8_t *src = ok ? g + (int64_t)r * MQA_D + ch * 16 : g;
		flyk_cp16(s + mqa_sw128(r, ch), src, ok);
	}
}

/* One KV tile's wgmma: D[64 kv rows, N] = kv tile . q^T over d = 128,
 * from the descriptors of the tile (@p dk) and of q (@p dq), taken once a
 * block: a k step 32 bytes on is the descriptor + 2 (its 14-bit address
 * field counts 16 bytes and does not carry below 256 KiB of shared
 * memory), where building each from its address took ~30 uniform
 * instructions a tile in the SASS. */
template <int N>
__device__ __forceinline__ void mqa_mma(float *acc, uint64_t dk, uint64_t dq)
{
	flyk_wg_fence();
	/* the first k step overwrites D: no zeroing of registers that
	 * ptxas would then see touched between wgmma stages */
#pragma unroll
	for (int kk = 0; kk < MQA_D / 32; kk++)
		flyk_wgmma_fp8<N>(acc, dk + kk * 2, dq + kk * 2, kk > 0);
	flyk_wg_commit();
}

/* The descriptor of ring slot @p sl from slot 0's. */
#define MQA_SLOT_DESC(dk0, sl) ((dk0) + (uint64_t)(sl) * (MQA_BKV * MQA_D >> 4))

/* What every block of the wgmma kernel shares: its rows, windows and
 * KV range; [flo, fhi) the columns inside every live row's window. */
template <int BQ> struct mqa_blk {
	int64_t q0, sq, skv, ld, c0, c1, a, nt, flo, fhi;
	int64_t rlo[BQ], rhi[BQ];
	const float *sc;
	float *out;
};

/* The weights of the thread's accumulator columns 8 c + 2 (l % 4) + {0,
 * 1}: in registers, loaded once a block (REG), or read from shared
 * memory each tile (where registers are short: 4 query rows, or two
 * accumulator sets). */
template <int BQ, bool REG> struct mqa_wts;
template <int BQ> struct mqa_wts<BQ, true> {
	static constexpr float OUT = 1.f; /* halved here, once a block */
	float2 v[BQ * 8];
	__device__ __forceinline__ void init(const float *sw)
	{
#pragma unroll
		for (int c = 0; c < BQ * 8; c++) {
			v[c] = *(const float2 *)(sw + 8 * c +
						 2 * (threadIdx.x % 4));
			v[c].x *= 0.5f;
			v[c].y *= 0.5f;
		}
	}
	__device__ __forceinline__ float2 at(int c) const { return v[c]; }
};
template <int BQ> struct mqa_wts<BQ, false> {
	static constexpr float OUT = 0.5f;
	const float *sw;
	__device__ __forceinline__ void init(const float *s) { sw = s; }
	__device__ __forceinline__ float2 at(int c) const
	{
		return *(const float2 *)(sw + 8 * c + 2 * (threadIdx.x % 4));
	}
};
#define MQA_WREG(BQ, PIPE) ((BQ) * ((PIPE) ? 2 : 1) <= 2)

/*
 * The epilogue's lanes.  A thread's accumulators of KV tile it hold rows
 * j0 = 16 wi + l / 4 and j0 + 8 of the tile (warp wi, lane l) and
 * columns 8 c + 2 (l % 4) + {0, 1}, column = query r * 64 + head: the
 * quad of lanes l / 4 holds all 64 heads of the same two KV rows.  Each
 * thread sums its heads of the BQ query rows x 2 KV rows (2 BQ values),
 * then the quad reduce-scatters them (mqa_epilogue): at each of the two
 * butterfly steps a lane keeps half of its values and sends the other
 * half, so every lane ends with whole sums -- its own query row r for the
 * block -- and stores them itself (BQ = 2: one value a lane, 3 shuffles
 * where an all-reduce of each value took 8 and two lanes of four
 * stored).  Value e = 2 r + h after the steps, h the KV row (j0 + 8 h).
 */
#define MQA_LV(BQ) ((BQ) >= 2 ? (BQ) / 2 : 1) /* values a lane stores */

template <int BQ>
__device__ __forceinline__ int mqa_lane_e(int l, int i)
{
	const int b0 = l & 1, b1 = (l >> 1) & 1;
	if (BQ == 1) /* one step halves 2 values; the second sums */
		return b0;
	return i + b1 * (BQ / 2) + b0 * BQ;
}

/* What a lane stores to, fixed for the block: its query row's output
 * row, window and liveness (BQ = 1: lanes 2 and 3 of the quad hold
 * copies of lanes 0 and 1's sums and do not store); and for the tiles
 * [itlo, ithi) that lie inside every live row's window and below skv,
 * @p ob, its first value's column of tile 0 in that row, so such a tile
 * stores at ob + 64 it with no test per column. */
struct mqa_lane {
	float *orow, *ob;
	int rlo, rhi, itlo, ithi; /* columns and tiles fit: skv <= 2^31 - 65 */
	bool live;
};

template <int BQ>
__device__ __forceinline__ mqa_lane mqa_lane_of(const mqa_blk<BQ> &k)
{
	const int l = threadIdx.x % 32;
	const int r = mqa_lane_e<BQ>(l, 0) / 2;
	mqa_lane x;
	x.live = k.q0 + r < k.sq && (BQ != 1 || ((l >> 1) & 1) == 0);
	x.orow = k.out + (k.q0 + r) * k.ld;
	x.ob = x.orow + k.a + (mqa_tid() / 32) * 16 + l / 4 +
	       8 * (mqa_lane_e<BQ>(l, 0) & 1);
	const int64_t lim = k.fhi < k.skv ? k.fhi : k.skv;
	const int64_t lo =
	    k.flo > k.a ? (k.flo - k.a + MQA_BKV - 1) / MQA_BKV : 0;
	const int64_t hi = lim > k.a ? (lim - k.a) / MQA_BKV : 0;
	x.itlo = (int)lo;
	x.ithi = (int)(hi > lo ? hi : lo);
	x.rlo = x.rhi = 0;
#pragma unroll
	for (int q = 0; q < BQ; q++) /* no dynamic index: k stays in registers */
		if (q == r) {
			x.rlo = (int)k.rlo[q];
			x.rhi = (int)k.rhi[q];
		}
	return x;
}

/* kv_scale of each value the lane stores from tile @p it, loaded before
 * the tile's wgmma is waited for: the load's latency runs under the MMA,
 * not between the head sums and the stores.  Nothing may use the value
 * here: a multiply by 0.5 beside the load made each warp wait for it
 * before its wgmma, 11-30% slower (H100). */
template <int BQ>
__device__ __forceinline__ void mqa_scales(const mqa_blk<BQ> &k, int64_t it,
					   float *sc)
{
	const int t = mqa_tid(), l = t % 32;
	const int64_t jb = k.a + it * MQA_BKV + (t / 32) * 16 + l / 4;
#pragma unroll
	for (int i = 0; i < MQA_LV(BQ); i++) {
		const int64_t j = jb + 8 * (mqa_lane_e<BQ>(l, i) & 1);
		sc[i] = j < k.skv ? k.sc[j] : 0.f;
	}
}

/* The epilogue of KV tile @p it from its accumulators: relu, weight, the
 * head sums (every row's at once: 4 BQ independent chains), the quad's
 * reduce-scatter, kv_scale (@p sc: mqa_scales) and the lane's stores
 * under the window.  On the H100 this form took the large primary cases
 * 5-10% faster than one all-reduce a row with two storing lanes: the
 * kernel is bound by the epilogue's instructions, each of which costs
 * about a cycle the tensor cores do not overlap (bench/README.md).
 * Hence relu(x) as x + |x| (one FADD with an operand modifier instead of
 * the ALU pipe's FMNMX; the sums are of 2 relu(x), exact, halved in the
 * weights once a block where they are in registers, else at the store
 * (W::OUT); a NaN score propagates, as mqa_relu has it in every
 * variant), and with @p FAST (the TMA ring's
 * forms: the cp.async ring's have no registers left for it, 8-20 bytes
 * spilled) the tiles [ln.itlo, ln.ithi) store at @p op (ln.ob + 64 it,
 * a running pointer in the loop) with no test per column.  5-8% of the
 * large cases on the H100; the halving in the weights and the running
 * pointer a further 1-4%.  With @p LIN the sums are of w |x| and the
 * parts' columns scaled by @p lsr (mqa_lin_parts) instead: the FADD gone,
 * 4-8% more on the large cases; each lane adds its 2 part columns (row
 * b0's, MQA_LIN_COL) into the sums it keeps at the first step. */
template <int BQ, bool CLEAN, bool FAST, bool LIN, class W>
__device__ __forceinline__ void mqa_epilogue(const float *acc, const W &wt,
					     const float2 *lsr,
					     const mqa_blk<BQ> &k,
					     const mqa_lane &ln, int64_t it,
					     const float *sc, float *op)
{
	const int t = mqa_tid(), wi = t / 32, l = t % 32;
	const int64_t t0 = k.a + it * MQA_BKV;
	const int64_t jb = t0 + wi * 16 + l / 4;
	constexpr int n = 2 * BQ, m = MQA_LV(BQ);
	float v[n];
#pragma unroll
	for (int r = 0; r < BQ; r++) {
		float a0 = 0.f, a1 = 0.f, c0 = 0.f, c1 = 0.f;
#pragma unroll
		for (int c = r * 8; c < r * 8 + 8; c++) {
			float2 wv = wt.at(c);
			if constexpr (LIN) { /* |x| an operand of the FFMA */
				a0 = fmaf(fabsf(acc[4 * c]), wv.x, a0);
				c0 = fmaf(fabsf(acc[4 * c + 1]), wv.y, c0);
				a1 = fmaf(fabsf(acc[4 * c + 2]), wv.x, a1);
				c1 = fmaf(fabsf(acc[4 * c + 3]), wv.y, c1);
			} else {
				a0 = fmaf(acc[4 * c] + fabsf(acc[4 * c]), wv.x,
					  a0);
				c0 = fmaf(acc[4 * c + 1] + fabsf(acc[4 * c + 1]),
					  wv.y, c0);
				a1 = fmaf(acc[4 * c + 2] + fabsf(acc[4 * c + 2]),
					  wv.x, a1);
				c1 = fmaf(acc[4 * c + 3] + fabsf(acc[4 * c + 3]),
					  wv.y, c1);
			}
		}
		v[2 * r] = a0 + c0;
		v[2 * r + 1] = a1 + c1;
	}
	const bool b0 = l & 1, b1 = (l >> 1) & 1;
	float s0[n / 2], s1[m];
#pragma unroll
	for (int i = 0; i < n / 2; i++) {
		float keep = b0 ? v[i + n / 2] : v[i];
		float send = b0 ? v[i] : v[i + n / 2];
		if constexpr (LIN) { /* this lane's 2 parts of row b0, KV i */
			constexpr int g = 4 * BQ * 8;
			keep = fmaf(acc[g + 2 * i], lsr->x, keep);
			keep = fmaf(acc[g + 2 * i + 1], lsr->y, keep);
		}
		s0[i] = keep + FLYK_SHFL_XOR(send, 1);
	}
	if constexpr (n == 2) {
		s1[0] = s0[0] + FLYK_SHFL_XOR(s0[0], 2);
	} else {
#pragma unroll
		for (int i = 0; i < m; i++) {
			float keep = b1 ? s0[i + m] : s0[i];
			float send = b1 ? s0[i] : s0[i + m];
			s1[i] = keep + FLYK_SHFL_XOR(send, 2);
		}
	}
	if (!ln.live)
		return;
	if (FAST && (int)it >= ln.itlo && (int)it < ln.ithi) {
#pragma unroll
		for (int i = 0; i < m; i++)
			op[8 * ((mqa_lane_e<BQ>(l, i) & 1) -
				(mqa_lane_e<BQ>(l, 0) & 1))] =
			    W::OUT * s1[i] * sc[i];
		return;
	}
	/* columns in 32 bits (skv <= 2^31 - 65, wg_feasible): the window
	 * tests were pairs of 64-bit compares, 1-2.5% of the large cases */
	const int skv = (int)k.skv;
#pragma unroll
	for (int i = 0; i < m; i++) {
		const int j = (int)jb + 8 * (mqa_lane_e<BQ>(l, i) & 1);
		if (j >= skv)
			continue;
		if (j >= ln.rlo && j < ln.rhi)
			ln.orow[j] = W::OUT * s1[i] * sc[i];
		else if (CLEAN && j >= (int)k.c0 && j < (int)k.c1)
			ln.orow[j] = -INFINITY;
	}
}

#if FLYK_WGMMA_DEVICE
/* Two e4m3fn bytes (@p b: the first in the low byte) as fp32, exact. */
__device__ __forceinline__ float2 mqa_e4m3x2_f32(uint16_t b)
{
	float lo, hi;
	asm("{\n.reg .b32 h;\n.reg .b16 l, u;\n"
	    "cvt.rn.f16x2.e4m3x2 h, %2;\n"
	    "mov.b32 {l, u}, h;\n"
	    "cvt.f32.f16 %0, l;\n"
	    "cvt.f32.f16 %1, u;\n}"
	    : "=f"(lo), "=f"(hi)
	    : "h"(b));
	return make_float2(lo, hi);
}

/* @p lo and @p hi rounded to e4m3fn (nearest even, saturating), @p lo in
 * the low byte. */
__device__ __forceinline__ uint16_t mqa_f32x2_e4m3(float lo, float hi)
{
	uint16_t b;
	asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
	    : "=h"(b)
	    : "f"(hi), "f"(lo));
	return b;
}
#endif

/*
 * The linear-part split (`lin` 1 and 2).  relu(x) = (|x| + x) / 2, so
 *
 *   sum_h w_h relu(x_h) = (sum_h w_h |x_h| + kv . q') / 2,
 *   q' = sum_h w_h q_h (fp32, d values a query row).
 *
 * The warpgroup computes q' of its 2 rows once (thread: a row, 2 columns,
 * 64 heads; @p sq_, @p sw and @p ls its own) and splits it into 4 e4m3
 * parts, q' ~ sum_p s_p P_p with s_p = s_0 2^(-5 p), s_0 = 2^(E - 7) for
 * the row's largest |q'| in [2^E, 2^(E + 1)): part 0 is below 256 and
 * rounding leaves at most 8 s_p, which is below 256 s_(p + 1), so no
 * part saturates and 4 of them leave at most 2^-19 of the row's largest
 * |q'|.  The parts are B's rows 128 + c,
 * c = MQA_LIN_COL(r, p) (query r), so one m64n136 wgmma gives kv . P_p in
 * the 8 extra columns, and the epilogue sums w |x| (one FFMA with an |x|
 * operand per accumulator, where x + |x| took an FADD more) plus the
 * parts' columns, with @p ls[c] = s_p / 2 (the weights are halved in
 * registers).  Column c goes to lane quad member c / 2 (its 2 columns),
 * so c puts row r's parts on the two members that end the quad's first
 * reduce-scatter step holding row r: each lane adds its 2 columns into
 * the sum it keeps there, 4 FFMAs a tile where a multiply by 0 for the
 * other row's columns took 8.  A row whose q' is not finite (a NaN fp8
 * code, non-finite weights) gets zero parts and NaN scales: its logits
 * are NaN, as the reference's relu(NaN) for a NaN code.  Leaves the
 * parts visible to wgmma and @p ls to every thread.
 */
#define MQA_LIN_COL(r, p) (4 * ((p) >> 1) + 2 * (r) + ((p) & 1))

template <int BQ>
__device__ __forceinline__ void mqa_lin_parts(uint8_t *sq_, const float *sw,
					      float *ls)
{
	static_assert(BQ == 2, "the linear parts' threads: 2 rows x 64 pairs");
#if FLYK_WGMMA_DEVICE
	/* a warp: row r, 64 columns; a lane: 4 columns (d4) of half the
	 * heads (8 k + 4 hh + i: the halves' rows then sit in other bank
	 * chunks of the swizzle), 4 FFMA chains of 32, one 4-byte q read a
	 * head and one 16-byte weights read every 4; then the halves' sums
	 * exchanged, and the lane keeps 2 columns (d) of the 4 */
	const int t = mqa_tid(), r = t >> 6, hh = (t >> 4) & 1;
	const int d4 = 64 * ((t >> 5) & 1) + 4 * (t & 15), d = d4 + 2 * hh;
	float y[4] = {0.f, 0.f, 0.f, 0.f};
	const float4 *sw4 = (const float4 *)(sw + r * MQA_H) + hh;
#pragma unroll 2
	for (int k8 = 0; k8 < MQA_H / 8; k8++) {
		const float4 w4 = sw4[2 * k8];
		const float wv[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int n = r * MQA_H + 8 * k8 + 4 * hh + i;
			const uint32_t b = *(const uint32_t *)(
			    sq_ + mqa_sw128(n, d4 >> 4) + (d4 & 15));
			const float2 f0 = mqa_e4m3x2_f32((uint16_t)b);
			const float2 f1 = mqa_e4m3x2_f32((uint16_t)(b >> 16));
			y[0] = fmaf(wv[i], f0.x, y[0]);
			y[1] = fmaf(wv[i], f0.y, y[1]);
			y[2] = fmaf(wv[i], f1.x, y[2]);
			y[3] = fmaf(wv[i], f1.y, y[3]);
		}
	}
#pragma unroll
	for (int i = 0; i < 4; i++)
		y[i] += FLYK_SHFL_XOR(y[i], 16);
	const int ch = d >> 4, lo = d & 15;
	const float x0 = hh ? y[2] : y[0], x1 = hh ? y[3] : y[1];
	/* the row's largest |q'| as bits (NaN above inf above finite) */
	uint32_t m = max(__float_as_uint(x0) & 0x7fffffffu,
			 __float_as_uint(x1) & 0x7fffffffu);
	m = __reduce_max_sync(0xffffffffu, m);
	uint32_t *wm = (uint32_t *)ls + 8;
	if ((t & 31) == 0)
		wm[t >> 5] = m;
	__syncthreads();
	m = max(wm[2 * r], wm[2 * r + 1]);
	const bool fin = m < 0x7f800000u;
	int e = (int)(m >> 23) - 127;
	e = e < -126 ? -126 : e; /* subnormal or zero */
	float v0 = fin ? ldexpf(x0, 7 - e) : 0.f;
	float v1 = fin ? ldexpf(x1, 7 - e) : 0.f;
#pragma unroll
	for (int p = 0; p < 4; p++) {
		const int c = MQA_LIN_COL(r, p);
		const uint16_t b = mqa_f32x2_e4m3(v0, v1);
		/* mqa_sw128 of row 128 + c, its swizzle c's (128 = 0 mod 8):
		 * written out, ptxas gets the form it was measured in */
		*(uint16_t *)(sq_ + (BQ * MQA_H + c) * MQA_D + lo +
			      ((ch ^ (c & 7)) << 4)) = b;
		const float2 f = mqa_e4m3x2_f32(b);
		v0 = (v0 - f.x) * 32.f;
		v1 = (v1 - f.y) * 32.f;
	}
	if ((t & 63) < 4)
		ls[MQA_LIN_COL(r, t & 63)] =
		    fin ? ldexpf(0.5f, e - 7 - 5 * (t & 63))
			: __uint_as_float(0x7fc00000u);
	flyk_fence_async_smem();
	__syncthreads();
#else
	(void)sq_;
	(void)sw;
	(void)ls;
#endif
}

__device__ __forceinline__ void mqa_load_tile(uint8_t *ring, int st,
					      const uint8_t *kv, int64_t a,
					      int64_t skv, int64_t x,
					      int64_t nt)
{
	if (x < nt)
		mqa_load_rows(ring + (x % st) * (MQA_BKV * MQA_D),
			      kv + (a + x * MQA_BKV) * MQA_D, MQA_BKV,
			      skv - (a + x * MQA_BKV));
	flyk_cp_commit(); /* one group per tile, empty past the end */
}

/* The KV ring of @p ST 8 KiB slots, tile x in slot x % ST, filled by
 * cp.async from every thread (TMA 0: one commit group per tile) or by one
 * thread's TMA copy completing on the slot's mbarrier (TMA 1: the k-th
 * use of a slot completes phase k, parity k & 1). */
template <int ST, bool TMA> struct mqa_ring {
	uint8_t *ring;
	uint64_t *full;
	const mqa_map_t *map;
	const uint8_t *kv;
	int64_t a, skv, nt;

	__device__ __forceinline__ void load(int64_t x) const
	{
		if constexpr (TMA) {
#if FLYK_HAS_TMA
			if (threadIdx.x == 0 && x < nt) {
				int sl = (int)(x % ST);
				flyk_bar_expect(&full[sl], MQA_BKV * MQA_D);
				flyk_tma_2d(ring + sl * (MQA_BKV * MQA_D), map,
					    &full[sl], 0, (int)(a + x * MQA_BKV));
			}
#endif
		} else {
			mqa_load_tile(ring, ST, kv, a, skv, x, nt);
		}
	}

	/* Tile @p x has landed (cp.async: at most @p PEND newer groups
	 * pending) and is visible to wgmma once the block syncs. */
	template <int PEND>
	__device__ __forceinline__ void wait(int64_t x) const
	{
		if constexpr (TMA) {
#if FLYK_HAS_TMA
			flyk_bar_wait(&full[x % ST], (unsigned)((x / ST) & 1));
#endif
		} else {
			flyk_cp_wait<PEND>();
			flyk_fence_async_smem();
		}
	}
};

/* Pipelined step for tile @p it (tile it + 1 exists): make tile it + 1
 * visible, refill the slot tile it - 1 left, issue tile it + 1's wgmma
 * into @p nxt, wait for tile it's (in @p cur), and run its epilogue while
 * it + 1 computes.  The callers keep the control flow plain (a wgmma in
 * flight into the same registers on every path into a step), or ptxas
 * serialises every wgmma. */
template <int BQ, int ST, bool CLEAN, bool TMA, class W>
__device__ __forceinline__ void
mqa_pipe_step(float *cur, float *nxt, const mqa_ring<ST, TMA> &rg,
	      uint64_t dk0, uint64_t dq, const W &wt, const mqa_blk<BQ> &k,
	      const mqa_lane &ln, int64_t it)
{
	typedef mqa_wg_cfg<BQ, ST> C;
	rg.template wait<ST - 3>(it + 1);
	__syncthreads();
	rg.load(it + ST - 1);
	float sc[MQA_LV(BQ)];
	mqa_scales<BQ>(k, it, sc);
	mqa_mma<C::N>(nxt, MQA_SLOT_DESC(dk0, (it + 1) % ST), dq);
	flyk_wg_wait<1>();
	flyk_wg_fence_acc<C::N / 2>(cur);
	mqa_epilogue<BQ, CLEAN, TMA, false>(cur, wt, nullptr, k, ln, it, sc,
					    ln.ob + (int)it * MQA_BKV);
}

/* The last tile: wait for its wgmma, then its epilogue. */
template <int BQ, int ST, bool CLEAN, bool TMA, class W>
__device__ __forceinline__ void mqa_pipe_last(float *cur, const W &wt,
					      const mqa_blk<BQ> &k,
					      const mqa_lane &ln, int64_t it)
{
	float sc[MQA_LV(BQ)];
	mqa_scales<BQ>(k, it, sc);
	flyk_wg_wait<0>();
	flyk_wg_fence_acc<BQ * MQA_H / 2>(cur);
	mqa_epilogue<BQ, CLEAN, TMA, false>(cur, wt, nullptr, k, ln, it, sc,
					    ln.ob + (int)it * MQA_BKV);
}

/*
 * PIPE 0: per tile, wait for it, wgmma, wait, epilogue (the overlap of
 * the tensor cores with the epilogue comes from the other blocks on the
 * SM).  PIPE 1: two accumulator sets, tile it + 1's wgmma runs during
 * tile it's epilogue (fewer blocks per SM: twice the accumulators; needs
 * ST >= 3).  Tried and dropped: the tile's wgmma as one N = 64 group a
 * query row, each row's epilogue once its group was done while the next
 * row's ran (the same accumulators as PIPE 0): 0.53-0.82x of PIPE 0 on
 * the H100 over 7 primary cases (not profiled; each group reads the KV
 * tile again).
 */
/* Blocks an SM must hold: 4 where one accumulator set of <= 2 query rows
 * and the weights fit 128 registers.  Left to ptxas (140 registers), 3
 * blocks an SM: on the H200 four ran 9-10% faster (0.89x -> 0.97-0.98x of
 * the Triton peer on 4096^2, 8192^2, 16384^2 causal and 2048 x 65536);
 * five, with the weights in shared memory (96 registers), 1-8% slower. */
#define MQA_MINB(BQ, PIPE) ((BQ) <= 2 && !(PIPE) ? 4 : 1)
template <int BQ, int ST, bool CLEAN, int PIPE, bool TMA, bool LIN, int WG>
__global__ void __launch_bounds__(128 * WG, MQA_MINB(BQ, PIPE) / WG)
mqa_wgmma_kernel(const uint8_t *q, const uint8_t *kv, const float *sc,
		 const float *w, const int32_t *ks, const int32_t *ke,
		 float *out, int64_t sq, int64_t skv, int64_t ld,
		 int64_t chunk, const MQA_GRID_CONST mqa_map_t kvmap)
{
	static_assert(!LIN || MQA_LIN_OK(BQ, PIPE, TMA),
		      "lin: rows 2, pipe 0, tma");
	static_assert(WG == 1 || (WG == 2 && LIN), "wgs 2: lin only");
	typedef mqa_wg_cfg<BQ, ST, LIN, WG> C;
	FLYK_DYN_SMEM(uint8_t, raw);
	uint8_t *smem = (uint8_t *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
	/* the warpgroup g (WG 2) has its own q rows, weights and parts'
	 * scales; the ring and its barriers are the block's.  g is broadcast
	 * from lane 0 so that the compiler sees it warp-uniform: what derives
	 * from it (q's descriptor, pointers) then sits in uniform registers
	 * (from threadIdx.x directly: 16-44 bytes spilled) */
	const int g = WG > 1 ? FLYK_SHFL((int)(threadIdx.x / 128), 0) : 0;
	uint8_t *ring = smem + WG * C::Q_BYTES;
	uint8_t *sq_ = smem + g * C::Q_BYTES;
	float *sw0 = (float *)(ring + ST * C::KV_BYTES);
	float *sw = sw0 + g * C::N;
	uint64_t *full = (uint64_t *)(sw0 + WG * C::N);
	[[maybe_unused]] uint64_t *empty = full + ST; /* WG 2: a warp arrives */
	float *ls = (float *)(full + (WG > 1 ? 2 : 1) * ST) + g * 16;
	const int t = mqa_tid();
	mqa_blk<BQ> k;
	k.sq = sq;
	k.skv = skv;
	k.ld = ld;
	k.sc = sc;
	k.out = out;
	/* launched with PDL (wg_go): past this point the kernel before on
	 * the stream has completed; a dependent launched early waits for
	 * this one's completion in its own flyk_pdl_wait */
	flyk_pdl_wait();
	flyk_pdl_trigger();

	/* heaviest (latest, under causal windows) query blocks first; the
	 * warpgroup's rows are q0 .. q0 + BQ - 1 */
	const int64_t qb = (int64_t)(gridDim.y - 1 - blockIdx.y) * BQ * WG;
	k.q0 = qb + g * BQ;
	/* the rows' window bounds, then q rows (query r, head h) -> row
	 * r * 64 + h and the weights alike (cp.async group 0): the copies
	 * are issued while the bounds' reads are in flight.  With WG 2 the
	 * other warpgroup's rows widen the block's KV range alone. */
	int32_t rks[BQ], rke[BQ], oks[WG > 1 ? BQ : 1], oke[WG > 1 ? BQ : 1];
#pragma unroll
	for (int r = 0; r < BQ; r++) {
		bool ok = k.q0 + r < sq;
		rks[r] = ok ? ks[k.q0 + r] : 0;
		rke[r] = ok ? ke[k.q0 + r] : 0;
	}
	const int64_t qo = qb + (1 - g) * BQ; /* WG 2: the other's rows */
	if constexpr (WG > 1) {
#pragma unroll
		for (int r = 0; r < BQ; r++) {
			bool ok = qo + r < sq;
			oks[r] = ok ? ks[qo + r] : 0;
			oke[r] = ok ? ke[qo + r] : 0;
		}
	}
	mqa_load_rows(sq_, q + k.q0 * MQA_H * MQA_D, C::N,
		      (sq - k.q0) * MQA_H);
	const bool w16 = ((uintptr_t)w % 16) == 0;
	if (w16)
		for (int x = t; x < C::N / 4; x += 128) {
			bool ok = k.q0 + (4 * x) / MQA_H < sq;
			flyk_cp16(sw + 4 * x, ok ? w + k.q0 * MQA_H + 4 * x : w,
				  ok);
		}
	flyk_cp_commit();
	int64_t lo = skv, hi = 0;
#pragma unroll
	for (int r = 0; r < BQ; r++) {
		k.rlo[r] = k.rhi[r] = 0;
		if (k.q0 + r < sq) {
			mqa_clamp(rks[r], rke[r], skv, &k.rlo[r], &k.rhi[r]);
			if (k.rlo[r] < k.rhi[r]) {
				lo = k.rlo[r] < lo ? k.rlo[r] : lo;
				hi = k.rhi[r] > hi ? k.rhi[r] : hi;
			}
		}
	}
	if constexpr (WG > 1) {
#pragma unroll
		for (int r = 0; r < BQ; r++) {
			int64_t a0 = 0, b0 = 0;
			if (qo + r < sq) {
				mqa_clamp(oks[r], oke[r], skv, &a0, &b0);
				if (a0 < b0) {
					lo = a0 < lo ? a0 : lo;
					hi = b0 > hi ? b0 : hi;
				}
			}
		}
	}
	k.flo = 0;
	k.fhi = skv;
#pragma unroll
	for (int r = 0; r < BQ; r++) {
		if (k.q0 + r < sq) {
			k.flo = k.rlo[r] > k.flo ? k.rlo[r] : k.flo;
			k.fhi = k.rhi[r] < k.fhi ? k.rhi[r] : k.fhi;
		}
	}
	k.c0 = (int64_t)blockIdx.x * chunk;
	k.c1 = k.c0 + chunk < skv ? k.c0 + chunk : skv;
	const bool has = hi > lo && hi > k.c0 && lo < k.c1;
	k.a = has ? ((lo > k.c0 ? lo : k.c0) / MQA_BKV) * MQA_BKV : k.c0;
	const int64_t b = has ? (hi < k.c1 ? hi : k.c1) : k.c0;
	k.nt = (b - k.a + MQA_BKV - 1) / MQA_BKV;
	const int64_t tend = k.a + k.nt * MQA_BKV;

	if (CLEAN) { /* the chunk's columns no tile covers */
		for (int r = 0; r < BQ; r++) {
			if (k.q0 + r >= sq)
				break;
			float *o = out + (k.q0 + r) * ld;
			for (int64_t j = k.c0 + t; j < k.a; j += 128)
				o[j] = -INFINITY;
			for (int64_t j = (tend > k.c0 ? tend : k.c0) + t;
			     j < k.c1; j += 128)
				o[j] = -INFINITY;
		}
	}
	if (k.nt == 0) { /* the block's range: every warpgroup leaves */
		flyk_cp_wait<0>(); /* no copy lands after the block exits */
		return;
	}

	const mqa_ring<ST, TMA> rg = {ring, full, &kvmap, kv, k.a, skv, k.nt};
	if constexpr (TMA) {
#if FLYK_HAS_TMA
		if (threadIdx.x == 0) {
			flyk_tma_prefetch_map(&kvmap);
#pragma unroll
			for (int x = 0; x < ST; x++) {
				flyk_bar_init(&full[x], 1);
				if (WG > 1)
					flyk_bar_init(&empty[x], 4 * WG);
			}
			flyk_bar_init_fence();
		}
#endif
	}
	if (!w16) /* weights off 16-byte alignment: read one at a time */
		for (int x = t; x < C::N; x += 128)
			sw[x] = k.q0 * MQA_H + x < sq * MQA_H
					? w[k.q0 * MQA_H + x]
					: 0.f;
	/* the ring: tiles 0 .. ST - 2 ahead (cp.async: group 1 + x is tile
	 * x, q is group 0) */
#pragma unroll
	for (int x = 0; x < ST - 1; x++)
		rg.load(x);
	if constexpr (TMA) { /* q by cp.async; the barriers initialised */
		flyk_cp_wait<0>();
		flyk_fence_async_smem();
	} else { /* group 0 (q, the weights) landed; ST - 1 tiles may not */
		flyk_cp_wait<ST - 1>();
		flyk_fence_async_smem();
	}
	__syncthreads(); /* the weights are in shared memory */
	mqa_wts<BQ, MQA_WREG(BQ, PIPE)> wt;
	wt.init(sw);
	float2 lsr = make_float2(0.f, 0.f); /* LIN: the lane's 2 parts */
	if constexpr (LIN) {
		static_assert(MQA_WREG(BQ, PIPE), "LIN halves in the weights");
		mqa_lin_parts<BQ>(sq_, sw, ls);
		lsr = make_float2(ls[2 * (t & 3)], ls[2 * (t & 3) + 1]);
	}
	float acc[C::NB / 2];
	const mqa_lane ln = mqa_lane_of<BQ>(k);
	const uint64_t dq = flyk_wg_desc((const uint16_t *)sq_);
	const uint64_t dk0 = flyk_wg_desc((const uint16_t *)ring);
	if constexpr (PIPE) {
		float acc2[C::N / 2];
		rg.template wait<ST - 2>(0);
		__syncthreads();
		mqa_mma<C::N>(acc, dk0, dq);
		/* acc's wgmma is in flight at the top of every iteration */
		int64_t it = 0;
		for (; it + 2 < k.nt; it += 2) {
			mqa_pipe_step<BQ, ST, CLEAN, TMA>(acc, acc2, rg, dk0, dq,
							  wt, k, ln, it);
			mqa_pipe_step<BQ, ST, CLEAN, TMA>(acc2, acc, rg, dk0, dq,
							  wt, k, ln, it + 1);
		}
		if (it + 1 < k.nt) {
			mqa_pipe_step<BQ, ST, CLEAN, TMA>(acc, acc2, rg, dk0, dq,
							  wt, k, ln, it);
			mqa_pipe_last<BQ, ST, CLEAN, TMA>(acc2, wt, k, ln, it + 1);
		} else {
			mqa_pipe_last<BQ, ST, CLEAN, TMA>(acc, wt, k, ln, it);
		}
	} else {
		/* The slot tile it - 1 used is refilled with tile it + ST - 1.
		 * One warpgroup: once the block barrier says every warp is
		 * past that tile's wgmma.  WG 2: no block barrier a tile --
		 * each warp marks its slot consumed once its wgmma is done
		 * (empty, 4 WG arrivals), and thread 0 waits for tile it - 1's
		 * after issuing tile it's wgmma, so a warpgroup runs its
		 * epilogue while the other's wgmma holds the tensor cores. */
		float *op = ln.ob; /* the inside tiles' store, ob + 64 it */
		for (int64_t it = 0; it < k.nt; it++, op += MQA_BKV) {
			rg.template wait<ST - 2>(it);
			if constexpr (WG == 1) {
				__syncthreads();
				rg.load(it + ST - 1);
			}
			float sc[MQA_LV(BQ)];
			mqa_scales<BQ>(k, it, sc);
			mqa_mma<C::NB>(acc, MQA_SLOT_DESC(dk0, it % ST), dq);
#if FLYK_HAS_TMA
			if (WG > 1 && threadIdx.x == 0) {
				if (it >= 1)
					flyk_bar_wait(
					    &empty[(it - 1) % ST],
					    (unsigned)(((it - 1) / ST) & 1));
				rg.load(it + ST - 1);
			}
#endif
			flyk_wg_wait<0>();
			flyk_wg_fence_acc<C::NB / 2>(acc);
#if FLYK_HAS_TMA
			if (WG > 1 && threadIdx.x % 32 == 0)
				flyk_bar_arrive(&empty[it % ST]);
#endif
			mqa_epilogue<BQ, CLEAN, TMA, LIN>(acc, wt, &lsr, k, ln, it,
							  sc, op);
		}
	}
	flyk_cp_wait<0>();
}

/* The likeliest winners first: the budget checks points in this order,
 * and on 8192 x 65536 (11 ms a run) it reached 24 of the 81.  `lin` is
 * the first parameter, so its 18 points (rows 2, pipe 0, tma 1: every
 * stages and split; `lin` 2 first) come before all the others.  On the
 * H100, side by side (bench/mqa_ab.py): `lin` 1 4-8% faster than the
 * same points without it on the large primary cases (c320950), 20%
 * slower on 61 x 1024, where a block has few tiles to pay back its
 * q . w; `lin` 2 a further 4-8% on the large ones. */
static const int64_t wg_lin_vals[] = {2, 1, 0};
static const int64_t wg_rows_vals[] = {2, 1, 4};
static const int64_t wg_stages_vals[] = {2, 3, 4};
static const int64_t wg_split_vals[] = {4, 8, 16};
static const int64_t wg_pipe_vals[] = {0, 1};
static const int64_t wg_tma_vals[] = {1, 0};

static int wg_feasible(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *params)
{
#if MQA_HAS_WGMMA
	if (mqa_problem_ok(p) < 0 || p->dtype != FLY_DT_FP8_E4M3 ||
	    (p->flags & FLY_F_KV_FNUZ))
		return -EINVAL;
	if (p->dims[2] != MQA_H || p->dims[3] != MQA_D)
		return -EINVAL;
	if (dev && (dev->cc_major != 9 || dev->cc_minor != 0))
		return -EINVAL;
	int64_t lin = params[0], rows = params[1], st = params[2];
	int64_t split = params[3], pipe = params[4], tma = params[5];
	if (lin < 0 || lin > 2 || (lin && !MQA_LIN_OK(rows, pipe, tma)))
		return -EINVAL;
	const int64_t wgs = lin == 2 ? 2 : 1, brows = rows * wgs;
	if ((rows != 1 && rows != 2 && rows != 4) || st < 2 || st > 4 ||
	    (split != 4 && split != 8 && split != 16) ||
	    (pipe != 0 && pipe != 1) || (tma != 0 && tma != 1))
		return -EINVAL;
	if (p->dims[1] > 0x7fffffff - MQA_BKV) /* TMA row coordinates */
		return -EINVAL;
	/* two accumulator sets of 4 x 64 columns do not fit in registers;
	 * the pipeline needs a stage besides the two tiles in the MMA */
	if (pipe && (rows > 2 || st < 3))
		return -EINVAL;
	/* a block of 4 query rows where 2 already cover them all */
	if (brows > 1 && brows / 2 >= p->dims[0])
		return -EINVAL;
	if ((p->dims[0] + brows - 1) / brows > 65535)
		return -EINVAL;
	size_t smem =
	    (size_t)mqa_wg_smem((int)rows, (int)st, lin != 0, (int)wgs);
	if (dev && smem > dev->smem_per_block_optin)
		return -ENOSPC;
	return 0;
#else
	return -EINVAL;
#endif
}

#if MQA_HAS_WGMMA
template <int BQ, int ST, bool CLEAN, int PIPE, bool TMA, bool LIN,
	  int WG = 1>
static int wg_go(const struct flyk_mqa_logits_args *a, int64_t sq,
		 int64_t skv, int64_t ld, int64_t split, int sms,
		 hipStream_t s)
{
	mqa_map_t map;
	memset(&map, 0, sizeof(map));
	if (TMA) { /* kv [skv, 128 bytes] as 64 bf16 a row: bytes moved */
		uint64_t dims[2] = {MQA_D / 2, (uint64_t)skv};
		if (flyk_tma_map(&map, a->kv, 2, dims, MQA_BKV))
			return -EINVAL;
	}
	typedef mqa_wg_cfg<BQ, ST, LIN, WG> C;
	if (flyk_smem_optin<
		mqa_wgmma_kernel<BQ, ST, CLEAN, PIPE, TMA, LIN, WG>>(
		(int)C::SMEM))
		return -EIO;
	/* KV chunks: enough blocks for `split` per SM, chunks of >= 2
	 * tiles (>= 64 tiles once the query blocks alone fill the GPU) */
	int64_t nqb = (sq + BQ * WG - 1) / (BQ * WG);
	int64_t nkvb = (skv + MQA_BKV - 1) / MQA_BKV;
	int64_t target = (int64_t)sms * split;
	int64_t minc = nqb < sms ? 2 : 64;
	int64_t nch = (target + nqb - 1) / nqb;
	int64_t cap = (nkvb + minc - 1) / minc;
	nch = nch < cap ? nch : cap;
	nch = nch < 1 ? 1 : nch;
	int64_t cb = (nkvb + nch - 1) / nch;
	nch = (nkvb + cb - 1) / cb;
	dim3 grid((unsigned)nch, (unsigned)nqb);
	/* with PDL: a short call's launch (61 x 1024: 7 us) then overlaps
	 * the tail of the kernel before it where that one lets it (issue
	 * 14: graph replay at 0.91x of the Triton peer there, 055b3cb) */
	return flyk_go_dependent<
	    mqa_wgmma_kernel<BQ, ST, CLEAN, PIPE, TMA, LIN, WG>>(
	    grid, dim3(128 * WG), C::SMEM, s, (const uint8_t *)a->q,
	    (const uint8_t *)a->kv, a->kv_scale, a->weights, a->ks, a->ke,
	    a->logits, sq, skv, ld, cb * MQA_BKV, map);
}

template <int BQ, int ST, int PIPE>
static int wg_go_clean(const struct flyk_mqa_logits_args *a, bool clean,
		       bool tma, int lin, int64_t sq, int64_t skv, int64_t ld,
		       int64_t split, int sms, hipStream_t s)
{
	if constexpr (MQA_LIN_OK(BQ, PIPE, true)) {
		if (lin == 2) /* wg_feasible: with tma */
			return clean ? wg_go<BQ, ST, true, PIPE, true, true, 2>(
					   a, sq, skv, ld, split, sms, s)
				     : wg_go<BQ, ST, false, PIPE, true, true, 2>(
					   a, sq, skv, ld, split, sms, s);
		if (lin)
			return clean ? wg_go<BQ, ST, true, PIPE, true, true>(
					   a, sq, skv, ld, split, sms, s)
				     : wg_go<BQ, ST, false, PIPE, true, true>(
					   a, sq, skv, ld, split, sms, s);
	}
	if (tma)
		return clean ? wg_go<BQ, ST, true, PIPE, true, false>(
				   a, sq, skv, ld, split, sms, s)
			     : wg_go<BQ, ST, false, PIPE, true, false>(
				   a, sq, skv, ld, split, sms, s);
	return clean ? wg_go<BQ, ST, true, PIPE, false, false>(a, sq, skv, ld,
							       split, sms, s)
		     : wg_go<BQ, ST, false, PIPE, false, false>(a, sq, skv, ld,
								split, sms, s);
}
#endif

static int wg_launch(const struct flyk_device *dev,
		     const struct fly_problem *p, const int64_t *params,
		     const union flyk_args *args, void *stream)
{
#if MQA_HAS_WGMMA
	const struct flyk_mqa_logits_args *a = &args->mqa_logits;
	struct mqa_dims m;
	mqa_dims_of(p, a, &m);
	/* 16-byte cp.async sources; the float2 weight reads are in smem */
	if ((uintptr_t)a->q % 16 || (uintptr_t)a->kv % 16)
		return -EINVAL;
	int sms = dev && dev->sms > 0 ? dev->sms : 132;
	hipStream_t s = (hipStream_t)stream;
	int lin = (int)params[0];
	int64_t rows = params[1], st = params[2], split = params[3];
	int64_t pipe = params[4];
	bool tma = params[5] != 0;
	if (lin < 0 || lin > 2 || (lin && !MQA_LIN_OK(rows, pipe, tma)))
		return -EINVAL;
#define MQA_WG_CASE(R, S, P)                                                   \
	if (rows == R && st == S && pipe == P)                                 \
		return wg_go_clean<R, S, P>(a, m.clean, tma, lin, m.sq, m.skv, \
					    m.ld, split, sms, s);
	MQA_WG_CASE(1, 2, 0) MQA_WG_CASE(1, 3, 0) MQA_WG_CASE(1, 4, 0)
	MQA_WG_CASE(2, 2, 0) MQA_WG_CASE(2, 3, 0) MQA_WG_CASE(2, 4, 0)
	MQA_WG_CASE(4, 2, 0) MQA_WG_CASE(4, 3, 0) MQA_WG_CASE(4, 4, 0)
	MQA_WG_CASE(1, 3, 1) MQA_WG_CASE(1, 4, 1)
	MQA_WG_CASE(2, 3, 1) MQA_WG_CASE(2, 4, 1)
#undef MQA_WG_CASE
	return -EINVAL;
#else
	(void)dev;
	(void)p;
	(void)params;
	(void)args;
	(void)stream;
	return -EINVAL;
#endif
}

/* ------------------------------------------------------------ mfma */

/*
 * mqa_mfma (AMD gfx940-942): the fnuz fp8 MFMA of prim/mfma.h
 * (flyk_mfma8<32>, v_mfma_f32_32x32x16_fp8_fp8).  A block owns `rows`
 * query rows and 32 KV rows per wave (`waves` waves); per query row, the
 * scores S[h, j] = q[i, h, :] . kv[j, :] of 32 heads x the wave's 32 KV
 * rows are one MFMA tile (heads on M, KV rows on N, d on K in steps of
 * 16), so relu(S) * w[i, h] is summed over a lane's 16 heads in
 * registers, over the tile's two lane halves by one shuffle, and over the
 * head groups of 32 in the same register.  q's rows (heads padded to 32
 * with zeros) and the KV tile are staged in LDS as fnuz bytes, K-
 * contiguous, rows padded by 8 bytes: fn inputs (dtype fp8_e4m3, and q
 * under FLY_F_KV_FNUZ) are re-encoded on the way in by flyk_mfma8_fn4
 * (half the value, exact over fn's range), and the sum is multiplied back
 * (x 2 per fn operand, after the relu: relu(c x) = c relu(x) for c > 0).
 * Needs d % 16 == 0 and the LDS: (rows * ceil(h / 32) * 32 + 32 waves) x
 * (d + 8) bytes.
 */
static const int64_t mf_waves_vals[] = {1, 2, 4};
static const int64_t mf_rows_vals[] = {1, 4};

#if FLYK_HAS_MFMA
/* 16 bytes at @p p, any alignment. */
__device__ __forceinline__ uint4 mqa_ld16(const uint8_t *p)
{
	if (!((uintptr_t)p & 15))
		return *(const uint4 *)p;
	uint32_t w[4] = {0, 0, 0, 0};
	for (int e = 0; e < 16; e++)
		w[e / 4] |= (uint32_t)p[e] << (8 * (e % 4));
	uint4 v;
	v.x = w[0];
	v.y = w[1];
	v.z = w[2];
	v.w = w[3];
	return v;
}

/* 16 e4m3 bytes of @p p (fnuz, or fn re-encoded) into LDS at @p d, 8-byte
 * aligned; zeros when !@p ok. */
__device__ __forceinline__ void mqa_stage16(uint8_t *d, const uint8_t *p,
					    bool ok, bool fnuz)
{
	uint32_t *o = (uint32_t *)d;
	if (!ok) {
		o[0] = o[1] = o[2] = o[3] = 0;
		return;
	}
	uint4 v = mqa_ld16(p);
	o[0] = fnuz ? v.x : flyk_mfma8_fn4(v.x);
	o[1] = fnuz ? v.y : flyk_mfma8_fn4(v.y);
	o[2] = fnuz ? v.z : flyk_mfma8_fn4(v.z);
	o[3] = fnuz ? v.w : flyk_mfma8_fn4(v.w);
}

/* Under CLEAN, -inf over the block's columns of its rows (a block whose
 * columns are outside every row's window). */
__device__ __forceinline__ void mqa_mf_clean(float *out, struct mqa_dims m,
					     int64_t i0, int rows, int64_t j0,
					     int bn)
{
	if (!m.clean)
		return;
	for (int t = threadIdx.x; t < rows * bn; t += blockDim.x) {
		int64_t i = i0 + t / bn, j = j0 + t % bn;
		if (i < m.sq && j < m.skv)
			out[i * m.ld + j] = -INFINITY;
	}
}

template <int W, int R>
__global__ void __launch_bounds__(W * 64)
    mqa_mfma_kernel(const uint8_t *q, const uint8_t *kv, const float *sc,
		    const float *w, const int32_t *ks, const int32_t *ke,
		    float *out, struct mqa_dims m, int hp, float fold)
{
	typedef flyk_mfma8<32> M;
	FLYK_DYN_SMEM(uint4, mqa_mf_dsmem);
	const int BN = W * 32, LD = (int)m.d + 8, dc = (int)m.d / 16;
	uint8_t *sq = (uint8_t *)mqa_mf_dsmem, *skv = sq + R * hp * LD;
	const int64_t i0 = (int64_t)blockIdx.y * R;
	const int64_t j0 = (int64_t)blockIdx.x * BN;
	bool any = false; /* block-uniform */
	for (int r = 0; r < R && i0 + r < m.sq; r++) {
		int64_t lo, hi;
		mqa_window(ks, ke, i0 + r, m.skv, &lo, &hi);
		any |= j0 < hi && j0 + BN > lo;
	}
	if (!any) {
		mqa_mf_clean(out, m, i0, R, j0, BN);
		return;
	}
	for (int c = threadIdx.x; c < R * hp * dc; c += blockDim.x) {
		int row = c / dc, k = (c % dc) * 16;
		int64_t i = i0 + row / hp, h = row % hp;
		bool ok = i < m.sq && h < m.h;
		mqa_stage16(sq + row * LD + k,
			    ok ? q + (i * m.h + h) * m.d + k : q, ok, m.qfnuz);
	}
	for (int c = threadIdx.x; c < BN * dc; c += blockDim.x) {
		int row = c / dc, k = (c % dc) * 16;
		bool ok = j0 + row < m.skv;
		mqa_stage16(skv + row * LD + k,
			    ok ? kv + (j0 + row) * m.d + k : kv, ok, m.kvfnuz);
	}
	__syncthreads();
	const int l = threadIdx.x % FLYK_WARP, wv = threadIdx.x / FLYK_WARP;
	const uint8_t *pb = skv + (wv * 32 + M::ab_idx(l)) * LD + M::ab_k(l);
	const int64_t j = j0 + wv * 32 + M::d_col(l);
	for (int r = 0; r < R && i0 + r < m.sq; r++) {
		const int64_t i = i0 + r;
		float s = 0.f;
		for (int hg = 0; hg < hp; hg += 32) {
			typename M::acc_t acc;
#pragma unroll
			for (int v = 0; v < M::REGS; v++)
				acc[v] = 0.f;
			const uint8_t *pa =
			    sq + (r * hp + hg + M::ab_idx(l)) * LD + M::ab_k(l);
			for (int k = 0; k < (int)m.d; k += M::K)
				M::run(acc, flyk_mfma8_ld8(pa + k),
				       flyk_mfma8_ld8(pb + k));
#pragma unroll
			for (int v = 0; v < M::REGS; v++) {
				int64_t h = hg + M::d_row(l, v);
				if (h < m.h)
					s += mqa_relu(acc[v]) *
					     w[i * m.h + h];
			}
		}
		s += FLYK_SHFL_XOR(s, 32); /* the other 16 heads of each 32 */
		int64_t lo, hi;
		mqa_window(ks, ke, i, m.skv, &lo, &hi);
		if (l >= 32 || j >= m.skv)
			continue;
		if (j >= lo && j < hi)
			out[i * m.ld + j] = s * fold * sc[j];
		else if (m.clean)
			out[i * m.ld + j] = -INFINITY;
	}
}

/* mqa_mfma_kernel<W, R> over the problem. */
template <int W, int R>
static int mf_go(const struct flyk_mqa_logits_args *a, struct mqa_dims m,
		 int hp, float fold, size_t smem, hipStream_t s)
{
	dim3 grid((unsigned)((m.skv + 32 * W - 1) / (32 * W)),
		  (unsigned)((m.sq + R - 1) / R));
	FLYK_GO(grid, 64 * W, smem, s, mqa_mfma_kernel<W, R>)(
	    (const uint8_t *)a->q, (const uint8_t *)a->kv, a->kv_scale,
	    a->weights, a->ks, a->ke, a->logits, m, hp, fold);
	return hipGetLastError() == hipSuccess ? 0 : -EIO;
}
#endif

#if FLYK_HAS_MFMA
/* The LDS of point (@p waves, @p rows). */
static size_t mf_smem(const struct fly_problem *p, int64_t waves,
		      int64_t rows)
{
	int64_t hp = (p->dims[2] + 31) / 32 * 32;
	return (size_t)(rows * hp + 32 * waves) * (size_t)(p->dims[3] + 8);
}
#endif

static int mf_feasible(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *params)
{
	if (mqa_problem_ok(p) < 0 || p->dims[3] % 16)
		return -EINVAL;
#if !FLYK_HAS_MFMA
	(void)dev;
	(void)params;
	return -EINVAL;
#else
	int64_t wv = params[0], rows = params[1];
	if ((wv != 1 && wv != 2 && wv != 4) || (rows != 1 && rows != 4))
		return -EINVAL;
	if (!flyk_mfma8_arch_ok(dev->arch))
		return -EINVAL;
	/* a block twice as wide (tall) as the problem buys nothing */
	if ((wv > 1 && 16 * wv >= p->dims[1]) || (rows > 1 && p->dims[0] < 2))
		return -EINVAL;
	if (mf_smem(p, wv, rows) > dev->smem_per_block_optin)
		return -ENOSPC;
	return (p->dims[0] + rows - 1) / rows > 65535 ? -EINVAL : 0;
#endif
}

static int mf_launch(const struct flyk_device *dev,
		     const struct fly_problem *p, const int64_t *params,
		     const union flyk_args *args, void *stream)
{
	int rc = mf_feasible(dev, p, params);
	if (rc)
		return rc;
#if !FLYK_HAS_MFMA
	(void)args;
	(void)stream;
	return -EOPNOTSUPP;
#else
	const struct flyk_mqa_logits_args *a = &args->mqa_logits;
	struct mqa_dims m;
	mqa_dims_of(p, a, &m);
	int wv = (int)params[0], rows = (int)params[1];
	int hp = (int)((m.h + 31) / 32 * 32);
	/* fn operands run as fnuz of half their value */
	float fold = (m.qfnuz ? 1.f : 2.f) * (m.kvfnuz ? 1.f : 2.f);
	size_t smem = mf_smem(p, wv, rows);
	hipStream_t s = (hipStream_t)stream;
	if (wv == 1)
		return rows == 4 ? mf_go<1, 4>(a, m, hp, fold, smem, s)
				 : mf_go<1, 1>(a, m, hp, fold, smem, s);
	if (wv == 2)
		return rows == 4 ? mf_go<2, 4>(a, m, hp, fold, smem, s)
				 : mf_go<2, 1>(a, m, hp, fold, smem, s);
	return rows == 4 ? mf_go<4, 4>(a, m, hp, fold, smem, s)
			 : mf_go<4, 1>(a, m, hp, fold, smem, s);
#endif
}

/* ------------------------------------------------------------ table */

#if !FLYK_DEVICE_PASS
static const struct flyk_variant mqa_variants[] = {
	{"mqa_ref", FLY_OP_MQA_LOGITS, MQA_DTYPES, MQA_FLAGS, 1, 0, {},
	 ref_feasible, NULL, ref_launch, NULL},
	{"mqa_wgmma",
	 FLY_OP_MQA_LOGITS,
	 1u << FLY_DT_FP8_E4M3,
	 FLY_F_CLEAN,
	 0,
	 6,
	 {{"lin", FLYK_NV(wg_lin_vals)},
	  {"rows", FLYK_NV(wg_rows_vals)},
	  {"stages", FLYK_NV(wg_stages_vals)},
	  {"split", FLYK_NV(wg_split_vals)},
	  {"pipe", FLYK_NV(wg_pipe_vals)},
	  {"tma", FLYK_NV(wg_tma_vals)}},
	 wg_feasible,
	 NULL,
	 wg_launch,
	 NULL},
	/* 10-100x slower than mqa_wgmma where that runs: checked after it,
	 * within the smaller share of the budget */
	{"mqa_simt",
	 FLY_OP_MQA_LOGITS,
	 MQA_DTYPES,
	 MQA_FLAGS,
	 0,
	 1,
	 {{"threads", FLYK_NV(simt_threads_vals)}},
	 simt_feasible,
	 NULL,
	 simt_launch,
	 "mqa_wgmma"},
	{"mqa_mfma",
	 FLY_OP_MQA_LOGITS,
	 MQA_DTYPES,
	 MQA_FLAGS,
	 0,
	 2,
	 {{"waves", FLYK_NV(mf_waves_vals)},
	  {"rows", FLYK_NV(mf_rows_vals)}},
	 mf_feasible,
	 NULL,
	 mf_launch,
	 NULL},
};
#endif

/* ------------------------------------------------------------ case */

__global__ void mqa_fill_fp8_kernel(uint8_t *b, size_t n, uint64_t seed)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		b[i] = flyk_rand_e4m3(seed, i);
}

/*
 * The tuning case checks every position of the output and the values of
 * MQA_CHECK_ROWS query rows against the reference: every position inside
 * a row's window must be finite (the output is NaN-poisoned: a position
 * not written fails), with CLEAN every other one exactly -inf, and the
 * sampled rows' values agree with the reference.  The reference of every
 * row cost more than the tuning itself on long contexts (8192 x 65536:
 * seconds of fp32 dot products per key, 2 GiB of reference logits).
 */
#define MQA_CHECK_ROWS 128
#define MQA_CHECK_EDGE 32 /* first and last rows always checked */

/* Every position: inside the window finite (bad otherwise) and, in a
 * checked row (slot[i] >= 0: its reference row), compared (max |err|,
 * max |ref|); outside it, under CLEAN, exactly -inf. */
__global__ void mqa_cmp_kernel(const float *got, const float *ref,
			       const int32_t *slot, const int32_t *ks,
			       const int32_t *ke, struct mqa_dims m,
			       unsigned *res)
{
	float err = 0.f, den = 0.f;
	unsigned bad = 0;
	size_t n = (size_t)(m.sq * m.skv);
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < n;
	     x += stride) {
		int64_t i = (int64_t)(x / (size_t)m.skv);
		int64_t j = (int64_t)(x % (size_t)m.skv), lo, hi;
		mqa_window(ks, ke, i, m.skv, &lo, &hi);
		float g = got[i * m.ld + j];
		if (j < lo || j >= hi) {
			if (m.clean && !(isinf(g) && g < 0.f))
				bad++;
			continue;
		}
		if (!isfinite(g)) {
			bad++;
			continue;
		}
		int32_t k = slot[i];
		if (k < 0)
			continue;
		float r = ref[(int64_t)k * m.skv + j];
		err = fmaxf(err, fabsf(g - r));
		den = fmaxf(den, fabsf(r));
	}
	atomicMax(&res[0], __float_as_uint(err));
	atomicMax(&res[1], __float_as_uint(den));
	if (bad)
		atomicAdd(&res[2], bad);
}

struct mqa_state {
	float *d_ref;      /* [nrows, skv]: the checked rows' reference */
	int32_t *d_slot;   /* [sq]: row i's reference row, or -1 */
	unsigned *d_cmp;
};

static int mqa_setup(struct flyk_case *c, uint64_t seed)
{
	const struct fly_problem *p = &c->p;
	if (mqa_problem_ok(p) < 0)
		return -EOPNOTSUPP;
	int64_t sq = p->dims[0], skv = p->dims[1], h = p->dims[2];
	int64_t d = p->dims[3];
	if (sq > 65535)
		return -EOPNOTSUPP;
	struct mqa_state *st = (struct mqa_state *)calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	c->state = st;
	/* the windows (ks, ke) and the check's rows and slots in one
	 * host buffer, uploaded once */
	size_t nwin = (size_t)sq * 2, nh = nwin + MQA_CHECK_ROWS + (size_t)sq;
	int32_t *hb = (int32_t *)malloc(nh * 4);
	if (!hb)
		return -ENOMEM;
	int32_t *rows = hb + nwin, *slot = rows + MQA_CHECK_ROWS;
	int64_t nr = flyk_check_sample(sq, MQA_CHECK_ROWS, MQA_CHECK_EDGE, 7,
				       rows);
	for (int64_t i = 0; i < sq; i++)
		slot[i] = -1;
	for (int64_t k = 0; k < nr; k++)
		slot[rows[k]] = (int32_t)k;
	/* causal windows with a KV prefix, as the CPU backend's case */
	for (int64_t i = 0; i < sq; i++) {
		int64_t e = skv - sq + i + 1;
		hb[i] = 0;
		hb[sq + i] = (int32_t)(e < 0 ? 0 : e);
	}
	size_t nq = (size_t)(sq * h * d), nkv = (size_t)(skv * d);
	size_t nl = (size_t)(sq * skv);
	void *q, *kv, *sc, *w, *ks, *ke, *out, *ref, *cmp;
	if (flyk_gpu_case_alloc(c, nq, 0, &q) < 0 ||
	    flyk_gpu_case_alloc(c, nkv, 0, &kv) < 0 ||
	    flyk_gpu_case_alloc(c, (size_t)skv * 4, 0, &sc) < 0 ||
	    flyk_gpu_case_alloc(c, (size_t)(sq * h) * 4, 0, &w) < 0 ||
	    flyk_gpu_case_alloc(c, nh * 4, 0, &ks) < 0 ||
	    flyk_gpu_case_alloc(c, nl * 4, 1, &out) < 0 ||
	    flyk_gpu_case_alloc(c, (size_t)(nr * skv) * 4, 0, &ref) < 0 ||
	    flyk_gpu_case_alloc(c, 16, 0, &cmp) < 0) {
		free(hb);
		return -ENOMEM;
	}
	ke = (int32_t *)ks + sq;
	st->d_ref = (float *)ref;
	st->d_slot = (int32_t *)ks + nwin + MQA_CHECK_ROWS;
	st->d_cmp = (unsigned *)cmp;
	int rc = flyk_gpu_upload(c->dev, ks, hb, nh * 4);
	free(hb);
	if (rc)
		return rc;
	struct flyk_device *dev = c->dev;
	hipStream_t s = (hipStream_t)dev->stream;
	unsigned blocks = (unsigned)(dev->sms * 8);
	FLYK_GO(blocks, 256, 0, s, mqa_fill_fp8_kernel)((uint8_t *)q, nq, seed);
	FLYK_GO(blocks, 256, 0, s, mqa_fill_fp8_kernel)((uint8_t *)kv, nkv,
							seed + 1);
	if (hipGetLastError() != hipSuccess)
		return -EIO;
	rc = flyk_gpu_fill_random(dev, sc, (size_t)skv, FLY_DT_FP32, 0.1f,
				  1.0f, seed + 2);
	if (!rc)
		rc = flyk_gpu_fill_random(dev, w, (size_t)(sq * h),
					  FLY_DT_FP32, -0.5f, 0.5f, seed + 3);
	if (rc)
		return rc;
	struct flyk_mqa_logits_args *a = &c->args.mqa_logits;
	memset(a, 0, sizeof(*a));
	a->q = q;
	a->kv = kv;
	a->kv_scale = (const float *)sc;
	a->weights = (const float *)w;
	a->ks = (const int32_t *)ks;
	a->ke = (const int32_t *)ke;
	a->logits = (float *)out;
	a->ld = skv;
	if (hipMemsetAsync(ref, 0xff, (size_t)(nr * skv) * 4, s) != hipSuccess)
		return -EIO;
	return ref_go(p, a, (const int32_t *)ks + nwin, nr, (float *)ref, skv,
		      s);
}

static int mqa_check(struct flyk_case *c, double *max_err)
{
	struct mqa_state *st = (struct mqa_state *)c->state;
	const struct flyk_mqa_logits_args *a = &c->args.mqa_logits;
	unsigned h[4] = {0, 0, 0, 0};
	*max_err = 0;
	int rc = flyk_gpu_upload(c->dev, st->d_cmp, h, sizeof(h));
	if (rc)
		return rc;
	struct mqa_dims m;
	mqa_dims_of(&c->p, a, &m);
	FLYK_GO((unsigned)(c->dev->sms * 8), 256, 0,
		(hipStream_t)c->dev->stream, mqa_cmp_kernel)(
		a->logits, st->d_ref, st->d_slot, a->ks, a->ke, m, st->d_cmp);
	if (hipGetLastError() != hipSuccess)
		return -EIO;
	rc = flyk_gpu_download(c->dev, h, st->d_cmp, sizeof(h));
	if (rc)
		return rc;
	float err, den;
	memcpy(&err, &h[0], 4);
	memcpy(&den, &h[1], 4);
	*max_err = h[2] ? INFINITY : err;
	if (h[2])
		return -EDOM;
	return err > 2e-3f * fmaxf(den, 1e-30f) && err > 0.f ? -EDOM : 0;
}

static void mqa_fini(struct flyk_case *c)
{
	free(c->state);
	c->state = NULL;
}

#if !FLYK_DEVICE_PASS
extern "C" const struct flyk_gpu_op flyk_gpu_mqa_logits_op = {
	FLY_OP_MQA_LOGITS, mqa_variants,
	sizeof(mqa_variants) / sizeof(mqa_variants[0]),
	mqa_setup, mqa_check, mqa_fini, NULL,
};
#endif
