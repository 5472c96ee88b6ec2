/*
 * norm/rmsnorm.hip -- RMSNorm on the GPU: y = x * rsqrt(mean(x^2) + eps) * w,
 * optionally with a fused residual (s = x + r written back to r, then s is
 * normalised).  fp32 math; fp32/fp16/bf16 in and out.
 *
 * Owns: the rmsnorm variants and flyk_gpu_rmsnorm_op.  Thread: tables are
 * immutable; launches are asynchronous on the caller's stream.
 *
 * Variants (params in their stable order):
 *   rmsnorm_ref      one block per row, scalar, two passes (the reference)
 *   rmsnorm_rows     register-resident single pass: a group of `group`
 *                    threads owns a row (group 32 = a row per warp; group =
 *                    threads = a row per block), `rows` groups per block,
 *                    `vec`-byte loads.  Each row's misaligned start is
 *                    handled per row (scalar prologue to 16-byte alignment,
 *                    vector body, scalar epilogue), so n = 4097 rows stay on
 *                    vector loads.
 *   rmsnorm_lat      rmsnorm_rows for decode sizes (m <= 8192): whole
 *                    warps a row (`group`), `rows` rows a block, 16-byte
 *                    vectors, and the thread's w loaded with its x (and r)
 *                    before any use: one DRAM round trip, not two.
 *   rmsnorm_cluster  (CUDA sm_90) a row split over a thread-block cluster
 *                    of `cluster` blocks, register-resident, the sum of
 *                    squares reduced through distributed shared memory: for
 *                    the long rows (32k..114688) a block cannot hold.
 *   rmsnorm_twopass  one block per row, vector loads, a sum pass and a
 *                    scale pass (the second read mostly from L2): any n.
 *   rmsnorm_l2       twopass made for long rows: `unroll` 16-byte loads in
 *                    flight per thread, L2 evict_last on the first read,
 *                    evict_first on the second (last chunk first), y
 *                    streamed out: ~2 * row of DRAM traffic at full
 *                    occupancy, the inductor scheme (any n >= a chunk).
 *   rmsnorm_l2i      rmsnorm_l2 with Inductor's memory operations (its
 *                    kernel at 1024 threads and a chunk the size of the
 *                    row is what Inductor picks for fp32 16k/32k rows):
 *                    L1 evict_last on the first read and on w,
 *                    evict_first on the second, first chunk first,
 *                    plain stores.
 * All variants need x, y, residual 16-byte aligned at their bases (true for
 * every allocator we know); w is read with vector loads only where the row
 * is aligned.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_int.h"
#include "prim/cluster.h"
#include "prim/flyk_gpu.h"
#include "prim/launch.h"
#include "prim/mem.h"

#define DT_MASK ((1u << FLY_DT_FP32) | (1u << FLY_DT_FP16) | (1u << FLY_DT_BF16))
#define MAX_WARPS (1024 / 32)
/* Register budget: at 1024 threads a thread has 64 registers; rows of 64+
 * bytes per thread (R * VB) spill there, so those instantiations are bound
 * to 512 threads (feasible() knows, through rms_maxt()). */
#define RMS_MAXT(R, VB) ((R) * (VB) >= 64 ? 512 : 1024)

/*
 * BYTES bytes of elements T, held as 32-bit words: a 16-bit element is
 * taken out of its word where it is used (get), not split into a
 * register of its own at the load.  With T e[] storage nvcc split each
 * 16-byte load into eight 16-bit registers at once, which waited for the
 * load, and gave the freed registers to the next load: x, w and r of a
 * decode-size row took three DRAM round trips one after the other (seen
 * in the SASS of rms_rows_kernel<bf16, 16, 1, residual, w early>).
 */
template <int BYTES, typename T> struct alignas(BYTES) rms_vec {
	uint32_t u[BYTES / 4];
	enum { N = BYTES / sizeof(T) };
	__device__ __forceinline__ T get(int i) const
	{
		if constexpr (sizeof(T) == 4)
			return __uint_as_float(u[i]);
		else
			return (T)(u[i >> 1] >> ((i & 1) * 16));
	}
	__device__ __forceinline__ void set(int i, T v)
	{
		if constexpr (sizeof(T) == 4) {
			u[i] = __float_as_uint(v);
		} else {
			int sh = (i & 1) * 16;
			u[i >> 1] = (u[i >> 1] & ~(0xffffu << sh)) |
				    ((uint32_t)v << sh);
		}
	}
};

/* Element i of w: a vector in registers or VEC elements in memory. */
template <int VB, typename T>
__device__ __forceinline__ T rms_w(const rms_vec<VB, T> &w, int i)
{
	return w.get(i);
}
template <typename T> __device__ __forceinline__ T rms_w(const T *w, int i)
{
	return w[i];
}

/* x * rstd * w element-wise over one vector (W: rms_w's two kinds). */
template <int DT, int VB, typename W>
__device__ __forceinline__ rms_vec<VB, typename flyk_elem<DT>::T>
rms_scale(const rms_vec<VB, typename flyk_elem<DT>::T> &x, const W &w,
	  float rstd)
{
	typedef flyk_elem<DT> E;
	typedef typename E::T T;
	rms_vec<VB, T> o;
	if constexpr (sizeof(T) == 4) {
#pragma unroll
		for (int e = 0; e < VB / 4; e++)
			o.set(e, E::store(E::load(x.get(e)) * rstd *
					  E::load(rms_w(w, e))));
	} else {
#pragma unroll
		for (int k = 0; k < VB / 4; k++)
			o.u[k] = flyk_pack2<DT>(
				E::load(x.get(2 * k)) * rstd *
					E::load(rms_w(w, 2 * k)),
				E::load(x.get(2 * k + 1)) * rstd *
					E::load(rms_w(w, 2 * k + 1)));
	}
	return o;
}

/* x + r element-wise over one vector, rounded to DT (packed as above). */
template <int DT, int VB>
__device__ __forceinline__ rms_vec<VB, typename flyk_elem<DT>::T>
rms_add(const rms_vec<VB, typename flyk_elem<DT>::T> &x,
	const rms_vec<VB, typename flyk_elem<DT>::T> &r)
{
	typedef flyk_elem<DT> E;
	typedef typename E::T T;
	rms_vec<VB, T> o;
	if constexpr (sizeof(T) == 4) {
#pragma unroll
		for (int e = 0; e < VB / 4; e++)
			o.set(e, E::store(E::load(x.get(e)) +
					  E::load(r.get(e))));
	} else {
#pragma unroll
		for (int k = 0; k < VB / 4; k++)
			o.u[k] = flyk_pack2<DT>(
				E::load(x.get(2 * k)) + E::load(r.get(2 * k)),
				E::load(x.get(2 * k + 1)) +
					E::load(r.get(2 * k + 1)));
	}
	return o;
}

/* Sum @p v over a group of @p G threads (G a power of two below the warp
 * or a multiple of it, the groups contiguous in threadIdx.x; @p gi the
 * caller's group, threadIdx.x / G); every thread gets the group's sum.
 * All threads of the block must call it when G > warp, all of the warp
 * when G < warp. */
