/*
 * attn/attention.hip -- attention forward on the GPU (issue 16):
 *   O[b, i, h, :] = softmax_j(scale Q[b, i, h, :] . K[b, j, hk, :])
 *                   V[b, j, hk, :]
 * with hk = h / (hq / hkv) (GQA/MQA), fp32 math, bf16/fp16 in and out.
 * Dims b, sq, skv, hq, hkv, d (d 64, 128 or 256: fly_key.c refuses the
 * rest); tensors [batch, seq, heads, d], d contiguous, the other strides
 * the caller's (struct flyk_attention_args).  FLY_F_CAUSAL: query i sees
 * keys j <= i + skv - sq (bottom-right); a row that sees no key (sq > skv)
 * is written 0 with lse -inf.  lse (when not NULL) is [b, hq, sq] fp32,
 * natural log.
 *
 * Owns: the attention variants and flyk_gpu_attention_op.  Thread: tables
 * are immutable; launches are asynchronous on the caller's stream.
 *
 * Variants (params in their stable order):
 *   attn_ref        portable (AMD too), any dtype and stride: one block of
 *                   128 threads per (16 query rows, head, batch), tiles of
 *                   32 keys (K, V and the scores) in shared memory, online
 *                   softmax with expf, fp32 throughout: the reference.
 *   attn_fa2        (NVIDIA sm_80+, bf16/fp16) FlashAttention-2: one block per
 *                   (block_m query rows, head, batch), block_m / 16 warps of
 *                   16 rows; S = Q K^T and O += P V on mma.sync m16n8k16
 *                   (prim/mma.h: Q and K by ldmatrix, V by ldmatrix.trans,
 *                   P rounded to the dtype in registers), K/V tiles of block_n
 *                   keys through a `stages`-deep cp.async ring of
 *                   XOR-swizzled tiles, online softmax in fp32 with
 *                   flyk_exp2 (one MUFU.EX2) and the scale folded into
 *                   log2(e); causal: key tiles
 *                   past the block's last visible key are never loaded,
 *                   the tiles crossing the diagonal (and the tail past skv)
 *                   are masked; heaviest causal blocks launched first.  Q
 *                   stays in registers for d <= 128 (from shared memory per
 *                   k step at d = 256).  The output is staged through the Q
 *                   tile and stored 16 bytes at a time (d = 256: block_n
 *                   32 only, registers).  Needs 16-byte
 *                   aligned pointers and strides that are multiples of 8.
 *                   On AMD (no FLYK_HAS_MMA) feasible() says -EINVAL
 *                   (attn_mfma is the MFMA kernel there).
 *   attn_fa2_split  the same kernel over a `split`-th of the key tiles
 *                   (decode and short-query / long-KV shapes, where the
 *                   (query block, head, batch) grid leaves SMs idle): each
 *                   split writes its normalised fp32 partial O and its LSE
 *                   to the workspace, then one combine kernel merges them
 *                   (and writes lse).  Needs split * b * hq * sq * (d + 1)
 *                   * 4 bytes of workspace (<= ATTN_WS_BYTES, which the
 *                   case provides; launch says -ENOSPC when the caller's is
 *                   smaller).  Only where the unsplit grid has fewer than
 *                   2 blocks per SM.
 *   attn_wgmma      (reserved, attn_wgmma.h) Hopper TMA + wgmma kernel.
 *   attn_mfma       (AMD gfx90a, gfx940-942, gfx950; bf16, d 64/128;
 *                   attn_mfma.h) FlashAttention-2 on MFMA, wave64: block_m
 *                   / 16 waves of 16 query rows, K/V tiles of block_n keys
 *                   in LDS, S^T = K Q^T and O^T += V^T P^T on
 *                   flyk_mfma<16> (P in registers), online softmax in fp32
 *                   with exp2f; causal tiles skipped / masked as attn_fa2.
 *                   Checked in the emulator's AMD model only.
 *   attn_cudnn      (reserved, kernels/vendor/cudnn_attn.c) cuDNN.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_int.h"
#include "prim/cp_async.h"
#include "prim/flyk_gpu.h"
#include "prim/launch.h"
#include "prim/mem.h"
#include "prim/mma.h"
#include "prim/warp.h"
#include "attn/attn_wgmma.h"
#if FLYK_HAS_CUDNN
#include "cudnn_attn.h"
#endif

#define ATTN_DTYPES ((1u << FLY_DT_FP16) | (1u << FLY_DT_BF16))
#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f
/* The workspace the split variant may assume and the case provides. */
#define ATTN_WS_BYTES ((size_t)32 << 20)

/* ------------------------------------------------------------ helpers */

struct attn_dims {
	int64_t b, sq, skv, hq, hkv, d;
	int64_t qs[3], ks[3], vs[3], os[3]; /* batch, seq, head strides */
	float scale;
	int causal;
};

static void attn_dims_of(const struct fly_problem *p,
			 const struct flyk_attention_args *a,
			 struct attn_dims *m)
{
	m->b = p->dims[0];
	m->sq = p->dims[1];
	m->skv = p->dims[2];
	m->hq = p->dims[3];
	m->hkv = p->dims[4];
	m->d = p->dims[5];
	flyk_attention_strides(m->qs, a ? a->q_stride : NULL, m->sq, m->hq,
			       m->d);
	flyk_attention_strides(m->ks, a ? a->k_stride : NULL, m->skv, m->hkv,
			       m->d);
	flyk_attention_strides(m->vs, a ? a->v_stride : NULL, m->skv, m->hkv,
			       m->d);
	flyk_attention_strides(m->os, a ? a->o_stride : NULL, m->sq, m->hq,
			       m->d);
	m->scale = a ? a->scale : 1.f;
	m->causal = (p->flags & FLY_F_CAUSAL) != 0;
}

static int attn_problem_ok(const struct fly_problem *p)
{
	if (p->op != FLY_OP_ATTENTION || !(ATTN_DTYPES & (1u << p->dtype)))
		return -EINVAL;
	if (p->flags & ~FLY_F_CAUSAL)
		return -EINVAL;
	for (int i = 0; i < 6; i++)
		if (p->dims[i] < 1)
			return -EINVAL;
	int64_t d = p->dims[5];
	if ((d != 64 && d != 128 && d != 256) || p->dims[3] % p->dims[4])
		return -EINVAL;
	/* grid.y heads, grid.z batches (times the split) */
	if (p->dims[3] > 65535 || p->dims[0] > 65535 ||
	    p->dims[1] > 0x7fffffff)
		return -EINVAL;
	return 0;
}

/* ------------------------------------------------------------ reference */

#define REF_T 128 /* threads */
#define REF_R 16  /* query rows a block */
#define REF_N 32  /* keys a tile */
#define REF_KP 2  /* K tile row padding (elements): odd word stride */

/*
 * REF_R query rows of one (head, batch) a block, key tiles of REF_N: the
 * tile's K and V in shared memory (raw 16-bit elements), the scores of
 * the block's rows in shared memory (thread t: key t % 32 of rows t / 32
 * + 4 i), then thread t owns row t / 8 and columns t % 8 + 8 c of the
 * output: online softmax with expf, fp32 sums.  Any d <= 256, any stride.
 */
