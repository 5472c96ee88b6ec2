/*
 * gpu_rt.h -- the few runtime calls the GPU tests make themselves (device
 * buffers, copies, a sync), spelt cuda* and mapped onto HIP when the tests
 * are built by `make test-gpu GPU=hip` (-DFLYK_TEST_HIP=1, linked against
 * libflykernels_hip.so and libamdhip64).  Tests only: the kernels have
 * their own mapping the other way round (kernels/gpu/prim/hip_on_cuda.h).
 */
#ifndef FLY_TEST_GPU_RT_H
#define FLY_TEST_GPU_RT_H

#if FLYK_TEST_HIP
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#define cudaSuccess hipSuccess
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMemcpy hipMemcpy
#define cudaMemset hipMemset
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#else
#include <cuda_runtime_api.h>
#endif

#endif
