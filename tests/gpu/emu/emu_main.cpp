/*
 * emu_main.cpp -- runs every rmsnorm and topk variant of kernels/gpu at
 * every feasible point on the CPU emulator (flyk_emu.h) against a host
 * reference (double-precision sums for rmsnorm; a full sort by (value desc,
 * index asc) for topk), on odd shapes, outputs poisoned.  For checking the
 * kernels' logic on a machine without a GPU; tests/gpu/test_gpu_kernels.c
 * is the real test on hardware.
 *
 *   g++ -std=c++17 -O1 -DFLYK_EMU -Iproto -Ikernels/include -Ikernels/gpu \
 *       -Itests/gpu/emu -x c++ tests/gpu/emu/emu_main.cpp \
 *       kernels/gpu/norm/rmsnorm.hip kernels/gpu/topk/topk.hip -o /tmp/flyk_emu
 *
 *   /tmp/flyk_emu [full|rmsnorm-full|topk1-full|topk2-full|quick|cases|
 *                  long|rmsnorm|topk1|topk2]
 *   full (or no argument): every point of both ops; rmsnorm-full: every
 *   point of rmsnorm; topk1-full, topk2-full: every point of topk in two
 *   halves (topk1 has the small shapes, 3x777 k=100 and the long rows);
 *   the suite runs these three; quick: a sample of the points; cases:
 *   only the op modules' case paths; long: those and quick's few long
 *   topk rows; rmsnorm, topk1, topk2: quick's sample of those parts
 *
 * Built with -DFLYK_EMU_AMD=1 (flyk_emu_amd), the same tests run in the
 * AMD wave64 model (flyk_emu.h); quick there takes every other topk
 * point.  First the emulator's own wave self-test (wave_selftest).
 *
 * Prints failures and "N passed, N failed"; exit status 1 on a failure.
 */
#include <errno.h>
#include <stdio.h>

#include <algorithm>

#include "prim/flyk_gpu.h"
#include "gpu_int.h"


#include "emu_sched.h"

#include "emu_half.h"

#include "emu_tally.h"

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

static float hval(const void *b, size_t i, uint32_t dt)
{
	if (dt == FLY_DT_FP32)
		return ((const float *)b)[i];
	uint16_t h = ((const uint16_t *)b)[i];
	return dt == FLY_DT_FP16 ? flyk_half_to_float(h) : bf2f(h);
}

static void hset(void *b, size_t i, uint32_t dt, float v)
{
	if (dt == FLY_DT_FP32)
		((float *)b)[i] = v;
	else if (dt == FLY_DT_FP16)
		((uint16_t *)b)[i] = flyk_float_to_half(v);
	else
		((uint16_t *)b)[i] = f2bf(v);
}

/* The case helpers, on host memory (the op modules' setup/check paths
 * are not driven here, but they link). */
extern "C" int flyk_gpu_case_alloc(struct flyk_case *c, size_t bytes,
				   int is_output, void **out)
{
	if (c->nbuf >= FLYK_CASE_BUFS || !(*out = aligned_alloc(64, bytes + 64)))
		return -ENOMEM;
	c->buf[c->nbuf] = *out;
	c->bytes[c->nbuf] = bytes;
	c->is_output[c->nbuf] = is_output;
	return c->nbuf++;
}

extern "C" int flyk_gpu_fill_random(struct flyk_device *, void *buf, size_t n,
				    uint32_t dt, float lo, float hi, uint64_t)
{
	for (size_t i = 0; i < n; i++)
		hset(buf, i, dt, lo + (hi - lo) * (float)(i % 977) / 977.f);
	return 0;
}

extern "C" int flyk_gpu_download(struct flyk_device *, void *h, const void *d,
				 size_t n)
{
	memcpy(h, d, n);
	return 0;
}

extern "C" int flyk_gpu_upload(struct flyk_device *, void *d, const void *h,
			       size_t n)
{
	memcpy(d, h, n);
	return 0;
}

extern "C" float flyk_bf16_to_float(uint16_t b) { return bf2f(b); }

/* ------------------------------------------------------------ checks */

