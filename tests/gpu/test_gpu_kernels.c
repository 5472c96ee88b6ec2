/*
 * test_gpu_kernels.c -- every GPU variant at every feasible point of its
 * space against the op's reference, on odd shapes, with outputs poisoned
 * (NaN / -1) before each run; plus flyk_default() on each problem.
 *
 * Runs on a machine with a GPU (make test-gpu); links
 * libflykernels_cuda.so and the harness it shares with test_gpu_gemm.c
 * (gpu_harness.c).  Prints one line per failure and a summary "N passed,
 * N failed"; exits non-zero on any failure or when no GPU is found.
 * Contracts only: no timing is asserted.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flyk.h"
#include "gpu_harness.h"
#include "gpu_rt.h"

static const uint32_t dts[] = {FLY_DT_FP32, FLY_DT_FP16, FLY_DT_BF16};

static void test_rmsnorm(const struct flyk_backend *b,
			 struct flyk_device *dev)
{
	static const int64_t shapes[][2] = {
		{1, 1},	   {3, 7},     {37, 100},  {5, 4097},  {3, 8193},
		{2, 16385}, {2, 32769}, {3, 65536}, {2, 114688}, {9, 2050},
		{300, 128},
	};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int d = 0; d < 3; d++)
			for (int res = 0; res < 2; res++) {
				struct fly_problem p;
				memset(&p, 0, sizeof(p));
				p.op = FLY_OP_RMSNORM;
				p.dtype = dts[d];
				p.flags = res ? FLY_F_RESIDUAL : 0;
				p.dims[0] = shapes[s][0];
				p.dims[1] = shapes[s][1];
				gt_problem(b, dev, &p, 100 + s * 7 + d);
			}
}

static void test_topk(const struct flyk_backend *b, struct flyk_device *dev)
{
	static const int64_t shapes[][3] = {
		{1, 1, 1},	{3, 5, 2},	 {17, 129, 8},	{33, 1000, 16},
		{5, 4097, 32},	{2, 8193, 3},	 {3, 30001, 50}, {2, 131073, 100},
		{64, 256, 8},	{4, 2048, 128},	 {7, 64, 64},
		/* few long rows (topk_wqc's and topk_mb's space): a
		 * vocabulary, k = 1 and 128, slices of an odd length, 1M */
		{1, 128256, 50}, {2, 65536, 1},	 {1, 20000, 128},
		{3, 40001, 33},	 {1, 1048577, 128}, {8, 131072, 128},
		/* the serving set's 64 vocabulary rows (topk_mb over many
		 * rows) and topk_radix's long rows at k = 2048 */
		{64, 151936, 50}, {40, 65537, 2048},
	};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int d = 0; d < 3; d++)
			for (int det = 0; det < 2; det++) {
				struct fly_problem p;
				memset(&p, 0, sizeof(p));
				p.op = FLY_OP_TOPK;
				p.dtype = dts[d];
				p.flags = det ? FLY_F_DETERMINISTIC : 0;
				p.dims[0] = shapes[s][0];
				p.dims[1] = shapes[s][1];
				p.dims[2] = shapes[s][2];
				gt_problem(b, dev, &p, 200 + s * 7 + d);
			}
}

/* An mqa_logits key: @p dt, @p fl, dims sq, skv, h, d. */
static void mqa_key(struct fly_problem *p, uint32_t dt, uint32_t fl,
		    const int64_t dims[4])
{
	memset(p, 0, sizeof(*p));
	p->op = FLY_OP_MQA_LOGITS;
	p->dtype = dt;
	p->flags = fl;
	memcpy(p->dims, dims, 4 * sizeof(dims[0]));
}

/* mqa_logits: the wgmma variant's shapes (h 64, d 128: one query row,
 * misaligned sizes, sq > skv with empty rows, few rows over a long
 * context) and small h/d for the portable one; all four format/flag
 * combinations. */
static void test_mqa(const struct flyk_backend *b, struct flyk_device *dev)
{
	static const int64_t shapes[][4] = {
		{1, 64, 64, 128},    {61, 1024, 64, 128}, {5, 3000, 64, 128},
		{130, 257, 64, 128}, {300, 4100, 64, 128}, {2, 70000, 64, 128},
		{64, 32, 64, 128},   {7, 100, 8, 32},     {3, 50, 4, 16},
	};
	static const uint32_t fl[][2] = {
		{FLY_DT_FP8_E4M3, FLY_F_CLEAN},
		{FLY_DT_FP8_E4M3, 0},
		{FLY_DT_FP8_E4M3FNUZ, FLY_F_CLEAN},
		{FLY_DT_FP8_E4M3, FLY_F_CLEAN | FLY_F_KV_FNUZ},
	};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (size_t f = 0; f < sizeof(fl) / sizeof(fl[0]); f++) {
			struct fly_problem p;
			mqa_key(&p, fl[f][0], fl[f][1], shapes[s]);
			gt_problem(b, dev, &p, 300 + s * 7 + f);
		}
}

