/*
 * attn/attn_wgmma.h -- the Hopper attention forward kernel (sm_90a), in
 * the FlashAttention-3 manner on the GEMM kernels' primitives: TMA tile
 * loads into 128B-swizzled shared memory (prim/tma.h), wgmma (prim/
 * wgmma.h), one producer warpgroup and two consumer warpgroups.
 *
 *   - A work unit is 128 query rows of one (batch, head); consumer
 *     warpgroup c owns rows 64c .. 64c + 63 as one m64 slab.  A block
 *     runs one unit, or (persist) one block per SM walks them.
 *   - The producer (one thread) loads the Q tile once, then walks the KV
 *     blocks of BN keys through a ring of ST stages, K and V with their
 *     own full/empty mbarriers: a consumer releases a K stage as soon as
 *     S = Q K^T has read it, a V stage after O += P V.
 *   - S = Q K^T: m64nBNk16 wgmma, both operands K-major from shared
 *     memory.  Online softmax in fp32 on the accumulator registers (the
 *     scale folded into log2 e, ex2.approx); the row's values sit in the
 *     four threads of a quad.
 *   - O += P V: P never leaves registers -- the S accumulator's layout is
 *     the A-fragment layout of a register-A wgmma, so P is packed to bf16
 *     in place; V is the MN-major B operand (imm-trans-b) straight from
 *     its TMA box.
 *   - Causal (bottom-right: query i sees key j <= i + skv - sq): blocks
 *     past the diagonal are never loaded; masks apply only to the blocks
 *     that need them (the diagonal's and a ragged last block).  Rows
 *     that see no key write 0 and LSE -inf.
 *   - GQA: head h reads KV head h / (hq / hkv).  Units go m-blocks
 *     first (longest causal first), then heads, then batches, so what
 *     shares K/V runs together.
 *   - Strides are the caller's ([batch, seq, head], head_dim contiguous):
 *     4-D tensor maps {d, seq, head, batch}; out-of-range rows are zero
 *     filled by the copy engine and never stored.
 *
 * Owns: nothing (device templates; host tensor maps are prim/tma.h's
 * per-thread cache).  Thread: host code, any thread.
 * Built only for sm_90a under nvcc (FLYK_HAS_TMA); elsewhere the variant
 * is infeasible (-ENOSPC).  Included by attn/attention.hip only.
 */
#ifndef FLYK_ATTN_WGMMA_H
#define FLYK_ATTN_WGMMA_H

#include "prim/launch.h"
#include "prim/tma.h"
#include "prim/wgmma.h"

/* The shapes built: head_dim D, keys per block BN, stages ST; each with
 * the two overlaps (OV). */
#define ATTN_WG_CFGS(X)                                                        \
	X(64, 64, 4)                                                           \
	X(64, 128, 2)                                                          \
	X(64, 128, 3)                                                          \
	X(128, 64, 2)                                                          \
	X(128, 64, 3)                                                          \
	X(128, 128, 2)                                                          \
	X(128, 128, 3)                                                         \
	X(256, 64, 2)

static const int64_t attn_wg_block_n[] = {64, 128};
static const int64_t attn_wg_stages[] = {2, 3, 4};
static const int64_t attn_wg_overlap[] = {1, 2};
static const int64_t attn_wg_persist[] = {0, 1};

#if FLYK_HAS_TMA

template <int D_, int BN_, int ST_, int OV_> struct attn_wg_cfg {
	enum {
		/* 1: the next block's S and its softmax overlap this block's
		 * P V; 2: that, and the two consumers take turns issuing
		 * their wgmma (one's softmax under the other's MMAs: FA3's
		 * ping-pong) */
		OV = OV_,
		D = D_,
		BN = BN_,
		ST = ST_,
		BM = 128,
		THREADS = 384,
		DP = D_ / 64,		  /* 64-wide panels of head_dim */
		Q_BYTES = BM * D_ * 2,
		KV_BYTES = BN_ * D_ * 2, /* one stage of K (or of V) */
		/* Q, the K and V rings, 1 KiB to align the swizzle atoms,
		 * the barriers */
		SMEM = Q_BYTES + 2 * ST_ * KV_BYTES + 1024 + 256,
	};
};

