/*
 * prim/cluster.h -- thread-block clusters (NVIDIA sm_90): the cooperative
 * groups view (cg::this_cluster(), distributed shared memory) where
 * FLYK_HAS_CLUSTERS, and for the sm_90a TMA kernels (FLYK_HAS_TMA) the
 * raw cluster barrier and rank and the host launch of a persistent grid
 * of clusters capped at what can be resident.
 *
 * Owns: nothing (device inlines; the residency cache is per host thread).
 * Thread: device code, and host code on the launching thread.
 */
#ifndef FLYK_PRIM_CLUSTER_H
#define FLYK_PRIM_CLUSTER_H

#include "prim/flyk_gpu.h"

#if FLYK_HAS_CLUSTERS
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#endif

#if FLYK_HAS_TMA
#include <errno.h>

/* Every thread of every block of the cluster. */
__device__ __forceinline__ void flyk_cluster_sync(void)
{
	asm volatile("barrier.cluster.arrive.release;\n"
		     "barrier.cluster.wait.acquire;\n" ::: "memory");
}

__device__ __forceinline__ int flyk_cluster_rank(void)
{
	uint32_t r;
	asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
	return (int)r;
}

#if !FLYK_DEVICE_PASS
/* The clusters of @p cfg's shape that can be resident at once (0 when
 * unknown), per kernel and device, cached per host thread: a persistent
 * grid larger than that runs its last clusters after the others have
 * finished all their units, which doubles the time. */
static int flyk_cluster_resident(const void *kernel, const cudaLaunchConfig_t *cfg)
{
	enum { NCACHE = 64 };
	static thread_local struct {
		const void *k;
		int dev, n;
	} cache[NCACHE];
	static thread_local int used;
	int d = 0, n = 0;
	(void)cudaGetDevice(&d);
	for (int i = 0; i < used && i < NCACHE; i++)
		if (cache[i].k == kernel && cache[i].dev == d)
			return cache[i].n;
	if (cudaOccupancyMaxActiveClusters(&n, kernel, cfg) != cudaSuccess)
		n = 0;
	(void)cudaGetLastError();
	if (used < NCACHE) {
		cache[used].k = kernel;
		cache[used].dev = d;
		cache[used].n = n;
		used++;
	}
	return n;
}

/* Launch @p kernel (a gemm_tma kernel) as a persistent grid of at most
 * @p want clusters of @p cl blocks, and (cl > 1) no more than can be
 * resident at once.  @return 0, -EINVAL (refused arguments) or -EIO. */
template <class K, class... A>
static int flyk_cluster_go(K kernel, int64_t want, unsigned threads, size_t smem,
		       int cl, cudaStream_t s, A... args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute at[1] = {};
	cfg.blockDim = dim3(threads);
	cfg.dynamicSmemBytes = smem;
	cfg.stream = s;
	if (cl > 1) {
		at[0].id = cudaLaunchAttributeClusterDimension;
		at[0].val.clusterDim.x = (unsigned)cl;
		at[0].val.clusterDim.y = 1;
		at[0].val.clusterDim.z = 1;
		cfg.attrs = at;
		cfg.numAttrs = 1;
		cfg.gridDim = dim3((unsigned)cl);
		int res = flyk_cluster_resident((const void *)kernel, &cfg);
		if (res > 0 && want > res)
			want = res;
	}
	if (want < 1)
		want = 1;
	cfg.gridDim = dim3((unsigned)(want * cl));
	cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
	(void)cudaGetLastError(); /* returned here, not left for the next */
	return e == cudaSuccess ? 0 : e == cudaErrorInvalidValue ? -EINVAL : -EIO;
}
#endif /* !FLYK_DEVICE_PASS */
#endif /* FLYK_HAS_TMA */
#endif /* FLYK_PRIM_CLUSTER_H */