/* A NaN fp8 code in q (row 2, head 9) and in kv (row 130): every
 * variant at every feasible point gives NaN exactly where the reference
 * does -- all of row 2 and column 130 inside the windows (torch's relu
 * keeps NaN) -- the reference's values elsewhere, and -inf outside the
 * windows.  mqa_wgmma's linear-part form (rows 2, pipe 0, tma 1) puts
 * q . w through e4m3 parts and the |x| through the epilogue: a NaN must
 * reach its row alone, not the other query row of its block. */
static void test_mqa_nan(const struct flyk_backend *b, struct flyk_device *dev)
{
	enum { SQ = 5, SKV = 300, H = 64, D = 128 };
	static const int64_t dims[4] = {SQ, SKV, H, D};
	struct fly_problem p;
	mqa_key(&p, FLY_DT_FP8_E4M3, FLY_F_CLEAN, dims);
	static uint8_t q[SQ * H * D], kv[SKV * D];
	static float sc[SKV], w[SQ * H], ref[SQ * SKV], got[SQ * SKV];
	int32_t ks[SQ], ke[SQ];
	uint64_t x = 12345;
	for (size_t i = 0; i < sizeof(q) + sizeof(kv); i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint8_t v = (uint8_t)(x >> 56);
		if ((v & 0x7f) == 0x7f) /* no NaN but the two below */
			v ^= 1;
		if (i < sizeof(q))
			q[i] = v;
		else
			kv[i - sizeof(q)] = v;
	}
	for (int j = 0; j < SKV; j++)
		sc[j] = 0.5f + (float)(j % 7) / 8;
	for (int i = 0; i < SQ * H; i++)
		w[i] = (float)((i * 37) % 19 - 9) / 16;
	for (int i = 0; i < SQ; i++) {
		ks[i] = i == 4 ? 100 : 0;
		ke[i] = SKV - SQ + i + 1;
	}
	q[(2 * H + 9) * D + 17] = 0x7f;
	kv[130 * D + 5] = 0xff;
	void *dq = NULL, *dkv = NULL, *dsc = NULL, *dw = NULL, *dks = NULL,
	     *dke = NULL, *dout = NULL;
	int ok = cudaMalloc(&dq, sizeof(q)) == cudaSuccess &&
		 cudaMalloc(&dkv, sizeof(kv)) == cudaSuccess &&
		 cudaMalloc(&dsc, sizeof(sc)) == cudaSuccess &&
		 cudaMalloc(&dw, sizeof(w)) == cudaSuccess &&
		 cudaMalloc(&dks, sizeof(ks)) == cudaSuccess &&
		 cudaMalloc(&dke, sizeof(ke)) == cudaSuccess &&
		 cudaMalloc(&dout, sizeof(got)) == cudaSuccess &&
		 cudaMemcpy(dq, q, sizeof(q), cudaMemcpyHostToDevice) ==
			 cudaSuccess &&
		 cudaMemcpy(dkv, kv, sizeof(kv), cudaMemcpyHostToDevice) ==
			 cudaSuccess &&
		 cudaMemcpy(dsc, sc, sizeof(sc), cudaMemcpyHostToDevice) ==
			 cudaSuccess &&
		 cudaMemcpy(dw, w, sizeof(w), cudaMemcpyHostToDevice) ==
			 cudaSuccess &&
		 cudaMemcpy(dks, ks, sizeof(ks), cudaMemcpyHostToDevice) ==
			 cudaSuccess &&
		 cudaMemcpy(dke, ke, sizeof(ke), cudaMemcpyHostToDevice) ==
			 cudaSuccess;
	gt_result(ok, "mqa_nan buffers", "", 0);
	union flyk_args a;
	memset(&a, 0, sizeof(a));
	a.mqa_logits.q = dq;
	a.mqa_logits.kv = dkv;
	a.mqa_logits.kv_scale = (const float *)dsc;
	a.mqa_logits.weights = (const float *)dw;
	a.mqa_logits.ks = (const int32_t *)dks;
	a.mqa_logits.ke = (const int32_t *)dke;
	a.mqa_logits.logits = (float *)dout;
	a.mqa_logits.ld = SKV;
	int have_ref = 0;
	for (size_t vi = 0; ok && vi < b->nvariants; vi++) {
		const struct flyk_variant *v = &b->variants[vi];
		if (v->op != FLY_OP_MQA_LOGITS || !flyk_variant_supports(v, &p))
			continue;
		if (gt_only && strcmp(v->name, "mqa_ref") &&
		    !strstr(v->name, gt_only))
			continue;
		uint32_t pos[FLY_PARAMS_MAX] = {0};
		do {
			struct fly_decision d;
			memset(&d, 0, sizeof(d));
			d.status = FLY_STATUS_TUNED;
			snprintf(d.variant, sizeof(d.variant), "%s", v->name);
			d.nparams = v->nparams;
			gt_point(v, pos, d.params);
			if (v->feasible && v->feasible(dev, &p, d.params))
				continue;
			char key[256];
			gt_key(&p, v->name, d.params, v->nparams, key,
			       sizeof(key));
			cudaMemset(dout, 0x55, sizeof(got));
			int rc = flyk_launch(b, dev, &p, &d, &a, NULL);
			if (rc == 0 && cudaDeviceSynchronize() != cudaSuccess)
				rc = -5;
			if (rc == 0 && cudaMemcpy(got, dout, sizeof(got),
						  cudaMemcpyDeviceToHost) !=
					   cudaSuccess)
				rc = -5;
			gt_result(rc == 0, "mqa_nan launch", key, rc);
			if (rc)
				continue;
			if (!have_ref) { /* mqa_ref comes first in the table */
				gt_result(!strcmp(v->name, "mqa_ref"),
					  "mqa_nan reference first", key, 0);
				memcpy(ref, got, sizeof(ref));
				have_ref = 1;
			}
			float big = 0.f;
			for (int i = 0; i < SQ * SKV; i++)
				if (isfinite(ref[i]) && fabsf(ref[i]) > big)
					big = fabsf(ref[i]);
			int bad = 0, nans = 0;
			for (int i = 0; i < SQ; i++)
				for (int j = 0; j < SKV; j++) {
					float r = ref[i * SKV + j];
					float g = got[i * SKV + j];
					int in = j >= ks[i] && j < ke[i];
					int want_nan = in && (i == 2 || j == 130);
					nans += isnan(r);
					if (!in)
						bad += !(isinf(g) && g < 0);
					else if (want_nan)
						bad += !isnan(g);
					else
						bad += !(fabsf(g - r) <=
							 2e-3f * big);
				}
			/* the reference itself: row 2 and column 130 */
			gt_result(nans == (ke[2] - ks[2]) + SQ - 1,
				  "mqa_nan reference's NaNs", key, nans);
			gt_result(bad == 0, "mqa_nan", key, bad);
		} while (gt_next(v, pos));
	}
	cudaFree(dq);
	cudaFree(dkv);
	cudaFree(dsc);
	cudaFree(dw);
	cudaFree(dks);
	cudaFree(dke);
	cudaFree(dout);
}

