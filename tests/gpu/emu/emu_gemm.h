/*
 * emu_gemm.h -- force-included (-include) ahead of kernels/gpu/gemm/gemm.hip,
 * grouped_gemm.hip, scaled_gemm.hip and mqa_logits.hip in the emulator
 * build (tests/gpu/emu/emu_gemm.cpp): the few runtime names those files
 * use beyond what flyk_emu.h provides.
 *
 * Owns: nothing.  Thread: the emulator's one host thread.
 * Test-only; never part of a shipped build.
 */
#ifndef FLYK_EMU_GEMM_H
#define FLYK_EMU_GEMM_H

#include "prim/flyk_gpu.h" /* after flyk_emu.h, force-included first */

struct float2 {
	float x, y;
};

static inline float2 make_float2(float a, float b)
{
	float2 f;
	f.x = a;
	f.y = b;
	return f;
}

struct alignas(8) uint2 {
	unsigned x, y;
};

static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
	uint4 v;
	v.x = x;
	v.y = y;
	v.z = z;
	v.w = w;
	return v;
}

/* mqa_logits.hip's case (never run here: the cases need device memory) */
static inline hipError_t hipMemsetAsync(void *d, int v, size_t n,
					hipStream_t)
{
	memset(d, v, n);
	return hipSuccess;
}

#endif /* FLYK_EMU_GEMM_H */
