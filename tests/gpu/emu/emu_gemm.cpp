/*
 * emu_gemm.cpp -- runs the gemm, grouped_gemm, scaled_gemm, mqa_logits and
 * attention kernels of kernels/gpu on the CPU emulator (flyk_emu.h: one coroutine per GPU thread) against a
 * double-precision host reference, with the PTX of gemm_tile.h (cp.async,
 * ldmatrix, mma.sync m16n8k16) emulated lane by lane from the PTX ISA's
 * fragment layouts.  For checking the kernels' index logic, pipelines,
 * split-K, swizzle, NN, bias/scale and the grouped tile scheduler (uneven
 * and empty experts, persistent grids) on a machine without a GPU;
 * tests/gpu/test_gpu_gemm.c is the real test on hardware.
 *
 *   g++ -std=c++17 -O1 -DFLYK_EMU -Iproto -Ikernels/include -Ikernels/gpu \
 *       -Itests/gpu/emu -include tests/gpu/emu/emu_gemm.h \
 *       -x c++ tests/gpu/emu/emu_gemm.cpp kernels/gpu/gemm/gemm.hip \
 *       kernels/gpu/gemm/grouped_gemm.hip kernels/gpu/gemm/scaled_gemm.hip \
 *       kernels/gpu/mqa/mqa_logits.hip \
 *       kernels/gpu/attn/attention.hip kernels/gpu/compare.hip \
 *       -x none build/tests/emu/flyk.o -o /tmp/flyk_emu_gemm
 *   /tmp/flyk_emu_gemm [quick|compare|attn|attn-quick|scaled|mfma|amd|full]
 *       (compare: only the case check; attn*: attention only; scaled:
 *       scaled GEMM and MQA logits only (every point, every format);
 *       mfma: the
 *       AMD build's MFMA model only; amd: everything at every point but
 *       every 3rd of the MFMA variants', the AMD run of `make test`; any
 *       other argument, or none: everything at every point)
 *
 * Built with -DFLYK_EMU_AMD=1 (flyk_emu_gemm_amd), the AMD wave64 model
 * (flyk_emu.h): the portable variants and the MFMA ones (gemm_mfma,
 * ggemm_mfma) are feasible there; the tally (emu_tally.h) lists the
 * others skipped-infeasible.  That build also models the two bf16 MFMA
 * builtins (flyk_emu_mfma, from AMD's documented register layouts) and
 * gfx940's two fp8 ones on e4m3 fnuz (flyk_emu_mfma_fp8), and tests them
 * against a plain matrix product (mfma_unit), and adds shapes
 * with operands off 16-byte alignment and odd K for the AMD variants.
 * Scaled GEMM (sg_all, both models): every variant that has no
 * enumerate() at every feasible point of 9 shapes (each format, K tails,
 * M = 1, operands a byte off alignment, bias; sg_skinny's vector path,
 * two A row tiles and N tails) against a double host
 * reference of the CPU backend's decoding rules, compared by the GPU
 * case's rule (sg_cmp_kernel); sg_mfma runs in the AMD model.  MQA logits
 * (mqa_all, both models) likewise, 3 shapes: mqa_ref and mqa_simt in
 * both, mqa_mfma in the AMD model; mqa_wgmma is skipped in both (its
 * launchers need TMA, which the NVIDIA model does not emulate).
 *
 * Own scheduler (a copy of emu_main.cpp's, with 2-D grids).  Not emulated:
 * the asynchrony of cp.async (copies complete at once), timing, the
 * vendor candidates (stubbed: they need cuBLAS).
 * Prints failures and "N passed, N failed"; exit status 1 on a failure.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>

#include "prim/flyk_gpu.h"
#include "gpu_int.h"
#include "gemm/gemm_tile.h" /* flyk_gpu_gemm_compare */
#include "gemm/gemm_vendor.h"


#include "emu_sched.h"

#include "emu_tally.h"

/* ------------------------------------------------------------ PTX */

void flyk_emu_cp16(void *smem, const void *g, bool pred)
{
	if (pred)
		memcpy(smem, g, 16);
	else
		memset(smem, 0, 16);
}

/* wgmma.mma_async m64nBNk16 (gemm_tile.h's wgmma engine): the
 * descriptors carry the host addresses of the K-major, 128B-swizzled
 * operands (8-row groups 1024 bytes apart, 16-byte chunk c of a row at
 * c ^ (address bits 7-9)); each thread adds its own D fragment.  Operands
 * come from shared memory only, so no exchange between lanes is needed. */
static float wg_elem(uint64_t base, int r, int k)
{
	uintptr_t a = (uintptr_t)base + (uintptr_t)(r / 8) * 1024 +
		      (uintptr_t)(r % 8) * 128 + (uintptr_t)k * 2;
	a ^= ((a >> 7) & 7) << 4;
	return flyk_bf16_to_float(*(const uint16_t *)a);
}

void flyk_emu_wgmma(float *d, uint64_t da, uint64_t db, int bn)
{
	int t = threadIdx.x % 128, w = t / 32, l = t % 32;
	for (int j = 0; j < bn / 8; j++)
		for (int e = 0; e < 4; e++) {
			int row = w * 16 + l / 4 + (e >= 2 ? 8 : 0);
			int col = j * 8 + 2 * (l % 4) + (e & 1);
			float s = 0.f;
			for (int k = 0; k < 16; k++)
				s += wg_elem(da, row, k) * wg_elem(db, col, k);
			d[4 * j + e] += s;
		}
}

/* Misaligned vector stores seen (gemm_tile.h's GEMM_VST_ALIGNED). */
static int misaligned;

void flyk_emu_align(const void *p, unsigned bytes)
{
	if ((uintptr_t)p % bytes)
		misaligned++;
}

/* Per-warp exchange buffers (threads switch only at warp barriers). */
static const uint16_t *ldm_addr[32][32];
static uint32_t mma_a[32][32][4], mma_b[32][32][2];