/* scaled_gemm: every format, with and without bias, on M = 1, N and K
 * off the tiles, K % 32 for MX (fp8 also K = 33, which only the
 * reference takes), ragged and benchmark-sized shapes (decode ones:
 * sg_skinny's and sg_stream's, mrows 32 and 128). */
static void test_scaled(const struct flyk_backend *b, struct flyk_device *dev)
{
	static const int64_t shapes[][3] = {
		{1, 64, 128},	 {33, 200, 96},	   {130, 257, 256},
		{3, 5, 32},	 {256, 512, 4096}, {4096, 256, 1024},
		{1000, 1000, 544}, {32, 4096, 4096}, {96, 300, 1024},
	};
	static const uint32_t sdts[] = {FLY_DT_FP8_E4M3, FLY_DT_FP8_E4M3FNUZ,
					FLY_DT_MXFP8, FLY_DT_MXFP4};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (size_t d = 0; d < 4; d++)
			for (uint32_t f = 0; f <= FLY_F_BIAS; f += FLY_F_BIAS) {
				struct fly_problem p;
				memset(&p, 0, sizeof(p));
				p.op = FLY_OP_SCALED_GEMM;
				p.dtype = sdts[d];
				p.layout = FLY_LAYOUT_NT;
				p.flags = f;
				memcpy(p.dims, shapes[s], sizeof(shapes[s]));
				gt_problem(b, dev, &p, 400 + s * 7 + d + f);
			}
	struct fly_problem p;
	memset(&p, 0, sizeof(p));
	p.op = FLY_OP_SCALED_GEMM;
	p.dtype = FLY_DT_FP8_E4M3;
	p.layout = FLY_LAYOUT_NT;
	p.dims[0] = 7;
	p.dims[1] = 9;
	p.dims[2] = 33;
	gt_problem(b, dev, &p, 499);
}