template <int DT>
__global__ void __launch_bounds__(REF_T)
attn_ref_kernel(const uint16_t *q, const uint16_t *k, const uint16_t *v,
		uint16_t *o, float *lse, struct attn_dims m, const int32_t *rblk)
{
	typedef flyk_elem<DT> E;
	__shared__ uint16_t qs[REF_R][256];
	__shared__ uint16_t ks[REF_N][256 + REF_KP];
	__shared__ uint16_t vs[REF_N][256];
	__shared__ float ss[REF_R][REF_N];
	/* row block blockIdx.x, or the one rblk names */
	const int64_t i0 = (int64_t)(rblk ? rblk[blockIdx.x] : (int)blockIdx.x) *
			   REF_R,
		      h = blockIdx.y;
	const int64_t b = blockIdx.z, hk = h / (m.hq / m.hkv);
	const int tx = threadIdx.x, d = (int)m.d;
	const int orow = tx / 8, oc = tx % 8;
	const int64_t off = m.skv - m.sq;
	for (int x = tx; x < REF_R * d; x += REF_T) {
		int r = x / d, c = x % d;
		qs[r][c] = i0 + r < m.sq ? q[b * m.qs[0] + (i0 + r) * m.qs[1] +
					     h * m.qs[2] + c]
					 : (uint16_t)0;
	}
	/* keys [0, kend) are seen by some row of the block */
	int64_t last = i0 + REF_R - 1 < m.sq ? i0 + REF_R - 1 : m.sq - 1;
	int64_t kend = m.causal ? last + off + 1 : m.skv;
	kend = kend < 0 ? 0 : (kend > m.skv ? m.skv : kend);
	const int64_t myrow = i0 + orow;
	int64_t hi = m.causal ? myrow + off + 1 : m.skv; /* this row's */
	hi = hi < 0 ? 0 : (hi > m.skv ? m.skv : hi);
	float mx = -INFINITY, l = 0.f, acc[256 / 8];
	for (int c = 0; c < 256 / 8; c++)
		acc[c] = 0.f;
	for (int64_t j0 = 0; j0 < kend; j0 += REF_N) {
		__syncthreads(); /* the previous tile is consumed */
		for (int x = tx; x < REF_N * d; x += REF_T) {
			int j = x / d, c = x % d;
			bool in = j0 + j < m.skv;
			ks[j][c] = in ? k[b * m.ks[0] + (j0 + j) * m.ks[1] +
					  hk * m.ks[2] + c]
				      : (uint16_t)0;
			vs[j][c] = in ? v[b * m.vs[0] + (j0 + j) * m.vs[1] +
					  hk * m.vs[2] + c]
				      : (uint16_t)0;
		}
		__syncthreads();
		for (int r = tx / REF_N; r < REF_R; r += REF_T / REF_N) {
			int j = tx % REF_N;
			int64_t rh = m.causal ? i0 + r + off + 1 : m.skv;
			float dot = 0.f;
			for (int c = 0; c < d; c++)
				dot += E::load(qs[r][c]) * E::load(ks[j][c]);
			ss[r][j] = j0 + j < rh && j0 + j < m.skv ? dot * m.scale
								 : -INFINITY;
		}
		__syncthreads();
		if (j0 >= hi)
			continue;
		float cm = mx;
		for (int j = 0; j < REF_N; j++)
			cm = fmaxf(cm, ss[orow][j]);
		float corr = expf(mx - cm); /* key j0 is visible: cm finite */
		l *= corr;
		for (int c = 0; c < 256 / 8; c++)
			acc[c] *= corr;
		for (int j = 0; j < REF_N; j++) {
			float pe = expf(ss[orow][j] - cm); /* 0 where masked */
			l += pe;
			for (int c = 0; c < 256 / 8; c++)
				if (oc + 8 * c < d)
					acc[c] += pe * E::load(vs[j][oc + 8 * c]);
		}
		mx = cm;
	}
	if (myrow >= m.sq)
		return;
	uint16_t *orp = o + b * m.os[0] + myrow * m.os[1] + h * m.os[2];
	for (int c = 0; c < 256 / 8; c++)
		if (oc + 8 * c < d)
			orp[oc + 8 * c] = E::store(l > 0.f ? acc[c] / l : 0.f);
	if (lse && oc == 0)
		lse[(b * m.hq + h) * m.sq + myrow] =
		    l > 0.f ? mx + logf(l) : -INFINITY;
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	(void)dev;
	(void)params;
	return attn_problem_ok(p);
}

/* The reference of the @p nblk row blocks of REF_R query rows that
 * @p rblk lists (NULL: every block), every head and batch. */
static int ref_go(const struct fly_problem *p,
		  const struct flyk_attention_args *a, const int32_t *rblk,
		  int64_t nblk, void *stream)
{
	struct attn_dims m;
	attn_dims_of(p, a, &m);
	dim3 grid((unsigned)nblk, (unsigned)m.hq, (unsigned)m.b);
	hipStream_t s = (hipStream_t)stream;
	const uint16_t *q = (const uint16_t *)a->q, *k = (const uint16_t *)a->k;
	const uint16_t *v = (const uint16_t *)a->v;
	if (p->dtype == FLY_DT_BF16)
		FLYK_GO(grid, REF_T, 0, s, attn_ref_kernel<FLY_DT_BF16>)(
		    q, k, v, (uint16_t *)a->o, a->lse, m, rblk);
	else
		FLYK_GO(grid, REF_T, 0, s, attn_ref_kernel<FLY_DT_FP16>)(
		    q, k, v, (uint16_t *)a->o, a->lse, m, rblk);
	return flyk_launch_err();
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	(void)dev;
	(void)params;
	if (attn_problem_ok(p))
		return -EINVAL;
	return ref_go(p, &args->attention, NULL,
		      (p->dims[1] + REF_R - 1) / REF_R, stream);
}

/* ------------------------------------------------------------ fa2 */

/* What the fa2 kernel and its combine step get (by value). */
struct fa_args {
	const uint16_t *q, *k, *v;
	uint16_t *o;
	float *lse;
	float *ws;   /* split > 1: partial O [split, b, hq, sq, d], then LSE
			[split, b, hq, sq] */
	struct attn_dims m;
	float sl2;   /* scale * log2(e) */
	int split;
};

/* The partials' LSE follow the partial O in the workspace. */
static size_t fa_ws_bytes(const struct fly_problem *p, int64_t split)
{
	return (size_t)split * (size_t)p->dims[0] * (size_t)p->dims[3] *
	       (size_t)p->dims[1] * (size_t)(p->dims[5] + 1) * 4;
}

/* Shared memory of one block: Q (block_m rows), K ring, V ring; bf16. */
template <int D, int BM, int BN, int ST> struct fa_cfg {
	enum {
		NW = BM / 16,
		NT = NW * 32,
		Q_EL = BM * D,
		KV_EL = BN * D,
		SMEM = (Q_EL + 2 * ST * KV_EL) * 2,
		QREG = D <= 128,
		/* 227 KiB of shared memory (sm_90); at d = 256 the O
		 * accumulators (128 registers) leave room for a 32-key tile's
		 * S only: 64 keys spilled 540 bytes a thread (ptxas, sm_90a) */
		OK = SMEM <= 227 * 1024 && !(D == 256 && BN > 32),
	};
};

