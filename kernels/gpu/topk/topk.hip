/*
 * topk/topk.hip -- TopK along the last dim on the GPU: the k largest of each row
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
 *               last winner: slow, obviously right (k <= 128); kept as
 *               the op's reference variant, no longer used by the check.
 *   topk_warp   `wpr` warps per row, `rpb` rows per block; each lane keeps a
 *               sorted top-kmax list in registers (kmax = k rounded up to
 *               2/4/8/16/32), 16-byte loads; lanes merge by k rounds of warp
 *               argmax, warps through shared memory.  k <= 32.
 *   topk_radix  one block of `threads` per row: radix select from the
 *               top (a 12-bit digit, then 8-bit ones; histograms in shared
 *               memory, 8 keys a thread in flight) until the words at or
 *               above the k-th's bucket fit `cap` words of shared memory
 *               (4 k within [2048, 8192]: usually after one pass, none for
 *               n <= cap), one read to gather them, a bitonic sort of them;
 *               more than cap equal keys take the smallest indices in
 *               index order.  k <= 2048.
 *   topk_wq     `wpr` warps per row, `rpb` rows per block (rpb > 1 only
 *               for wpr <= 4); each warp keeps one sorted top-k spread
 *               over its lanes (1, 2 or 4 words a lane: k <= 4 warps);
 *               an element costs a key and a compare against the k-th
 *               best so far (the warp's, or any warp's of the row through
 *               shared memory); the few that pass are inserted one at a
 *               time by ballot + shuffle.  Warp 0 of a row inserts the
 *               other warps' lists.
 *   topk_wqc    (CUDA sm_90) one row over a thread-block cluster of
 *               `cluster` blocks of `wpr` warps: each block runs topk_wq's
 *               scan on its slice of the row, and block 0 inserts the
 *               other blocks' lists, read from their shared memory.  For
 *               few long rows (a vocabulary's logits at decode), where
 *               one block a row leaves the other SMs idle.
 *   topk_mb     one row over `bpr` blocks of `threads` (one launch, no
 *               cluster): each block radix-selects its slice's top k
 *               (keys in registers, 8-bit digits from the top, stopping
 *               when the digit's bucket holds exactly the words needed;
 *               ties at the slice's k-th key by index), sorts them and
 *               writes them to the workspace; the row's last block to
 *               finish (a counter a row, set back to zero by that block)
 *               merges the sorted lists by a tree of bitonic merges.
 *               Few long rows (n >= 32768, m < 2 rows an SM), k <= 128;
 *               needs the op's workspace (flyk.h FLYK_TOPK_WS_BYTES,
 *               counters zero): -EINVAL without it.
 *
 * The case (setup/check) has no reference output: tk_check_kernel checks
 * any k against x itself (indices valid, values exact, order strict, and
 * the count of row elements above the last output), in one read of x.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_int.h"
#include "prim/cluster.h"
#include "prim/flyk_gpu.h"
#include "prim/warp.h"

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
			u64 best = flyk_warp_max_u64(l[0]);
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

/* ------------------------------------------------------------ wq */

/* A warp's running top-k, one sorted list spread over the lanes: lane l,
 * slot s holds rank l + warp * s (0: empty; every real word is > 0, as
 * ~index > 0).  thr is rank k-1, the bar a new word must pass.  All
 * members are warp-uniform except w; every call is made by the whole warp
 * with warp-uniform arguments. */
template <int KW> struct tk_wq {
	u64 w[KW];
	u64 thr;
	int k;
	__device__ __forceinline__ void init(int k_)
	{
#pragma unroll
		for (int s = 0; s < KW; s++)
			w[s] = 0;
		thr = 0;
		k = k_;
	}
	/* Insert c (warp-uniform, c > thr). */
	__device__ __forceinline__ void insert(u64 c)
	{
		int lane = threadIdx.x % FLYK_WARP, pos = 0;
		u64 rot[KW], t = 0;
#pragma unroll
		for (int s = 0; s < KW; s++) {
			pos += __popcll((u64)FLYK_BALLOT(w[s] > c));
			rot[s] = flyk_shfl_u64(w[s], (lane + FLYK_WARP - 1) % FLYK_WARP);
		}
#pragma unroll
		for (int s = 0; s < KW; s++) {
			int q = lane + s * FLYK_WARP;
			u64 up = lane ? rot[s] : s ? rot[s > 0 ? s - 1 : 0] : 0;
			w[s] = q < pos ? w[s] : q == pos ? c : q < k ? up : 0;
			if (s == (k - 1) / FLYK_WARP)
				t = w[s];
		}
		thr = flyk_shfl_u64(t, (k - 1) % FLYK_WARP);
	}
	/* Start from the k best of one word a lane (distinct words or 0),
	 * by a bitonic sort over the warp: one list of real elements with a
	 * high bar at once, instead of ~k ln(n) single inserts from empty.
	 * KW == 1 only; the queue must be empty. */
	__device__ __forceinline__ void seed(u64 v)
	{
		int lane = threadIdx.x % FLYK_WARP;
#pragma unroll
		for (int size = 2; size <= FLYK_WARP; size <<= 1) {
#pragma unroll
			for (int st = size / 2; st > 0; st >>= 1) {
				u64 o = flyk_shfl_xor_u64(v, st);
				bool keep_max = ((lane & size) == 0) == ((lane & st) == 0);
				v = keep_max == (o > v) ? o : v;
			}
		}
		w[0] = lane < k ? v : 0;
		thr = flyk_shfl_u64(w[0], k - 1);
	}
	/* Each lane with cand offers its word v; in lane order. */
	__device__ __forceinline__ void offer(u64 v, bool cand)
	{
		u64 mask = (u64)FLYK_BALLOT(cand);
		while (mask) {
			int src = __popcll((mask & (~mask + 1)) - 1);
			mask &= mask - 1;
			u64 c = flyk_shfl_u64(v, src);
			if (c > thr)
				insert(c);
		}
	}
};

/* Elements [lo, hi) of the row, one per lane (the unaligned head and the
 * tail: fewer than a vector each, unless the row is not element-aligned). */
template <int DT, int KW>
__device__ __forceinline__ void tk_wq_scalar(tk_wq<KW> &Q,
					     const typename flyk_elem<DT>::T *xr,
					     int lo, int hi, int t0, int T_,
					     int base)
{
	int lane = threadIdx.x % FLYK_WARP;
	for (int i0 = lo + t0; i0 < hi; i0 += T_) {
		int i = i0 + lane;
		u64 v = i < hi ? tk_pack(tk_key<DT>(xr[i]), (uint32_t)(base + i))
			       : 0;
		Q.offer(v, v > Q.thr);
	}
}

/* The step (16 elements a lane, their keys) and the list need more than the
 * 64 registers of a 1024-thread block (ptxas spills 28-52 bytes there):
 * bound to 512 threads (wpr * rpb <= 16 warps). */
#define TK_WQ_MAXT 512

