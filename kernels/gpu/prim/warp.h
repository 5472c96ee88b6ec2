/*
 * prim/warp.h -- warp/wave-wide exchanges beyond prim/flyk_gpu.h's
 * FLYK_SHFL* macros: 64-bit shuffles (two 32-bit ones) and the warp-wide
 * maximum of a 64-bit word, and the warp barrier (flyk_syncwarp), for
 * FLYK_WARP = 32 (NVIDIA) or 64 (AMD).
 *
 * Owns: nothing (device inlines).  Thread: device code; every lane of the
 * warp calls together.
 */
#ifndef FLYK_PRIM_WARP_H
#define FLYK_PRIM_WARP_H

#include "prim/flyk_gpu.h"

__device__ __forceinline__ unsigned long long
flyk_shfl_xor_u64(unsigned long long v, int m)
{
	uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
	lo = FLYK_SHFL_XOR(lo, m);
	hi = FLYK_SHFL_XOR(hi, m);
	return ((unsigned long long)hi << 32) | lo;
}

__device__ __forceinline__ unsigned long long
flyk_shfl_u64(unsigned long long v, int src)
{
	uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
	lo = FLYK_SHFL(lo, src);
	hi = FLYK_SHFL(hi, src);
	return ((unsigned long long)hi << 32) | lo;
}

/* The largest @p v of the warp, in every lane. */
__device__ __forceinline__ unsigned long long
flyk_warp_max_u64(unsigned long long v)
{
#pragma unroll
	for (int o = FLYK_WARP / 2; o > 0; o >>= 1) {
		unsigned long long w = flyk_shfl_xor_u64(v, o);
		v = w > v ? w : v;
	}
	return v;
}

/* The lanes of the warp meet here; their shared-memory writes before it
 * are seen by the warp after it.  AMD's wave runs in lockstep: a compiler
 * barrier is enough there. */
__device__ __forceinline__ void flyk_syncwarp(void)
{
#if defined(FLYK_EMU)
	flyk_emu_syncwarp();
#elif FLYK_AMD
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
#else
	__syncwarp();
#endif
}

#endif /* FLYK_PRIM_WARP_H */
