/*
 * topk.hip -- TopK along the last dim on the GPU: the k largest of each row
 * of x [m, n], sorted descending, values (x's dtype) and int64 indices.
 *
 * Owns: the topk variants and flyk_gpu_topk_op.  Thread: tables are
 * immutable; launches are asynchronous on the caller's stream.
 *
 * Every variant orders elements by one total order: the 64-bit word
 * (order-preserving key of the value) << 32 | ~index, larger first.  Ties
 * therefore always go to the smaller index and the output is a function of
 * the input alone: each variant is deterministic and bit-identical across
 * runs, so FLY_F_DETERMINISTIC on and off run the same kernels.  (NaN sorts
 * above +inf, as in torch.topk.)
 *
 * Variants (params in their stable order):
 *   topk_ref    one block per row, k rounds of a block-wide max below the
 *               last winner: slow, obviously right (k <= 128).
 *   topk_warp   `wpr` warps per row, `rpb` rows per block; each lane keeps a
 *               sorted top-kmax list in registers (kmax = k rounded up to
 *               2/4/8/16/32), 16-byte loads; lanes merge by k rounds of warp
 *               argmax, warps through shared memory.  k <= 32.
 *   topk_radix  one block of `threads` per row: radix select of the k-th
 *               key over 4 passes of 8-bit histograms in shared memory,
 *               gather (ties taken in index order), bitonic sort of the k.
 *               k <= 2048.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "flyk_gpu.h"
#include "gpu_int.h"

#define DT_MASK ((1u << FLY_DT_FP32) | (1u << FLY_DT_FP16) | (1u << FLY_DT_BF16))
#define TOPK_REF_KMAX 128
#define TOPK_WARP_KMAX 32
#define TOPK_RADIX_KMAX 2048

typedef unsigned long long u64;

template <int DT> __device__ __forceinline__ uint32_t tk_key(typename flyk_elem<DT>::T v)
{
	uint32_t u = __float_as_uint(flyk_elem<DT>::load(v));
	return u ^ ((u & 0x80000000u) ? 0xffffffffu : 0x80000000u);
}

__device__ __forceinline__ float tk_unkey(uint32_t k)
{
	uint32_t u = (k & 0x80000000u) ? (k ^ 0x80000000u) : ~k;
	return __uint_as_float(u);
}

__device__ __forceinline__ u64 tk_pack(uint32_t key, uint32_t idx)
{
	return ((u64)key << 32) | (u64)(0xffffffffu - idx);
}

template <int DT>
__device__ __forceinline__ void tk_emit(u64 v, typename flyk_elem<DT>::T *vals,
					int64_t *idx, int64_t o)
{
	vals[o] = flyk_elem<DT>::store(tk_unkey((uint32_t)(v >> 32)));
	idx[o] = (int64_t)(0xffffffffu - (uint32_t)v);
}

__device__ __forceinline__ u64 tk_shfl_xor(u64 v, int m)
{
	uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
	lo = FLYK_SHFL_XOR(lo, m);
	hi = FLYK_SHFL_XOR(hi, m);
	return ((u64)hi << 32) | lo;
}

__device__ __forceinline__ u64 tk_warp_max(u64 v)
{
#pragma unroll
	for (int o = FLYK_WARP / 2; o > 0; o >>= 1) {
		u64 w = tk_shfl_xor(v, o);
		v = w > v ? w : v;
	}
	return v;
}

/* Sorted (descending) per-thread list of the best KM words seen. */
template <int KM> struct tk_list {
	u64 l[KM];
	__device__ __forceinline__ void init()
	{
#pragma unroll
		for (int i = 0; i < KM; i++)
			l[i] = 0;
	}
	__device__ __forceinline__ void add(u64 t)
	{
		if (t <= l[KM - 1])
			return;
#pragma unroll
		for (int i = 0; i < KM; i++) {
			u64 hi = l[i] > t ? l[i] : t;
			t = l[i] > t ? t : l[i];
			l[i] = hi;
		}
	}
	__device__ __forceinline__ void pop()
	{
#pragma unroll
		for (int i = 0; i < KM - 1; i++)
			l[i] = l[i + 1];
		l[KM - 1] = 0;
	}
	/* k rounds of warp argmax: lane r gets the r-th best (r < warp).
	 * Returns this lane's word (0 when lane >= k). */
	__device__ __forceinline__ u64 merge(int k)
	{
		int lane = threadIdx.x % FLYK_WARP;
		u64 mine = 0;
		for (int r = 0; r < k; r++) {
			u64 best = tk_warp_max(l[0]);
			if (l[0] == best && best != 0)
				pop();
			if (lane == r)
				mine = best;
		}
		return mine;
	}
};