/* Elements [0, n) of @p xs, which are the row's elements base .. base +
 * n - 1, offered to warp wir's Q by the T_ / 32 warps that share them;
 * @p sbar is their shared bar (a key, in shared memory).  Each warp keeps
 * its top-k as a tk_wq; an element costs a key and a compare against a bar
 * (the warp's own rank k-1, or any sharing warp's, in *sbar: either one
 * has k words above it), and only the rare ones that pass go through the
 * warp-serial insert. */
template <int DT, int KW>
__device__ __forceinline__ void tk_wq_scan(tk_wq<KW> &Q,
					   const typename flyk_elem<DT>::T *xs,
					   int n, int base, int wir, int T_,
					   uint32_t *sbar)
{
	typedef typename flyk_elem<DT>::T T;
	/* a step: U vectors a lane, 16 elements (more spills for 16-bit) */
	enum { VEC = 16 / sizeof(T), U = 16 / VEC };
	struct alignas(16) V {
		T e[VEC];
	};
	int lane = threadIdx.x % FLYK_WARP;
	uintptr_t a = (uintptr_t)xs;
	int head = a % sizeof(T) ? n : (int)(((16 - a % 16) % 16) / sizeof(T));
	head = head < n ? head : n;
	int nv = (n - head) / VEC;
	const V *xv = (const V *)(xs + head);
	for (int b = wir * FLYK_WARP * U; b < nv; b += T_ * U) {
		V v[U];
#pragma unroll
		for (int u = 0; u < U; u++) { /* past nv: a duplicate, unused */
			int j = b + u * FLYK_WARP + lane;
			v[u] = xv[j < nv ? j : nv - 1];
		}
		u64 mx = 0; /* the seed's word of this lane: in already */
		if (KW == 1 && b < T_ * U) { /* first step: Q empty */
#pragma unroll
			for (int u = 0; u < U; u++) {
				int j = b + u * FLYK_WARP + lane;
#pragma unroll
				for (int e = 0; e < VEC; e++) {
					u64 w = tk_pack(tk_key<DT>(v[u].e[e]),
							(uint32_t)(base + head +
								   j * VEC + e));
					mx = j < nv && w > mx ? w : mx;
				}
			}
			Q.seed(mx);
		}
		uint32_t bar = (uint32_t)(Q.thr >> 32), sb = *sbar;
		bar = bar > sb ? bar : sb;
		bool any[U], all = false;
#pragma unroll
		for (int u = 0; u < U; u++) {
			any[u] = false;
			bool in = b + u * FLYK_WARP + lane < nv;
#pragma unroll
			for (int e = 0; e < VEC; e++)
				any[u] |= in && tk_key<DT>(v[u].e[e]) >= bar;
			all |= any[u];
		}
		if (!FLYK_BALLOT(all))
			continue;
#pragma unroll
		for (int u = 0; u < U; u++) {
			int j = b + u * FLYK_WARP + lane;
			if (!FLYK_BALLOT(any[u]))
				continue;
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				uint32_t key = tk_key<DT>(v[u].e[e]);
				u64 w = tk_pack(key, (uint32_t)(base + head +
								j * VEC + e));
				Q.offer(w, j < nv && key >= bar && w > Q.thr &&
					       w != mx);
			}
		}
		if (lane == 0 && Q.thr)
			atomicMax(sbar, (uint32_t)(Q.thr >> 32));
	}
	tk_wq_scalar<DT, KW>(Q, xs, 0, head, wir * FLYK_WARP, T_, base);
	tk_wq_scalar<DT, KW>(Q, xs, head + nv * VEC, n, wir * FLYK_WARP, T_,
			     base);
}

/* The wpr > 1 warps of a row (this one warp, wir-th of its row) into the
 * row's first warp's Q: each warp's list to @p sm (L = KW * 32 words a
 * warp), then warp 0 of the row inserts the others', each sorted, each
 * cut at the first word under its bar.  Every thread of the block calls
 * it (a __syncthreads). */
template <int KW>
__device__ __forceinline__ void tk_wq_merge_warps(tk_wq<KW> &Q, u64 *sm,
						  int warp, int wir, int wpr,
						  int k)
{
	enum { L = KW * FLYK_WARP };
	int lane = threadIdx.x % FLYK_WARP;
#pragma unroll
	for (int s = 0; s < KW; s++)
		sm[(size_t)warp * L + s * FLYK_WARP + lane] = Q.w[s];
	__syncthreads();
	if (wir == 0) {
		for (int o = 1; o < wpr; o++) {
			const u64 *ol = sm + (size_t)(warp + o) * L;
			for (int r = 0; r < k && ol[r] > Q.thr; r++)
				Q.insert(ol[r]);
		}
	}
}

/* `wpr` warps per row, `rpb` rows per block: tk_wq_scan, then warp 0 of
 * the row merges the others' lists (tk_wq_merge_warps). */
template <int DT, int KW>
__global__ void __launch_bounds__(TK_WQ_MAXT)
	tk_wq_kernel(const typename flyk_elem<DT>::T *x,
		     typename flyk_elem<DT>::T *vals, int64_t *idx, int64_t m,
		     int n, int k, int wpr)
{
	typedef typename flyk_elem<DT>::T T;
	FLYK_DYN_SMEM(u64, tk_smem); /* wpr > 1: each warp's list, L words */
	__shared__ uint32_t s_bar[TK_WQ_MAXT / 32]; /* per row in block: a key */
	int warp = threadIdx.x / FLYK_WARP, lane = threadIdx.x % FLYK_WARP;
	int rib = warp / wpr, wir = warp % wpr; /* row in block, warp in row */
	int64_t row = (int64_t)blockIdx.x * (blockDim.x / FLYK_WARP / wpr) + rib;
	int T_ = wpr * FLYK_WARP;
	bool valid = row < m;
	const T *xr = x + (valid ? row : 0) * (int64_t)n;
	if (threadIdx.x < TK_WQ_MAXT / 32)
		s_bar[threadIdx.x] = 0;
	__syncthreads();
	tk_wq<KW> Q;
	Q.init(k);
	if (valid)
		tk_wq_scan<DT, KW>(Q, xr, n, 0, wir, T_, &s_bar[rib]);
	if (wpr > 1)
		tk_wq_merge_warps<KW>(Q, tk_smem, warp, wir, wpr, k);
	if (valid && wir == 0) {
#pragma unroll
		for (int s = 0; s < KW; s++)
			if (lane + s * FLYK_WARP < k)
				tk_emit<DT>(Q.w[s], vals, idx,
					    row * k + lane + s * FLYK_WARP);
	}
}

#if FLYK_HAS_CLUSTERS
/* One row over a cluster of blocks (grid = m * cluster): block r of the
 * cluster scans its slice of the row (a multiple of 16 elements) with all
 * its warps as tk_wq_kernel does one row, its warp 0 merges the block's
 * warps, and block 0's warp 0 then inserts the other blocks' lists, read
 * from their shared memory (each sorted, each cut at the first word under
 * its bar). */
