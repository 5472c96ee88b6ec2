/*
 * prim/mfma.h -- AMD CDNA matrix cores (MFMA), wave64: bf16 x bf16 -> fp32
 * on n x n output blocks, with the register layouts written down once so
 * that every kernel on them (GEMM, grouped GEMM; attention, MQA and scaled
 * GEMM to come) maps lanes to matrix elements the same way.
 *
 * Owns: nothing (device inlines and types).  Thread: device code; every
 * lane of the wave calls an MFMA together (it is a wave-wide exchange).
 *
 * Exists only where FLYK_HAS_MFMA (prim/flyk_gpu.h: an AMD build, or the
 * emulator's AMD model); the instructions themselves are emitted in the
 * device passes of CDNA2/CDNA3 targets (FLYK_MFMA_DEVICE: gfx90a, gfx940,
 * gfx941, gfx942, gfx950); other AMD device passes compile the calls to
 * nothing, and the ops' feasible() refuses their devices
 * (flyk_mfma_arch_ok).  Under FLYK_EMU the builtins are the emulator's
 * models of them (tests/gpu/emu/flyk_emu.h).
 *
 *   flyk_mfma<32>  v_mfma_f32_32x32x8bf16_1k  (CDNA3: v_mfma_f32_32x32x8_bf16)
 *                  K = 8 a step, 16 fp32 accumulators a lane
 *   flyk_mfma<16>  v_mfma_f32_16x16x16bf16_1k (CDNA3: ..._16x16x16_bf16)
 *                  K = 16 a step, 4 fp32 accumulators a lane
 *
 * Register layouts (AMD's Matrix Instruction Calculator, CDNA2 and CDNA3
 * agree; the emulator's layout test anchors them): lane l, g = l / n,
 *   A[i][k]  lane i + n (k / 4), element k % 4  (4 bf16 a lane)
 *   B[k][j]  lane j + n (k / 4), element k % 4
 *   D[i][j]  lane j + n g, register v: i = 8 (v / 4) + 4 g + v % 4 (n 32),
 *            i = 4 g + v (n 16)
 * So a lane's A operand is 4 consecutive k of one row of A, and its B
 * operand 4 consecutive k of one column of B (one row of an NT B [N, K]):
 * both 8-byte reads from a K-contiguous tile.
 */
#ifndef FLYK_PRIM_MFMA_H
#define FLYK_PRIM_MFMA_H

#include <string.h>

#include "prim/flyk_gpu.h"
#include "prim/mem.h"

#if FLYK_HAS_MFMA

#if defined(FLYK_EMU)
typedef flyk_emu_short4 flyk_bf16x4;
typedef flyk_emu_float4 flyk_f32x4;
typedef flyk_emu_float16 flyk_f32x16;
#else
typedef short flyk_bf16x4 __attribute__((ext_vector_type(4)));
typedef float flyk_f32x4 __attribute__((ext_vector_type(4)));
typedef float flyk_f32x16 __attribute__((ext_vector_type(16)));
#endif

/* Whether a device of arch @p arch ("gfx942", from the HIP properties)
 * has the bf16 MFMA instructions of this header.  Host code. */
static inline bool flyk_mfma_arch_ok(const char *arch)
{
	static const char *const ok[] = {"gfx90a", "gfx940", "gfx941",
					 "gfx942", "gfx950"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcmp(arch, ok[i]))
			return true;
	return false;
}

/* 4 bf16 (raw 16-bit patterns) at @p p, 8-byte aligned: one operand
 * (the emulator counts a misaligned one, as it does vector stores). */
__device__ __forceinline__ flyk_bf16x4 flyk_mfma_ld4(const uint16_t *p)
{
	FLYK_VST_ALIGNED(p, 8);
	return *(const flyk_bf16x4 *)p;
}

template <int N> struct flyk_mfma;

template <> struct flyk_mfma<32> {
	typedef flyk_f32x16 acc_t;
	enum { N = 32, K = 8, REGS = 16 };
	/* c += a b over one K step. */
	static __device__ __forceinline__ void run(acc_t &c, flyk_bf16x4 a,
						   flyk_bf16x4 b)
	{
#if FLYK_MFMA_DEVICE || defined(FLYK_EMU)
		c = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
#else
		(void)c;
		(void)a;
		(void)b;
#endif
	}
	/* The row of A (column of B) lane @p l feeds. */
	static __device__ __forceinline__ int ab_idx(int l) { return l % 32; }
	/* The first of the 4 consecutive k lane @p l feeds. */
	static __device__ __forceinline__ int ab_k(int l) { return 4 * (l / 32); }
	/* D's row of lane @p l's register @p v, and its column. */
	static __device__ __forceinline__ int d_row(int l, int v)
	{
		return 8 * (v / 4) + 4 * (l / 32) + v % 4;
	}
	static __device__ __forceinline__ int d_col(int l) { return l % 32; }
};

template <> struct flyk_mfma<16> {
	typedef flyk_f32x4 acc_t;
	enum { N = 16, K = 16, REGS = 4 };
	static __device__ __forceinline__ void run(acc_t &c, flyk_bf16x4 a,
						   flyk_bf16x4 b)
	{
#if FLYK_MFMA_DEVICE || defined(FLYK_EMU)
		c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
#else
		(void)c;
		(void)a;
		(void)b;
#endif
	}
	static __device__ __forceinline__ int ab_idx(int l) { return l % 16; }
	static __device__ __forceinline__ int ab_k(int l) { return 4 * (l / 16); }
	static __device__ __forceinline__ int d_row(int l, int v)
	{
		return 4 * (l / 16) + v;
	}
	static __device__ __forceinline__ int d_col(int l) { return l % 16; }
};

#endif /* FLYK_HAS_MFMA */

#endif /* FLYK_PRIM_MFMA_H */
