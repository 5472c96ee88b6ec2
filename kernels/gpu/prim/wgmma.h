/*
 * prim/wgmma.h -- Hopper warpgroup MMA (sm_90a): the shared-memory
 * descriptor of a K-major 128B-swizzled operand, the wgmma fences, commit
 * and wait, the MN-major descriptor, the async-proxy fence for
 * generic-proxy writes (cp.async landed) that wgmma reads, the accumulator
 * pin, and wgmma.mma_async m64nNk16 bf16 (N = 8, 16, 32, 64, 128, 256 from
 * shared memory; 64, 128, 256 with A from registers against an MN-major
 * B) and m64nNk32 e4m3 (N = 8, 16, 32, 64, 128, 136, 256) -> fp32.
 *
 * Owns: nothing (device inlines).  Thread: device code only; a warpgroup
 * (128 threads) issues each wgmma together.
 * The 128B swizzle: 16-byte chunk c of row r is stored at chunk c ^ (r % 8),
 * 8-row groups 1024 bytes apart (what TMA's SWIZZLE_128B produces).  Off
 * sm_90a they compile to nothing; under FLYK_EMU the descriptor carries
 * the host address and flyk_emu_wgmma() computes each thread's bf16
 * fragment (fp8 is not emulated).  Callers exist only where
 * FLYK_HAS_WGMMA.
 */
#ifndef FLYK_PRIM_WGMMA_H
#define FLYK_PRIM_WGMMA_H

#include "prim/flyk_gpu.h"

/* The shared-memory descriptor of a K-major, 128B-swizzled operand
 * starting at @p p: start >> 4, leading byte offset 16 (unused with this
 * swizzle), stride byte offset 1024 (8 rows of 128 bytes), swizzle mode 1
 * (128B) in bits 62-63. */
__device__ __forceinline__ uint64_t flyk_wg_desc(const uint16_t *p)
{
#if FLYK_WGMMA_DEVICE
	uint64_t a = (uint64_t)__cvta_generic_to_shared(p);
	return ((a & 0x3ffff) >> 4) | ((uint64_t)(16 >> 4) << 16) |
	       ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
#else
	return (uint64_t)(uintptr_t)p;
#endif
}

/* The descriptor of an MN-major (N contiguous), 128B-swizzled B operand
 * at @p p: rows of 64 N elements (128 bytes) indexed by K, 8-row groups
 * 1024 bytes apart (the stride byte offset), successive 64-wide N chunks
 * @p chunk_bytes apart (the leading byte offset) -- what TMA's
 * SWIZZLE_128B makes of a [K rows][64 N] box per chunk.  The operand of
 * the _rs_t forms (imm-trans-b 1). */
__device__ __forceinline__ uint64_t flyk_wg_desc_mn(const uint16_t *p,
						   uint32_t chunk_bytes)
{
#if FLYK_WGMMA_DEVICE
	uint64_t a = (uint64_t)__cvta_generic_to_shared(p);
	return ((a & 0x3ffff) >> 4) |
	       ((uint64_t)((chunk_bytes >> 4) & 0x3fff) << 16) |
	       ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
#else
	(void)chunk_bytes;
	return (uint64_t)(uintptr_t)p;
#endif
}