static uint32_t pack2(uint16_t lo, uint16_t hi)
{
	return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* ldmatrix.x4: lanes 8i..8i+7 give the rows of matrix i; lane l gets, of
 * each matrix, row l/4 elements 2(l%4), +1 (.trans: column l/4, rows
 * 2(l%4), +1). */
void flyk_emu_ldmatrix(uint32_t *r, const uint16_t *p, bool trans)
{
	int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, q = l % 4;
	ldm_addr[w][l] = p;
	flyk_emu_syncwarp();
	for (int i = 0; i < 4; i++) {
		if (!trans) {
			const uint16_t *row = ldm_addr[w][8 * i + g];
			r[i] = pack2(row[2 * q], row[2 * q + 1]);
		} else {
			r[i] = pack2(ldm_addr[w][8 * i + 2 * q][g],
				     ldm_addr[w][8 * i + 2 * q + 1][g]);
		}
	}
	flyk_emu_syncwarp();
}

static float bfh(uint32_t v, int hi)
{
	uint32_t u = (hi ? v >> 16 : v & 0xffffu) << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Per warp: its fragments hold fp16, not bf16 (inside
 * flyk_emu_mma16816_f16). */
static int mma_f16[32];

/* Half @p hi of warp @p w's fragment word. */
static float fragh(int w, uint32_t v, int hi)
{
	if (mma_f16[w])
		return flyk_half_to_float((uint16_t)(hi ? v >> 16 : v & 0xffffu));
	return bfh(v, hi);
}

/* A[r][k] of the warp's 16x16 A fragment (a0: rows g, k 2q..; a1: rows
 * g+8; a2: rows g, k 2q+8..; a3: rows g+8, k 2q+8..). */
static float frag_a(int w, int r, int k)
{
	int g = r % 8, hi8 = r >= 8, kq = (k % 8) / 2, k8 = k >= 8;
	return fragh(w, mma_a[w][4 * g + kq][hi8 + 2 * k8], k & 1);
}

/* B[k][n] of the 16x8 B fragment (b0: k 2q.., n g; b1: k 2q+8..). */
static float frag_b(int w, int k, int n)
{
	int kq = (k % 8) / 2, k8 = k >= 8;
	return fragh(w, mma_b[w][4 * n + kq][k8], k & 1);
}

/* The host decoders of scaled GEMM's formats (the CPU backend's rules,
 * kernels/cpu: fn bias 7 with 0x7f/0xff NaN, fnuz bias 8 with 0x80 NaN,
 * e2m1 {0, .5, 1, 1.5, 2, 3, 4, 6}, e8m0 2^(e - 127) with 0xFF NaN); the
 * e4m3 one here, the fp8 mma.sync model's too. */
static double sg_e4m3(unsigned b, bool fnuz)
{
	unsigned e = (b >> 3) & 15u, m = b & 7u;
	if (fnuz ? b == 0x80u : (b & 0x7fu) == 0x7fu)
		return NAN;
	double v = e ? ldexp(1.0 + m / 8.0, (int)e - (fnuz ? 8 : 7))
		     : ldexp((double)m, fnuz ? -10 : -9);
	return (b & 0x80u) ? -v : v;
}

/* mma.sync m16n8k32 e4m3 (prim/mma.h's layout): A[r][k] in lane 4 (r % 8)
 * + (k % 16) / 4, word (r >= 8) + 2 (k >= 16), byte k % 4; B[k][n] in
 * lane 4 n + (k % 16) / 4, word k >= 16, byte k % 4. */
static float frag_a8(int w, int r, int k)
{
	uint32_t v = mma_a[w][4 * (r % 8) + (k % 16) / 4]
			  [(r >= 8) + 2 * (k >= 16)];
	return (float)sg_e4m3((v >> (8 * (k % 4))) & 255u, false);
}

static float frag_b8(int w, int k, int n)
{
	uint32_t v = mma_b[w][4 * n + (k % 16) / 4][k >= 16];
	return (float)sg_e4m3((v >> (8 * (k % 4))) & 255u, false);
}

/* The warp's D += A B of one mma.sync, m16n8k16 (16-bit halves) or, with
 * @p e4m3, m16n8k32; D[r][n] in lane 4 (r % 8) + n / 2, element 2 (r >= 8)
 * + n % 2.  Products of bf16, fp16 or e4m3 values are exact in fp32;
 * summed in k order, then added to C. */
static void emu_mma(float *c, const uint32_t *a, const uint32_t *b, bool e4m3)
{
	int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, q = l % 4;
	memcpy(mma_a[w][l], a, 16);
	memcpy(mma_b[w][l], b, 8);
	flyk_emu_syncwarp();
	for (int e = 0; e < 4; e++) {
		int r = g + (e >= 2 ? 8 : 0), n = 2 * q + (e & 1);
		float s = 0.f;
		for (int k = 0; k < (e4m3 ? 32 : 16); k++)
			s += e4m3 ? frag_a8(w, r, k) * frag_b8(w, k, n)
				  : frag_a(w, r, k) * frag_b(w, k, n);
		c[e] += s;
	}
	flyk_emu_syncwarp();
}

void flyk_emu_mma16816(float *c, const uint32_t *a, const uint32_t *b)
{
	emu_mma(c, a, b, false);
}

void flyk_emu_mma16816_f16(float *c, const uint32_t *a, const uint32_t *b)
{
	mma_f16[threadIdx.x / 32] = 1;
	emu_mma(c, a, b, false);
	mma_f16[threadIdx.x / 32] = 0;
}

void flyk_emu_mma16832_e4m3(float *c, const uint32_t *a, const uint32_t *b)
{
	emu_mma(c, a, b, true);
}

#if FLYK_AMD
/* ------------------------------------------------------------ MFMA */

/* v_mfma_f32_32x32x8bf16_1k and v_mfma_f32_16x16x16bf16_1k (CDNA3:
 * v_mfma_f32_32x32x8_bf16, v_mfma_f32_16x16x16_bf16), D = A B + C with
 * n x n tiles (n = 32 or 16), K = 8 or 16.  Register layouts from AMD's
 * Matrix Instruction Calculator (github.com/ROCm/
 * amd_matrix_instruction_calculator, 2ef9189: --matrix-layout -A/-B/-D,
 * -a cdna3 and -a cdna2 agree), checked against it for all 64 lanes;
 * with g = l / n the lane's group:
 *   A[i][k]  lane i + n (k / 4), element k % 4 (4 bf16 a lane)
 *   B[k][j]  lane j + n (k / 4), element k % 4
 *   D[i][j]  lane j + n g, register v: i = 8 (v / 4) + 4 g + v % 4 on
 *            32x32 (16 registers), i = 4 g + v on 16x16 (4 registers)
 * Products are exact in fp32; they are summed in k order, then added to
 * C (the hardware's order is not specified to the bit). */
static flyk_emu_short4 mf_a[16][64], mf_b[16][64];

static float mf_bf(short h)
{
	return bfh((uint16_t)h, 0);
}

void flyk_emu_mfma(int n, const flyk_emu_short4 *a, const flyk_emu_short4 *b,
		   float *acc, int ctl)
{
	int w = threadIdx.x / 64, l = threadIdx.x % 64, g = l / n, j = l % n;
	int nk = 64 / n * 4, nreg = n * n / 64;
	if (ctl) {
		fprintf(stderr, "emu: MFMA broadcast controls not emulated\n");
		abort();
	}
	mf_a[w][l] = *a;
	mf_b[w][l] = *b;
	flyk_emu_syncwarp();
	for (int v = 0; v < nreg; v++) {
		int i = n == 32 ? 8 * (v / 4) + 4 * g + v % 4 : 4 * g + v;
		float s = 0.f;
		for (int k = 0; k < nk; k++)
			s += mf_bf(mf_a[w][i + n * (k / 4)][k % 4]) *
			     mf_bf(mf_b[w][j + n * (k / 4)][k % 4]);
		acc[v] += s;
	}
	flyk_emu_syncwarp();
}

/* v_mfma_f32_32x32x16_fp8_fp8 and v_mfma_f32_16x16x32_fp8_fp8 (CDNA3),
 * D = A B + C with n x n tiles, K = 16 or 32, A and B e4m3 fnuz.  The
 * layouts follow the MFMA rule of the bf16 ones with 8 elements a lane
 * (two VGPRs, element e in byte e % 4 of VGPR e / 4): with g = l / n,
 *   A[i][k]  lane i + n (k / 8), byte k % 8 of the 64-bit operand
 *   B[k][j]  lane j + n (k / 8), byte k % 8
 *   D[i][j]  as the bf16 instructions of the same n
 * Products of two e4m3 values are exact in fp32; summed in k order, then
 * added to C. */
static uint64_t mf8_a[16][64], mf8_b[16][64];

/* One e4m3 fnuz byte as fp32: bias 8, 0x80 NaN, no infinity or -0. */
static float fnuz_f32(unsigned b)
{
	unsigned e = (b >> 3) & 15u, m = b & 7u;
	if (b == 0x80u)
		return NAN;
	float v = e ? ldexpf(1.f + m / 8.f, (int)e - 8) : ldexpf((float)m, -10);
	return (b & 0x80u) ? -v : v;
}

void flyk_emu_mfma_fp8(int n, long a, long b, float *acc, int ctl)
{
	int w = threadIdx.x / 64, l = threadIdx.x % 64, g = l / n, j = l % n;
	int nk = 64 / n * 8, nreg = n * n / 64;
	if (ctl) {
		fprintf(stderr, "emu: MFMA broadcast controls not emulated\n");
		abort();
	}
	mf8_a[w][l] = (uint64_t)a;
	mf8_b[w][l] = (uint64_t)b;
	flyk_emu_syncwarp();
	for (int v = 0; v < nreg; v++) {
		int i = n == 32 ? 8 * (v / 4) + 4 * g + v % 4 : 4 * g + v;
		float s = 0.f;
		for (int k = 0; k < nk; k++)
			s += fnuz_f32((unsigned)(mf8_a[w][i + n * (k / 8)] >>
						 (8 * (k % 8))) & 0xffu) *
			     fnuz_f32((unsigned)(mf8_b[w][j + n * (k / 8)] >>
						 (8 * (k % 8))) & 0xffu);
		acc[v] += s;
	}
	flyk_emu_syncwarp();
}
#endif

/* ------------------------------------------------------------ links */

extern "C" float flyk_bf16_to_float(uint16_t b)
{
	return bfh(b, 0);
}

extern "C" uint16_t flyk_float_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

#include "emu_half.h" /* fp16 (attention's fp16 keys) */

extern "C" int flyk_gpu_case_alloc(struct flyk_case *, size_t, int, void **)
{
	return -ENOMEM;
}
extern "C" int flyk_gpu_fill_random(struct flyk_device *, void *, size_t,
				    uint32_t, float, float, uint64_t)
{
	return -ENOMEM;
}
/* Host memory stands for device memory (flyk_gpu_compare's words). */
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

/* The vendor candidates need cuBLAS: never feasible here. */
int flyk_cublaslt_feasible(const struct flyk_device *,
			   const struct fly_problem *, const int64_t *)
{
	return -ENOSPC;
}
int flyk_cublaslt_enumerate(const struct flyk_device *,
			    const struct fly_problem *,
			    int64_t (*)[FLY_PARAMS_MAX], int)
{
	return 0;
}
int flyk_cublaslt_launch(const struct flyk_device *, const struct fly_problem *,
			 const int64_t *, const union flyk_args *, void *)
{
	return -EOPNOTSUPP;
}
int flyk_cublas_default_feasible(const struct flyk_device *,
				 const struct fly_problem *, const int64_t *)
{
	return -ENOSPC;
}
int flyk_cublas_default_launch(const struct flyk_device *,
			       const struct fly_problem *, const int64_t *,
			       const union flyk_args *, void *)
{
	return -EOPNOTSUPP;
}

/* ------------------------------------------------------------ checks */

static int npass, nfail;
/* Every how many feasible points of an MFMA variant run (mode "amd": 3,
 * the emulator is slow; with odd shapes' pruning, every tile shape, MFMA
 * block, buffering and split still runs on some shape). */
static int mfma_every = 1;

/* The stride of variant @p name's points on a shape run at @p stride. */
static int point_stride(const char *name, int stride)
{
	return strstr(name, "_mfma") ? stride * mfma_every : stride;
}
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint16_t rnd_bf16(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return flyk_float_to_bf16((float)((rng >> 40) / 16777216.0) * 2.f -
				  1.f);
}

static void result(int ok, const char *what, const char *key, int rc)
{
	if (getenv("FLYK_EMU_VERBOSE"))
		printf("%s %s %s\n", ok ? "ok" : "FAIL", what, key);
	if (ok) {
		npass++;
		return;
	}
	nfail++;
	printf("FAIL %s %s (rc %d)\n", what, key, rc);
}

static int cmp(const uint16_t *got, const double *ref, size_t n, int64_t k)
{
	double slack = 2e-3 * sqrt((double)k);
	for (size_t i = 0; i < n; i++) {
		double g = flyk_bf16_to_float(got[i]), e = fabs(g - ref[i]);
		if (e != e || e > fabs(ref[i]) / 64 + slack)
			return -EDOM;
	}
	return 0;
}

static void key_of(const char *v, const struct fly_problem *p,
		   const int64_t *pt, uint32_t np, char *buf, size_t cap)
{
	int n =
	    snprintf(buf, cap, "%s l%u f%u %lld,%lld,%lld,%lld (", v, p->layout,
		     p->flags, (long long)p->dims[0], (long long)p->dims[1],
		     (long long)p->dims[2], (long long)p->dims[3]);
	for (uint32_t i = 0; i < np && n > 0 && (size_t)n < cap; i++)
		n += snprintf(buf + n, cap - n, "%s%lld", i ? "," : "",
			      (long long)pt[i]);
	if (n > 0 && (size_t)n < cap)
		snprintf(buf + n, cap - n, ")");
}

/* Every point of @p v (odometer) that is feasible and passes @p pick. */
template <typename F>
static void each_point(const struct flyk_variant *v,
		       const struct flyk_device *dev,
		       const struct fly_problem *p, F fn)
{
	uint32_t pos[FLY_PARAMS_MAX] = {0}, np = v->nparams;
	for (;;) {
		int64_t pt[FLY_PARAMS_MAX] = {0};
		for (uint32_t j = 0; j < np; j++)
			pt[j] = v->params[j].vals[pos[j]];
		if (v->feasible(dev, p, pt) == 0)
			fn(pt);
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

static struct flyk_device emu_dev(void)
{
	struct flyk_device d;
	memset(&d, 0, sizeof(d));
	d.sms = 4; /* small: split-K and persistent grids get exercised */
#if FLYK_AMD
	/* wave64, no compute capability, 64 KiB of LDS (backend.hip's
	 * fields for a gfx942) */
	d.warp = 64;
	snprintf(d.arch, sizeof(d.arch), "gfx942");
	d.smem_per_block_optin = FLYK_EMU_SMEM_MAX;
#else
	d.warp = 32;
	d.cc_major = 9;
	d.smem_per_block_optin = 232448;
#endif
	return d;
}

/* @p off: A, B, C and bias start that many elements past an aligned
 * address (for the kernels that take any alignment). */
static void gemm_one(const struct flyk_backend *b, int64_t m, int64_t n,
		     int64_t k, uint32_t layout, uint32_t flags, int stride,
		     int off = 0)
{
	struct flyk_device dev = emu_dev();
	struct fly_problem p;
	memset(&p, 0, sizeof(p));
	p.op = FLY_OP_GEMM;
	p.dtype = FLY_DT_BF16;
	p.layout = layout;
	p.flags = flags;
	p.dims[0] = m;
	p.dims[1] = n;
	p.dims[2] = k;
	std::vector<uint16_t> Ab(m * k + off), Bb(n * k + off), biasb(n + off),
	    Cb(m * n + off);
	uint16_t *A = Ab.data() + off, *B = Bb.data() + off,
		 *bias = biasb.data() + off, *C = Cb.data() + off;
	size_t nc = (size_t)(m * n);
	std::vector<double> ref(m * n);
	std::vector<float> ws(8 * m * n + 16);
	for (auto &x : Ab)
		x = rnd_bf16();
	for (auto &x : Bb)
		x = rnd_bf16();
	for (auto &x : biasb)
		x = rnd_bf16();
	float alpha = (flags & FLY_F_SCALE) ? 0.75f : 1.f;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0;
			for (int64_t q = 0; q < k; q++)
				s += (double)flyk_bf16_to_float(A[i * k + q]) *
				     flyk_bf16_to_float(layout == FLY_LAYOUT_NN
							    ? B[q * n + j]
							    : B[j * k + q]);
			s *= alpha;
			if (flags & FLY_F_BIAS)
				s += flyk_bf16_to_float(bias[j]);
			ref[i * n + j] = s;
		}
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	args.gemm.a = A;
	args.gemm.b = B;
	args.gemm.c = C;
	args.gemm.bias = bias;
	args.gemm.alpha = alpha;
	args.gemm.workspace = ws.data();
	args.gemm.workspace_size = ws.size() * 4;
	for (size_t vi = 0; vi < b->nvariants; vi++) {
		const struct flyk_variant *v = &b->variants[vi];
		if (!flyk_variant_supports(v, &p) || v->enumerate)
			continue;
		int seen = 0, vs = point_stride(v->name, stride);
		tally_seen(v->name);
		each_point(v, &dev, &p, [&](const int64_t *pt) {
			if (seen++ % vs)
				return;
			tally_ran(v->name);
			char key[200];
			key_of(v->name, &p, pt, v->nparams, key, sizeof(key));
			if (off)
				snprintf(key + strlen(key),
					 sizeof(key) - strlen(key), " +%d", off);
			memset(C, 0xff, nc * 2);
			misaligned = 0;
			int rc = v->launch(&dev, &p, pt, &args, NULL);
			if (!rc)
				rc = cmp(C, ref.data(), nc, k);
			if (!rc && misaligned)
				rc = -EFAULT; /* a GPU would fault */
			result(rc == 0, "gemm", key, rc);
		});
	}
}

static void grouped_one(const struct flyk_backend *b,
			const std::vector<int64_t> &rows, int64_t n, int64_t k,
			int stride)
{
	struct flyk_device dev = emu_dev();
	int g = (int)rows.size();
	std::vector<int64_t> off(g + 1, 0);
	for (int i = 0; i < g; i++)
		off[i + 1] = off[i] + rows[i];
	int64_t m = off[g];
	struct fly_problem p;
	memset(&p, 0, sizeof(p));
	p.op = FLY_OP_GROUPED_GEMM;
	p.dtype = FLY_DT_BF16;
	p.layout = FLY_LAYOUT_NT;
	p.dims[0] = g;
	p.dims[1] = m;
	p.dims[2] = n;
	p.dims[3] = k;
	std::vector<uint16_t> A(m * k), B(g * n * k), C(m * n);
	std::vector<double> ref(m * n);
	for (auto &x : A)
		x = rnd_bf16();
	for (auto &x : B)
		x = rnd_bf16();
	for (int e = 0; e < g; e++)
		for (int64_t i = off[e]; i < off[e + 1]; i++)
			for (int64_t j = 0; j < n; j++) {
				double s = 0;
				for (int64_t q = 0; q < k; q++)
					s += (double)flyk_bf16_to_float(
						 A[i * k + q]) *
					     flyk_bf16_to_float(
						 B[(e * n + j) * k + q]);
				ref[i * n + j] = s;
			}
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	args.grouped_gemm.a = A.data();
	args.grouped_gemm.b = B.data();
	args.grouped_gemm.c = C.data();
	args.grouped_gemm.offsets = off.data();
	for (size_t vi = 0; vi < b->nvariants; vi++) {
		const struct flyk_variant *v = &b->variants[vi];
		if (!flyk_variant_supports(v, &p))
			continue;
		int seen = 0, vs = point_stride(v->name, stride);
		tally_seen(v->name);
		each_point(v, &dev, &p, [&](const int64_t *pt) {
			if (seen++ % vs)
				return;
			tally_ran(v->name);
			char key[200];
			key_of(v->name, &p, pt, v->nparams, key, sizeof(key));
			memset(C.data(), 0xff, C.size() * 2);
			misaligned = 0;
			int rc = v->launch(&dev, &p, pt, &args, NULL);
			if (!rc)
				rc = cmp(C.data(), ref.data(), C.size(), k);
			if (!rc && misaligned)
				rc = -EFAULT; /* a GPU would fault */
			result(rc == 0, "grouped", key, rc);
		});
	}
}

/* The cases' device-side GEMM check (flyk_gpu_gemm_compare: |got - ref|
 * <= |ref| / 64 + 2e-3 * sqrt(k), no NaN) on either side of its bound,
 * through the backend's compare kernel. */
static void compare_rule(void)
{
	enum { N = 256 };
	static uint16_t ref[N], got[N];
	unsigned words[2];
	struct flyk_device dev;
	memset(&dev, 0, sizeof(dev));
	dev.sms = 4;
	int64_t k = 100; /* slack 0.02 */
	for (int i = 0; i < N; i++)
		ref[i] = got[i] = flyk_float_to_bf16((float)(i % 17) - 8.f);
	double err = -1;
	int rc = flyk_gpu_gemm_compare(&dev, got, ref, N, k, words, &err);
	result(rc == 0 && err == 0, "compare", "equal", rc);
	/* ref 8: bound 8 / 64 + 0.02 = 0.145; bf16 steps near 8 are 1/16 */
	int at = 16; /* (16 % 17) - 8 = 8 */
	got[at] = flyk_float_to_bf16(8.125f); /* off 0.125: inside */
	rc = flyk_gpu_gemm_compare(&dev, got, ref, N, k, words, &err);
	result(rc == 0 && err == 0.125, "compare", "inside-bound", rc);
	got[at] = flyk_float_to_bf16(8.1875f); /* off 0.1875: outside */
	rc = flyk_gpu_gemm_compare(&dev, got, ref, N, k, words, &err);
	result(rc == -EDOM && err == 0.1875, "compare", "outside-bound", rc);
	got[at] = 0x7fc0; /* NaN */
	rc = flyk_gpu_gemm_compare(&dev, got, ref, N, k, words, &err);
	result(rc == -EDOM && isinf(err), "compare", "nan", rc);
}

/* ------------------------------------------------------------ attention */

/* Element @p x of an attention operand of dtype @p dt (bf16 or fp16). */
static float attn_el(uint32_t dt, uint16_t x)
{
	return dt == FLY_DT_FP16 ? flyk_half_to_float(x) : flyk_bf16_to_float(x);
}

/* Random operand elements of @p dt in [-1, 1). */
static uint16_t attn_rnd(uint32_t dt)
{
	uint16_t b = rnd_bf16();
	return dt == FLY_DT_FP16 ? flyk_float_to_half(flyk_bf16_to_float(b))
				 : b;
}

/* Host reference (double) of attention forward: O and the natural-log
 * LSE; a row that sees no key (causal, sq > skv) has O 0 and lse -inf. */
static void attn_host(const struct fly_problem *p, const uint16_t *q,
		      const uint16_t *k, const uint16_t *v, const int64_t *qs,
		      const int64_t *ks, double scale, std::vector<double> &o,
		      std::vector<double> &lse)
{
	int64_t B = p->dims[0], sq = p->dims[1], skv = p->dims[2];
	int64_t hq = p->dims[3], hkv = p->dims[4], d = p->dims[5];
	bool causal = p->flags & FLY_F_CAUSAL;
	std::vector<double> s(skv);
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < hq; h++)
			for (int64_t i = 0; i < sq; i++) {
				int64_t hk = h / (hq / hkv), hi = skv;
				if (causal)
					hi = std::max<int64_t>(
					    0, std::min(skv, i + skv - sq + 1));
				double mx = -INFINITY, sum = 0;
				const uint16_t *qr =
				    q + b * qs[0] + i * qs[1] + h * qs[2];
				for (int64_t j = 0; j < hi; j++) {
					const uint16_t *kr =
					    k + b * ks[0] + j * ks[1] + hk * ks[2];
					double dot = 0;
					for (int64_t x = 0; x < d; x++)
						dot += (double)attn_el(p->dtype, qr[x]) *
						       attn_el(p->dtype, kr[x]);
					s[j] = dot * scale;
					mx = std::max(mx, s[j]);
				}
				for (int64_t j = 0; j < hi; j++)
					sum += exp(s[j] - mx);
				size_t row = (size_t)((b * sq + i) * hq + h);
				for (int64_t x = 0; x < d; x++) {
					double acc = 0;
					for (int64_t j = 0; j < hi; j++)
						acc += exp(s[j] - mx) *
						       attn_el(p->dtype,
							       v[b * ks[0] + j * ks[1] +
								 hk * ks[2] + x]);
					o[row * d + x] = hi ? acc / sum : 0.0;
				}
				lse[(b * hq + h) * sq + i] =
				    hi ? mx + log(sum) : -INFINITY;
			}
}

/* O within |ref| / 64 + 4e-3 (P rounded to bf16, O to bf16), LSE within
 * 1e-3 max(1, |ref|), -inf exactly; no NaN. */
static int attn_cmp(uint32_t dt, const uint16_t *o, const float *lse,
		    const std::vector<double> &ro, const std::vector<double> &rl)
{
	for (size_t i = 0; i < ro.size(); i++) {
		double g = attn_el(dt, o[i]), e = fabs(g - ro[i]);
		if (e != e || e > fabs(ro[i]) / 64 + 4e-3)
			return -EDOM;
	}
	for (size_t i = 0; i < rl.size(); i++) {
		if (isinf(rl[i])) {
			if (!(isinf(lse[i]) && lse[i] < 0))
				return -ERANGE;
		} else if (!(fabs(lse[i] - rl[i]) <=
			     1e-3 * std::max(1.0, fabs(rl[i])))) {
			return -ERANGE;
		}
	}
	return 0;
}

/* Every attention variant at every feasible point (every @p stride-th)
 * on one shape; @p packed: q, k and v are slices of one [B, S, hq + 2 hkv,
 * d] tensor (sq == skv), so their strides are not dense. */
static void attn_one(const struct flyk_backend *b, int64_t B, int64_t sq,
		     int64_t skv, int64_t hq, int64_t hkv, int64_t d,
		     bool causal, bool packed, int stride,
		     uint32_t dt = FLY_DT_BF16)
{
	struct flyk_device dev = emu_dev();
	struct fly_problem p;
	memset(&p, 0, sizeof(p));
	p.op = FLY_OP_ATTENTION;
	p.dtype = dt;
	p.flags = causal ? FLY_F_CAUSAL : 0;
	int64_t dims[6] = {B, sq, skv, hq, hkv, d};
	memcpy(p.dims, dims, sizeof(dims));
	int64_t ht = packed ? hq + 2 * hkv : hkv;
	std::vector<uint16_t> Q, K, V, O((size_t)(B * sq * hq * d));
	std::vector<float> L((size_t)(B * hq * sq)), ws(16 * L.size() * (d + 1));
	int64_t qs[3], ks[3];
	if (packed) {
		K.resize((size_t)(B * skv * ht * d));
		for (auto &x : K)
			x = attn_rnd(dt);
		int64_t st[3] = {skv * ht * d, ht * d, d};
		memcpy(qs, st, sizeof(st));
		memcpy(ks, st, sizeof(st));
	} else {
		Q.resize(O.size());
		K.resize((size_t)(B * skv * hkv * d));
		V.resize(K.size());
		for (auto &x : Q)
			x = attn_rnd(dt);
		for (auto &x : K)
			x = attn_rnd(dt);
		for (auto &x : V)
			x = attn_rnd(dt);
		int64_t sq3[3] = {sq * hq * d, hq * d, d};
		int64_t sk3[3] = {skv * hkv * d, hkv * d, d};
		memcpy(qs, sq3, sizeof(sq3));
		memcpy(ks, sk3, sizeof(sk3));
	}
	const uint16_t *q = packed ? K.data() : Q.data();
	const uint16_t *k = packed ? K.data() + hq * d : K.data();
	const uint16_t *v = packed ? K.data() + (hq + hkv) * d : V.data();
	double scale = 1.0 / sqrt((double)d);
	std::vector<double> ro(O.size()), rl(L.size());
	attn_host(&p, q, k, v, qs, ks, scale, ro, rl);
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	struct flyk_attention_args *a = &args.attention;
	a->q = q;
	a->k = k;
	a->v = v;
	a->o = O.data();
	a->lse = L.data();
	a->scale = (float)scale;
	if (packed)
		for (int i = 0; i < 3; i++)
			a->q_stride[i] = a->k_stride[i] = a->v_stride[i] = qs[i];
	a->workspace = ws.data();
	a->workspace_size = ws.size() * 4;
	for (size_t vi = 0; vi < b->nvariants; vi++) {
		const struct flyk_variant *var = &b->variants[vi];
		if (!flyk_variant_supports(var, &p))
			continue;
		/* attn_mfma (6 points a d), quick or mode amd: every 3rd, one
		 * further on each shape, so the quick set meets them all */
		static int amf_skew;
		bool amf = !strcmp(var->name, "attn_mfma") &&
			   (stride > 3 || mfma_every > 1);
		int seen = amf ? amf_skew++ : 0, every = amf ? 3 : stride;
		tally_seen(var->name);
		each_point(var, &dev, &p, [&](const int64_t *pt) {
			if (seen++ % every)
				return;
			tally_ran(var->name);
			char key[200];
			int n = snprintf(key, sizeof(key),
					 "%s %s b%lld sq%lld skv%lld h%lld/%lld d%lld%s%s (",
					 var->name, dt == FLY_DT_FP16 ? "fp16" : "bf16",
					 (long long)B, (long long)sq,
					 (long long)skv, (long long)hq,
					 (long long)hkv, (long long)d,
					 causal ? " causal" : "",
					 packed ? " packed" : "");
			for (uint32_t i = 0; i < var->nparams; i++)
				n += snprintf(key + n, sizeof(key) - n, "%s%lld",
					      i ? "," : "", (long long)pt[i]);
			snprintf(key + n, sizeof(key) - n, ")");
			memset(O.data(), 0xff, O.size() * 2);
			memset(L.data(), 0xff, L.size() * 4);
			misaligned = 0;
			int rc = var->launch(&dev, &p, pt, &args, NULL);
			if (!rc)
				rc = attn_cmp(dt, O.data(), L.data(), ro, rl);
			if (!rc && misaligned)
				rc = -EFAULT;
			result(rc == 0, "attention", key, rc);
		});
	}
}

/* Attention shapes: tails in sq and skv, decode (sq 1), GQA 1/4/8, sq !=
 * skv both ways (sq > skv causal: rows that see no key), d 64/128/256,
 * packed qkv strides, fp16, and block-starved shapes for the split
 * variant (4 emulated SMs). */
static void attn_all(const struct flyk_backend *b, int quick)
{
	/* quick (the test suite's run, under its time limit): every 9th
	 * point, the big shapes causal only */
	int st = quick ? 9 : 1;
	for (int c = 0; c < 2; c++) {
		attn_one(b, 1, 1, 1, 1, 1, 64, c, false, 1);
		attn_one(b, 2, 17, 17, 4, 1, 64, c, false, st);
		attn_one(b, 1, 1, 300, 8, 2, 128, c, false, st);
		attn_one(b, 1, 77, 77, 4, 2, 64, c, true, st);
		attn_one(b, 1, 33, 90, 4, 1, 128, c, false, st, FLY_DT_FP16);
		if (quick && !c)
			continue;
		attn_one(b, 1, 70, 130, 8, 1, 64, c, false, st);
		attn_one(b, 1, 130, 70, 2, 2, 128, c, false, st);
		attn_one(b, 1, 3, 260, 4, 4, 256, c, false, st);
	}
}

/* ------------------------------------------------------------ scaled gemm */

/* (sg_e4m3: above, beside the fp8 mma.sync model) */
static double sg_e2m1(unsigned c)
{
	static const double mag[8] = {0, .5, 1, 1.5, 2, 3, 4, 6};
	return (c & 8u) ? -mag[c & 7u] : mag[c & 7u];
}

static double sg_e8m0(unsigned e)
{
	return e == 0xffu ? NAN : ldexp(1.0, (int)e - 127);
}

/* Element (i, q) of an operand of @p dt with k columns, scales applied. */
static double sg_host_elem(uint32_t dt, const uint8_t *x, const uint8_t *sc,
			   int64_t k, int64_t i, int64_t q)
{
	switch (dt) {
	case FLY_DT_FP8_E4M3:
		return sg_e4m3(x[i * k + q], false);
	case FLY_DT_FP8_E4M3FNUZ:
		return sg_e4m3(x[i * k + q], true);
	case FLY_DT_MXFP8:
		return sg_e4m3(x[i * k + q], false) *
		       sg_e8m0(sc[i * (k / 32) + q / 32]);
	default: {
		uint8_t b = x[(i * k + q) / 2];
		return sg_e2m1(q % 2 ? b >> 4 : b & 15u) *
		       sg_e8m0(sc[i * (k / 32) + q / 32]);
	}
	}
}

/* Random operand bytes of @p dt: fn over its whole range (-0 and the
 * 256..448 fnuz cannot hold included, NaN not), fnuz every finite code,
 * e2m1 any byte. */
static uint8_t sg_rnd(uint32_t dt)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	uint8_t b = (uint8_t)(rng >> 40);
	if (dt == FLY_DT_FP8_E4M3FNUZ)
		return b == 0x80 ? 0 : b;
	if (dt != FLY_DT_MXFP4 && (b & 0x7f) == 0x7f)
		return b ^ 1;
	return b;
}

/* sg_cmp_kernel's rule (the CPU backend's, case.c): |got - ref| <=
 * 2^-6 |ref| + 2^-8 max |ref|, no NaN. */
static int sg_cmp(const uint16_t *got, const std::vector<double> &ref)
{
	double big = 0;
	for (double r : ref)
		if (r == r)
			big = std::max(big, fabs(r));
	for (size_t i = 0; i < ref.size(); i++) {
		double g = flyk_bf16_to_float(got[i]), e = fabs(g - ref[i]);
		if (e != e || e > fabs(ref[i]) * 0x1p-6 + big * 0x1p-8)
			return -EDOM;
	}
	return 0;
}

static const char *sg_dt_name(uint32_t dt)
{
	return dt == FLY_DT_FP8_E4M3	   ? "e4m3"
	       : dt == FLY_DT_FP8_E4M3FNUZ ? "e4m3fnuz"
	       : dt == FLY_DT_MXFP8	   ? "mxfp8"
					   : "mxfp4";
}

/* Every scaled-GEMM variant at every feasible point on one shape against
 * a double-precision host reference, C poisoned; @p off: A, B, C and the
 * bias start that many bytes (elements, for C and the bias) past an
 * aligned address. */
static void sg_one(const struct flyk_backend *b, int64_t m, int64_t n,
		   int64_t k, uint32_t dt, uint32_t flags, int off = 0)
{
	struct flyk_device dev = emu_dev();
	struct fly_problem p;
	memset(&p, 0, sizeof(p));
	p.op = FLY_OP_SCALED_GEMM;
	p.dtype = dt;
	p.layout = FLY_LAYOUT_NT;
	p.flags = flags;
	p.dims[0] = m;
	p.dims[1] = n;
	p.dims[2] = k;
	bool mx = dt == FLY_DT_MXFP8 || dt == FLY_DT_MXFP4;
	int64_t rb = dt == FLY_DT_MXFP4 ? k / 2 : k; /* bytes a row */
	std::vector<uint8_t> Ab(m * rb + 16), Bb(n * rb + 16);
	std::vector<uint8_t> sa(mx ? m * (k / 32) : 1);
	std::vector<uint8_t> sb(mx ? n * (k / 32) : 1);
	std::vector<uint16_t> Cb(m * n + 8), biasb(n + 8);
	uint8_t *A = Ab.data() + off, *B = Bb.data() + off;
	uint16_t *C = Cb.data() + off, *bias = biasb.data() + off;
	for (auto &x : Ab)
		x = sg_rnd(dt);
	for (auto &x : Bb)
		x = sg_rnd(dt);
	for (auto &x : sa)
		x = (uint8_t)(124 + (sg_rnd(FLY_DT_MXFP4) % 7));
	for (auto &x : sb)
		x = (uint8_t)(124 + (sg_rnd(FLY_DT_MXFP4) % 7));
	for (auto &x : biasb)
		x = rnd_bf16();
	float ts[2] = {0.75f, 1.25f};
	std::vector<double> ref(m * n);
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0;
			for (int64_t q = 0; q < k; q++)
				s += sg_host_elem(dt, A, sa.data(), k, i, q) *
				     sg_host_elem(dt, B, sb.data(), k, j, q);
			if (!mx)
				s *= (double)ts[0] * ts[1];
			if (flags & FLY_F_BIAS)
				s += flyk_bf16_to_float(bias[j]);
			ref[i * n + j] = s;
		}
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	struct flyk_scaled_gemm_args *g = &args.scaled_gemm;
	g->a = A;
	g->b = B;
	g->c = C;
	g->bias = bias;
	g->scale_a = mx ? (const void *)sa.data() : (const void *)&ts[0];
	g->scale_b = mx ? (const void *)sb.data() : (const void *)&ts[1];
	for (size_t vi = 0; vi < b->nvariants; vi++) {
		const struct flyk_variant *v = &b->variants[vi];
		if (!flyk_variant_supports(v, &p) || v->enumerate)
			continue;
		tally_seen(v->name);
		each_point(v, &dev, &p, [&](const int64_t *pt) {
			tally_ran(v->name);
			char key[200];
			key_of(v->name, &p, pt, v->nparams, key, sizeof(key));
			snprintf(key + strlen(key), sizeof(key) - strlen(key),
				 " %s%s", sg_dt_name(dt), off ? " +1" : "");
			memset(C, 0xff, (size_t)(m * n) * 2);
			misaligned = 0;
			int rc = v->launch(&dev, &p, pt, &args, NULL);
			if (!rc)
				rc = sg_cmp(C, ref);
			if (!rc && misaligned)
				rc = -EFAULT; /* a GPU would fault */
			result(rc == 0, "scaled", key, rc);
		});
	}
}

