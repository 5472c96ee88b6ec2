/*
 * test_cudnn_attn.c -- cuDNN's fused attention candidate
 * (kernels/vendor/cudnn_attn.c) on a GPU: for each problem below, every
 * configuration flyk_cudnn_attn_enumerate() proposes runs on NaN-prefilled
 * outputs and is checked against an fp32 CPU reference (O and, where asked
 * for, the LSE), then timed (events around 20 launches).  A point that
 * does not replay (a made-up engine index) must fail with an error.
 *
 * Owns: its buffers.  Thread: single-threaded.
 * Exit status 1 on any wrong result, failed launch, or supported problem
 * with no candidate; 0 otherwise.  FLYK_TEST_CASE=TEXT: only the problems
 * whose name contains TEXT.  cuDNN's own failures print with
 * cudnnGetErrorString and cudnnGetLastErrorString's text.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cudnn_attn.h"

#define MAXC 64

struct tcase {
	const char *name;
	int64_t b, sq, skv, hq, hkv, d;
	int causal, lse;
	int bhsd; /* [b, h, s, d] storage instead of [b, s, h, d] */
	int none; /* expected: no candidate (not offered) */
};

static const struct tcase cases[] = {
	{ "mha d64", 2, 128, 128, 4, 4, 64, 0, 0, 0, 0 },
	{ "mha d64 lse", 2, 128, 128, 4, 4, 64, 0, 1, 0, 0 },
	{ "causal gqa4 d128 lse", 1, 256, 256, 8, 2, 128, 1, 1, 0, 0 },
	{ "causal bottom-right sq<skv gqa4 d128 lse", 2, 64, 320, 8, 2, 128, 1,
	  1, 0, 0 },
	{ "causal bottom-right 17x1000 gqa4 d64 lse", 1, 17, 1000, 8, 2, 64, 1,
	  1, 0, 0 },
	{ "decode sq=1 causal gqa4 d128 lse", 4, 1, 1000, 8, 2, 128, 1, 1, 0,
	  0 },
	{ "decode sq=1 d64", 2, 1, 333, 4, 4, 64, 0, 0, 0, 0 },
	{ "bhsd strides causal mqa d128 lse", 2, 200, 200, 4, 1, 128, 1, 1, 1,
	  0 },
	{ "causal gqa8 1024 d128", 2, 1024, 1024, 16, 2, 128, 1, 0, 0, 0 },
	{ "mha 4096 d128", 1, 4096, 4096, 16, 16, 128, 0, 0, 0, 0 },
	{ "causal sq>skv (not offered)", 1, 128, 64, 4, 4, 64, 1, 0, 0, 1 },
};

static int failures;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float urand(void) /* [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static uint16_t f2bf(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Element strides (batch, seq, head) of a [b, s, h, d] or [b, h, s, d]
 * tensor; @return its element count. */
static int64_t layout(const struct tcase *c, int64_t s, int64_t h,
		      int64_t *st)
{
	if (c->bhsd) {
		st[0] = h * s * c->d, st[1] = c->d, st[2] = s * c->d;
	} else {
		st[0] = s * h * c->d, st[1] = h * c->d, st[2] = c->d;
	}
	return c->b * s * h * c->d;
}

static float at(const float *x, const int64_t *st, int64_t b, int64_t s,
		int64_t h, int64_t i)
{
	return x[b * st[0] + s * st[1] + h * st[2] + i];
}

struct host {
	float *q, *k, *v; /* the bf16 inputs, widened */
	uint16_t *qb, *kb, *vb;
	int64_t nq, nk;
};

/* The reference of row (bb, h, i) into @p o[d] and @p lse. */
static void ref_row(const struct tcase *c, const struct flyk_cudnn_attn_problem *p,
		    const struct host *hs, float scale, int64_t bb, int64_t h,
		    int64_t i, float *o, float *lse, float *s)
{
	int64_t kh = h / (c->hq / c->hkv);
	int64_t last = c->causal ? i + c->skv - c->sq : c->skv - 1;
	float m = -INFINITY;
	double sum = 0;
	for (int64_t j = 0; j <= last; j++) {
		double acc = 0;
		for (int64_t x = 0; x < c->d; x++)
			acc += (double)at(hs->q, p->q_stride, bb, i, h, x) *
			       at(hs->k, p->k_stride, bb, j, kh, x);
		s[j] = (float)(acc * scale);
		m = fmaxf(m, s[j]);
	}
	for (int64_t x = 0; x < c->d; x++)
		o[x] = 0;
	for (int64_t j = 0; j <= last; j++) {
		float e = expf(s[j] - m);
		sum += e;
		for (int64_t x = 0; x < c->d; x++)
			o[x] += e * at(hs->v, p->v_stride, bb, j, kh, x);
	}
	for (int64_t x = 0; x < c->d; x++)
		o[x] = (float)(o[x] / sum);
	*lse = m + (float)log(sum);
}