/* attention (issue 16): odd lengths (1, 17, 1000), decode (sq = 1), GQA
 * 1/4/8, sq != skv both ways (causal bottom-right; sq > skv leaves rows
 * that see no key: O 0, lse -inf), head_dim 64/128/256, bf16 and fp16;
 * then the 16 primary shapes of
 * bench/cases.json attention_fwd_bf16 at batch 1 (the split variant's
 * short-query shapes among the odd ones).  The LSE is checked too. */
static void test_attention(const struct flyk_backend *b,
			   struct flyk_device *dev)
{
	static const int64_t shapes[][6] = {
		/* b, sq, skv, hq, hkv, d */
		{1, 1, 1, 1, 1, 64},	     {2, 17, 17, 4, 1, 128},
		{1, 1000, 1000, 8, 8, 64},   {2, 1, 1000, 8, 2, 128},
		{1, 17, 1000, 8, 1, 256},    {1, 1000, 17, 4, 4, 128},
		{3, 1, 4096, 32, 8, 128},    {1, 64, 8192, 16, 2, 128},
		{1, 130, 130, 2, 2, 256},    {1, 200, 333, 6, 3, 64},
	};
	static const int64_t primary[][5] = {
		/* seq, heads, kv_heads, head_dim, causal */
		{8192, 8, 8, 128, 1},	{8192, 16, 16, 128, 1},
		{8192, 64, 64, 128, 1}, {8192, 64, 8, 128, 1},
		{512, 16, 16, 128, 0},	{1024, 16, 16, 128, 0},
		{2048, 16, 16, 128, 0}, {4096, 16, 16, 128, 0},
		{8192, 16, 16, 128, 0}, {16384, 16, 16, 128, 0},
		{8192, 48, 48, 128, 1}, {2048, 48, 48, 128, 1},
		{8192, 32, 8, 128, 1},	{8192, 64, 8, 128, 1},
		{32768, 8, 8, 64, 0},	{2048, 16, 16, 256, 0},
	};
	struct fly_problem p;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (uint32_t f = 0; f <= FLY_F_CAUSAL; f += FLY_F_CAUSAL)
			for (int d = 0; d < 2; d++) {
				memset(&p, 0, sizeof(p));
				p.op = FLY_OP_ATTENTION;
				p.dtype = d ? FLY_DT_FP16 : FLY_DT_BF16;
				p.flags = f;
				memcpy(p.dims, shapes[s], sizeof(shapes[s]));
				gt_problem(b, dev, &p, 600 + s * 7 + f + d);
			}
	for (size_t s = 0; s < sizeof(primary) / sizeof(primary[0]); s++) {
		memset(&p, 0, sizeof(p));
		p.op = FLY_OP_ATTENTION;
		p.dtype = FLY_DT_BF16;
		p.flags = primary[s][4] ? FLY_F_CAUSAL : 0;
		p.dims[0] = 1;
		p.dims[1] = p.dims[2] = primary[s][0];
		p.dims[3] = primary[s][1];
		p.dims[4] = primary[s][2];
		p.dims[5] = primary[s][3];
		gt_problem(b, dev, &p, 700 + s);
	}
}

/* GT_OPS (e.g. "mqa,attention") runs only the ops it names. */
static int want(const char *op)
{
	const char *w = getenv("GT_OPS");
	if (w == NULL || *w == '\0')
		return 1;
	size_t n = strlen(op);
	for (const char *s = w; (s = strstr(s, op)) != NULL; s += n)
		if ((s == w || s[-1] == ',') && (s[n] == ',' || s[n] == '\0'))
			return 1;
	return 0;
}

int main(void)
{
	const struct flyk_backend *b;
	struct flyk_device *dev;
	char fp[512];
	if (gt_open(&b, &dev))
		return 1;
	int rc = b->fingerprint(dev, fp, sizeof(fp));
	gt_result(rc > 0 && strstr(fp, "arch=") &&
		      strstr(fp, "lib=" FLYK_VERSION) && strstr(fp, " blas="),
		  "fingerprint", fp, rc);
	printf("# %s backend, %zu variants: %s\n", b->name, b->nvariants, fp);
	if (want("rmsnorm"))
		test_rmsnorm(b, dev);
	if (want("topk"))
		test_topk(b, dev);
	if (want("mqa")) {
		test_mqa(b, dev);
		test_mqa_nan(b, dev);
	}
	if (want("scaled"))
		test_scaled(b, dev);
	if (want("attention"))
		test_attention(b, dev);
	b->close(dev);
	return gt_finish();
}
