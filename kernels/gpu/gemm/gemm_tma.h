/*
 * gemm/gemm_tma.h -- the Hopper GEMM mainloop (sm_90a): tiles brought in by the
 * tensor memory accelerator, a warp-specialised persistent block, wgmma.
 *
 *   - A ring of ST shared-memory stages, each KP panels (1 or 2) of a
 *     BM x 64 tile of A and a BN x 64 tile of B in the 128B swizzle (the
 *     layout flyk_wg_desc names),
 *     filled by cp.async.bulk.tensor from two tensor maps (zero fill out of
 *     bounds: ragged M, N and K need no predicates).
 *   - Two mbarriers per stage: full (the producer's expect_tx; the copy
 *     engine completes its bytes) and empty (one arrival per consumer warp
 *     once its wgmma reading the stage has retired).
 *   - Warpgroup 0 is the producer (one thread issues every copy; setmaxnreg
 *     hands its registers to the consumers); warpgroups 1..NCW consume,
 *     each owning BM / NCW rows of the tile as m64nBNk16 wgmma slabs, one
 *     wgmma group in flight, and store their accumulators straight from
 *     registers (gemm_store2: bias, alpha, or fp32 split partials).
 *   - Persistent: block b does work units b, b + grid, ...; producer and
 *     consumers walk the same sequence, so the producer runs ahead into the
 *     next unit while the consumers store the last one.
 *   - Optionally (TS = 1) the epilogue goes through shared memory and TMA
 *     stores, overlapping the next unit.
 *   - Optionally (CL = 2) clusters of two blocks on vertically adjacent
 *     tiles: each block loads half of the shared B tile and multicasts it
 *     into both, which halves B's traffic out of L2; the empty barriers
 *     then count both blocks' warps.
 *
 * A work unit is whatever the kernel's functor says (a dense tile and its
 * k range; an expert's tile): see struct gemm_tma_unit.
 *
 * Owns: nothing (device templates and the host launch tables; the PTX,
 * tensor maps and cluster launch are prim/tma.h's and prim/cluster.h's).
 * Thread: the tensor-map cache is per host thread.
 * Built only for sm_90a under nvcc (FLYK_HAS_TMA); not emulated (the CPU
 * emulator has no copy engine): the GPU test checks every point.
 */
#ifndef FLYK_GEMM_TMA_H
#define FLYK_GEMM_TMA_H

#include "gemm/gemm_tile.h"
#include "prim/cluster.h"
#include "prim/tma.h"

#if FLYK_HAS_TMA
#include <string.h>

/* The TMA tile shapes built: BM, BN, stages (the most that fit beside the
 * grouped kernel's 4 KiB prefix in 227 KiB), TS (1: the epilogue stages
 * the bf16 tile in shared memory and a TMA store writes it, so the
 * consumers go on to the next unit while it drains; 2 or 4: the same in
 * as many passes of the columns through that part of the buffer; 0:
 * stores straight from registers), CL (2: clusters of two blocks sharing
 * B), KP (k panels of 64 a stage: 2 makes the k-tile 128 deep, half the
 * barrier round trips and wgmma groups per k for the small tiles, at half
 * the stages). */
#define GEMM_TMA_CFGS(X)                                                       \
	X(64, 64, 12, 0, 1, 1)                                                 \
	X(64, 128, 8, 0, 1, 1)                                                 \
	X(64, 256, 5, 0, 1, 1)                                                 \
	X(128, 128, 6, 0, 1, 1)                                                \
	X(128, 256, 4, 0, 1, 1)                                                \
	X(256, 128, 4, 0, 1, 1)                                                \
	X(64, 128, 7, 1, 1, 1)                                                 \
	X(64, 256, 4, 1, 1, 1)                                                 \
	X(128, 128, 5, 1, 1, 1)                                                \
	X(128, 256, 3, 1, 1, 1)                                                \
	X(256, 128, 3, 1, 1, 1)                                                \
	X(64, 128, 8, 0, 2, 1)                                                 \
	X(64, 256, 5, 0, 2, 1)                                                 \
	X(128, 128, 6, 0, 2, 1)                                                \
	X(128, 256, 4, 0, 2, 1)                                                \
	X(256, 128, 4, 0, 2, 1)                                                \
	X(128, 128, 5, 1, 2, 1)                                                \
	X(128, 256, 3, 1, 2, 1)                                                \
	X(256, 128, 3, 1, 2, 1)                                                \
	X(64, 64, 6, 0, 1, 2)                                                  \
	X(64, 128, 4, 0, 1, 2)                                                 \
	X(64, 128, 4, 1, 1, 2)                                                 \
	X(128, 128, 3, 0, 1, 2)                                                \
	X(64, 128, 4, 0, 2, 2)                                                 \
	X(128, 128, 3, 0, 2, 2)                                                \
	X(128, 128, 6, 2, 1, 1)