__device__ __forceinline__ void flyk_wg_fence(void)
{
#if FLYK_WGMMA_DEVICE
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void flyk_wg_commit(void)
{
#if FLYK_WGMMA_DEVICE
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

/* Wait until at most @p N committed wgmma groups are pending. */
template <int N> __device__ __forceinline__ void flyk_wg_wait(void)
{
#if FLYK_WGMMA_DEVICE
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

/* Make this thread's generic-proxy shared-memory writes (cp.async landed)
 * visible to the async proxy that wgmma reads through. */
__device__ __forceinline__ void flyk_fence_async_smem(void)
{
#if FLYK_WGMMA_DEVICE
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* Pin the accumulators: no instruction may be moved across this point
 * (ptxas otherwise serialises wgmma when the tile loop of a persistent
 * kernel puts the epilogue's reads near the next tile's wgmma). */
template <int N>
__device__ __forceinline__ void flyk_wg_fence_acc(float *acc)
{
#if FLYK_WGMMA_DEVICE
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+f"(acc[i])::"memory");
#else
	(void)acc;
#endif
}
#if FLYK_WGMMA_DEVICE
/* The accumulator operands d[i .. i + 31] of a wgmma asm statement. */
#define FLYK_WG_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FLYK_WG_D16(i)                                                         \
	FLYK_WG_D4(i), FLYK_WG_D4(i + 4), FLYK_WG_D4(i + 8), FLYK_WG_D4(i + 12)
#define FLYK_WG_D32(i) FLYK_WG_D16(i), FLYK_WG_D16(i + 16)

/* wgmma.mma_async m64nBNk16 bf16 -> fp32, D += A * B (scale-d 1). */
template <int BN>
__device__ __forceinline__ void flyk_wgmma_bf16_asm(float *d, uint64_t da,
					       uint64_t db);

/* N = 8, 16, 32: the narrow B of gemm_stream (gemm/gemm_stream.h: a
 * decode GEMM's few A rows as the wgmma's N). */
template <> __device__ __forceinline__ void
flyk_wgmma_bf16_asm<8>(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {"
		     "%0,%1,%2,%3"
		     "}, %4, %5, p, 1, 1, 0, 0;\n}\n"
		     : FLYK_WG_D4(0)
		     : "l"(da), "l"(db), "r"(1));
}

template <> __device__ __forceinline__ void
flyk_wgmma_bf16_asm<16>(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7"
		     "}, %8, %9, p, 1, 1, 0, 0;\n}\n"
		     : FLYK_WG_D4(0), FLYK_WG_D4(4)
		     : "l"(da), "l"(db), "r"(1));
}

template <> __device__ __forceinline__ void
flyk_wgmma_bf16_asm<32>(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
		     "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
		     : FLYK_WG_D16(0)
		     : "l"(da), "l"(db), "r"(1));
}

template <> __device__ __forceinline__ void
flyk_wgmma_bf16_asm<64>(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
		     "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
		     "%24,%25,%26,%27,%28,%29,%30,%31"
		     "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
		     : FLYK_WG_D32(0)
		     : "l"(da), "l"(db), "r"(1));
}

template <> __device__ __forceinline__ void
flyk_wgmma_bf16_asm<128>(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
		     "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
		     "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
		     "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
		     "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,"
		     "%60,%61,%62,%63"
		     "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
		     : FLYK_WG_D32(0), FLYK_WG_D32(32)
		     : "l"(da), "l"(db), "r"(1));
}

template <> __device__ __forceinline__ void
flyk_wgmma_bf16_asm<256>(float *d, uint64_t da, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
		     "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
		     "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
		     "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
		     "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,"
		     "%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,"
		     "%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,"
		     "%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
		     "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,"
		     "%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,"
		     "%120,%121,%122,%123,%124,%125,%126,%127"
		     "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
		     : FLYK_WG_D32(0), FLYK_WG_D32(32), FLYK_WG_D32(64), FLYK_WG_D32(96)
		     : "l"(da), "l"(db), "r"(1));
}

/* wgmma.mma_async m64nNk16 bf16 -> fp32 with A from registers (each
 * warp's 16 rows as the m16n8k16 A fragment: a0 (g, 2t..), a1 (g + 8,
 * 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..)) and B MN-major
 * (flyk_wg_desc_mn, imm-trans-b 1): D += A * B. */
template <int N>
__device__ __forceinline__ void flyk_wgmma_bf16_rs_t_asm(float *d,
							 const uint32_t *a,
							 uint64_t db);

template <> __device__ __forceinline__ void
flyk_wgmma_bf16_rs_t_asm<64>(float *d, const uint32_t *a, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
		     "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
		     "%24,%25,%26,%27,%28,%29,%30,%31"
		     "}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
		     : FLYK_WG_D32(0)
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db),
		       "r"(1));
}

template <> __device__ __forceinline__ void
flyk_wgmma_bf16_rs_t_asm<128>(float *d, const uint32_t *a, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
		     "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
		     "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
		     "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
		     "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,"
		     "%60,%61,%62,%63"
		     "}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
		     : FLYK_WG_D32(0), FLYK_WG_D32(32)
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db),
		       "r"(1));
}

template <> __device__ __forceinline__ void
flyk_wgmma_bf16_rs_t_asm<256>(float *d, const uint32_t *a, uint64_t db)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
		     "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
		     "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
		     "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
		     "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,"
		     "%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,"
		     "%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,"
		     "%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
		     "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,"
		     "%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,"
		     "%120,%121,%122,%123,%124,%125,%126,%127"
		     "}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"
		     : FLYK_WG_D32(0), FLYK_WG_D32(32), FLYK_WG_D32(64),
		       FLYK_WG_D32(96)
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db),
		       "r"(1));
}

/* wgmma.mma_async m64nNk32 e4m3 x e4m3 -> f32, D = A * B + (acc ? D : 0),
 * both from K-major 128B-swizzled shared memory. */
template <int N>
__device__ __forceinline__ void flyk_wgmma_fp8_asm(float *d, uint64_t da,
					      uint64_t db, int acc);

/* N = 8, 16, 32: gemm_stream's narrow B (as the bf16 ones). */
template <> __device__ __forceinline__ void
flyk_wgmma_fp8_asm<8>(float *d, uint64_t da, uint64_t db, int acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {"
		     "%0,%1,%2,%3"
		     "}, %4, %5, p, 1, 1;\n}\n"
		     : FLYK_WG_D4(0)
		     : "l"(da), "l"(db), "r"(acc));
}