/* The scaled-GEMM shapes: each format, K tails (per tensor: K % 16 != 0;
 * MX: K % 64 == 32, half a k-tile), M and N off every tile, M = 1,
 * operands one byte (C and bias one element) off alignment, bias. */
static void sg_all(const struct flyk_backend *b)
{
	sg_one(b, 37, 45, 72, FLY_DT_FP8_E4M3, FLY_F_BIAS);
	sg_one(b, 33, 40, 27, FLY_DT_FP8_E4M3FNUZ, 0, 1);
	sg_one(b, 40, 70, 96, FLY_DT_MXFP8, FLY_F_BIAS);
	sg_one(b, 1, 33, 64, FLY_DT_MXFP4, 0, 1);
	sg_one(b, 65, 130, 96, FLY_DT_MXFP4, FLY_F_BIAS);
	sg_one(b, 130, 136, 40, FLY_DT_FP8_E4M3, 0);
	/* sg_skinny's 16-byte path (aligned, K % 16 == 0) with a K tail
	 * inside a chunk and two chunks a warp, M = 1 and 100 (two A row tiles),
	 * N off every row tile */
	sg_one(b, 1, 70, 208, FLY_DT_FP8_E4M3, FLY_F_BIAS);
	sg_one(b, 100, 150, 1040, FLY_DT_FP8_E4M3, 0);
	sg_one(b, 24, 200, 512, FLY_DT_FP8_E4M3, FLY_F_BIAS, 1);
}

