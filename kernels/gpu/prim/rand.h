/*
 * prim/rand.h -- the counter-based random numbers of the benchmark cases'
 * fill kernels: element i of a fill seeded with s is
 * flyk_mix64(s * 0x9e3779b97f4a7c15 + i) (splitmix64's finaliser), so a
 * buffer's contents depend on (seed, index) only, not on the launch shape.
 *
 * Owns: nothing (device inline).  Thread: any.
 */
#ifndef FLYK_PRIM_RAND_H
#define FLYK_PRIM_RAND_H

#include "prim/flyk_gpu.h"

__device__ __forceinline__ uint64_t flyk_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The random word of element @p i of a fill seeded with @p seed. */
__device__ __forceinline__ uint64_t flyk_rand64(uint64_t seed, uint64_t i)
{
	return flyk_mix64(seed * 0x9e3779b97f4a7c15ull + i);
}

/* A random e4m3 byte of element @p i: sign, exponent field 4..9, any
 * mantissa, so never zero or NaN in fn or fnuz (the fp8 cases' inputs:
 * mqa_logits, scaled_gemm). */
__device__ __forceinline__ uint8_t flyk_rand_e4m3(uint64_t seed, uint64_t i)
{
	uint32_t r = (uint32_t)(flyk_rand64(seed, i) >> 32);
	return (uint8_t)(((r & 1u) << 7) | ((4u + (r >> 1) % 6u) << 3) |
			 ((r >> 8) & 7u));
}

#endif /* FLYK_PRIM_RAND_H */