__device__ __forceinline__ float attn_ex2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

struct attn_wg_params {
	void *o;
	float *lse;
	int64_t os[3]; /* o strides: batch, seq, head (elements) */
	int sq, skv, hq, nb, group, causal;
	int nunits; /* ceil(sq / 128) * hq * batch */
	float scale_log2;
};

/* One consumer thread's two rows (g and g + 8 of its warp's 16): the
 * running maxima (scaled log2 domain), the partial sums of its columns. */
struct attn_wg_row {
	float ma, mb, la, lb;
	int ra, rb, t;
};

/* S = Q K^T of one block, issued and committed (zeroed first). */
template <class C>
__device__ __forceinline__ void attn_wg_qk(float *s, const uint16_t *q,
					   const uint16_t *k)
{
#pragma unroll
	for (int i = 0; i < C::BN / 2; i++)
		s[i] = 0.f;
	flyk_wg_fence_acc<C::BN / 2>(s);
	flyk_wg_fence();
#pragma unroll
	for (int kk = 0; kk < C::D / 16; kk++) {
		const int dp = kk / 4, ko = (kk % 4) * 16;
		flyk_wgmma_bf16<C::BN>(s, flyk_wg_desc(q + dp * C::BM * 64 + ko),
				       flyk_wg_desc(k + dp * C::BN * 64 + ko));
	}
	flyk_wg_commit();
}

/* O += P V of one block, issued and committed. */
template <class C>
__device__ __forceinline__ void attn_wg_pv(float *o, uint32_t (*pa)[4],
					   const uint16_t *v)
{
	flyk_wg_fence_acc<C::D / 2>(o);
	flyk_wg_fence();
#pragma unroll
	for (int kk = 0; kk < C::BN / 16; kk++)
		flyk_wgmma_bf16_rs_t<C::D>(
		    o, pa[kk], flyk_wg_desc_mn(v + kk * 16 * 64, C::BN * 128));
	flyk_wg_commit();
}

/* The online softmax of block @p n0 in place: masks (the causal
 * diagonal's blocks, a ragged last block), new maxima, s = 2^(s scale
 * log2e - m), the row sums; the factors the old O and sums scale by. */
template <class C, class P>
__device__ __forceinline__ void attn_wg_softmax(float *s, attn_wg_row *r,
						int n0, int row0, const P &p,
						float *ca, float *cb)
{
	const int off = p.skv - p.sq;
	if (n0 + C::BN > p.skv || (p.causal && n0 + C::BN - 1 > row0 + off)) {
#pragma unroll
		for (int j = 0; j < C::BN / 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int col = n0 + 8 * j + 2 * r->t + (e & 1);
				int row = e < 2 ? r->ra : r->rb;
				if (col >= p.skv || (p.causal && col > row + off))
					s[4 * j + e] = -INFINITY;
			}
	}
	float xa = -INFINITY, xb = -INFINITY;
#pragma unroll
	for (int j = 0; j < C::BN / 8; j++) {
		xa = fmaxf(xa, fmaxf(s[4 * j], s[4 * j + 1]));
		xb = fmaxf(xb, fmaxf(s[4 * j + 2], s[4 * j + 3]));
	}
	xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 1));
	xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 2));
	xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 1));
	xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 2));
	const float na = fmaxf(r->ma, xa * p.scale_log2);
	const float nb = fmaxf(r->mb, xb * p.scale_log2);
	const float ua = na == -INFINITY ? 0.f : na;
	const float ub = nb == -INFINITY ? 0.f : nb;
	*ca = attn_ex2(r->ma - ua);
	*cb = attn_ex2(r->mb - ub);
	r->ma = na;
	r->mb = nb;
	float sa = 0.f, sb = 0.f;
