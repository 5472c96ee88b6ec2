/*
 * attn/attn_mfma.h -- attention forward on AMD MFMA (issues 16 and 27),
 * FlashAttention-2 manner, wave64, bf16: included by attention.hip (its
 * attn_dims, attn_problem_ok, ATTN_LOG2E, ATTN_LN2 and the FLYK_GO launch).
 *
 * One workgroup per (block_m query rows, head, batch), block_m / 16 waves
 * of 16 query rows.  Per key tile of block_n keys, K and V go to LDS, and
 * each wave computes the transposed scores S^T = K Q^T on flyk_mfma<16>
 * (A: K rows from LDS; B: Q, kept in registers), so that lane l holds, for
 * query l % 16, keys 4 (l / 16) .. + 3 of each 16-key subtile: exactly
 * the B operand layout of O^T += V^T P^T (prim/mfma.h), so P never leaves
 * the registers (rounded to bf16).  Online softmax in fp32 with exp2f and
 * the scale folded into log2(e); a query's max is reduced over the four
 * lanes l % 16 + 16 g (shuffles 16 and 32: the wave's 64 lanes), its sum
 * is kept per lane and reduced once at the end.  Causal (bottom-right):
 * key tiles past the block's last visible key are not loaded; every
 * loaded tile is masked per element (the diagonal and the skv tail).
 * d = 64 or 128.  Any stride (element loads).
 *
 * Owns: the kernel and its launch table.  Thread: device code; host
 * launch asynchronous on the caller's stream.
 */
#ifndef FLYK_ATTN_MFMA_H
#define FLYK_ATTN_MFMA_H

#include "prim/mfma.h"

static const int64_t amf_block_m[] = {64, 32, 128};
static const int64_t amf_block_n[] = {32, 64};

#if FLYK_HAS_MFMA

#define AMF_PAD 4 /* LDS row padding (elements) */

/* Wave w of the workgroup: queries i0 + 16 w + l % 16. */
template <int D, int BM, int BN>
__global__ void __launch_bounds__(BM * 4)
attn_mfma_kernel(const uint16_t *q, const uint16_t *k, const uint16_t *v,
		 uint16_t *o, float *lse, struct attn_dims m)
{
	typedef flyk_elem<FLY_DT_BF16> E;
	typedef flyk_mfma<16> M;
	__shared__ uint16_t ks[BN][D + AMF_PAD];
	__shared__ uint16_t vs[BN][D + AMF_PAD];
	const int tx = threadIdx.x, l = tx % 64, w = tx / 64, g = l / 16;
	const int64_t i0 = (int64_t)blockIdx.x * BM, h = blockIdx.y;
	const int64_t b = blockIdx.z, hk = h / (m.hq / m.hkv);
	const int64_t off = m.skv - m.sq, qi = i0 + 16 * w + l % 16;
	const float sl2 = m.scale * ATTN_LOG2E;
	/* Q: B operand of S^T, query l % 16, d 16 kk + 4 g .. + 3 */
	flyk_bf16x4 qb[D / 16];
	for (int kk = 0; kk < D / 16; kk++) {
		uint16_t t[4];
		for (int e = 0; e < 4; e++)
			t[e] = qi < m.sq ? q[b * m.qs[0] + qi * m.qs[1] +
					     h * m.qs[2] + 16 * kk + 4 * g + e]
					 : (uint16_t)0;
		memcpy(&qb[kk], t, 8);
	}
	typename M::acc_t oa[D / 16];
	for (int c = 0; c < D / 16; c++)
		for (int r = 0; r < 4; r++)
			oa[c][r] = 0.f;
	float mx = -INFINITY, ls = 0.f;
	int64_t last = i0 + BM - 1 < m.sq ? i0 + BM - 1 : m.sq - 1;
	int64_t kend = m.causal ? last + off + 1 : m.skv;
	kend = kend < 0 ? 0 : (kend > m.skv ? m.skv : kend);
	const int64_t hi = m.causal ? qi + off + 1 : m.skv; /* exclusive */
	for (int64_t j0 = 0; j0 < kend; j0 += BN) {
		__syncthreads(); /* the previous tile is consumed */
		for (int x = tx; x < BN * D; x += BM * 4) {
			int j = x / D, c = x % D;
			bool in = j0 + j < m.skv;
			ks[j][c] = in ? k[b * m.ks[0] + (j0 + j) * m.ks[1] +
					  hk * m.ks[2] + c]
				      : (uint16_t)0;
			vs[j][c] = in ? v[b * m.vs[0] + (j0 + j) * m.vs[1] +
					  hk * m.vs[2] + c]
				      : (uint16_t)0;
		}
		__syncthreads();
		/* S^T: lane l, reg r of subtile n: key j0 + 16 n + 4 g + r */
		typename M::acc_t s[BN / 16];
		float tm = -INFINITY;
		for (int n = 0; n < BN / 16; n++) {
			for (int r = 0; r < 4; r++)
				s[n][r] = 0.f;
			for (int kk = 0; kk < D / 16; kk++) {
				const uint16_t *kp =
				    &ks[16 * n + l % 16][16 * kk + 4 * g];
				uint16_t t[4];
				flyk_bf16x4 a;
				for (int e = 0; e < 4; e++)
					t[e] = kp[e];
				memcpy(&a, t, 8);
				M::run(s[n], a, qb[kk]);
			}
			for (int r = 0; r < 4; r++) {
				int64_t j = j0 + 16 * n + 4 * g + r;
				float x = j < m.skv && j < hi ? s[n][r] * sl2
							      : -INFINITY;
				s[n][r] = x;
				tm = fmaxf(tm, x);
			}
		}
		tm = fmaxf(tm, FLYK_SHFL_XOR(tm, 16));
		tm = fmaxf(tm, FLYK_SHFL_XOR(tm, 32));
		float nm = fmaxf(mx, tm);
		float base = nm == -INFINITY ? 0.f : nm;
		float corr = exp2f(mx - base); /* mx -inf: 0 */
		ls *= corr;
		for (int c = 0; c < D / 16; c++)
			for (int r = 0; r < 4; r++)
				oa[c][r] *= corr;
		mx = nm;
		/* O^T[c][query] += V^T[c][key] P^T[key][query] */
		for (int n = 0; n < BN / 16; n++) {
			uint16_t t[4];
			flyk_bf16x4 pb;
			for (int r = 0; r < 4; r++) {
				float pe = exp2f(s[n][r] - base);
				t[r] = E::store(pe); /* P in bf16 */
				ls += pe; /* the sum in fp32: the LSE's */
			}
			memcpy(&pb, t, 8);
			for (int c = 0; c < D / 16; c++) {
				flyk_bf16x4 va;
				for (int e = 0; e < 4; e++)
					t[e] = vs[16 * n + 4 * g + e]
						 [16 * c + l % 16];
				memcpy(&va, t, 8);
				M::run(oa[c], va, pb);
			}
		}
	}
	ls += FLYK_SHFL_XOR(ls, 16);
	ls += FLYK_SHFL_XOR(ls, 32);
	if (qi >= m.sq)
		return;
	/* lane l holds O[qi][16 c + 4 g + r] */
	uint16_t *orp = o + b * m.os[0] + qi * m.os[1] + h * m.os[2];
	for (int c = 0; c < D / 16; c++)
		for (int r = 0; r < 4; r++)
			orp[16 * c + 4 * g + r] =
			    E::store(ls > 0.f ? oa[c][r] / ls : 0.f);
	if (lse && g == 0)
		lse[(b * m.hq + h) * m.sq + qi] =
		    ls > 0.f ? (mx + log2f(ls)) * ATTN_LN2 : -INFINITY;
}

