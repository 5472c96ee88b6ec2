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

#endif /* FLYK_PRIM_RAND_H */