/* Compare the device's O and LSE with the reference on every row (or a
 * sample of rows on big problems).  @return 0 when within tolerance. */
static int check(const struct tcase *c, const struct flyk_cudnn_attn_problem *p,
		 const struct host *hs, float scale, const uint16_t *o,
		 const float *lse, double *eo, double *el)
{
	float *ro = malloc(sizeof(float) * c->d), *s = malloc(sizeof(float) * c->skv);
	double work = (double)c->b * c->hq * c->sq * c->skv * c->d;
	int64_t step = work > 4e8 ? (int64_t)(work / 4e8) + 1 : 1, bad = 0;
	*eo = *el = 0;
	for (int64_t bb = 0; bb < c->b; bb++)
		for (int64_t h = 0; h < c->hq; h++)
			for (int64_t i = 0; i < c->sq; i++) {
				float rl;
				if (i % step && i != c->sq - 1)
					continue;
				ref_row(c, p, hs, scale, bb, h, i, ro, &rl, s);
				for (int64_t x = 0; x < c->d; x++) {
					float g = bf2f(o[bb * p->o_stride[0] +
							 i * p->o_stride[1] +
							 h * p->o_stride[2] + x]);
					double e = fabs((double)g - ro[x]);
					if (!(e <= 1e-2 + 1e-2 * fabs(ro[x])))
						bad++;
					if (!(e <= *eo))
						*eo = e;
				}
				if (!c->lse)
					continue;
				float gl = lse[(bb * c->hq + h) * c->sq + i];
				double e = fabs((double)gl - rl);
				if (!(e <= 2e-3 * (1 + fabs(rl))))
					bad++;
				if (!(e <= *el))
					*el = e;
			}
	free(ro);
	free(s);
	return bad ? -1 : 0;
}

static double flops(const struct tcase *c)
{
	double kept = 0;
	for (int64_t i = 0; i < c->sq; i++) {
		int64_t k = c->causal ? i + c->skv - c->sq + 1 : c->skv;
		kept += k < 0 ? 0 : k > c->skv ? c->skv : k;
	}
	return 4.0 * c->b * c->hq * c->d * kept;
}

struct dev {
	void *q, *k, *v, *o, *ws;
	float *lse;
	size_t ws_size;
};

