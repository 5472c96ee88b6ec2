/*
 * prim/flyk_gpu.h -- the one runtime header of the kernels/gpu sources:
 * picks <hip/hip_runtime.h> on AMD or hip_on_cuda.h under nvcc, and
 * defines the wave size, target, feature and conversion helpers the
 * kernels are written against.
 *
 * Owns: nothing.  Thread: n/a.
 * Warp-level code uses FLYK_WARP (32 on NVIDIA, 64 on AMD CDNA) and the
 * FLYK_SHFL* macros, never a literal 32 or a *_sync name.  Vendor and
 * architecture tests (__HIP_PLATFORM_*, __CUDA_ARCH__) live in prim/ only:
 * an op asks for a feature (FLYK_HAS_*) or calls a primitive.
 *   FLYK_HAS_CLUSTERS  thread-block clusters, distributed shared memory
 *   FLYK_HAS_MMA       the mma.sync / ldmatrix / cp.async engines
 *                      (NVIDIA, and the emulator)
 *   FLYK_HAS_WGMMA     wgmma kernels (an sm_90a build, and the emulator)
 *   FLYK_HAS_MFMA      AMD's matrix cores, prim/mfma.h (an AMD build, and
 *                      the emulator's AMD model); which devices have them
 *                      is a run-time question (flyk_mfma_arch_ok)
 *   FLYK_HAS_TMA       TMA, mbarriers, cluster launches (an sm_90a build
 *                      under nvcc; not the emulator)
 *   FLYK_HAS_PDL       programmatic dependent launch (prim/launch.h's
 *                      flyk_go_pdl; the same builds as FLYK_HAS_TMA)
 *   FLYK_HAS_CUBLAS    the vendor GEMM candidates (kernels/vendor, CUDA)
 *   FLYK_HAS_CUDNN     cuDNN 9's fused attention (kernels/vendor/cudnn_attn.c):
 *                      1 when the Makefile found cuDNN (-DFLYK_HAS_CUDNN=1)
 * FLYK_MMA_DEVICE / FLYK_MMA8_DEVICE (fp8 mma.sync, sm_89+) /
 * FLYK_WGMMA_DEVICE: 1 in the device pass that emits that PTX;
 * FLYK_MFMA_DEVICE: in a device pass for a CDNA2/CDNA3 target,
 * FLYK_MFMA8_DEVICE: for a gfx940-942 one (fnuz fp8 MFMA) (the
 * primitives' own tests; ops use FLYK_HAS_*).
 */
