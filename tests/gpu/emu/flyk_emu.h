/*
 * flyk_emu.h -- just enough of the CUDA/HIP device model, on the CPU, to
 * run kernels/gpu's kernels for their logic: each GPU thread is a coroutine
 * (emu_sched.h); a block runs at a time, its threads scheduled round-robin
 * between barriers; warp shuffles and ballots go through a per-warp slot
 * array between two warp barriers.  Memory is host memory.
 *
 * Two device models, one per build (issue 27):
 *   NVIDIA (default)     FLYK_AMD 0, 32-lane warps, the FLYK_SHFL* macros
 *                        with CUDA's semantics, mma.sync / ldmatrix /
 *                        cp.async / wgmma through the hooks below.
 *   AMD (-DFLYK_EMU_AMD=1)  FLYK_AMD 1, 64-lane waves, HIP's __shfl,
 *                        __shfl_up, __shfl_down, __shfl_xor (width, no
 *                        mask) and a 64-bit __ballot, 64 KiB of LDS a
 *                        workgroup, two bf16 and two fp8 (gfx940 fnuz)
 *                        MFMA builtins (modelled in emu_gemm.cpp);
 *                        prim/flyk_gpu.h then turns off MMA,
 *                        wgmma, TMA, clusters and cuBLAS, so the kernels'
 *                        AMD branches are the ones compiled.
 *
 * Owns: the emulator's global state.  Thread: one host thread.
 * Test-only; never part of a shipped build.  The emulator build
 * force-includes it (-include) ahead of every source, so kernels/gpu
 * includes no test header (prim/flyk_gpu.h checks that it was).
 * Not emulated: clusters (FLYK_HAS_CLUSTERS 0), timing, real concurrency
 * (atomics are plain adds: threads only switch at barriers), the size of
 * static __shared__ arrays (only dynamic shared memory is held to the
 * limit).
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

#ifndef FLYK_EMU_AMD
#define FLYK_EMU_AMD 0
#endif
#if FLYK_EMU_AMD
#define FLYK_AMD 1
#define FLYK_WARP 64
#define FLYK_BACKEND_NAME "emu-amd"
#define FLYK_BACKEND_KIND FLYK_BACKEND_HIP
/* LDS a workgroup (CDNA2/CDNA3: 64 KiB) */
#define FLYK_EMU_SMEM_MAX (64 * 1024)
#else
#define FLYK_AMD 0
#define FLYK_WARP 32
#define FLYK_BACKEND_NAME "emu"
#define FLYK_BACKEND_KIND FLYK_BACKEND_CUDA
/* shared memory a block, opted in (sm_90: 227 KiB) */
#define FLYK_EMU_SMEM_MAX 232448
#endif
#define FLYK_HAS_CLUSTERS 0

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
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
/* The error of the last launch (flyk_emu_run refuses one asking for more
 * dynamic shared memory than FLYK_EMU_SMEM_MAX), cleared by reading. */
