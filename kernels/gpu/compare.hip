/*
 * compare.hip -- flyk_gpu_compare(): an op's output checked against its
 * reference on the device (prim/compare.h's kernel), for the op modules'
 * check() hooks.  Part of the core beside backend.hip; the CPU emulator
 * builds it too (its flyk_gpu_upload/download are host copies).
 *
 * Owns: nothing.  Thread: a device's cases belong to one thread at a time.
 */
#include <errno.h>
#include <string.h>

#include "gpu_int.h"
#include "prim/compare.h"
#include "prim/flyk_gpu.h"
#include "prim/launch.h"

template <int DT>
static void cmp_go(struct flyk_device *dev, const void *got, const void *ref,
		   size_t n, float rel, float floor_, float slack,
		   unsigned *d_cmp)
{
	typedef typename flyk_elem<DT>::T T;
	size_t blocks = (n + 255) / 256;
	if (blocks > (size_t)dev->sms * 8)
		blocks = (size_t)dev->sms * 8;
	if (blocks < 1)
		blocks = 1;
	FLYK_GO((unsigned)blocks, 256, 0, (hipStream_t)dev->stream,
		flyk_cmp_kernel<DT>)((const T *)got, (const T *)ref, n, rel,
				     floor_, slack, d_cmp);
}

extern "C" int flyk_gpu_compare(struct flyk_device *dev, uint32_t dtype,
				const void *got, const void *ref, size_t n,
				float rel, float floor_, float slack,
				unsigned *d_cmp, double *max_err)
{
	unsigned h[2] = {0, 0};
	float mx;
	*max_err = 0;
	if (!flyk_dtype_bytes(dtype))
		return -EOPNOTSUPP;
	int rc = flyk_gpu_upload(dev, d_cmp, h, sizeof(h));
	if (rc)
		return rc;
	if (dtype == FLY_DT_FP32)
		cmp_go<FLY_DT_FP32>(dev, got, ref, n, rel, floor_, slack, d_cmp);
	else if (dtype == FLY_DT_FP16)
		cmp_go<FLY_DT_FP16>(dev, got, ref, n, rel, floor_, slack, d_cmp);
	else
		cmp_go<FLY_DT_BF16>(dev, got, ref, n, rel, floor_, slack, d_cmp);
	rc = flyk_launch_err();
	if (!rc)
		rc = flyk_gpu_download(dev, h, d_cmp, sizeof(h));
	if (rc)
		return rc;
	memcpy(&mx, &h[0], sizeof(mx));
	*max_err = mx;
	return h[1] ? -EDOM : 0;
}

extern "C" int64_t flyk_check_sample(int64_t n, int64_t cap, int64_t edge,
			  int64_t jitter, int32_t *out)
{
	int64_t k = 0;
	if (n <= cap) {
		for (int64_t i = 0; i < n; i++)
			out[k++] = (int32_t)i;
		return k;
	}
	const int64_t mid = cap - 2 * edge, lo = edge, hi = n - edge;
	for (int64_t i = 0; i < lo; i++)
		out[k++] = (int32_t)i;
	int64_t prev = lo - 1;
	for (int64_t j = 0; j < mid; j++) {
		int64_t i = lo + (hi - lo) * j / mid + j % jitter;
		i = i > prev ? i : prev + 1;
		if (i >= hi)
			break;
		out[k++] = (int32_t)i;
		prev = i;
	}
	for (int64_t i = hi; i < n; i++)
		out[k++] = (int32_t)i;
	return k;
}