#ifndef FLYK_GPU_H
#define FLYK_GPU_H

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__) || \
	defined(__HIP__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#define FLYK_AMD 1
#define FLYK_WARP 64
#define FLYK_BACKEND_NAME "hip"
#define FLYK_BACKEND_KIND FLYK_BACKEND_HIP
#define FLYK_HAS_CLUSTERS 0
#elif defined(__CUDACC__)
#include "prim/hip_on_cuda.h"
#define FLYK_AMD 0
#define FLYK_WARP 32
#define FLYK_BACKEND_NAME "cuda"
#define FLYK_BACKEND_KIND FLYK_BACKEND_CUDA
/* Thread-block clusters with distributed shared memory: sm_90+. */
#define FLYK_HAS_CLUSTERS 1
#elif defined(FLYK_EMU)
/* tests/gpu/emu: the kernels run on the CPU, one coroutine per thread, to
 * check their logic on a machine without a GPU (never a shipped build),
 * as NVIDIA (FLYK_AMD 0) or, built with -DFLYK_EMU_AMD=1, as AMD wave64.
 * That build force-includes its device model (-include
 * tests/gpu/emu/flyk_emu.h): no kernels/ header includes a test header. */
#ifndef FLYK_EMU_H
#error "FLYK_EMU builds force-include tests/gpu/emu/flyk_emu.h"
#endif
#else
#error "kernels/gpu needs hipcc (AMD) or nvcc (NVIDIA)"
#endif

#if FLYK_AMD
/* HIP's wave-wide exchanges (width: the whole wave; __ballot is 64-bit):
 * hipcc's, or the emulator's models of them in its AMD mode
 * (tests/gpu/emu, -DFLYK_EMU_AMD=1), which so compiles this same text. */
#define FLYK_SHFL_XOR(v, m) __shfl_xor((v), (m))
#define FLYK_SHFL(v, l) __shfl((v), (l))
#define FLYK_BALLOT(p) __ballot(p)
#define FLYK_SHFL_UP(v, o) __shfl_up((v), (o))
#endif

#define FLYK_HAS_CUBLAS (!FLYK_AMD)
#if !defined(FLYK_HAS_CUDNN) || FLYK_AMD || defined(FLYK_EMU)
#undef FLYK_HAS_CUDNN
#define FLYK_HAS_CUDNN 0
#endif
#define FLYK_HAS_MMA (!FLYK_AMD)
#if !FLYK_AMD && (defined(FLYK_SM90A) || defined(FLYK_EMU))
#define FLYK_HAS_WGMMA 1
#else
#define FLYK_HAS_WGMMA 0
#endif
#if defined(FLYK_SM90A) && !defined(FLYK_EMU) && !FLYK_AMD
#define FLYK_HAS_TMA 1
#else
#define FLYK_HAS_TMA 0
#endif
#define FLYK_HAS_PDL FLYK_HAS_TMA

#define FLYK_HAS_MFMA FLYK_AMD

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define FLYK_MMA_DEVICE 1
#else
#define FLYK_MMA_DEVICE 0
#endif
/* mma.sync on e4m3 (m16n8k32): sm_89+ */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FLYK_MMA8_DEVICE 1
#else
#define FLYK_MMA8_DEVICE 0
#endif
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLYK_WGMMA_DEVICE 1
#else
#define FLYK_WGMMA_DEVICE 0
#endif
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
	defined(__gfx942__) || defined(__gfx950__)
#define FLYK_MFMA_DEVICE 1
#else
#define FLYK_MFMA_DEVICE 0
#endif
/* gfx940-942 (CDNA3): the fp8 MFMAs on e4m3 fnuz (prim/mfma.h's
 * flyk_mfma8); gfx90a has none, gfx950's take OCP e4m3fn instead. */
#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define FLYK_MFMA8_DEVICE 1
#else
#define FLYK_MFMA8_DEVICE 0
#endif

#ifndef FLYK_GO
/* Launch: FLYK_GO(grid, block, smem, stream, kernel<...>)(args...).  The
 * kernel comes last so its template commas need no parentheses. */
#define FLYK_GO(g, b, s, st, ...) __VA_ARGS__<<<(g), (b), (s), (st)>>>
/* The kernel's dynamic shared memory, as an array of T. */
#define FLYK_DYN_SMEM(T, name) extern __shared__ T name[]
#endif

#include <stdint.h>

/* 1 in hipcc's device pass: clang would emit the const host tables
 * (variants, op modules) for the device too and fail to link their host
 * function pointers there, so those tables are compiled on the host pass
 * only (#if !FLYK_DEVICE_PASS).  nvcc needs no such care. */
#if defined(__HIP_DEVICE_COMPILE__)
#define FLYK_DEVICE_PASS 1
/* ...which leaves the host helpers those tables use unused there. */
#pragma clang diagnostic ignored "-Wunused-function"
#pragma clang diagnostic ignored "-Wunused-const-variable"
#else
#define FLYK_DEVICE_PASS 0
#endif

/* Host-and-device conversions on raw 16-bit patterns (the kernels keep
 * fp16/bf16 as uint16_t so both toolchains see one type). */
__device__ __forceinline__ float flyk_dh2f(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ uint16_t flyk_df2h(float f)
{
	return __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ float flyk_db2f(uint16_t b)
{
	return __uint_as_float((uint32_t)b << 16);
}

/* Round to nearest even; NaN stays NaN (quiet). */
__device__ __forceinline__ uint16_t flyk_df2b(float f)
{
	uint32_t u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* Two floats as packed bf16, @p lo in the low half: flyk_df2b's rounding
 * (a NaN comes out as bf16's canonical quiet NaN on NVIDIA, where one
 * cvt.rn.bf16x2.f32 does both). */
__device__ __forceinline__ uint32_t flyk_df2b2(float lo, float hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(FLYK_EMU)
	uint32_t r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
#else
	return (uint32_t)flyk_df2b(lo) | ((uint32_t)flyk_df2b(hi) << 16);
#endif
}

/* 2^x, approximate: one MUFU.EX2 on NVIDIA (ex2.approx.ftz: relative
 * error ~2^-22, -inf gives +0, denormal results flushed), exp2f elsewhere.
 * The softmax exponentials of attention: one per score, so the special
 * function unit, not the tensor cores, can bound a tile. */
__device__ __forceinline__ float flyk_exp2(float x)
{
#if defined(__CUDA_ARCH__) && !defined(FLYK_EMU)
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
#else
	return exp2f(x);
#endif
}

/* Element access by dtype code: FLY_DT_FP32=1, FP16=2, BF16=3. */
template <int DT> struct flyk_elem;
template <> struct flyk_elem<1> {
	typedef float T;
	static __device__ __forceinline__ float load(float v) { return v; }
	static __device__ __forceinline__ float store(float f) { return f; }
};
template <> struct flyk_elem<2> {
	typedef uint16_t T;
	static __device__ __forceinline__ float load(uint16_t v)
	{
		return flyk_dh2f(v);
	}
	static __device__ __forceinline__ uint16_t store(float f)
	{
		return flyk_df2h(f);
	}
};
template <> struct flyk_elem<3> {
	typedef uint16_t T;
	static __device__ __forceinline__ float load(uint16_t v)
	{
		return flyk_db2f(v);
	}
	static __device__ __forceinline__ uint16_t store(float f)
	{
		return flyk_df2b(f);
	}
};

/* Bytes of one element of a dtype (0 when unsupported by kernels/gpu). */
static inline size_t flyk_dtype_bytes(uint32_t dt)
{
	return dt == 1 ? 4 : (dt == 2 || dt == 3) ? 2 : 0;
}

struct flyk_device;
/* Fill @p dev with device @p index's properties only (no stream, events or
 * flush buffer): enough for feasible() and launch(), as a client that only
 * launches needs.  @return 0 or -ENODEV. */
int flyk_gpu_device_query(int index, struct flyk_device *dev);

#endif /* FLYK_GPU_H */
