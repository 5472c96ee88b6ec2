/*
 * backend.hip -- the GPU backend: device open/close, fingerprint, the
 * benchmark case (buffers, random fill, poisoning, L2 cleaning by READING a
 * buffer of >= 4x the largest cache -- L2, or AMD's Infinity Cache -- sized
 * by flyk_flush_bytes(), event timing) and flyk_gpu_backend(), whose
 * variant table is assembled from the op modules listed in gpu_ops[].
 *
 * Owns: struct flyk_device and struct flyk_case memory, the device's
 * stream, events and flush buffer.  Thread: a device and its cases belong
 * to one thread at a time; flyk_gpu_backend() may be called from any
 * thread (the table is built once, under a C++ magic static).
 *
 * Adding an op module: it defines its `struct flyk_gpu_op`; gemm and
 * grouped_gemm are already referenced weakly below, so they join the table
 * by being linked in.  Any other op is one line in gpu_ops[].
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_int.h"
#include "prim/flyk_gpu.h"
#include "prim/rand.h"

/* Op modules not written yet resolve to NULL and are skipped. */
#pragma weak flyk_gpu_gemm_op
#pragma weak flyk_gpu_grouped_gemm_op
/* kernels/testing/gpu_faulty.hip: only in the test build of the library
 * (BUILD/testing/), NULL in the production one. */
#pragma weak flyk_gpu_testing_op
#pragma weak flyk_vendor_blas
#pragma weak flyk_cudnn_attn_version
#pragma weak flyk_cudnn_attn_warm

/* Not const: hipcc would place a const table on the device too. */
static const struct flyk_gpu_op *gpu_ops[] = {
	&flyk_gpu_rmsnorm_op,
	&flyk_gpu_topk_op,
	&flyk_gpu_gemm_op,
	&flyk_gpu_grouped_gemm_op,
	&flyk_gpu_mqa_logits_op,
	&flyk_gpu_scaled_gemm_op,
	&flyk_gpu_attention_op,
	&flyk_gpu_testing_op, /* last: variants only, no cases of its own */
};
#define NOPS (sizeof(gpu_ops) / sizeof(gpu_ops[0]))

static int hip_err(hipError_t e)
{
	if (e == hipSuccess)
		return 0;
	if (e == hipErrorInvalidValue)
		return -EINVAL;
	return -EIO;
}

/* ------------------------------------------------------------ kernels */

/* Read the whole flush buffer (16-byte loads), fold it into one float and
 * write that to *sink, so the reads cannot be optimised away. */
__global__ void flyk_flush_kernel(const uint4 *buf, size_t n, float *sink)
{
	float acc = 0.f;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		uint4 v = buf[i];
		acc += (float)(v.x ^ v.y ^ v.z ^ v.w);
	}
	if (acc == 1.2345f) /* practically never: keeps the loads alive */
		*sink = acc;
	if (blockIdx.x == 0 && threadIdx.x == 0)
		*sink = acc;
}

__global__ void flyk_fill_kernel(void *buf, size_t n, uint32_t dtype,
				 float lo, float hi, uint64_t seed)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		uint64_t r = flyk_rand64(seed, i);
		float u = (float)(r >> 40) * (1.0f / 16777216.0f);
		float f = lo + (hi - lo) * u;
		if (dtype == FLY_DT_FP32)
			((float *)buf)[i] = f;
		else if (dtype == FLY_DT_FP16)
			((uint16_t *)buf)[i] = flyk_df2h(f);
		else
			((uint16_t *)buf)[i] = flyk_df2b(f);
	}
}

/* ------------------------------------------------------------ helpers */

extern "C" int flyk_gpu_fill_random(struct flyk_device *dev, void *buf,
				    size_t n, uint32_t dtype, float lo,
				    float hi, uint64_t seed)
{
	if (!flyk_dtype_bytes(dtype))
		return -EOPNOTSUPP;
	if (n == 0)
		return 0;
	size_t blocks = (n + 255) / 256;
	if (blocks > (size_t)dev->sms * 32)
		blocks = (size_t)dev->sms * 32;
	flyk_fill_kernel<<<(unsigned)blocks, 256, 0,
			   (hipStream_t)dev->stream>>>(buf, n, dtype, lo, hi,
						       seed);
	return hip_err(hipGetLastError());
}

extern "C" int flyk_gpu_download(struct flyk_device *dev, void *host,
				 const void *dbuf, size_t bytes)
{
	hipStream_t s = (hipStream_t)dev->stream;
	hipError_t e = hipMemcpyAsync(host, dbuf, bytes, hipMemcpyDeviceToHost,
				      s);
	if (e == hipSuccess)
		e = hipStreamSynchronize(s);
	return hip_err(e);
}