#pragma unroll
	for (int j = 0; j < C::BN / 8; j++) {
		s[4 * j] = attn_ex2(s[4 * j] * p.scale_log2 - ua);
		s[4 * j + 1] = attn_ex2(s[4 * j + 1] * p.scale_log2 - ua);
		s[4 * j + 2] = attn_ex2(s[4 * j + 2] * p.scale_log2 - ub);
		s[4 * j + 3] = attn_ex2(s[4 * j + 3] * p.scale_log2 - ub);
		sa += s[4 * j] + s[4 * j + 1];
		sb += s[4 * j + 2] + s[4 * j + 3];
	}
	r->la = r->la * *ca + sa;
	r->lb = r->lb * *cb + sb;
}

template <class C>
__device__ __forceinline__ void attn_wg_rescale(float *o, float ca, float cb)
{
#pragma unroll
	for (int j = 0; j < C::D / 8; j++) {
		o[4 * j] *= ca;
		o[4 * j + 1] *= ca;
		o[4 * j + 2] *= cb;
		o[4 * j + 3] *= cb;
	}
}

/* P as register A fragments, 16 keys each: the accumulator's n8 pair
 * (2kk, 2kk + 1) is exactly the m16k16 A fragment of keys 16kk.. */
template <class C>
__device__ __forceinline__ void attn_wg_pack(uint32_t (*pa)[4], const float *s)
{
#pragma unroll
	for (int kk = 0; kk < C::BN / 16; kk++)
#pragma unroll
		for (int q = 0; q < 4; q++)
			pa[kk][q] =
			    flyk_df2b2(s[8 * kk + 2 * q], s[8 * kk + 2 * q + 1]);
}

/* Work unit u: m-blocks fastest, longest (causal) first, so the units
 * that share a head's K/V run together and find it in L2; then heads
 * (the heads of one KV head together), then batches. */
struct attn_wg_unit {
	int h, b, m0, nblk;
};

template <class C>
__device__ __forceinline__ attn_wg_unit attn_wg_unit_of(int u,
							 const attn_wg_params &p)
{
	attn_wg_unit w;
	const int nm = (p.sq + C::BM - 1) / C::BM;
	const int hb = u / nm;
	w.h = hb % p.hq;
	w.b = hb / p.hq;
	w.m0 = (nm - 1 - u % nm) * C::BM;
	w.nblk = (p.skv + C::BN - 1) / C::BN;
	if (p.causal) {
		/* the last row's last key, bottom-right aligned */
		int last = w.m0 + C::BM - 1 + p.skv - p.sq;
		int lim = last < 0 ? 0 : last / C::BN + 1;
		w.nblk = lim < w.nblk ? lim : w.nblk;
	}
	return w;
}

/* One consumer's rows of unit @p w out: O / l (bf16), LSE. */
template <class C>
__device__ __forceinline__ void attn_wg_store(const attn_wg_params &p,
					      const attn_wg_unit &w,
					      const attn_wg_row &r0,
					      const float *o)
{
	float la = r0.la, lb = r0.lb;
	la += __shfl_xor_sync(0xffffffffu, la, 1);
	la += __shfl_xor_sync(0xffffffffu, la, 2);
	lb += __shfl_xor_sync(0xffffffffu, lb, 1);
	lb += __shfl_xor_sync(0xffffffffu, lb, 2);
	const float ia = la > 0.f ? 1.f / la : 0.f;
	const float ib = lb > 0.f ? 1.f / lb : 0.f;
	const int t = r0.t;
	uint16_t *ob = (uint16_t *)p.o + (int64_t)w.b * p.os[0] +
		       (int64_t)w.h * p.os[2];
	if (r0.ra < p.sq) {
		uint16_t *row = ob + (int64_t)r0.ra * p.os[1];
#pragma unroll
		for (int j = 0; j < C::D / 8; j++)
			*(uint32_t *)(row + 8 * j + 2 * t) =
			    flyk_df2b2(o[4 * j] * ia, o[4 * j + 1] * ia);
	}
	if (r0.rb < p.sq) {
		uint16_t *row = ob + (int64_t)r0.rb * p.os[1];
#pragma unroll
		for (int j = 0; j < C::D / 8; j++)
			*(uint32_t *)(row + 8 * j + 2 * t) =
			    flyk_df2b2(o[4 * j + 2] * ib, o[4 * j + 3] * ib);
	}
	if (p.lse && t == 0) {
		/* natural log: (m + log2 l) ln 2, m in the scaled log2
		 * domain */
		float *lr = p.lse + ((int64_t)w.b * p.hq + w.h) * p.sq;
		if (r0.ra < p.sq)
			lr[r0.ra] = la > 0.f ? (r0.ma + __log2f(la)) * 0.69314718f
					     : -INFINITY;
		if (r0.rb < p.sq)
			lr[r0.rb] = lb > 0.f ? (r0.mb + __log2f(lb)) * 0.69314718f
					     : -INFINITY;
	}
}

