/*
 * emu_gemm.h -- force-included (-include) ahead of kernels/gpu/gemm.hip and
 * grouped_gemm.hip in the emulator build (tests/gpu/emu/emu_gemm.cpp): the
 * few runtime names those files use beyond what flyk_emu.h provides.
 *
 * Owns: nothing.  Thread: the emulator's one host thread.
 * Test-only; never part of a shipped build.
 */
#ifndef FLYK_EMU_GEMM_H
#define FLYK_EMU_GEMM_H

#include "flyk_gpu.h"

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

/* Lanes below @p o keep their own value (only lanes >= o read it). */
#define __shfl_up_sync(mask, v, o)                                             \
	flyk_emu_shfl((v), (int)(threadIdx.x % 32) - (int)(o))

#endif /* FLYK_EMU_GEMM_H */