/* ------------------------------------------------------------ warp */

/* Lists of 16+ words need more than the 64 registers of a 1024-thread
 * block: those instantiations are bound to 512 threads. */
#define TK_MAXT(KM) ((KM) >= 16 ? 512 : 1024)

template <int DT, int KM>
__global__ void __launch_bounds__(TK_MAXT(KM))
	tk_warp_kernel(const typename flyk_elem<DT>::T *x,
		       typename flyk_elem<DT>::T *vals, int64_t *idx, int64_t m,
		       int n, int k, int wpr)
{
	typedef typename flyk_elem<DT>::T T;
	enum { VEC = 16 / sizeof(T), U = 4 };
	struct alignas(16) V {
		T e[VEC];
	};
	FLYK_DYN_SMEM(u64, tk_smem);
	int warp = threadIdx.x / FLYK_WARP, lane = threadIdx.x % FLYK_WARP;
	int rib = warp / wpr, wir = warp % wpr; /* row in block, warp in row */
	int64_t row = (int64_t)blockIdx.x * (blockDim.x / FLYK_WARP / wpr) + rib;
	int T_ = wpr * FLYK_WARP, t = wir * FLYK_WARP + lane;
	bool valid = row < m;
	const T *xr = x + (valid ? row : 0) * (int64_t)n;
	tk_list<KM> L;
	L.init();
	if (valid) {
		bool vec = (((uintptr_t)xr) & 15) == 0;
		int nv = vec ? n / VEC : 0;
		const V *xv = (const V *)xr;
		for (int j0 = t; j0 < nv; j0 += T_ * U) {
			V a[U];
#pragma unroll
			for (int u = 0; u < U; u++)
				if (j0 + u * T_ < nv)
					a[u] = xv[j0 + u * T_];
#pragma unroll
			for (int u = 0; u < U; u++) {
				int j = j0 + u * T_;
				if (j >= nv)
					continue;
#pragma unroll
				for (int e = 0; e < VEC; e++)
					L.add(tk_pack(tk_key<DT>(a[u].e[e]),
						      (uint32_t)(j * VEC + e)));
			}
		}
		for (int i = nv * VEC + t; i < n; i += T_)
			L.add(tk_pack(tk_key<DT>(xr[i]), (uint32_t)i));
	}
	u64 mine = L.merge(k);
	if (wpr > 1) {
		u64 *sm = tk_smem + (size_t)rib * wpr * TOPK_WARP_KMAX;
		if (lane < k)
			sm[wir * TOPK_WARP_KMAX + lane] = mine;
		__syncthreads();
		if (wir == 0) {
			L.init();
			for (int i = lane; i < wpr * TOPK_WARP_KMAX; i += FLYK_WARP)
				if (i % TOPK_WARP_KMAX < k)
					L.add(sm[i]);
			mine = L.merge(k);
		}
	}
	if (valid && wir == 0 && lane < k)
		tk_emit<DT>(mine, vals, idx, row * k + lane);
}

/* ------------------------------------------------------------ radix */