/* Dense GEMM only: the large tiles with the store in two passes (TS = 2)
 * have one stage more than with the whole tile staged, which leaves no
 * room for the grouped kernel's prefix. */
#define GEMM_TMA_CFGS_DENSE(X)                                                 \
	X(128, 256, 4, 2, 1, 1)                                                \
	X(256, 128, 4, 2, 1, 1)                                                \
	X(128, 256, 4, 2, 2, 1)

/* Grouped GEMM only: the large tiles' stage more, with the store in four
 * passes of 64 columns (a quarter of the buffer), beside the prefix. */
#define GEMM_TMA_CFGS_GROUPED(X)                                               \
	X(128, 256, 4, 4, 1, 1)                                                \
	X(128, 256, 4, 4, 2, 1)

/* F8_: 0 bf16 operands (a panel is 64 k); 1 e4m3 operands, one scale per
 * tensor (a panel is 128 k: the same 128 bytes a row), the fp8 wgmma's
 * sums promoted into fp32 registers every k-tile; 2 the same with MX
 * scales, one e8m0 per 32 k of each row of A and B, applied to every k32
 * wgmma's sums as they are promoted (gemm_tma_consume_f8). */
template <int BM_, int BN_, int ST_, int TS_, int CL_, int KP_, int F8_ = 0>
struct gemm_tma_cfg {
	enum {
		F8 = F8_,
		KE = F8_ ? 128 : 64, /* k elements of a 64-bf16-wide panel */
		BM = BM_,
		BN = BN_,
		KP = KP_, /* 64-wide k panels a stage (BK = 64 KP) */
		BK = 64 * KP_,
		ST = ST_,
		NCW = BM_ >= 128 ? 2 : 1,   /* consumer warpgroups */
		SLABS = BM_ / 64 / NCW,	    /* m64 slabs per consumer */
		THREADS = (NCW + 1) * 128,  /* + the producer warpgroup */
		A_ST = BM_ * 64 * KP_,	    /* halves per stage */
		B_ST = BN_ * 64 * KP_,
		STAGE_BYTES = (A_ST + B_ST) * 2,
		TS = TS_,
		CL = CL_, /* blocks of a cluster sharing B (multicast) */
		/* the staged bf16 tile (TS > 1: 1 / TS of it, TS passes) */
		C_BYTES = TS_ ? BM_ * BN_ * 2 / TS_ : 0,
		SMEM = STAGE_BYTES * ST_ + C_BYTES + 1024, /* + alignment */
		NACC = BN_ / 2		    /* fp32 accumulators per slab */
	};
	static_assert(BM_ % 64 == 0 && (BN_ == 64 || BN_ == 128 || BN_ == 256),
		      "tile");
	static_assert(SLABS * NACC <= 128, "accumulators per thread");
	static_assert(BM_ <= 256 && BN_ <= 256, "a TMA box is <= 256 rows");
	static_assert(CL_ == 1 || CL_ == 2, "cluster");
	static_assert(KP_ == 1 || KP_ == 2, "k panels");
	static_assert(!F8_ || (KP_ == 1 && 2 * SLABS * NACC <= 128),
		      "fp8: one panel a stage, sums and promoted sums fit");
	static_assert((TS_ == 0 || TS_ == 1 || TS_ == 2 || TS_ == 4) &&
			  BN_ >= 64 * (TS_ ? TS_ : 1),
		      "store passes");
};