#if FLYK_HAS_MMA
/* Element offset of 16-byte chunk @p c of row @p r in a tile of rows of
 * D elements: chunk c ^ (r % 8), so the 8 rows an ldmatrix reads at one
 * logical chunk sit in 8 different bank groups. */
template <int D> __device__ __forceinline__ int fa_sw(int r, int c)
{
	return r * D + ((c ^ (r & 7)) << 3);
}

/* cp.async R rows of D elements (row stride @p rs) from @p g into the
 * swizzled tile @p s; rows at or past @p valid are zero-filled. */
template <int D, int R, int NT>
__device__ __forceinline__ void fa_load(uint16_t *s, const uint16_t *g,
					int64_t rs, int64_t valid)
{
	constexpr int CH = D / 8, N = R * CH;
#pragma unroll
	for (int it = 0; it < (N + NT - 1) / NT; it++) {
		int x = it * NT + (int)threadIdx.x;
		if (N % NT == 0 || x < N) {
			int r = x / CH, c = x % CH;
			bool ok = r < valid;
			const uint16_t *src = ok ? g + r * rs + c * 8 : g;
			flyk_cp16(s + fa_sw<D>(r, c), src, ok);
		}
	}
}

/* One (query block, head, batch[, split]) of the FlashAttention-2 loop. */
template <int DT, int D, int BM, int BN, int ST>
__global__ void __launch_bounds__(BM / 16 * 32) attn_fa2_kernel(const fa_args a)
{
	typedef fa_cfg<D, BM, BN, ST> C;
	FLYK_DYN_SMEM(uint4, raw);
	uint16_t *sQ = (uint16_t *)raw;
	uint16_t *sK = sQ + C::Q_EL, *sV = sK + ST * C::KV_EL;
	const struct attn_dims &m = a.m;
	const int w = threadIdx.x / 32, l = threadIdx.x % 32;
	const int g = l / 4, t = l % 4;
	/* heaviest (latest, under causal) query blocks first */
	const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * BM;
	const int64_t h = blockIdx.y;
	int64_t bz = blockIdx.z, sp = 0;
	if (a.split > 1) {
		sp = bz % a.split;
		bz /= a.split;
	}
	const int64_t hk = h / (m.hq / m.hkv), off = m.skv - m.sq;
	int64_t kend = m.skv; /* keys past the block's last visible one */
	if (m.causal) {
		int64_t e = q0 + BM + off;
		kend = e < kend ? (e < 0 ? 0 : e) : kend;
	}
	const int64_t nt_all = (kend + BN - 1) / BN;
	int64_t t0 = 0, t1 = nt_all;
	if (a.split > 1) {
		int64_t ch = (nt_all + a.split - 1) / a.split;
		t0 = sp * ch;
		t1 = t0 + ch < nt_all ? t0 + ch : nt_all;
		t0 = t0 < t1 ? t0 : t1;
	}
	const int64_t nt = t1 - t0;
	const uint16_t *qg = a.q + bz * m.qs[0] + q0 * m.qs[1] + h * m.qs[2];
	const uint16_t *kg = a.k + bz * m.ks[0] + hk * m.ks[2];
	const uint16_t *vg = a.v + bz * m.vs[0] + hk * m.vs[2];

	fa_load<D, BM, C::NT>(sQ, qg, m.qs[1], m.sq - q0);
	flyk_cp_commit();
#pragma unroll
	for (int x = 0; x < ST - 1; x++) {
		if (x < nt) {
			int64_t n0 = (t0 + x) * BN;
			fa_load<D, BN, C::NT>(sK + x * C::KV_EL,
					      kg + n0 * m.ks[1], m.ks[1],
					      m.skv - n0);
			fa_load<D, BN, C::NT>(sV + x * C::KV_EL,
					      vg + n0 * m.vs[1], m.vs[1],
					      m.skv - n0);
		}
		flyk_cp_commit(); /* one group per tile, empty past the end */
	}

	float o[D / 8][4];
#pragma unroll
	for (int j = 0; j < D / 8; j++)
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
	float mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0.f, 0.f};
	uint32_t qf[C::QREG ? D / 16 : 1][4];
	flyk_cp_wait<ST - 1>(); /* Q */
	__syncthreads();
	if constexpr (C::QREG) {
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++)
			flyk_ldm4(qf[kk],
				  sQ + fa_sw<D>(w * 16 + (l % 16), kk * 2 + l / 16));
	}
	const int64_t lim0 = q0 + w * 16 + g + off, lim1 = lim0 + 8;

	for (int64_t x = 0; x < nt; x++) {
		flyk_cp_wait<ST - 2>();
		__syncthreads();
		{ /* refill the slot tile x - 1 left */
			int64_t y = x + ST - 1;
			if (y < nt) {
				int64_t n0 = (t0 + y) * BN;
				int sl = (int)(y % ST);
				fa_load<D, BN, C::NT>(sK + sl * C::KV_EL,
						      kg + n0 * m.ks[1],
						      m.ks[1], m.skv - n0);
				fa_load<D, BN, C::NT>(sV + sl * C::KV_EL,
						      vg + n0 * m.vs[1],
						      m.vs[1], m.skv - n0);
			}
			flyk_cp_commit();
		}
		const uint16_t *ks = sK + (int)(x % ST) * C::KV_EL;
		const uint16_t *vs = sV + (int)(x % ST) * C::KV_EL;

		/* S = Q K^T, 16 rows x BN keys a warp */
		float s[BN / 8][4];
#pragma unroll
		for (int j = 0; j < BN / 8; j++)
			s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			uint32_t af[4];
			if constexpr (C::QREG) {
				af[0] = qf[C::QREG ? kk : 0][0];
				af[1] = qf[C::QREG ? kk : 0][1];
				af[2] = qf[C::QREG ? kk : 0][2];
				af[3] = qf[C::QREG ? kk : 0][3];
			} else {
				flyk_ldm4(af, sQ + fa_sw<D>(w * 16 + (l % 16),
							    kk * 2 + l / 16));
			}
#pragma unroll
			for (int nn = 0; nn < BN / 16; nn++) {
				uint32_t bf[4];
				flyk_ldm4(bf, ks + fa_sw<D>(nn * 16 +
								(l / 16) * 8 +
								(l % 8),
							    kk * 2 +
								(l / 8) % 2));
				flyk_mma16816_dt<DT>(s[2 * nn], af, bf);
				flyk_mma16816_dt<DT>(s[2 * nn + 1], af, bf + 2);
			}
		}

		/* scale into log2 units; mask the diagonal and the tail */
		const int64_t n0 = (t0 + x) * BN;
		const bool mask = n0 + BN > m.skv ||
				  (m.causal && n0 + BN - 1 > q0 + w * 16 + off);