template <int DT, int KW>
__global__ void __launch_bounds__(TK_WQ_MAXT)
	tk_wqc_kernel(const typename flyk_elem<DT>::T *x,
		      typename flyk_elem<DT>::T *vals, int64_t *idx, int64_t m,
		      int n, int k)
{
	typedef typename flyk_elem<DT>::T T;
	enum { L = KW * FLYK_WARP };
	FLYK_DYN_SMEM(u64, tk_smem); /* each warp's list, L words */
	__shared__ uint32_t s_bar;
	cg::cluster_group cl = cg::this_cluster();
	int CL = (int)cl.num_blocks(), rank = (int)cl.block_rank();
	int warp = threadIdx.x / FLYK_WARP, lane = threadIdx.x % FLYK_WARP;
	int wpr = (int)(blockDim.x / FLYK_WARP);
	int64_t row = blockIdx.x / CL;
	const T *xr = x + row * (int64_t)n;
	int chunk = ((n + CL - 1) / CL + 15) / 16 * 16;
	int lo = rank * chunk < n ? rank * chunk : n;
	int hi = lo + chunk < n ? lo + chunk : n;
	if (threadIdx.x == 0)
		s_bar = 0;
	__syncthreads();
	tk_wq<KW> Q;
	Q.init(k);
	tk_wq_scan<DT, KW>(Q, xr + lo, hi - lo, lo, warp, wpr * FLYK_WARP,
			   &s_bar);
	if (wpr > 1)
		tk_wq_merge_warps<KW>(Q, tk_smem, warp, warp, wpr, k);
	if (warp == 0) /* the block's list, rank order, for block 0 */
#pragma unroll
		for (int s = 0; s < KW; s++)
			tk_smem[s * FLYK_WARP + lane] = Q.w[s];
	cl.sync();
	if (rank == 0 && warp == 0) {
		for (int o = 1; o < CL; o++) {
			const u64 *ol = cl.map_shared_rank(tk_smem, o);
			for (int r = 0; r < k && ol[r] > Q.thr; r++)
				Q.insert(ol[r]);
		}
#pragma unroll
		for (int s = 0; s < KW; s++)
			if (lane + s * FLYK_WARP < k)
				tk_emit<DT>(Q.w[s], vals, idx,
					    row * k + lane + s * FLYK_WARP);
	}
	cl.sync(); /* no block leaves while block 0 reads its list */
}
#endif

/* ------------------------------------------------------------ radix */

/* Bitonic sort, descending, of @p ks (a power of two) words of @p s by
 * the whole block. */
__device__ __forceinline__ void tk_sort(u64 *s, int ks)
{
	int t = threadIdx.x, G = blockDim.x;
	for (int size = 2; size <= ks; size <<= 1) {
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			for (int i = t; i < ks / 2; i += G) {
				int lo = 2 * i - (i & (stride - 1));
				int hi = lo + stride;
				bool desc = (lo & size) == 0;
				u64 a = s[lo], b = s[hi];
				if ((a < b) == desc) {
					s[lo] = b;
					s[hi] = a;
				}
			}
			__syncthreads();
		}
	}
}

#define TK_R_D0 12 /* the first digit's bits: 4096 counters */

/* The key bits under which one value's keys never differ (bf16: 16,
 * fp16: 8): radix selects stop there. */
template <int DT> __device__ __forceinline__ int tk_low_bits()
{
	return DT == FLY_DT_BF16 ? 16 : DT == FLY_DT_FP16 ? 8 : 0;
}

/* f(key, i) for every element i of the row @p xr, U keys a thread loaded
 * before any is used (U loads in flight). */
template <int DT, int U, class F>
__device__ __forceinline__ void tk_scan(const typename flyk_elem<DT>::T *xr,
					int n, F f)
{
	int t = threadIdx.x, G = blockDim.x;
	for (int base = 0; base < n; base += U * G) {
		uint32_t kv[U];
#pragma unroll
		for (int j = 0; j < U; j++) {
			int i = base + j * G + t;
			kv[j] = i < n ? tk_key<DT>(xr[i]) : 0;
		}
#pragma unroll
		for (int j = 0; j < U; j++)
			if (base + j * G + t < n)
				f(kv[j], base + j * G + t);
	}
}

/* The digit of the @p kk-th largest word among the @p nb counters of @p h
 * (digit nb - 1 first), by the whole block: writes the prefix with that
 * digit, kk within it and its count to @p sel (s_w: a word a warp). */
__device__ __forceinline__ void tk_digit(const uint32_t *h, int nb,
					 uint32_t prefix, int shift,
					 uint32_t kk, uint32_t *sel,
					 uint32_t *s_w)
{
	int t = threadIdx.x, G = blockDim.x;
	int warp = t / FLYK_WARP, lane = t % FLYK_WARP, nw = G / FLYK_WARP;
	int per = (nb + G - 1) / G, top = nb - 1 - t * per;
	uint32_t s = 0;
	for (int d = 0; d < per && top - d >= 0; d++)
		s += h[top - d];
	uint32_t inc = s; /* inclusive scan, lane 0 holding the top digits */
	for (int o = 1; o < FLYK_WARP; o <<= 1) {
		uint32_t v = FLYK_SHFL(inc, lane >= o ? lane - o : lane);
		if (lane >= o)
			inc += v;
	}
	if (lane == FLYK_WARP - 1)
		s_w[warp] = inc;
	__syncthreads();
	uint32_t above = inc - s;
	for (int w = 0; w < warp && w < nw; w++)
		above += s_w[w];
	if (s && above < kk && kk <= above + s) {
		for (int d = 0; d < per && top - d >= 0; d++) {
			uint32_t c = h[top - d];
			if (above + c >= kk) {
				sel[0] = prefix | ((uint32_t)(top - d) << shift);
				sel[1] = kk - above;
				sel[2] = c;
				break;
			}
			above += c;
		}
	}
	__syncthreads();
}

/* The words of the row whose key under @p M is above @p P, or equal
 * unless @p gt_only, into @p arr (their count at @p s_n; the first @p cap
 * kept), U keys a thread in flight. */
template <int DT, int U>
__device__ __forceinline__ void tk_r_gather(const typename flyk_elem<DT>::T *xr,
					    int n, uint32_t M, uint32_t P,
					    bool gt_only, u64 *arr, uint32_t cap,
					    uint32_t *s_n)
{
	tk_scan<DT, U>(xr, n, [&](uint32_t key, int i) {
		uint32_t mk = key & M;
		if (mk > P || (!gt_only && mk == P)) {
			uint32_t o = atomicAdd(s_n, 1u);
			if (o < cap)
				arr[o] = tk_pack(key, (uint32_t)i);
		}
	});
}

/* One block a row.  Radix select from the top -- a 12-bit digit, then
 * 8-bit ones -- narrows the row to the words at or above the k-th's
 * bucket, until they fit the `cap` words of shared memory (usually after
 * the first pass); one more read gathers them and a bitonic sort of them
 * gives the k.  A bucket that never fits (more than cap equal keys) takes
 * its kk smallest indices in index order. */