/* One work unit: where its operands start and where its output goes. */
struct gemm_tma_unit {
	int a_row;   /* A box origin (row of A) */
	int b_row;   /* B box origin (row of B: n0) */
	int b_z;     /* expert (3-D B map), 0 for a 2-D map */
	int k0;      /* first k (a multiple of 64) */
	int nk;      /* k-tiles (>= 1) */
	int64_t m0;  /* output rows from m0 (out.m_end bounds them) */
	int64_t n0;
	int tstore;  /* 1: the TMA store may write the whole tile (its rows
		      * past out.m_end are past the C map too) */
	gemm_out out;
	/* MX (C::F8 == 2): e8m0 scales of A's rows [m_end, kblocks] and of
	 * B's rows [n_end, kblocks] (row stride kblocks = K / 32) */
	const uint8_t *sa, *sb;
	int kblocks;
};

/* ------------------------------------------------------------ mainloop */

/*
 * Columns [P * BN / TS, (P + 1) * BN / TS) of consumer @p cw's rows as
 * bf16 (alpha * acc, + bias where BIAS) into the staging buffer at shared
 * address @p sc: BN / TS / 64 chunks of BM rows x 128 bytes, 128B-swizzled
 * (16-byte chunk c of row r at c ^ (r % 8), so a warp's eight rows land
 * in distinct banks).  Lane l of warp wi writes rows 16wi + l/4 (+ 8) of
 * each slab, so r % 8 is l / 4 and the eight swizzled chunk offsets of a
 * thread are all it computes; the rest are immediates.  Everything
 * stored is in the tile: the TMA store clips C's bounds, so only the
 * bias (its columns past N) is checked.
 */
template <class C, int P, bool BIAS>
__device__ __forceinline__ void gemm_tma_stage(const gemm_tma_unit &w,
					       float (*acc)[C::NACC],
					       uint32_t sc, int cw, int t)
{
	enum { QP = C::BN / 8 / C::TS }; /* 8-column groups a pass */
	const int wi = t / 32, l = t % 32, x = l / 4;
	const uint32_t base =
	    sc + (uint32_t)((cw * C::SLABS * 64 + wi * 16 + x) * 128 +
			    (l % 4) * 4);
	uint32_t sw[8];
#pragma unroll
	for (int i = 0; i < 8; i++)
		sw[i] = base + (uint32_t)((i ^ x) * 16);
	const float al = w.out.alpha;
#pragma unroll
	for (int j = 0; j < C::SLABS; j++)
#pragma unroll
		for (int h = 0; h < 2; h++)
#pragma unroll
			for (int qq = 0; qq < QP; qq++) {
				const int q = P * QP + qq;
				float v0 = acc[j][4 * q + 2 * h] * al;
				float v1 = acc[j][4 * q + 2 * h + 1] * al;
				if constexpr (BIAS) {
					int64_t c = w.n0 + q * 8 + 2 * (l % 4);
					if (c < w.out.n_end)
						v0 += flyk_db2f(w.out.bias[c]);
					if (c + 1 < w.out.n_end)
						v1 += flyk_db2f(
						    w.out.bias[c + 1]);
				}
				flyk_sts32(sw[qq % 8] +
					       (uint32_t)((qq / 8) * C::BM *
							      128 +
							  (j * 64 + h * 8) *
							      128),
					   flyk_df2b2(v0, v1));
			}
}

/*
 * The TMA-store epilogue of consumer @p cw (thread @p t of its
 * warpgroup), in C::TS passes of BN / TS columns through the staging
 * buffer @p sc: wait until the previous pass's store has read it, write
 * the pass (gemm_tma_stage), make it visible to the async proxy, and let
 * one thread issue its box stores.  After the last pass the consumers go
 * on at once; the next epilogue (or the kernel's end) waits.  Passes
 * shrink the buffer, which buys a stage on the large tiles.
 */
template <class C, int P>
__device__ __forceinline__ void
gemm_tma_epilogue_pass(const gemm_tma_unit &w, float (*acc)[C::NACC],
		       uint16_t *sc, const void *map_c, int cw, int t)
{
	enum { ROWS = C::BM / C::NCW, BOXES = C::BN / 64 / C::TS };
	if (t == 0)
		flyk_tma_store_wait_read();
	flyk_bar_named(1 + cw, 128);
	if (w.out.bias)
		gemm_tma_stage<C, P, true>(w, acc, flyk_smem_u32(sc), cw, t);
	else
		gemm_tma_stage<C, P, false>(w, acc, flyk_smem_u32(sc), cw, t);
	flyk_fence_async_smem();
	flyk_bar_named(1 + cw, 128);
	if (t == 0) {
#pragma unroll
		for (int b = 0; b < BOXES; b++)
			flyk_tma_store_2d(map_c,
					  sc + b * C::BM * 64 + cw * ROWS * 64,
					  (int)(w.n0 + (P * BOXES + b) * 64),
					  (int)(w.m0 + cw * ROWS));
		flyk_tma_store_commit();
	}
}