static int npass, nfail;
static uint64_t rng = 0x1234567;

static float frand(float lo, float hi)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return lo + (hi - lo) * (float)((rng >> 40) & 0xffffff) / 16777216.f;
}

static struct flyk_device emu_dev(void)
{
	struct flyk_device d;
	memset(&d, 0, sizeof(d));
#if FLYK_AMD
	/* an MI300X, as backend.hip fills it: no compute capability */
	d.sms = 304;
	d.warp = 64;
	snprintf(d.arch, sizeof(d.arch), "gfx942");
	d.smem_per_block_optin = FLYK_EMU_SMEM_MAX;
#else
	d.sms = 132;
	d.warp = 32;
	d.cc_major = 9;
	d.smem_per_block_optin = 227 * 1024;
#endif
	return d;
}

template <typename F>
static void each_point(const struct flyk_variant *v, F f)
{
	uint32_t pos[FLY_PARAMS_MAX] = {0}, np = v->nparams;
	for (;;) {
		int64_t pt[FLY_PARAMS_MAX] = {0};
		for (uint32_t j = 0; j < np; j++)
			pt[j] = v->params[j].vals[pos[j]];
		f(pt);
		uint32_t j = np;
		for (; j > 0; j--) {
			if (++pos[j - 1] < v->params[j - 1].nvals)
				break;
			pos[j - 1] = 0;
		}
		if (j == 0)
			break;
	}
}

static void report(bool ok, const struct fly_problem *p, const char *v,
		   const int64_t *pt, uint32_t np, const char *why)
{
	if (ok) {
		npass++;
		return;
	}
	nfail++;
	printf("FAIL dt=%u flags=%u dims=%lld,%lld,%lld %s(", p->dtype,
	       p->flags, (long long)p->dims[0], (long long)p->dims[1],
	       (long long)p->dims[2], v);
	for (uint32_t i = 0; i < np; i++)
		printf("%s%lld", i ? "," : "", (long long)pt[i]);
	printf("): %s\n", why);
}

/* Every feasible point of every rmsnorm variant, or of the variant
 * named @p only (non-NULL), against the host reference. */
static void rms_case(uint32_t dt, int res, int64_t m, int64_t n,
		     const char *only = NULL)
{
	struct fly_problem p;
	memset(&p, 0, sizeof(p));
	p.op = FLY_OP_RMSNORM;
	p.dtype = dt;
	p.flags = res ? FLY_F_RESIDUAL : 0;
	p.dims[0] = m;
	p.dims[1] = n;
	size_t es = flyk_dtype_bytes(dt), mn = (size_t)(m * n);
	void *x = aligned_alloc(64, mn * es + 64), *w = aligned_alloc(64, n * es + 64),
	     *y = aligned_alloc(64, mn * es + 64), *r0 = aligned_alloc(64, mn * es + 64),
	     *r = aligned_alloc(64, mn * es + 64);
	std::vector<float> ry(mn), rr(mn);
	for (size_t i = 0; i < mn; i++) {
		hset(x, i, dt, frand(-2, 2));
		hset(r0, i, dt, frand(-1, 1));
	}
	for (int64_t j = 0; j < n; j++)
		hset(w, j, dt, frand(0.5f, 1.5f));
	for (int64_t i = 0; i < m; i++) { /* host reference */
		double ss = 0;
		for (int64_t j = 0; j < n; j++) {
			size_t o = i * n + j;
			float v = hval(x, o, dt);
			if (res) {
				float s[1];
				hset(s, 0, FLY_DT_FP32, 0);
				uint16_t tmp[2];
				hset(dt == FLY_DT_FP32 ? (void *)s : (void *)tmp, 0, dt,
				     v + hval(r0, o, dt));
				v = hval(dt == FLY_DT_FP32 ? (void *)s : (void *)tmp, 0, dt);
				rr[o] = v;
			}
			ss += (double)v * v;
		}
		float rstd = (float)(1.0 / sqrt(ss / n + 1e-6));
		for (int64_t j = 0; j < n; j++) {
			size_t o = i * n + j;
			float v = res ? rr[o] : hval(x, o, dt);
			ry[o] = v * rstd * hval(w, j, dt);
		}
	}
	double tol = dt == FLY_DT_BF16 ? 2e-2 : dt == FLY_DT_FP16 ? 5e-3 : 1e-5;
	struct flyk_device dev = emu_dev();
	const struct flyk_gpu_op *op = &flyk_gpu_rmsnorm_op;
	for (size_t vi = 0; vi < op->nvariants; vi++) {
		const struct flyk_variant *v = &op->variants[vi];
		if (only && strcmp(v->name, only))
			continue;
		tally_seen(v->name);
		each_point(v, [&](const int64_t *pt) {
			if (v->feasible(&dev, &p, pt))
				return;
			tally_ran(v->name);
			memset(y, 0xff, mn * es);
			memcpy(r, r0, mn * es);
			union flyk_args a;
			memset(&a, 0, sizeof(a));
			a.rmsnorm.x = x;
			a.rmsnorm.w = w;
			a.rmsnorm.y = y;
			a.rmsnorm.residual = res ? r : NULL;
			a.rmsnorm.eps = 1e-6f;
			int rc = v->launch(&dev, &p, pt, &a, NULL);
			const char *why = rc ? "launch failed" : NULL;
			for (size_t i = 0; i < mn && !why; i++) {
				double g = hval(y, i, dt), e = fabs(g - ry[i]);
				double lim = tol * std::max(1.0, fabs((double)ry[i])) +
					     (dt == FLY_DT_FP32 ? 0 : 1e-3);
				if (!(e <= lim))
					why = "y wrong or unwritten";
				if (res && hval(r, i, dt) != rr[i])
					why = "residual wrong";
			}
			report(!why, &p, v->name, pt, v->nparams, why);
		});
	}
	free(x);
	free(w);
	free(y);
	free(r0);
	free(r);
}