__device__ __forceinline__ float rms_group_sum(float v, int G, int gi,
					       float *red)
{
#pragma unroll
	for (int o = FLYK_WARP / 2; o > 0; o >>= 1)
		if (o < G) /* sub-warp group: xor stays inside it */
			v += FLYK_SHFL_XOR(v, o);
	if (G <= FLYK_WARP)
		return v;
	int warp = threadIdx.x / FLYK_WARP, lane = threadIdx.x % FLYK_WARP;
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	/* One shared load per lane and a warp tree instead of G / warp
	 * serial loads: shorter between the loads and the stores. */
	int per = G / FLYK_WARP, first = gi * per;
	float s = lane < per ? red[first + lane] : 0.f;
#pragma unroll
	for (int o = FLYK_WARP / 2; o > 0; o >>= 1)
		s += FLYK_SHFL_XOR(s, o);
	return s;
}

/* Elements before the first VB-aligned address of a row (<= n). */
template <int VB, typename T>
__device__ __forceinline__ int rms_prologue(const T *row, int n)
{
	int p = (int)(((VB - ((uintptr_t)row & (VB - 1))) & (VB - 1)) /
		      sizeof(T));
	return p < n ? p : n;
}

/*
 * The register-resident row: the thread with virtual id vt of VG keeps R
 * vectors (body vectors vt, vt + VG, ...) plus at most one prologue and one
 * epilogue element; returns its partial sum of squares.  The row is read
 * from memory once.  WE (w early): load() also loads the thread's w
 * elements, issued with x's (and r's) before any of them is used, so that
 * one DRAM round trip serves both; otherwise store() loads w after the
 * reduction (fewer registers, a second round trip unless w is cached).
 * AL: every row starts VB-aligned and holds whole vectors (known on the
 * host: aligned bases and n * elem % VB == 0), so the prologue and the
 * epilogue, and the work of finding them, are compiled out.
 */
template <int DT, int VB, int R, bool RES, bool WE = false, bool AL = false>
struct rms_row {
	typedef typename flyk_elem<DT>::T T;
	typedef flyk_elem<DT> E;
	enum { VEC = VB / sizeof(T) };
	rms_vec<VB, T> v[R];
	rms_vec<VB, T> wv[WE ? R : 1];
	T s0, s1, w0, w1;
	T *rres; /* RES and WE: the residual row, its body stored by store() */
	int p, nb, tail;

	/* WE: this thread's w (vectors where the row is aligned, else the
	 * same elements one by one: w + p is then misaligned). */
	__device__ __forceinline__ void load_w(const T *__restrict__ w, int vt,
					       int VG)
	{
		if (p == 0) {
			const rms_vec<VB, T> *wa = (const rms_vec<VB, T> *)w;
#pragma unroll
			for (int i = 0; i < R; i++)
				if (vt + i * VG < nb)
					wv[i] = wa[vt + i * VG];
		} else {
#pragma unroll
			for (int i = 0; i < R; i++)
				if (vt + i * VG < nb)
#pragma unroll
					for (int e = 0; e < VEC; e++)
						wv[i].set(e, w[p + (vt + i * VG) *
									   VEC +
								   e]);
		}
		if (vt < p)
			w0 = w[vt];
		if (vt < tail)
			w1 = w[p + nb * VEC + vt];
	}

	__device__ __forceinline__ float load(const T *xr, T *rr, int n, int vt,
					      int VG, const T *w = NULL)
	{
		if constexpr (AL) {
			p = 0;
			nb = n / VEC;
			tail = 0;
		} else {
			p = rms_prologue<VB>(xr, n);
			nb = (n - p) / VEC;
			tail = n - p - nb * VEC;
		}
		const rms_vec<VB, T> *xv = (const rms_vec<VB, T> *)(xr + p);
		rms_vec<VB, T> *rv = (rms_vec<VB, T> *)(rr + p);
#pragma unroll
		for (int i = 0; i < R; i++)
			if (vt + i * VG < nb)
				v[i] = xv[vt + i * VG];
		if (vt < p)
			s0 = xr[vt];
		if (vt < tail)
			s1 = xr[p + nb * VEC + vt];
		if constexpr (WE) /* before the residual stores: w may not
				   * be assumed apart from r */
			load_w(w, vt, VG);
		if (RES) {
			rms_vec<VB, T> r[R];
#pragma unroll
			for (int i = 0; i < R; i++)
				if (vt + i * VG < nb)
					r[i] = rv[vt + i * VG];
#pragma unroll
			for (int i = 0; i < R; i++) {
				if (vt + i * VG >= nb)
					continue;
				v[i] = rms_add<DT, VB>(v[i], r[i]);
				if constexpr (!WE)
					rv[vt + i * VG] = v[i];
			}
			rres = rr;
			if (vt < p) {
				s0 = E::store(E::load(s0) + E::load(rr[vt]));
				rr[vt] = s0;
			}
			if (vt < tail) {
				int j = p + nb * VEC + vt;
				s1 = E::store(E::load(s1) + E::load(rr[j]));
				rr[j] = s1;
			}
		}
		float ss = 0.f;
#pragma unroll
		for (int i = 0; i < R; i++)
			if (vt + i * VG < nb)
#pragma unroll
				for (int e = 0; e < VEC; e++) {
					float f = E::load(v[i].get(e));
					ss += f * f;
				}
		if (vt < p) {
			float f = E::load(s0);
			ss += f * f;
		}
		if (vt < tail) {
			float f = E::load(s1);
			ss += f * f;
		}
		return ss;
	}

	/* restrict: lets the R loads of w issue ahead of the y stores
	 * instead of one L1/L2 round trip per vector. */
	__device__ __forceinline__ void store(const T *__restrict__ w,
					      T *__restrict__ yr, float rstd,
					      int vt, int VG)
	{
		rms_vec<VB, T> *yv = (rms_vec<VB, T> *)(yr + p);
		if constexpr (WE) {
#pragma unroll
			for (int i = 0; i < R; i++) {
				int j = vt + i * VG;
				if (j >= nb)
					continue;
				if constexpr (RES)
					((rms_vec<VB, T> *)(rres + p))[j] = v[i];
				yv[j] = rms_scale<DT, VB>(v[i], wv[i], rstd);
			}
			if (vt < p)
				yr[vt] = E::store(E::load(s0) * rstd *
						  E::load(w0));
			if (vt < tail)
				yr[p + nb * VEC + vt] = E::store(
					E::load(s1) * rstd * E::load(w1));
			return;
		}
		if (p == 0) { /* aligned row: w aligned too */
			const rms_vec<VB, T> *wv = (const rms_vec<VB, T> *)w;
#pragma unroll
			for (int i = 0; i < R; i++) {
				int j = vt + i * VG;
				if (j >= nb)
					continue;
				rms_vec<VB, T> wj = wv[j];
				yv[j] = rms_scale<DT, VB>(v[i], wj, rstd);
			}
		} else {
#pragma unroll
			for (int i = 0; i < R; i++) {
				int j = vt + i * VG;
				if (j >= nb)
					continue;
				yv[j] = rms_scale<DT, VB>(v[i], w + p + j * VEC,
							  rstd);
			}
			if (vt < p)
				yr[vt] = E::store(E::load(s0) * rstd *
						  E::load(w[vt]));
		}
		if (vt < tail) {
			int j = p + nb * VEC + vt;
			yr[j] = E::store(E::load(s1) * rstd * E::load(w[j]));
		}
	}
};

