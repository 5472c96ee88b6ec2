/*
 * prim/launch.h -- host helpers around a kernel launch: the error of the
 * launch just made, and raising a kernel's dynamic shared-memory limit
 * once per device.
 *
 * Owns: one 16-flag cache per kernel that uses flyk_smem_optin (process
 * wide; a race between threads only repeats the runtime call).
 * Thread: host code, any thread.
 */
#ifndef FLYK_PRIM_LAUNCH_H
#define FLYK_PRIM_LAUNCH_H

#include <errno.h>

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

#endif /* FLYK_PRIM_LAUNCH_H */