template <int DT>
__global__ void __launch_bounds__(1024)
	tk_radix_kernel(const typename flyk_elem<DT>::T *x,
			typename flyk_elem<DT>::T *vals, int64_t *idx, int n,
			int k, int ks)
{
	typedef typename flyk_elem<DT>::T T;
	FLYK_DYN_SMEM(u64, tk_smem); /* ks words: the candidates */
	__shared__ uint32_t hist[256];
	__shared__ uint32_t s_prefix, s_kk, s_cnt, s_eq, s_wsum[32];
	const T *xr = x + (int64_t)blockIdx.x * n;
	int t = threadIdx.x, G = blockDim.x;
	uint32_t prefix = 0, mask = 0, kk = (uint32_t)k;
	for (int shift = 24; shift >= 0; shift -= 8) {
		for (int i = t; i < 256; i += G)
			hist[i] = 0;
		__syncthreads();
		for (int i = t; i < n; i += G) {
			uint32_t key = tk_key<DT>(xr[i]);
			if ((key & mask) == prefix)
				atomicAdd(&hist[(key >> shift) & 255u], 1u);
		}
		__syncthreads();
		if (t < FLYK_WARP) {
			/* lane l owns digits from the top: 256/warp each. */
			int per = 256 / FLYK_WARP, hi = 255 - t * per;
			uint32_t s = 0;
			for (int d = 0; d < per; d++)
				s += hist[hi - d];
			uint32_t inc = s; /* inclusive scan from lane 0 */
			for (int o = 1; o < FLYK_WARP; o <<= 1) {
				uint32_t v = FLYK_SHFL(inc, t >= o ? t - o : t);
				if (t >= o)
					inc += v;
			}
			uint32_t above = inc - s;
			if (above < kk && kk <= inc) {
				for (int d = 0; d < per; d++) {
					uint32_t h = hist[hi - d];
					if (above + h >= kk) {
						s_prefix = prefix |
							   ((uint32_t)(hi - d)
							    << shift);
						s_kk = kk - above;
						break;
					}
					above += h;
				}
			}
		}
		__syncthreads();
		prefix = s_prefix;
		kk = s_kk;
		mask |= 255u << shift;
		__syncthreads();
	}
	/* prefix is the k-th key; the kk smallest indices with key == prefix
	 * are in, with every key > prefix. */
	if (t == 0) {
		s_cnt = 0;
		s_eq = 0;
	}
	for (int i = t; i < ks; i += G)
		tk_smem[i] = 0;
	__syncthreads();
	for (int i = t; i < n; i += G) {
		uint32_t key = tk_key<DT>(xr[i]);
		if (key > prefix)
			tk_smem[atomicAdd(&s_cnt, 1u)] = tk_pack(key, (uint32_t)i);
	}
	int nw = G / FLYK_WARP, warp = t / FLYK_WARP, lane = t % FLYK_WARP;
	uint32_t base = (uint32_t)k - kk;
	for (int c0 = 0; c0 < n; c0 += G) {
		__syncthreads();
		if (s_eq >= kk)
			break;
		int i = c0 + t;
		bool eq = i < n && tk_key<DT>(xr[i]) == prefix;
		unsigned long long bal = FLYK_BALLOT(eq);
		uint32_t below = (uint32_t)__popcll(bal & ((1ull << lane) - 1ull));
		if (lane == 0)
			s_wsum[warp] = (uint32_t)__popcll(bal);
		__syncthreads();
		uint32_t before = s_eq;
		for (int w = 0; w < warp; w++)
			before += s_wsum[w];
		if (eq && before + below < kk)
			tk_smem[base + before + below] = tk_pack(prefix, (uint32_t)i);
		__syncthreads();
		if (t == 0) {
			uint32_t s = s_eq;
			for (int w = 0; w < nw; w++)
				s += s_wsum[w];
			s_eq = s;
		}
	}
	__syncthreads();
	/* bitonic sort, descending, of ks (a power of two) words */
	for (int size = 2; size <= ks; size <<= 1) {
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			for (int i = t; i < ks / 2; i += G) {
				int lo = 2 * i - (i & (stride - 1));
				int hi = lo + stride;
				bool desc = (lo & size) == 0;
				u64 a = tk_smem[lo], b = tk_smem[hi];
				if ((a < b) == desc) {
					tk_smem[lo] = b;
					tk_smem[hi] = a;
				}
			}
			__syncthreads();
		}
	}
	for (int i = t; i < k; i += G)
		tk_emit<DT>(tk_smem[i], vals, idx, (int64_t)blockIdx.x * k + i);
}