/* Threads bound of rmsnorm_lat (w early: twice the row registers). */
#define LAT_MAXT(R) ((R) >= 8 ? 256 : RMS_MAXT(2 * (R), 16))

/* rmsnorm_rows (WE false) and rmsnorm_lat (WE true: w loaded with x). */
template <int DT, int VB, int R, bool RES, bool WE, bool AL>
__global__ void __launch_bounds__(WE ? LAT_MAXT(R) : RMS_MAXT(R, VB))
	rms_rows_kernel(const typename flyk_elem<DT>::T *x,
			const typename flyk_elem<DT>::T *w,
			typename flyk_elem<DT>::T *y,
			typename flyk_elem<DT>::T *res, int64_t m, int n, int G,
			int lg, float inv_n, float eps)
{
	__shared__ float red[MAX_WARPS];
	/* A row a block (gi = 0), or lg = log2(G) for groups of a power of
	 * two, and inv_n = 1 / n from the host: no integer or float division
	 * ahead of the loads or the rsqrt (at decode sizes the kernel is one
	 * latency chain).  The division remains for blocks of several groups
	 * of another width (lg = -1; no listed point has one). */
	int gi = G == (int)blockDim.x ? 0
		 : lg >= 0	   ? (int)threadIdx.x >> lg
				   : (int)threadIdx.x / G;
	int vt = (int)threadIdx.x - gi * G;
	int per = lg >= 0 ? (int)blockDim.x >> lg : (int)blockDim.x / G;
	int64_t row = (int64_t)blockIdx.x * per + gi;
	bool valid = row < m;
	int64_t off = (valid ? row : 0) * (int64_t)n;
	rms_row<DT, VB, R, RES, WE, AL> r;
	float ss = 0.f;
	/* launched with PDL (rms_rows_launch): the kernel before must be
	 * done before the first load; the next may then start launching */
	flyk_pdl_wait();
	flyk_pdl_trigger();
	if (valid)
		ss = r.load(x + off, res + off, n, vt, G, w);
	ss = rms_group_sum(ss, G, gi, red);
	if (valid)
		r.store(w, y + off, rsqrtf(ss * inv_n + eps), vt, G);
}

#if FLYK_HAS_CLUSTERS
/* A row over a cluster of blockDim.x-thread blocks (grid = m * cluster). */
template <int DT, int VB, int R, bool RES>
__global__ void __launch_bounds__(RMS_MAXT(R, VB))
	rms_cluster_kernel(const typename flyk_elem<DT>::T *x,
			   const typename flyk_elem<DT>::T *w,
			   typename flyk_elem<DT>::T *y,
			   typename flyk_elem<DT>::T *res, int64_t m, int n,
			   float eps)
{
	__shared__ float red[MAX_WARPS];
	__shared__ float part;
	cg::cluster_group cl = cg::this_cluster();
	int CL = (int)cl.num_blocks(), rank = (int)cl.block_rank();
	int64_t row = blockIdx.x / CL;
	int G = blockDim.x, VG = G * CL, vt = rank * G + threadIdx.x;
	int64_t off = row * (int64_t)n;
	rms_row<DT, VB, R, RES> r;
	float ss = r.load(x + off, res + off, n, vt, VG);
	ss = rms_group_sum(ss, G, 0, red);
	if (threadIdx.x == 0)
		part = ss;
	cl.sync();
	float tot = 0.f;
	for (int i = 0; i < CL; i++)
		tot += *cl.map_shared_rank(&part, i);
	cl.sync(); /* no block leaves while another reads its `part` */
	r.store(w, y + off, rsqrtf(tot / (float)n + eps), vt, VG);
}
#endif

/* Any n: one block per row, a sum pass then a scale pass. */
template <int DT, bool RES>
__global__ void __launch_bounds__(1024)
	rms_twopass_kernel(const typename flyk_elem<DT>::T *x,
			   const typename flyk_elem<DT>::T *w,
			   typename flyk_elem<DT>::T *y,
			   typename flyk_elem<DT>::T *res, int n, float eps)
{
	typedef typename flyk_elem<DT>::T T;
	typedef flyk_elem<DT> E;
	typedef rms_vec<16, T> V;
	enum { VEC = 16 / sizeof(T), U = 4 };
	__shared__ float red[MAX_WARPS];
	int64_t off = (int64_t)blockIdx.x * n;
	const T *xr = x + off;
	T *rr = res + off, *yr = y + off;
	const T *src = RES ? (const T *)rr : xr;
	int p = rms_prologue<16>(xr, n), nb = (n - p) / VEC, t = threadIdx.x,
	    G = blockDim.x;
	int tail0 = p + nb * VEC;
	float ss = 0.f;
	for (int j0 = t; j0 < nb; j0 += G * U) {
		V a[U];
#pragma unroll
		for (int u = 0; u < U; u++)
			if (j0 + u * G < nb)
				a[u] = ((const V *)(xr + p))[j0 + u * G];
#pragma unroll
		for (int u = 0; u < U; u++) {
			int j = j0 + u * G;
			if (j >= nb)
				continue;
			if (RES) {
				V b = ((const V *)(rr + p))[j];
				a[u] = rms_add<DT, 16>(a[u], b);
				((V *)(rr + p))[j] = a[u];
			}
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				float f = E::load(a[u].get(e));
				ss += f * f;
			}
		}
	}
	/* Scalar prologue (threads [0, p)) and epilogue (threads [p, p +
	 * tail)); p + tail < 2 * VEC <= blockDim.  The same threads scale
	 * them below. */
	int ti = t < p ? t : tail0 + (t - p);
	bool has_s = t < p || ti < n;
	if (has_s) {
		T v = xr[ti];
		if (RES) {
			v = E::store(E::load(v) + E::load(rr[ti]));
			rr[ti] = v;
		}
		float f = E::load(v);
		ss += f * f;
	}
	ss = rms_group_sum(ss, G, 0, red);
	float rstd = rsqrtf(ss / (float)n + eps);
	for (int j = t; j < nb; j += G) {
		V a = ((const V *)(src + p))[j];
		((V *)(yr + p))[j] = rms_scale<DT, 16>(a, w + p + j * VEC, rstd);
	}
	if (has_s)
		yr[ti] = E::store(E::load(src[ti]) * rstd * E::load(w[ti]));
}

/* rmsnorm_l2 pass 2 over the body vectors.  IND false: last chunk first
 * (the most recently read lines are the likeliest L1/L2 hits), L2
 * policies, y streamed out.  IND true, Inductor's memory operations:
 * first chunk first, x with L1 evict_first, w with L1 evict_last, plain
 * stores. */
