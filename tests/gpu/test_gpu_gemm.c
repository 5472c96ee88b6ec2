/*
 * test_gpu_gemm.c -- the GPU gemm and grouped_gemm variants against their
 * references: every variant at every feasible point (cuBLASLt: every
 * heuristic point) on odd shapes, NT and NN, with bias and scale, outputs
 * poisoned (NaN) before each run; grouped GEMM with even, uneven and empty
 * experts through the exported launchers (flyk_gpu_gemm,
 * flyk_gpu_grouped_gemm, and flyk_gpu_grouped_gemm_ends with torch's int32
 * cumulative ends) on the test's own buffers, checked against a host
 * double-precision reference; the launchers' error contract.
 *
 * Runs on a machine with a GPU (make test-gpu); links libflykernels_cuda.so,
 * cudart and the harness it shares with test_gpu_kernels.c
 * (gpu_harness.c: every feasible point of every variant of a case).
 * Prints one line per failure and "N passed, N failed"; exits non-zero on
 * any failure or when no GPU is found.  Contracts only: no timing is
 * asserted, and nothing depends on which candidate is fastest.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_rt.h"

#include "flyk.h"
#include "gemm_ties.h"
#include "gpu_harness.h"

/* Exported by libflykernels_cuda.so (kernels/gpu/gemm/gemm_api.hip). */
int flyk_gpu_gemm(const struct fly_problem *p, const struct fly_decision *d,
		  const void *a, const void *b, void *c, const void *bias,
		  float alpha, void *workspace, size_t ws_size, void *stream);
int flyk_gpu_grouped_gemm(const struct fly_problem *p,
			  const struct fly_decision *d, const void *a,
			  const void *b, void *c, const int64_t *offsets,
			  void *stream);
int flyk_gpu_grouped_gemm_ends(const struct fly_problem *p,
			       const struct fly_decision *d, const void *a,
			       const void *b, void *c, const int32_t *ends,
			       void *stream);
int flyk_gpu_gemm_vendor_candidates(const struct fly_problem *p,
				    struct fly_decision *out, int max);

/* A bf16 NT problem of @p op over the @p nd dims @p dims. */
static struct fly_problem bf16_problem(uint32_t op, const int64_t *dims,
				       size_t nd)
{
	struct fly_problem p;
	memset(&p, 0, sizeof(p));
	p.op = op;
	p.dtype = FLY_DT_BF16;
	p.layout = FLY_LAYOUT_NT;
	memcpy(p.dims, dims, nd * sizeof(dims[0]));
	return p;
}

static void test_gemm_cases(const struct flyk_backend *b,
			    struct flyk_device *dev)
{
	static const int64_t shapes[][3] = {
	    {1, 8, 8},	      {3, 17, 40},     {37, 100, 72},
	    {5, 33, 13},      {8, 4096, 256},  {129, 257, 520},
	    {64, 192, 128},   {300, 64, 1024}, {1000, 136, 2056},
	    {16, 2048, 4096}, {2, 24, 8},      {255, 255, 264},
	    {300, 256, 192}, /* 3 tile rows of 128: an odd count */
	    {24, 301, 1000}, /* gemm_stream: mrows 32, N odd, splits */
	    {77, 130, 264},  /* gemm_stream: mrows 128 */
	};
	static const uint32_t flags[] = {0, FLY_F_BIAS, FLY_F_SCALE,
					 FLY_F_BIAS | FLY_F_SCALE};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (int l = 0; l < 2; l++)
			for (int f = 0; f < 4; f++) {
				struct fly_problem p =
				    bf16_problem(FLY_OP_GEMM, shapes[s], 3);
				p.layout = l ? FLY_LAYOUT_NN : FLY_LAYOUT_NT;
				p.flags = flags[f];
				/* every flag set on odd shapes, all layouts
				 * on all shapes */
				if (f && s % 3 != 1 && f != 3)
					continue;
				gt_problem(b, dev, &p, 300 + s * 7 + f);
			}
	/* Primary shapes: the tuner's candidate count (>= 30 asked), at
	 * large M and at decode M. */
	static const int64_t prim[][3] = {{4096, 256, 4096}, {16, 4096, 4096}};
	for (size_t s = 0; s < 2; s++) {
		struct fly_problem p = bf16_problem(FLY_OP_GEMM, prim[s], 3);
		int n = gt_problem(b, dev, &p, 999 + s);
		char key[64];
		snprintf(key, sizeof(key), "M%lld N%lld K%lld: %d candidates",
			 (long long)prim[s][0], (long long)prim[s][1],
			 (long long)prim[s][2], n);
		printf("# %s\n", key);
		if (!gt_only)
			gt_result(n >= 30, "candidates>=30", key, n);
	}
}