/* Passes @p P .. C::TS - 1 of the epilogue (call with P = 0). */
template <class C, int P = 0>
__device__ __forceinline__ void
gemm_tma_epilogue(const gemm_tma_unit &w, float (*acc)[C::NACC],
		  uint16_t *sc, const void *map_c, int cw, int t)
{
	gemm_tma_epilogue_pass<C, P>(w, acc, sc, map_c, cw, t);
	if constexpr (P + 1 < C::TS)
		gemm_tma_epilogue<C, P + 1>(w, acc, sc, map_c, cw, t);
}

/* Panel @p kp (64 k from @p k) of the stage at @p sa / @p sb: A's rows of
 * this block, and B: one box of BN rows, or (C::CL = 2) the half of
 * @p rank, multicast into both blocks of the cluster. */
template <class C>
__device__ __forceinline__ void
gemm_tma_panel(const gemm_tma_unit &w, int rank, int kp, int k,
	       const void *map_a, const void *map_b, bool b3d, uint16_t *sa,
	       uint16_t *sb, uint64_t *bar)
{
	enum { BH = C::BN / C::CL }; /* the B map's box rows */
	uint16_t *da = sa + kp * C::BM * 64, *db = sb + kp * C::BN * 64;
	/* (k counts elements: 64 bf16 or 128 fp8 a panel, 128 bytes a row) */
	flyk_tma_2d(da, map_a, bar, k, w.a_row);
	if constexpr (C::CL == 1) {
		if (b3d)
			flyk_tma_3d(db, map_b, bar, k, w.b_row, w.b_z);
		else
			flyk_tma_2d(db, map_b, bar, k, w.b_row);
	} else if (b3d) {
		flyk_tma_3d_mc(db + rank * BH * 64, map_b, bar, k,
			       w.b_row + rank * BH, w.b_z, 3);
	} else {
		flyk_tma_2d_mc(db + rank * BH * 64, map_b, bar, k,
			       w.b_row + rank * BH, 3);
	}
}

/* The producer (one thread): for every stage of this block's units, wait
 * until it is free, announce its bytes, and issue its KP panels.
 * Multicasting, a stage is free once both blocks' consumers released
 * it. */
template <class C, class W>
__device__ __forceinline__ void
gemm_tma_produce(const W &work, int units, int first, int step, int rank,
		 const void *map_a, const void *map_b, bool b3d, uint16_t *sa,
		 uint16_t *sb, uint64_t *full, uint64_t *empty)
{
	uint32_t it = 0;
	for (int u = first; u < units; u += step) {
		gemm_tma_unit w;
		work(u, rank, &w);
		/* A panel past K is zero filled (its bytes still count), so
		 * an odd nk with KP = 2 needs no case of its own; a unit's k
		 * range other than the last ends on a stage (tma_go). */
		for (int kt = 0; kt < w.nk; kt += C::KP, it++) {
			int s = (int)(it % C::ST);
			unsigned ph = (it / C::ST) & 1;
			flyk_bar_wait(&empty[s], ph ^ 1);
			flyk_bar_expect(&full[s], C::STAGE_BYTES);
#pragma unroll
			for (int kp = 0; kp < C::KP; kp++)
				gemm_tma_panel<C>(w, rank, kp,
						  w.k0 + (kt + kp) * C::KE, map_a,
						  map_b, b3d, sa + s * C::A_ST,
						  sb + s * C::B_ST, &full[s]);
		}
	}
}

/* Release stage @p s (lane 0 of each consumer warp): in this block and
 * (C::CL = 2) in the peer, whose producer multicasts into this block's
 * stage too. */
template <class C>
__device__ __forceinline__ void gemm_tma_release(uint64_t *empty, int s,
						 int rank)
{
	flyk_bar_arrive(&empty[s]);
	if constexpr (C::CL == 2)
		flyk_bar_arrive_peer(&empty[s], (unsigned)(rank ^ 1));
}