template <int DT, int U, bool WALIGNED, bool IND>
__device__ __forceinline__ void
rms_l2_scale(const typename flyk_elem<DT>::T *src,
	     const typename flyk_elem<DT>::T *__restrict__ w,
	     typename flyk_elem<DT>::T *__restrict__ yr, int nb, float rstd)
{
	typedef typename flyk_elem<DT>::T T;
	typedef rms_vec<16, T> V;
	enum { VEC = 16 / sizeof(T) };
	int t = threadIdx.x, G = blockDim.x, C = G * U;
	/* w is read by every row: evict_last like x's first read, or the
	 * evict_last x lines would push it out of L2 first. */
	uint64_t pol = flyk_l2_policy(false), keep = flyk_l2_policy(true);
	int last = nb > 0 ? (nb - 1) / C * C : -1;
	for (int k0 = 0; k0 <= last; k0 += C) {
		int c0 = IND ? k0 : last - k0;
		V a[U];
#pragma unroll
		for (int u = 0; u < U; u++)
			if (c0 + u * G + t < nb) {
				const V *q = (const V *)src + c0 + u * G + t;
				a[u] = IND ? flyk_ld_l1<false>(q)
					   : flyk_ld_pol(q, pol);
			}
#pragma unroll
		for (int u = 0; u < U; u++) {
			int j = c0 + u * G + t;
			if (j >= nb)
				continue;
			V o;
			if (WALIGNED) {
				V wj = IND ? flyk_ld_l1_last_ro((const V *)w + j)
					   : flyk_ld_pol_ro((const V *)w + j,
							    keep);
				o = rms_scale<DT, 16>(a[u], wj, rstd);
			} else {
				o = rms_scale<DT, 16>(a[u], w + j * VEC, rstd);
			}
			if (IND)
				((V *)yr)[j] = o;
			else
				flyk_st_stream((V *)yr + j, o);
		}
	}
}

/* Threads bound of rms_l2_kernel: with the residual, unroll 8 does not
 * fit 64 registers. */
#define L2_MAXT(U, RES) ((U) >= 8 && (RES) ? 512 : 1024)

/*
 * Two passes with the row kept in L2 (what inductor does for long rows):
 * pass 1 reads x (and r) with U 16-byte loads in flight per thread, marked
 * evict_last; the block reduces; pass 2 re-reads the row (evict_first,
 * mostly L2 hits), scales and streams y out.  DRAM traffic stays ~2 * row
 * while a block needs no registers per element: any n, full occupancy.
 * IND (rmsnorm_l2i): Inductor's hints instead -- L1 evict_last on the
 * first read, evict_first on the second (an L1 hit where the chunk is the
 * row), plain stores.
 */
template <int DT, int U, bool RES, bool IND>
__global__ void __launch_bounds__(L2_MAXT(U, RES))
	rms_l2_kernel(const typename flyk_elem<DT>::T *x,
		      const typename flyk_elem<DT>::T *w,
		      typename flyk_elem<DT>::T *y,
		      typename flyk_elem<DT>::T *res, int n, float eps)
{
	typedef typename flyk_elem<DT>::T T;
	typedef flyk_elem<DT> E;
	typedef rms_vec<16, T> V;
	enum { VEC = 16 / sizeof(T) };
	__shared__ float red[MAX_WARPS];
	int64_t off = (int64_t)blockIdx.x * n;
	const T *xr = x + off;
	T *rr = res + off, *yr = y + off;
	const T *src = RES ? (const T *)rr : xr;
	int p = rms_prologue<16>(xr, n), nb = (n - p) / VEC, t = threadIdx.x,
	    G = blockDim.x;
	int tail0 = p + nb * VEC;
	const V *xv = (const V *)(xr + p);
	V *rv = (V *)(rr + p);
	/* RES: x and r are dead after pass 1 (plain loads) and s = x + r is
	 * what pass 2 re-reads, so s is the one kept. */
	uint64_t keep = flyk_l2_policy(true);
	float ss = 0.f;
	for (int j0 = t; j0 < nb; j0 += G * U) {
		V a[U];
#pragma unroll
		for (int u = 0; u < U; u++)
			if (j0 + u * G < nb)
				a[u] = RES   ? xv[j0 + u * G]
				       : IND ? flyk_ld_l1<true>(xv + j0 + u * G)
					     : flyk_ld_pol(xv + j0 + u * G, keep);
		if (RES) {
			V b[U];
#pragma unroll
			for (int u = 0; u < U; u++)
				if (j0 + u * G < nb)
					b[u] = rv[j0 + u * G];
#pragma unroll
			for (int u = 0; u < U; u++) {
				if (j0 + u * G >= nb)
					continue;
				a[u] = rms_add<DT, 16>(a[u], b[u]);
				if (IND)
					rv[j0 + u * G] = a[u];
				else
					flyk_st_pol(rv + j0 + u * G, a[u], keep);
			}
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			if (j0 + u * G >= nb)
				continue;
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				float f = E::load(a[u].get(e));
				ss += f * f;
			}
		}
	}
	/* Scalar prologue and epilogue as in rms_twopass_kernel. */
	int ti = t < p ? t : tail0 + (t - p);
	bool has_s = t < p || ti < n;
	if (has_s) {
		T v = xr[ti];
		if (RES) {
			v = E::store(E::load(v) + E::load(rr[ti]));
			rr[ti] = v;
		}
		float f = E::load(v);
		ss += f * f;
	}
	ss = rms_group_sum(ss, G, 0, red);
	float rstd = rsqrtf(ss / (float)n + eps);
	if (p == 0) /* aligned row: w + p aligned too */
		rms_l2_scale<DT, U, true, IND>(src, w, yr, nb, rstd);
	else
		rms_l2_scale<DT, U, false, IND>(src + p, w + p, yr + p, nb,
						rstd);
	if (has_s)
		yr[ti] = E::store(E::load(src[ti]) * rstd * E::load(w[ti]));
}

/* The reference: scalar, one block per row, obviously right. */
template <int DT, bool RES>
__global__ void rms_ref_kernel(const typename flyk_elem<DT>::T *x,
			       const typename flyk_elem<DT>::T *w,
			       typename flyk_elem<DT>::T *y,
			       typename flyk_elem<DT>::T *res, int n, float eps)
{
	typedef typename flyk_elem<DT>::T T;
	typedef flyk_elem<DT> E;
	__shared__ float red[MAX_WARPS];
	int64_t off = (int64_t)blockIdx.x * n;
	float ss = 0.f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		T v = x[off + i];
		if (RES) {
			v = E::store(E::load(v) + E::load(res[off + i]));
			res[off + i] = v;
		}
		float f = E::load(v);
		ss += f * f;
	}
	ss = rms_group_sum(ss, blockDim.x, 0, red);
	float rstd = rsqrtf(ss / (float)n + eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		T v = RES ? res[off + i] : x[off + i];
		y[off + i] = E::store(E::load(v) * rstd * E::load(w[i]));
	}
}

/* ------------------------------------------------------------ host */

static int rms_dims(const struct fly_problem *p, int64_t *m, int *n)
{
	if (p->op != FLY_OP_RMSNORM || !(DT_MASK & (1u << p->dtype)))
		return -EINVAL;
	if (p->dims[0] <= 0 || p->dims[1] <= 0 || p->dims[1] > (1 << 30))
		return -EINVAL;
	*m = p->dims[0];
	*n = (int)p->dims[1];
	return 0;
}

static int rms_aligned(const struct flyk_rmsnorm_args *a, uint32_t flags)
{
	uintptr_t bits = (uintptr_t)a->x | (uintptr_t)a->y | (uintptr_t)a->w;
	if (flags & FLY_F_RESIDUAL)
		bits |= (uintptr_t)a->residual;
	return (bits & 15) == 0;
}