/* ------------------------------------------------------------ mqa logits */

/* Whether column @p j is inside the window [ks, ke) clamped to [0, skv). */
static bool mqa_in(int32_t ks, int32_t ke, int64_t skv, int64_t j)
{
	int64_t lo = std::min<int64_t>(std::max(ks, 0), skv);
	int64_t hi = std::max<int64_t>(std::min<int64_t>(ke, skv), lo);
	return j >= lo && j < hi;
}

/* One logit @p g: inside the window within 2e-3 @p big of @p r (NaN
 * where @p r is: relu keeps a NaN score, as torch's); outside it -inf
 * where @p clean, else the poison left as it was. */
static int mqa_pos_ok(float g, double r, double big, bool in, bool clean)
{
	uint32_t u;
	memcpy(&u, &g, 4);
	if (in && std::isnan(r))
		return std::isnan(g) ? 0 : -EDOM;
	if (in)
		return fabs(g - r) <= 2e-3 * big ? 0 : -EDOM;
	if (clean)
		return isinf(g) && g < 0 ? 0 : -ERANGE;
	return u == 0xffffffffu ? 0 : -EFAULT;
}

/* A row of @p ld logits (@p skv of them columns) against its reference. */
static int mqa_row_ok(const float *g, const double *r, int32_t ks,
		      int32_t ke, int64_t skv, int64_t ld, double big,
		      bool clean)
{
	for (int64_t j = 0; j < ld; j++) {
		bool col = j < skv;
		bool in = col && mqa_in(ks, ke, skv, j);
		int rc = mqa_pos_ok(g[j], col ? r[j] : 0.0, big, in,
				    col && clean);
		if (rc)
			return rc;
	}
	return 0;
}

