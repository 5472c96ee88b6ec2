/*
 * fly_abi.h -- the public value types and error codes shared by the wire
 * protocol, the shm table, libflyclient and libflykernels.
 *
 * Owns: nothing (types only).  Thread: n/a.
 * This file is inlined into the one installed header, flyclient.h, by the
 * Makefile (see `build/include/flyclient.h`), so it must stay self-contained
 * C11 and must not include any other project header.
 *
 * Invariant: every enum value below is part of the ABI; values are only ever
 * appended, never renumbered.
 */
#ifndef FLY_ABI_H
#define FLY_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Protocol version spoken in `hello`.  Bumped on incompatible changes. */
#define FLY_PROTO_VERSION 1

/* Longest canonical shape key, including the terminating NUL. */
#define FLY_KEY_MAX 96
/* Longest variant name, including the terminating NUL. */
#define FLY_VARIANT_MAX 40
/* Most parameters a variant may declare (a cuBLASLt algorithm fits in 8). */
#define FLY_PARAMS_MAX 8
/* Most dims a problem may carry. */
#define FLY_DIMS_MAX 8

/* Operations.  Dims per op, in this order (see fly_key_dim_names()):
 *   GEMM          m, n, k           layout NT/NN/TN/TT, flags BIAS|SCALE
 *   GROUPED_GEMM  g, m, n, k        (m = total rows over all groups)
 *   SCALED_GEMM   m, n, k           dtype FP8_E4M3(FNUZ)/MXFP8/MXFP4,
 *                                   layout NT, flags BIAS
 *   RMSNORM       m, n              flags RESIDUAL
 *   TOPK          m, n, k           flags DETERMINISTIC
 *   ATTENTION     b, sq, skv, hq, hkv, d   flags CAUSAL
 *   MQA_LOGITS    sq, skv, h, d     dtype of q FP8_E4M3(FNUZ),
 *                                   flags CLEAN, KV_FNUZ
 */
enum fly_op {
	FLY_OP_NONE = 0,
	FLY_OP_GEMM = 1,
	FLY_OP_GROUPED_GEMM = 2,
	FLY_OP_SCALED_GEMM = 3,
	FLY_OP_RMSNORM = 4,
	FLY_OP_TOPK = 5,
	FLY_OP_ATTENTION = 6,
	FLY_OP_MQA_LOGITS = 7,
	FLY_OP_COUNT = 8
};

enum fly_dtype {
	FLY_DT_NONE = 0,
	FLY_DT_FP32 = 1,
	FLY_DT_FP16 = 2,
	FLY_DT_BF16 = 3,
	FLY_DT_FP8_E4M3 = 4,
	FLY_DT_FP8_E5M2 = 5,
	FLY_DT_MXFP8 = 6,
	FLY_DT_MXFP4 = 7,
	FLY_DT_FP8_E4M3FNUZ = 8, /* AMD gfx942's e4m3: bias 8, 0x80 is NaN */
	FLY_DT_COUNT = 9
};

enum fly_layout {
	FLY_LAYOUT_NONE = 0, /* op has no layout segment in its key */
	FLY_LAYOUT_NT = 1,   /* A [M,K] row-major, B [N,K] row-major */
	FLY_LAYOUT_NN = 2,   /* A [M,K] row-major, B [K,N] row-major */
	FLY_LAYOUT_TN = 3,
	FLY_LAYOUT_TT = 4,
	FLY_LAYOUT_COUNT = 5
};

/* Problem flags (bits). */
#define FLY_F_BIAS 0x1u          /* gemm: fused bias add */
#define FLY_F_SCALE 0x2u         /* gemm: fused alpha scale */
#define FLY_F_RESIDUAL 0x4u      /* rmsnorm: fused residual add */
#define FLY_F_DETERMINISTIC 0x8u /* topk: ties by index, bit-identical */
#define FLY_F_CAUSAL 0x10u       /* attention: causal mask */
#define FLY_F_CLEAN 0x20u        /* mqa_logits: -inf outside each row's
				    window (clean_logits) */
