/*
 * cpu_int.h -- internals shared by the CPU backend's files (kernels/cpu/).
 * Not installed; not seen by the daemon.
 *
 * Shape of the backend: backend.c owns struct flyk_device (core count,
 * cache sizes, the cache-cleaning buffer), the fingerprint and the variant
 * table; each op file (rmsnorm.c, topk.c, gemm.c, grouped_gemm.c) exports
 * its variants; case.c owns the benchmark cases.  Element conversions
 * (bf16/fp16 <-> fp32, round-to-nearest-even) live here as inlines.
 *
 * Thread: a device and its cases belong to one thread at a time; launches
 * may spread work over a small persistent pool (flyk_cpu_parallel()).
 */
#ifndef FLYK_CPU_INT_H
#define FLYK_CPU_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "flyk.h"

struct flyk_device {
	int index;            /* the "device" index served (any is fine) */
	int cores;            /* online cores, >= 1 */
	size_t l1d_bytes;     /* 0 when unknown */
	size_t l2_bytes;      /* 0 when unknown */
	size_t l3_bytes;      /* 0 when unknown */
	float *flush;         /* >= 2x the last-level cache, read before reps */
	size_t flush_n;       /* floats in flush; 0 until the first case */
	volatile float sink;  /* keeps the flush read alive */
};

/* Cores of @p dev; with NULL (the daemon's flyk_default() decides without
 * a device) the host's online cores, which is what any device would say. */
int flyk_cpu_cores(const struct flyk_device *dev);

/* ---------------------------------------------------------- conversions */

static inline float flyk_cpu_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline uint32_t flyk_cpu_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float flyk_cpu_bf16_to_f32(uint16_t b)
{
	return flyk_cpu_bits_f32((uint32_t)b << 16);
}

/* Round to nearest even; NaN stays a quiet NaN. */
static inline uint16_t flyk_cpu_f32_to_bf16(float f)
{
	uint32_t x = flyk_cpu_f32_bits(f);

	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x0040u);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