/* Run point @p pt once (NaN-prefilled), check it, time it. */
static void run_point(const struct tcase *c,
		      const struct flyk_cudnn_attn_problem *p,
		      const struct host *hs, struct dev *dv, const int64_t *pt,
		      int idx)
{
	size_t ws = 0, no = (size_t)hs->nq;
	uint16_t *o = malloc(no * 2);
	float *lse = malloc(sizeof(float) * c->b * c->hq * c->sq);
	float scale = 1.0f / sqrtf((float)c->d), ms = 0;
	double eo = 0, el = 0;
	printf("  [%d] %s engine %lld (heuristic %s rank %lld) knobs", idx,
	       (pt[1] >> 8 & 0xff) ? "SDPA_FWD op" : "composite graph",
	       (long long)pt[0], (pt[1] >> 16 & 0xff) ? "fallback" : "A",
	       (long long)(pt[1] >> 24));
	for (int i = 0; i < (pt[1] & 0xff); i++)
		printf(" %lld=%d", (long long)((uint64_t)pt[2 + i] >> 32),
		       (int32_t)pt[2 + i]);
	int rc = flyk_cudnn_attn_workspace(p, pt, &ws);
	if (!rc && ws > dv->ws_size) {
		cudaFree(dv->ws);
		dv->ws = NULL;
		dv->ws_size = cudaMalloc(&dv->ws, ws) == cudaSuccess ? ws : 0;
	}
	printf(" ws %zu\n", ws);
	cudaMemset(dv->o, 0xff, no * 2); /* bf16 NaN */
	if (c->lse)
		cudaMemset(dv->lse, 0xff, sizeof(float) * c->b * c->hq * c->sq);
	struct flyk_cudnn_attn_args a = { dv->q, dv->k, dv->v, dv->o,
					  c->lse ? dv->lse : NULL, scale,
					  dv->ws, dv->ws_size };
	if (!rc)
		rc = flyk_cudnn_attn_run(p, pt, &a, NULL);
	if (!rc && cudaDeviceSynchronize() != cudaSuccess)
		rc = -EIO;
	if (rc) {
		printf("      FAIL run rc %d: %s (%s)\n", rc,
		       flyk_cudnn_attn_last_error(),
		       cudaGetErrorString(cudaGetLastError()));
		failures++;
		goto out;
	}
	cudaMemcpy(o, dv->o, no * 2, cudaMemcpyDeviceToHost);
	if (c->lse)
		cudaMemcpy(lse, dv->lse, sizeof(float) * c->b * c->hq * c->sq,
			   cudaMemcpyDeviceToHost);
	int bad = check(c, p, hs, scale, o, lse, &eo, &el);
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	cudaEventRecord(e0, NULL);
	for (int i = 0; i < 20; i++)
		flyk_cudnn_attn_run(p, pt, &a, NULL);
	cudaEventRecord(e1, NULL);
	cudaEventSynchronize(e1);
	cudaEventElapsedTime(&ms, e0, e1);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	ms /= 20;
	printf("      %s  max|err| O %.2e LSE %.2e  %.4f ms  %.1f TFLOP/s\n",
	       bad ? "FAIL wrong result" : "pass", eo, el, ms,
	       flops(c) / (ms * 1e-3) / 1e12);
	failures += bad != 0;
out:
	free(o);
	free(lse);
}

static void upload(void **d, uint16_t *hb, float *hf, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		hb[i] = f2bf(urand());
		hf[i] = bf2f(hb[i]);
	}
	cudaMalloc(d, (size_t)n * 2);
	cudaMemcpy(*d, hb, (size_t)n * 2, cudaMemcpyHostToDevice);
}

/* Each of a with-LSE problem's points on the graph without the LSE (what
 * a launch that asks for none runs, flyk_cudnn_attn_replays()): those
 * that build there run checked; at least one must (the heuristics' first
 * engines take both graphs). */
static void without_lse(const struct tcase *c,
			const struct flyk_cudnn_attn_problem *p,
			const struct host *hs, struct dev *dv,
			int64_t (*pts)[FLYK_CUDNN_ATTN_NPARAMS], int n)
{
	struct tcase c0 = *c;
	struct flyk_cudnn_attn_problem p0 = *p;
	int built = 0;
	c0.lse = 0;
	p0.lse = 0;
	for (int i = 0; i < n; i++) {
		size_t ws = 0;
		if (flyk_cudnn_attn_replays(&p0, pts[i], &ws))
			continue;
		built++;
		run_point(&c0, &p0, hs, dv, pts[i], i);
	}
	printf("  without the LSE: %d of %d points build as themselves: %s\n",
	       built, n, built ? "pass" : "FAIL none");
	failures += !built;
}

