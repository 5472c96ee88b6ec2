/*
 * prim/mma.h -- warp-level tensor-core MMA (NVIDIA sm_80+): ldmatrix
 * (plain and .trans), mma.sync m16n8k16 bf16 x bf16 (or fp16 x fp16)
 * -> fp32 and m16n8k32 e4m3 x e4m3 -> fp32.
 *
 * Owns: nothing (device inlines).  Thread: device code only.
 * Fragment layouts are the PTX ISA's; under FLYK_EMU the emulator computes
 * them lane by lane (tests/gpu/emu/emu_gemm.cpp); elsewhere (AMD, the host
 * pass) they compile to nothing -- callers exist only where FLYK_HAS_MMA.
 */
#ifndef FLYK_PRIM_MMA_H
#define FLYK_PRIM_MMA_H

#include "prim/flyk_gpu.h"

__device__ __forceinline__ void flyk_ldm4(uint32_t *r, const uint16_t *p)
{
#if FLYK_MMA_DEVICE
	unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
		     "{%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(s));
#elif defined(FLYK_EMU)
	flyk_emu_ldmatrix(r, p, false);
#endif
}

__device__ __forceinline__ void flyk_ldm4t(uint32_t *r, const uint16_t *p)
{
#if FLYK_MMA_DEVICE
	unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
		     "{%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(s));
#elif defined(FLYK_EMU)
	flyk_emu_ldmatrix(r, p, true);
#endif
}

__device__ __forceinline__ void flyk_mma16816(float *c, const uint32_t *a,
					      const uint32_t *b)
{
#if FLYK_MMA_DEVICE
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
		       "r"(b[1]));
#elif defined(FLYK_EMU)
	flyk_emu_mma16816(c, a, b);
#endif
}
/* The same with fp16 operands (f32 += f16 x f16). */
__device__ __forceinline__ void flyk_mma16816_f16(float *c, const uint32_t *a,
						  const uint32_t *b)
{
#if FLYK_MMA_DEVICE
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
		       "r"(b[1]));
#elif defined(FLYK_EMU)
	flyk_emu_mma16816_f16(c, a, b);
#endif
}

/* mma.sync m16n8k32 e4m3 x e4m3 -> fp32 (sm_89+): A 16x32 row-major in
 * four words (a0: row g, k 4t..4t+3; a1: row g+8; a2: row g, k 16+4t..;
 * a3: row g+8, k 16+4t..), B 32x8 in two (b0: column g, k 4t..; b1: k
 * 16+4t..), one e4m3fn byte an element, the lowest k in the lowest byte;
 * C as m16n8k16's (g = lane / 4, t = lane % 4).  Callers check the
 * compute capability (>= 8.9) at run time. */
__device__ __forceinline__ void flyk_mma16832_e4m3(float *c, const uint32_t *a,
						   const uint32_t *b)
{
#if FLYK_MMA8_DEVICE
	asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
		       "r"(b[1]));
#elif defined(FLYK_EMU)
	flyk_emu_mma16832_e4m3(c, a, b);
#else
	(void)c;
	(void)a;
	(void)b;
#endif
}

/* mma.sync m16n8k16 with DT operands (FLY_DT_BF16 = 3 or FLY_DT_FP16 =
 * 2), fp32 accumulators. */
template <int DT>
__device__ __forceinline__ void flyk_mma16816_dt(float *c, const uint32_t *a,
						 const uint32_t *b)
{
	if (DT == 2)
		flyk_mma16816_f16(c, a, b);
	else
		flyk_mma16816(c, a, b);
}

#endif /* FLYK_PRIM_MMA_H */
