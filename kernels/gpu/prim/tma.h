/*
 * prim/tma.h -- the Hopper tensor memory accelerator and its mbarriers
 * (sm_90a, nvcc only): mbarrier init/expect_tx/arrive (local and on a
 * cluster peer)/wait, TMA tile loads (2-D, 3-D, and their cluster-multicast
 * forms; 4-D), TMA stores and their bulk groups, tensor-map prefetch, named
 * barriers, setmaxnreg, and on the host the bf16 tensor-map encoding with
 * a small per-thread cache (dense, or strided views).
 *
 * Owns: nothing (device inlines; the host tensor-map cache is per host
 * thread).  Thread: device code as documented per function.
 * Everything here exists only where FLYK_HAS_TMA (sm_90a under nvcc, not
 * the emulator: it has no copy engine).
 */
#ifndef FLYK_PRIM_TMA_H
#define FLYK_PRIM_TMA_H

#include "prim/flyk_gpu.h"

#if FLYK_HAS_TMA
#include <errno.h>
#include <cuda.h>
#include <string.h>

__device__ __forceinline__ uint32_t flyk_smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void flyk_bar_init(uint64_t *bar, unsigned count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(
			 flyk_smem_u32(bar)),
		     "r"(count)
		     : "memory");
}

__device__ __forceinline__ void flyk_bar_init_fence(void)
{
	asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void flyk_bar_expect(uint64_t *bar, unsigned bytes)
{
	asm volatile(
	    "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
		flyk_smem_u32(bar)),
	    "r"(bytes)
	    : "memory");
}

__device__ __forceinline__ void flyk_bar_arrive(uint64_t *bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(
			 flyk_smem_u32(bar))
		     : "memory");
}

/* Wait until the phase of parity @p parity of @p bar has completed. */
__device__ __forceinline__ void flyk_bar_wait(uint64_t *bar, unsigned parity)
{
	uint32_t a = flyk_smem_u32(bar), ok;
	do {
		asm volatile("{\n.reg .pred p;\n"
			     "mbarrier.try_wait.parity.shared::cta.b64 p, "
			     "[%1], %2;\n"
			     "selp.u32 %0, 1, 0, p;\n}\n"
			     : "=r"(ok)
			     : "r"(a), "r"(parity)
			     : "memory");
	} while (!ok);
}

__device__ __forceinline__ void flyk_tma_2d(void *dst, const void *map,
					    uint64_t *bar, int c0, int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier"
		     "::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
			 flyk_smem_u32(dst)),
		     "l"((uint64_t)(uintptr_t)map), "r"(flyk_smem_u32(bar)),
		     "r"(c0), "r"(c1)
		     : "memory");
}

__device__ __forceinline__ void flyk_tma_3d(void *dst, const void *map,
					    uint64_t *bar, int c0, int c1,
					    int c2)
{
	asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier"
		     "::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::
			 "r"(flyk_smem_u32(dst)),
		     "l"((uint64_t)(uintptr_t)map), "r"(flyk_smem_u32(bar)),
		     "r"(c0), "r"(c1), "r"(c2)
		     : "memory");
}

__device__ __forceinline__ void flyk_tma_4d(void *dst, const void *map,
					    uint64_t *bar, int c0, int c1,
					    int c2, int c3)
{
	asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier"
		     "::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::
			 "r"(flyk_smem_u32(dst)),
		     "l"((uint64_t)(uintptr_t)map), "r"(flyk_smem_u32(bar)),
		     "r"(c0), "r"(c1), "r"(c2), "r"(c3)
		     : "memory");
}

/* The multicast forms: the box lands at the same offset in every block of
 * @p mask (bit r: cluster rank r), completing its bytes on the mbarrier
 * at the same offset in each. */
__device__ __forceinline__ void flyk_tma_2d_mc(void *dst, const void *map,
					       uint64_t *bar, int c0, int c1,
					       uint16_t mask)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier"
		     "::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, "
		     "%4}], [%2], %5;\n" ::"r"(flyk_smem_u32(dst)),
		     "l"((uint64_t)(uintptr_t)map), "r"(flyk_smem_u32(bar)),
		     "r"(c0), "r"(c1), "h"(mask)
		     : "memory");
}