static void test_grouped_cases(const struct flyk_backend *b,
			       struct flyk_device *dev)
{
	static const int64_t shapes[][4] = {
	    {1, 1, 8, 8},      {3, 100, 72, 64},   {8, 1000, 256, 128},
	    {4, 37, 130, 24},  {5, 3, 64, 16},	   {16, 4096, 128, 256},
	    {2, 700, 520, 40}, {8, 16, 2048, 512},
	};
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		struct fly_problem p =
		    bf16_problem(FLY_OP_GROUPED_GEMM, shapes[s], 4);
		gt_problem(b, dev, &p, 500 + s);
	}
}

/* ------------------------------------------------------------ host ref */

static float bf2f(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint16_t f2bf(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static uint64_t rng = 88172645463325252ull;

static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}

static uint16_t *host_rand(size_t n)
{
	uint16_t *h = malloc(n * 2 + 2);
	for (size_t i = 0; h && i < n; i++)
		h[i] = f2bf(frand());
	return h;
}

/* Same rule as the backend's check: |got - ref| <= |ref|/64 + 2e-3*sqrt(k)
 * and no NaN. */
static int compare(const uint16_t *got, const double *ref, size_t n, int64_t k,
		   double *max_err)
{
	double slack = 2e-3 * sqrt((double)k);
	int bad = 0;
	*max_err = 0;
	for (size_t i = 0; i < n; i++) {
		double g = bf2f(got[i]), e = fabs(g - ref[i]);
		if (e != e)
			return -EDOM;
		if (e > *max_err)
			*max_err = e;
		if (e > fabs(ref[i]) / 64 + slack)
			bad = 1;
	}
	return bad ? -EDOM : 0;
}

static void *dev_copy(const void *h, size_t bytes)
{
	void *d = NULL;
	if (cudaMalloc(&d, bytes ? bytes : 16) != cudaSuccess)
		return NULL;
	if (h && bytes && /* h NULL: an output, left to the launch */
	    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
		cudaFree(d);
		return NULL;
	}
	return d;
}

/* ------------------------------------------------------------ launchers */

struct ggcase {
	int g;
	int64_t n, k;
	int64_t rows[10];
};

/* The decisions to try on a key: the empty one (the default) and every
 * feasible point of every variant of its op (the enumerated ones: every
 * point the vendor's heuristic lists, up to 64).  @return the count. */
static int key_decisions(struct flyk_device *dev, const struct fly_problem *p,
			 struct fly_decision *out, int max)
{
	const struct flyk_backend *b = flyk_gpu_backend();
	int n = 0;
	memset(&out[n++], 0, sizeof(out[0]));
	for (size_t v = 0; v < b->nvariants; v++) {
		const struct flyk_variant *var = &b->variants[v];
		if (!flyk_variant_supports(var, p))
			continue;
		if (var->enumerate) {
			int64_t pts[64][FLY_PARAMS_MAX];
			int ne = var->enumerate(dev, p, pts, 64);
			for (int i = 0; i < ne && n < max; i++) {
				struct fly_decision *d = &out[n++];
				memset(d, 0, sizeof(*d));
				snprintf(d->variant, sizeof(d->variant), "%s",
					 var->name);
				d->nparams = var->nparams;
				d->status = FLY_STATUS_TUNED;
				memcpy(d->params, pts[i], sizeof(pts[i]));
			}
			continue;
		}
		uint32_t pos[FLY_PARAMS_MAX] = {0};
		do {
			int64_t pt[FLY_PARAMS_MAX] = {0};
			gt_point(var, pos, pt);
			if (n >= max || var->feasible(dev, p, pt) != 0)
				continue;
			struct fly_decision *d = &out[n++];
			memset(d, 0, sizeof(*d));
			snprintf(d->variant, sizeof(d->variant), "%s",
				 var->name);
			d->nparams = var->nparams;
			d->status = FLY_STATUS_TUNED;
			memcpy(d->params, pt, sizeof(pt));
		} while (gt_next(var, pos));
	}
	return n;
}

/* One grouped key with explicit expert sizes, every decision, through
 * flyk_gpu_grouped_gemm (int64 offsets) and flyk_gpu_grouped_gemm_ends
 * (int32 cumulative ends) on the test's own buffers. */
static void grouped_api_one(struct flyk_device *dev, const struct ggcase *gc)
{
	int64_t off[11] = {0};
	int32_t ends[10] = {0};
	for (int i = 0; i < gc->g; i++) {
		off[i + 1] = off[i] + gc->rows[i];
		ends[i] = (int32_t)off[i + 1];
	}
	int64_t m = off[gc->g], n = gc->n, k = gc->k;
	size_t mn = (size_t)m * n;
	uint16_t *ha = host_rand((size_t)m * k),
		 *hb = host_rand((size_t)gc->g * n * k);
	uint16_t *hc = malloc(mn * 2);
	double *ref = calloc(mn, sizeof(double));
	struct fly_decision *ds = calloc(512, sizeof(*ds));
	void *da = dev_copy(ha, (size_t)m * k * 2),
	     *db = dev_copy(hb, (size_t)gc->g * n * k * 2),
	     *dc = dev_copy(NULL, mn * 2), *doff = dev_copy(off, sizeof(off)),
	     *dends = dev_copy(ends, sizeof(ends));
	char key[320];
	snprintf(key, sizeof(key), "g=%d m=%lld n=%lld k=%lld", gc->g,
		 (long long)m, (long long)n, (long long)k);
	if (!ha || !hb || !hc || !ref || !ds || !da || !db || !dc || !doff ||
	    !dends) {
		gt_result(0, "grouped-alloc", key, -ENOMEM);
		goto out;
	}
	for (int e = 0; e < gc->g; e++)
		for (int64_t i = off[e]; i < off[e + 1]; i++)
			for (int64_t j = 0; j < n; j++) {
				double acc = 0;
				const uint16_t *br =
				    hb + ((size_t)e * n + j) * k;
				for (int64_t q = 0; q < k; q++)
					acc += (double)bf2f(ha[i * k + q]) *
					       bf2f(br[q]);
				ref[i * n + j] = acc;
			}
	const int64_t gdims[4] = {gc->g, m, n, k};
	struct fly_problem p = bf16_problem(FLY_OP_GROUPED_GEMM, gdims, 4);
	int nd = key_decisions(dev, &p, ds, 512);
	for (int i = 0; i < 2 * nd; i++) {
		const struct fly_decision *di = &ds[i % nd];
		int via_ends = i >= nd;
		char dkey[400];
		gt_key(&p, i % nd ? di->variant : "default", di->params,
		       di->nparams, dkey, sizeof(dkey));
		cudaMemset(dc, 0xff, mn * 2);
		int rc = via_ends ? flyk_gpu_grouped_gemm_ends(
					&p, di, da, db, dc, dends, NULL)
				  : flyk_gpu_grouped_gemm(&p, di, da, db, dc,
							  doff, NULL);
		if (!rc && cudaDeviceSynchronize() != cudaSuccess)
			rc = -EIO;
		if (!rc && cudaMemcpy(hc, dc, mn * 2, cudaMemcpyDeviceToHost) !=
			       cudaSuccess)
			rc = -EIO;
		double err = 0;
		if (!rc)
			rc = compare(hc, ref, mn, k, &err);
		gt_result(rc == 0, via_ends ? "grouped-api-ends" : "grouped-api",
			  dkey, rc);
	}
	gt_result(nd > 2, "grouped-decisions", key, nd);
out:
	cudaFree(da);
	cudaFree(db);
	cudaFree(dc);
	cudaFree(doff);
	cudaFree(dends);
	free(ha);
	free(hb);
	free(hc);
	free(ref);
	free(ds);
}

/* Even, uneven, empty experts (first, middle, last, all but one), a single
 * row, very uneven sizes; offsets[G] = M always (dims must be >= 1). */
static void test_grouped_api(struct flyk_device *dev)
{
	static const struct ggcase cases[] = {
	    {4, 128, 64, {64, 64, 64, 64}},
	    {8, 256, 128, {0, 300, 0, 17, 129, 1, 0, 0}},
	    {5, 72, 40, {1, 0, 0, 0, 0}},
	    {6, 136, 256, {333, 1, 2, 3, 64, 200}},
	    {10, 520, 72, {1, 3, 7, 15, 31, 63, 127, 255, 0, 511}},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		grouped_api_one(dev, &cases[i]);
}

/* flyk_gpu_gemm: default, each cuBLASLt heuristic point replayed from its
 * params, and the error contract. */
static void test_gemm_api(void)
{
	const int64_t m = 96, n = 200, k = 264;
	uint16_t *ha = host_rand((size_t)m * k), *hb = host_rand((size_t)n * k);
	uint16_t *hbias = host_rand((size_t)n), *hc = malloc((size_t)m * n * 2);
	double *ref = malloc(sizeof(double) * m * n);
	size_t ws_size = (size_t)32 << 20;
	void *da = dev_copy(ha, (size_t)m * k * 2),
	     *db = dev_copy(hb, (size_t)n * k * 2),
	     *dbias = dev_copy(hbias, (size_t)n * 2),
	     *dc = dev_copy(NULL, (size_t)m * n * 2),
	     *ws = dev_copy(NULL, ws_size);
	if (!ha || !hb || !hbias || !hc || !ref || !da || !db || !dbias ||
	    !dc || !ws) {
		gt_result(0, "gemm-api-alloc", "", -ENOMEM);
		goto out;
	}
	const float alpha = 0.5f;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double acc = 0;
			for (int64_t q = 0; q < k; q++)
				acc += (double)bf2f(ha[i * k + q]) *
				       bf2f(hb[j * k + q]);
			ref[i * n + j] = acc * alpha + bf2f(hbias[j]);
		}
	const int64_t dims[3] = {m, n, k};
	struct fly_problem p = bf16_problem(FLY_OP_GEMM, dims, 3);
	p.flags = FLY_F_BIAS | FLY_F_SCALE;
	struct fly_decision cand[17];
	memset(cand, 0, sizeof(cand));
	int nc = flyk_gpu_gemm_vendor_candidates(&p, cand + 1, 16);
	gt_result(nc > 0, "vendor-candidates", "m96 n200 k264 bias scale", nc);
	if (nc < 0)
		nc = 0;
	for (int i = 0; i <= nc; i++) { /* [0]: the empty decision */
		char key[200];
		double err = 0;
		gt_key(&p, i ? cand[i].variant : "default", cand[i].params,
		     i ? cand[i].nparams : 0, key, sizeof(key));
		cudaMemset(dc, 0xff, (size_t)m * n * 2);
		int rc = flyk_gpu_gemm(&p, &cand[i], da, db, dc, dbias, alpha,
				       ws, ws_size, NULL);
		if (!rc && cudaDeviceSynchronize() != cudaSuccess)
			rc = -EIO;
		if (!rc)
			cudaMemcpy(hc, dc, (size_t)m * n * 2,
				   cudaMemcpyDeviceToHost);
		if (!rc)
			rc = compare(hc, ref, (size_t)m * n, k, &err);
		gt_result(rc == 0, "gemm-api", key, rc);
	}
	/* distinct points: no two replay alike (the heuristic index, the
	 * low 16 bits of params[7], aside) */
	int dup = 0;
	for (int i = 1; i <= nc; i++)
		for (int j = 1; j < i; j++) {
			int same = (cand[i].params[7] >> 16) ==
				   (cand[j].params[7] >> 16);
			for (int q = 0; same && q < 7; q++)
				same = cand[i].params[q] == cand[j].params[q];
			dup += same;
		}
	gt_result(dup == 0, "vendor-distinct", "", dup);
	/* errors: unknown variant, out of space, misaligned, no workspace */
	struct fly_decision bad;
	memset(&bad, 0, sizeof(bad));
	bad.status = FLY_STATUS_TUNED;
	snprintf(bad.variant, sizeof(bad.variant), "no_such_gemm");
	int rc = flyk_gpu_gemm(&p, &bad, da, db, dc, dbias, alpha, ws, ws_size,
			       NULL);
	gt_result(rc == -ENOENT, "api-enoent", "", rc);
	snprintf(bad.variant, sizeof(bad.variant), "gemm_mma");
	bad.nparams = 7;
	int64_t oob[7] = {24, 64, 32, 4, 3, 1, 1}; /* tile_m 24: not built */
	memcpy(bad.params, oob, sizeof(oob));
	rc = flyk_gpu_gemm(&p, &bad, da, db, dc, dbias, alpha, ws, ws_size,
			   NULL);
	gt_result(rc == -EINVAL, "api-out-of-space", "", rc);
	int64_t ok[7] = {64, 64, 32, 4, 2, 1, 1};
	memcpy(bad.params, ok, sizeof(ok));
	rc = flyk_gpu_gemm(&p, &bad, (const char *)da + 2, db, dc, dbias, alpha,
			   ws, ws_size, NULL);
	gt_result(rc == -EINVAL, "api-misaligned", "", rc);
	struct fly_problem p2 = p;
	p2.dims[0] = 8; /* under-filled: split_k allowed */
	int64_t sp[7] = {16, 64, 64, 4, 4, 2, 1}; /* 2 x 2 k-tiles */
	memcpy(bad.params, sp, sizeof(sp));
	rc = flyk_gpu_gemm(&p2, &bad, da, db, dc, dbias, alpha, NULL, 0, NULL);
	gt_result(rc == -EINVAL, "api-split-needs-workspace", "", rc);
	rc = flyk_gpu_gemm(&p2, &bad, da, db, dc, dbias, alpha, ws, ws_size,
			   NULL);
	gt_result(rc == 0, "api-split-with-workspace", "", rc);
out:
	cudaFree(da);
	cudaFree(db);
	cudaFree(dbias);
	cudaFree(dc);
	cudaFree(ws);
	free(ha);
	free(hb);
	free(hbias);
	free(hc);
	free(ref);
}

/* bf16 outputs rounded to nearest even, bit for bit, by every decision
 * of a bf16 NT GEMM key (every point of every variant, the vendor's
 * algorithms and the default) on problems whose fp32 sums are exact and
 * fall on and beside ties (gemm_ties.h): the tolerance compare of the
 * other tests would not see a wrong rounding mode. */
static void test_gemm_rounding(struct flyk_device *dev)
{
	static const int64_t shapes[][3] = {{260, 200, 72}, {256, 256, 256}};
	enum { MAXD = 2048 };
	struct fly_decision *ds = calloc(MAXD, sizeof(*ds));
	size_t ws_size = (size_t)32 << 20;
	void *ws = dev_copy(NULL, ws_size);
	for (size_t s = 0; s < 2; s++) {
		const int64_t m = shapes[s][0], n = shapes[s][1],
			      k = shapes[s][2];
		uint16_t *ha = malloc((size_t)(m * k) * 2),
			 *hb = malloc((size_t)(n * k) * 2),
			 *hc = malloc((size_t)(m * n) * 2);
		void *da = NULL, *db = NULL, *dc = dev_copy(NULL, m * n * 2);
		if (ha && hb) {
			gemm_ties_fill(ha, hb, m, n, k);
			da = dev_copy(ha, (size_t)(m * k) * 2);
			db = dev_copy(hb, (size_t)(n * k) * 2);
		}
		struct fly_problem p = bf16_problem(FLY_OP_GEMM, shapes[s], 3);
		int nd = ds ? key_decisions(dev, &p, ds, MAXD) : 0;
		if (!hc || !da || !db || !dc || !ws || nd < 2) {
			gt_result(0, "rounding-setup", "", -ENOMEM);
			nd = 0;
		}
		for (int i = 0; i < nd; i++) {
			char key[200];
			int64_t fi = 0, fj = 0, bad = 0;
			gt_key(&p, i ? ds[i].variant : "default", ds[i].params,
			     ds[i].nparams, key, sizeof(key));
			cudaMemset(dc, 0xff, (size_t)(m * n) * 2);
			int rc = flyk_gpu_gemm(&p, &ds[i], da, db, dc, NULL,
					       1.0f, ws, ws_size, NULL);
			if (!rc && cudaDeviceSynchronize() != cudaSuccess)
				rc = -EIO;
			if (!rc)
				cudaMemcpy(hc, dc, (size_t)(m * n) * 2,
					   cudaMemcpyDeviceToHost);
			if (!rc)
				bad = gemm_ties_bad(hc, m, n, &fi, &fj);
			if (bad) {
				printf("# %s: %lld outputs off, first (%lld, "
				       "%lld) %04x, want %04x\n", key,
				       (long long)bad, (long long)fi,
				       (long long)fj, hc[fi * n + fj],
				       gemm_ties_want(fi, fj));
				rc = -EDOM;
			}
			gt_result(rc == 0, "rounding", key, rc);
		}
		cudaFree(da);
		cudaFree(db);
		cudaFree(dc);
		free(ha);
		free(hb);
		free(hc);
	}
	cudaFree(ws);
	free(ds);
}

int main(void)
{
	const struct flyk_backend *b;
	struct flyk_device *dev;
	if (gt_open(&b, &dev))
		return 1;
	printf("# %s backend, %zu variants\n", b->name, b->nvariants);
	gt_result(flyk_variant_find(b, FLY_OP_GEMM, "cublaslt") != NULL &&
		      flyk_variant_find(b, FLY_OP_GEMM, "cublas_default") &&
		      flyk_variant_find(b, FLY_OP_GEMM, "gemm_mma") &&
		      flyk_variant_find(b, FLY_OP_GROUPED_GEMM, "ggemm_mma"),
		  "variants-listed", b->name, 0);
	test_gemm_cases(b, dev);
	test_grouped_cases(b, dev);
	if (!gt_only) {
		test_grouped_api(dev);
		test_gemm_api();
		test_gemm_rounding(dev);
	}
	b->close(dev);
	return gt_finish();
}