/* The kernels' total order: the order-preserving key of the value (as
 * a float; NaN above +inf) << 32 | ~index, larger first. */
static uint64_t topk_word(const void *x, size_t i, uint32_t dt, int64_t j)
{
	float f = hval(x, i, dt);
	uint32_t u;
	memcpy(&u, &f, 4);
	u ^= (u & 0x80000000u) ? 0xffffffffu : 0x80000000u;
	return (uint64_t)u << 32 | (uint32_t)(0xffffffffu - (uint32_t)j);
}

/* x's values by @p kind: 0 uniform in [-4, 4); 1 few distinct (ties);
 * 2 special values among ties: NaN, +-inf, +-0, the largest finite
 * value, and integers. */
static float topk_value(int kind)
{
	static const float sp[] = {NAN, INFINITY, -INFINITY, 0.f, -0.f, 3.f, 3.f,
				   65504.f, -65504.f, 1.f};
	if (kind == 0)
		return frand(-4, 4);
	if (kind == 1 || frand(0, 1) < 0.9f)
		return (float)(int)frand(-4, 4);
	return sp[(int)frand(0, 10) % 10];
}

/* x's values of the fixed kinds, by the column @p j: 3 eight integers in
 * turn (-4..3), 4 mostly -1 with a 2 every 1000th. */
static float topk_fixed(int kind, int64_t j)
{
	if (kind == 3)
		return (float)(int)(j % 8) - 4.f;
	return j % 1000 ? -1.f : 2.f;
}

/* Every feasible point of every topk variant (every @p stride-th),
 * against a sort of the words; the workspace zero, and zero again after
 * each launch (topk_mb's counters). */