template <> __device__ __forceinline__ void
flyk_wgmma_fp8_asm<16>(float *d, uint64_t da, uint64_t db, int acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7"
		     "}, %8, %9, p, 1, 1;\n}\n"
		     : FLYK_WG_D4(0), FLYK_WG_D4(4)
		     : "l"(da), "l"(db), "r"(acc));
}

template <> __device__ __forceinline__ void
flyk_wgmma_fp8_asm<32>(float *d, uint64_t da, uint64_t db, int acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
		     "}, %16, %17, p, 1, 1;\n}\n"
		     : FLYK_WG_D16(0)
		     : "l"(da), "l"(db), "r"(acc));
}

template <> __device__ __forceinline__ void
flyk_wgmma_fp8_asm<64>(float *d, uint64_t da, uint64_t db, int acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
		     "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
		     "%24,%25,%26,%27,%28,%29,%30,%31"
		     "}, %32, %33, p, 1, 1;\n}\n"
		     : FLYK_WG_D32(0)
		     : "l"(da), "l"(db), "r"(acc));
}

template <> __device__ __forceinline__ void
flyk_wgmma_fp8_asm<128>(float *d, uint64_t da, uint64_t db, int acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
		     "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
		     "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
		     "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
		     "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,"
		     "%60,%61,%62,%63"
		     "}, %64, %65, p, 1, 1;\n}\n"
		     : FLYK_WG_D32(0), FLYK_WG_D32(32)
		     : "l"(da), "l"(db), "r"(acc));
}

/* N = 136: 128 columns and one group of 8 more (mqa_wgmma's linear
 * part, kernels/gpu/mqa/mqa_logits.hip). */
template <> __device__ __forceinline__ void
flyk_wgmma_fp8_asm<136>(float *d, uint64_t da, uint64_t db, int acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
		     "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
		     "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
		     "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
		     "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,"
		     "%60,%61,%62,%63,%64,%65,%66,%67"
		     "}, %68, %69, p, 1, 1;\n}\n"
		     : FLYK_WG_D32(0), FLYK_WG_D32(32), FLYK_WG_D4(64)
		     : "l"(da), "l"(db), "r"(acc));
}

template <> __device__ __forceinline__ void
flyk_wgmma_fp8_asm<256>(float *d, uint64_t da, uint64_t db, int acc)
{
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {"
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,"
		     "%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"
		     "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
		     "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
		     "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,"
		     "%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,"
		     "%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,"
		     "%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
		     "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,"
		     "%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,"
		     "%120,%121,%122,%123,%124,%125,%126,%127"
		     "}, %128, %129, p, 1, 1;\n}\n"
		     : FLYK_WG_D32(0), FLYK_WG_D32(32), FLYK_WG_D32(64),
		       FLYK_WG_D32(96)
		     : "l"(da), "l"(db), "r"(acc));
}
#endif

/* One m64nBNk16 step: the PTX above on the GPU, flyk_emu_wgmma() under
 * the emulator. */
template <int BN>
__device__ __forceinline__ void flyk_wgmma_bf16(float *d, uint64_t da, uint64_t db)
{
#if FLYK_WGMMA_DEVICE
	flyk_wgmma_bf16_asm<BN>(d, da, db);
#elif defined(FLYK_EMU)
	flyk_emu_wgmma(d, da, db, BN);
#else
	(void)d;
	(void)da;
	(void)db;
#endif
}

/* One m64nNk16 register-A, MN-major-B step (the PTX above on the GPU;
 * nothing elsewhere: not emulated, callers exist only where
 * FLYK_HAS_TMA). */
template <int N>
__device__ __forceinline__ void flyk_wgmma_bf16_rs_t(float *d,
						     const uint32_t *a,
						     uint64_t db)
{
#if FLYK_WGMMA_DEVICE
	flyk_wgmma_bf16_rs_t_asm<N>(d, a, db);
#else
	(void)d;
	(void)a;
	(void)db;
#endif
}

/* One m64nNk32 e4m3 x e4m3 step, D = A * B + (@p acc ? D : 0): the PTX
 * above on the GPU; elsewhere (no fp8 emulation) D is zeroed on the first
 * step, so a caller's k loop leaves zeros. */
template <int N>
__device__ __forceinline__ void flyk_wgmma_fp8(float *d, uint64_t da,
					       uint64_t db, int acc)
{
#if FLYK_WGMMA_DEVICE
	flyk_wgmma_fp8_asm<N>(d, da, db, acc);
#else
	if (!acc) {
#pragma unroll
		for (int x = 0; x < N / 2; x++)
			d[x] = 0.f;
	}
	(void)da;
	(void)db;
#endif
}

#endif /* FLYK_PRIM_WGMMA_H */