/*
 * Block x walks units x, x + grid, ... (one unit each, or persistent: a
 * block per SM, the persist parameter); the producer runs
 * ahead into the next unit (its Q once the consumers' last S of this one
 * has read the Q tile: the empty_q barrier), so a short unit's load
 * latency hides under the previous unit's last blocks and epilogue.  The
 * K/V ring's iteration count runs on across units.
 */
template <class C>
__global__ void __launch_bounds__(384, 1)
    attn_wg_kernel(const __grid_constant__ CUtensorMap mq,
		   const __grid_constant__ CUtensorMap mk,
		   const __grid_constant__ CUtensorMap mv, attn_wg_params p)
{
	FLYK_DYN_SMEM(unsigned char, attn_wg_raw);
	unsigned char *base = (unsigned char *)(((uintptr_t)attn_wg_raw + 1023) &
						~(uintptr_t)1023);
	uint16_t *sq_ = (uint16_t *)base;
	uint16_t *sk = (uint16_t *)(base + C::Q_BYTES);
	uint16_t *sv = (uint16_t *)(base + C::Q_BYTES + C::ST * C::KV_BYTES);
	uint64_t *bars =
	    (uint64_t *)(base + C::Q_BYTES + 2 * C::ST * C::KV_BYTES);
	uint64_t *full_q = bars, *empty_q = bars + 1, *full_k = bars + 2,
		 *full_v = bars + 2 + C::ST, *empty_k = bars + 2 + 2 * C::ST,
		 *empty_v = bars + 2 + 3 * C::ST;
	const int units = p.nunits;
	const int wg = threadIdx.x / 128;

	if (threadIdx.x == 0) {
		flyk_tma_prefetch_map(&mq);
		flyk_tma_prefetch_map(&mk);
		flyk_tma_prefetch_map(&mv);
		flyk_bar_init(full_q, 1);
		flyk_bar_init(empty_q, 8);
		for (int s = 0; s < C::ST; s++) {
			flyk_bar_init(&full_k[s], 1);
			flyk_bar_init(&full_v[s], 1);
			flyk_bar_init(&empty_k[s], 8);
			flyk_bar_init(&empty_v[s], 8);
		}
		flyk_bar_init_fence();
	}
	__syncthreads();

	if (wg == 0) {
		flyk_reg_dec<24>();
		if (threadIdx.x != 0)
			return;
		int gi = 0, qi = 0; /* K/V ring iterations, Q tiles */
		for (int u = blockIdx.x; u < units; u += gridDim.x) {
			const attn_wg_unit w = attn_wg_unit_of<C>(u, p);
			if (w.nblk == 0)
				continue;
			const int hk = w.h / p.group;
			flyk_bar_wait(empty_q, (qi & 1) ^ 1);
			qi++;
			flyk_bar_expect(full_q, C::Q_BYTES);
#pragma unroll
			for (int dp = 0; dp < C::DP; dp++)
				flyk_tma_4d(sq_ + dp * C::BM * 64, &mq, full_q,
					    dp * 64, w.m0, w.h, w.b);
			for (int it = 0; it < w.nblk; it++, gi++) {
				int s = gi % C::ST;
				unsigned ph = (gi / C::ST) & 1;
				flyk_bar_wait(&empty_k[s], ph ^ 1);
				flyk_bar_expect(&full_k[s], C::KV_BYTES);
#pragma unroll
				for (int dp = 0; dp < C::DP; dp++)
					flyk_tma_4d(sk + (s * C::DP + dp) *
							     C::BN * 64,
						    &mk, &full_k[s], dp * 64,
						    it * C::BN, hk, w.b);
				flyk_bar_wait(&empty_v[s], ph ^ 1);
				flyk_bar_expect(&full_v[s], C::KV_BYTES);
#pragma unroll
				for (int dp = 0; dp < C::DP; dp++)
					flyk_tma_4d(sv + (s * C::DP + dp) *
							     C::BN * 64,
						    &mv, &full_v[s], dp * 64,
						    it * C::BN, hk, w.b);
			}
		}
		return;
	}

	flyk_reg_inc<240>();
	const int c = wg - 1;
	const int lane = threadIdx.x % 32, wi = (threadIdx.x / 32) % 4;
	const int g = lane / 4;
	const uint16_t *qs = sq_ + c * 64 * 64;
	float o[C::D / 2], s[C::BN / 2];
	uint32_t pa[C::BN / 16][4];
	int gi = 0, qi = 0;
	for (int u = blockIdx.x; u < units; u += gridDim.x) {
		const attn_wg_unit w = attn_wg_unit_of<C>(u, p);
		const int nblk = w.nblk, row0 = w.m0 + c * 64;
		attn_wg_row r;
		r.ma = r.mb = -INFINITY;
		r.la = r.lb = 0.f;
		r.ra = row0 + wi * 16 + g;
		r.rb = r.ra + 8;
		r.t = lane % 4;
#pragma unroll
		for (int i = 0; i < C::D / 2; i++)
			o[i] = 0.f;
		if (nblk == 0) {
			attn_wg_store<C>(p, w, r, o);
			continue;
		}
		flyk_bar_wait(full_q, qi & 1);
		qi++;
		/* S of block it + 1 and its softmax run while the tensor
		 * cores do O += P V of block it (FlashAttention-3's
		 * intra-warpgroup overlap): P of block it stays packed in pa
		 * until that wgmma retires. */
		{
			const int st = gi % C::ST;
			flyk_bar_wait(&full_k[st], (gi / C::ST) & 1);
			attn_wg_qk<C>(s, qs, sk + st * C::DP * C::BN * 64);
			flyk_wg_wait<0>();
			flyk_wg_fence_acc<C::BN / 2>(s);
			if (lane == 0) {
				flyk_bar_arrive(&empty_k[st]);
				if (nblk == 1)
					flyk_bar_arrive(empty_q);
			}
		}
		float ca, cb;
		attn_wg_softmax<C>(s, &r, 0, row0, p, &ca, &cb);
		attn_wg_pack<C>(pa, s);
		/* ping-pong: consumer c issues after barrier 1 + c, which the
		 * other consumer's arrival opens (consumer 1 opens the first
		 * turn; the last turn is not handed on, so every arrival is
		 * consumed within the unit) */
		if (C::OV == 2 && c == 1 && nblk > 1)
			flyk_bar_named_arrive(1, 256);
		for (int it = 0; it + 1 < nblk; it++, gi++) {
			const int st = gi % C::ST, sn = (gi + 1) % C::ST;
			const unsigned ph = (gi / C::ST) & 1,
				       pn = ((gi + 1) / C::ST) & 1;
			flyk_bar_wait(&full_k[sn], pn);
			if (C::OV == 2)
				flyk_bar_named(1 + c, 256);
			attn_wg_qk<C>(s, qs, sk + sn * C::DP * C::BN * 64);
			flyk_bar_wait(&full_v[st], ph);
			attn_wg_pv<C>(o, pa, sv + st * C::DP * C::BN * 64);
			if (C::OV == 2 && !(c == 1 && it + 2 == nblk))
				flyk_bar_named_arrive(2 - c, 256);
			flyk_wg_wait<1>(); /* S retired, P V in flight */
			flyk_wg_fence_acc<C::BN / 2>(s);
			if (lane == 0) {
				flyk_bar_arrive(&empty_k[sn]);
				if (it + 2 == nblk)
					flyk_bar_arrive(empty_q);
			}
			attn_wg_softmax<C>(s, &r, (it + 1) * C::BN, row0, p,
					   &ca, &cb);
			flyk_wg_wait<0>();
			flyk_wg_fence_acc<C::D / 2>(o);
			if (lane == 0)
				flyk_bar_arrive(&empty_v[st]);
			attn_wg_rescale<C>(o, ca, cb);
			attn_wg_pack<C>(pa, s);
		}
		{
			const int st = gi % C::ST;
			flyk_bar_wait(&full_v[st], (gi / C::ST) & 1);
			attn_wg_pv<C>(o, pa, sv + st * C::DP * C::BN * 64);
			flyk_wg_wait<0>();
			flyk_wg_fence_acc<C::D / 2>(o);
			if (lane == 0)
				flyk_bar_arrive(&empty_v[st]);
			gi++;
		}
		attn_wg_store<C>(p, w, r, o);
	}
}

