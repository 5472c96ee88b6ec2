/*
 * prim/compare.h -- the device-side check the ops' benchmark cases share:
 * an output compared with its reference where both live, on the device,
 * so only two words come back (a 2 GB case is checked in a few hundred
 * microseconds, not downloaded).
 *
 * Owns: nothing (a kernel template).  Thread: device code; the host
 * launcher is flyk_gpu_compare() (kernels/gpu/compare.hip).
 */
#ifndef FLYK_PRIM_COMPARE_H
#define FLYK_PRIM_COMPARE_H

#include <math.h>

#include "prim/flyk_gpu.h"

/* Compare @p n elements of dtype DT (flyk_elem codes) of @p got with
 * @p ref: out[0] = max |got - ref| as float bits (+inf for NaN), out[1] +=
 * the elements that are NaN or off by more than
 * rel * max(|ref|, floor) + slack.  out[] starts zeroed; any grid. */
template <int DT>
__global__ void flyk_cmp_kernel(const typename flyk_elem<DT>::T *got,
				const typename flyk_elem<DT>::T *ref, size_t n,
				float rel, float floor_, float slack,
				unsigned *out)
{
	typedef flyk_elem<DT> E;
	float mx = 0.f;
	unsigned bad = 0;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		float g = E::load(got[i]), r = E::load(ref[i]);
		float e = fabsf(g - r);
		if (!(e == e)) {
			e = INFINITY;
			bad++;
		} else if (e > rel * fmaxf(fabsf(r), floor_) + slack) {
			bad++;
		}
		mx = fmaxf(mx, e);
	}
	atomicMax(&out[0], __float_as_uint(mx));
	if (bad)
		atomicAdd(&out[1], bad);
}

#endif /* FLYK_PRIM_COMPARE_H */