#define FLY_F_KV_FNUZ 0x40u      /* mqa_logits: kv is e4m3fnuz while q is
				    the key's dtype (vLLM on gfx942) */
#define FLY_F_EXACT 0x80u       /* any op: the exact shape, not re-bucketed
				    (its varying dim is not its bucket's
				    representative); see fly_key.h */
#define FLY_F_ALL 0xffu

/* A problem: what the engine is about to launch. */
struct fly_problem {
	uint32_t op;                /* enum fly_op */
	uint32_t dtype;             /* enum fly_dtype of the inputs */
	uint32_t layout;            /* enum fly_layout */
	uint32_t flags;             /* FLY_F_* */
	int64_t dims[FLY_DIMS_MAX]; /* per-op order above; unused are 0 */
};

/* Decision status. */
enum fly_status {
	FLY_STATUS_DEFAULT = 0, /* heuristic default: nothing tuned nearby */
	FLY_STATUS_PENDING = 1, /* tuning queued or running; answer is a
				   provisional neighbour or the default */
	FLY_STATUS_TUNED = 2    /* measured winner for this key and device */
};

/* A decision: which variant, with which parameters. */
struct fly_decision {
	uint32_t status;               /* enum fly_status */
	uint32_t provisional;          /* 1: borrowed from a tuned neighbour */
	char variant[FLY_VARIANT_MAX]; /* NUL-terminated variant name */
	uint32_t nparams;              /* valid entries in params */
	uint32_t exact;                /* 1: the exact shape's own row
				  answered (FLY_F_EXACT key), 0: the
				  bucket's (was `reserved`, always 0) */
	int64_t params[FLY_PARAMS_MAX];/* per-variant order (flyk registry) */
	double median_us;              /* measured median, 0 if not tuned */
	uint64_t generation;           /* shm generation it was read at */
};

/* Errors: 0 ok, negative errno for system failures, or this private range
 * (it cannot collide with errno values, LMDB-style). */
#define FLY_E_BASE (-10000)
#define FLY_E_PROTO (-10001)      /* malformed or unknown message */
#define FLY_E_NOGPU (-10002)      /* GPU index not served by this daemon */
#define FLY_E_SCHEMA (-10003)     /* tuning-db schema newer than binary */
#define FLY_E_BADOP (-10004)      /* unknown op */
#define FLY_E_BADDTYPE (-10005)   /* unknown or unsupported dtype */
#define FLY_E_BADDIM (-10006)     /* a dim <= 0, missing or unexpected */
#define FLY_E_OVERFLOW (-10007)   /* product of dims overflows int64 */
#define FLY_E_KEYLEN (-10008)     /* key longer than FLY_KEY_MAX - 1 */
#define FLY_E_BADKEY (-10009)     /* key string does not parse */
#define FLY_E_BUSY (-10010)       /* tuning queue full */
#define FLY_E_PERM (-10011)       /* peer not allowed this request */
#define FLY_E_NOTFOUND (-10012)   /* no such key / result */
#define FLY_E_TIMEOUT (-10013)    /* deadline passed */
#define FLY_E_DOWN (-10014)       /* daemon not reachable */
#define FLY_E_VERSION (-10015)    /* protocol/layout version mismatch */
#define FLY_E_INVALID (-10016)    /* invalid argument in a request */
#define FLY_E_TOOBIG (-10017)     /* frame or file over its cap */
#define FLY_E_STORAGE (-10018)    /* tuning DB write failed */
#define FLY_E_SHM (-10019)        /* shm table refused (untrusted data) */
#define FLY_E_GPU (-10020)        /* compute device unavailable */
#define FLY_E_MAXCLIENTS (-10021) /* server at its client limit */
#define FLY_E_LAST (-10021)

#ifdef __cplusplus
}
#endif
#endif /* FLY_ABI_H */