static void run_case(const struct tcase *c, const int64_t *extra)
{
	struct flyk_cudnn_attn_problem p;
	struct host hs;
	struct dev dv = { 0 };
	int64_t pts[MAXC][FLYK_CUDNN_ATTN_NPARAMS];
	memset(&p, 0, sizeof(p));
	p.b = c->b, p.sq = c->sq, p.skv = c->skv, p.hq = c->hq;
	p.hkv = c->hkv, p.d = c->d, p.causal = c->causal, p.lse = c->lse;
	hs.nq = layout(c, c->sq, c->hq, p.q_stride);
	layout(c, c->sq, c->hq, p.o_stride);
	hs.nk = layout(c, c->skv, c->hkv, p.k_stride);
	layout(c, c->skv, c->hkv, p.v_stride);
	printf("%s: b %lld sq %lld skv %lld hq %lld hkv %lld d %lld%s%s\n",
	       c->name, (long long)c->b, (long long)c->sq, (long long)c->skv,
	       (long long)c->hq, (long long)c->hkv, (long long)c->d,
	       c->causal ? " causal" : "", c->lse ? " lse" : "");
	int n = flyk_cudnn_attn_enumerate(&p, pts, MAXC);
	const char *err = flyk_cudnn_attn_last_error();
	printf("  enumerate: %d%s%s\n", n, err[0] ? "; cuDNN says: " : "", err);
	if (c->none || n <= 0) {
		int ok = c->none ? n == 0 : 0;
		printf("  %s\n", ok ? "pass (none, as expected)"
				    : "FAIL no candidate");
		failures += !ok;
		return;
	}
	hs.q = malloc(sizeof(float) * hs.nq);
	hs.k = malloc(sizeof(float) * hs.nk);
	hs.v = malloc(sizeof(float) * hs.nk);
	hs.qb = malloc(2 * hs.nq);
	hs.kb = malloc(2 * hs.nk);
	hs.vb = malloc(2 * hs.nk);
	upload(&dv.q, hs.qb, hs.q, hs.nq);
	upload(&dv.k, hs.kb, hs.k, hs.nk);
	upload(&dv.v, hs.vb, hs.v, hs.nk);
	cudaMalloc(&dv.o, (size_t)hs.nq * 2);
	cudaMalloc((void **)&dv.lse, sizeof(float) * c->b * c->hq * c->sq);
	for (int i = 0; i < n; i++)
		run_point(c, &p, &hs, &dv, pts[i], i);
	if (c->lse)
		without_lse(c, &p, &hs, &dv, pts, n);
	if (extra) {
		/* replays() is exact: no stand-in, nothing counted, and the
		 * second ask is answered from its memory */
		size_t ws = 1;
		unsigned long s0 = flyk_cudnn_attn_substituted();
		int r1 = flyk_cudnn_attn_replays(&p, extra, &ws);
		int r2 = flyk_cudnn_attn_replays(&p, extra, &ws);
		int ok = r1 == -EINVAL && r2 == -EINVAL && ws == 1 &&
			 flyk_cudnn_attn_substituted() == s0;
		printf("  replays: %d, again %d: %s\n", r1, r2,
		       ok ? "pass" : "FAIL expected -EINVAL twice, no "
				     "substitution");
		failures += !ok;
	}
	if (extra) {
		unsigned long s0 = flyk_cudnn_attn_substituted();
		int f0 = failures;
		run_point(c, &p, &hs, &dv, extra, n);
		int ok = failures == f0 && flyk_cudnn_attn_substituted() > s0 &&
			 strstr(flyk_cudnn_attn_last_error(), "does not replay");
		printf("  substituted %lu: %s\n  %s\n",
		       flyk_cudnn_attn_substituted() - s0,
		       flyk_cudnn_attn_last_error(),
		       ok ? "pass" : "FAIL expected a checked run of the "
				     "heuristics' plan, counted and told");
		failures += !ok && failures == f0;
	}
	cudaFree(dv.q);
	cudaFree(dv.k);
	cudaFree(dv.v);
	cudaFree(dv.o);
	cudaFree(dv.lse);
	cudaFree(dv.ws);
	free(hs.q), free(hs.k), free(hs.v);
	free(hs.qb), free(hs.kb), free(hs.vb);
}

/* A point no engine of this cuDNN has (one tuned under another version:
 * the daemon's cuDNN is not PyTorch's) runs the heuristics' first plan of
 * the same graph: a checked result, counted, and the reason told. */
static void bogus_point(void)
{
	int64_t pt[FLYK_CUDNN_ATTN_NPARAMS] = { 99999, 0 };
	printf("engine 99999 (no such engine):\n");
	run_case(&cases[0], pt);
}

int main(void)
{
	const char *only = getenv("FLYK_TEST_CASE");
	char ver[64];
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 ||
	    cudaSetDevice(0) != cudaSuccess) {
		printf("no GPU: test_cudnn_attn needs one\n");
		return 1;
	}
	flyk_cudnn_attn_version(ver, sizeof(ver));
	printf("%s\n", ver);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!only || strstr(cases[i].name, only))
			run_case(&cases[i], NULL);
	bogus_point();
	printf("%s: %d failure(s)\n", failures ? "FAIL" : "OK", failures);
	return failures ? 1 : 0;
}
