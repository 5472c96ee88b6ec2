/*
 * gpu_int.h -- internals shared by the GPU backend's files (kernels/gpu's
 * core and op folders, and kernels/vendor/NAME.c).  Not installed; not
 * seen by the daemon.
 *
 * Shape of the backend: the core (this header, backend.hip, launch_api.hip
 * at kernels/gpu's top) owns struct flyk_device, the benchmark case
 * (allocation, poisoning, cache cleaning by *reading* a buffer of >= 4x
 * the largest cache, L2 or AMD's Infinity Cache, sized by kernels/devid.c;
 * event timing) and assembles flyk_gpu_backend() from the op modules
 * below.  Each op module (norm/rmsnorm.hip, topk/topk.hip, gemm/gemm.hip,
 * gemm/grouped_gemm.hip, mqa/mqa_logits.hip, attn/attention.hip) exports one
 * `struct flyk_gpu_op` and knows only its op: its variants, how to make
 * inputs, how to compute the reference, how to check.  The ops build on
 * prim/ (the device primitives) and the core only, never on each other.
 *
 * Thread: a device and its cases belong to one thread at a time.
 */
#ifndef FLYK_GPU_INT_H
#define FLYK_GPU_INT_H

#include <stddef.h>
#include <stdint.h>

#include "flyk.h"
#include "devid.h"

