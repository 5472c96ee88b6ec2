/*
 * prim/lds_pipe.h -- the k-tile pipeline of a block that stages its
 * operands through registers into shared memory (LDS), as AMD must: it has
 * no cp.async.  One copy of the loop for every engine built that way
 * (gemm_tile.h's gemm_mfma_tile, which gemm_mfma and ggemm_mfma run, and
 * scaled_gemm.hip's sg_mfma); the engine brings the three steps, which
 * differ in element width, re-encoding and what else a k-tile stages
 * (sg_mfma's MX block scales).
 *
 * Owns: nothing (a device inline).  Thread: device code; every thread of
 * the block calls it together (it has barriers).
 * No vendor or architecture test: the steps hold the instructions.
 */
#ifndef FLYK_PRIM_LDS_PIPE_H
#define FLYK_PRIM_LDS_PIPE_H

#include "prim/flyk_gpu.h"

/* On the step lambdas given to flyk_lds_pipe: inlined whatever their
 * size, so the register arrays they capture by reference (the fetched
 * chunks, the accumulators) stay in registers, never in scratch. */
#define FLYK_PIPE_STEP __attribute__((always_inline))

/*
 * Runs @p nk k-tiles through the block's LDS buffers:
 *   fetch(kt)       this thread's share of k-tile kt, global -> registers
 *   put(kt, buf)    those registers -> LDS buffer buf (0 or 1)
 *   step(buf)       the products of the k-tile in LDS buffer buf
 * DB (double buffering) true: two LDS buffers, k-tile kt + 1 fetched
 * before k-tile kt's step and put into the other buffer after it, one
 * barrier a k-tile; false: one buffer, fetch, barrier (the last step has
 * read it), put, barrier, step.  No barrier on entry: a caller whose
 * buffers may still be read (a previous tile of a persistent loop) syncs
 * first.
 */
template <bool DB, class F, class P, class S>
__device__ __forceinline__ void flyk_lds_pipe(int64_t nk, F fetch, P put,
					      S step)
{
	if constexpr (DB) {
		if (nk > 0) {
			fetch(0);
			put(0, 0);
		}
		__syncthreads();
		for (int64_t kt = 0; kt < nk; kt++) {
			int cur = (int)(kt & 1);
			bool more = kt + 1 < nk;
			if (more)
				fetch(kt + 1);
			step(cur);
			if (more)
				put(kt + 1, cur ^ 1);
			__syncthreads();
		}
	} else {
		for (int64_t kt = 0; kt < nk; kt++) {
			fetch(kt);
			if (kt)
				__syncthreads(); /* the last step has read */
			put(kt, 0);
			__syncthreads();
			step(0);
		}
	}
}

#endif /* FLYK_PRIM_LDS_PIPE_H */