__device__ __forceinline__ void flyk_tma_3d_mc(void *dst, const void *map,
					       uint64_t *bar, int c0, int c1,
					       int c2, uint16_t mask)
{
	asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier"
		     "::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, "
		     "%4, %5}], [%2], %6;\n" ::"r"(flyk_smem_u32(dst)),
		     "l"((uint64_t)(uintptr_t)map), "r"(flyk_smem_u32(bar)),
		     "r"(c0), "r"(c1), "r"(c2), "h"(mask)
		     : "memory");
}

/* Arrive on the mbarrier at @p bar's offset in block @p peer of the
 * cluster (release at CTA scope, as a local arrival: what it orders is
 * this warp's wgmma reads of the stage, retired by wgmma.wait_group). */
__device__ __forceinline__ void flyk_bar_arrive_peer(uint64_t *bar,
						     unsigned peer)
{
	asm volatile("{\n.reg .b32 ra;\n"
		     "mapa.shared::cluster.u32 ra, %0, %1;\n"
		     "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(
			 flyk_smem_u32(bar)),
		     "r"(peer)
		     : "memory");
}

__device__ __forceinline__ void flyk_tma_prefetch_map(const void *map)
{
	asm volatile("prefetch.tensormap [%0];\n" ::"l"(
			 (uint64_t)(uintptr_t)map)
		     : "memory");
}

/* Store the box at @p src (shared) to (c0, c1) of @p map (clipped to
 * the map's bounds), as one bulk group of this thread. */
__device__ __forceinline__ void flyk_tma_store_2d(const void *map,
						  const void *src, int c0,
						  int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group "
		     "[%0, {%2, %3}], [%1];\n" ::"l"((uint64_t)(uintptr_t)map),
		     "r"(flyk_smem_u32(src)), "r"(c0), "r"(c1)
		     : "memory");
}