#if !FLYK_DEVICE_PASS
/* Launch config C's kernel (a host function per config, so the table
 * holds plain function pointers). */
template <class C>
static int attn_wg_go(dim3 grid, hipStream_t st, const CUtensorMap *mq,
		      const CUtensorMap *mk, const CUtensorMap *mv,
		      const attn_wg_params *ap)
{
	if (flyk_smem_optin<attn_wg_kernel<C>>(C::SMEM))
		return -ENOSPC;
	FLYK_GO(grid, C::THREADS, C::SMEM, st, attn_wg_kernel<C>)
	(*mq, *mk, *mv, *ap);
	return flyk_launch_err();
}
struct attn_wg_ent {
	int d, bn, st, ov, smem;
	int (*go)(dim3, hipStream_t, const CUtensorMap *, const CUtensorMap *,
		  const CUtensorMap *, const attn_wg_params *);
};
#define ATTN_WG_ENT(D, BN, ST)                                                 \
	{D, BN, ST, 1, attn_wg_cfg<D, BN, ST, 1>::SMEM,                        \
	     attn_wg_go<attn_wg_cfg<D, BN, ST, 1>>},                           \
	    {D, BN, ST, 2, attn_wg_cfg<D, BN, ST, 2>::SMEM,                    \
	     attn_wg_go<attn_wg_cfg<D, BN, ST, 2>>},