/* Smallest instantiated R >= need (1, 2, 4, 8), or 0. */
static int rms_pick_r(int64_t need)
{
	if (need <= 1)
		return 1;
	if (need <= 2)
		return 2;
	if (need <= 4)
		return 4;
	if (need <= 8)
		return 8;
	return 0;
}

static int rms_launch_err(void)
{
	return hipGetLastError() == hipSuccess ? 0 : -EIO;
}

#define RMS_ARGS(T)                                                         \
	(const T *)a->x, (const T *)a->w, (T *)a->y, (T *)a->residual

/* One rms_rows_kernel launch, with PDL where the build has it: at decode
 * sizes the kernel is a few microseconds, much of it the launch, which
 * then overlaps the tail of the kernel before it (issue 22: graph replay
 * of 1x4096 at 0.89x of Inductor's). */
template <int DT, int VB, int R, bool RES, bool WE, bool AL>
static int rms_rows_launch(const struct flyk_rmsnorm_args *a, unsigned grid,
			   unsigned th, hipStream_t s, int64_t m, int n, int G,
			   int lg, float inv_n)
{
	typedef typename flyk_elem<DT>::T T;
	return flyk_go_dependent<rms_rows_kernel<DT, VB, R, RES, WE, AL>>(
	    dim3(grid), dim3(th), 0, s, RMS_ARGS(T), m, n, G, lg, inv_n,
	    a->eps);
}

template <int DT, int VB, bool RES, bool WE, bool AL>
static int rms_rows_go(const struct flyk_rmsnorm_args *a, int64_t m, int n,
		       int G, int rows, int R, hipStream_t s)
{
	unsigned grid = (unsigned)((m + rows - 1) / rows);
	unsigned th = (unsigned)(G * rows);
	int lg = (G & (G - 1)) ? -1 : __builtin_ctz((unsigned)G);
	float inv_n = 1.0f / (float)n;
	switch (R) {
	case 1:
		return rms_rows_launch<DT, VB, 1, RES, WE, AL>(a, grid, th, s, m,
							      n, G, lg, inv_n);
	case 2:
		return rms_rows_launch<DT, VB, 2, RES, WE, AL>(a, grid, th, s, m,
							      n, G, lg, inv_n);
	case 4:
		return rms_rows_launch<DT, VB, 4, RES, WE, AL>(a, grid, th, s, m,
							      n, G, lg, inv_n);
	default:
		return rms_rows_launch<DT, VB, 8, RES, WE, AL>(a, grid, th, s, m,
							      n, G, lg, inv_n);
	}
}

template <int DT, int VB, bool WE>
static int rms_rows_res(const struct flyk_rmsnorm_args *a, uint32_t flags,
			int64_t m, int n, int G, int rows, int R,
			hipStream_t s)
{
	/* rmsnorm_lat only (decode sizes, where the instructions before the
	 * loads are on the critical path): rows all aligned, as AL needs. */
	if (WE && ((size_t)n * sizeof(typename flyk_elem<DT>::T)) % VB == 0) {
		if (flags & FLY_F_RESIDUAL)
			return rms_rows_go<DT, VB, true, WE, WE>(a, m, n, G, rows,
								 R, s);
		return rms_rows_go<DT, VB, false, WE, WE>(a, m, n, G, rows, R,
							  s);
	}
	if (flags & FLY_F_RESIDUAL)
		return rms_rows_go<DT, VB, true, WE, false>(a, m, n, G, rows, R,
							    s);
	return rms_rows_go<DT, VB, false, WE, false>(a, m, n, G, rows, R, s);
}

template <int DT>
static int rms_rows_dt(const struct flyk_rmsnorm_args *a, uint32_t flags,
		       int64_t m, int n, int G, int rows, int vb, int R,
		       hipStream_t s)
{
	if (vb == 16)
		return rms_rows_res<DT, 16, false>(a, flags, m, n, G, rows, R,
						   s);
	return rms_rows_res<DT, 8, false>(a, flags, m, n, G, rows, R, s);
}

/* Value orders put a sensible untuned default in the middle, where
 * flyk_default() starts (group 256, rows 1, vec 16). */
static const int64_t rows_group[] = {8, 16, 32, 64, 128, 256, 512, 1024};
static const int64_t rows_rows[] = {4, 2, 1, 8};
static const int64_t rows_vec[] = {8, 16};

/* Vectors per thread a row needs with group G and vb-byte vectors. */
static int64_t rms_need(int n, uint32_t dt, int64_t G, int64_t vb)
{
	int64_t vec = vb / (int64_t)flyk_dtype_bytes(dt);
	int64_t nvec = n / vec > 0 ? n / vec : 1; /* >= body vectors */
	return (nvec + G - 1) / G;
}

static int rows_feasible(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n;
	if (rms_dims(p, &m, &n))
		return -EINVAL;
	int64_t G = pr[0], rows = pr[1], vb = pr[2];
	if (G <= 0 || G * rows > 1024 || (vb != 8 && vb != 16))
		return -EINVAL;
	if ((int64_t)flyk_dtype_bytes(p->dtype) > vb)
		return -EINVAL;
	int64_t vec = vb / (int64_t)flyk_dtype_bytes(p->dtype);
	/* Sub-warp groups (several rows per warp) for rows of at most two
	 * vectors per thread (bf16 128: 16 lanes x 16 B); longer rows take
	 * a warp.  Whole warps per block: the shuffles use every lane. */
	if (G < dev->warp ? (G & (G - 1)) || n > 2 * G * vec ||
				    (G * rows) % dev->warp
			  : G % dev->warp)
		return -EINVAL;
	/* A group more than twice as wide as the row: a narrower one does
	 * the same with fewer idle threads. */
	if (G > dev->warp && (G / 2) * vec >= n)
		return -EINVAL;
	/* Several rows per block only pay for short rows. */
	if (rows > 1 && G * rows > 256 && rows * (int64_t)n > 65536)
		return -EINVAL;
	int R = rms_pick_r(rms_need(n, p->dtype, G, vb));
	if (!R || G * rows > RMS_MAXT(R, vb))
		return -ENOSPC;
	return 0;
}

static int rows_launch(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr,
		       const union flyk_args *args, void *stream)
{
	int64_t m = 0;
	int n = 0;
	int rc = rows_feasible(dev, p, pr);
	if (rc)
		return rc;
	rms_dims(p, &m, &n);
	const struct flyk_rmsnorm_args *a = &args->rmsnorm;
	if (!rms_aligned(a, p->flags))
		return -EINVAL;
	int G = (int)pr[0], rows = (int)pr[1], vb = (int)pr[2];
	int R = rms_pick_r(rms_need(n, p->dtype, G, vb));
	hipStream_t s = (hipStream_t)stream;
	switch (p->dtype) {
	case FLY_DT_FP32:
		return rms_rows_dt<FLY_DT_FP32>(a, p->flags, m, n, G, rows, vb,
						R, s);
	case FLY_DT_FP16:
		return rms_rows_dt<FLY_DT_FP16>(a, p->flags, m, n, G, rows, vb,
						R, s);
	default:
		return rms_rows_dt<FLY_DT_BF16>(a, p->flags, m, n, G, rows, vb,
						R, s);
	}
}

