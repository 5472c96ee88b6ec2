/*
 * prim/launch.h -- host helpers around a kernel launch: the error of the
 * launch just made, raising a kernel's dynamic shared-memory limit once
 * per device, and programmatic dependent launch (PDL: flyk_go_pdl, with
 * the device side's flyk_pdl_wait and flyk_pdl_trigger).
 *
 * Owns: one 16-flag cache per kernel that uses flyk_smem_optin (process
 * wide; a race between threads only repeats the runtime call), and the
 * FLYK_PDL switch, read from the environment once per includer.
 * Thread: host code, any thread.
 */
#ifndef FLYK_PRIM_LAUNCH_H
#define FLYK_PRIM_LAUNCH_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "prim/flyk_gpu.h"

/* Host code; parsed (never emitted) in hipcc's device pass too, where
 * the ops' host functions that call these are compiled as well. */

/* The launch just made on this thread: 0, -EINVAL (refused arguments) or
 * -EIO. */
static inline int flyk_launch_err(void)
{
	hipError_t e = hipGetLastError();
	return e == hipSuccess ? 0 : e == hipErrorInvalidValue ? -EINVAL : -EIO;
}

/* Raise kernel @p K's dynamic shared-memory limit to @p bytes, once per
 * device (devices 0..15; beyond, every call).  Always before a launch
 * whose static + dynamic shared memory may pass 48 KiB.
 * @return 0 or -ENOSPC. */
template <auto K> static inline int flyk_smem_optin(int bytes)
{
	static int done[16];
	int d = 0;
	(void)hipGetDevice(&d);
	if (d >= 0 && d < 16 && done[d])
		return 0;
	if (hipFuncSetAttribute((const void *)K,
				hipFuncAttributeMaxDynamicSharedMemorySize,
				bytes) != hipSuccess)
		return -ENOSPC;
	if (d >= 0 && d < 16)
		done[d] = 1;
	return 0;
}

/*
 * Programmatic dependent launch (NVIDIA sm_90, FLYK_HAS_PDL).  A kernel
 * launched with flyk_go_pdl may be started while the kernel before it on
 * the stream is still running (once every block of that one has called
 * flyk_pdl_trigger or exited): its blocks become resident and run up to
 * flyk_pdl_wait, which returns when the kernel before has completed and
 * its memory operations are visible.  Under CUDA graphs and back to
 * back, the launch latency of a short kernel then hides behind the tail
 * of the one before it.  The contract: a kernel launched this way calls
 * flyk_pdl_wait before its first access to global memory, read or write
 * (it may then call flyk_pdl_trigger at once: a dependent launched early
 * waits for this kernel's completion in its own flyk_pdl_wait).  A kernel
 * launched without it is ordered as usual; both calls are no-ops there,
 * and everywhere without PDL (AMD, the emulator).
 */
__device__ __forceinline__ void flyk_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && FLYK_HAS_PDL
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void flyk_pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && FLYK_HAS_PDL
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#if FLYK_HAS_PDL && !FLYK_DEVICE_PASS
/* PDL launches unless the environment says FLYK_PDL=0 (read once: a
 * switch for a driver that mishandles it, and for timing with and
 * without it side by side). */
static inline bool flyk_pdl_enabled(void)
{
	static int cached = -1; /* any thread may set it: the same value */
	int on = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (on < 0) {
		const char *e = getenv("FLYK_PDL");
		on = !(e != NULL && strcmp(e, "0") == 0);
		__atomic_store_n(&cached, on, __ATOMIC_RELAXED);
	}
	return on != 0;
}

/* Launch @p kernel with the programmatic-stream-serialization attribute
 * (the contract above).  @return the launch's error (the runtime's last
 * error too, as a <<<>>> launch leaves it). */
template <class K, class... A>
static inline hipError_t flyk_go_pdl(dim3 grid, dim3 block, size_t smem,
			       hipStream_t s, K kernel, A... args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[1] = {};
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = s;
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = at;
	cfg.numAttrs = 1;
	return cudaLaunchKernelEx(&cfg, kernel, args...);
}
#endif

/* Launch kernel @p K on @p s: with PDL (flyk_go_pdl, the contract above)
 * where the build has it and FLYK_PDL is not 0, else as FLYK_GO does.
 * For kernels that call flyk_pdl_wait before touching global memory.
 * @return 0 or -EIO. */
template <auto &K, class... A>
static inline int flyk_go_dependent(dim3 grid, dim3 block, size_t smem,
				    hipStream_t s, A... args)
{
#if FLYK_HAS_PDL && !FLYK_DEVICE_PASS
	if (flyk_pdl_enabled()) {
		if (flyk_go_pdl(grid, block, smem, s, K, args...) == hipSuccess)
			return 0;
		(void)hipGetLastError();
		return -EIO;
	}
#endif
	FLYK_GO(grid, block, smem, s, K)(args...);
	return hipGetLastError() == hipSuccess ? 0 : -EIO;
}

#endif /* FLYK_PRIM_LAUNCH_H */