static const attn_wg_ent attn_wg_ents[] = {ATTN_WG_CFGS(ATTN_WG_ENT)};

static const attn_wg_ent *attn_wg_find(int64_t d, const int64_t *pr)
{
	for (size_t i = 0; i < sizeof(attn_wg_ents) / sizeof(attn_wg_ents[0]);
	     i++)
		if (attn_wg_ents[i].d == d && attn_wg_ents[i].bn == pr[0] &&
		    attn_wg_ents[i].st == pr[1] && attn_wg_ents[i].ov == pr[2] &&
		    (pr[3] == 0 || pr[3] == 1))
			return &attn_wg_ents[i];
	return NULL;
}
#endif /* !FLYK_DEVICE_PASS */
#endif /* FLYK_HAS_TMA */

#if !FLYK_DEVICE_PASS
/* params: block_n, stages, overlap, persist. */
static int attn_wgmma_feasible(const struct flyk_device *dev,
			       const struct fly_problem *p, const int64_t *pr)
{
#if !FLYK_HAS_TMA
	(void)dev;
	(void)p;
	(void)pr;
	return -ENOSPC;
#else
	const int64_t *d = p->dims; /* b, sq, skv, hq, hkv, d */
	if (dev->cc_major != 9)
		return -ENOSPC;
	if (p->dtype != FLY_DT_BF16 || d[4] <= 0 || d[3] % d[4])
		return -EINVAL;
	const attn_wg_ent *e = attn_wg_find(d[5], pr);
	if (!e)
		return -EINVAL;
	if ((size_t)e->smem > dev->smem_per_block_optin)
		return -ENOSPC;
	if ((d[1] + 127) / 128 * d[3] * d[0] > 0x7fffffff || d[2] > 0x7fffffff)
		return -EINVAL;
	/* a 128-key block on at most 64 keys is only the 64 block, padded */
	if (pr[0] == 128 && d[2] <= 64)
		return -EINVAL;
	return 0;
#endif
}