/* Every MQA-logits variant at every feasible point on one shape against
 * a double host reference (sum_h w relu(q . kv) * kv_scale over each
 * row's window), the logits NaN-poisoned, rows @p ld apart: inside a
 * window within 2e-3 of the largest |ref| (the case's rule, mqa_check),
 * outside it -inf under CLEAN and untouched without.  Windows: empty,
 * clamped below 0 and past skv, and ordinary.  @p dt and @p flags as the
 * key (fp8_e4m3 + FLY_F_KV_FNUZ: q fn, kv fnuz).  @p nan: a NaN code in
 * one head of query row 3 (window [21, skv) for skv 40) and in KV row 5
 * (inside row 1's window [0, 9)), whose positions must then be NaN in
 * every variant (sq >= 4, skv > 21). */
static void mqa_one(const struct flyk_backend *b, int64_t sq, int64_t skv,
		    int64_t h, int64_t d, uint32_t dt, uint32_t flags,
		    bool nan = false)
{
	struct flyk_device dev = emu_dev();
	struct fly_problem p;
	memset(&p, 0, sizeof(p));
	p.op = FLY_OP_MQA_LOGITS;
	p.dtype = dt;
	p.flags = flags;
	int64_t dims[4] = {sq, skv, h, d};
	memcpy(p.dims, dims, sizeof(dims));
	bool qfnuz = dt == FLY_DT_FP8_E4M3FNUZ;
	bool kvfnuz = qfnuz || (flags & FLY_F_KV_FNUZ);
	uint32_t qdt = qfnuz ? FLY_DT_FP8_E4M3FNUZ : FLY_DT_FP8_E4M3;
	uint32_t kdt = kvfnuz ? FLY_DT_FP8_E4M3FNUZ : FLY_DT_FP8_E4M3;
	int64_t ld = skv + 3; /* logits rows apart */
	std::vector<uint8_t> Q(sq * h * d + 1), KV(skv * d);
	std::vector<float> sc(skv), w(sq * h), out(sq * ld);
	std::vector<int32_t> ks(sq), ke(sq);
	/* q off alignment (mqa_simt takes an aligned kv only) */
	uint8_t *q = Q.data() + 1, *kv = KV.data();
	for (auto &x : Q)
		x = sg_rnd(qdt);
	for (auto &x : KV)
		x = sg_rnd(kdt);
	if (nan) {
		q[(3 * h + h - 1) * d + d / 2] = qfnuz ? 0x80 : 0x7f;
		kv[5 * d + 1] = kvfnuz ? 0x80 : 0x7f;
	}
	for (auto &x : sc)
		x = 0.5f + flyk_bf16_to_float(rnd_bf16()) / 2 + 0.5f;
	for (auto &x : w)
		x = flyk_bf16_to_float(rnd_bf16());
	for (int64_t i = 0; i < sq; i++) { /* ordinary, < 0, empty, > skv */
		ks[i] = (int32_t)(i % 4 == 1 ? -5 : (i * 7) % skv);
		ke[i] = (int32_t)(ks[i] + 1 + (i * 13) % skv);
		if (i % 4 == 2)
			ke[i] = ks[i];
		if (i % 4 == 3)
			ke[i] = (int32_t)skv + 9;
	}
	std::vector<double> ref(sq * skv, 0.0);
	double big = 0;
	for (int64_t i = 0; i < sq; i++)
		for (int64_t j = 0; j < skv; j++) {
			if (!mqa_in(ks[i], ke[i], skv, j))
				continue;
			double acc = 0;
			for (int64_t hh = 0; hh < h; hh++) {
				double dot = 0;
				for (int64_t k = 0; k < d; k++)
					dot += sg_e4m3(q[(i * h + hh) * d + k],
						       qfnuz) *
					       sg_e4m3(kv[j * d + k], kvfnuz);
				acc += std::max(dot, 0.0) * w[i * h + hh];
			}
			ref[i * skv + j] = acc * sc[j];
			big = std::max(big, fabs(ref[i * skv + j]));
		}
	union flyk_args args;
	memset(&args, 0, sizeof(args));
	struct flyk_mqa_logits_args *a = &args.mqa_logits;
	a->q = q;
	a->kv = kv;
	a->kv_scale = sc.data();
	a->weights = w.data();
	a->ks = ks.data();
	a->ke = ke.data();
	a->logits = out.data();
	a->ld = ld;
	for (size_t vi = 0; vi < b->nvariants; vi++) {
		const struct flyk_variant *v = &b->variants[vi];
		if (!flyk_variant_supports(v, &p) || v->enumerate)
			continue;
		tally_seen(v->name);
		each_point(v, &dev, &p, [&](const int64_t *pt) {
			tally_ran(v->name);
			char key[200];
			key_of(v->name, &p, pt, v->nparams, key, sizeof(key));
			snprintf(key + strlen(key), sizeof(key) - strlen(key),
				 " %s%s", qfnuz ? "fnuz" : kvfnuz ? "fn/kv-fnuz"
							   : "fn",
				 nan ? " nan" : "");
			memset(out.data(), 0xff, out.size() * 4);
			misaligned = 0;
			int rc = v->launch(&dev, &p, pt, &args, NULL);
			bool clean = flags & FLY_F_CLEAN;
			for (int64_t i = 0; !rc && i < sq; i++)
				rc = mqa_row_ok(&out[i * ld], &ref[i * skv],
						ks[i], ke[i], skv, ld, big,
						clean);
			if (!rc && misaligned)
				rc = -EFAULT;
			result(rc == 0, "mqa", key, rc);
		});
	}
}