static void topk_case(uint32_t dt, int det, int64_t m, int64_t n, int64_t k,
		      int kind, int stride, const char *only = NULL)
{
	struct fly_problem p;
	memset(&p, 0, sizeof(p));
	p.op = FLY_OP_TOPK;
	p.dtype = dt;
	p.flags = det ? FLY_F_DETERMINISTIC : 0;
	p.dims[0] = m;
	p.dims[1] = n;
	p.dims[2] = k;
	size_t es = flyk_dtype_bytes(dt), mn = (size_t)(m * n), mk = (size_t)(m * k);
	void *x = aligned_alloc(64, mn * es + 64), *vals = aligned_alloc(64, mk * es + 64);
	int64_t *idx = (int64_t *)aligned_alloc(64, mk * 8 + 64);
	std::vector<uint64_t> ws(FLYK_TOPK_WS_BYTES / 8, 0);
	for (size_t i = 0; i < mn; i++)
		hset(x, i, dt, kind >= 3 ? topk_fixed(kind, (int64_t)i % n) :
					   topk_value(kind));
	std::vector<int64_t> ri(mk);
	for (int64_t i = 0; i < m; i++) {
		std::vector<uint64_t> o(n);
		for (int64_t j = 0; j < n; j++)
			o[j] = topk_word(x, i * n + j, dt, j);
		std::sort(o.begin(), o.end(), std::greater<uint64_t>());
		for (int64_t j = 0; j < k; j++)
			ri[i * k + j] = 0xffffffffu - (uint32_t)o[j];
	}
	struct flyk_device dev = emu_dev();
	const struct flyk_gpu_op *op = &flyk_gpu_topk_op;
	for (size_t vi = 0; vi < op->nvariants; vi++) {
		const struct flyk_variant *v = &op->variants[vi];
		int seen = 0;
		if (only && strcmp(v->name, only))
			continue;
		tally_seen(v->name);
		each_point(v, [&](const int64_t *pt) {
			if (v->feasible(&dev, &p, pt) || seen++ % stride)
				return;
			tally_ran(v->name);
			memset(vals, 0xff, mk * es);
			memset(idx, 0xff, mk * 8);
			union flyk_args a;
			memset(&a, 0, sizeof(a));
			a.topk.x = x;
			a.topk.values = vals;
			a.topk.indices = idx;
			a.topk.workspace = ws.data();
			a.topk.workspace_size = ws.size() * 8;
			int rc = v->launch(&dev, &p, pt, &a, NULL);
			const char *why = rc ? "launch failed" : NULL;
			for (size_t i = 0; i < mk && !why; i++) {
				int64_t row = i / k;
				if (idx[i] != ri[i])
					why = "index differs from (value desc, index asc)";
				else if (memcmp((char *)vals + i * es,
						(char *)x + (row * n + ri[i]) * es, es))
					why = "value wrong";
			}
			for (size_t i = 0; i < (size_t)m && !why; i++)
				if (((uint32_t *)ws.data())[i])
					why = "a row's counter left non-zero";
			report(!why, &p, v->name, pt, v->nparams, why);
			if (rc || strcmp(v->name, "topk_mb"))
				return;
			/* no workspace, or too small: refused, nothing run */
			a.topk.workspace = NULL;
			rc = v->launch(&dev, &p, pt, &a, NULL);
			a.topk.workspace = ws.data();
			a.topk.workspace_size = 4 * m;
			int rc2 = v->launch(&dev, &p, pt, &a, NULL);
			report(rc == -EINVAL && rc2 == -EINVAL, &p, "topk_mb-no-ws",
			       pt, v->nparams, "ran without its workspace");
		});
	}
	free(x);
	free(vals);
	free(idx);
}

/* Few long rows (topk_mb's space): k = 1 and 128, n odd, uniform, ties
 * and special values (NaN, +-inf, +-0).  Every variant runs them (the
 * host sort is the reference); quick: topk_mb alone, every fourth point,
 * one dtype and kind a shape (the emulator runs a coroutine per GPU
 * thread: the suite's time). */
static void topk_long(int quick)
{
	static const uint32_t dts[] = {FLY_DT_FP32, FLY_DT_FP16, FLY_DT_BF16};
	static const int64_t ls[][3] = {{1, 32771, 1}, {2, 40001, 128},
					{3, 49999, 64}, {1, 65536, 50},
					{1, 131075, 100}};
	for (size_t s = 0; s < sizeof(ls) / sizeof(ls[0]); s++)
		for (int d = 0; d < 3; d++)
			for (int kind = 0; kind < 3; kind++) {
				/* quick: (fp32, uniform), (fp16, ties),
				 * (bf16, special) */
				int q = s < 3 && (int)s == d &&
					kind == (d == 0 ? 0 : d == 1 ? 1 : 2);
				if (!quick || q)
					topk_case(dts[d], kind != 0, ls[s][0],
						  ls[s][1], ls[s][2], kind,
						  quick ? 4 : 1,
						  quick ? "topk_mb" : NULL);
			}
}