typedef void (*amf_go_fn)(dim3, hipStream_t, const uint16_t *,
			  const uint16_t *, const uint16_t *, uint16_t *,
			  float *, struct attn_dims);

template <int D, int BM, int BN>
static void amf_go(dim3 grid, hipStream_t s, const uint16_t *q,
		   const uint16_t *k, const uint16_t *v, uint16_t *o,
		   float *lse, struct attn_dims m)
{
	FLYK_GO(grid, BM * 4, 0, s, attn_mfma_kernel<D, BM, BN>)(q, k, v, o,
								 lse, m);
}

struct amf_ent {
	int d, bm, bn;
	amf_go_fn go;
};

#define AMF_ENT(D, BM, BN) {D, BM, BN, amf_go<D, BM, BN>},
#define AMF_ENTS(D)                                                            \
	AMF_ENT(D, 32, 32)                                                     \
	AMF_ENT(D, 32, 64)                                                     \
	AMF_ENT(D, 64, 32)                                                     \
	AMF_ENT(D, 64, 64)                                                     \
	AMF_ENT(D, 128, 32)                                                    \
	AMF_ENT(D, 128, 64)
static const struct amf_ent amf_ents[] = {AMF_ENTS(64) AMF_ENTS(128)};

static const struct amf_ent *amf_find(int64_t d, const int64_t *pr)
{
	for (size_t i = 0; i < sizeof(amf_ents) / sizeof(amf_ents[0]); i++)
		if (amf_ents[i].d == d && amf_ents[i].bm == pr[0] &&
		    amf_ents[i].bn == pr[1])
			return &amf_ents[i];
	return NULL;
}
#endif /* FLYK_HAS_MFMA */

/* Where the device has the bf16 MFMA instructions (flyk_mfma_arch_ok),
 * for bf16 and d 64 or 128; -EINVAL elsewhere. */
static int attn_mfma_feasible(const struct flyk_device *dev,
			      const struct fly_problem *p, const int64_t *pr)
{
	if (attn_problem_ok(p) || p->dtype != FLY_DT_BF16)
		return -EINVAL;
#if !FLYK_HAS_MFMA
	(void)dev;
	(void)pr;
	return -EINVAL;
#else
	if (!flyk_mfma_arch_ok(dev->arch) || !amf_find(p->dims[5], pr))
		return -EINVAL;
	return 0;
#endif
}

static int attn_mfma_launch(const struct flyk_device *dev,
			    const struct fly_problem *p, const int64_t *pr,
			    const union flyk_args *args, void *stream)
{
	if (attn_mfma_feasible(dev, p, pr))
		return -EINVAL;
#if !FLYK_HAS_MFMA
	(void)args;
	(void)stream;
	return -EOPNOTSUPP;
#else
	const struct flyk_attention_args *a = &args->attention;
	struct attn_dims m;
	attn_dims_of(p, a, &m);
	dim3 grid((unsigned)((m.sq + pr[0] - 1) / pr[0]), (unsigned)m.hq,
		  (unsigned)m.b);
	amf_find(m.d, pr)->go(grid, (hipStream_t)stream,
			      (const uint16_t *)a->q, (const uint16_t *)a->k,
			      (const uint16_t *)a->v, (uint16_t *)a->o, a->lse,
			      m);
	return flyk_launch_err();
#endif
}

#endif /* FLYK_ATTN_MFMA_H */