/* ------------------------------------------------------------ reference */

template <int DT>
__global__ void tk_ref_kernel(const typename flyk_elem<DT>::T *x,
			      typename flyk_elem<DT>::T *vals, int64_t *idx,
			      int n, int k)
{
	__shared__ u64 red[1024 / 32];
	__shared__ u64 s_last;
	const typename flyk_elem<DT>::T *xr = x + (int64_t)blockIdx.x * n;
	u64 last = ~0ull;
	for (int r = 0; r < k; r++) {
		u64 best = 0;
		for (int i = threadIdx.x; i < n; i += blockDim.x) {
			u64 v = tk_pack(tk_key<DT>(xr[i]), (uint32_t)i);
			if (v < last && v > best)
				best = v;
		}
		best = tk_warp_max(best);
		if (threadIdx.x % FLYK_WARP == 0)
			red[threadIdx.x / FLYK_WARP] = best;
		__syncthreads();
		if (threadIdx.x == 0) {
			u64 b = 0;
			for (int w = 0; w < (int)(blockDim.x / FLYK_WARP); w++)
				b = red[w] > b ? red[w] : b;
			s_last = b;
			tk_emit<DT>(b, vals, idx, (int64_t)blockIdx.x * k + r);
		}
		__syncthreads();
		last = s_last;
	}
}

/* Gather x[row, idx[i]] (NaN-patterned 0xFF.. when idx is out of range). */
template <int DT>
__global__ void tk_gather_kernel(const typename flyk_elem<DT>::T *x,
				 const int64_t *idx, typename flyk_elem<DT>::T *out,
				 int64_t m, int n, int k)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= m * k)
		return;
	int64_t row = i / k, j = idx[i];
	if (j < 0 || j >= n)
		memset(&out[i], 0xff, sizeof(out[i]));
	else
		out[i] = x[row * n + j];
}

/* ------------------------------------------------------------ host */

static int tk_dims(const struct fly_problem *p, int64_t *m, int *n, int *k)
{
	if (p->op != FLY_OP_TOPK || !(DT_MASK & (1u << p->dtype)))
		return -EINVAL;
	if (p->dims[0] <= 0 || p->dims[1] <= 0 || p->dims[2] <= 0 ||
	    p->dims[1] > 0x7ffffffe || p->dims[2] > p->dims[1])
		return -EINVAL;
	*m = p->dims[0];
	*n = (int)p->dims[1];
	*k = (int)p->dims[2];
	return 0;
}

static int tk_err(void)
{
	return hipGetLastError() == hipSuccess ? 0 : -EIO;
}

#define TK_ARGS(T) (const T *)a->x, (T *)a->values, a->indices

/* ---- warp */

/* 1 warp per row in the middle: flyk_default() starts there. */
static const int64_t warp_wpr[] = {2, 4, 8, 1, 16, 32};
static const int64_t warp_rpb[] = {1, 2, 4, 8};

static int warp_feasible(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n, k;
	if (tk_dims(p, &m, &n, &k) || k > TOPK_WARP_KMAX)
		return -EINVAL;
	int64_t wpr = pr[0], rpb = pr[1];
	int km = k <= 2 ? 2 : k <= 4 ? 4 : k <= 8 ? 8 : k <= 16 ? 16 : 32;
	if (wpr < 1 || rpb < 1 || wpr * rpb * dev->warp > TK_MAXT(km))
		return -EINVAL;
	/* more warps than a row has 16-byte vectors: a smaller group */
	if (wpr > 1 && (wpr / 2) * dev->warp * 4 >= n)
		return -EINVAL;
	if ((m + rpb - 1) / rpb > 0x7fffffff)
		return -EINVAL;
	return 0;
}