template <int DT, int U>
__global__ void __launch_bounds__(1024)
	tk_radix_kernel(const typename flyk_elem<DT>::T *x,
			typename flyk_elem<DT>::T *vals, int64_t *idx, int n,
			int k, int cap)
{
	typedef typename flyk_elem<DT>::T T;
	FLYK_DYN_SMEM(u64, tk_smem); /* cap words */
	__shared__ uint32_t hist[1 << TK_R_D0];
	__shared__ uint32_t s_sel[3], s_n, s_eq, s_w[32];
	const T *xr = x + (int64_t)blockIdx.x * n;
	int t = threadIdx.x, G = blockDim.x;
	int low = tk_low_bits<DT>();
	uint32_t P = 0, M = 0, kk = (uint32_t)k, tot = (uint32_t)n;
	int shift = 32;
	/* k - kk words lie above P's bucket, tot in it */
	while ((uint32_t)k - kk + tot > (uint32_t)cap && shift > low) {
		int w = shift == 32 ? TK_R_D0 : shift - low < 8 ? shift - low : 8;
		int nb = 1 << w;
		shift -= w;
		for (int i = t; i < nb; i += G)
			hist[i] = 0;
		__syncthreads();
		tk_scan<DT, U>(xr, n, [&](uint32_t key, int) {
			if ((key & M) == P)
				atomicAdd(&hist[(key >> shift) & (nb - 1)], 1u);
		});
		__syncthreads();
		tk_digit(hist, nb, P, shift, kk, s_sel, s_w);
		P = s_sel[0];
		kk = s_sel[1];
		tot = s_sel[2];
		M |= (uint32_t)(nb - 1) << shift;
		__syncthreads();
	}
	if (t == 0) {
		s_n = 0;
		s_eq = 0;
	}
	__syncthreads();
	uint32_t ngt = (uint32_t)k - kk;
	bool fits = ngt + tot <= (uint32_t)cap;
	tk_r_gather<DT, U>(xr, n, M, P, !fits, tk_smem, (uint32_t)cap, &s_n);
	__syncthreads();
	uint32_t cnt = s_n < (uint32_t)cap ? s_n : (uint32_t)cap;
	if (!fits) {
		/* tot equal keys (P): the kk of smallest index, in order */
		int nw = G / FLYK_WARP, warp = t / FLYK_WARP, lane = t % FLYK_WARP;
		for (int c0 = 0; c0 < n; c0 += G) {
			__syncthreads();
			if (s_eq >= kk)
				break;
			int i = c0 + t;
			uint32_t key = i < n ? tk_key<DT>(xr[i]) : 0;
			bool eq = i < n && (key & M) == P;
			u64 bal = (u64)FLYK_BALLOT(eq);
			uint32_t below = (uint32_t)__popcll(bal & ((1ull << lane) - 1ull));
			if (lane == 0)
				s_w[warp] = (uint32_t)__popcll(bal);
			__syncthreads();
			uint32_t before = s_eq;
			for (int w = 0; w < warp; w++)
				before += s_w[w];
			if (eq && before + below < kk)
				tk_smem[ngt + before + below] = tk_pack(key, (uint32_t)i);
			__syncthreads();
			if (t == 0) {
				uint32_t s = s_eq;
				for (int w = 0; w < nw; w++)
					s += s_w[w];
				s_eq = s;
			}
		}
		cnt = (uint32_t)k;
	}
	int ks = 2;
	while ((uint32_t)ks < cnt)
		ks <<= 1;
	for (int i = (int)cnt + t; i < ks; i += G)
		tk_smem[i] = 0;
	__syncthreads();
	tk_sort(tk_smem, ks);
	for (int i = t; i < k; i += G)
		tk_emit<DT>(tk_smem[i], vals, idx, (int64_t)blockIdx.x * k + i);
}

/* ------------------------------------------------------------ mb */

/* topk_mb: a row over `bpr` blocks, one launch.  Block b radix-selects
 * the top k of its slice (keys in registers, EPT a thread, 8-bit digits
 * from the top in shared memory, stopping as soon as the digit's bucket
 * holds exactly the words still needed), sorts them (bitonic, K2 words,
 * zeros after its k) and writes them to the workspace; the row's last
 * block to finish (a counter per row at the workspace's head, which it
 * sets back to zero) merges the bpr sorted lists by a tree of bitonic
 * merges and writes the k.  Ties at the slice's k-th key go to the
 * smaller indices (the words are key << 32 | ~index: unique). */

#define TK_MB_EQC 512 /* (EPT, warp) counts of the ordered tie gather */

/* The @p nl sorted (descending) lists of @p ks words at @p s into the
 * first one's top ks, sorted: pairs of lists by a tree, each pair by a
 * half-cleaner (the first list against the second reversed: a bitonic
 * sequence holding the pair's top ks) and a bitonic merge.  nl is a power
 * of two. */
__device__ __forceinline__ void tk_mb_merge(u64 *s, int nl, int ks)
{
	int t = threadIdx.x, G = blockDim.x;
	for (int len = 1; len < nl; len <<= 1) {
		int pairs = nl / (2 * len);
		for (int i = t; i < pairs * ks; i += G) {
			u64 *a = s + (size_t)(i / ks) * 2 * len * ks;
			const u64 *b = a + (size_t)len * ks;
			int j = i % ks;
			u64 y = b[ks - 1 - j];
			a[j] = a[j] > y ? a[j] : y;
		}
		__syncthreads();
		for (int st = ks >> 1; st > 0; st >>= 1) {
			for (int i = t; i < pairs * (ks / 2); i += G) {
				u64 *a = s + (size_t)(i / (ks / 2)) * 2 * len * ks;
				int j = i % (ks / 2);
				int lo = 2 * j - (j & (st - 1)), hi = lo + st;
				u64 x = a[lo], y = a[hi];
				if (x < y) {
					a[lo] = y;
					a[hi] = x;
				}
			}
			__syncthreads();
		}
	}
}

/* The radix select of one slice (keys @p key, EPT a thread, @p cnt
 * valid): the prefix P under mask M of the slice's k-th word, kk the
 * words needed from P's bucket (tot of them there).  16-bit dtypes stop
 * at the bits their keys hold (bf16: 16, fp16: 24; the bits under them
 * are the same for one value). */
template <int DT, int EPT>
__device__ __forceinline__ void tk_mb_select(const uint32_t (&key)[EPT],
					     int cnt, uint32_t k,
					     uint32_t (*hist)[256],
					     uint32_t *sel, uint32_t *s_w,
					     uint32_t &P,
					     uint32_t &M, uint32_t &kk,
					     uint32_t &tot)
{
	int t = threadIdx.x, G = blockDim.x;
	int low = tk_low_bits<DT>();
	P = 0;
	M = 0;
	tot = (uint32_t)cnt;
	kk = k < tot ? k : tot;
	for (int shift = 24, ps = 0; shift >= low && kk < tot; shift -= 8, ps++) {
		uint32_t *h = hist[ps & 1];
		for (int i = t; i < 256; i += G)
			hist[(ps + 1) & 1][i] = 0; /* the next pass's */
		/* runs of one digit in this thread's keys: one atomic each */
		uint32_t cd = 0, cc = 0;
#pragma unroll
		for (int j = 0; j < EPT; j++) {
			if (j * G + t >= cnt || (key[j] & M) != P)
				continue;
			uint32_t d = (key[j] >> shift) & 255u;
			if (cc && d != cd) {
				atomicAdd(&h[cd], cc);
				cc = 0;
			}
			cd = d;
			cc++;
		}
		if (cc)
			atomicAdd(&h[cd], cc);
		__syncthreads();
		tk_digit(h, 256, P, shift, kk, sel, s_w);
		P = sel[0];
		kk = sel[1];
		tot = sel[2];
		M |= 255u << shift;
	}
}

