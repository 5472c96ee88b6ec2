/*
 * prim/hip_on_cuda.h -- the hip* names kernels/gpu uses, mapped onto CUDA's, so
 * nvcc builds the same .hip sources that hipcc builds (STYLE.md R17).
 *
 * Owns: nothing (macros and inline wrappers).  Thread: n/a.
 * Small and explicit: only what the kernels/gpu sources uses.  Add a name here
 * when a source starts using it; never include <hip/...> under nvcc.
 */
#ifndef FLYK_HIP_ON_CUDA_H
#define FLYK_HIP_ON_CUDA_H

#include <cuda_runtime.h>
#include <cuda_fp16.h>

typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaEvent_t hipEvent_t;
typedef cudaDeviceProp hipDeviceProp_t;
typedef cudaDeviceAttr hipDeviceAttribute_t;
typedef cudaFuncAttribute hipFuncAttribute;

#define hipSuccess cudaSuccess
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorNotSupported cudaErrorNotSupported
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError

#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipDriverGetVersion cudaDriverGetVersion
#define hipRuntimeGetVersion cudaRuntimeGetVersion
#define hipFuncSetAttribute(f, a, v) \
	cudaFuncSetAttribute((const void *)(f), (a), (v))

#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeClockRate cudaDevAttrClockRate
#define hipDeviceAttributeMemoryClockRate cudaDevAttrMemoryClockRate
#define hipDeviceAttributeL2CacheSize cudaDevAttrL2CacheSize
#define hipDeviceAttributeSharedMemPerBlockOptin \
	cudaDevAttrMaxSharedMemoryPerBlockOptin
#define hipFuncAttributeMaxDynamicSharedMemorySize \
	cudaFuncAttributeMaxDynamicSharedMemorySize

#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice

#define hipStreamCreate cudaStreamCreate
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize

#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime

/* Warp-level primitives: CUDA needs a member mask, AMD has none. */
#define FLYK_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define FLYK_SHFL(v, l) __shfl_sync(0xffffffffu, (v), (l))
#define FLYK_BALLOT(p) __ballot_sync(0xffffffffu, (p))
#define FLYK_SHFL_UP(v, o) __shfl_up_sync(0xffffffffu, (v), (o))

#endif /* FLYK_HIP_ON_CUDA_H */