/* TopK's check has no reference: plant answers that are consistent
 * (values match their indices, order falls) but wrong, and expect each
 * refused: row 0's last output replaced by the (k+1)-th best (the
 * off-by-one; without det, the next smaller value), two outputs swapped,
 * an output repeated. */
static void topk_plant(struct flyk_case *c, const struct flyk_variant *v,
		       const int64_t *pt)
{
	const struct fly_problem *p = &c->p;
	int64_t n = p->dims[1], k = p->dims[2];
	uint32_t dt = p->dtype;
	size_t es = flyk_dtype_bytes(dt);
	const void *x = c->args.topk.x;
	char *vals = (char *)c->args.topk.values;
	int64_t *idx = c->args.topk.indices;
	std::vector<int64_t> o(n);
	for (int64_t j = 0; j < n; j++)
		o[j] = j;
	std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) {
		return hval(x, a, dt) > hval(x, b, dt);
	});
	double err = 0;
	for (int kind = 0; kind < 3; kind++) {
		v->launch(c->dev, p, pt, &c->args, NULL);
		int64_t at = k - 1, from = k; /* the (k+1)-th best */
		if (kind == 0 && k == n)
			continue;
		if (kind > 0 && k < 2)
			continue;
		if (kind == 1) {
			at = 0;
			from = o[1];
			idx[1] = o[0];
			memcpy(vals + es, (const char *)x + o[0] * es, es);
		} else if (kind == 2) {
			from = o[k - 2];
		} else {
			/* without det, ties at the last value may be any */
			while (!(p->flags & FLY_F_DETERMINISTIC) && from < n &&
			       hval(x, o[from], dt) == hval(x, o[k - 1], dt))
				from++;
			if (from == n)
				continue;
			from = o[from];
		}
		idx[at] = from;
		memcpy(vals + at * es, (const char *)x + from * es, es);
		report(c->op->check(c, &err) == -EDOM, p, "check-planted", &at,
		       1, "planted wrong answer passed");
	}
}

/* The op module's own case path (setup, reference, check) on host memory:
 * a correct variant passes, a poisoned or corrupted output is refused. */
static void case_path(const struct flyk_gpu_op *op, struct fly_problem p)
{
	struct flyk_device dev = emu_dev();
	struct flyk_case c;
	memset(&c, 0, sizeof(c));
	c.dev = &dev;
	c.p = p;
	c.op = op;
	int rc = op->setup(&c, 7);
	report(rc == 0, &p, "setup", NULL, 0, "setup failed");
	const struct flyk_variant *v = NULL;
	int64_t pt[FLY_PARAMS_MAX] = {0};
	for (size_t i = 0; i < op->nvariants && !v; i++) {
		const struct flyk_variant *cand = &op->variants[i];
		if (cand->is_reference)
			continue;
		each_point(cand, [&](const int64_t *q) {
			if (!v && cand->feasible(&dev, &p, q) == 0) {
				v = cand;
				memcpy(pt, q, sizeof(pt));
			}
		});
	}
	if (rc == 0 && v) {
		double err = 0;
		for (int i = 0; i < c.nbuf; i++)
			if (c.is_output[i])
				memset(c.buf[i], 0xff, c.bytes[i]);
		report(op->check(&c, &err) == -EDOM, &p, "check-poisoned", NULL,
		       0, "poisoned output passed");
		if (op->prepare)
			op->prepare(&c);
		rc = v->launch(&dev, &p, pt, &c.args, NULL);
		report(rc == 0 && op->check(&c, &err) == 0, &p, v->name, pt,
		       v->nparams, "check refused a correct output");
		/* corrupt one output element */
		for (int i = 0; i < c.nbuf; i++)
			if (c.is_output[i]) {
				size_t es = flyk_dtype_bytes(p.dtype);
				size_t at = c.bytes[i] / 2 / es * es + es - 1;
				((unsigned char *)c.buf[i])[at] ^= 0x40; /* exp */
				break;
			}
		report(op->check(&c, &err) == -EDOM, &p, "check-corrupt", NULL,
		       0, "corrupted output passed");
	}
	if (rc == 0 && v && p.op == FLY_OP_TOPK)
		topk_plant(&c, v, pt);
	op->fini(&c);
	for (int i = 0; i < c.nbuf; i++)
		free(c.buf[i]);
}