/* ---- lat (decode sizes: one DRAM round trip for x, r and w) */

/* For 1 to a few thousand rows the time is the launch, one DRAM round
 * trip and the reduction: x, r and w of a thread are all in flight
 * before the first is used (rmsnorm_rows loads w after the reduction, a
 * second round trip while the grid is one wave and w not yet cached).
 * Whole warps a row, 16-byte vectors; group = warp: no block barrier. */
/* Powers of two, and the widths that cover rows of 5120 and 7168 (640
 * and 896 16-byte vectors of bf16/fp16) in 1, 2 or 4 vectors a thread
 * with no idle lanes. */
static const int64_t lat_group[] = {128, 64,  32,  256, 512, 1024,
				    160, 320, 640, 224, 448, 896};
static const int64_t lat_rows[] = {1, 2, 4};
#define LAT_MAX_M 8192

static int lat_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n;
	if (rms_dims(p, &m, &n) || m > LAT_MAX_M)
		return -EINVAL;
	int64_t G = pr[0], rows = pr[1];
	if (G < dev->warp || G % dev->warp || rows < 1 || G * rows > 1024)
		return -EINVAL;
	int64_t vec = 16 / (int64_t)flyk_dtype_bytes(p->dtype);
	if (G > dev->warp && (G / 2) * vec >= n) /* narrower does it */
		return -EINVAL;
	/* Blocks of several rows only where the grid still has two blocks
	 * an SM (else one row a block spreads the loads over more SMs);
	 * they keep small groups from the per-SM block limit. */
	if (rows > 1 && m < 2 * (int64_t)dev->sms * rows)
		return -EINVAL;
	int R = rms_pick_r(rms_need(n, p->dtype, G, 16));
	if (!R || G * rows > LAT_MAXT(R))
		return -ENOSPC;
	return 0;
}

static int lat_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int64_t m = 0;
	int n = 0;
	int rc = lat_feasible(dev, p, pr);
	if (rc)
		return rc;
	rms_dims(p, &m, &n);
	const struct flyk_rmsnorm_args *a = &args->rmsnorm;
	if (!rms_aligned(a, p->flags))
		return -EINVAL;
	int G = (int)pr[0], rows = (int)pr[1];
	int R = rms_pick_r(rms_need(n, p->dtype, G, 16));
	hipStream_t s = (hipStream_t)stream;
	switch (p->dtype) {
	case FLY_DT_FP32:
		return rms_rows_res<FLY_DT_FP32, 16, true>(a, p->flags, m, n,
							   G, rows, R, s);
	case FLY_DT_FP16:
		return rms_rows_res<FLY_DT_FP16, 16, true>(a, p->flags, m, n,
							   G, rows, R, s);
	default:
		return rms_rows_res<FLY_DT_BF16, 16, true>(a, p->flags, m, n,
							   G, rows, R, s);
	}
}

/* ---- cluster */

static const int64_t cl_size[] = {2, 4, 8};
static const int64_t cl_threads[] = {256, 512, 1024};

static int cl_feasible(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n;
	if (rms_dims(p, &m, &n))
		return -EINVAL;
	if (!FLYK_HAS_CLUSTERS || dev->cc_major < 9)
		return -ENOSPC;
	int64_t CL = pr[0], th = pr[1];
	if (CL < 2 || CL > 8 || th < 64 || th > 1024 || th % dev->warp)
		return -EINVAL;
	int64_t vec = 16 / (int64_t)flyk_dtype_bytes(p->dtype);
	if ((CL * th / 2) * vec >= n) /* a smaller cluster would do */
		return -EINVAL;
	if (m * CL > 0x7fffffff)
		return -EINVAL;
	int R = rms_pick_r(rms_need(n, p->dtype, CL * th, 16));
	if (!R || th > RMS_MAXT(R, 16))
		return -ENOSPC;
	return 0;
}

#if FLYK_HAS_CLUSTERS
template <int DT, int R, bool RES>
static int cl_go(const struct flyk_rmsnorm_args *a, int64_t m, int n, int CL,
		 int th, hipStream_t s)
{
	typedef typename flyk_elem<DT>::T T;
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute attr[1];
	cfg.gridDim = dim3((unsigned)(m * CL));
	cfg.blockDim = dim3((unsigned)th);
	cfg.stream = s;
	attr[0].id = cudaLaunchAttributeClusterDimension;
	attr[0].val.clusterDim.x = CL;
	attr[0].val.clusterDim.y = 1;
	attr[0].val.clusterDim.z = 1;
	cfg.attrs = attr;
	cfg.numAttrs = 1;
	cudaError_t e = cudaLaunchKernelEx(&cfg,
					   rms_cluster_kernel<DT, 16, R, RES>,
					   RMS_ARGS(T), m, n, a->eps);
	return e == cudaSuccess ? 0 : -EIO;
}

template <int DT, bool RES>
static int cl_r(const struct flyk_rmsnorm_args *a, int64_t m, int n, int CL,
		int th, int R, hipStream_t s)
{
	switch (R) {
	case 1:
		return cl_go<DT, 1, RES>(a, m, n, CL, th, s);
	case 2:
		return cl_go<DT, 2, RES>(a, m, n, CL, th, s);
	case 4:
		return cl_go<DT, 4, RES>(a, m, n, CL, th, s);
	default:
		return cl_go<DT, 8, RES>(a, m, n, CL, th, s);
	}
}

template <int DT>
static int cl_dt(const struct flyk_rmsnorm_args *a, uint32_t flags,
		 int64_t m, int n, int CL, int th, int R, hipStream_t s)
{
	if (flags & FLY_F_RESIDUAL)
		return cl_r<DT, true>(a, m, n, CL, th, R, s);
	return cl_r<DT, false>(a, m, n, CL, th, R, s);
}
#endif

static int cl_launch(const struct flyk_device *dev,
		     const struct fly_problem *p, const int64_t *pr,
		     const union flyk_args *args, void *stream)
{
	int rc = cl_feasible(dev, p, pr);
	if (rc)
		return rc;
#if FLYK_HAS_CLUSTERS
	int64_t m = 0;
	int n = 0;
	rms_dims(p, &m, &n);
	const struct flyk_rmsnorm_args *a = &args->rmsnorm;
	if (!rms_aligned(a, p->flags))
		return -EINVAL;
	int CL = (int)pr[0], th = (int)pr[1];
	int R = rms_pick_r(rms_need(n, p->dtype, (int64_t)CL * th, 16));
	hipStream_t s = (hipStream_t)stream;
	switch (p->dtype) {
	case FLY_DT_FP32:
		return cl_dt<FLY_DT_FP32>(a, p->flags, m, n, CL, th, R, s);
	case FLY_DT_FP16:
		return cl_dt<FLY_DT_FP16>(a, p->flags, m, n, CL, th, R, s);
	default:
		return cl_dt<FLY_DT_BF16>(a, p->flags, m, n, CL, th, R, s);
	}
#else
	return -EOPNOTSUPP;
#endif
}

/* ---- twopass and reference */

static const int64_t tp_threads[] = {256, 512, 1024};

