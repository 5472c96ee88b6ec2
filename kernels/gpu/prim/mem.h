/*
 * prim/mem.h -- global-memory access with cache control, and packed
 * 16-bit conversion: 16-byte loads and stores with an L2 eviction policy
 * (evict_last / evict_first, NVIDIA sm_80+), streaming stores, and two
 * floats packed to fp16x2 / bf16x2 in one instruction.  Plain loads,
 * stores and flyk_elem conversions elsewhere (AMD, the emulator), so a
 * kernel written against these runs everywhere.
 *
 * Owns: nothing (device inlines).  Thread: device code only.
 */
#ifndef FLYK_PRIM_MEM_H
#define FLYK_PRIM_MEM_H

#include <string.h>

#include "fly_abi.h"
#include "prim/flyk_gpu.h"

/* A vector store of @p b bytes at @p p is about to be made: it must be
 * aligned on the GPU (a misaligned one is a sticky launch error); the
 * emulator counts the misaligned ones, elsewhere it is nothing. */
#ifdef FLYK_EMU
#define FLYK_VST_ALIGNED(p, b) flyk_emu_align((const void *)(p), (b))
#else
#define FLYK_VST_ALIGNED(p, b) ((void)0)
#endif

/* Two floats to a packed pair of 16-bit DT elements (lo in the low half):
 * one F2FP instruction on sm_80+; the generic bf16 rounding (flyk_df2b)
 * costs ~6 integer ops per element, enough to make bf16 compute-bound
 * near 4 TB/s (H200: bf16 3579 GB/s vs fp16 3950 at one rmsnorm point). */
template <int DT>
__device__ __forceinline__ uint32_t flyk_pack2(float lo, float hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	uint32_t r;
	if (DT == FLY_DT_BF16)
		asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	else
		asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
#else
	return (uint32_t)flyk_elem<DT>::store(lo) |
	       (uint32_t)flyk_elem<DT>::store(hi) << 16;
#endif
}

/* 16-byte global load with an L2 eviction policy (sm_80+; a plain load
 * elsewhere).  volatile + "memory": never moved across the residual's
 * stores or the reduction's barrier. */
template <typename V>
__device__ __forceinline__ V flyk_ld_pol(const V *p, uint64_t pol)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	uint32_t r[4];
	asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, "
		     "[%4], %5;"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "l"(p), "l"(pol)
		     : "memory");
	V v;
	memcpy(&v, r, 16);
	return v;
#else
	(void)pol;
	return *p;
#endif
}

/* The same for data no thread writes (w): no volatile, no clobber, so
 * the compiler may schedule it freely (loading all U vectors of w ahead
 * of the stores instead spilled at unroll 4-8 under 64 registers). */
template <typename V>
__device__ __forceinline__ V flyk_ld_pol_ro(const V *p, uint64_t pol)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	uint32_t r[4];
	asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
	    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	    : "l"(p), "l"(pol));
	V v;
	memcpy(&v, r, 16);
	return v;
#else
	(void)pol;
	return *p;
#endif
}

/* 16-byte global load with an L1 eviction priority (sm_80+; a plain
 * load elsewhere): LAST for a line read again soon by the same block,
 * else evict_first -- the hints Triton emits for eviction_policy=
 * 'evict_last' / 'evict_first' (Inductor's two-pass reductions).
 * volatile + "memory" as flyk_ld_pol. */
template <bool LAST, typename V>
__device__ __forceinline__ V flyk_ld_l1(const V *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	uint32_t r[4];
	if constexpr (LAST)
		asm volatile("ld.global.L1::evict_last.v4.u32 {%0, %1, %2, "
			     "%3}, [%4];"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
			     : "l"(p)
			     : "memory");
	else
		asm volatile("ld.global.L1::evict_first.v4.u32 {%0, %1, %2, "
			     "%3}, [%4];"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
			     : "l"(p)
			     : "memory");
	V v;
	memcpy(&v, r, 16);
	return v;
#else
	return *p;
#endif
}

/* flyk_ld_l1<true> for data no thread writes (w): not volatile, so the
 * compiler may schedule it freely (as flyk_ld_pol_ro). */
template <typename V>
__device__ __forceinline__ V flyk_ld_l1_last_ro(const V *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	uint32_t r[4];
	asm("ld.global.L1::evict_last.v4.u32 {%0, %1, %2, %3}, [%4];"
	    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	    : "l"(p));
	V v;
	memcpy(&v, r, 16);
	return v;
#else
	return *p;
#endif
}

/* L2 policies: evict_last for the first read of a row (it is read again
 * soon), evict_first for the second (last use). */
__device__ __forceinline__ uint64_t flyk_l2_policy(bool keep)
{
	uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	if (keep)
		asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;"
		    : "=l"(pol));
	else
		asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;"
		    : "=l"(pol));
#else
	(void)keep;
#endif
	return pol;
}

/* L2 policy evict_normal: for data read once whose L2 residency should
 * still follow plain LRU (a GEMM's weights: evict_first keeps them from
 * surviving in L2 between back-to-back calls that a plain load's and
 * cuBLAS's reads reuse). */
__device__ __forceinline__ uint64_t flyk_l2_policy_normal(void)
{
	uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;"
	    : "=l"(pol));
#endif
	return pol;
}

/* 16-byte store with an L2 eviction policy (plain elsewhere). */
template <typename V>
__device__ __forceinline__ void flyk_st_pol(V *p, const V &v, uint64_t pol)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	uint32_t r[4];
	memcpy(r, &v, 16);
	asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, "
		     "%5;"
		     :
		     : "l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]),
		       "l"(pol)
		     : "memory");
#else
	(void)pol;
	*p = v;
#endif
}

/* Streaming (evict-first) 16-byte store: y must not push x out of L2. */
template <typename V>
__device__ __forceinline__ void flyk_st_stream(V *p, const V &v)
{
#if defined(__CUDA_ARCH__)
	uint4 u;
	memcpy(&u, &v, 16);
	__stcs((uint4 *)p, u);
#else
	*p = v;
#endif
}

#endif /* FLYK_PRIM_MEM_H */