/* MQA shapes: each format pairing (fn, fnuz, q fn with kv fnuz), CLEAN on
 * and off, heads not a multiple of 32, d 32 and 128, the wgmma shape
 * (h 64, d 128), skv off every block width, q a byte off alignment. */
static void mqa_all(const struct flyk_backend *b)
{
	mqa_one(b, 6, 70, 20, 32, FLY_DT_FP8_E4M3, FLY_F_CLEAN);
	mqa_one(b, 5, 45, 40, 32, FLY_DT_FP8_E4M3FNUZ, 0);
	mqa_one(b, 4, 130, 64, 128, FLY_DT_FP8_E4M3,
		FLY_F_CLEAN | FLY_F_KV_FNUZ);
	/* NaN codes propagate (mqa_relu), each format */
	mqa_one(b, 4, 40, 20, 32, FLY_DT_FP8_E4M3, FLY_F_CLEAN, true);
	mqa_one(b, 4, 40, 20, 32, FLY_DT_FP8_E4M3FNUZ, 0, true);
	mqa_one(b, 4, 40, 20, 32, FLY_DT_FP8_E4M3, FLY_F_KV_FNUZ, true);
}

#if FLYK_AMD
/* ------------------------------------------------------------ MFMA test */

/* The test's own maps from (lane l, element or register e) to the matrix
 * element it holds, forward where the emulator's go backward; anchored in
 * mfma_unit to entries printed by AMD's Matrix Instruction Calculator. */