template <int DT, int KM>
static int warp_go(const struct flyk_topk_args *a, int64_t m, int n, int k,
		   int wpr, int rpb, hipStream_t s)
{
	typedef typename flyk_elem<DT>::T T;
	unsigned grid = (unsigned)((m + rpb - 1) / rpb);
	unsigned th = (unsigned)(wpr * rpb * FLYK_WARP);
	size_t smem = wpr > 1 ? (size_t)rpb * wpr * TOPK_WARP_KMAX * 8 : 0;
	const void *fn = (const void *)tk_warp_kernel<DT, KM>;
	if (smem > 48 * 1024 &&
	    hipFuncSetAttribute(fn,
				hipFuncAttributeMaxDynamicSharedMemorySize,
				(int)smem) != hipSuccess)
		return -ENOSPC;
	FLYK_GO(grid, th, smem, s, tk_warp_kernel<DT, KM>)(TK_ARGS(T), m, n, k, wpr);
	return tk_err();
}

template <int DT>
static int warp_dt(const struct flyk_topk_args *a, int64_t m, int n, int k,
		   int wpr, int rpb, hipStream_t s)
{
	if (k <= 2)
		return warp_go<DT, 2>(a, m, n, k, wpr, rpb, s);
	if (k <= 4)
		return warp_go<DT, 4>(a, m, n, k, wpr, rpb, s);
	if (k <= 8)
		return warp_go<DT, 8>(a, m, n, k, wpr, rpb, s);
	if (k <= 16)
		return warp_go<DT, 16>(a, m, n, k, wpr, rpb, s);
	return warp_go<DT, 32>(a, m, n, k, wpr, rpb, s);
}

static int warp_launch(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr,
		       const union flyk_args *args, void *stream)
{
	int64_t m = 0;
	int n = 0, k = 0;
	int rc = warp_feasible(dev, p, pr);
	if (rc)
		return rc;
	tk_dims(p, &m, &n, &k);
	const struct flyk_topk_args *a = &args->topk;
	hipStream_t s = (hipStream_t)stream;
	int wpr = (int)pr[0], rpb = (int)pr[1];
	switch (p->dtype) {
	case FLY_DT_FP32:
		return warp_dt<FLY_DT_FP32>(a, m, n, k, wpr, rpb, s);
	case FLY_DT_FP16:
		return warp_dt<FLY_DT_FP16>(a, m, n, k, wpr, rpb, s);
	default:
		return warp_dt<FLY_DT_BF16>(a, m, n, k, wpr, rpb, s);
	}
}

/* ---- radix */

static const int64_t radix_threads[] = {256, 512, 1024};

static int radix_ks(int k)
{
	int ks = 2;
	while (ks < k)
		ks <<= 1;
	return ks;
}

static int radix_feasible(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n, k;
	if (tk_dims(p, &m, &n, &k) || k > TOPK_RADIX_KMAX || m > 0x7fffffff)
		return -EINVAL;
	if (pr[0] < 64 || pr[0] > 1024 || pr[0] % dev->warp)
		return -EINVAL;
	if ((size_t)radix_ks(k) * 8 > dev->smem_per_block_optin)
		return -ENOSPC;
	return 0;
}

template <int DT>
static int radix_dt(const struct flyk_topk_args *a, int64_t m, int n, int k,
		    int th, hipStream_t s)
{
	typedef typename flyk_elem<DT>::T T;
	int ks = radix_ks(k);
	size_t smem = (size_t)ks * 8;
	const void *fn = (const void *)tk_radix_kernel<DT>;
	if (smem > 48 * 1024 &&
	    hipFuncSetAttribute(fn,
				hipFuncAttributeMaxDynamicSharedMemorySize,
				(int)smem) != hipSuccess)
		return -ENOSPC;
	FLYK_GO((unsigned)m, th, smem, s, tk_radix_kernel<DT>)(TK_ARGS(T), n, k, ks);
	return tk_err();
}

