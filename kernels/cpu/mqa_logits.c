/*
 * mqa_logits.c -- CPU FP8 MQA logits (the DeepSeek lightning indexer):
 *   logits[i, j] = sum_h w[i, h] * relu(q[i, h, :] . kv[j, :]) * kv_scale[j]
 * for ks[i] <= j < ke[i] (clamped to [0, skv)); with FLY_F_CLEAN every
 * other position of row i is -inf, without it those positions are left
 * untouched.  q is e4m3fn (dtype fp8_e4m3) or e4m3fnuz (fp8_e4m3fnuz);
 * kv has q's format unless FLY_F_KV_FNUZ (q fn, kv fnuz).  Dims: sq, skv,
 * h, d.  relu is torch's: a NaN score (a NaN fp8 code in q or kv) makes
 * the position NaN, in every variant of every backend.
 *
 * Variants: mqa_ref (element by element, double dot products: the
 * reference), mqa_blocked (a block of query rows decoded once, KV tiles
 * decoded once per block, tiles outside every row's window skipped, rows
 * spread over threads).  Owns: nothing across calls.  Thread: launches
 * are reentrant.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "cpu_int.h"

#define MQA_DTYPES ((1u << FLY_DT_FP8_E4M3) | (1u << FLY_DT_FP8_E4M3FNUZ))
#define MQA_FLAGS (FLY_F_CLEAN | FLY_F_KV_FNUZ)

static const int64_t rpb_vals[] = { 1, 4, 8 };
static const int64_t tile_vals[] = { 64, 256 };
static const int64_t thr_vals[] = { 1, 2, 4 };

static int mqa_problem_ok(const struct fly_problem *p)
{
	if (p->op != FLY_OP_MQA_LOGITS || !(MQA_DTYPES & (1u << p->dtype)))
		return -EINVAL;
	if (p->flags & ~MQA_FLAGS)
		return -EINVAL;
	/* mixed means q fn, kv fnuz: meaningless when q is fnuz already */
	if ((p->flags & FLY_F_KV_FNUZ) && p->dtype == FLY_DT_FP8_E4M3FNUZ)
		return -EINVAL;
	for (int i = 0; i < 4; i++)
		if (p->dims[i] < 1)
			return -EINVAL;
	return 0;
}

static int q_fnuz(const struct fly_problem *p)
{
	return p->dtype == FLY_DT_FP8_E4M3FNUZ;
}

static int kv_fnuz(const struct fly_problem *p)
{
	return q_fnuz(p) || (p->flags & FLY_F_KV_FNUZ);
}

void flyk_cpu_mqa_window(const struct flyk_mqa_logits_args *a, int64_t skv,
			 int64_t i, int64_t *lo, int64_t *hi)
{
	int64_t s = a->ks[i], e = a->ke[i];

	*lo = s < 0 ? 0 : (s > skv ? skv : s);
	*hi = e > skv ? skv : (e < *lo ? *lo : e);
}

static int64_t ld_of(const struct flyk_mqa_logits_args *a, int64_t skv)
{
	return a->ld ? a->ld : skv;
}

/* -inf over row i's positions outside [lo, hi) (FLY_F_CLEAN). */
static void clean_row(float *row, int64_t skv, int64_t lo, int64_t hi)
{
	for (int64_t j = 0; j < lo; j++)
		row[j] = -INFINITY;
	for (int64_t j = hi; j < skv; j++)
		row[j] = -INFINITY;
}

static int ref_feasible(const struct flyk_device *dev,
			const struct fly_problem *p, const int64_t *params)
{
	return mqa_problem_ok(p);
}

static int ref_launch(const struct flyk_device *dev,
		      const struct fly_problem *p, const int64_t *params,
		      const union flyk_args *args, void *stream)
{
	const struct flyk_mqa_logits_args *a = &args->mqa_logits;
	int64_t sq = p->dims[0], skv = p->dims[1], h = p->dims[2];
	int64_t d = p->dims[3], ld = ld_of(a, skv);
	const uint8_t *q = a->q, *kv = a->kv;
	int qf = q_fnuz(p), kf = kv_fnuz(p);

	for (int64_t i = 0; i < sq; i++) {
		float *row = a->logits + i * ld;
		int64_t lo, hi;

		flyk_cpu_mqa_window(a, skv, i, &lo, &hi);
		if (p->flags & FLY_F_CLEAN)
			clean_row(row, skv, lo, hi);
		for (int64_t j = lo; j < hi; j++) {
			double acc = 0.0;

			for (int64_t hh = 0; hh < h; hh++) {
				const uint8_t *qr = q + (i * h + hh) * d;
				double dot = 0.0;

				for (int64_t k = 0; k < d; k++)
					dot += (double)flyk_cpu_fp8_to_f32(
						       qr[k], qf) *
					       flyk_cpu_fp8_to_f32(
						       kv[j * d + k], kf);
				if (!(dot <= 0.0)) /* relu; NaN stays NaN */
					acc += dot * a->weights[i * h + hh];
			}
			row[j] = (float)(acc * a->kv_scale[j]);
		}
	}
	return 0;
}

struct mqa_ctx {
	const struct fly_problem *p;
	const struct flyk_mqa_logits_args *a;
	int64_t rpb;     /* query rows per block */
	int64_t tile;    /* kv rows per tile */
	int failed;
};

/* One block of query rows [r0, r1): q decoded once (qf: rows x h x d),
 * each KV tile any row of the block needs decoded once (kf). */