#pragma unroll
		for (int j = 0; j < BN / 8; j++) {
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float sv = s[j][e] * a.sl2;
				if (mask) {
					int64_t col = n0 + 8 * j + 2 * t + (e & 1);
					int64_t lim = e < 2 ? lim0 : lim1;
					if (col >= m.skv || (m.causal && col > lim))
						sv = -INFINITY;
				}
				s[j][e] = sv;
			}
		}

		/* online softmax: rows g (e 0, 1) and g + 8 (e 2, 3) */
		float mx0 = mr[0], mx1 = mr[1];
#pragma unroll
		for (int j = 0; j < BN / 8; j++) {
			mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
			mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
		}
		mx0 = fmaxf(mx0, FLYK_SHFL_XOR(mx0, 1));
		mx1 = fmaxf(mx1, FLYK_SHFL_XOR(mx1, 1));
		mx0 = fmaxf(mx0, FLYK_SHFL_XOR(mx0, 2));
		mx1 = fmaxf(mx1, FLYK_SHFL_XOR(mx1, 2));
		/* a row that has seen no key yet keeps 0 as its base */
		const float b0 = mx0 == -INFINITY ? 0.f : mx0;
		const float b1 = mx1 == -INFINITY ? 0.f : mx1;
		const float c0 = flyk_exp2(mr[0] - b0);
		const float c1 = flyk_exp2(mr[1] - b1);
		mr[0] = mx0;
		mr[1] = mx1;
		lr[0] *= c0;
		lr[1] *= c1;
#pragma unroll
		for (int j = 0; j < D / 8; j++) {
			o[j][0] *= c0;
			o[j][1] *= c0;
			o[j][2] *= c1;
			o[j][3] *= c1;
		}
#pragma unroll
		for (int j = 0; j < BN / 8; j++) {
			s[j][0] = flyk_exp2(s[j][0] - b0);
			s[j][1] = flyk_exp2(s[j][1] - b0);
			s[j][2] = flyk_exp2(s[j][2] - b1);
			s[j][3] = flyk_exp2(s[j][3] - b1);
			lr[0] += s[j][0] + s[j][1];
			lr[1] += s[j][2] + s[j][3];
		}

		/* O += P V: P as the A operand straight from S's registers */
#pragma unroll
		for (int kk = 0; kk < BN / 16; kk++) {
			uint32_t pa[4];
			pa[0] = flyk_pack2<DT>(s[2 * kk][0], s[2 * kk][1]);
			pa[1] = flyk_pack2<DT>(s[2 * kk][2], s[2 * kk][3]);
			pa[2] = flyk_pack2<DT>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
			pa[3] = flyk_pack2<DT>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
			for (int dd = 0; dd < D / 16; dd++) {
				uint32_t bf[4];
				flyk_ldm4t(bf, vs + fa_sw<D>(kk * 16 +
								 ((l / 8) % 2) * 8 +
								 (l % 8),
							     dd * 2 + l / 16));
				flyk_mma16816_dt<DT>(o[2 * dd], pa, bf);
				flyk_mma16816_dt<DT>(o[2 * dd + 1], pa, bf + 2);
			}
		}
	}
	flyk_cp_wait<0>();

	lr[0] += FLYK_SHFL_XOR(lr[0], 1);
	lr[1] += FLYK_SHFL_XOR(lr[1], 1);
	lr[0] += FLYK_SHFL_XOR(lr[0], 2);
	lr[1] += FLYK_SHFL_XOR(lr[1], 2);
	const float i0 = lr[0] > 0.f ? 1.f / lr[0] : 0.f;
	const float i1 = lr[1] > 0.f ? 1.f / lr[1] : 0.f;
	const float e0 = lr[0] > 0.f ? (mr[0] + log2f(lr[0])) * ATTN_LN2
				     : -INFINITY;
	const float e1 = lr[1] > 0.f ? (mr[1] + log2f(lr[1])) * ATTN_LN2
				     : -INFINITY;
	const int64_t r0 = q0 + w * 16 + g, r1 = r0 + 8;

	if (a.split > 1) { /* fp32 partials, normalised, and their LSE */
		const int64_t base = ((sp * m.b + bz) * m.hq + h) * m.sq;
		float *po = a.ws, *pl = a.ws + (size_t)a.split * m.b * m.hq *
						   m.sq * D;
#pragma unroll
		for (int j = 0; j < D / 8; j++) {
			if (r0 < m.sq)
				*(float2 *)(po + (base + r0) * D + 8 * j + 2 * t) =
				    make_float2(o[j][0] * i0, o[j][1] * i0);
			if (r1 < m.sq)
				*(float2 *)(po + (base + r1) * D + 8 * j + 2 * t) =
				    make_float2(o[j][2] * i1, o[j][3] * i1);
		}
		if (t == 0 && r0 < m.sq)
			pl[base + r0] = e0;
		if (t == 0 && r1 < m.sq)
			pl[base + r1] = e1;
		return;
	}

	/* stage the warp's 16 rows in its own rows of the Q tile, then 16-byte
	 * stores (no other warp reads those rows) */
	flyk_syncwarp();
	uint16_t *so = sQ;
#pragma unroll
	for (int j = 0; j < D / 8; j++) {
		*(uint32_t *)(so + fa_sw<D>(w * 16 + g, j) + 2 * t) =
		    flyk_pack2<DT>(o[j][0] * i0, o[j][1] * i0);
		*(uint32_t *)(so + fa_sw<D>(w * 16 + g + 8, j) + 2 * t) =
		    flyk_pack2<DT>(o[j][2] * i1, o[j][3] * i1);
	}
	flyk_syncwarp();
	uint16_t *og = a.o + bz * m.os[0] + h * m.os[2];
#pragma unroll
	for (int x = l; x < 16 * (D / 8); x += 32) {
		int r = x / (D / 8), c = x % (D / 8);
		int64_t row = q0 + w * 16 + r;
		if (row < m.sq)
			*(uint4 *)(og + row * m.os[1] + c * 8) =
			    *(const uint4 *)(so + fa_sw<D>(w * 16 + r, c));
	}
	if (a.lse && t == 0) {
		float *lp = a.lse + (bz * m.hq + h) * m.sq;
		if (r0 < m.sq)
			lp[r0] = e0;
		if (r1 < m.sq)
			lp[r1] = e1;
	}
}

/* Merge the splits of one row: weights exp(lse_s - max), O and lse. */
template <int DT, int D>
__global__ void __launch_bounds__(D) attn_combine_kernel(const fa_args a)
{
	const struct attn_dims &m = a.m;
	const int64_t x = blockIdx.x; /* (b * hq + h) * sq + i */
	const int64_t i = x % m.sq, h = (x / m.sq) % m.hq, b = x / (m.sq * m.hq);
	const size_t rows = (size_t)m.b * m.hq * m.sq;
	const float *pl = a.ws + (size_t)a.split * rows * D;
	float mx = -INFINITY;
	for (int s = 0; s < a.split; s++)
		mx = fmaxf(mx, pl[s * rows + x]);
	float sum = 0.f, acc = 0.f;
	if (mx != -INFINITY) {
		for (int s = 0; s < a.split; s++) {
			float ws = expf(pl[s * rows + x] - mx);
			sum += ws;
			acc += ws * a.ws[(s * rows + x) * D + threadIdx.x];
		}
	}
	a.o[b * m.os[0] + i * m.os[1] + h * m.os[2] + threadIdx.x] =
	    flyk_elem<DT>::store(sum > 0.f ? acc / sum : 0.f);
	if (a.lse && threadIdx.x == 0)
		a.lse[x] = sum > 0.f ? mx + logf(sum) : -INFINITY;
}

