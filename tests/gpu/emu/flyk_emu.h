/*
 * flyk_emu.h -- just enough of the CUDA/HIP device model, on the CPU, to
 * run kernels/gpu's kernels for their logic: each GPU thread is a ucontext
 * coroutine; a block runs at a time, its threads scheduled round-robin
 * between barriers; warp shuffles and ballots go through a per-warp slot
 * array between two warp barriers.  Memory is host memory.
 *
 * Owns: the emulator's global state.  Thread: one host thread.
 * Test-only; never part of a shipped build.  The emulator build
 * force-includes it (-include) ahead of every source, so kernels/gpu
 * includes no test header (prim/flyk_gpu.h checks that it was).
 * Not emulated: clusters (FLYK_HAS_CLUSTERS 0), timing, real concurrency
 * (atomics are plain adds: threads only switch at barriers).
 */
#ifndef FLYK_EMU_H
#define FLYK_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#define FLYK_AMD 0
#define FLYK_WARP 32
#define FLYK_BACKEND_NAME "emu"
#define FLYK_BACKEND_KIND FLYK_BACKEND_CUDA
#define FLYK_HAS_CLUSTERS 0

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c)
	{
	}
};
struct alignas(16) uint4 {
	unsigned x, y, z, w;
};

extern dim3 threadIdx, blockIdx, blockDim, gridDim;

/* ---- runtime */
typedef int hipError_t;
typedef void *hipStream_t;
typedef void *hipEvent_t;
#define hipSuccess 0
#define hipErrorInvalidValue 1
#define hipFuncAttributeMaxDynamicSharedMemorySize 0
static inline hipError_t hipGetLastError(void) { return hipSuccess; }
static inline hipError_t hipFuncSetAttribute(const void *, int, int)
{
	return hipSuccess;
}
static inline hipError_t hipGetDevice(int *d)
{
	*d = 0;
	return hipSuccess;
}
static inline hipError_t hipMemcpyAsync(void *d, const void *s, size_t n,
					int, hipStream_t)
{
	memcpy(d, s, n);
	return hipSuccess;
}
#define hipMemcpyDeviceToDevice 0

/* ---- scheduler */
void flyk_emu_run(dim3 grid, dim3 block, size_t smem,
		  const std::function<void()> &body);
void flyk_emu_syncthreads(void);
void flyk_emu_syncwarp(void);
unsigned *flyk_emu_warp_slots(void); /* 32 x 2 words of this warp */
void *flyk_emu_dyn_smem(void);

#define __syncthreads() flyk_emu_syncthreads()

template <typename F> struct flyk_emu_launch {
	dim3 g, b;
	size_t s;
	F *f;
	template <typename... A> void operator()(A... a)
	{
		F *fn = f;
		flyk_emu_run(g, b, s, [=]() { fn(a...); });
	}
};
template <typename F>
flyk_emu_launch<F> flyk_emu_bind(dim3 g, dim3 b, size_t s, F *f)
{
	return flyk_emu_launch<F>{g, b, s, f};
}
#define FLYK_GO(g, b, s, st, ...) flyk_emu_bind((g), (b), (s), &__VA_ARGS__)
#define FLYK_DYN_SMEM(T, name) T *name = (T *)flyk_emu_dyn_smem()

/* ---- warp intrinsics: write, barrier, read, barrier */
static inline unsigned flyk_emu_xchg(unsigned v, int src)
{
	unsigned *sl = flyk_emu_warp_slots();
	int lane = threadIdx.x % 32;
	sl[lane] = v;
	flyk_emu_syncwarp();
	unsigned r = sl[src & 31];
	flyk_emu_syncwarp();
	return r;
}
static inline unsigned flyk_emu_shfl_u(unsigned v, int l) { return flyk_emu_xchg(v, l); }
static inline float flyk_emu_shfl_f(float v, int l)
{
	unsigned u;
	memcpy(&u, &v, 4);
	u = flyk_emu_xchg(u, l);
	memcpy(&v, &u, 4);
	return v;
}
static inline unsigned flyk_emu_shfl(unsigned v, int l) { return flyk_emu_shfl_u(v, l); }
static inline int flyk_emu_shfl(int v, int l) { return (int)flyk_emu_shfl_u((unsigned)v, l); }
static inline float flyk_emu_shfl(float v, int l) { return flyk_emu_shfl_f(v, l); }
#define FLYK_SHFL_XOR(v, m) flyk_emu_shfl((v), (int)(threadIdx.x % 32) ^ (m))
#define FLYK_SHFL(v, l) flyk_emu_shfl((v), (l))
/* Lanes below @p o keep their own value (only lanes >= o read it). */
#define FLYK_SHFL_UP(v, o) flyk_emu_shfl((v), (int)(threadIdx.x % 32) - (int)(o))
static inline unsigned flyk_emu_ballot(int p)
{
	unsigned *sl = flyk_emu_warp_slots();
	int lane = threadIdx.x % 32;
	sl[lane] = p ? 1u : 0u;
	flyk_emu_syncwarp();
	unsigned r = 0;
	for (int i = 0; i < 32; i++)
		r |= sl[i] << i;
	flyk_emu_syncwarp();
	return r;
}
#define FLYK_BALLOT(p) flyk_emu_ballot(p)

/* ---- the primitives' hooks: kernels/gpu/prim calls these under FLYK_EMU
 * in place of its PTX (defined in emu_gemm.cpp; a build that runs no
 * kernel using them needs no definition). */
void flyk_emu_cp16(void *smem, const void *g, bool pred);
void flyk_emu_ldmatrix(uint32_t *r, const uint16_t *p, bool trans);
void flyk_emu_mma16816(float *c, const uint32_t *a, const uint32_t *b);
void flyk_emu_mma16816_f16(float *c, const uint32_t *a, const uint32_t *b);
void flyk_emu_wgmma(float *d, uint64_t da, uint64_t db, int bn);
/* a vector store must be aligned on the GPU: counts the ones that are not */
void flyk_emu_align(const void *p, unsigned bytes);

/* ---- math and bits */
static inline unsigned __float_as_uint(float f)
{
	unsigned u;
	memcpy(&u, &f, 4);
	return u;
}
static inline float __uint_as_float(unsigned u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
static inline unsigned atomicAdd(unsigned *p, unsigned v)
{
	unsigned o = *p;
	*p = o + v;
	return o;
}
static inline unsigned atomicMax(unsigned *p, unsigned v)
{
	unsigned o = *p;
	*p = o > v ? o : v;
	return o;
}
extern "C" float flyk_half_to_float(uint16_t h);
extern "C" uint16_t flyk_float_to_half(float f);
typedef uint16_t __half;
static inline __half __ushort_as_half(uint16_t h) { return h; }
static inline uint16_t __half_as_ushort(__half h) { return h; }
static inline float __half2float(__half h) { return flyk_half_to_float(h); }
static inline __half __float2half_rn(float f) { return flyk_float_to_half(f); }

#endif /* FLYK_EMU_H */