hipError_t flyk_emu_last_error(void);
static inline hipError_t hipGetLastError(void) { return flyk_emu_last_error(); }
static inline hipError_t hipFuncSetAttribute(const void *, int, int bytes)
{
	return bytes > FLYK_EMU_SMEM_MAX ? hipErrorInvalidValue : hipSuccess;
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
static inline hipError_t hipMemset(void *d, int v, size_t n)
{
	memset(d, v, n);
	return hipSuccess;
}

/* ---- scheduler */
void flyk_emu_run(dim3 grid, dim3 block, size_t smem,
		  const std::function<void()> &body);
void flyk_emu_syncthreads(void);
void flyk_emu_syncwarp(void);
/* FLYK_WARP words of this warp; a lane that has ended reads as
 * FLYK_EMU_GONE there (out of a ballot, garbage to a shuffle). */
uint64_t *flyk_emu_warp_slots(void);
#define FLYK_EMU_GONE 0xdeadbeefdeadbeefull
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
static inline int flyk_emu_lane(void) { return (int)(threadIdx.x % FLYK_WARP); }

/* Lane @p src's @p v (0 <= src < FLYK_WARP), any type of up to 8 bytes. */
template <typename T> static inline T flyk_emu_xchg(T v, int src)
{
	static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
	uint64_t *sl = flyk_emu_warp_slots(), u = 0;
	memcpy(&u, &v, sizeof(T));
	sl[flyk_emu_lane()] = u;
	flyk_emu_syncwarp();
	u = sl[src];
	flyk_emu_syncwarp();
	memcpy(&v, &u, sizeof(T));
	return v;
}

/* The lanes whose predicate is true, bit i for lane i. */
static inline uint64_t flyk_emu_ballot(int p)
{
	uint64_t *sl = flyk_emu_warp_slots(), r = 0;
	sl[flyk_emu_lane()] = p ? 1 : 0;
	flyk_emu_syncwarp();
	for (int i = 0; i < FLYK_WARP; i++)
		r |= (uint64_t)(sl[i] == 1) << i;
	flyk_emu_syncwarp();
	return r;
}

#if FLYK_EMU_AMD
/* HIP's wave64 cross-lane functions, as the HIP and rocPRIM documentation
 * gives them (width: a power of 2, at most the wave; each width-lane
 * section of the wave its own group):
 *   __shfl       lane src modulo width, of the caller's section
 *   __shfl_up    lane - delta; below the section: the caller's own value
 *   __shfl_down  lane + delta; past the section: the caller's own value
 *   __shfl_xor   lane ^ mask; outside the section: the caller's own value
 *   __ballot     a 64-bit mask, bit i for lane i
 * No mask argument: every active lane of the wave takes part. */
static inline int flyk_emu_base(int width)
{
	if (width < 1 || width > FLYK_WARP || (width & (width - 1)))
		abort(); /* undefined in HIP */
	return flyk_emu_lane() & ~(width - 1);
}
template <typename T> static inline T __shfl(T v, int src, int width = FLYK_WARP)
{
	return flyk_emu_xchg(v, flyk_emu_base(width) + (src & (width - 1)));
}
template <typename T>
static inline T __shfl_up(T v, unsigned delta, int width = FLYK_WARP)
{
	int l = flyk_emu_lane(), s = l - (int)delta;
	return flyk_emu_xchg(v, s < flyk_emu_base(width) ? l : s);
}
template <typename T>
static inline T __shfl_down(T v, unsigned delta, int width = FLYK_WARP)
{
	int l = flyk_emu_lane(), b = flyk_emu_base(width);
	int64_t s = (int64_t)l + delta;
	return flyk_emu_xchg(v, s >= b + width ? l : (int)s);
}
template <typename T>
static inline T __shfl_xor(T v, int mask, int width = FLYK_WARP)
{
	int l = flyk_emu_lane(), b = flyk_emu_base(width), s = l ^ mask;
	return flyk_emu_xchg(v, s < b || s >= b + width ? l : s);
}
static inline unsigned long long __ballot(int p) { return flyk_emu_ballot(p); }

/* MFMA bf16 (CDNA2 v_mfma_f32_*bf16_1k, CDNA3 v_mfma_f32_*_bf16): hipcc's
 * builtins, on GCC vector types of the sizes of their ext_vector_type
 * ones; a wave-wide exchange, every lane of the wave calls it together.
 * Emulated in emu_gemm.cpp (flyk_emu_mfma); cbsz, abid and blgp (the
 * broadcast controls) must be 0. */
/* (GCC notes at each definition and call that a 64-byte vector
 * argument's ABI depends on AVX-512: these are inline, never an ABI.) */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef short flyk_emu_short4 __attribute__((vector_size(8)));
typedef float flyk_emu_float4 __attribute__((vector_size(16)));
typedef float flyk_emu_float16 __attribute__((vector_size(64)));
void flyk_emu_mfma(int mn, const flyk_emu_short4 *a, const flyk_emu_short4 *b,
		   float *acc, int ctl);
static inline flyk_emu_float16
__builtin_amdgcn_mfma_f32_32x32x8bf16_1k(flyk_emu_short4 a, flyk_emu_short4 b,
					 flyk_emu_float16 c, int cbsz, int abid,
					 int blgp)
{
	flyk_emu_mfma(32, &a, &b, (float *)&c, cbsz | abid | blgp);
	return c;
}
static inline flyk_emu_float4
__builtin_amdgcn_mfma_f32_16x16x16bf16_1k(flyk_emu_short4 a, flyk_emu_short4 b,
					  flyk_emu_float4 c, int cbsz, int abid,
					  int blgp)
{
	flyk_emu_mfma(16, &a, &b, (float *)&c, cbsz | abid | blgp);
	return c;
}
/* MFMA fp8 (CDNA3 v_mfma_f32_32x32x16_fp8_fp8, ..._16x16x32_fp8_fp8):
 * both operands e4m3 fnuz (bias 8, 0x80 the only NaN, no infinity), 8 a
 * lane in one 64-bit register; the accumulators as the bf16 ones.
 * Emulated in emu_gemm.cpp (flyk_emu_mfma_fp8). */
void flyk_emu_mfma_fp8(int mn, long a, long b, float *acc, int ctl);
static inline flyk_emu_float16
__builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(long a, long b, flyk_emu_float16 c,
					   int cbsz, int abid, int blgp)
{
	flyk_emu_mfma_fp8(32, a, b, (float *)&c, cbsz | abid | blgp);
	return c;
}
static inline flyk_emu_float4
__builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(long a, long b, flyk_emu_float4 c,
					   int cbsz, int abid, int blgp)
{
	flyk_emu_mfma_fp8(16, a, b, (float *)&c, cbsz | abid | blgp);
	return c;
}
/* FLYK_SHFL* and FLYK_BALLOT: prim/flyk_gpu.h's AMD definitions, on the
 * functions above. */
#else
/* CUDA's *_sync semantics on the full warp: the source lane modulo 32
 * (FLYK_SHFL, FLYK_SHFL_XOR); FLYK_SHFL_UP: lanes below @p o keep their
 * own value. */
#define FLYK_SHFL_XOR(v, m) flyk_emu_xchg((v), (flyk_emu_lane() ^ (m)) & 31)
#define FLYK_SHFL(v, l) flyk_emu_xchg((v), (int)(l) & 31)
#define FLYK_SHFL_UP(v, o)                                                     \
	flyk_emu_xchg((v), flyk_emu_lane() >= (int)(o)                         \
			       ? flyk_emu_lane() - (int)(o)                    \
			       : flyk_emu_lane())
#define FLYK_BALLOT(p) ((unsigned)flyk_emu_ballot(p))
#endif

/* ---- the primitives' hooks: kernels/gpu/prim calls these under FLYK_EMU
 * in place of its PTX (defined in emu_gemm.cpp; a build that runs no
 * kernel using them needs no definition). */
void flyk_emu_cp16(void *smem, const void *g, bool pred);
void flyk_emu_ldmatrix(uint32_t *r, const uint16_t *p, bool trans);
void flyk_emu_mma16816(float *c, const uint32_t *a, const uint32_t *b);
void flyk_emu_mma16816_f16(float *c, const uint32_t *a, const uint32_t *b);
void flyk_emu_mma16832_e4m3(float *c, const uint32_t *a, const uint32_t *b);
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
/* one block at a time: its writes are seen by the next ones */
static inline void __threadfence(void) {}
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