/* Consumer @p cw's accumulators of unit @p w out: through the TMA-store
 * epilogue (C::TS, where the unit allows) or straight from registers.
 * D fragment (as gemm_wgmma_tile): warp wi of the slab owns rows
 * 16wi..16wi+15; lane l rows l/4 and l/4 + 8, columns 8q + 2(l%4) +
 * {0,1}. */
template <class C>
__device__ __forceinline__ void
gemm_tma_store_unit(const gemm_tma_unit &w, float (*acc)[C::NACC],
		    uint16_t *sc, const void *map_c, int cw, int t)
{
	const int wi = t / 32, l = t % 32;
	if constexpr (C::TS != 0) {
		if (w.tstore) {
			gemm_tma_epilogue<C>(w, acc, sc, map_c, cw, t);
			return;
		}
	}
#pragma unroll
	for (int j = 0; j < C::SLABS; j++) {
		const int64_t r =
		    w.m0 + (cw * C::SLABS + j) * 64 + wi * 16 + l / 4;
#pragma unroll
		for (int q = 0; q < C::BN / 8; q++) {
			int64_t c = w.n0 + q * 8 + 2 * (l % 4);
			gemm_store2(w.out, r, c, acc[j][4 * q],
				    acc[j][4 * q + 1]);
			gemm_store2(w.out, r + 8, c, acc[j][4 * q + 2],
				    acc[j][4 * q + 3]);
		}
	}
}

/* The 4 scale bytes of k-tile @p kb0 (4 blocks of 32) of row @p row of an
 * MX scale tensor [rows, nb], row clamped to the tensor (rows past it
 * compute zeros that are never stored) and blocks past nb read as 0 (their
 * data is TMA zero fill). */
__device__ __forceinline__ uint32_t gemm_mx_scales4(const uint8_t *s,
						    int64_t row, int64_t rows,
						    int nb, int kb0)
{
	const uint8_t *p = s + (row < rows ? row : rows - 1) * (int64_t)nb;
	if (kb0 + 4 <= nb && !(((uintptr_t)(p + kb0)) & 3))
		return __ldg((const unsigned int *)(p + kb0));
	uint32_t v = 0;
#pragma unroll
	for (int i = 0; i < 4; i++)
		if (kb0 + i < nb)
			v |= (uint32_t)__ldg(p + kb0 + i) << (8 * i);
	return v;
}

/* Consumer warpgroup @p cw: wgmma over the stages, then the epilogue. */
template <class C, class W>
__device__ __forceinline__ void
gemm_tma_consume(const W &work, int units, int first, int step, int rank,
		 int cw, const void *map_c, const uint16_t *sa,
		 const uint16_t *sb, uint16_t *sc, uint64_t *full,
		 uint64_t *empty)
{
	const int t = threadIdx.x % 128, l = t % 32;
	uint32_t it = 0;
	for (int u = first; u < units; u += step) {
		gemm_tma_unit w;
		work(u, rank, &w);
		float acc[C::SLABS][C::NACC];
#pragma unroll
		for (int j = 0; j < C::SLABS; j++)
#pragma unroll
			for (int i = 0; i < C::NACC; i++)
				acc[j][i] = 0.f;
#pragma unroll
		for (int j = 0; j < C::SLABS; j++)
			flyk_wg_fence_acc<C::NACC>(acc[j]);
		for (int kt = 0; kt < w.nk; kt += C::KP, it++) {
			int s = (int)(it % C::ST);
			flyk_bar_wait(&full[s], (it / C::ST) & 1);
			const uint16_t *a =
			    sa + s * C::A_ST + cw * C::SLABS * 64 * 64;
			const uint16_t *b = sb + s * C::B_ST;
			flyk_wg_fence();
			/* Panel kp of A is BM rows x 64 at kp * BM * 64, of B
			 * BN rows x 64 at kp * BN * 64. */
#pragma unroll
			for (int kp = 0; kp < C::KP; kp++)
#pragma unroll
			for (int j = 0; j < C::SLABS; j++)
#pragma unroll
				for (int kk = 0; kk < 4; kk++)
					flyk_wgmma_bf16<C::BN>(
					    acc[j],
					    flyk_wg_desc(a + kp * C::BM * 64 +
							 j * 64 * 64 +
							 kk * 16),
					    flyk_wg_desc(b + kp * C::BN * 64 +
							 kk * 16));
			flyk_wg_commit();
			/* The group of k-tile kt - 1 has retired: its stage
			 * may be refilled. */
			flyk_wg_wait<1>();
			if (kt > 0 && l == 0)
				gemm_tma_release<C>(empty, (it - 1) % C::ST,
						    rank);
		}
		flyk_wg_wait<0>();
		if (w.nk > 0 && l == 0) /* one arrival per warp */
			gemm_tma_release<C>(empty, (it - 1) % C::ST, rank);
#pragma unroll
		for (int j = 0; j < C::SLABS; j++)
			flyk_wg_fence_acc<C::NACC>(acc[j]);
		gemm_tma_store_unit<C>(w, acc, sc, map_c, cw, t);
	}
	if constexpr (C::TS != 0) {
		if (t == 0) /* the block's shared memory outlives the stores */
			flyk_tma_store_wait();
	}
}