template <int DT, int D, int BM, int BN, int ST>
static int fa_go(const fa_args &x, dim3 grid, hipStream_t s)
{
	typedef fa_cfg<D, BM, BN, ST> C;
	if constexpr (!C::OK) {
		return -EINVAL;
	} else {
		if (flyk_smem_optin<attn_fa2_kernel<DT, D, BM, BN, ST>>(C::SMEM))
			return -ENOSPC;
		FLYK_GO(grid, C::NT, C::SMEM, s,
			attn_fa2_kernel<DT, D, BM, BN, ST>)(x);
		int rc = flyk_launch_err();
		if (rc || x.split <= 1)
			return rc;
		unsigned rows = (unsigned)(x.m.b * x.m.hq * x.m.sq);
		FLYK_GO(rows, D, 0, s, attn_combine_kernel<DT, D>)(x);
		return flyk_launch_err();
	}
}

template <int DT, int D>
static int fa_go_d(const fa_args &x, int bm, int bn, int st, dim3 grid,
		   hipStream_t s)
{
#define FA_CASE(BM, BN, ST)                                                    \
	if (bm == BM && bn == BN && st == ST)                                  \
		return fa_go<DT, D, BM, BN, ST>(x, grid, s);
	FA_CASE(64, 32, 2) FA_CASE(64, 64, 2) FA_CASE(64, 128, 2)
	FA_CASE(64, 32, 3) FA_CASE(64, 64, 3) FA_CASE(64, 128, 3)
	FA_CASE(128, 32, 2) FA_CASE(128, 64, 2) FA_CASE(128, 128, 2)
	FA_CASE(128, 32, 3) FA_CASE(128, 64, 3) FA_CASE(128, 128, 3)
#undef FA_CASE
	return -EINVAL;
}
template <int DT>
static int fa_go_dt(const fa_args &x, int64_t d, int bm, int bn, int st,
		    dim3 grid, hipStream_t s)
{
	if (d == 64)
		return fa_go_d<DT, 64>(x, bm, bn, st, grid, s);
	if (d == 128)
		return fa_go_d<DT, 128>(x, bm, bn, st, grid, s);
	return fa_go_d<DT, 256>(x, bm, bn, st, grid, s);
}
#endif /* FLYK_HAS_MMA */

static const int64_t fa_bm_vals[] = {64, 128};
static const int64_t fa_bn_vals[] = {32, 64, 128};
static const int64_t fa_st_vals[] = {2, 3};
static const int64_t fa_split_vals[] = {2, 4, 8, 16};
static const int64_t fa_bm1_vals[] = {64};

/* The point's shape alone (both fa2 variants). */
static int fa_point_ok(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr)
{
#if FLYK_HAS_MMA
	if (attn_problem_ok(p))
		return -EINVAL;
	if (dev && dev->cc_major < 8)
		return -EINVAL;
	int64_t d = p->dims[5], bm = pr[0], bn = pr[1], st = pr[2];
	if ((bm != 64 && bm != 128) || (bn != 32 && bn != 64 && bn != 128) ||
	    (st != 2 && st != 3))
		return -EINVAL;
	if (d == 256 && bn > 32) /* registers (fa_cfg::OK) */
		return -EINVAL;
	/* a 128-row block where 64 rows already cover every query */
	if (bm == 128 && p->dims[1] <= 64)
		return -EINVAL;
	/* a 128-key tile where 64 already cover every key */
	if (bn > 32 && bn / 2 >= p->dims[2])
		return -EINVAL;
	size_t smem = (size_t)(bm * d + 2 * st * bn * d) * 2;
	if (smem > 227 * 1024 ||
	    (dev && dev->smem_per_block_optin &&
	     smem > dev->smem_per_block_optin))
		return -ENOSPC;
	return 0;
#else
	(void)dev;
	(void)p;
	(void)pr;
	return -EINVAL;
#endif
}

static int fa2_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	return fa_point_ok(dev, p, params);
}

/* The unsplit grid's blocks (query blocks x heads x batches). */
static int64_t fa_blocks(const struct fly_problem *p, int64_t bm)
{
	return (p->dims[1] + bm - 1) / bm * p->dims[3] * p->dims[0];
}

static int split_feasible(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *params)
{
	int rc = fa_point_ok(dev, p, params);
	if (rc)
		return rc;
	int64_t split = params[3], bn = params[1];
	if (split != 2 && split != 4 && split != 8 && split != 16)
		return -EINVAL;
	/* only block-starved shapes: the unsplit grid under 2 blocks an SM */
	int sms = dev && dev->sms > 0 ? dev->sms : 132;
	if (fa_blocks(p, params[0]) >= 2 * (int64_t)sms)
		return -EINVAL;
	/* every split gets at least two key tiles */
	if ((p->dims[2] + bn - 1) / bn < 2 * split)
		return -EINVAL;
	if (p->dims[0] * split > 65535)
		return -EINVAL;
	if (fa_ws_bytes(p, split) > ATTN_WS_BYTES)
		return -ENOSPC;
	return 0;
}

static int fa_launch_common(const struct flyk_device *dev,
			    const struct fly_problem *p, const int64_t *pr,
			    int64_t split, const union flyk_args *args,
			    void *stream)
{
#if FLYK_HAS_MMA
	const struct flyk_attention_args *a = &args->attention;
	struct attn_dims m;
	attn_dims_of(p, a, &m);
	/* 16-byte cp.async sources and output stores */
	if ((uintptr_t)a->q % 16 || (uintptr_t)a->k % 16 ||
	    (uintptr_t)a->v % 16 || (uintptr_t)a->o % 16)
		return -EINVAL;
	for (int i = 0; i < 3; i++)
		if (m.qs[i] % 8 || m.ks[i] % 8 || m.vs[i] % 8 || m.os[i] % 8)
			return -EINVAL;
	fa_args x;
	memset(&x, 0, sizeof(x));
	x.q = (const uint16_t *)a->q;
	x.k = (const uint16_t *)a->k;
	x.v = (const uint16_t *)a->v;
	x.o = (uint16_t *)a->o;
	x.lse = a->lse;
	x.m = m;
	x.sl2 = m.scale * ATTN_LOG2E;
	x.split = (int)split;
	if (split > 1) {
		if (!a->workspace || a->workspace_size < fa_ws_bytes(p, split) ||
		    (uintptr_t)a->workspace % 16)
			return -ENOSPC;
		x.ws = (float *)a->workspace;
	}
	int bm = (int)pr[0], bn = (int)pr[1], st = (int)pr[2];
	dim3 grid((unsigned)((m.sq + bm - 1) / bm), (unsigned)m.hq,
		  (unsigned)(m.b * split));
	hipStream_t s = (hipStream_t)stream;
	if (p->dtype == FLY_DT_FP16)
		return fa_go_dt<FLY_DT_FP16>(x, m.d, bm, bn, st, grid, s);
	return fa_go_dt<FLY_DT_BF16>(x, m.d, bm, bn, st, grid, s);
#else
	(void)dev;
	(void)p;
	(void)pr;
	(void)split;
	(void)args;
	(void)stream;
	return -EINVAL;
#endif
}

