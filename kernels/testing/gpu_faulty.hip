/*
 * gpu_faulty.hip -- test-only GPU rmsnorm variants that fault on the
 * device on demand, so the daemon's supervision of a worker whose CUDA /
 * HIP context dies (RELIABILITY.md F9) runs on the real GPU.  Linked only
 * into the test build of the GPU kernel library
 * (BUILD/testing/libflykernels_{cuda,hip}.so); the production library
 * has the weak reference in kernels/gpu/backend.hip unresolved (NULL), so
 * these variants do not exist there at all.
 *
 *   test_gpu_trap  a device trap (__trap(); __builtin_trap() on AMD): the
 *                  launch fails, the context is lost, the worker exits
 *   test_gpu_oob   loads and stores through a wild pointer (the first page
 *                  of the address space, never mapped): illegal address,
 *                  the context is lost, the worker exits
 *   test_gpu_hang  one thread spins forever on a volatile counter: the
 *                  daemon's candidate timeout kills the worker
 *   test_gpu_nan   writes quiet NaNs into y: the check rejects it (wrong)
 *   test_gpu_oom   allocates device memory in 1 GiB pieces until the
 *                  allocation fails, frees it all and returns -ENOMEM: an
 *                  error trial, nothing killed, the next candidate runs
 *
 * Each is feasible only when FLYK_TESTING_FAULTS names it ("gpu_trap",
 * "gpu_oob", "gpu_hang", "gpu_nan", "gpu_oom", comma-separated, as in
 * kernels/testing/faulty.c).  A value "@PATH" reads the list from the
 * file PATH (its first line) at every feasible() call instead, so a test
 * can switch the fault of a running daemon's worker without restarting
 * the daemon (tests/gpu/test_gpu_faults.c).
 *
 * Owns: nothing (test_gpu_oom frees what it took before it returns).
 * Thread: any.
 */
#include <errno.h>
#include <stdio.h>

#include "fault_list.h"
#include "gpu_int.h"
#include "prim/flyk_gpu.h"

#define FAULTY_DTYPES ((1u << FLY_DT_FP32) | (1u << FLY_DT_BF16) | \
		       (1u << FLY_DT_FP16))
#define OOM_CHUNK ((size_t)1 << 30)
#define OOM_MAX_CHUNKS 1024 /* 1 TiB: more than any GPU has */

/* ------------------------------------------------------------ kernels */

__global__ void faulty_trap_kernel(float *sink)
{
	if (threadIdx.x == 0) {
#if FLYK_AMD
		__builtin_trap();
#else
		__trap();
#endif
	}
	sink[threadIdx.x] = 0.f; /* not reached by thread 0 */
}

/* @p wild is an address no allocation has: the load faults first. */
__global__ void faulty_oob_kernel(uintptr_t wild, float *sink)
{
	volatile float *p = (volatile float *)wild;
	float v = p[threadIdx.x];

	p[threadIdx.x + 32] = v + 1.f;
	sink[threadIdx.x] = v;
}

__global__ void faulty_hang_kernel(void)
{
	volatile unsigned long long spin = 0;

	for (;;)
		spin = spin + 1;
}

/* Quiet NaNs of the problem's dtype in every element of y. */
__global__ void faulty_nan_kernel(void *y, size_t n, uint32_t dtype)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		if (dtype == FLY_DT_FP32)
			((uint32_t *)y)[i] = 0x7fc00000u;
		else if (dtype == FLY_DT_FP16)
			((uint16_t *)y)[i] = 0x7e00u;
		else
			((uint16_t *)y)[i] = 0x7fc0u;
	}
}

/* ------------------------------------------------------------ enabling */

static int problem_ok(const struct fly_problem *p)
{
	return p->op == FLY_OP_RMSNORM && (FAULTY_DTYPES & (1u << p->dtype)) &&
	       p->dims[0] >= 1 && p->dims[1] >= 1;
}

static int feasible_if(const struct fly_problem *p, const char *name)
{
	return problem_ok(p) && flyk_testing_fault_enabled(name) ? 0 : -EINVAL;
}

static int launch_rc(void)
{
	return hipGetLastError() == hipSuccess ? 0 : -EIO;
}

/* ------------------------------------------------------------ variants */

static int trap_feasible(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *params)
{
	return feasible_if(p, "gpu_trap");
}

static int oob_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	return feasible_if(p, "gpu_oob");
}

static int hang_feasible(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *params)
{
	return feasible_if(p, "gpu_hang");
}

static int nan_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	return feasible_if(p, "gpu_nan");
}

static int oom_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	return feasible_if(p, "gpu_oom");
}

static int trap_launch(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *params,
		       const union flyk_args *args, void *stream)
{
	faulty_trap_kernel<<<1, 32, 0, (hipStream_t)stream>>>(
		(float *)args->rmsnorm.y);
	return launch_rc();
}

static int oob_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	faulty_oob_kernel<<<1, 32, 0, (hipStream_t)stream>>>(
		(uintptr_t)64, (float *)args->rmsnorm.y);
	return launch_rc();
}

static int hang_launch(const struct flyk_device *dev,
		       const struct fly_problem *p, const int64_t *params,
		       const union flyk_args *args, void *stream)
{
	faulty_hang_kernel<<<1, 1, 0, (hipStream_t)stream>>>();
	return launch_rc();
}

static int nan_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	size_t n = (size_t)p->dims[0] * (size_t)p->dims[1];

	faulty_nan_kernel<<<64, 256, 0, (hipStream_t)stream>>>(
		args->rmsnorm.y, n, p->dtype);
	return launch_rc();
}

/* Take device memory until the allocator says no, then give it all back.
 * The failed allocation's error is cleared (it is not sticky), so the
 * next candidate's launch check does not see it. */
static int oom_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	static void *chunk[OOM_MAX_CHUNKS];
	int n = 0;

	while (n < OOM_MAX_CHUNKS && hipMalloc(&chunk[n], OOM_CHUNK) ==
					     hipSuccess)
		n++;
	(void)hipGetLastError();
	for (int i = 0; i < n; i++)
		(void)hipFree(chunk[i]);
	fprintf(stderr, "flyk: test_gpu_oom: %d GiB taken before the "
		"allocation failed\n", n);
	return n < OOM_MAX_CHUNKS ? -ENOMEM : 0;
}

#if !FLYK_DEVICE_PASS
static const int64_t one_val[] = { 1 };

#define FAULTY(nm, feas, fn)                                              \
	{ nm, FLY_OP_RMSNORM, FAULTY_DTYPES, FLY_F_RESIDUAL, 0, 1,        \
	  { { "one", 1, one_val } }, feas, NULL, fn, NULL }

static const struct flyk_variant faulty_variants[] = {
	FAULTY("test_gpu_trap", trap_feasible, trap_launch),
	FAULTY("test_gpu_oob", oob_feasible, oob_launch),
	FAULTY("test_gpu_hang", hang_feasible, hang_launch),
	FAULTY("test_gpu_nan", nan_feasible, nan_launch),
	FAULTY("test_gpu_oom", oom_feasible, oom_launch),
};

/* Variants only (no setup): the cases are the rmsnorm module's
 * (backend.hip's gpu_find_op() skips an op without a setup). */
extern "C" const struct flyk_gpu_op flyk_gpu_testing_op = {
	FLY_OP_RMSNORM, faulty_variants,
	sizeof(faulty_variants) / sizeof(faulty_variants[0]),
	NULL, NULL, NULL, NULL,
};
#endif