static void mft_a(int n, int l, int e, int *i, int *k)
{
	*i = l % n;
	*k = 4 * (l / n) + e;
}

static void mft_b(int n, int l, int e, int *k, int *j)
{
	*k = 4 * (l / n) + e;
	*j = l % n;
}

static void mft_d(int n, int l, int v, int *i, int *j)
{
	*j = l % n;
	*i = n == 32 ? 8 * (v / 4) + 4 * (l / 32) + v % 4 : 4 * (l / 16) + v;
}

/* Each wave w of the block: D_w = A_w B_w + C_w, row-major n x nk, nk x n
 * and n x n, loaded into and stored from the registers by the maps. */
template <int N>
__global__ void mfma_kernel(const uint16_t *A, const uint16_t *B,
			    const float *C, float *D)
{
	enum { NK = 64 / N * 4, NR = N * N / 64 };
	int w = threadIdx.x / 64, l = threadIdx.x % 64, i, j, k;
	A += w * N * NK;
	B += w * NK * N;
	C += w * N * N;
	D += w * N * N;
	flyk_emu_short4 a, b;
	for (int e = 0; e < 4; e++) {
		mft_a(N, l, e, &i, &k);
		a[e] = (short)A[i * NK + k];
		mft_b(N, l, e, &k, &j);
		b[e] = (short)B[k * N + j];
	}
	float acc[NR];
	for (int v = 0; v < NR; v++) {
		mft_d(N, l, v, &i, &j);
		acc[v] = C[i * N + j];
	}
	if constexpr (N == 32) {
		flyk_emu_float16 c;
		memcpy(&c, acc, sizeof(c));
		c = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
		memcpy(acc, &c, sizeof(c));
	} else {
		flyk_emu_float4 c;
		memcpy(&c, acc, sizeof(c));
		c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
		memcpy(acc, &c, sizeof(c));
	}
	for (int v = 0; v < NR; v++) {
		mft_d(N, l, v, &i, &j);
		D[i * N + j] = acc[v];
	}
}

/* Two waves of random bf16 operands against a plain matrix product. */
template <int N> static void mfma_product(void)
{
	enum { NK = 64 / N * 4, W = 2 };
	std::vector<uint16_t> A(W * N * NK), B(W * NK * N);
	std::vector<float> C(W * N * N), D(W * N * N, NAN);
	for (auto &x : A)
		x = rnd_bf16();
	for (auto &x : B)
		x = rnd_bf16();
	for (auto &x : C)
		x = flyk_bf16_to_float(rnd_bf16());
	FLYK_GO(1, 64 * W, 0, 0, mfma_kernel<N>)
	(A.data(), B.data(), C.data(), D.data());
	int bad = 0;
	for (int w = 0; w < W; w++)
		for (int i = 0; i < N; i++)
			for (int j = 0; j < N; j++) {
				double r = C[(w * N + i) * N + j];
				for (int k = 0; k < NK; k++)
					r += (double)flyk_bf16_to_float(
						 A[(w * N + i) * NK + k]) *
					     flyk_bf16_to_float(
						 B[(w * NK + k) * N + j]);
				double e = fabs(D[(w * N + i) * N + j] - r);
				bad += !(e <= 1e-5);
			}
	result(bad == 0, "mfma", N == 32 ? "32x32x8 bf16" : "16x16x16 bf16",
	       bad);
}

/* fp8: the test's forward maps (lane l, byte e of its 64-bit operand). */
static void mft8_ab(int n, int l, int e, int *idx, int *k)
{
	*idx = l % n;
	*k = 8 * (l / n) + e;
}

/* Each wave w: D_w = A_w B_w + C_w on fnuz bytes (row-major n x nk,
 * nk x n), operands packed by mft8_ab, D by mft_d. */
template <int N>
__global__ void mfma8_kernel(const uint8_t *A, const uint8_t *B,
			     const float *C, float *D)
{
	enum { NK = 64 / N * 8, NR = N * N / 64 };
	int w = threadIdx.x / 64, l = threadIdx.x % 64, i, j, k;
	A += w * N * NK;
	B += w * NK * N;
	C += w * N * N;
	D += w * N * N;
	uint64_t a = 0, b = 0;
	for (int e = 0; e < 8; e++) {
		mft8_ab(N, l, e, &i, &k);
		a |= (uint64_t)A[i * NK + k] << (8 * e);
		mft8_ab(N, l, e, &j, &k);
		b |= (uint64_t)B[k * N + j] << (8 * e);
	}
	float acc[NR];
	for (int v = 0; v < NR; v++) {
		mft_d(N, l, v, &i, &j);
		acc[v] = C[i * N + j];
	}
	if constexpr (N == 32) {
		flyk_emu_float16 c;
		memcpy(&c, acc, sizeof(c));
		c = __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8((long)a, (long)b,
							      c, 0, 0, 0);
		memcpy(acc, &c, sizeof(c));
	} else {
		flyk_emu_float4 c;
		memcpy(&c, acc, sizeof(c));
		c = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8((long)a, (long)b,
							      c, 0, 0, 0);
		memcpy(acc, &c, sizeof(c));
	}
	for (int v = 0; v < NR; v++) {
		mft_d(N, l, v, &i, &j);
		D[i * N + j] = acc[v];
	}
}

/* A random fnuz byte, never the NaN (0x80). */
static uint8_t rnd_fnuz(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	uint8_t b = (uint8_t)(rng >> 40);
	return b == 0x80 ? 0 : b;
}

/* Two waves of random fnuz operands (every finite code, subnormals
 * included) against a plain product in double: within 2^-20 of the sum
 * of the magnitudes (fp32 summation of exact products). */
template <int N> static void mfma8_product(void)
{
	enum { NK = 64 / N * 8, W = 2 };
	std::vector<uint8_t> A(W * N * NK), B(W * NK * N);
	std::vector<float> C(W * N * N), D(W * N * N, NAN);
	for (auto &x : A)
		x = rnd_fnuz();
	for (auto &x : B)
		x = rnd_fnuz();
	for (auto &x : C)
		x = fnuz_f32(rnd_fnuz());
	FLYK_GO(1, 64 * W, 0, 0, mfma8_kernel<N>)
	(A.data(), B.data(), C.data(), D.data());
	int bad = 0;
	for (int w = 0; w < W; w++)
		for (int i = 0; i < N; i++)
			for (int j = 0; j < N; j++) {
				double r = C[(w * N + i) * N + j], mag = fabs(r);
				for (int k = 0; k < NK; k++) {
					double t = (double)fnuz_f32(
						       A[(w * N + i) * NK + k]) *
						   fnuz_f32(B[(w * NK + k) * N + j]);
					r += t;
					mag += fabs(t);
				}
				double e = fabs(D[(w * N + i) * N + j] - r);
				bad += !(e <= mag * 0x1p-20);
			}
	result(bad == 0, "mfma", N == 32 ? "32x32x16 fp8 fnuz" : "16x16x32 fp8 fnuz",
	       bad);
}

/* The fnuz decoding at codes of the format's table: {byte, value}. */
static void fnuz_unit(void)
{
	static const struct {
		unsigned b;
		float v;
	} at[] = {
	    {0x00, 0.f},	  {0x01, 0x1p-10f}, {0x07, 7 * 0x1p-10f},
	    {0x08, 0x1p-7f},	  {0x40, 1.f},	    {0x44, 1.5f},
	    {0x7f, 240.f},	  {0xc0, -1.f},	    {0xff, -240.f},
	};
	int bad = 0;
	for (const auto &t : at)
		bad += fnuz_f32(t.b) != t.v;
	bad += !isnan(fnuz_f32(0x80));
	result(bad == 0, "mfma", "fp8 fnuz codes", bad);
}