static int fa2_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	if (fa2_feasible(dev, p, params))
		return -EINVAL;
	return fa_launch_common(dev, p, params, 1, args, stream);
}

static int split_launch(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params,
			const union flyk_args *args, void *stream)
{
	int rc = split_feasible(dev, p, params);
	if (rc)
		return rc == -ENOSPC ? rc : -EINVAL;
	return fa_launch_common(dev, p, params, params[3], args, stream);
}

/* ------------------------------------------------------------ cuDNN */
#if FLYK_HAS_CUDNN && !FLYK_DEVICE_PASS
/* The vendor candidate: cuDNN 9's fused attention through its backend
 * graph (kernels/vendor/cudnn_attn.c), each configuration its heuristics
 * propose a point that replays.  Strides 0 are dense, as for ours. */
static void cudnn_problem(const struct fly_problem *p,
			  const struct flyk_attention_args *a,
			  struct flyk_cudnn_attn_problem *cp)
{
	const int64_t *d = p->dims;
	memset(cp, 0, sizeof(*cp));
	cp->b = d[0];
	cp->sq = d[1];
	cp->skv = d[2];
	cp->hq = d[3];
	cp->hkv = d[4];
	cp->d = d[5];
	const int64_t dq[3] = {d[1] * d[3] * d[5], d[3] * d[5], d[5]};
	const int64_t dk[3] = {d[2] * d[4] * d[5], d[4] * d[5], d[5]};
	for (int i = 0; i < 3; i++) {
		cp->q_stride[i] = a && a->q_stride[i] ? a->q_stride[i] : dq[i];
		cp->k_stride[i] = a && a->k_stride[i] ? a->k_stride[i] : dk[i];
		cp->v_stride[i] = a && a->v_stride[i] ? a->v_stride[i] : dk[i];
		cp->o_stride[i] = a && a->o_stride[i] ? a->o_stride[i] : dq[i];
	}
	cp->causal = (p->flags & FLY_F_CAUSAL) != 0;
	/* the graph with the LSE (the case's checked launch reads it, and
	 * its configurations are the ones listed); a call without one (the
	 * case's timed launches, an engine's inference call) runs per
	 * cudnn_launch */
	cp->lse = 1;
}

/* params[1] bit 40 (cudnn_attn.h leaves bits 40..47 to the caller): a
 * launch without the LSE runs the tuned graph, the LSE in the workspace's
 * tail, instead of the same configuration on the graph without it.  Each
 * configuration is offered both ways: which is faster depends on the
 * graph (measured on the H200 with cuDNN 9.19: without the LSE 1.5%
 * faster on non-causal keys, up to 2.5% slower on a causal 8k key). */
#define ATTN_CUDNN_VIA_LSE ((int64_t)1 << 40)

/* Bytes of the LSE a launch without one keeps in the workspace. */
static size_t cudnn_lse_bytes(const struct fly_problem *p)
{
	return ((size_t)(p->dims[0] * p->dims[3] * p->dims[1]) * 4 + 255) &
	       ~(size_t)255;
}

static int cudnn_feasible(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *pr)
{
	struct flyk_cudnn_attn_problem cp;
	(void)dev;
	if (p->dtype != FLY_DT_BF16)
		return -EINVAL;
	cudnn_problem(p, NULL, &cp);
	int rc = flyk_cudnn_attn_feasible(&cp, pr);
	return rc == -EOPNOTSUPP ? -EINVAL : rc;
}

/* The heuristics' configurations whose workspace fits ATTN_WS_BYTES (what
 * the case and the torch layer give). */
static int cudnn_enumerate(const struct flyk_device *dev,
			   const struct fly_problem *p,
			   int64_t (*out)[FLY_PARAMS_MAX], int max)
{
	struct flyk_cudnn_attn_problem cp;
	int64_t cand[32][FLYK_CUDNN_ATTN_NPARAMS];
	(void)dev;
	if (p->dtype != FLY_DT_BF16)
		return 0;
	cudnn_problem(p, NULL, &cp);
	if (flyk_cudnn_attn_feasible(&cp, NULL))
		return 0;
	int n = flyk_cudnn_attn_enumerate(&cp, cand, 32), k = 0;
	for (int i = 0; i < n && k < max; i++) {
		size_t ws = 0;
		if (flyk_cudnn_attn_workspace(&cp, cand[i], &ws) ||
		    ((ws + 255) & ~(size_t)255) + cudnn_lse_bytes(p) >
			ATTN_WS_BYTES)
			continue;
		memset(out[k], 0, sizeof(out[k]));
		memcpy(out[k], cand[i], sizeof(cand[i]));
		k++;
	}
	/* each once more, its calls without the LSE on the LSE graph */
	for (int i = 0, m = k; i < m && k < max; i++, k++) {
		memcpy(out[k], out[i], sizeof(out[k]));
		out[k][1] |= ATTN_CUDNN_VIA_LSE;
	}
	return n < 0 ? n : k;
}

static int cudnn_launch(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr,
			const union flyk_args *args, void *stream)
{
	struct flyk_cudnn_attn_problem cp;
	struct flyk_cudnn_attn_args ca;
	const struct flyk_attention_args *a = &args->attention;
	(void)dev;
	if (p->dtype != FLY_DT_BF16)
		return -EINVAL;
	cudnn_problem(p, a, &cp);
	memset(&ca, 0, sizeof(ca));
	ca.q = a->q;
	ca.k = a->k;
	ca.v = a->v;
	ca.o = a->o;
	ca.lse = a->lse;
	ca.scale = a->scale;
	ca.workspace = a->workspace;
	ca.workspace_size = a->workspace_size;
	if (!ca.lse) {
		/* no LSE asked: the tuned configuration on the graph without
		 * one, as SDPA's inference call builds it, where it builds
		 * there and its workspace fits, unless the point says
		 * otherwise; else the tuned graph, its LSE in the
		 * workspace's tail */
		struct flyk_cudnn_attn_problem np = cp;
		size_t ws = 0;
		np.lse = 0;
		if (!(pr[1] & ATTN_CUDNN_VIA_LSE) &&
		    !flyk_cudnn_attn_replays(&np, pr, &ws) &&
		    (!ws || (a->workspace && ws <= a->workspace_size)))
			return flyk_cudnn_attn_run(&np, pr, &ca, stream);
		int rc = flyk_cudnn_attn_workspace(&cp, pr, &ws);
		if (rc)
			return rc;
		ws = (ws + 255) & ~(size_t)255;
		if (!a->workspace || ws + cudnn_lse_bytes(p) > a->workspace_size)
			return -ENOSPC;
		ca.lse = (float *)((char *)a->workspace + ws);
		ca.workspace_size = ws;
	}
	return flyk_cudnn_attn_run(&cp, pr, &ca, stream);
}
static const int64_t cudnn_placeholder[] = {-1};
#endif