/* ------------------------------------------------------------ wave size */

/* The emulator's own test of its wave (issue 27): x[i] = i + 1 over one
 * warp, summed by a butterfly.  selftest_sum32 is the planted bug, a loop
 * written for 32 lanes: in the AMD model (64 lanes) lane 0 must come out
 * with lanes 0-31 only, 528, where the FLYK_WARP loop of selftest_sum
 * gets all 64, 2080 -- so the model really runs 64 lanes; in the NVIDIA
 * model both get 528. */
__global__ void selftest_sum32(const int *x, int *out)
{
	int v = x[threadIdx.x];
	for (int o = 16; o > 0; o >>= 1)
		v += FLYK_SHFL_XOR(v, o);
	if (threadIdx.x == 0)
		out[0] = v;
}

__global__ void selftest_sum(const int *x, int *out)
{
	int v = x[threadIdx.x];
	for (int o = FLYK_WARP / 2; o > 0; o >>= 1)
		v += FLYK_SHFL_XOR(v, o);
	if (threadIdx.x == 0)
		out[0] = v;
}

/* The ballot of odd lanes, kept in 64 bits (the high half is lanes 32-63
 * on AMD; a 32-bit mask would lose it). */
__global__ void selftest_ballot(unsigned long long *out)
{
	unsigned long long m = FLYK_BALLOT(threadIdx.x & 1);
	if (threadIdx.x == 0)
		out[0] = m;
}

#if FLYK_AMD
/* HIP's shuffles at their edges: lane l writes 8 results at out[8 l]. */
__global__ void selftest_hip_shfl(int *out)
{
	int l = (int)threadIdx.x, *o = out + 8 * l;
	o[0] = __shfl(l, l + 70);	 /* (l + 70) % 64 */
	o[1] = __shfl_down(l, 1);	 /* l + 1; lane 63: its own */
	o[2] = __shfl_up(l, 1);		 /* l - 1; lane 0: its own */
	o[3] = __shfl_xor(l, 33);	 /* l ^ 33 */
	o[4] = __shfl_xor(l, 64);	 /* outside the wave: its own */
	o[5] = __shfl_down(l, 1, 32);	 /* per 32 lanes: 31, 63 keep theirs */
	o[6] = __shfl(l, 3, 16);	 /* lane 3 of its 16-lane section */
	o[7] = __shfl_up(l, 4, 8);	 /* per 8 lanes: first 4 keep theirs */
}

static int hip_shfl_expect(int l, int i)
{
	switch (i) {
	case 0: return (l + 70) % 64;
	case 1: return l == 63 ? l : l + 1;
	case 2: return l == 0 ? l : l - 1;
	case 3: return l ^ 33;
	case 4: return l;
	case 5: return l % 32 == 31 ? l : l + 1;
	case 6: return (l & ~15) + 3;
	default: return l % 8 < 4 ? l : l - 4;
	}
}
#endif

static void selftest(bool ok, const char *what)
{
	if (ok) {
		npass++;
		return;
	}
	nfail++;
	printf("FAIL selftest %s (%s)\n", what, EMU_MODEL);
}