static int attn_wgmma_launch(const struct flyk_device *dev,
			     const struct fly_problem *p, const int64_t *pr,
			     const union flyk_args *args, void *stream)
{
#if !FLYK_HAS_TMA
	(void)dev;
	(void)p;
	(void)pr;
	(void)args;
	(void)stream;
	return -EOPNOTSUPP;
#else
	int rc = attn_wgmma_feasible(dev, p, pr);
	if (rc)
		return rc;
	const struct flyk_attention_args *a = &args->attention;
	const int64_t B = p->dims[0], sq = p->dims[1], skv = p->dims[2],
		      hq = p->dims[3], hkv = p->dims[4], D = p->dims[5];
	const attn_wg_ent *e = attn_wg_find(D, pr);
	/* strides: 0 is dense for the tensor's shape */
	int64_t qs[3], ks[3], vs[3], os[3];
	const int64_t dq[3] = {sq * hq * D, hq * D, D},
		      dk[3] = {skv * hkv * D, hkv * D, D};
	for (int i = 0; i < 3; i++) {
		qs[i] = a->q_stride[i] ? a->q_stride[i] : dq[i];
		ks[i] = a->k_stride[i] ? a->k_stride[i] : dk[i];
		vs[i] = a->v_stride[i] ? a->v_stride[i] : dk[i];
		os[i] = a->o_stride[i] ? a->o_stride[i] : dq[i];
	}
	CUtensorMap mq, mk, mv;
	const uint64_t qd[4] = {(uint64_t)D, (uint64_t)sq, (uint64_t)hq,
				(uint64_t)B};
	const uint64_t kd[4] = {(uint64_t)D, (uint64_t)skv, (uint64_t)hkv,
				(uint64_t)B};
	const uint64_t qb[3] = {(uint64_t)qs[1] * 2, (uint64_t)qs[2] * 2,
				(uint64_t)qs[0] * 2};
	const uint64_t kb[3] = {(uint64_t)ks[1] * 2, (uint64_t)ks[2] * 2,
				(uint64_t)ks[0] * 2};
	const uint64_t vb[3] = {(uint64_t)vs[1] * 2, (uint64_t)vs[2] * 2,
				(uint64_t)vs[0] * 2};
	if (flyk_tma_map_strided(&mq, a->q, 4, qd, qb, 128) ||
	    flyk_tma_map_strided(&mk, a->k, 4, kd, kb, (uint32_t)e->bn) ||
	    flyk_tma_map_strided(&mv, a->v, 4, kd, vb, (uint32_t)e->bn))
		return -EINVAL;
	/* the epilogue's 4-byte stores */
	if (((uintptr_t)a->o & 3) || (os[0] | os[1] | os[2]) & 1)
		return -EINVAL;
	attn_wg_params ap;
	ap.o = a->o;
	ap.lse = a->lse;
	for (int i = 0; i < 3; i++)
		ap.os[i] = os[i];
	ap.sq = (int)sq;
	ap.skv = (int)skv;
	ap.hq = (int)hq;
	ap.group = (int)(hq / hkv);
	ap.causal = (p->flags & FLY_F_CAUSAL) != 0;
	ap.scale_log2 = a->scale * 1.4426950408889634f;
	const int64_t units = (sq + 127) / 128 * hq * B;
	ap.nb = (int)B;
	ap.nunits = (int)units;
	dim3 grid((unsigned)(pr[3] && units > dev->sms ? dev->sms : units));
	return e->go(grid, (hipStream_t)stream, &mq, &mk, &mv, &ap);
#endif
}
#endif /* !FLYK_DEVICE_PASS */

#endif /* FLYK_ATTN_WGMMA_H */