template <int DT, int EPT>
__global__ void __launch_bounds__(EPT >= 32 ? 512 : 1024)
	tk_mb_kernel(const typename flyk_elem<DT>::T *x,
		     typename flyk_elem<DT>::T *vals, int64_t *idx, int n,
		     int k, int bpr, int ks, uint32_t *ctr, u64 *cand)
{
	typedef typename flyk_elem<DT>::T T;
	FLYK_DYN_SMEM(u64, tk_smem); /* bpr lists of ks words (the last
					block); this block's list first */
	__shared__ uint32_t hist[2][256];
	__shared__ uint32_t s_sel[3], s_n, s_last, s_w[32];
	__shared__ uint32_t s_eqc[TK_MB_EQC];
	int t = threadIdx.x, G = blockDim.x;
	int64_t row = blockIdx.x / bpr;
	int b = (int)(blockIdx.x % bpr);
	int chunk = (n + bpr - 1) / bpr;
	int lo = b * chunk < n ? b * chunk : n;
	int cnt = n - lo < chunk ? n - lo : chunk;
	const T *xs = x + row * (int64_t)n + lo;
	uint32_t key[EPT];
#pragma unroll
	for (int j = 0; j < EPT; j++)
		key[j] = j * G + t < cnt ? tk_key<DT>(xs[j * G + t]) : 0;
	for (int i = t; i < ks; i += G)
		tk_smem[i] = 0;
	for (int i = t; i < 256; i += G)
		hist[0][i] = 0;
	if (t == 0)
		s_n = 0;
	__syncthreads();
	uint32_t P, M, kk, tot;
	tk_mb_select<DT, EPT>(key, cnt, (uint32_t)k, hist, s_sel, s_w, P, M, kk,
			      tot);
	/* words above P's bucket: k_eff - kk of them, anywhere in
	 * [0, k_eff - kk); P's bucket: all when it holds kk, else the kk of
	 * smallest index, by rank, in [k_eff - kk, k_eff) */
	uint32_t keff = (uint32_t)(k < cnt ? k : cnt), ngt = keff - kk;
	bool ties = tot > kk;
	int nw = G / FLYK_WARP, warp = t / FLYK_WARP, lane = t % FLYK_WARP;
#pragma unroll
	for (int j = 0; j < EPT; j++) {
		bool in = j * G + t < cnt;
		uint32_t mk = key[j] & M;
		u64 w = tk_pack(key[j], (uint32_t)(lo + j * G + t));
		if (in && (mk > P || (mk == P && !ties)))
			tk_smem[atomicAdd(&s_n, 1u)] = w;
		if (ties) { /* block-uniform */
			u64 bal = (u64)FLYK_BALLOT(in && mk == P);
			if (lane == 0)
				s_eqc[j * nw + warp] = (uint32_t)__popcll(bal);
		}
	}
	if (ties) {
		__syncthreads();
		if (t < FLYK_WARP) { /* exclusive scan of EPT * nw counts */
			int tot_e = EPT * nw, per = (tot_e + FLYK_WARP - 1) / FLYK_WARP;
			uint32_t s = 0;
			for (int i = t * per; i < tot_e && i < (t + 1) * per; i++)
				s += s_eqc[i];
			uint32_t inc = s;
			for (int o = 1; o < FLYK_WARP; o <<= 1) {
				uint32_t v = FLYK_SHFL(inc, t >= o ? t - o : t);
				if (t >= o)
					inc += v;
			}
			uint32_t run = inc - s;
			for (int i = t * per; i < tot_e && i < (t + 1) * per; i++) {
				uint32_t c = s_eqc[i];
				s_eqc[i] = run;
				run += c;
			}
		}
		__syncthreads();
#pragma unroll
		for (int j = 0; j < EPT; j++) {
			bool e = j * G + t < cnt && (key[j] & M) == P;
			u64 bal = (u64)FLYK_BALLOT(e);
			uint32_t r = s_eqc[j * nw + warp] +
				     (uint32_t)__popcll(bal & ((1ull << lane) - 1ull));
			if (e && r < kk)
				tk_smem[ngt + r] =
					tk_pack(key[j], (uint32_t)(lo + j * G + t));
		}
	}
	__syncthreads();
	tk_sort(tk_smem, ks);
	u64 *mine = cand + ((size_t)row * bpr + b) * ks;
	for (int i = t; i < ks; i += G)
		mine[i] = tk_smem[i];
	__threadfence();
	__syncthreads();
	if (t == 0)
		s_last = atomicAdd(&ctr[row], 1u) == (uint32_t)bpr - 1;
	__syncthreads();
	if (!s_last)
		return;
	__threadfence();
	const volatile u64 *all = cand + (size_t)row * bpr * ks;
	for (int i = t; i < bpr * ks; i += G)
		tk_smem[i] = all[i];
	__syncthreads();
	tk_mb_merge(tk_smem, bpr, ks);
	for (int i = t; i < k; i += G)
		tk_emit<DT>(tk_smem[i], vals, idx, row * k + i);
	if (t == 0)
		ctr[row] = 0; /* for the next launch (and a graph's replay) */
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
		best = flyk_warp_max_u64(best);
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

__device__ __forceinline__ uint32_t tk_raw(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint32_t tk_raw(uint16_t v) { return v; }

/* The check, without a reference (any k): one block per row writes
 * bad[row] = 1 unless every output index is in range, its value is
 * x[row, idx] bit for bit, the outputs' words (key << 32 | ~index) fall
 * strictly, and the row holds exactly as many elements above the last
 * output as the outputs do (det: words, so exactly k-1; else keys, so
 * ties at the last value may be any of the tied).  Strictly falling words
 * make the k outputs k distinct elements of the row; the count makes
 * them the top k. */
template <int DT>
__global__ void __launch_bounds__(512)
	tk_check_kernel(const typename flyk_elem<DT>::T *x,
			const typename flyk_elem<DT>::T *vals,
			const int64_t *idx, int n, int k, int det,
			unsigned char *bad)
{
	typedef typename flyk_elem<DT>::T T;
	__shared__ uint32_t s_bad, s_above, s_cnt;
	const T *xr = x + (int64_t)blockIdx.x * n;
	const T *vr = vals + (int64_t)blockIdx.x * k;
	const int64_t *ir = idx + (int64_t)blockIdx.x * k;
	int t = threadIdx.x, G = blockDim.x;
	if (t == 0) {
		s_bad = 0;
		s_above = 0;
		s_cnt = 0;
	}
	__syncthreads();
	for (int i = t; i < k; i += G) {
		int64_t j = ir[i], jp = i ? ir[i - 1] : 0;
		if (j < 0 || j >= n || jp < 0 || jp >= n ||
		    tk_raw(vr[i]) != tk_raw(xr[j])) {
			atomicAdd(&s_bad, 1u);
			continue;
		}
		u64 w = tk_pack(tk_key<DT>(xr[j]), (uint32_t)j);
		if (i && tk_pack(tk_key<DT>(xr[jp]), (uint32_t)jp) <= w)
			atomicAdd(&s_bad, 1u);
	}
	__syncthreads();
	if (s_bad) {
		if (t == 0)
			bad[blockIdx.x] = 1;
		return;
	}
	int64_t jl = ir[k - 1];
	uint32_t kl = tk_key<DT>(xr[jl]);
	u64 wl = tk_pack(kl, (uint32_t)jl);
	for (int i = t; i < k - 1; i += G)
		if (tk_key<DT>(xr[ir[i]]) > kl)
			atomicAdd(&s_above, 1u);
	uint32_t c = 0;
	for (int i = t; i < n; i += G) {
		uint32_t key = tk_key<DT>(xr[i]);
		c += det ? tk_pack(key, (uint32_t)i) > wl : key > kl;
	}
	atomicAdd(&s_cnt, c);
	__syncthreads();
	if (t == 0)
		bad[blockIdx.x] = s_cnt != (det ? (uint32_t)k - 1 : s_above);
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

/* ---- wq */

#define TOPK_WQ_KMAX (4 * FLYK_WARP)

static const int64_t wq_wpr[] = {2, 4, 8, 1, 16};
static const int64_t wq_rpb[] = {1, 2, 4, 8};

static int wq_feasible(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n, k;
	if (tk_dims(p, &m, &n, &k) || k > TOPK_WQ_KMAX || dev->warp != FLYK_WARP)
		return -EINVAL;
	int64_t wpr = pr[0], rpb = pr[1];
	if (wpr < 1 || rpb < 1 || wpr * rpb * dev->warp > TK_WQ_MAXT)
		return -EINVAL;
	/* several rows a block only for short rows (few warps each) */
	if (rpb > 1 && wpr > 4)
		return -EINVAL;
	/* half the warps at least get 64 bytes a lane (fp32: one step) */
	int64_t step = dev->warp * 4 * (16 / (int64_t)flyk_dtype_bytes(p->dtype));
	if (wpr > 1 && (wpr / 2) * step >= n)
		return -EINVAL;
	if ((m + rpb - 1) / rpb > 0x7fffffff)
		return -EINVAL;
	return 0;
}

template <int DT, int KW>
static int wq_go(const struct flyk_topk_args *a, int64_t m, int n, int k,
		 int wpr, int rpb, hipStream_t s)
{
	typedef typename flyk_elem<DT>::T T;
	unsigned grid = (unsigned)((m + rpb - 1) / rpb);
	unsigned th = (unsigned)(wpr * rpb * FLYK_WARP);
	size_t smem = wpr > 1 ? (size_t)th * KW * 8 : 0; /* <= 16 KiB */
	FLYK_GO(grid, th, smem, s, tk_wq_kernel<DT, KW>)(TK_ARGS(T), m, n, k, wpr);
	return tk_err();
}

template <int DT>
static int wq_dt(const struct flyk_topk_args *a, int64_t m, int n, int k,
		 int wpr, int rpb, hipStream_t s)
{
	if (k <= FLYK_WARP)
		return wq_go<DT, 1>(a, m, n, k, wpr, rpb, s);
	if (k <= 2 * FLYK_WARP)
		return wq_go<DT, 2>(a, m, n, k, wpr, rpb, s);
	return wq_go<DT, 4>(a, m, n, k, wpr, rpb, s);
}

static int wq_launch(const struct flyk_device *dev,
		     const struct fly_problem *p, const int64_t *pr,
		     const union flyk_args *args, void *stream)
{
	int64_t m = 0;
	int n = 0, k = 0;
	int rc = wq_feasible(dev, p, pr);
	if (rc)
		return rc;
	tk_dims(p, &m, &n, &k);
	const struct flyk_topk_args *a = &args->topk;
	hipStream_t s = (hipStream_t)stream;
	int wpr = (int)pr[0], rpb = (int)pr[1];
	switch (p->dtype) {
	case FLY_DT_FP32:
		return wq_dt<FLY_DT_FP32>(a, m, n, k, wpr, rpb, s);
	case FLY_DT_FP16:
		return wq_dt<FLY_DT_FP16>(a, m, n, k, wpr, rpb, s);
	default:
		return wq_dt<FLY_DT_BF16>(a, m, n, k, wpr, rpb, s);
	}
}

/* ---- wqc: a row over a cluster */

static const int64_t wqc_cluster[] = {2, 4, 8};
static const int64_t wqc_wpr[] = {4, 8, 16};

static int wqc_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n, k;
	if (tk_dims(p, &m, &n, &k) || k > TOPK_WQ_KMAX || dev->warp != FLYK_WARP)
		return -EINVAL;
	if (!FLYK_HAS_CLUSTERS || dev->cc_major < 9)
		return -ENOSPC;
	int64_t CL = pr[0], wpr = pr[1];
	if (CL < 2 || CL > 8 || wpr < 1 || wpr * dev->warp > TK_WQ_MAXT)
		return -EINVAL;
	/* for few long rows: a cluster's slice gives half its warps a step
	 * each at least, and the grid is a few waves at most */
	int64_t step = dev->warp * 4 * (16 / (int64_t)flyk_dtype_bytes(p->dtype));
	if ((wpr / 2 > 0 ? wpr / 2 : 1) * step * CL >= n)
		return -EINVAL;
	if (m * CL > 4 * (int64_t)dev->sms)
		return -EINVAL;
	return 0;
}

#if FLYK_HAS_CLUSTERS
template <int DT, int KW>
static int wqc_go(const struct flyk_topk_args *a, int64_t m, int n, int k,
		  int CL, int wpr, hipStream_t s)
{
	typedef typename flyk_elem<DT>::T T;
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute attr[1];
	cfg.gridDim = dim3((unsigned)(m * CL));
	cfg.blockDim = dim3((unsigned)(wpr * FLYK_WARP));
	cfg.dynamicSmemBytes = (size_t)wpr * FLYK_WARP * KW * 8; /* <= 16 KiB */
	cfg.stream = s;
	attr[0].id = cudaLaunchAttributeClusterDimension;
	attr[0].val.clusterDim.x = CL;
	attr[0].val.clusterDim.y = 1;
	attr[0].val.clusterDim.z = 1;
	cfg.attrs = attr;
	cfg.numAttrs = 1;
	cudaError_t e = cudaLaunchKernelEx(&cfg, tk_wqc_kernel<DT, KW>,
					   TK_ARGS(T), m, n, k);
	return e == cudaSuccess ? 0 : -EIO;
}

template <int DT>
static int wqc_dt(const struct flyk_topk_args *a, int64_t m, int n, int k,
		  int CL, int wpr, hipStream_t s)
{
	if (k <= FLYK_WARP)
		return wqc_go<DT, 1>(a, m, n, k, CL, wpr, s);
	if (k <= 2 * FLYK_WARP)
		return wqc_go<DT, 2>(a, m, n, k, CL, wpr, s);
	return wqc_go<DT, 4>(a, m, n, k, CL, wpr, s);
}
#endif

static int wqc_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int rc = wqc_feasible(dev, p, pr);
	if (rc)
		return rc;
#if FLYK_HAS_CLUSTERS
	int64_t m = 0;
	int n = 0, k = 0;
	tk_dims(p, &m, &n, &k);
	const struct flyk_topk_args *a = &args->topk;
	hipStream_t s = (hipStream_t)stream;
	int CL = (int)pr[0], wpr = (int)pr[1];
	switch (p->dtype) {
	case FLY_DT_FP32:
		return wqc_dt<FLY_DT_FP32>(a, m, n, k, CL, wpr, s);
	case FLY_DT_FP16:
		return wqc_dt<FLY_DT_FP16>(a, m, n, k, CL, wpr, s);
	default:
		return wqc_dt<FLY_DT_BF16>(a, m, n, k, CL, wpr, s);
	}
#else
	(void)args;
	(void)stream;
	return -ENOSPC;
#endif
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

/* The kernel's static shared memory: the first digit's counters and a
 * few words. */
#define TK_R_STATIC ((4u << TK_R_D0) + 256u)

/* The words of shared memory the radix gather may hold: 4 ks within
 * [2048, 8192], less where the device has less; 0 below ks. */
static int radix_cap(const struct flyk_device *dev, int k)
{
	int ks = radix_ks(k), c = 4 * ks;
	c = c < 2048 ? 2048 : c > 8192 ? 8192 : c;
	while (c > ks && (size_t)c * 8 + TK_R_STATIC > dev->smem_per_block_optin)
		c >>= 1;
	return (size_t)c * 8 + TK_R_STATIC > dev->smem_per_block_optin ? 0 : c;
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
	if (!radix_cap(dev, k))
		return -ENOSPC;
	return 0;
}

template <int DT>
static int radix_dt(const struct flyk_device *dev,
		    const struct flyk_topk_args *a, int64_t m, int n, int k,
		    int th, hipStream_t s)
{
	typedef typename flyk_elem<DT>::T T;
	int cap = radix_cap(dev, k);
	size_t smem = (size_t)cap * 8;
	const void *fn = (const void *)tk_radix_kernel<DT, 8>;
	if (smem > 48 * 1024 - TK_R_STATIC &&
	    hipFuncSetAttribute(fn,
				hipFuncAttributeMaxDynamicSharedMemorySize,
				(int)smem) != hipSuccess)
		return -ENOSPC;
	FLYK_GO((unsigned)m, th, smem, s, tk_radix_kernel<DT, 8>)(TK_ARGS(T), n, k,
								  cap);
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
		return radix_dt<FLY_DT_FP32>(dev, a, m, n, k, (int)pr[0], s);
	case FLY_DT_FP16:
		return radix_dt<FLY_DT_FP16>(dev, a, m, n, k, (int)pr[0], s);
	default:
		return radix_dt<FLY_DT_BF16>(dev, a, m, n, k, (int)pr[0], s);
	}
}

/* ---- mb: a row over several blocks, the last one merging */

#define TOPK_MB_KMAX 128

/* Blocks per row (powers of two: the merge's tree) and threads. */
static const int64_t mb_bpr[] = {32, 64, 16, 128, 8};
static const int64_t mb_threads[] = {512, 256, 1024};

/* The workspace's head: one counter a row, then the candidates. */
static size_t mb_ctr_bytes(int64_t m)
{
	return ((size_t)m * 4 + 255) / 256 * 256;
}

static size_t mb_ws_bytes(int64_t m, int64_t bpr, int k)
{
	return mb_ctr_bytes(m) + (size_t)m * bpr * radix_ks(k) * 8;
}

/* Keys a thread (a power of two, 4..32) for a slice of @p chunk. */
static int mb_ept(int64_t chunk, int64_t th)
{
	int64_t e = 4;
	while (e * th < chunk)
		e <<= 1;
	return (int)e;
}

static int mb_feasible(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n, k;
	if (tk_dims(p, &m, &n, &k) || k > TOPK_MB_KMAX || dev->warp != FLYK_WARP)
		return -EINVAL;
	int64_t bpr = pr[0], th = pr[1];
	if (bpr < 2 || bpr > 1024 || (bpr & (bpr - 1)) || th < 64 ||
	    th > 1024 || th % dev->warp)
		return -EINVAL;
	/* few long rows (fewer than two an SM: more fill the GPU one block a
	 * row), every block a slice of more than one key a thread */
	int64_t chunk = (n + bpr - 1) / bpr;
	if (n < 32768 || chunk <= th || m >= 2 * (int64_t)dev->sms)
		return -EINVAL;
	int ept = mb_ept(chunk, th);
	if (ept > 32 || (ept == 32 && th > 512) ||
	    ept * (th / dev->warp) > TK_MB_EQC)
		return -EINVAL;
	if ((size_t)bpr * radix_ks(k) * 8 > dev->smem_per_block_optin ||
	    mb_ws_bytes(m, bpr, k) > FLYK_TOPK_WS_BYTES)
		return -ENOSPC;
	return 0;
}

template <int DT, int EPT>
static int mb_go(const struct flyk_topk_args *a, int64_t m, int n, int k,
		 int bpr, int th, hipStream_t s)
{
	typedef typename flyk_elem<DT>::T T;
	int ks = radix_ks(k);
	size_t smem = (size_t)bpr * ks * 8;
	const void *fn = (const void *)tk_mb_kernel<DT, EPT>;
	if (smem > 48 * 1024 &&
	    hipFuncSetAttribute(fn,
				hipFuncAttributeMaxDynamicSharedMemorySize,
				(int)smem) != hipSuccess)
		return -ENOSPC;
	uint32_t *ctr = (uint32_t *)a->workspace;
	u64 *cand = (u64 *)((char *)a->workspace + mb_ctr_bytes(m));
	FLYK_GO((unsigned)(m * bpr), th, smem, s, tk_mb_kernel<DT, EPT>)(
		TK_ARGS(T), n, k, bpr, ks, ctr, cand);
	return tk_err();
}

template <int DT>
static int mb_dt(const struct flyk_topk_args *a, int64_t m, int n, int k,
		 int bpr, int th, hipStream_t s)
{
	switch (mb_ept((n + bpr - 1) / bpr, th)) {
	case 4:
		return mb_go<DT, 4>(a, m, n, k, bpr, th, s);
	case 8:
		return mb_go<DT, 8>(a, m, n, k, bpr, th, s);
	case 16:
		return mb_go<DT, 16>(a, m, n, k, bpr, th, s);
	default:
		return mb_go<DT, 32>(a, m, n, k, bpr, th, s);
	}
}

/* A workspace of mb_ws_bytes() at least, 8-byte aligned, whose counters
 * are zero (flyk.h, FLYK_TOPK_WS_BYTES); else -EINVAL, nothing launched. */
static int mb_launch(const struct flyk_device *dev,
		     const struct fly_problem *p, const int64_t *pr,
		     const union flyk_args *args, void *stream)
{
	int64_t m = 0;
	int n = 0, k = 0;
	int rc = mb_feasible(dev, p, pr);
	if (rc)
		return rc;
	tk_dims(p, &m, &n, &k);
	const struct flyk_topk_args *a = &args->topk;
	if (!a->workspace || (uintptr_t)a->workspace % 8 ||
	    a->workspace_size < mb_ws_bytes(m, pr[0], k))
		return -EINVAL;
	hipStream_t s = (hipStream_t)stream;
	int bpr = (int)pr[0], th = (int)pr[1];
	switch (p->dtype) {
	case FLY_DT_FP32:
		return mb_dt<FLY_DT_FP32>(a, m, n, k, bpr, th, s);
	case FLY_DT_FP16:
		return mb_dt<FLY_DT_FP16>(a, m, n, k, bpr, th, s);
	default:
		return mb_dt<FLY_DT_BF16>(a, m, n, k, bpr, th, s);
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

static const struct flyk_variant tk_variants[] = {
	{"topk_ref", FLY_OP_TOPK, DT_MASK, FLY_F_DETERMINISTIC, 1, 0, {},
	 ref_feasible, NULL, ref_launch},
	{"topk_warp", FLY_OP_TOPK, DT_MASK, FLY_F_DETERMINISTIC, 0, 2,
	 {{"wpr", FLYK_NV(warp_wpr)}, {"rpb", FLYK_NV(warp_rpb)}}, warp_feasible, NULL,
	 warp_launch},
	{"topk_radix", FLY_OP_TOPK, DT_MASK, FLY_F_DETERMINISTIC, 0, 1,
	 {{"threads", FLYK_NV(radix_threads)}}, radix_feasible, NULL, radix_launch},
	{"topk_wq", FLY_OP_TOPK, DT_MASK, FLY_F_DETERMINISTIC, 0, 2,
	 {{"wpr", FLYK_NV(wq_wpr)}, {"rpb", FLYK_NV(wq_rpb)}}, wq_feasible, NULL,
	 wq_launch},
	{"topk_wqc", FLY_OP_TOPK, DT_MASK, FLY_F_DETERMINISTIC, 0, 2,
	 {{"cluster", FLYK_NV(wqc_cluster)}, {"wpr", FLYK_NV(wqc_wpr)}}, wqc_feasible,
	 NULL, wqc_launch},
	{"topk_mb", FLY_OP_TOPK, DT_MASK, FLY_F_DETERMINISTIC, 0, 2,
	 {{"bpr", FLYK_NV(mb_bpr)}, {"threads", FLYK_NV(mb_threads)}}, mb_feasible, NULL,
	 mb_launch},
};
#endif

/* ------------------------------------------------------------ case */

struct tk_state {
	unsigned char *d_bad; /* [m]: the check's verdict per row */
};

/* No reference output: tk_check_kernel checks any k against x itself, in
 * one read of x (a 1 GB case: well under a millisecond). */
static int tk_setup(struct flyk_case *c, uint64_t seed)
{
	int64_t m;
	int n, k;
	if (tk_dims(&c->p, &m, &n, &k) || m > 0x7fffffff)
		return -EOPNOTSUPP;
	size_t es = flyk_dtype_bytes(c->p.dtype);
	size_t mk = (size_t)m * k;
	struct tk_state *st = (struct tk_state *)calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	c->state = st;
	void *x, *v, *i, *bad, *ws;
	if (flyk_gpu_case_alloc(c, (size_t)m * n * es, 0, &x) < 0 ||
	    flyk_gpu_case_alloc(c, mk * es, 1, &v) < 0 ||
	    flyk_gpu_case_alloc(c, mk * 8, 1, &i) < 0 ||
	    flyk_gpu_case_alloc(c, (size_t)m, 0, &bad) < 0 ||
	    flyk_gpu_case_alloc(c, FLYK_TOPK_WS_BYTES, 0, &ws) < 0)
		return -ENOMEM;
	if (hipMemset(ws, 0, FLYK_TOPK_WS_BYTES) != hipSuccess)
		return -EIO;
	st->d_bad = (unsigned char *)bad;
	struct flyk_topk_args *a = &c->args.topk;
	a->x = x;
	a->values = v;
	a->indices = (int64_t *)i;
	a->workspace = ws; /* the workspace's counters: zero, left zero */
	a->workspace_size = FLYK_TOPK_WS_BYTES;
	return flyk_gpu_fill_random(c->dev, x, (size_t)m * n, c->p.dtype,
				    -4.f, 4.f, seed);
}

template <int DT>
static void tk_check_go(struct flyk_case *c, int64_t m, int n, int k)
{
	typedef typename flyk_elem<DT>::T T;
	struct tk_state *st = (struct tk_state *)c->state;
	int det = (c->p.flags & FLY_F_DETERMINISTIC) != 0;
	FLYK_GO((unsigned)m, 512, 0, (hipStream_t)c->dev->stream,
		tk_check_kernel<DT>)(
		(const T *)c->args.topk.x, (const T *)c->args.topk.values,
		c->args.topk.indices, n, k, det, st->d_bad);
}

static int tk_check(struct flyk_case *c, double *max_err)
{
	struct tk_state *st = (struct tk_state *)c->state;
	int64_t m = 0;
	int n = 0, k = 0;
	tk_dims(&c->p, &m, &n, &k);
	*max_err = 0;
	if (c->p.dtype == FLY_DT_FP32)
		tk_check_go<FLY_DT_FP32>(c, m, n, k);
	else if (c->p.dtype == FLY_DT_FP16)
		tk_check_go<FLY_DT_FP16>(c, m, n, k);
	else
		tk_check_go<FLY_DT_BF16>(c, m, n, k);
	if (hipGetLastError() != hipSuccess)
		return -EIO;
	unsigned char *hb = (unsigned char *)malloc((size_t)m);
	if (!hb)
		return -ENOMEM;
	int rc = flyk_gpu_download(c->dev, hb, st->d_bad, (size_t)m);
	for (int64_t r = 0; r < m && !rc; r++)
		if (hb[r])
			rc = -EDOM;
	if (rc == -EDOM)
		*max_err = 1.0;
	free(hb);
	return rc;
}

static void tk_fini(struct flyk_case *c)
{
	free(c->state);
	c->state = NULL;
}

#if !FLYK_DEVICE_PASS
extern "C" const struct flyk_gpu_op flyk_gpu_topk_op = {
	FLY_OP_TOPK, tk_variants, sizeof(tk_variants) / sizeof(tk_variants[0]),
	tk_setup,    tk_check,	  tk_fini,
	NULL,
};
#endif