/*
 * The fp8 consumer (C::F8): per k-tile (128 k), the four k32 wgmmas of a
 * slab sum into `part` (the first with scale-d 0), the group is waited
 * for and the stage released, and `part` is promoted into the fp32
 * accumulators: Hopper's fp8 MMA keeps fewer bits in its own sums than
 * fp32, so long K is summed in registers, as cuBLAS does without fast
 * accumulation.  C::F8 == 2 (MX): one k32 wgmma at a time, promoted with
 * its block's scales, acc += part * sa[row] * sb[col].  Both consumer
 * warpgroups of a BM 128 tile interleave, so one's promotion overlaps the
 * other's MMA.
 */
template <class C, class W>
__device__ __forceinline__ void
gemm_tma_consume_f8(const W &work, int units, int first, int step, int rank,
		    int cw, const void *map_c, const uint16_t *sa,
		    const uint16_t *sb, uint16_t *sc, uint64_t *full,
		    uint64_t *empty)
{
	const int t = threadIdx.x % 128, wi = t / 32, l = t % 32;
	uint32_t it = 0;
	for (int u = first; u < units; u += step) {
		gemm_tma_unit w;
		work(u, rank, &w);
		float acc[C::SLABS][C::NACC], part[C::SLABS][C::NACC];
#pragma unroll
		for (int j = 0; j < C::SLABS; j++)
#pragma unroll
			for (int i = 0; i < C::NACC; i++)
				acc[j][i] = 0.f;
		for (int kt = 0; kt < w.nk; kt++, it++) {
			int s = (int)(it % C::ST);
			uint32_t ra[C::SLABS][2], rb[C::BN / 8][2];
			if constexpr (C::F8 == 2) {
				int kb0 = (w.k0 + kt * 128) / 32;
#pragma unroll
				for (int j = 0; j < C::SLABS; j++)
#pragma unroll
					for (int h = 0; h < 2; h++)
						ra[j][h] = gemm_mx_scales4(
						    w.sa,
						    w.m0 +
							(cw * C::SLABS + j) *
							    64 +
							wi * 16 + l / 4 +
							8 * h,
						    w.out.m_end, w.kblocks,
						    kb0);
#pragma unroll
				for (int q = 0; q < C::BN / 8; q++)
#pragma unroll
					for (int e = 0; e < 2; e++)
						rb[q][e] = gemm_mx_scales4(
						    w.sb,
						    w.n0 + q * 8 +
							2 * (l % 4) + e,
						    w.out.n_end, w.kblocks,
						    kb0);
			}
			flyk_bar_wait(&full[s], (it / C::ST) & 1);
			const uint16_t *a =
			    sa + s * C::A_ST + cw * C::SLABS * 64 * 64;
			const uint16_t *b = sb + s * C::B_ST;
			if constexpr (C::F8 == 1) {
				flyk_wg_fence();
#pragma unroll
				for (int j = 0; j < C::SLABS; j++)
#pragma unroll
					for (int kk = 0; kk < 4; kk++)
						flyk_wgmma_fp8<C::BN>(
						    part[j],
						    flyk_wg_desc(a +
								 j * 64 * 64 +
								 kk * 16),
						    flyk_wg_desc(b + kk * 16),
						    kk);
				flyk_wg_commit();
				flyk_wg_wait<0>();
				if (l == 0)
					gemm_tma_release<C>(empty, s, rank);
#pragma unroll
				for (int j = 0; j < C::SLABS; j++) {
					flyk_wg_fence_acc<C::NACC>(part[j]);
#pragma unroll
					for (int i = 0; i < C::NACC; i++)
						acc[j][i] += part[j][i];
				}
			} else {
#pragma unroll
				for (int kk = 0; kk < 4; kk++) {
					flyk_wg_fence();
#pragma unroll
					for (int j = 0; j < C::SLABS; j++)
						flyk_wgmma_fp8<C::BN>(
						    part[j],
						    flyk_wg_desc(a +
								 j * 64 * 64 +
								 kk * 16),
						    flyk_wg_desc(b + kk * 16),
						    0);
					flyk_wg_commit();
					flyk_wg_wait<0>();
					if (kk == 3 && l == 0)
						gemm_tma_release<C>(empty, s,
								    rank);
					float fb[C::BN / 8][2];
#pragma unroll
					for (int q = 0; q < C::BN / 8; q++)
#pragma unroll
						for (int e = 0; e < 2; e++)
							fb[q][e] = gemm_e8m0(
							    (rb[q][e] >>
							     (8 * kk)) &
							    0xffu);
#pragma unroll
					for (int j = 0; j < C::SLABS; j++) {
						flyk_wg_fence_acc<C::NACC>(
						    part[j]);
						float fa[2];
#pragma unroll
						for (int h = 0; h < 2; h++)
							fa[h] = gemm_e8m0(
							    (ra[j][h] >>
							     (8 * kk)) &
							    0xffu);
#pragma unroll
						for (int q = 0; q < C::BN / 8;
						     q++)
#pragma unroll
							for (int h = 0; h < 2;
							     h++)
#pragma unroll
								for (int e = 0;
								     e < 2;
								     e++) {
									int i =
									    4 * q +
									    2 * h +
									    e;
									acc[j][i] = fmaf(
									    part[j][i] *
										fb[q][e],
									    fa[h],
									    acc[j][i]);
								}
					}
				}
			}
		}
#pragma unroll
		for (int j = 0; j < C::SLABS; j++)
			flyk_wg_fence_acc<C::NACC>(acc[j]);
		gemm_tma_store_unit<C>(w, acc, sc, map_c, cw, t);
	}
	if constexpr (C::TS != 0) {
		if (t == 0)
			flyk_tma_store_wait();
	}
}