static inline float flyk_cpu_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;

	if (exp == 0) {
		float v = (float)mant * 5.9604644775390625e-8f; /* 2^-24 */
		return sign ? -v : v;
	}
	if (exp == 31)
		return flyk_cpu_bits_f32(sign | 0x7f800000u | (mant << 13));
	return flyk_cpu_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Round to nearest even (F. Giesen's float_to_half_fast3_rtne). */
static inline uint16_t flyk_cpu_f32_to_f16(float f)
{
	uint32_t x = flyk_cpu_f32_bits(f);
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t ax = x & 0x7fffffffu;

	if (ax >= 0x47800000u) /* >= 65536, inf or NaN */
		return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
	if (ax < 0x38800000u) { /* result is a subnormal half or zero */
		float r = flyk_cpu_bits_f32(ax) + 0.5f;
		return (uint16_t)(sign | (flyk_cpu_f32_bits(r) - 0x3f000000u));
	}
	ax += 0xc8000fffu + ((ax >> 13) & 1u);
	return (uint16_t)(sign | (ax >> 13));
}

/* One fp8 e4m3 byte as fp32: e4m3fn (bias 7, 0x7f/0xff NaN, -0 at 0x80)
 * or, with @p fnuz, e4m3fnuz (bias 8, 0x80 the only NaN, no -0).  Exact:
 * every e4m3 value is an fp32 value. */
static inline float flyk_cpu_fp8_to_f32(uint8_t b, int fnuz)
{
	uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
	float v;

	if (fnuz ? b == 0x80u : (b & 0x7fu) == 0x7fu)
		return flyk_cpu_bits_f32(0x7fc00000u);
	/* normal: 2^(e - bias) * (1 + m/8); subnormal: 2^(1 - bias) * m/8 */
	if (e)
		v = flyk_cpu_bits_f32(((e + 127u - (fnuz ? 8u : 7u)) << 23) |
				      (m << 20));
	else
		v = (float)m * (fnuz ? 0x1p-10f : 0x1p-9f);
	return (b & 0x80u) ? -v : v;
}

/* One e2m1 (fp4) code, the low 4 bits of @p nib: sign, 2 exponent bits
 * (bias 1), 1 mantissa bit; values 0, 0.5, 1, 1.5, 2, 3, 4, 6.  Exact. */
static inline float flyk_cpu_e2m1_to_f32(uint8_t nib)
{
	static const float mag[8] = { 0.0f, 0.5f, 1.0f, 1.5f,
				      2.0f, 3.0f, 4.0f, 6.0f };
	float v = mag[nib & 7u];

	return (nib & 8u) ? -v : v;
}

/* One e8m0 scale byte: 2^(e - 127); 0xFF is NaN (OCP MX v1.0 5.4). */
static inline float flyk_cpu_e8m0_to_f32(uint8_t e)
{
	if (e == 0xffu)
		return flyk_cpu_bits_f32(0x7fc00000u);
	if (e == 0)
		return 0x1p-127f; /* the one subnormal fp32 scale */
	return flyk_cpu_bits_f32((uint32_t)e << 23);
}

/* Bytes per element of @p dtype (0 when unsupported here). */
static inline size_t flyk_cpu_dtsize(uint32_t dtype)
{
	switch (dtype) {
	case FLY_DT_FP32:
		return 4;
	case FLY_DT_FP16:
	case FLY_DT_BF16:
		return 2;
	default:
		return 0;
	}
}

static inline float flyk_cpu_load(const void *p, size_t i, uint32_t dtype)
{
	switch (dtype) {
	case FLY_DT_FP32:
		return ((const float *)p)[i];
	case FLY_DT_BF16:
		return flyk_cpu_bf16_to_f32(((const uint16_t *)p)[i]);
	default:
		return flyk_cpu_f16_to_f32(((const uint16_t *)p)[i]);
	}
}

static inline void flyk_cpu_store(void *p, size_t i, uint32_t dtype, float v)
{
	switch (dtype) {
	case FLY_DT_FP32:
		((float *)p)[i] = v;
		break;
	case FLY_DT_BF16:
		((uint16_t *)p)[i] = flyk_cpu_f32_to_bf16(v);
		break;
	default:
		((uint16_t *)p)[i] = flyk_cpu_f32_to_f16(v);
		break;
	}
}

/* Round @p v through @p dtype and back. */
static inline float flyk_cpu_round(float v, uint32_t dtype)
{
	switch (dtype) {
	case FLY_DT_BF16:
		return flyk_cpu_bf16_to_f32(flyk_cpu_f32_to_bf16(v));
	case FLY_DT_FP16:
		return flyk_cpu_f16_to_f32(flyk_cpu_f32_to_f16(v));
	default:
		return v;
	}
}

/* Convert @p n elements of @p dtype at @p src to fp32 at @p dst. */
void flyk_cpu_to_f32(float *dst, const void *src, size_t n, uint32_t dtype);

/* ---------------------------------------------------------- threads */

typedef void (*flyk_cpu_work_fn)(void *ctx, int tid, int nthreads);

/* Run fn(ctx, tid, n) for tid in [0, n): tid 0 on the calling thread, the
 * others on the persistent pool's workers (started on first use, up to
 * 15), and wait for all.  When the pool is busy with another caller's run,
 * or a worker cannot be started, fresh pthreads are used instead, and a
 * share whose thread cannot be created runs on the caller: the work always
 * completes.  Thread: any; reentrant.  @return 0. */
int flyk_cpu_parallel(int n, flyk_cpu_work_fn fn, void *ctx);

/* Split [0, total) into @p n near-equal ranges, aligned to @p grain;
 * range @p tid is [*lo, *hi) (possibly empty). */
void flyk_cpu_split(int64_t total, int n, int tid, int64_t grain,
		    int64_t *lo, int64_t *hi);

/* Common feasibility of a threads parameter: 1 <= t <= cores and enough
 * @p work units (rows) for every thread.  @return 0 or -EINVAL. */
int flyk_cpu_threads_ok(const struct flyk_device *dev, int64_t t,
			int64_t work);

/* ---------------------------------------------------------- op modules */

extern const struct flyk_variant flyk_cpu_rmsnorm_variants[];
extern const size_t flyk_cpu_rmsnorm_nvariants;
extern const struct flyk_variant flyk_cpu_topk_variants[];
extern const size_t flyk_cpu_topk_nvariants;
extern const struct flyk_variant flyk_cpu_gemm_variants[];
extern const size_t flyk_cpu_gemm_nvariants;
extern const struct flyk_variant flyk_cpu_grouped_gemm_variants[];
extern const size_t flyk_cpu_grouped_gemm_nvariants;
extern const struct flyk_variant flyk_cpu_scaled_gemm_variants[];
extern const size_t flyk_cpu_scaled_gemm_nvariants;
/* Element (i, k) of a scaled-GEMM operand of @p dtype, its scale applied
 * (MX formats; per-tensor scales are applied by the caller), as fp32
 * (scaled_gemm.c; the case's setup uses it too). */
float flyk_cpu_scaled_elem(uint32_t dtype, const void *x, const void *scale,
			   int64_t k, int64_t i, int64_t q);
extern const struct flyk_variant flyk_cpu_attention_variants[];
extern const size_t flyk_cpu_attention_nvariants;
extern const struct flyk_variant flyk_cpu_mqa_logits_variants[];
extern const size_t flyk_cpu_mqa_logits_nvariants;
/* Row @p i's mqa_logits window, ks[i] .. ke[i] clamped to [0, skv);
 * empty when *lo >= *hi (mqa_logits.c; the case's check uses it too). */
void flyk_cpu_mqa_window(const struct flyk_mqa_logits_args *a, int64_t skv,
			 int64_t i, int64_t *lo, int64_t *hi);

/* The blocked GEMM core shared by gemm_blocked and ggemm_blocked:
 * C[M,N] = alpha * A[M,K] . B (NT: B [N,K]; NN: B [K,N]) + bias, elements
 * of @p dtype (fp32 or bf16), fp32 accumulation.  @return 0, -ENOMEM. */
struct flyk_cpu_gemm_shape {
	int64_t m;
	int64_t n;
	int64_t k;
	uint32_t dtype;
	uint32_t layout;     /* FLY_LAYOUT_NT or FLY_LAYOUT_NN */
	float alpha;
	const void *bias;    /* [N] of dtype, or NULL */
};
int flyk_cpu_gemm_blocked_run(const struct flyk_cpu_gemm_shape *s,
			      const void *a, const void *b, void *c,
			      int64_t mc, int64_t nc, int64_t kc, int64_t tile,
			      int threads);
/* Whether a blocked-GEMM tile point is sensible for the dims. */
int flyk_cpu_gemm_blocks_ok(int64_t m, int64_t n, int64_t k, int64_t mc,
			    int64_t nc, int64_t kc, int64_t tile);
/* A point (mc, nc, kc, tile, threads) of a blocked GEMM over dims m, n, k
 * of @p p: the blocks sensible and the threads available.
 * @return 0, -EINVAL, or flyk_cpu_threads_ok's error. */
int flyk_cpu_gemm_blocked_point_ok(const struct flyk_device *dev,
				   const struct fly_problem *p,
				   const int64_t *params);

/* The backend's full variant table (CPU variants, then the test-only ones
 * when linked in); built once. */
const struct flyk_variant *flyk_cpu_variants(size_t *n);

/* The first reference variant of @p op in the table, or NULL. */
const struct flyk_variant *flyk_cpu_reference(uint32_t op);

/* One benchmark case (case.c); visible here for the unit tests. */
#define FLYK_CPU_CASE_BUFS 10

struct flyk_case {
	struct flyk_device *dev;
	struct fly_problem p;
	union flyk_args args;
	void *bufs[FLYK_CPU_CASE_BUFS];   /* everything to free */
	int nbufs;
	void *out;               /* main output: y, c, values */
	size_t out_bytes;
	void *out2;              /* indices (topk), residual (rmsnorm) */
	size_t out2_bytes;
	void *ref;               /* reference of out */
	void *ref2;              /* reference of out2 */
	void *pristine;          /* residual input, restored before reps */
	size_t pristine_bytes;
};

/* Case functions (case.c). */
int flyk_cpu_case_new(struct flyk_device *dev, const struct fly_problem *p,
		      uint64_t seed, struct flyk_case **out);
void flyk_cpu_case_free(struct flyk_case *c);
int flyk_cpu_case_poison(struct flyk_case *c);
int flyk_cpu_case_time(struct flyk_case *c, const struct flyk_variant *v,
		       const int64_t *params, double *us);
int flyk_cpu_case_check(struct flyk_case *c, double *max_err);

#endif /* FLYK_CPU_INT_H */