static int tp_feasible(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n;
	if (rms_dims(p, &m, &n) || m > 0x7fffffff)
		return -EINVAL;
	if (pr[0] < 64 || pr[0] > 1024 || pr[0] % dev->warp)
		return -EINVAL;
	return 0;
}

template <int DT>
static int tp_dt(const struct flyk_rmsnorm_args *a, uint32_t flags,
		 int64_t m, int n, int th, hipStream_t s)
{
	typedef typename flyk_elem<DT>::T T;
	if (flags & FLY_F_RESIDUAL)
		FLYK_GO((unsigned)m, th, 0, s, rms_twopass_kernel<DT, true>)(
			RMS_ARGS(T), n, a->eps);
	else
		FLYK_GO((unsigned)m, th, 0, s, rms_twopass_kernel<DT, false>)(
			RMS_ARGS(T), n, a->eps);
	return rms_launch_err();
}

static int tp_launch(const struct flyk_device *dev,
		     const struct fly_problem *p, const int64_t *pr,
		     const union flyk_args *args, void *stream)
{
	int64_t m = 0;
	int n = 0;
	int rc = tp_feasible(dev, p, pr);
	if (rc)
		return rc;
	rms_dims(p, &m, &n);
	const struct flyk_rmsnorm_args *a = &args->rmsnorm;
	if (!rms_aligned(a, p->flags))
		return -EINVAL;
	hipStream_t s = (hipStream_t)stream;
	switch (p->dtype) {
	case FLY_DT_FP32:
		return tp_dt<FLY_DT_FP32>(a, p->flags, m, n, (int)pr[0], s);
	case FLY_DT_FP16:
		return tp_dt<FLY_DT_FP16>(a, p->flags, m, n, (int)pr[0], s);
	default:
		return tp_dt<FLY_DT_BF16>(a, p->flags, m, n, (int)pr[0], s);
	}
}

/* ---- l2 (two passes, the second from L2) */

static const int64_t l2_threads[] = {512, 1024, 256};
static const int64_t l2_unroll[] = {4, 2, 8};

static int l2_feasible(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n;
	if (rms_dims(p, &m, &n) || m > 0x7fffffff)
		return -EINVAL;
	int64_t th = pr[0], U = pr[1];
	if (th < 64 || th > 1024 || th % dev->warp ||
	    (U != 2 && U != 4 && U != 8))
		return -EINVAL;
	/* For rows shorter than half a chunk (threads * unroll vectors) a
	 * smaller point does the same; short rows belong to rmsnorm_rows. */
	int64_t vec = 16 / (int64_t)flyk_dtype_bytes(p->dtype);
	if (n / vec < th * U / 2)
		return -EINVAL;
	if (th > L2_MAXT(U, (p->flags & FLY_F_RESIDUAL) != 0))
		return -ENOSPC;
	return 0;
}

template <int DT, int U, bool IND>
static int l2_go(const struct flyk_rmsnorm_args *a, uint32_t flags,
		 int64_t m, int n, int th, hipStream_t s)
{
	typedef typename flyk_elem<DT>::T T;
	if (flags & FLY_F_RESIDUAL)
		FLYK_GO((unsigned)m, th, 0, s, rms_l2_kernel<DT, U, true, IND>)(
			RMS_ARGS(T), n, a->eps);
	else
		FLYK_GO((unsigned)m, th, 0, s, rms_l2_kernel<DT, U, false, IND>)(
			RMS_ARGS(T), n, a->eps);
	return rms_launch_err();
}

template <int DT, bool IND>
static int l2_dt(const struct flyk_rmsnorm_args *a, uint32_t flags,
		 int64_t m, int n, int th, int U, hipStream_t s)
{
	if (U == 2)
		return l2_go<DT, 2, IND>(a, flags, m, n, th, s);
	if (U == 4)
		return l2_go<DT, 4, IND>(a, flags, m, n, th, s);
	return l2_go<DT, 8, IND>(a, flags, m, n, th, s);
}

template <bool IND>
static int l2_launch_t(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *pr,
		       const union flyk_args *args, void *stream)
{
	int64_t m = 0;
	int n = 0;
	int rc = l2_feasible(dev, p, pr);
	if (rc)
		return rc;
	rms_dims(p, &m, &n);
	const struct flyk_rmsnorm_args *a = &args->rmsnorm;
	if (!rms_aligned(a, p->flags))
		return -EINVAL;
	int th = (int)pr[0], U = (int)pr[1];
	hipStream_t s = (hipStream_t)stream;
	switch (p->dtype) {
	case FLY_DT_FP32:
		return l2_dt<FLY_DT_FP32, IND>(a, p->flags, m, n, th, U, s);
	case FLY_DT_FP16:
		return l2_dt<FLY_DT_FP16, IND>(a, p->flags, m, n, th, U, s);
	default:
		return l2_dt<FLY_DT_BF16, IND>(a, p->flags, m, n, th, U, s);
	}
}

static int l2_launch(const struct flyk_device *dev,
		     const struct fly_problem *p, const int64_t *pr,
		     const union flyk_args *args, void *stream)
{
	return l2_launch_t<false>(dev, p, pr, args, stream);
}

static int l2i_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	return l2_launch_t<true>(dev, p, pr, args, stream);
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *pr)
{
	int64_t m;
	int n;
	if (rms_dims(p, &m, &n) || m > 0x7fffffff)
		return -EINVAL;
	return 0;
}

template <int DT>
static int ref_dt(const struct flyk_rmsnorm_args *a, uint32_t flags,
		  int64_t m, int n, hipStream_t s)
{
	typedef typename flyk_elem<DT>::T T;
	if (flags & FLY_F_RESIDUAL)
		FLYK_GO((unsigned)m, 256, 0, s, rms_ref_kernel<DT, true>)(
			RMS_ARGS(T), n, a->eps);
	else
		FLYK_GO((unsigned)m, 256, 0, s, rms_ref_kernel<DT, false>)(
			RMS_ARGS(T), n, a->eps);
	return rms_launch_err();
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *pr,
		      const union flyk_args *args, void *stream)
{
	int64_t m = 0;
	int n = 0;
	int rc = ref_feasible(dev, p, pr);
	if (rc)
		return rc;
	rms_dims(p, &m, &n);
	hipStream_t s = (hipStream_t)stream;
	switch (p->dtype) {
	case FLY_DT_FP32:
		return ref_dt<FLY_DT_FP32>(&args->rmsnorm, p->flags, m, n, s);
	case FLY_DT_FP16:
		return ref_dt<FLY_DT_FP16>(&args->rmsnorm, p->flags, m, n, s);
	default:
		return ref_dt<FLY_DT_BF16>(&args->rmsnorm, p->flags, m, n, s);
	}
}

#if !FLYK_DEVICE_PASS