/* ------------------------------------------------------------ mfma */

#include "attn/attn_mfma.h" /* uses attn_dims, attn_problem_ok */

/* ------------------------------------------------------------ table */

#if !FLYK_DEVICE_PASS
static const struct flyk_variant attn_variants[] = {
    {"attn_ref", FLY_OP_ATTENTION, ATTN_DTYPES, FLY_F_CAUSAL, 1, 0, {},
     ref_feasible, NULL, ref_launch, NULL},
    /* Hopper TMA + wgmma (FA3 manner, attn/attn_wgmma.h): before
     * attn_fa2, as the default is the first feasible variant */
    {"attn_wgmma",
     FLY_OP_ATTENTION,
     1u << FLY_DT_BF16,
     FLY_F_CAUSAL,
     0,
     4,
     {{"block_n", FLYK_NV(attn_wg_block_n)},
      {"stages", FLYK_NV(attn_wg_stages)},
      {"overlap", FLYK_NV(attn_wg_overlap)},
      {"persist", FLYK_NV(attn_wg_persist)}},
     attn_wgmma_feasible,
     NULL,
     attn_wgmma_launch,
     NULL},
    {"attn_fa2",
     FLY_OP_ATTENTION,
     ATTN_DTYPES,
     FLY_F_CAUSAL,
     0,
     3,
     {{"block_m", FLYK_NV(fa_bm_vals)},
      {"block_n", FLYK_NV(fa_bn_vals)},
      {"stages", FLYK_NV(fa_st_vals)}},
     fa2_feasible,
     NULL,
     fa2_launch,
     /* where attn_wgmma runs (sm_90a) it checks these last: on the H200
      * no fa2 point came within 2.6x of the best on the 16 primary
      * keys, and their checks took the budget before attn_cudnn's */
     "attn_wgmma"},
    {"attn_fa2_split",
     FLY_OP_ATTENTION,
     ATTN_DTYPES,
     FLY_F_CAUSAL,
     0,
     4,
     {{"block_m", FLYK_NV(fa_bm1_vals)},
      {"block_n", FLYK_NV(fa_bn_vals)},
      {"stages", FLYK_NV(fa_st_vals)},
      {"split", FLYK_NV(fa_split_vals)}},
     split_feasible,
     NULL,
     split_launch,
     NULL},
    {"attn_mfma",
     FLY_OP_ATTENTION,
     1u << FLY_DT_BF16,
     FLY_F_CAUSAL,
     0,
     2,
     {{"block_m", FLYK_NV(amf_block_m)}, {"block_n", FLYK_NV(amf_block_n)}},
     attn_mfma_feasible,
     NULL,
     attn_mfma_launch,
     NULL},
#if FLYK_HAS_CUDNN
    {"attn_cudnn",
     FLY_OP_ATTENTION,
     1u << FLY_DT_BF16,
     FLY_F_CAUSAL,
     0,
     FLYK_CUDNN_ATTN_NPARAMS,
     {{"engine", FLYK_NV(cudnn_placeholder)},
      {"form", FLYK_NV(cudnn_placeholder)},
      {"knob0", FLYK_NV(cudnn_placeholder)},
      {"knob1", FLYK_NV(cudnn_placeholder)},
      {"knob2", FLYK_NV(cudnn_placeholder)},
      {"knob3", FLYK_NV(cudnn_placeholder)},
      {"knob4", FLYK_NV(cudnn_placeholder)},
      {"knob5", FLYK_NV(cudnn_placeholder)}},
     cudnn_feasible,
     cudnn_enumerate,
     cudnn_launch,
     NULL,
     /* near-ties go to cuDNN: on the H200 the tuner read attn_wgmma
      * 1% under it on b8 s2048 h16 where the bench reads it 7% over */
     1},
#endif
};
#endif

/* ------------------------------------------------------------ case */

/*
 * The tuning case checks every output and the values of ATTN_CHECK_BLKS
 * row blocks (REF_R query rows each, every head and batch) against the
 * reference: O and LSE must not be NaN anywhere (they are NaN-poisoned:
 * a row not written fails), and the sampled rows agree with the
 * reference.  The reference of every row cost up to 1.07 s of a key's
 * setup on the H200 (b32 s8192 h8 causal), more than its candidates'
 * measurements.
 */
#define ATTN_CHECK_BLKS 12
#define ATTN_CHECK_EDGE 2 /* first and last row blocks always checked */

/* O [b, sq, hq, d]: out[0] = max |got - ref| over the checked rows
 * (sel[row]; +inf for a NaN anywhere), out[1] += NaNs anywhere and
 * checked entries off by more than |ref| / 64 + 4e-3. */
template <int DT>
__global__ void attn_o_cmp_kernel(const uint16_t *got, const uint16_t *ref,
				  size_t n, int64_t row_len, int64_t sq,
				  const uint8_t *sel, unsigned *out)
{
	typedef flyk_elem<DT> E;
	float mx = 0.f;
	unsigned bad = 0;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float g = E::load(got[i]);
		if (!(g == g)) {
			bad++;
			mx = INFINITY;
			continue;
		}
		if (!sel[(int64_t)(i / (size_t)row_len) % sq])
			continue;
		float r = E::load(ref[i]), e = fabsf(g - r);
		if (!(e <= fabsf(r) / 64.f + 4e-3f)) {
			bad++;
			e = e == e ? e : INFINITY;
		}
		mx = fmaxf(mx, e);
	}
	atomicMax(&out[0], __float_as_uint(mx));
	if (bad)
		atomicAdd(&out[1], bad);
}

/* LSE [b, hq, sq]: out[0]: max |got - ref| over the checked rows (+inf
 * for a NaN anywhere or a -inf missed); out[1]: NaNs anywhere and checked
 * entries off by more than 1e-3 max(1, |ref|). */
__global__ void attn_lse_cmp_kernel(const float *got, const float *ref,
				    size_t n, int64_t sq, const uint8_t *sel,
				    unsigned *out)
{
	float mx = 0.f;
	unsigned bad = 0;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float g = got[i], r = ref[i], e;
		if (!sel[(int64_t)(i % (size_t)sq)]) {
			if (!(g == g)) {
				bad++;
				mx = INFINITY;
			}
			continue;
		}
		if (isinf(r) && r < 0.f)
			e = isinf(g) && g < 0.f ? 0.f : INFINITY;
		else
			e = fabsf(g - r);
		if (!(e <= 1e-3f * fmaxf(1.f, fabsf(r)))) {
			bad++;
			e = e == e ? e : INFINITY;
		}
		mx = fmaxf(mx, e);
	}
	atomicMax(&out[0], __float_as_uint(mx));
	if (bad)
		atomicAdd(&out[1], bad);
}

struct attn_state {
	void *d_ref_o;
	float *d_ref_lse;
	unsigned *d_cmp;
	uint8_t *d_sel; /* [sq]: the row's values are checked */
	size_t no, nl;
};