extern "C" int flyk_gpu_upload(struct flyk_device *dev, void *dbuf,
			       const void *host, size_t bytes)
{
	hipStream_t s = (hipStream_t)dev->stream;
	hipError_t e = hipMemcpyAsync(dbuf, host, bytes, hipMemcpyHostToDevice,
				      s);
	if (e == hipSuccess)
		e = hipStreamSynchronize(s);
	return hip_err(e);
}

extern "C" int flyk_gpu_case_alloc(struct flyk_case *c, size_t bytes,
				   int is_output, void **out)
{
	if (c->nbuf >= FLYK_CASE_BUFS)
		return -ENOMEM;
	void *p = NULL;
	if (hipMalloc(&p, bytes ? bytes : 16) != hipSuccess)
		return -ENOMEM;
	int i = c->nbuf++;
	c->buf[i] = p;
	c->bytes[i] = bytes;
	c->is_output[i] = is_output;
	*out = p;
	return i;
}

extern "C" float flyk_half_to_float(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f,
		 m = h & 0x3ffu, u;
	if (e == 0x1f) {
		u = s | 0x7f800000u | (m << 13);
	} else if (e == 0) {
		if (m == 0) {
			u = s;
		} else { /* subnormal: normalise */
			e = 113;
			while (!(m & 0x400u)) {
				m <<= 1;
				e--;
			}
			u = s | (e << 23) | ((m & 0x3ffu) << 13);
		}
	} else {
		u = s | ((e + 112) << 23) | (m << 13);
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

extern "C" float flyk_bf16_to_float(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

extern "C" uint16_t flyk_float_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

extern "C" uint16_t flyk_float_to_half(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t s = (u >> 16) & 0x8000u;
	int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
	uint32_t m = u & 0x7fffffu;
	if (((u >> 23) & 0xff) == 0xff)
		return (uint16_t)(s | 0x7c00u | (m ? 0x200u : 0));
	if (e >= 0x1f)
		return (uint16_t)(s | 0x7c00u);
	if (e <= 0) {
		if (e < -10)
			return (uint16_t)s;
		m |= 0x800000u;
		uint32_t shift = (uint32_t)(14 - e);
		uint32_t h = m >> shift, rem = m & ((1u << shift) - 1),
			 half = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1)))
			h++;
		return (uint16_t)(s | h);
	}
	uint32_t h = s | ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++;
	return (uint16_t)h;
}

/* ------------------------------------------------------------ device */

static void gpu_close(struct flyk_device *dev)
{
	if (!dev)
		return;
	if (dev->flush_buf)
		(void)hipFree(dev->flush_buf);
	if (dev->flush_sink)
		(void)hipFree(dev->flush_sink);
	if (dev->ev_start)
		(void)hipEventDestroy((hipEvent_t)dev->ev_start);
	if (dev->ev_stop)
		(void)hipEventDestroy((hipEvent_t)dev->ev_stop);
	if (dev->stream)
		(void)hipStreamDestroy((hipStream_t)dev->stream);
	free(dev);
}

static void gpu_fill_props(struct flyk_device *dev,
			   const hipDeviceProp_t *pr)
{
	int v = 0;
	dev->sms = pr->multiProcessorCount;
	dev->warp = pr->warpSize;
	snprintf(dev->name, sizeof(dev->name), "%.*s",
		 (int)sizeof(dev->name) - 1, pr->name);
#if FLYK_AMD
	snprintf(dev->arch, sizeof(dev->arch), "%.*s",
		 (int)strcspn(pr->gcnArchName, ":"), pr->gcnArchName);
	/* HIP reports the L2 only (4 MiB on MI300X); the Infinity Cache
	 * behind it: the larger of what the driver's KFD topology lists and
	 * the table by gfx name. */
	dev->llc_bytes = flyk_kfd_cache_bytes(NULL, pr->pciDomainID,
					      pr->pciBusID, pr->pciDeviceID);
	if (dev->llc_bytes < flyk_gfx_llc_bytes(dev->arch))
		dev->llc_bytes = flyk_gfx_llc_bytes(dev->arch);
#else
	dev->cc_major = pr->major;
	dev->cc_minor = pr->minor;
	snprintf(dev->arch, sizeof(dev->arch), "sm_%d%d", pr->major,
		 pr->minor);
#endif
	if (hipDeviceGetAttribute(&v, hipDeviceAttributeClockRate,
				  dev->index) == hipSuccess)
		dev->clock_mhz = v / 1000;
	if (hipDeviceGetAttribute(&v, hipDeviceAttributeMemoryClockRate,
				  dev->index) == hipSuccess)
		dev->mem_clock_mhz = v / 1000;
	if (hipDeviceGetAttribute(&v, hipDeviceAttributeL2CacheSize,
				  dev->index) == hipSuccess)
		dev->l2_bytes = (size_t)v;
	if (hipDeviceGetAttribute(&v,
				  hipDeviceAttributeSharedMemPerBlockOptin,
				  dev->index) == hipSuccess && v > 0)
		dev->smem_per_block_optin = (size_t)v;
	else
		dev->smem_per_block_optin = pr->sharedMemPerBlock;
	(void)hipDriverGetVersion(&dev->driver_version);
	(void)hipRuntimeGetVersion(&dev->runtime_version);
}

