/*
 * prim/cp_async.h -- asynchronous global-to-shared copies (NVIDIA sm_80+
 * cp.async): 16-byte copies, zero-filled when the predicate is false,
 * committed in groups and waited for by count -- the stage pipelines of
 * the GEMM tile engines and the MQA KV ring are built on these.
 *
 * Owns: nothing (device inlines).  Thread: device code only.
 * Elsewhere (AMD, the host pass) they compile to nothing; under FLYK_EMU
 * the copy is done at once by the emulator (tests/gpu/emu), so a pipeline
 * written against them runs there too.
 */
#ifndef FLYK_PRIM_CP_ASYNC_H
#define FLYK_PRIM_CP_ASYNC_H

#include "prim/flyk_gpu.h"

__device__ __forceinline__ void flyk_cp16(void *smem, const void *g, bool pred)
{
#if FLYK_MMA_DEVICE
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	int sz = pred ? 16 : 0;
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s),
		     "l"(g), "r"(sz));
#elif defined(FLYK_EMU)
	flyk_emu_cp16(smem, g, pred);
#endif
}

__device__ __forceinline__ void flyk_cp_commit(void)
{
#if FLYK_MMA_DEVICE
	asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N> __device__ __forceinline__ void flyk_cp_wait(void)
{
#if FLYK_MMA_DEVICE
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

#endif /* FLYK_PRIM_CP_ASYNC_H */