static void wave_selftest(void)
{
	int x[FLYK_WARP], out[8 * FLYK_WARP];
	unsigned long long m = 0, odd = 0;
	for (int i = 0; i < FLYK_WARP; i++) {
		x[i] = i + 1;
		odd |= (unsigned long long)(i & 1) << i;
	}
	int all = FLYK_WARP * (FLYK_WARP + 1) / 2;
	FLYK_GO(1, FLYK_WARP, 0, 0, selftest_sum32)(x, out);
	selftest(out[0] == 528 && (FLYK_WARP == 32 || out[0] != all),
		 "the planted 32-lane sum is wrong on 64 lanes");
	FLYK_GO(1, FLYK_WARP, 0, 0, selftest_sum)(x, out);
	selftest(out[0] == all, "the FLYK_WARP sum");
	FLYK_GO(1, FLYK_WARP, 0, 0, selftest_ballot)(&m);
	selftest(m == odd, "ballot of odd lanes");
	FLYK_GO(1, 16, 0, 0, selftest_ballot)(&m); /* a partial warp */
	selftest(m == 0xaaaa, "ballot of a 16-lane block");
#if FLYK_AMD
	FLYK_GO(1, 64, 0, 0, selftest_hip_shfl)(out);
	bool ok = true;
	for (int l = 0; l < 64; l++)
		for (int i = 0; i < 8; i++)
			ok = ok && out[8 * l + i] == hip_shfl_expect(l, i);
	selftest(ok, "HIP __shfl* semantics");
#endif
	/* LDS (AMD) or opt-in shared memory (NVIDIA) past the limit: the
	 * launch fails and runs nothing */
	out[0] = -1;
	FLYK_GO(1, FLYK_WARP, FLYK_EMU_SMEM_MAX + 16, 0, selftest_sum)(x, out);
	selftest(hipGetLastError() != hipSuccess && out[0] == -1,
		 "launch over the shared-memory limit");
	selftest(hipGetLastError() == hipSuccess, "launch error cleared");
}

