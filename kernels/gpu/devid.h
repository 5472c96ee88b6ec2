/*
 * devid.h -- the GPU device's identity and the L2-clean sizing, as plain C
 * (kernels/devid.c) so that CI, which has no GPU, tests them: composing the
 * fingerprint from a filled struct, sizing the flush buffer from the
 * device's caches, and the ROCm SMI query (dlopen'ed at run time, so a
 * machine without librocm_smi64 still works).  Not installed; seen by the
 * GPU backend (kernels/gpu/backend.hip) and tests/unit/test_devid.c only.
 *
 * Thread: every function is reentrant except flyk_smi_query(), which calls
 * rsmi_init/rsmi_shut_down and so belongs to one thread at a time (the
 * worker's).
 */
#ifndef FLYK_DEVID_H
#define FLYK_DEVID_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The flush buffer is never smaller than this (NVIDIA's rule since the
 * first GPU backend: 4x a 60 MB L2 and then some). */
#define FLYK_FLUSH_MIN_BYTES ((size_t)256 << 20)

/* What ROCm SMI says about one device (zero / "" where it could not say). */
struct flyk_smi {
	unsigned power_cap_w;    /* power cap, watts (sensor 0) */
	char kdriver[64];        /* amdgpu kernel driver version string */
};

/* Everything the fingerprint is composed of. */
struct flyk_devid {
	int amd;                 /* 1: the AMD fields below are part of it */
	const char *arch;        /* "sm_90", "gfx942" */
	const char *name;        /* marketing name */
	int units;               /* SMs / CUs */
	int clock_mhz, mem_clock_mhz;
	int driver_version, runtime_version;
	size_t l2_bytes;
	size_t llc_bytes;        /* AMD: Infinity Cache (MALL), 0 if none */
	const char *lib;         /* flyk_libver() */
	const char *blas, *dnn;  /* vendor library versions or "none" */
	const struct flyk_smi *smi; /* AMD: NULL when SMI was absent */
};

/* Write the fingerprint of @p id into @p buf.  NVIDIA (amd == 0) keeps the
 * exact string of the first GPU backend, so existing tuning DBs stay
 * valid; AMD appends llc_kb, power_cap_w and kdriver ("none" without SMI).
 * @return its length, or -ENOSPC if @p cap is too small, -EINVAL for a
 * NULL string field. */
int flyk_devid_fingerprint(const struct flyk_devid *id, char *buf,
			   size_t cap);

/* The last-level cache beyond L2 of an AMD GPU by gfx name (MI300's and
 * MI355's 256 MiB Infinity Cache; none on MI200/MI100), for the HIP
 * runtimes that do not report it.  @return bytes, 0 if none or unknown. */
size_t flyk_gfx_llc_bytes(const char *arch);

/* The largest cache the amdgpu driver's KFD topology reports for the GPU
 * at PCI @p domain:@p bus:@p device (its node's caches/N/properties
 * "size", KiB; MI300X lists its Infinity Cache there), read from @p root
 * (NULL: /sys/class/kfd/kfd/topology; tests pass a fake tree).
 * @return bytes, 0 where there is no such node or it lists no cache. */
size_t flyk_kfd_cache_bytes(const char *root, int domain, int bus,
			    int device);

/* Size of the buffer whose read cleans the caches before a timed rep: at
 * least 4x the largest of @p l2_bytes and @p llc_bytes, never below
 * FLYK_FLUSH_MIN_BYTES.  With llc_bytes == 0 this is the NVIDIA rule
 * unchanged, byte for byte. */
size_t flyk_flush_bytes(size_t l2_bytes, size_t llc_bytes);

/* Query ROCm SMI about the device at PCI @p domain:@p bus:@p device,
 * dlopen'ing @p lib (NULL: librocm_smi64.so, then its usual sonames).
 * @return 0; -ENOENT when the library cannot be loaded, -ENOSYS when it
 * lacks a symbol, -ENODEV when it does not know the device or fails to
 * initialise.  *out is zeroed first and filled as far as SMI answered. */
int flyk_smi_query(const char *lib, int domain, int bus, int device,
		   struct flyk_smi *out);

#ifdef __cplusplus
}
#endif

#endif
