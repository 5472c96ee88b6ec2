/*
 * gemm/gemm_vendor.h -- the vendor GEMM candidates of the CUDA backend
 * (kernels/vendor/cublaslt.c), seen by gemm.hip, which lists them in the
 * gemm op's variant table under nvcc only.  Not installed.
 *
 * Owns: nothing (declarations).  Thread: as the flyk_variant hooks; the
 * cuBLAS handles are per device and per process, created on first use
 * under a mutex; a device's launches must come from one thread at a time.
 *
 * "cublaslt" params, in order (every value is a cuBLASLt algorithm config
 * attribute, so a client replays the point exactly with
 * cublasLtMatmulAlgoInit + cublasLtMatmulAlgoConfigSetAttribute):
 *   algo       CUBLASLT_ALGO_CONFIG_ID
 *   tile       CUBLASLT_ALGO_CONFIG_TILE_ID
 *   stages     CUBLASLT_ALGO_CONFIG_STAGES_ID
 *   splitk     CUBLASLT_ALGO_CONFIG_SPLITK_NUM
 *   reduction  CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME
 *   swizzle    CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING
 *   custom     CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION
 *   shape      heuristic index (bits 0..15, rank in the heuristic's top-N),
 *              CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID (bits 16..31) and
 *              CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID (bits 32..47): the
 *              Hopper attributes did not fit in FLY_PARAMS_MAX = 8 alone.
 * The declared value lists hold one placeholder (-1), never feasible: the
 * points come from enumerate() (cublasLtMatmulAlgoGetHeuristic, top
 * FLYK_CUBLASLT_TOPN, FLYK_GEMM_WS_BYTES of workspace).
 * "cublas_default": no params; cublasGemmEx with CUBLAS_GEMM_DEFAULT
 * (no bias epilogue, so it does not take FLY_F_BIAS).
 */
#ifndef FLYK_GEMM_VENDOR_H
#define FLYK_GEMM_VENDOR_H

#include <stddef.h>
#include <stdint.h>

#include "flyk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Workspace the heuristic may assume, and the case provides (32 MiB). */
#define FLYK_GEMM_WS_BYTES ((size_t)32 << 20)
/* How many heuristic results enumerate() asks for. */
#define FLYK_CUBLASLT_TOPN    16
#define FLYK_CUBLASLT_NPARAMS 8

int flyk_cublaslt_feasible(const struct flyk_device *dev,
			   const struct fly_problem *p, const int64_t *params);
int flyk_cublaslt_enumerate(const struct flyk_device *dev,
			    const struct fly_problem *p,
			    int64_t (*out)[FLY_PARAMS_MAX], int max);
int flyk_cublaslt_launch(const struct flyk_device *dev,
			 const struct fly_problem *p, const int64_t *params,
			 const union flyk_args *args, void *stream);
int flyk_cublas_default_feasible(const struct flyk_device *dev,
				 const struct fly_problem *p,
				 const int64_t *params);
int flyk_cublas_default_launch(const struct flyk_device *dev,
			       const struct fly_problem *p,
			       const int64_t *params,
			       const union flyk_args *args, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* FLYK_GEMM_VENDOR_H */