/*
 * Run the units @p first, @p first + @p step, ... < @p units of work
 * functor @p work (void operator()(int u, int rank, gemm_tma_unit *w)
 * const; @p rank: the block's rank in its cluster, 0 when C::CL is 1)
 * with config @p C.  With C::CL = 2 both blocks of a cluster (@p first
 * and @p step count clusters) take the same units, must be given the same
 * B rows and k range, and share B.
 * @p map_a / @p map_b / @p map_c are the tensor maps (kernel parameters,
 * __grid_constant__; map_c for C::TS only; B's box has BN / CL rows),
 * @p b3d whether B's map is 3-D (expert, n, k).  @p smem_raw is C::SMEM
 * bytes of dynamic shared memory, @p bars 2 * ST mbarriers in shared
 * memory.  Every thread of the block calls it.
 */
template <class C, class W>
__device__ __forceinline__ void
gemm_tma_run(const W &work, int units, int first, int step,
	     const void *map_a, const void *map_b, bool b3d,
	     const void *map_c, uint16_t *smem_raw, uint64_t *bars)
{
	uint16_t *smem =
	    (uint16_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
	uint16_t *sa = smem, *sb = smem + C::A_ST * C::ST;
	/* C::TS: the bf16 tile, BN / 64 column chunks of BM rows x 128
	 * bytes, 128B-swizzled as the map's box {64, BM / NCW} wants. */
	uint16_t *sc = sb + C::B_ST * C::ST;
	uint64_t *full = bars, *empty = bars + C::ST;
	const int wg = threadIdx.x / 128;
	const int rank = C::CL == 2 ? flyk_cluster_rank() : 0;
	if (threadIdx.x == 0) {
		flyk_tma_prefetch_map(map_a);
		flyk_tma_prefetch_map(map_b);
#pragma unroll
		for (int s = 0; s < C::ST; s++) {
			flyk_bar_init(&full[s], 1);
			flyk_bar_init(&empty[s], C::CL * C::NCW * 4);
		}
		flyk_bar_init_fence();
	}
	/* The peer's barriers are initialised before any remote use. */
	if constexpr (C::CL == 2)
		flyk_cluster_sync();
	else
		__syncthreads();
	/* The stage of the it-th k-tile of this block is it % ST; its phase
	 * parity (it / ST) & 1.  A fresh barrier is in phase 0: waiting for
	 * the parity of the phase before it (1) returns at once, so the
	 * producer's first ST waits on empty pass. */
	if (wg == 0) {
		if constexpr (C::NCW == 2)
			flyk_reg_dec<40>();
		if (threadIdx.x == 0)
			gemm_tma_produce<C>(work, units, first, step, rank,
					    map_a, map_b, b3d, sa, sb, full,
					    empty);
	} else {
		if constexpr (C::NCW == 2)
			flyk_reg_inc<232>();
		if constexpr (C::F8 != 0)
			gemm_tma_consume_f8<C>(work, units, first, step, rank,
					       wg - 1, map_c, sa, sb, sc, full,
					       empty);
		else
			gemm_tma_consume<C>(work, units, first, step, rank,
					    wg - 1, map_c, sa, sb, sc, full,
					    empty);
	}
	/* No block leaves while its peer may still write into it or arrive
	 * on its barriers. */
	if constexpr (C::CL == 2)
		flyk_cluster_sync();
}

/* ------------------------------------------------------------ host */

#if !FLYK_DEVICE_PASS

/* The tensor maps of config @p C over A [m, k], B [n, k] (@p g 0: a 2-D
 * map) or [g, n, k] (3-D, an expert a plane) and C [m, n] (C::TS only;
 * else @p mc is zeroed).  @return 0 or -EINVAL. */
template <class C>
static int gemm_tma_maps(const void *a, const void *b, void *c, int64_t m,
			 int64_t n, int64_t k, int64_t g, CUtensorMap *ma,
			 CUtensorMap *mb, CUtensorMap *mc)
{
	uint64_t da[2] = {(uint64_t)k, (uint64_t)m};
	uint64_t db[3] = {(uint64_t)k, (uint64_t)n, (uint64_t)g};
	uint64_t dc[2] = {(uint64_t)n, (uint64_t)m};
	if (flyk_tma_map(ma, a, 2, da, C::BM, C::F8 != 0) ||
	    flyk_tma_map(mb, b, g ? 3 : 2, db, C::BN / C::CL, C::F8 != 0))
		return -EINVAL;
	memset(mc, 0, sizeof(*mc));
	if (C::TS != 0 && flyk_tma_map(mc, c, 2, dc, C::BM / C::NCW))
		return -EINVAL;
	return 0;
}

/* A shape of GEMM_TMA_CFGS as a launcher's table holds it: its params'
 * values (k_tile bk = 64 KP), shared memory and the launch function. */
template <class Go> struct gemm_tma_ent {
	int bm, bn, ts, cl, bk, smem;
	Go go;
};

#define GEMM_TMA_ENT_OF(GO, BM, BN, ST, TS, CL, KP)                            \
	{BM, BN, TS, CL, 64 * KP, gemm_tma_cfg<BM, BN, ST, TS, CL, KP>::SMEM,  \
	 GO<gemm_tma_cfg<BM, BN, ST, TS, CL, KP>>},

/* The entry of @p ents (@p n of them) with these params, or NULL. */
template <class Go>
static const gemm_tma_ent<Go> *
gemm_tma_find(const gemm_tma_ent<Go> *ents, size_t n, int64_t bm, int64_t bn,
	      int64_t ts, int64_t cl, int64_t bk)
{
	for (size_t i = 0; i < n; i++)
		if (ents[i].bm == bm && ents[i].bn == bn && ents[i].ts == ts &&
		    ents[i].cl == cl && ents[i].bk == bk)
			return &ents[i];
	return NULL;
}
#endif /* !FLYK_DEVICE_PASS */

#endif /* FLYK_HAS_TMA */
#endif /* FLYK_GEMM_TMA_H */