__device__ __forceinline__ void flyk_tma_store_commit(void)
{
	asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/* This thread's bulk stores have read their shared memory. */
__device__ __forceinline__ void flyk_tma_store_wait_read(void)
{
	asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

/* This thread's bulk stores are complete (written). */
__device__ __forceinline__ void flyk_tma_store_wait(void)
{
	asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

/* Barrier @p id (1..15) among @p n threads (a warpgroup: 128). */
__device__ __forceinline__ void flyk_bar_named(int id, int n)
{
	asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* Arrive at barrier @p id (1..15) of @p n threads without waiting: the
 * other half of a producer/consumer hand-off through bar.sync. */
__device__ __forceinline__ void flyk_bar_named_arrive(int id, int n)
{
	asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

template <int R> __device__ __forceinline__ void flyk_reg_dec(void)
{
	asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

template <int R> __device__ __forceinline__ void flyk_reg_inc(void)
{
	asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

/* Shared-memory store of one 32-bit word (@p a: a shared address). */
__device__ __forceinline__ void flyk_sts32(uint32_t a, uint32_t v)
{
	asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory");
}

/* ------------------------------------------------------------ host */

#if !FLYK_DEVICE_PASS
typedef CUresult (*flyk_tma_encode_fn)(
    CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled from the driver (no link against libcuda: the
 * library must load where there is no driver).  NULL where unavailable. */
static flyk_tma_encode_fn flyk_tma_encoder(void)
{
	static flyk_tma_encode_fn fn = [] {
		void *p = NULL;
		cudaDriverEntryPointQueryResult q;
		if (cudaGetDriverEntryPointByVersion(
			"cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
			&q) != cudaSuccess ||
		    q != cudaDriverEntryPointSuccess)
			p = NULL;
		return (flyk_tma_encode_fn)p;
	}();
	return fn;
}

/* The key of a tensor map: base, rank, dims, box rows. */
struct flyk_tma_key {
	const void *base;
	uint64_t dims[3];
	uint32_t rank, box_rows, f8;
};

/*
 * A bf16 (@p f8: one-byte) tensor map of @p rank (2 or 3) dims {dims[0]
 * (k, contiguous), dims[1], dims[2]}, box {64 (f8: 128), box_rows, 1}:
 * 128-byte rows, 128B swizzle, zero fill.  A
 * small per-thread cache keeps launches free of the encoding (the caller's
 * timing starts before the host call).  @return 0 or -EINVAL.
 */
static inline int flyk_tma_map(CUtensorMap *m, const void *base, uint32_t rank,
			const uint64_t *dims, uint32_t box_rows, int f8 = 0)
{
	enum { NCACHE = 16 };
	static thread_local struct {
		flyk_tma_key key;
		CUtensorMap map;
	} cache[NCACHE];
	static thread_local int used, next;
	flyk_tma_key k;
	memset(&k, 0, sizeof(k));
	k.base = base;
	k.rank = rank;
	k.box_rows = box_rows;
	k.f8 = (uint32_t)f8;
	for (uint32_t i = 0; i < rank; i++)
		k.dims[i] = dims[i];
	for (int i = 0; i < used; i++)
		if (!memcmp(&cache[i].key, &k, sizeof(k))) {
			*m = cache[i].map;
			return 0;
		}
	flyk_tma_encode_fn enc = flyk_tma_encoder();
	const uint64_t eb = f8 ? 1 : 2;
	if (!enc || ((uintptr_t)base & 15) || (dims[0] * eb) % 16)
		return -EINVAL;
	cuuint64_t gd[3], gs[2];
	cuuint32_t box[3] = {f8 ? 128u : 64u, box_rows, 1}, es[3] = {1, 1, 1};
	for (uint32_t i = 0; i < rank; i++)
		gd[i] = dims[i];
	gs[0] = dims[0] * eb;
	gs[1] = dims[0] * dims[1] * eb;
	if (enc(m,
		f8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
		   : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
		rank, (void *)base, gd,
		gs, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
		CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
		CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
		return -EINVAL;
	int slot = used < NCACHE ? used++ : next++ % NCACHE;
	cache[slot].key = k;
	cache[slot].map = *m;
	return 0;
}

/*
 * A bf16 tensor map of @p rank (2..4) dims with explicit strides: dims[0]
 * contiguous, @p stride_b[i] the byte stride of dims[i + 1] (a multiple
 * of 16), box {64, box_rows, 1, 1}: 128-byte rows, 128B swizzle, zero
 * fill -- a strided view such as one head of [batch, seq, heads, dim].
 * Cached per host thread like flyk_tma_map.  @return 0 or -EINVAL.
 */
static inline int flyk_tma_map_strided(CUtensorMap *m, const void *base,
				uint32_t rank, const uint64_t *dims,
				const uint64_t *stride_b, uint32_t box_rows)
{
	enum { NCACHE = 16 };
	struct key {
		const void *base;
		uint64_t dims[4], strides[3];
		uint32_t rank, box_rows;
	};
	static thread_local struct {
		key k;
		CUtensorMap map;
	} cache[NCACHE];
	static thread_local int used, next;
	key k;
	memset(&k, 0, sizeof(k));
	if (rank < 2 || rank > 4)
		return -EINVAL;
	k.base = base;
	k.rank = rank;
	k.box_rows = box_rows;
	for (uint32_t i = 0; i < rank; i++)
		k.dims[i] = dims[i];
	for (uint32_t i = 0; i + 1 < rank; i++)
		k.strides[i] = stride_b[i];
	for (int i = 0; i < used; i++)
		if (!memcmp(&cache[i].k, &k, sizeof(k))) {
			*m = cache[i].map;
			return 0;
		}
	flyk_tma_encode_fn enc = flyk_tma_encoder();
	if (!enc || ((uintptr_t)base & 15))
		return -EINVAL;
	cuuint64_t gd[4], gs[3];
	cuuint32_t box[4] = {64u, box_rows, 1, 1}, es[4] = {1, 1, 1, 1};
	for (uint32_t i = 0; i < rank; i++)
		gd[i] = dims[i];
	for (uint32_t i = 0; i + 1 < rank; i++) {
		if (stride_b[i] % 16 || stride_b[i] >= (1ull << 40))
			return -EINVAL;
		gs[i] = stride_b[i];
	}
	if (enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, (void *)base, gd,
		gs, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
		CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
		CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
		return -EINVAL;
	int slot = used < NCACHE ? used++ : next++ % NCACHE;
	cache[slot].k = k;
	cache[slot].map = *m;
	return 0;
}
#endif /* !FLYK_DEVICE_PASS */

#endif /* FLYK_HAS_TMA */
#endif /* FLYK_PRIM_TMA_H */
