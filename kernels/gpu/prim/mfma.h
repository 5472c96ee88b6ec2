/*
 * prim/mfma.h -- AMD CDNA matrix cores (MFMA), wave64: bf16 x bf16 -> fp32
 * on n x n output blocks, and fp8 (e4m3 fnuz) x fp8 -> fp32 on gfx940-942,
 * with the register layouts written down once so that every kernel on
 * them (GEMM, grouped GEMM, scaled GEMM; attention and MQA to come) maps
 * lanes to matrix elements the same way.
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

/*
 * fp8 (CDNA3 gfx940-942 only: FLYK_MFMA8_DEVICE; flyk_mfma8_arch_ok):
 *   flyk_mfma8<32>  v_mfma_f32_32x32x16_fp8_fp8  K = 16 a step, 16 regs
 *   flyk_mfma8<16>  v_mfma_f32_16x16x32_fp8_fp8  K = 32 a step, 4 regs
 * Both operands e4m3 **fnuz** (bias 8, 0x80 the only NaN, max 240), 8 a
 * lane in one 64-bit register, byte e = element e.  Layouts: the bf16
 * rule with 8 elements a lane (the emulator's fp8 layout test anchors
 * them), g = l / n:
 *   A[i][k]  lane i + n (k / 8), byte k % 8
 *   B[k][j]  lane j + n (k / 8), byte k % 8
 *   D        as flyk_mfma<n>
 * So a lane's operand is 8 consecutive k of one row: one 8-byte read
 * from a K-contiguous byte tile.  Other formats are re-encoded into fnuz
 * bytes before the MFMA (flyk_mfma8_fn4, flyk_mfma8_e2m1).
 */
typedef long flyk_fp8x8; /* the builtins' operand type (8 bytes) */

/* Whether a device of arch @p arch has the fnuz fp8 MFMAs.  gfx950's
 * fp8 MFMAs take OCP e4m3fn: not this header's.  Host code. */
static inline bool flyk_mfma8_arch_ok(const char *arch)
{
	static const char *const ok[] = {"gfx940", "gfx941", "gfx942"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcmp(arch, ok[i]))
			return true;
	return false;
}

/* 8 fp8 bytes at @p p, 8-byte aligned: one operand. */
__device__ __forceinline__ flyk_fp8x8 flyk_mfma8_ld8(const uint8_t *p)
{
	FLYK_VST_ALIGNED(p, 8);
	return *(const flyk_fp8x8 *)p;
}

/* Four e4m3fn bytes -> four fnuz bytes of exactly half their values: an
 * fn byte read as fnuz is its value / 2 (bias 7 -> 8, subnormals too),
 * except fn's -0 (0x80: fnuz's NaN, made +0) and fn's NaNs (0x7f, 0xff:
 * fnuz +-240, made 0x80).  So fn's whole range (448 > fnuz's 240) stays
 * exact; the caller multiplies each product by 4 (one factor 2 per
 * operand) in fp32.  Branch-free, four bytes at once. */
__device__ __forceinline__ uint32_t flyk_mfma8_fn4(uint32_t w)
{
	uint32_t lo = w & 0x7f7f7f7fu;
	uint32_t nz = (lo + 0x7f7f7f7fu) & 0x80808080u;	 /* low 7 bits != 0 */
	uint32_t nan = (lo + 0x01010101u) & 0x80808080u; /* low 7 bits 0x7f */
	w &= (nz >> 7) * 0xffu;
	return (w & ~((nan >> 7) * 0xffu)) | nan;
}

/* One e2m1 code (low 4 bits) -> the fnuz byte of the same value (every
 * e2m1 value, 0 .. 6, is one): a table of the 8 magnitudes, the sign
 * kept except on zero (fnuz has no -0). */
__device__ __forceinline__ uint32_t flyk_mfma8_e2m1(uint32_t c)
{
	const uint64_t mag = 0x54504c4844403800ull; /* byte c: code c */
	uint32_t v = (uint32_t)(mag >> (8 * (c & 7u))) & 0xffu;
	return v | ((c & 8u) && v ? 0x80u : 0u);
}

template <int N> struct flyk_mfma8;

template <> struct flyk_mfma8<32> {
	typedef flyk_f32x16 acc_t;
	enum { N = 32, K = 16, REGS = 16 };
	/* c += a b over one K step (fnuz operands). */
	static __device__ __forceinline__ void run(acc_t &c, flyk_fp8x8 a,
						   flyk_fp8x8 b)
	{
#if FLYK_MFMA8_DEVICE || defined(FLYK_EMU)
		c = __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(a, b, c, 0, 0,
							      0);
#else
		(void)c;
		(void)a;
		(void)b;
#endif
	}
	static __device__ __forceinline__ int ab_idx(int l) { return l % 32; }
	/* The first of the 8 consecutive k lane @p l feeds. */
	static __device__ __forceinline__ int ab_k(int l)
	{
		return 8 * (l / 32);
	}
	static __device__ __forceinline__ int d_row(int l, int v)
	{
		return flyk_mfma<32>::d_row(l, v);
	}
	static __device__ __forceinline__ int d_col(int l) { return l % 32; }
};

template <> struct flyk_mfma8<16> {
	typedef flyk_f32x4 acc_t;
	enum { N = 16, K = 32, REGS = 4 };
	static __device__ __forceinline__ void run(acc_t &c, flyk_fp8x8 a,
						   flyk_fp8x8 b)
	{
#if FLYK_MFMA8_DEVICE || defined(FLYK_EMU)
		c = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a, b, c, 0, 0,
							      0);
#else
		(void)c;
		(void)a;
		(void)b;
#endif
	}
	static __device__ __forceinline__ int ab_idx(int l) { return l % 16; }
	static __device__ __forceinline__ int ab_k(int l)
	{
		return 8 * (l / 16);
	}
	static __device__ __forceinline__ int d_row(int l, int v)
	{
		return flyk_mfma<16>::d_row(l, v);
	}
	static __device__ __forceinline__ int d_col(int l) { return l % 16; }
};

#endif /* FLYK_HAS_MFMA */

#endif /* FLYK_PRIM_MFMA_H */