static int attn_setup(struct flyk_case *c, uint64_t seed)
{
	const struct fly_problem *p = &c->p;
	if (attn_problem_ok(p))
		return -EOPNOTSUPP;
	struct attn_state *st = (struct attn_state *)calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	c->state = st;
	int64_t b = p->dims[0], sq = p->dims[1], skv = p->dims[2];
	int64_t hq = p->dims[3], hkv = p->dims[4], d = p->dims[5];
	size_t nq = (size_t)(b * sq * hq * d), nkv = (size_t)(b * skv * hkv * d);
	st->no = nq;
	st->nl = (size_t)(b * hq * sq);
	size_t ob = (nq * 2 + 15) / 16 * 16, lb = (st->nl * 4 + 15) / 16 * 16;
	/* the checked row blocks (int32) and the rows' flags (bytes), in
	 * one host buffer uploaded once */
	int64_t nblk = (sq + REF_R - 1) / REF_R;
	size_t hb_bytes = ATTN_CHECK_BLKS * 4 + (size_t)sq;
	uint8_t *hb = (uint8_t *)calloc(1, hb_bytes);
	if (!hb)
		return -ENOMEM;
	int32_t *blk = (int32_t *)hb;
	uint8_t *sel = hb + ATTN_CHECK_BLKS * 4;
	int64_t nb = flyk_check_sample(nblk, ATTN_CHECK_BLKS, ATTN_CHECK_EDGE, 3,
				       blk);
	for (int64_t k = 0; k < nb; k++)
		for (int64_t i = (int64_t)blk[k] * REF_R;
		     i < sq && i < (int64_t)(blk[k] + 1) * REF_R; i++)
			sel[i] = 1;
	void *q, *k, *v, *o, *lse, *ref, *ws, *hdev;
	/* (8 buffers: the reference LSE and the compare words ride behind
	 * the reference O) */
	if (flyk_gpu_case_alloc(c, nq * 2, 0, &q) < 0 ||
	    flyk_gpu_case_alloc(c, nkv * 2, 0, &k) < 0 ||
	    flyk_gpu_case_alloc(c, nkv * 2, 0, &v) < 0 ||
	    flyk_gpu_case_alloc(c, nq * 2, 1, &o) < 0 ||
	    flyk_gpu_case_alloc(c, st->nl * 4, 1, &lse) < 0 ||
	    flyk_gpu_case_alloc(c, ob + lb + 16, 0, &ref) < 0 ||
	    flyk_gpu_case_alloc(c, ATTN_WS_BYTES, 0, &ws) < 0 ||
	    flyk_gpu_case_alloc(c, hb_bytes, 0, &hdev) < 0) {
		free(hb);
		return -ENOMEM;
	}
	int rc = flyk_gpu_upload(c->dev, hdev, hb, hb_bytes);
	free(hb);
	if (rc)
		return rc;
	st->d_sel = (uint8_t *)hdev + ATTN_CHECK_BLKS * 4;
	st->d_ref_o = ref;
	st->d_ref_lse = (float *)((char *)ref + ob);
	st->d_cmp = (unsigned *)((char *)ref + ob + lb);
	rc = flyk_gpu_fill_random(c->dev, q, nq, p->dtype, -2.f, 2.f, seed);
	if (!rc)
		rc = flyk_gpu_fill_random(c->dev, k, nkv, p->dtype, -1.f, 1.f,
					  seed + 1);
	if (!rc)
		rc = flyk_gpu_fill_random(c->dev, v, nkv, p->dtype, -1.f, 1.f,
					  seed + 2);
	if (rc)
		return rc;
	struct flyk_attention_args *a = &c->args.attention;
	memset(a, 0, sizeof(*a));
	a->q = q;
	a->k = k;
	a->v = v;
	a->o = ref;
	a->lse = st->d_ref_lse;
	a->scale = 1.f / sqrtf((float)d);
	a->workspace = ws;
	a->workspace_size = ATTN_WS_BYTES;
	rc = ref_go(p, a, (const int32_t *)hdev, nb, c->dev->stream);
	a->o = o;
	a->lse = (float *)lse;
	/* timed as an engine's inference call asks (O alone, as SDPA's);
	 * the checked launch writes the LSE too */
	c->timed_args = c->args;
	c->timed_args.attention.lse = NULL;
	c->has_timed_args = 1;
	return rc;
}

static int attn_check(struct flyk_case *c, double *max_err)
{
	struct attn_state *st = (struct attn_state *)c->state;
	const struct flyk_attention_args *a = &c->args.attention;
	const struct fly_problem *p = &c->p;
	hipStream_t s = (hipStream_t)c->dev->stream;
	*max_err = 0;
	/* O: |o - r| <= |r| / 64 + 4e-3 (P rounded to bf16: up to 2^-9 of
	 * max |v| = 1 over two keys, plus O's own rounding); the CPU
	 * backend's rule too (kernels/cpu/case.c) */
	unsigned h[4] = {0, 0, 0, 0};
	int rc = flyk_gpu_upload(c->dev, st->d_cmp, h, sizeof(h));
	if (rc)
		return rc;
	size_t ob = (st->no + 255) / 256, lb = (st->nl + 255) / 256;
	size_t cap = (size_t)c->dev->sms * 8;
	ob = ob > cap ? cap : ob;
	lb = lb > cap ? cap : lb;
	int64_t row_len = p->dims[3] * p->dims[5], sq = p->dims[1];
	if (p->dtype == FLY_DT_BF16)
		FLYK_GO((unsigned)ob, 256, 0, s, attn_o_cmp_kernel<FLY_DT_BF16>)(
			(const uint16_t *)a->o, (const uint16_t *)st->d_ref_o,
			st->no, row_len, sq, st->d_sel, st->d_cmp);
	else
		FLYK_GO((unsigned)ob, 256, 0, s, attn_o_cmp_kernel<FLY_DT_FP16>)(
			(const uint16_t *)a->o, (const uint16_t *)st->d_ref_o,
			st->no, row_len, sq, st->d_sel, st->d_cmp);
	if ((rc = flyk_launch_err()))
		return rc;
	FLYK_GO((unsigned)lb, 256, 0, s, attn_lse_cmp_kernel)(
		a->lse, st->d_ref_lse, st->nl, sq, st->d_sel, st->d_cmp + 2);
	if ((rc = flyk_launch_err()) ||
	    (rc = flyk_gpu_download(c->dev, h, st->d_cmp, sizeof(h))))
		return rc;
	float eo, el;
	memcpy(&eo, &h[0], 4);
	memcpy(&el, &h[2], 4);
	*max_err = eo > el ? eo : el;
	return h[1] || h[3] ? -EDOM : 0;
}

static void attn_fini(struct flyk_case *c)
{
	free(c->state);
	c->state = NULL;
}

#if !FLYK_DEVICE_PASS
extern "C" const struct flyk_gpu_op flyk_gpu_attention_op = {
    FLY_OP_ATTENTION, attn_variants,
    sizeof(attn_variants) / sizeof(attn_variants[0]),
    attn_setup, attn_check, attn_fini, NULL,
};
#endif