static const struct flyk_variant rms_variants[] = {
	{"rmsnorm_ref", FLY_OP_RMSNORM, DT_MASK, FLY_F_RESIDUAL, 1, 0, {},
	 ref_feasible, NULL, ref_launch},
	{"rmsnorm_rows", FLY_OP_RMSNORM, DT_MASK, FLY_F_RESIDUAL, 0, 3,
	 {{"group", FLYK_NV(rows_group)}, {"rows", FLYK_NV(rows_rows)},
	  {"vec", FLYK_NV(rows_vec)}},
	 rows_feasible, NULL, rows_launch},
	{"rmsnorm_lat", FLY_OP_RMSNORM, DT_MASK, FLY_F_RESIDUAL, 0, 2,
	 {{"group", FLYK_NV(lat_group)}, {"rows", FLYK_NV(lat_rows)}},
	 lat_feasible, NULL, lat_launch},
	/* before rmsnorm_cluster: the tuner's margin (3%) gives a near-tie
	 * to the earlier variant, and on the H100's fp32 2048x32768 the
	 * cluster point within 2.6% of it was served at 0.96x of Inductor
	 * where rmsnorm_l2i ran at 0.99x (2e24e36) */
	{"rmsnorm_l2i", FLY_OP_RMSNORM, DT_MASK, FLY_F_RESIDUAL, 0, 2,
	 {{"threads", FLYK_NV(l2_threads)}, {"unroll", FLYK_NV(l2_unroll)}},
	 l2_feasible, NULL, l2i_launch},
	{"rmsnorm_cluster", FLY_OP_RMSNORM, DT_MASK, FLY_F_RESIDUAL, 0, 2,
	 {{"cluster", FLYK_NV(cl_size)}, {"threads", FLYK_NV(cl_threads)}},
	 cl_feasible, NULL, cl_launch},
	{"rmsnorm_twopass", FLY_OP_RMSNORM, DT_MASK, FLY_F_RESIDUAL, 0, 1,
	 {{"threads", FLYK_NV(tp_threads)}}, tp_feasible, NULL, tp_launch},
	{"rmsnorm_l2", FLY_OP_RMSNORM, DT_MASK, FLY_F_RESIDUAL, 0, 2,
	 {{"threads", FLYK_NV(l2_threads)}, {"unroll", FLYK_NV(l2_unroll)}},
	 l2_feasible, NULL, l2_launch, "rmsnorm_l2i"},
};
#endif

/* ------------------------------------------------------------ case */

struct rms_state {
	void *d_yref;   /* reference y */
	void *d_rref;   /* reference residual after (RESIDUAL) */
	void *d_r0;     /* pristine residual, restored before each rep */
	unsigned *d_cmp; /* flyk_gpu_compare's two words */
	size_t bytes;   /* m * n * elem */
};

static int rms_setup(struct flyk_case *c, uint64_t seed)
{
	int64_t m;
	int n;
	if (rms_dims(&c->p, &m, &n))
		return -EOPNOTSUPP;
	size_t es = flyk_dtype_bytes(c->p.dtype);
	size_t bytes = (size_t)m * n * es;
	struct rms_state *st = (struct rms_state *)calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	c->state = st;
	st->bytes = bytes;
	struct flyk_rmsnorm_args *a = &c->args.rmsnorm;
	void *x, *w, *y, *r = NULL, *cmp;
	int res = (c->p.flags & FLY_F_RESIDUAL) != 0;
	if (flyk_gpu_case_alloc(c, bytes, 0, &x) < 0 ||
	    flyk_gpu_case_alloc(c, (size_t)n * es, 0, &w) < 0 ||
	    flyk_gpu_case_alloc(c, bytes, 1, &y) < 0 ||
	    flyk_gpu_case_alloc(c, bytes, 0, &st->d_yref) < 0 ||
	    flyk_gpu_case_alloc(c, 2 * sizeof(unsigned), 0, &cmp) < 0)
		return -ENOMEM;
	st->d_cmp = (unsigned *)cmp;
	if (res && (flyk_gpu_case_alloc(c, bytes, 0, &r) < 0 ||
		    flyk_gpu_case_alloc(c, bytes, 0, &st->d_r0) < 0 ||
		    flyk_gpu_case_alloc(c, bytes, 0, &st->d_rref) < 0))
		return -ENOMEM;
	struct flyk_device *dev = c->dev;
	int rc = flyk_gpu_fill_random(dev, x, (size_t)m * n, c->p.dtype,
				      -2.f, 2.f, seed);
	if (!rc)
		rc = flyk_gpu_fill_random(dev, w, (size_t)n, c->p.dtype, 0.5f,
					  1.5f, seed + 1);
	if (!rc && res)
		rc = flyk_gpu_fill_random(dev, st->d_r0, (size_t)m * n,
					  c->p.dtype, -1.f, 1.f, seed + 2);
	if (rc)
		return rc;
	hipStream_t s = (hipStream_t)dev->stream;
	if (res && (hipMemcpyAsync(st->d_rref, st->d_r0, bytes,
				   hipMemcpyDeviceToDevice, s) != hipSuccess ||
		    hipMemcpyAsync(r, st->d_r0, bytes,
				   hipMemcpyDeviceToDevice, s) != hipSuccess))
		return -EIO;
	a->x = x;
	a->w = w;
	a->y = st->d_yref;
	a->residual = st->d_rref;
	a->eps = 1e-6f;
	rc = ref_launch(dev, &c->p, NULL, &c->args, s);
	a->y = y;
	a->residual = r;
	return rc;
}

static int rms_prepare(struct flyk_case *c)
{
	struct rms_state *st = (struct rms_state *)c->state;
	if (!st->d_r0)
		return 0;
	return hipMemcpyAsync(c->args.rmsnorm.residual, st->d_r0, st->bytes,
			      hipMemcpyDeviceToDevice,
			      (hipStream_t)c->dev->stream) == hipSuccess
		       ? 0
		       : -EIO;
}

static float rms_tol(uint32_t dt)
{
	return dt == FLY_DT_BF16 ? 2e-2f : dt == FLY_DT_FP16 ? 5e-3f : 1e-5f;
}

/* Max abs error of @p got vs @p ref into *max_err (kept if larger);
 * -EDOM when any element is NaN or off by more than rms_tol(dt) *
 * max(|ref|, 1). */
static int rms_compare(struct flyk_case *c, const void *got, const void *ref,
		       double *max_err)
{
	struct rms_state *st = (struct rms_state *)c->state;
	uint32_t dt = c->p.dtype;
	double e = 0;
	int rc = flyk_gpu_compare(c->dev, dt, got, ref,
				  st->bytes / flyk_dtype_bytes(dt), rms_tol(dt),
				  1.f, 0.f, st->d_cmp, &e);
	if (e > *max_err)
		*max_err = e;
	return rc;
}

static int rms_check(struct flyk_case *c, double *max_err)
{
	struct rms_state *st = (struct rms_state *)c->state;
	*max_err = 0;
	int rc = rms_compare(c, c->args.rmsnorm.y, st->d_yref, max_err);
	if (!rc && st->d_rref)
		rc = rms_compare(c, c->args.rmsnorm.residual, st->d_rref,
				 max_err);
	return rc;
}

static void rms_fini(struct flyk_case *c)
{
	free(c->state);
	c->state = NULL;
}

#if !FLYK_DEVICE_PASS
extern "C" const struct flyk_gpu_op flyk_gpu_rmsnorm_op = {
	FLY_OP_RMSNORM,	 rms_variants, sizeof(rms_variants) / sizeof(rms_variants[0]),
	rms_setup,	 rms_check,    rms_fini,
	rms_prepare,
};
#endif