static int radix_launch(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr,
			const union flyk_args *args, void *stream)
{
	int64_t m = 0;
	int n = 0, k = 0;
	int rc = radix_feasible(dev, p, pr);
	if (rc)
		return rc;
	tk_dims(p, &m, &n, &k);
	const struct flyk_topk_args *a = &args->topk;
	hipStream_t s = (hipStream_t)stream;
	switch (p->dtype) {
	case FLY_DT_FP32:
		return radix_dt<FLY_DT_FP32>(a, m, n, k, (int)pr[0], s);
	case FLY_DT_FP16:
		return radix_dt<FLY_DT_FP16>(a, m, n, k, (int)pr[0], s);
	default:
		return radix_dt<FLY_DT_BF16>(a, m, n, k, (int)pr[0], s);
	}
}

/* ---- reference */

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n, k;
	if (tk_dims(p, &m, &n, &k) || k > TOPK_REF_KMAX || m > 0x7fffffff)
		return -EINVAL;
	return 0;
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int64_t m = 0;
	int n = 0, k = 0;
	int rc = ref_feasible(dev, p, pr);
	if (rc)
		return rc;
	tk_dims(p, &m, &n, &k);
	const struct flyk_topk_args *a = &args->topk;
	hipStream_t s = (hipStream_t)stream;
	switch (p->dtype) {
	case FLY_DT_FP32:
		FLYK_GO((unsigned)m, 512, 0, s, tk_ref_kernel<FLY_DT_FP32>)(
			TK_ARGS(float), n, k);
		break;
	case FLY_DT_FP16:
		FLYK_GO((unsigned)m, 512, 0, s, tk_ref_kernel<FLY_DT_FP16>)(
			TK_ARGS(uint16_t), n, k);
		break;
	default:
		FLYK_GO((unsigned)m, 512, 0, s, tk_ref_kernel<FLY_DT_BF16>)(
			TK_ARGS(uint16_t), n, k);
		break;
	}
	return tk_err();
}

#if !FLYK_DEVICE_PASS
#define NV(a) (uint32_t)(sizeof(a) / sizeof(a[0])), a

static const struct flyk_variant tk_variants[] = {
	{"topk_ref", FLY_OP_TOPK, DT_MASK, FLY_F_DETERMINISTIC, 1, 0, {},
	 ref_feasible, NULL, ref_launch},
	{"topk_warp", FLY_OP_TOPK, DT_MASK, FLY_F_DETERMINISTIC, 0, 2,
	 {{"wpr", NV(warp_wpr)}, {"rpb", NV(warp_rpb)}}, warp_feasible, NULL,
	 warp_launch},
	{"topk_radix", FLY_OP_TOPK, DT_MASK, FLY_F_DETERMINISTIC, 0, 1,
	 {{"threads", NV(radix_threads)}}, radix_feasible, NULL, radix_launch},
};
#endif

/* ------------------------------------------------------------ case */

struct tk_state {
	void *h_vals;   /* reference values [m, k] */
	int64_t *h_idx; /* reference indices [m, k] */
	void *d_gather; /* x at the candidate's indices */
	size_t vbytes;
};

static int tk_setup(struct flyk_case *c, uint64_t seed)
{
	int64_t m;
	int n, k;
	if (tk_dims(&c->p, &m, &n, &k) || k > TOPK_REF_KMAX)
		return -EOPNOTSUPP;
	size_t es = flyk_dtype_bytes(c->p.dtype);
	size_t mk = (size_t)m * k;
	struct tk_state *st = (struct tk_state *)calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	c->state = st;
	st->vbytes = mk * es;
	void *x, *v, *i, *rv, *ri;
	if (flyk_gpu_case_alloc(c, (size_t)m * n * es, 0, &x) < 0 ||
	    flyk_gpu_case_alloc(c, mk * es, 1, &v) < 0 ||
	    flyk_gpu_case_alloc(c, mk * 8, 1, &i) < 0 ||
	    flyk_gpu_case_alloc(c, mk * es, 0, &rv) < 0 ||
	    flyk_gpu_case_alloc(c, mk * 8, 0, &ri) < 0 ||
	    flyk_gpu_case_alloc(c, mk * es, 0, &st->d_gather) < 0)
		return -ENOMEM;
	int rc = flyk_gpu_fill_random(c->dev, x, (size_t)m * n, c->p.dtype,
				      -4.f, 4.f, seed);
	if (rc)
		return rc;
	struct flyk_topk_args *a = &c->args.topk;
	a->x = x;
	a->values = rv;
	a->indices = (int64_t *)ri;
	rc = ref_launch(c->dev, &c->p, NULL, &c->args, c->dev->stream);
	a->values = v;
	a->indices = (int64_t *)i;
	if (rc)
		return rc;
	st->h_vals = malloc(mk * es);
	st->h_idx = (int64_t *)malloc(mk * 8);
	if (!st->h_vals || !st->h_idx)
		return -ENOMEM;
	rc = flyk_gpu_download(c->dev, st->h_vals, rv, mk * es);
	if (!rc)
		rc = flyk_gpu_download(c->dev, st->h_idx, ri, mk * 8);
	return rc;
}