int main(int argc, char **argv)
{
	wave_selftest();
	printf("wave selftest: %d passed, %d failed\n", npass, nfail);
	static const uint32_t dts[] = {FLY_DT_FP32, FLY_DT_FP16, FLY_DT_BF16};
	static const int64_t rs[][2] = {{1, 1}, {3, 7}, {5, 100}, {3, 4097},
					{2, 8193}, {2, 16385}, {1, 32769},
					{9, 130}, {1, 65536}};
	static const int64_t ts[][3] = {{1, 1, 1},    {3, 5, 2},    {5, 129, 8},
					{3, 1000, 16}, {2, 4097, 32}, {2, 8193, 3},
					{2, 3001, 50}, {1, 2048, 128}, {3, 64, 64},
					{9, 256, 8},   {1, 20001, 50}, {3, 777, 100},
					{2, 4099, 2048}, {1, 2048, 2048}, {5, 1030, 20}};
	/* full, rmsnorm-full, topk1-full, topk2-full: every point (the
	 * suite's runs); any other argument: quick's sample */
	const char *mode = argc > 1 ? argv[1] : "full";
	size_t ml = strlen(mode);
	int quick = !(ml >= 4 && strcmp(mode + ml - 4, "full") == 0);
	for (int d = 0; d < 3; d++)
		for (uint32_t f = 0; f <= FLY_F_RESIDUAL; f += FLY_F_RESIDUAL) {
			struct fly_problem p;
			memset(&p, 0, sizeof(p));
			p.op = FLY_OP_RMSNORM;
			p.dtype = dts[d];
			p.flags = f;
			p.dims[0] = 3;
			p.dims[1] = 1000 + d;
			case_path(&flyk_gpu_rmsnorm_op, p);
			memset(&p, 0, sizeof(p));
			p.op = FLY_OP_TOPK;
			p.dtype = dts[d];
			p.flags = f ? FLY_F_DETERMINISTIC : 0;
			p.dims[0] = 3;
			p.dims[1] = 1500 + d;
			p.dims[2] = 8;
			case_path(&flyk_gpu_topk_op, p);
			p.dims[0] = 1 + d;
			p.dims[1] = 5001 + d;
			p.dims[2] = d == 2 ? 2048 : 50 + 150 * d;
			case_path(&flyk_gpu_topk_op, p);
		}
	printf("case paths: %d passed, %d failed\n", npass, nfail);
	if (strcmp(mode, "cases") == 0)
		return nfail ? 1 : 0;
	if (strcmp(mode, "long") == 0) { /* topk_mb's */
		topk_long(1);
		nfail += tally_report();
		printf("%d passed, %d failed\n", npass, nfail);
		return nfail ? 1 : 0;
	}
	/* topk1, topk2: the topk part alone, in two halves (the suite runs
	 * rmsnorm-full and the halves' -full forms as three tests, each
	 * under its own time limit): topk1 the small shapes, 3x777 k=100
	 * and the long rows, topk2 the other wide shapes */
	int topk_half = strncmp(mode, "topk1", 5) == 0 ? 1 :
			strncmp(mode, "topk2", 5) == 0 ? 2 : 0;
	int topk_only = topk_half != 0;
	/* quick: fp32 up to 2x8193 (a 32 KB row) */
	for (size_t s = 0; s < sizeof(rs) / sizeof(rs[0]) && !topk_only; s++)
		for (int d = 0; d < 3; d++)
			for (int res = 0; res < 2; res++)
				if (!quick || (s < 5 && d == 0))
					rms_case(dts[d], res, rs[s][0], rs[s][1]);
	/* Decode sizes on rmsnorm_lat (the variant made for them; the
	 * others ran above): 1-256 rows of the serving widths and an
	 * unaligned one.  quick (the suite's time): bf16 1x4096, 3x5120,
	 * 64x4097, and fp32 3x4097.  Then rows > 1 a block, which needs a
	 * grid of 2 blocks an SM (quick: in the NVIDIA model only). */
	static const int64_t dm[] = {1, 3, 64, 256}, dn[] = {4096, 5120, 4097};
	for (int d = 0; d < 3 && !topk_only; d++)
		for (int res = 0; res < 2; res++)
			for (size_t i = 0; i < 4; i++)
				for (size_t j = 0; j < 3; j++)
					if (!quick || (dts[d] == FLY_DT_BF16 && i == j) ||
					    (dts[d] == FLY_DT_FP32 && !res && i == 1 &&
					     j == 2))
						rms_case(dts[d], res, dm[i], dn[j],
							 "rmsnorm_lat");
	for (int res = 0; res < 2 && (!quick || !FLYK_AMD) && !topk_only; res++)
		rms_case(quick ? FLY_DT_BF16 : dts[res], res,
			 2 * emu_dev().sms * 4 + 3, 130 + 3 * res, "rmsnorm_lat");
	printf("rmsnorm: %d passed, %d failed\n", npass, nfail);
	/* quick in the AMD model: every other point (the suite's time) */
	int st = quick && FLYK_AMD ? 2 : 1;
	int rms_only = strncmp(mode, "rmsnorm", 7) == 0;
	for (size_t s = 0; s < sizeof(ts) / sizeof(ts[0]) && !rms_only; s++)
		for (int d = 0; d < 3; d++)
			for (int dup = 0; dup < 2; dup++)
				if ((!quick || ((s < 5 || s >= 10) && d == 0)) &&
				    (topk_half == 0 ||
				     (topk_half == 1) == (s < 5 || s == 11)))
					topk_case(dts[d], dup, ts[s][0], ts[s][1],
						  ts[s][2], dup, st);
	/* topk_radix's edges: the k-th word's bucket holding exactly the k
	 * still needed (625 threes in 5003 columns: the count reaches k at
	 * a digit's edge), and more equal keys than its shared memory holds
	 * (19,980 of -1; negative keys: bf16's low key bits) */
	for (int d = 0; d < 3 && !rms_only && topk_half != 1; d++)
		if (!quick || d == 2) {
			topk_case(dts[d], 0, 1, 5003, 625, 3, st, "topk_radix");
			topk_case(dts[d], 1, 2, 20001, 100, 4, st, "topk_radix");
		}
	if (!rms_only && topk_half != 2)
		topk_long(quick);
	if (topk_half == 2) /* its only feasible points are the long rows */
		tally_elsewhere("topk_mb", "the long rows, in topk1");
	nfail += tally_report();
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