static void block_run(const struct mqa_ctx *c, int64_t r0, int64_t r1,
		      float *qf, float *kf)
{
	const struct fly_problem *p = c->p;
	const struct flyk_mqa_logits_args *a = c->a;
	int64_t skv = p->dims[1], h = p->dims[2], d = p->dims[3];
	int64_t ld = ld_of(a, skv), blo = skv, bhi = 0;
	const uint8_t *q = a->q, *kv = a->kv;
	int qfn = q_fnuz(p), kfn = kv_fnuz(p);

	for (int64_t i = r0; i < r1; i++) {
		int64_t lo, hi;

		flyk_cpu_mqa_window(a, skv, i, &lo, &hi);
		if (p->flags & FLY_F_CLEAN)
			clean_row(a->logits + i * ld, skv, lo, hi);
		if (lo < hi) {
			blo = lo < blo ? lo : blo;
			bhi = hi > bhi ? hi : bhi;
		}
	}
	if (blo >= bhi)
		return;
	for (int64_t x = 0; x < (r1 - r0) * h * d; x++)
		qf[x] = flyk_cpu_fp8_to_f32(q[r0 * h * d + x], qfn);
	for (int64_t t0 = blo; t0 < bhi; t0 += c->tile) {
		int64_t t1 = t0 + c->tile < bhi ? t0 + c->tile : bhi;

		for (int64_t x = 0; x < (t1 - t0) * d; x++)
			kf[x] = flyk_cpu_fp8_to_f32(kv[t0 * d + x], kfn);
		for (int64_t i = r0; i < r1; i++) {
			const float *qi = qf + (i - r0) * h * d;
			const float *w = a->weights + i * h;
			float *row = a->logits + i * ld;
			int64_t lo, hi;

			flyk_cpu_mqa_window(a, skv, i, &lo, &hi);
			lo = lo > t0 ? lo : t0;
			hi = hi < t1 ? hi : t1;
			for (int64_t j = lo; j < hi; j++) {
				const float *kr = kf + (j - t0) * d;
				float acc = 0.0f;

				for (int64_t hh = 0; hh < h; hh++) {
					const float *qr = qi + hh * d;
					float s[4] = { 0, 0, 0, 0 }, dot;
					int64_t k = 0;

					for (; k + 4 <= d; k += 4)
						for (int l = 0; l < 4; l++)
							s[l] += qr[k + l] *
								kr[k + l];
					for (; k < d; k++)
						s[0] += qr[k] * kr[k];
					dot = (s[0] + s[1]) + (s[2] + s[3]);
					if (!(dot <= 0.0f)) /* NaN stays */
						acc += dot * w[hh];
				}
				row[j] = acc * a->kv_scale[j];
			}
		}
	}
}

static void blocked_work(void *arg, int tid, int nthreads)
{
	struct mqa_ctx *c = arg;
	int64_t sq = c->p->dims[0], h = c->p->dims[2], d = c->p->dims[3];
	int64_t nblk = (sq + c->rpb - 1) / c->rpb;
	float *qf = malloc((size_t)(c->rpb * h * d) * sizeof(float));
	float *kf = malloc((size_t)(c->tile * d) * sizeof(float));

	if (!qf || !kf) {
		__atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
		goto out;
	}
	/* interleaved blocks: causal rows grow, so contiguous ranges would
	 * give the last thread most of the work */
	for (int64_t b = tid; b < nblk; b += nthreads) {
		int64_t r0 = b * c->rpb;
		int64_t r1 = r0 + c->rpb < sq ? r0 + c->rpb : sq;

		block_run(c, r0, r1, qf, kf);
	}
out:
	free(qf);
	free(kf);
}

static int blocked_feasible(const struct flyk_device *dev,
			    const struct fly_problem *p, const int64_t *params)
{
	int64_t sq = p->dims[0], skv = p->dims[1], rpb = params[0];
	int64_t tile = params[1];

	if (mqa_problem_ok(p) < 0 || rpb < 1 || tile < 1)
		return -EINVAL;
	/* a 4x smaller block or tile would already cover everything */
	if ((rpb > 1 && rpb / 4 >= sq) || (tile > 64 && tile / 4 >= skv))
		return -EINVAL;
	return flyk_cpu_threads_ok(dev, params[2], (sq + rpb - 1) / rpb);
}

static int blocked_launch(const struct flyk_device *dev,
			  const struct fly_problem *p, const int64_t *params,
			  const union flyk_args *args, void *stream)
{
	struct mqa_ctx c = { p, &args->mqa_logits, params[0], params[1], 0 };

	flyk_cpu_parallel((int)params[2], blocked_work, &c);
	return c.failed ? -ENOMEM : 0;
}

const struct flyk_variant flyk_cpu_mqa_logits_variants[] = {
	{
		.name = "mqa_ref",
		.op = FLY_OP_MQA_LOGITS,
		.dtypes = MQA_DTYPES,
		.flags = MQA_FLAGS,
		.is_reference = 1,
		.nparams = 0,
		.feasible = ref_feasible,
		.launch = ref_launch,
	},
	{
		.name = "mqa_blocked",
		.op = FLY_OP_MQA_LOGITS,
		.dtypes = MQA_DTYPES,
		.flags = MQA_FLAGS,
		.nparams = 3,
		.params = {
			{ "rows_per_block", 3, rpb_vals },
			{ "kv_tile", 2, tile_vals },
			{ "threads", 3, thr_vals },
		},
		.feasible = blocked_feasible,
		.launch = blocked_launch,
	},
};
const size_t flyk_cpu_mqa_logits_nvariants =
	sizeof(flyk_cpu_mqa_logits_variants) /
	sizeof(flyk_cpu_mqa_logits_variants[0]);