int flyk_gpu_device_query(int index, struct flyk_device *dev)
{
	int n = 0;
	memset(dev, 0, sizeof(*dev));
	if (hipGetDeviceCount(&n) != hipSuccess || index < 0 || index >= n)
		return -ENODEV;
	hipDeviceProp_t pr;
	if (hipGetDeviceProperties(&pr, index) != hipSuccess)
		return -ENODEV;
	dev->index = index;
	gpu_fill_props(dev, &pr);
	return 0;
}

static int gpu_open(int index, struct flyk_device **out)
{
	int n = 0;
	*out = NULL;
	if (hipGetDeviceCount(&n) != hipSuccess || index < 0 || index >= n)
		return -ENODEV;
	if (hipSetDevice(index) != hipSuccess)
		return -ENODEV;
	struct flyk_device *dev =
		(struct flyk_device *)calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->index = index;
	hipDeviceProp_t pr;
	int rc = -ENODEV;
	hipStream_t s;
	hipEvent_t e0, e1;
	if (hipGetDeviceProperties(&pr, index) != hipSuccess)
		goto fail;
	gpu_fill_props(dev, &pr);
#if FLYK_AMD
	/* ROCm SMI (power cap, amdgpu version) for the fingerprint: here in
	 * the worker only, not in flyk_gpu_device_query(), which the launch
	 * API runs inside the serving process. */
	dev->has_smi = flyk_smi_query(NULL, pr.pciDomainID, pr.pciBusID,
				      pr.pciDeviceID, &dev->smi) == 0;
#endif
	rc = -ENOMEM;
	if (hipStreamCreateWithFlags(&s, hipStreamNonBlocking) != hipSuccess)
		goto fail;
	dev->stream = s;
	if (hipEventCreate(&e0) != hipSuccess)
		goto fail;
	dev->ev_start = e0;
	if (hipEventCreate(&e1) != hipSuccess)
		goto fail;
	dev->ev_stop = e1;
	dev->flush_bytes = flyk_flush_bytes(dev->l2_bytes, dev->llc_bytes);
	if (hipMalloc(&dev->flush_buf, dev->flush_bytes) != hipSuccess)
		goto fail;
	if (hipMalloc((void **)&dev->flush_sink, sizeof(float)) != hipSuccess)
		goto fail;
	/* Defined contents once; the flush only ever reads them. */
	if (hipMemset(dev->flush_buf, 0x3c, dev->flush_bytes) != hipSuccess ||
	    hipDeviceSynchronize() != hipSuccess)
		goto fail;
	/* cuDNN's first use at the worker's start, not in a key's budget */
	if (flyk_cudnn_attn_warm)
		(void)flyk_cudnn_attn_warm();
	*out = dev;
	return 0;
fail:
	gpu_close(dev);
	return rc;
}

static int gpu_fingerprint(const struct flyk_device *dev, char *buf,
			   size_t cap)
{
	char blas[48] = "none", dnn[48] = "none";
	if (flyk_vendor_blas)
		(void)flyk_vendor_blas(blas, sizeof(blas));
	/* a cuDNN upgrade is a new identity too: its engine indices are
	 * another version's */
	if (flyk_cudnn_attn_version)
		(void)flyk_cudnn_attn_version(dnn, sizeof(dnn));
	struct flyk_devid id;
	memset(&id, 0, sizeof(id));
	id.amd = FLYK_AMD;
	id.arch = dev->arch;
	id.name = dev->name;
	id.units = dev->sms;
	id.clock_mhz = dev->clock_mhz;
	id.mem_clock_mhz = dev->mem_clock_mhz;
	id.driver_version = dev->driver_version;
	id.runtime_version = dev->runtime_version;
	id.l2_bytes = dev->l2_bytes;
	id.llc_bytes = dev->llc_bytes;
	id.lib = flyk_libver();
	id.blas = blas;
	id.dnn = dnn;
	id.smi = dev->has_smi ? &dev->smi : NULL;
	return flyk_devid_fingerprint(&id, buf, cap);
}