/* prim/mfma.h's re-encodings into fnuz, at every code: an fn byte to the
 * fnuz byte of half its value (-0 to +0, NaN to NaN), four at once in
 * every byte position; an e2m1 code to the fnuz byte of its value. */
static void fnuz_reencode_unit(void)
{
	int bad = 0;
	for (unsigned b = 0; b < 256; b++)
		for (int pos = 0; pos < 4; pos++) {
			uint32_t w = 0x3c3c3c3cu & ~(0xffu << (8 * pos));
			uint32_t o = flyk_mfma8_fn4(w | b << (8 * pos));
			double f = sg_e4m3(b, false);
			double g = fnuz_f32((o >> (8 * pos)) & 0xffu);
			bad += f == f ? !(g == f / 2) : !(g != g);
			bad += (o & ~(0xffu << (8 * pos))) != w; /* 0x3c kept */
		}
	for (unsigned c = 0; c < 16; c++)
		bad += fnuz_f32(flyk_mfma8_e2m1(c)) != sg_e2m1(c);
	result(bad == 0, "mfma", "fp8 fn and e2m1 to fnuz", bad);
}

/* The maps at entries of the calculator's --matrix-layout tables (-a
 * cdna3), lanes past 31 included: {n, matrix, lane, e, row, col}. */
static void mfma_unit(void)
{
	static const int at[][6] = {
	    {32, 'A', 33, 1, 1, 5},   {32, 'A', 47, 3, 15, 7},
	    {32, 'A', 17, 0, 17, 0},  {32, 'B', 33, 0, 4, 1},
	    {32, 'B', 63, 2, 6, 31},  {32, 'D', 33, 5, 13, 1},
	    {32, 'D', 47, 14, 30, 15}, {32, 'D', 17, 8, 16, 17},
	    {16, 'A', 17, 0, 1, 4},   {16, 'A', 47, 2, 15, 10},
	    {16, 'B', 33, 3, 11, 1},  {16, 'B', 63, 1, 13, 15},
	    {16, 'D', 47, 1, 9, 15},  {16, 'D', 63, 3, 15, 15},
	};
	int bad = 0;
	for (const auto &t : at) {
		int r, c;
		if (t[1] == 'A')
			mft_a(t[0], t[2], t[3], &r, &c);
		else if (t[1] == 'B')
			mft_b(t[0], t[2], t[3], &r, &c);
		else
			mft_d(t[0], t[2], t[3], &r, &c);
		bad += r != t[4] || c != t[5];
	}
	result(bad == 0, "mfma", "layout entries", bad);
	mfma_product<32>();
	mfma_product<16>();
	/* fp8 (gfx940): lane 33 byte 5 of A is row 1, k 13 on 32x32x16;
	 * lane 47 byte 2 is row 15, k 18 on 16x16x32 */
	int r, c;
	mft8_ab(32, 33, 5, &r, &c);
	bad = r != 1 || c != 13;
	mft8_ab(16, 47, 2, &r, &c);
	bad += r != 15 || c != 18;
	result(bad == 0, "mfma", "fp8 layout entries", bad);
	fnuz_unit();
	fnuz_reencode_unit();
	mfma8_product<32>();
	mfma8_product<16>();
}
#endif

int main(int argc, char **argv)
{
	int quick = argc > 1 && !strcmp(argv[1], "quick");
	if (argc > 1 && !strcmp(argv[1], "amd")) /* every point, MFMA sampled */
		mfma_every = 3;
	struct flyk_backend b;
	memset(&b, 0, sizeof(b));
	std::vector<struct flyk_variant> vs(flyk_gpu_gemm_op.variants,
					    flyk_gpu_gemm_op.variants +
						flyk_gpu_gemm_op.nvariants);
	vs.insert(vs.end(), flyk_gpu_grouped_gemm_op.variants,
		  flyk_gpu_grouped_gemm_op.variants +
		      flyk_gpu_grouped_gemm_op.nvariants);
	vs.insert(vs.end(), flyk_gpu_attention_op.variants,
		  flyk_gpu_attention_op.variants +
		      flyk_gpu_attention_op.nvariants);
	vs.insert(vs.end(), flyk_gpu_mqa_logits_op.variants,
		  flyk_gpu_mqa_logits_op.variants +
		      flyk_gpu_mqa_logits_op.nvariants);
	vs.insert(vs.end(), flyk_gpu_scaled_gemm_op.variants,
		  flyk_gpu_scaled_gemm_op.variants +
		      flyk_gpu_scaled_gemm_op.nvariants);
	b.variants = vs.data();
	b.nvariants = vs.size();
	if (argc > 1 && !strncmp(argv[1], "attn", 4)) { /* attention only */
		attn_all(&b, !strcmp(argv[1], "attn-quick"));
		nfail += tally_report();
		printf("%d passed, %d failed\n", npass, nfail);
		return nfail ? 1 : 0;
	}
#if FLYK_AMD
	if (argc > 1 && !strcmp(argv[1], "mfma")) { /* the MFMA model only */
		mfma_unit();
		printf("%d passed, %d failed\n", npass, nfail);
		return nfail ? 1 : 0;
	}
#endif
	if (argc > 1 && !strcmp(argv[1], "scaled")) { /* scaled GEMM only */
		sg_all(&b);
		mqa_all(&b);
		nfail += tally_report();
		printf("%d passed, %d failed\n", npass, nfail);
		return nfail ? 1 : 0;
	}
	if (argc > 1 && !strcmp(argv[1], "compare")) { /* the check only */
		compare_rule();
		printf("%d passed, %d failed\n", npass, nfail);
		return nfail ? 1 : 0;
	}
	int st = quick ? 5 : 1;
	/* small shapes: tails in M, N and K; split-K (4 SMs); swizzle */
	gemm_one(&b, 37, 72, 48, FLY_LAYOUT_NT, 0, st);
	gemm_one(&b, 37, 72, 48, FLY_LAYOUT_NN, FLY_F_BIAS | FLY_F_SCALE, st);
	gemm_one(&b, 5, 130, 264, FLY_LAYOUT_NT, FLY_F_BIAS, st);
	gemm_one(&b, 300, 136, 40, FLY_LAYOUT_NT, 0, quick ? 7 : 1);
	gemm_one(&b, 130, 264, 72, FLY_LAYOUT_NN, FLY_F_SCALE, quick ? 7 : 1);
	gemm_one(&b, 9, 20, 13, FLY_LAYOUT_NT, FLY_F_BIAS, 1); /* K % 8 */
	/* split_k 2, 4 and 8 (each split keeps >= 2 k-tiles of 64) */
	gemm_one(&b, 20, 72, 1024, FLY_LAYOUT_NT, FLY_F_BIAS | FLY_F_SCALE, 1);
	gemm_one(&b, 20, 72, 1024, FLY_LAYOUT_NN, FLY_F_BIAS, st);
	/* M * N odd: split s's partials start odd-aligned (a float2 store
	 * there faulted on the H200) */
	gemm_one(&b, 21, 73, 1032, FLY_LAYOUT_NT, 0, 1);
	/* tall enough for the 64-256 row wgmma tiles, K over 6 k-tiles
	 * (the stage ring wraps), tails in M, N and K */
	gemm_one(&b, 130, 136, 328, FLY_LAYOUT_NT, FLY_F_BIAS | FLY_F_SCALE,
		 quick ? 8 : 1);
#if FLYK_AMD
	/* A, B, C and bias one element past 16-byte alignment, K % 8 != 0:
	 * the AMD variants take any alignment (the MFMA engine's element
	 * loads) */
	gemm_one(&b, 33, 40, 27, FLY_LAYOUT_NT, FLY_F_BIAS, 1, 1);
	gemm_one(&b, 33, 40, 27, FLY_LAYOUT_NN, FLY_F_SCALE, 1, 1);
#endif
	compare_rule();
#if FLYK_AMD
	mfma_unit();
#endif
	printf("# gemm: %d passed, %d failed\n", npass, nfail);
	sg_all(&b);
	mqa_all(&b);
	printf("# scaled gemm, mqa: %d passed, %d failed\n", npass, nfail);
	grouped_one(&b, {64, 64, 64, 64}, 72, 48, st);
	grouped_one(&b, {0, 130, 0, 17, 129, 1, 64, 0}, 64, 40, st);
	grouped_one(&b, {1, 0, 0, 0, 0}, 136, 16, st);
	grouped_one(&b, {333, 1, 2, 3, 64, 7}, 72, 24, quick ? 7 : 1);
	grouped_one(&b, {100, 0, 37, 130}, 136, 264, quick ? 6 : 1);
#if FLYK_AMD
	grouped_one(&b, {5, 0, 40, 3}, 37, 19, st); /* K, N odd */
#endif
	if (!quick) /* quick: attention apart (attn-quick) */
		attn_all(&b, 0);
	nfail += tally_report();
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