#ifdef __cplusplus
extern "C" {
#endif

struct flyk_device {
	int index;
	int sms;                 /* multiprocessors / compute units */
	int warp;                /* 32 (NVIDIA) or 64 (AMD wave) */
	int cc_major, cc_minor;  /* NVIDIA compute capability (0 on AMD) */
	char arch[32];           /* "sm_90", "gfx942" */
	char name[96];
	int clock_mhz, mem_clock_mhz;
	int driver_version, runtime_version;
	size_t l2_bytes;
	size_t llc_bytes;        /* AMD Infinity Cache (MALL); 0 on NVIDIA */
	struct flyk_smi smi;     /* AMD: ROCm SMI's answer (kernels/devid.c) */
	int has_smi;             /* 1: smi was filled by ROCm SMI */
	size_t smem_per_block_optin; /* max dynamic shared memory per block */
	void *stream;            /* the backend's benchmark stream */
	void *ev_start, *ev_stop;
	void *flush_buf;         /* >= 4x the largest cache (flyk_flush_bytes),
				    read (not written) before reps */
	size_t flush_bytes;
	float *flush_sink;       /* 1 float written by the flush kernel */
	void *vendor;            /* vendor BLAS handles (kernels/vendor) */
};

/* A variant's param entry's count and value list from the array @p a:
 * {"name", FLYK_NV(vals)}.  A count written by hand beside the list
 * drifts from it (one left at 2 for 3 values hid a value from tuning). */
#define FLYK_NV(a) (uint32_t)(sizeof(a) / sizeof((a)[0])), (a)

#define FLYK_CASE_BUFS 8

/* One candidate whose timed call has run (flyk_case.timed_seen). */
struct flyk_timed_seen {
	const struct flyk_variant *v;
	int64_t params[FLY_PARAMS_MAX];
};

/* One benchmark case.  The op module's setup() allocates device buffers
 * through flyk_gpu_case_alloc() (freed by case_free), fills the inputs with
 * random non-zero data, fills `args` with device pointers, marks which
 * buffers are outputs (poisoned with 0xFF bytes: NaN for fp32/fp16/bf16,
 * -1 for int64 indices) and computes the reference into host memory
 * (`ref`, owned by the op module's state, freed by its fini()). */
struct flyk_case {
	struct flyk_device *dev;
	struct fly_problem p;
	const struct flyk_gpu_op *op;
	union flyk_args args;
	void *buf[FLYK_CASE_BUFS];
	size_t bytes[FLYK_CASE_BUFS];
	int is_output[FLYK_CASE_BUFS];
	int nbuf;
	void *state;             /* op module's own (reference output etc.) */
	/* The operands a timed rep launches where setup() sets
	 * has_timed_args: the op's common call when the checked one asks
	 * for more (attention: O alone, as an engine's inference call, where
	 * the check also reads the LSE).  The launch after case_poison (the
	 * one case_check reads) always takes `args`. */
	union flyk_args timed_args;
	int has_timed_args;
	int checking; /* set by case_poison: the next launch is checked */
	/* The candidates (variant and params, kept whole: no hash, so two
	 * can never be taken for one) whose timed call has run: each one's
	 * first runs once untimed (backend.hip) */
	struct flyk_timed_seen *timed_seen;
	int ntimed_seen, cap_timed_seen;
};

struct flyk_gpu_op {
	uint32_t op;                       /* enum fly_op */
	const struct flyk_variant *variants;
	size_t nvariants;
	/* Allocate and fill the case's buffers and args, compute the
	 * reference.  @return 0, -ENOMEM, -EOPNOTSUPP. */
	int (*setup)(struct flyk_case *c, uint64_t seed);
	/* Copy outputs back and compare with the reference (per-dtype
	 * tolerance).  @return 0, -EDOM (wrong or NaN left). */
	int (*check)(struct flyk_case *c, double *max_err);
	void (*fini)(struct flyk_case *c);
	/* Optional (NULL: none): restore in/out operands (a residual) to
	 * their pristine contents before each timed rep; called by case_time
	 * before the L2 clean, outside the timed region.  @return 0 or an
	 * error. */
	int (*prepare)(struct flyk_case *c);
};

/* Op modules (each defined in its own file; a module that is not built
 * yet is simply absent from the list in backend.hip). */
extern const struct flyk_gpu_op flyk_gpu_rmsnorm_op;
extern const struct flyk_gpu_op flyk_gpu_topk_op;
extern const struct flyk_gpu_op flyk_gpu_gemm_op;
extern const struct flyk_gpu_op flyk_gpu_grouped_gemm_op;
extern const struct flyk_gpu_op flyk_gpu_mqa_logits_op;
extern const struct flyk_gpu_op flyk_gpu_scaled_gemm_op;
extern const struct flyk_gpu_op flyk_gpu_attention_op;
/* Test-only variants (kernels/testing/gpu_faulty.hip): linked into the
 * test build of the library alone; an op of variants only (setup NULL),
 * whose cases are its op's module's. */
extern const struct flyk_gpu_op flyk_gpu_testing_op;

/* The vendor BLAS library and version for the fingerprint
 * (kernels/vendor; absent where no vendor module is linked). */
int flyk_vendor_blas(char *buf, size_t cap);
/* cuDNN's version for the fingerprint, and its first use done at open
 * (kernels/vendor/cudnn_attn.c; absent where it is not linked). */
int flyk_cudnn_attn_version(char *buf, size_t cap);
int flyk_cudnn_attn_warm(void);

/* Allocate a device buffer owned by the case.  @return index or -ENOMEM. */
int flyk_gpu_case_alloc(struct flyk_case *c, size_t bytes, int is_output,
			void **out);
/* Fill a device buffer with uniform random values in [lo, hi) of @p dtype
 * (never all zeros), deterministic in @p seed. */
int flyk_gpu_fill_random(struct flyk_device *dev, void *buf, size_t n,
			 uint32_t dtype, float lo, float hi, uint64_t seed);
/* Compare @p n elements of @p dtype (fp32, fp16, bf16) at @p got with
 * @p ref, both on the device, through the two device words @p d_cmp
 * (prim/compare.h's kernel; only 8 bytes come back): *max_err = the max
 * abs error (+inf for a NaN); -EDOM when an element is NaN or off by more
 * than rel * max(|ref|, floor) + slack.  @return 0, -EDOM, -EOPNOTSUPP or
 * a launch or copy error (kernels/gpu/compare.hip). */
int flyk_gpu_compare(struct flyk_device *dev, uint32_t dtype,
		     const void *got, const void *ref, size_t n, float rel,
		     float floor_, float slack, unsigned *d_cmp,
		     double *max_err);
/* The indices a tuning case checks the values of, when checking all @p n
 * (query rows, row blocks) would cost more than the tuning: all of them
 * up to @p cap; else the first and last @p edge and cap - 2 edge spread
 * between, each offset by i % @p jitter so that they fall at every
 * position of the kernels' blocks.  Ascending into @p out (cap entries);
 * returns how many (kernels/gpu/compare.hip). */
int64_t flyk_check_sample(int64_t n, int64_t cap, int64_t edge,
			  int64_t jitter, int32_t *out);
/* Copy device -> host (synchronous on the benchmark stream). */
int flyk_gpu_download(struct flyk_device *dev, void *host, const void *dbuf,
		      size_t bytes);
int flyk_gpu_upload(struct flyk_device *dev, void *dbuf, const void *host,
		    size_t bytes);
/* Host conversions for references and checks. */
float flyk_half_to_float(uint16_t h);
float flyk_bf16_to_float(uint16_t b);
uint16_t flyk_float_to_half(float f);
uint16_t flyk_float_to_bf16(float f);

#ifdef __cplusplus
}
#endif
#endif /* FLYK_GPU_INT_H */