/* ------------------------------------------------------------ cases */

/* The op's module (one without a setup -- the test-only variants --
 * contributes variants, never cases). */
static const struct flyk_gpu_op *gpu_find_op(uint32_t op)
{
	for (size_t i = 0; i < NOPS; i++)
		if (gpu_ops[i] && gpu_ops[i]->op == op && gpu_ops[i]->setup)
			return gpu_ops[i];
	return NULL;
}

static void gpu_case_free(struct flyk_case *c)
{
	if (!c)
		return;
	if (c->op && c->op->fini)
		c->op->fini(c);
	for (int i = 0; i < c->nbuf; i++)
		(void)hipFree(c->buf[i]);
	free(c->timed_seen);
	free(c);
}

static int gpu_case_new(struct flyk_device *dev, const struct fly_problem *p,
			uint64_t seed, struct flyk_case **out)
{
	const struct flyk_gpu_op *op = gpu_find_op(p->op);
	*out = NULL;
	if (!op)
		return -EOPNOTSUPP;
	struct flyk_case *c = (struct flyk_case *)calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->dev = dev;
	c->p = *p;
	c->op = op;
	int rc = op->setup(c, seed);
	if (rc == 0)
		rc = hip_err(hipStreamSynchronize((hipStream_t)dev->stream));
	if (rc) {
		gpu_case_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Every output buffer of @p c to 0xFF bytes (NaN), queued on its stream. */
static int poison_outputs(struct flyk_case *c)
{
	hipStream_t s = (hipStream_t)c->dev->stream;
	for (int i = 0; i < c->nbuf; i++)
		if (c->is_output[i] &&
		    hipMemsetAsync(c->buf[i], 0xff, c->bytes[i], s) !=
			    hipSuccess)
			return -EIO;
	return 0;
}

static int gpu_case_poison(struct flyk_case *c)
{
	int rc = poison_outputs(c);
	if (rc)
		return rc;
	c->checking = 1;
	return hip_err(hipStreamSynchronize((hipStream_t)c->dev->stream));
}

/* Clean the L2 by reading the flush buffer (not a memset: dirty lines'
 * write-back would land inside the timed region). */
static int gpu_flush(struct flyk_device *dev)
{
	flyk_flush_kernel<<<(unsigned)dev->sms * 4, 512, 0,
			    (hipStream_t)dev->stream>>>(
		(const uint4 *)dev->flush_buf, dev->flush_bytes / 16,
		dev->flush_sink);
	return hip_err(hipGetLastError());
}

/* After a failed launch or wait: a sticky error (illegal address or
 * instruction, misaligned access, a trap) leaves the context unusable, and
 * every later call fails with it.  Then there is nothing to report but the
 * culprit: say which variant and exit, so the daemon's worker supervision
 * records the candidate in flight as faulted and starts a fresh worker
 * (with a fresh context) for the rest.  A one-off error returns -EIO. */
static int gpu_fail(const struct flyk_variant *v, const int64_t *params,
		    int nparams, hipError_t first)
{
	hipError_t e = hipDeviceSynchronize();
	if (e == hipSuccess)
		return -EIO;
	fprintf(stderr, "flyk: GPU context lost (%s; then %s) in %s(",
		hipGetErrorString(first), hipGetErrorString(e), v->name);
	for (int i = 0; i < nparams; i++)
		fprintf(stderr, "%s%lld", i ? "," : "", (long long)params[i]);
	fprintf(stderr, "): exiting\n");
	fflush(stderr);
	_exit(70);
}

/* 1 the first time candidate @p v / @p params asks for a timed call of
 * case @p c (then it is remembered), 0 after that, -ENOMEM. */
static int timed_first(struct flyk_case *c, const struct flyk_variant *v,
		       const int64_t *params)
{
	uint32_t np = v->nparams < FLY_PARAMS_MAX ? v->nparams : FLY_PARAMS_MAX;
	size_t bytes = np * sizeof(int64_t);
	for (int i = 0; i < c->ntimed_seen; i++)
		if (c->timed_seen[i].v == v &&
		    memcmp(c->timed_seen[i].params, params, bytes) == 0)
			return 0;
	if (c->ntimed_seen == c->cap_timed_seen) {
		int cap = c->cap_timed_seen ? 2 * c->cap_timed_seen : 64;
		struct flyk_timed_seen *t = (struct flyk_timed_seen *)realloc(
			c->timed_seen, (size_t)cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		c->timed_seen = t;
		c->cap_timed_seen = cap;
	}
	c->timed_seen[c->ntimed_seen].v = v;
	memset(c->timed_seen[c->ntimed_seen].params, 0,
	       sizeof(c->timed_seen[0].params));
	memcpy(c->timed_seen[c->ntimed_seen].params, params, bytes);
	c->ntimed_seen++;
	return 1;
}

static int gpu_case_time(struct flyk_case *c, const struct flyk_variant *v,
			 const int64_t *params, double *us)
{
	struct flyk_device *dev = c->dev;
	hipStream_t s = (hipStream_t)dev->stream;
	hipEvent_t e0 = (hipEvent_t)dev->ev_start, e1 = (hipEvent_t)dev->ev_stop;
	*us = 0;
	/* the checked launch takes args, the timed reps timed_args; a
	 * candidate's timed call runs once untimed before its checked
	 * launch (the outputs poisoned again after it), so that whatever it
	 * sets up on first use (a cuDNN plan for another graph: 0.05-0.8 s
	 * on the H200) is paid in the check, where the tuner's budget shares
	 * see it, and falls outside every timed rep.  A timed call of a
	 * candidate never checked gets the same untimed run first. */
	const union flyk_args *a = &c->args;
	int rc = 0;
	if (c->has_timed_args) {
		rc = timed_first(c, v, params);
		if (rc == 1) {
			rc = v->launch(dev, &c->p, params, &c->timed_args, s);
			if (rc == 0)
				rc = hip_err(hipGetLastError());
			if (rc == 0 && c->checking)
				rc = poison_outputs(c);
		}
		if (rc)
			return rc;
		if (!c->checking)
			a = &c->timed_args;
	}
	c->checking = 0;
	rc = c->op->prepare ? c->op->prepare(c) : 0;
	if (rc == 0)
		rc = gpu_flush(dev);
	if (rc)
		return rc;
	if (hipEventRecord(e0, s) != hipSuccess)
		return -EIO;
	rc = v->launch(dev, &c->p, params, a, s);
	if (rc == 0)
		rc = hip_err(hipGetLastError());
	if (hipEventRecord(e1, s) != hipSuccess && rc == 0)
		rc = -EIO;
	hipError_t e = hipEventSynchronize(e1);
	if (e != hipSuccess)
		return gpu_fail(v, params, (int)v->nparams, e);
	if (rc)
		return rc;
	float ms = 0;
	if (hipEventElapsedTime(&ms, e0, e1) != hipSuccess)
		return -EIO;
	*us = (double)ms * 1000.0;
	return 0;
}

static int gpu_case_check(struct flyk_case *c, double *max_err)
{
	int rc = hip_err(hipStreamSynchronize((hipStream_t)c->dev->stream));
	if (rc)
		return rc;
	return c->op->check(c, max_err);
}

/* ------------------------------------------------------------ table */

struct gpu_table {
	struct flyk_variant *v;
	size_t n;
	struct flyk_backend b;
};

static struct gpu_table *gpu_table_build(void)
{
	static struct gpu_table t;
	size_t n = 0;
	for (size_t i = 0; i < NOPS; i++)
		if (gpu_ops[i])
			n += gpu_ops[i]->nvariants;
	t.v = (struct flyk_variant *)calloc(n ? n : 1, sizeof(*t.v));
	if (t.v) {
		for (size_t i = 0; i < NOPS; i++) {
			if (!gpu_ops[i])
				continue;
			memcpy(t.v + t.n, gpu_ops[i]->variants,
			       gpu_ops[i]->nvariants * sizeof(*t.v));
			t.n += gpu_ops[i]->nvariants;
		}
	}
	t.b.name = FLYK_BACKEND_NAME;
	t.b.kind = FLYK_BACKEND_KIND;
	t.b.variants = t.v;
	t.b.nvariants = t.n;
	t.b.open = gpu_open;
	t.b.close = gpu_close;
	t.b.fingerprint = gpu_fingerprint;
	t.b.case_new = gpu_case_new;
	t.b.case_free = gpu_case_free;
	t.b.case_poison = gpu_case_poison;
	t.b.case_time = gpu_case_time;
	t.b.case_check = gpu_case_check;
	return &t;
}

extern "C" __attribute__((visibility("default"))) const struct flyk_backend *
flyk_gpu_backend(void)
{
	static struct gpu_table *t = gpu_table_build();
	return &t->b;
}