template <int DT>
static void tk_gather(struct flyk_case *c, int64_t m, int n, int k)
{
	typedef typename flyk_elem<DT>::T T;
	struct tk_state *st = (struct tk_state *)c->state;
	int64_t mk = m * k;
	FLYK_GO((unsigned)((mk + 255) / 256), 256, 0,
		(hipStream_t)c->dev->stream, tk_gather_kernel<DT>)(
		(const T *)c->args.topk.x, c->args.topk.indices,
		(T *)st->d_gather, m, n, k);
}

static int tk_check(struct flyk_case *c, double *max_err)
{
	struct tk_state *st = (struct tk_state *)c->state;
	int64_t m = 0;
	int n = 0, k = 0;
	tk_dims(&c->p, &m, &n, &k);
	size_t mk = (size_t)m * k, es = flyk_dtype_bytes(c->p.dtype);
	*max_err = 0;
	if (c->p.dtype == FLY_DT_FP32)
		tk_gather<FLY_DT_FP32>(c, m, n, k);
	else if (c->p.dtype == FLY_DT_FP16)
		tk_gather<FLY_DT_FP16>(c, m, n, k);
	else
		tk_gather<FLY_DT_BF16>(c, m, n, k);
	if (hipGetLastError() != hipSuccess)
		return -EIO;
	char *hv = (char *)malloc(mk * es), *hg = (char *)malloc(mk * es);
	int64_t *hi = (int64_t *)malloc(mk * 8);
	int rc = -ENOMEM;
	if (!hv || !hg || !hi)
		goto out;
	rc = flyk_gpu_download(c->dev, hv, c->args.topk.values, mk * es);
	if (!rc)
		rc = flyk_gpu_download(c->dev, hg, st->d_gather, mk * es);
	if (!rc)
		rc = flyk_gpu_download(c->dev, hi, c->args.topk.indices, mk * 8);
	if (rc)
		goto out;
	/* values bit-exact vs the reference; each index in range and
	 * pointing at its value; in deterministic mode, indices exact. */
	if (memcmp(hv, st->h_vals, mk * es) || memcmp(hv, hg, mk * es))
		rc = -EDOM;
	for (size_t i = 0; i < mk && !rc; i++)
		if (hi[i] < 0 || hi[i] >= n ||
		    ((c->p.flags & FLY_F_DETERMINISTIC) && hi[i] != st->h_idx[i]))
			rc = -EDOM;
	if (rc)
		*max_err = 1.0;
out:
	free(hv);
	free(hg);
	free(hi);
	return rc;
}

static void tk_fini(struct flyk_case *c)
{
	struct tk_state *st = (struct tk_state *)c->state;
	if (!st)
		return;
	free(st->h_vals);
	free(st->h_idx);
	free(st);
	c->state = NULL;
}

#if !FLYK_DEVICE_PASS
extern "C" const struct flyk_gpu_op flyk_gpu_topk_op = {
	FLY_OP_TOPK, tk_variants, sizeof(tk_variants) / sizeof(tk_variants[0]),
	tk_setup,    tk_check,	  tk_fini,
	NULL,
};
#endif
