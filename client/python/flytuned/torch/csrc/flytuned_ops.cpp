/*
 * flytuned_ops.cpp -- the thin C++ layer of flytuned.torch: CUDA kernels of
 * the flytuned:: custom ops (schemas defined in Python, flytuned/torch/
 * _ops.py) for torch's dispatcher, over the C libraries.
 *
 * Owns: one fly_client (libflyclient, dlopen'd), the dlsym'd launchers of
 * libflykernels_{cuda,hip}.so, a map problem -> last decision (what a
 * CUDA-graph capture may use without talking to the daemon), the problems
 * missed during a capture (asked for after it), the problems seen while
 * recording (prepare()), one GEMM workspace per stream.
 * Thread: any; the maps under one mutex.
 *
 * Per call: outputs through at::empty (torch's allocator, graph pools
 * included), the current CUDA stream, fly_decide (process-cache hit: no
 * lock, no syscall) outside a capture; during a capture only the map
 * (a miss launches flyk_default's choice: an empty decision) -- nothing
 * synchronises, nothing talks to the daemon.  Anything the kernels do not
 * serve (dtype, layout, strides, another device, no library) runs torch's
 * own op.
 */
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "flyclient.h"
}

namespace {

typedef int (*decide_fn)(fly_client *, const fly_problem *, fly_decision *);
typedef int (*open_fn)(const fly_client_opts *, fly_client **);
typedef int (*key_fn)(const fly_problem *, char *, size_t);
typedef int (*rms_fn)(const fly_problem *, const fly_decision *, const void *,
		      const void *, void *, void *, float, void *);
typedef int (*topk_fn)(const fly_problem *, const fly_decision *,
		       const void *, void *, int64_t *, void *, size_t, void *);
typedef int (*gemm_fn)(const fly_problem *, const fly_decision *,
		       const void *, const void *, void *, const void *, float,
		       void *, size_t, void *);
typedef int (*ggemm_fn)(const fly_problem *, const fly_decision *,
			const void *, const void *, void *, const int64_t *,
			void *);
typedef int (*ggends_fn)(const fly_problem *, const fly_decision *,
			 const void *, const void *, void *, const int32_t *,
			 void *);
typedef int (*sg_fn)(const fly_problem *, const fly_decision *, const void *,
		     const void *, const void *, const void *, const void *,
		     void *, void *, size_t, void *);
typedef int (*mqa_fn)(const fly_problem *, const fly_decision *,
		      const void *, const void *, const float *,
		      const float *, const int32_t *, const int32_t *, float *,
		      int64_t, void *);

typedef int (*attn_fn)(const fly_problem *, const fly_decision *,
		       const void *, const void *, const void *, void *,
		       float *, float, const int64_t *, void *, size_t,
		       void *);

constexpr size_t kWorkspace = (size_t)32 << 20; /* FLYK_GEMM_WS_BYTES */
constexpr size_t kTopkWorkspace = (size_t)1 << 20; /* FLYK_TOPK_WS_BYTES */

struct ProbHash {
	size_t operator()(const fly_problem &p) const
	{
		const unsigned char *b = (const unsigned char *)&p;
		uint64_t h = 1469598103934665603ull;
		for (size_t i = 0; i < sizeof(p); i++)
			h = (h ^ b[i]) * 1099511628211ull;
		return (size_t)h;
	}
};
struct ProbEq {
	bool operator()(const fly_problem &a, const fly_problem &b) const
	{
		return memcmp(&a, &b, sizeof(a)) == 0;
	}
};

struct Runtime {
	std::atomic<bool> ok{false};
	std::atomic<bool> record{false};
	std::atomic<bool> has_pending{false};
	int device = -1;
	fly_client *client = nullptr;
	decide_fn decide = nullptr;
	key_fn key = nullptr;
	rms_fn rmsnorm = nullptr;
	topk_fn topk = nullptr;
	gemm_fn gemm = nullptr;
	ggemm_fn ggemm = nullptr;
	ggends_fn ggends = nullptr; /* torch's int32 ends as they are */
	sg_fn sgemm = nullptr;
	mqa_fn mqa = nullptr;
	attn_fn attn = nullptr;
	std::mutex mu;
	std::unordered_map<fly_problem, fly_decision, ProbHash, ProbEq> last;
	std::vector<fly_problem> pending;
	std::vector<fly_problem> recorded;
	std::unordered_map<cudaStream_t, at::Tensor> ws;
	/* topk's own, zeroed (its counters stay zero between launches) */
	std::unordered_map<cudaStream_t, at::Tensor> topk_ws;
	std::string last_error; /* the last refused launch, for last_error() */
	std::atomic<uint64_t> calls{0}, capture_hits{0}, capture_misses{0},
		fallbacks{0};
};

/* Never destroyed: its tensors must not be freed after torch's allocator
 * at exit. */
Runtime &rt = *new Runtime;

bool capturing(cudaStream_t s)
{
	cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
	if (cudaStreamIsCapturing(s, &st) != cudaSuccess)
		return true; /* be safe: never talk to the daemon */
	return st != cudaStreamCaptureStatusNone;
}

/* Ask for what a capture missed (fly_decide queues unseen keys). */
void drain_pending()
{
	std::vector<fly_problem> todo;
	{
		std::lock_guard<std::mutex> g(rt.mu);
		todo.swap(rt.pending);
		rt.has_pending = false;
	}
	for (auto &p : todo) {
		fly_decision d;
		rt.decide(rt.client, &p, &d);
		std::lock_guard<std::mutex> g(rt.mu);
		rt.last[p] = d;
	}
}

void decide(const fly_problem &p, cudaStream_t s, fly_decision *d)
{
	rt.calls++;
	if (rt.record.load(std::memory_order_relaxed)) {
		std::lock_guard<std::mutex> g(rt.mu);
		rt.recorded.push_back(p);
	}
	if (!capturing(s)) {
		if (rt.has_pending.load(std::memory_order_relaxed))
			drain_pending();
		rt.decide(rt.client, &p, d);
		std::lock_guard<std::mutex> g(rt.mu);
		auto it = rt.last.find(p);
		if (it == rt.last.end() ||
		    memcmp(&it->second, d, sizeof(*d)) != 0)
			rt.last[p] = *d;
		return;
	}
	std::lock_guard<std::mutex> g(rt.mu);
	auto it = rt.last.find(p);
	if (it != rt.last.end()) {
		*d = it->second;
		rt.capture_hits++;
		return;
	}
	memset(d, 0, sizeof(*d)); /* status default, variant "": flyk_default */
	rt.pending.push_back(p);
	rt.has_pending = true;
	rt.capture_misses++;
}

fly_problem problem(uint32_t op, uint32_t dtype, uint32_t layout,
		    uint32_t flags, std::initializer_list<int64_t> dims)
{
	fly_problem p;
	memset(&p, 0, sizeof(p));
	p.op = op;
	p.dtype = dtype;
	p.layout = layout;
	p.flags = flags;
	int i = 0;
	for (int64_t v : dims)
		p.dims[i++] = v;
	return p;
}

uint32_t fly_dtype(const at::Tensor &t)
{
	switch (t.scalar_type()) {
	case at::kFloat:
		return FLY_DT_FP32;
	case at::kHalf:
		return FLY_DT_FP16;
	case at::kBFloat16:
		return FLY_DT_BF16;
	case at::kFloat8_e4m3fn:
		return FLY_DT_FP8_E4M3;
	default:
		return FLY_DT_NONE;
	}
}

bool served(const at::Tensor &t)
{
	return rt.ok && t.is_cuda() && t.get_device() == rt.device &&
	       t.numel() > 0;
}

/* The kernel library refused a launch: count it, keep the reason for
 * last_error(), warn once (the process's first refusal), and let the
 * caller run torch's own op.  The message is formatted here with
 * snprintf: torch's c10::str streams it through an ostringstream, which
 * crashed inside this extension on the GPU machine
 * (a null locale facet in std::ostream::_M_insert<long>). */
void launch_failed(const char *op, int rc, const fly_decision &d)
{
	rt.fallbacks++;
	char msg[320];
	snprintf(msg, sizeof(msg),
		 "flytuned::%s: the kernel library refused the launch (%d: %s)"
		 " of decision status %u variant \"%.*s\" (%u params); "
		 "running torch's own op",
		 op, rc, strerror(rc < 0 ? -rc : rc), d.status,
		 (int)sizeof(d.variant), d.variant, d.nparams);
	{
		std::lock_guard<std::mutex> g(rt.mu);
		rt.last_error = msg;
	}
	TORCH_WARN_ONCE(msg);
}

void *workspace(cudaStream_t s, const at::Tensor &like)
{
	/* the last stream's, per thread: no lock on the per-call path (the
	 * tensors live in rt.ws, never freed, so the pointer stays valid) */
	thread_local cudaStream_t last_s = nullptr;
	thread_local void *last_p = nullptr;
	if (last_p && s == last_s)
		return last_p;
	std::lock_guard<std::mutex> g(rt.mu);
	last_s = s;
	auto it = rt.ws.find(s);
	if (it != rt.ws.end())
		return last_p = it->second.data_ptr();
	at::Tensor w = at::empty({(int64_t)kWorkspace},
				 like.options().dtype(at::kByte));
	rt.ws[s] = w;
	return last_p = w.data_ptr();
}

/* The stream's topk workspace (flyk.h FLYK_TOPK_WS_BYTES): zeroed once,
 * never shared with another op. */
void *topk_workspace(cudaStream_t s, const at::Tensor &like)
{
	std::lock_guard<std::mutex> g(rt.mu);
	auto it = rt.topk_ws.find(s);
	if (it != rt.topk_ws.end())
		return it->second.data_ptr();
	at::Tensor w = at::zeros({(int64_t)kTopkWorkspace},
				 like.options().dtype(at::kByte));
	rt.topk_ws[s] = w;
	return w.data_ptr();
}

cudaStream_t stream()
{
	return at::cuda::getCurrentCUDAStream().stream();
}

/* ------------------------------------------------------------ rms_norm */
at::Tensor rms_norm(const at::Tensor &input, c10::IntArrayRef shape,
		    const std::optional<at::Tensor> &weight,
		    std::optional<double> eps)
{
	uint32_t dt = fly_dtype(input);
	int64_t n = input.dim() ? input.size(-1) : 0;
	if (!served(input) || dt == FLY_DT_NONE || dt == FLY_DT_FP8_E4M3 ||
	    shape.size() != 1 || shape[0] != n || !weight.has_value() ||
	    weight->scalar_type() != input.scalar_type() ||
	    !weight->is_contiguous() || !input.is_contiguous())
		return at::rms_norm(input, shape, weight, eps);
	double e = eps.has_value() ? *eps :
		std::numeric_limits<float>::epsilon();
	if (!eps.has_value() && dt == FLY_DT_FP16)
		e = 0.0009765625;  /* torch.finfo(float16).eps */
	if (!eps.has_value() && dt == FLY_DT_BF16)
		e = 0.0078125;     /* torch.finfo(bfloat16).eps */
	fly_problem p = problem(FLY_OP_RMSNORM, dt, 0, 0,
				{input.numel() / n, n});
	cudaStream_t s = stream();
	fly_decision d;
	decide(p, s, &d);
	at::Tensor y = at::empty_like(input);
	int rc = rt.rmsnorm(&p, &d, input.data_ptr(), weight->data_ptr(),
			    y.data_ptr(), nullptr, (float)e, s);
	if (rc) {
		launch_failed("rms_norm", rc, d);
		return at::rms_norm(input, shape, weight, eps);
	}
	return y;
}

at::Tensor fused_add_rms_norm(const at::Tensor &input, at::Tensor &residual,
			      const at::Tensor &weight, double eps)
{
	uint32_t dt = fly_dtype(input);
	int64_t n = input.dim() ? input.size(-1) : 0;
	if (!served(input) || dt == FLY_DT_NONE || dt == FLY_DT_FP8_E4M3 ||
	    !input.is_contiguous() || !residual.is_contiguous() ||
	    !weight.is_contiguous() || !residual.sizes().equals(input.sizes()) ||
	    residual.scalar_type() != input.scalar_type() ||
	    weight.scalar_type() != input.scalar_type() ||
	    weight.numel() != n) {
		residual.add_(input);
		return at::rms_norm(residual, {n}, weight, eps);
	}
	fly_problem p = problem(FLY_OP_RMSNORM, dt, 0, FLY_F_RESIDUAL,
				{input.numel() / n, n});
	cudaStream_t s = stream();
	fly_decision d;
	decide(p, s, &d);
	at::Tensor y = at::empty_like(input);
	int rc = rt.rmsnorm(&p, &d, input.data_ptr(), weight.data_ptr(),
			    y.data_ptr(), residual.data_ptr(), (float)eps, s);
	if (rc) {
		launch_failed("fused_add_rms_norm", rc, d);
		residual.add_(input);
		return at::rms_norm(residual, {n}, weight, eps);
	}
	return y;
}

/* ---------------------------------------------------------------- topk */
std::tuple<at::Tensor, at::Tensor> topk(const at::Tensor &self, int64_t k,
					int64_t dim, bool largest,
					bool sorted)
{
	uint32_t dt = fly_dtype(self);
	int64_t nd = self.dim();
	if (!served(self) || dt == FLY_DT_NONE || dt == FLY_DT_FP8_E4M3 ||
	    nd < 1 || (dim != -1 && dim != nd - 1) || !largest ||
	    !self.is_contiguous() || k < 1 || k > self.size(-1))
		return at::topk(self, k, dim, largest, sorted);
	int64_t n = self.size(-1);
	fly_problem p = problem(FLY_OP_TOPK, dt, 0, 0,
				{self.numel() / n, n, k});
	cudaStream_t s = stream();
	fly_decision d;
	decide(p, s, &d);
	std::vector<int64_t> os(self.sizes().begin(), self.sizes().end());
	os.back() = k;
	at::Tensor v = at::empty(os, self.options());
	at::Tensor i = at::empty(os, self.options().dtype(at::kLong));
	int rc = rt.topk(&p, &d, self.data_ptr(), v.data_ptr(),
			 i.data_ptr<int64_t>(), topk_workspace(s, self),
			 kTopkWorkspace, s);
	if (rc) {
		launch_failed("topk", rc, d);
		return at::topk(self, k, dim, largest, sorted);
	}
	return std::make_tuple(v, i);
}

/* ---------------------------------------------------------------- GEMM */
/* A [K,N] operand b that is the transposed view of contiguous [N,K]
 * rows (what b.t().is_contiguous() says, without making the view: every
 * view is a dispatcher call on the per-call path). */
bool rows_of_transposed(const at::Tensor &b)
{
	int64_t k = b.size(0), n = b.size(1);
	return (k == 1 || b.stride(0) == 1) && (n == 1 || b.stride(1) == k);
}

/* b as [N,K] rows (NT) or [K,N] rows (NN); -1: neither. */
int gemm_layout(const at::Tensor &b)
{
	if (b.is_contiguous())
		return FLY_LAYOUT_NN;
	if (rows_of_transposed(b))
		return FLY_LAYOUT_NT;
	return -1;
}

/* C [m, n] (the caller's shape @p cshape) = A [m, k] (row-major at @p a)
 * times B (@p layout at @p b) + bias; an undefined tensor when the kernel
 * library refused (the caller runs torch's). */
at::Tensor gemm(const at::Tensor &like, const void *a, const void *b,
		int64_t m, int64_t n, int64_t k, int layout,
		const std::optional<at::Tensor> &bias,
		c10::IntArrayRef cshape)
{
	uint32_t fl = bias.has_value() ? FLY_F_BIAS : 0;
	fly_problem p = problem(FLY_OP_GEMM, FLY_DT_BF16, layout, fl,
				{m, n, k});
	cudaStream_t s = stream();
	fly_decision d;
	decide(p, s, &d);
	at::Tensor c = at::empty(cshape, like.options());
	void *ws = workspace(s, like);
	int rc = rt.gemm(&p, &d, a, b, c.data_ptr(),
			 bias.has_value() ? bias->data_ptr() : nullptr, 1.0f,
			 ws, kWorkspace, s);
	if (rc) {
		launch_failed("mm", rc, d);
		return at::Tensor();
	}
	return c;
}

bool bf16_cuda(const at::Tensor &t)
{
	return t.scalar_type() == at::kBFloat16 && t.is_cuda() &&
	       t.get_device() == rt.device;
}

at::Tensor mm(const at::Tensor &self, const at::Tensor &mat2)
{
	if (!served(self) || self.dim() != 2 || mat2.dim() != 2 ||
	    !bf16_cuda(self) || !bf16_cuda(mat2) || !self.is_contiguous() ||
	    self.size(1) != mat2.size(0) || mat2.numel() == 0)
		return at::mm(self, mat2);
	int lay = gemm_layout(mat2);
	if (lay < 0)
		return at::mm(self, mat2);
	int64_t m = self.size(0), n = mat2.size(1);
	at::Tensor c = gemm(self, self.data_ptr(), mat2.data_ptr(), m, n,
			    self.size(1), lay, std::nullopt, {m, n});
	return c.defined() ? c : at::mm(self, mat2);
}

at::Tensor linear(const at::Tensor &input, const at::Tensor &weight,
		  const std::optional<at::Tensor> &bias)
{
	int64_t k = input.dim() ? input.size(-1) : 0;
	if (!served(input) || input.dim() < 1 || k == 0 ||
	    !input.is_contiguous() || weight.dim() != 2 ||
	    !weight.is_contiguous() || !bf16_cuda(input) ||
	    !bf16_cuda(weight) || weight.size(1) != k ||
	    weight.size(0) == 0 ||
	    (bias.has_value() && (bias->scalar_type() != at::kBFloat16 ||
				  !bias->is_contiguous() || !bias->is_cuda() ||
				  bias->numel() != weight.size(0))))
		return at::linear(input, weight, bias);
	/* input [..., K] rows times the [N,K] rows: NT, no views made */
	int64_t n = weight.size(0), m = input.numel() / k;
	c10::SmallVector<int64_t, 6> os(input.sizes().begin(),
					input.sizes().end());
	os.back() = n;
	at::Tensor c = gemm(input, input.data_ptr(), weight.data_ptr(), m, n,
			    k, FLY_LAYOUT_NT, bias, os);
	return c.defined() ? c : at::linear(input, weight, bias);
}

/* b [G, K, N] is the transposed view of contiguous [G, N, K] rows (what
 * b.transpose(-2, -1).is_contiguous() says, without the view). */
bool experts_rows(const at::Tensor &b)
{
	int64_t g = b.size(0), k = b.size(1), n = b.size(2);
	return (k == 1 || b.stride(1) == 1) && (n == 1 || b.stride(2) == k) &&
	       (g == 1 || b.stride(0) == n * k);
}

at::Tensor grouped_mm(const at::Tensor &a, const at::Tensor &b,
		      const std::optional<at::Tensor> &offs,
		      const std::optional<at::Tensor> &bias,
		      std::optional<at::ScalarType> out_dtype)
{
	bool fit = served(a) && a.dim() == 2 && b.dim() == 3 &&
		   a.scalar_type() == at::kBFloat16 &&
		   b.scalar_type() == at::kBFloat16 && a.is_contiguous() &&
		   experts_rows(b) &&
		   a.size(1) == b.size(1) && offs.has_value() &&
		   offs->scalar_type() == at::kInt && offs->dim() == 1 &&
		   offs->size(0) == b.size(0) && !bias.has_value() &&
		   (!out_dtype.has_value() || *out_dtype == at::kBFloat16);
	if (!fit)
		return at::_grouped_mm(a, b, offs, bias, out_dtype);
	int64_t g = b.size(0), m = a.size(0), k = a.size(1), n = b.size(2);
	fly_problem p = problem(FLY_OP_GROUPED_GEMM, FLY_DT_BF16,
				FLY_LAYOUT_NT, 0, {g, m, n, k});
	cudaStream_t s = stream();
	fly_decision d;
	decide(p, s, &d);
	at::Tensor c = at::empty({m, n}, a.options());
	int rc;
	if (rt.ggends && offs->is_cuda() && offs->get_device() == rt.device &&
	    offs->is_contiguous()) {
		/* no [0, offs...] int64 copy: two kernels fewer a call */
		rc = rt.ggends(&p, &d, a.data_ptr(), b.data_ptr(),
			       c.data_ptr(), offs->data_ptr<int32_t>(), s);
	} else {
		at::Tensor o = at::empty({g + 1}, a.options().dtype(at::kLong));
		o.narrow(0, 0, 1).zero_();
		o.narrow(0, 1, g).copy_(*offs);
		rc = rt.ggemm(&p, &d, a.data_ptr(), b.data_ptr(), c.data_ptr(),
			      o.data_ptr<int64_t>(), s);
	}
	if (rc) {
		launch_failed("grouped_mm", rc, d);
		return at::_grouped_mm(a, b, offs, bias, out_dtype);
	}
	return c;
}

at::Tensor scaled_mm(const at::Tensor &a, const at::Tensor &b,
		     const at::Tensor &sa, const at::Tensor &sb,
		     const std::optional<at::Tensor> &bias,
		     const std::optional<at::Tensor> &scale_result,
		     std::optional<at::ScalarType> out_dtype,
		     bool use_fast_accum)
{
	bool fit = served(a) && a.dim() == 2 && b.dim() == 2 &&
		   a.scalar_type() == at::kFloat8_e4m3fn &&
		   b.scalar_type() == at::kFloat8_e4m3fn &&
		   a.is_contiguous() && rows_of_transposed(b) &&
		   a.size(1) == b.size(0) && sa.numel() == 1 &&
		   sb.numel() == 1 && sa.scalar_type() == at::kFloat &&
		   sb.scalar_type() == at::kFloat && !scale_result.has_value() &&
		   out_dtype.has_value() && *out_dtype == at::kBFloat16 &&
		   (!bias.has_value() ||
		    (bias->scalar_type() == at::kBFloat16 &&
		     bias->is_contiguous()));
	if (!fit)
		return at::_scaled_mm(a, b, sa, sb, bias, scale_result,
				      out_dtype, use_fast_accum);
	int64_t m = a.size(0), k = a.size(1), n = b.size(1);
	fly_problem p = problem(FLY_OP_SCALED_GEMM, FLY_DT_FP8_E4M3,
				FLY_LAYOUT_NT,
				bias.has_value() ? FLY_F_BIAS : 0, {m, n, k});
	cudaStream_t s = stream();
	fly_decision d;
	decide(p, s, &d);
	at::Tensor c = at::empty({m, n}, a.options().dtype(at::kBFloat16));
	void *ws = workspace(s, a);
	int rc = rt.sgemm(&p, &d, a.data_ptr(), b.data_ptr(), sa.data_ptr(),
			  sb.data_ptr(),
			  bias.has_value() ? bias->data_ptr() : nullptr,
			  c.data_ptr(), ws, kWorkspace, s);
	if (rc) {
		launch_failed("scaled_mm", rc, d);
		return at::_scaled_mm(a, b, sa, sb, bias, scale_result,
				      out_dtype, use_fast_accum);
	}
	return c;
}

/* ---------------------------------------------------------- mqa_logits */
at::Tensor mqa_ref(const at::Tensor &q, const at::Tensor &kv,
		   const at::Tensor &kv_scale, const at::Tensor &w,
		   const at::Tensor &ks, const at::Tensor &ke, bool clean)
{
	at::Tensor s = at::matmul(q.to(at::kFloat), kv.to(at::kFloat).t());
	s = at::relu(s).mul_(w.unsqueeze(-1)).sum(1).mul_(kv_scale);
	at::Tensor j = at::arange(kv.size(0), ks.options().dtype(at::kInt));
	at::Tensor out = (j.unsqueeze(0) < ks.unsqueeze(1))
				 .logical_or_(j.unsqueeze(0) >= ke.unsqueeze(1));
	if (clean)
		s.masked_fill_(out, -std::numeric_limits<float>::infinity());
	return s;
}

at::Tensor mqa_logits(const at::Tensor &q, const at::Tensor &kv,
		      const at::Tensor &kv_scale, const at::Tensor &weights,
		      const at::Tensor &ks, const at::Tensor &ke,
		      bool clean_logits)
{
	bool fit = served(q) && q.dim() == 3 && kv.dim() == 2 &&
		   q.scalar_type() == at::kFloat8_e4m3fn &&
		   kv.scalar_type() == at::kFloat8_e4m3fn &&
		   q.is_contiguous() && kv.is_contiguous() &&
		   kv_scale.is_contiguous() && weights.is_contiguous() &&
		   ks.is_contiguous() && ke.is_contiguous() &&
		   ks.scalar_type() == at::kInt && ke.scalar_type() == at::kInt &&
		   kv_scale.scalar_type() == at::kFloat &&
		   weights.scalar_type() == at::kFloat;
	if (!fit)
		return mqa_ref(q, kv, kv_scale, weights, ks, ke, clean_logits);
	int64_t sq = q.size(0), h = q.size(1), dd = q.size(2),
		skv = kv.size(0);
	fly_problem p = problem(FLY_OP_MQA_LOGITS, FLY_DT_FP8_E4M3, 0,
				clean_logits ? FLY_F_CLEAN : 0,
				{sq, skv, h, dd});
	cudaStream_t s = stream();
	fly_decision d;
	decide(p, s, &d);
	at::Tensor out = at::empty({sq, skv}, q.options().dtype(at::kFloat));
	int rc = rt.mqa(&p, &d, q.data_ptr(), kv.data_ptr(),
			kv_scale.data_ptr<float>(), weights.data_ptr<float>(),
			ks.data_ptr<int32_t>(), ke.data_ptr<int32_t>(),
			out.data_ptr<float>(), 0, s);
	if (rc) {
		launch_failed("mqa_logits", rc, d);
		return mqa_ref(q, kv, kv_scale, weights, ks, ke, clean_logits);
	}
	return out;
}

/* ----------------------------------------------------------- attention */
/* SDPA's layout, [B, H, S, D] (q [B, Hq, Sq, D], k/v [B, Hkv, Skv, D]),
 * read through the kernels' strides (batch, seq, head; head_dim
 * contiguous); the output [B, Hq, Sq, D] laid out as [B, Sq, Hq, D]
 * (out_layout(): what the fake says, whichever path ran -- Inductor
 * asserts the strides it was told -- and what a following
 * transpose(1, 2).reshape(B, Sq, Hq * D) takes without a copy, as SDPA's
 * own kernels do).  Causal aligns
 * bottom-right when Sq != Skv, as the kernels do (SDPA's is_causal aligns
 * top-left: such calls run SDPA). */
at::Tensor attention(const at::Tensor &q, const at::Tensor &k,
		     const at::Tensor &v, bool is_causal,
		     std::optional<double> scale)
{
	auto sdpa = [&]() {
		at::Tensor r = at::scaled_dot_product_attention(
		    q, k, v, std::nullopt, 0.0, is_causal, scale,
		    k.dim() == 4 && q.dim() == 4 && k.size(1) != q.size(1));
		if (r.dim() != 4)
			return r;
		return at::empty({r.size(0), r.size(2), r.size(1), r.size(3)},
				 r.options())
		    .transpose(1, 2)
		    .copy_(r);
	};
	bool fit = served(q) && rt.attn && q.dim() == 4 && k.dim() == 4 &&
		   v.dim() == 4 && q.scalar_type() == at::kBFloat16 &&
		   k.scalar_type() == at::kBFloat16 &&
		   v.scalar_type() == at::kBFloat16 && k.is_cuda() &&
		   v.is_cuda() && q.stride(3) == 1 && k.stride(3) == 1 &&
		   v.stride(3) == 1 && k.sizes().equals(v.sizes()) &&
		   q.size(0) == k.size(0) && q.size(3) == k.size(3) &&
		   k.size(1) > 0 && q.size(1) % k.size(1) == 0 &&
		   (q.size(3) == 64 || q.size(3) == 128 || q.size(3) == 256) &&
		   (!is_causal || q.size(2) == k.size(2));
	if (!fit)
		return sdpa();
	int64_t B = q.size(0), hq = q.size(1), sq = q.size(2), hkv = k.size(1),
		skv = k.size(2), dd = q.size(3);
	fly_problem p = problem(FLY_OP_ATTENTION, FLY_DT_BF16, 0,
				is_causal ? FLY_F_CAUSAL : 0,
				{B, sq, skv, hq, hkv, dd});
	cudaStream_t s = stream();
	fly_decision d;
	decide(p, s, &d);
	at::Tensor o = at::empty({B, sq, hq, dd}, q.options()).transpose(1, 2);
	const int64_t st[12] = {q.stride(0), q.stride(2), q.stride(1),
				k.stride(0), k.stride(2), k.stride(1),
				v.stride(0), v.stride(2), v.stride(1),
				o.stride(0), o.stride(2), o.stride(1)};
	float sc = scale.has_value() ? (float)*scale
				     : 1.0f / std::sqrt((float)dd);
	void *ws = workspace(s, q);
	int rc = rt.attn(&p, &d, q.data_ptr(), k.data_ptr(), v.data_ptr(),
			 o.data_ptr(), nullptr, sc, st, ws, kWorkspace, s);
	if (rc) {
		launch_failed("attention", rc, d);
		return sdpa();
	}
	return o;
}

/* -------------------------------------------------------------- control */
template <typename F> bool sym(void *h, const char *name, F *out)
{
	*out = (F)dlsym(h, name);
	return *out != nullptr;
}

/* Load both libraries and open a client.  @return "" or why not. */
std::string init(const std::string &client_lib, const std::string &klib,
		 const std::string &socket, int64_t device,
		 int64_t timeout_ms)
{
	if (rt.ok)
		return "";
	void *hc = dlopen(client_lib.c_str(), RTLD_NOW | RTLD_LOCAL);
	if (!hc)
		return std::string("dlopen ") + dlerror();
	void *hk = dlopen(klib.c_str(), RTLD_NOW | RTLD_LOCAL);
	if (!hk)
		return std::string("dlopen ") + dlerror();
	open_fn op = nullptr;
	if (!sym(hc, "fly_client_open_opts", &op) ||
	    !sym(hc, "fly_decide", &rt.decide) ||
	    !sym(hc, "fly_problem_key", &rt.key))
		return "libflyclient lacks fly_client_open_opts/fly_decide";
	if (!sym(hk, "flyk_gpu_rmsnorm", &rt.rmsnorm) ||
	    !sym(hk, "flyk_gpu_topk_ws", &rt.topk) ||
	    !sym(hk, "flyk_gpu_gemm", &rt.gemm) ||
	    !sym(hk, "flyk_gpu_grouped_gemm", &rt.ggemm) ||
	    !sym(hk, "flyk_gpu_scaled_gemm", &rt.sgemm) ||
	    !sym(hk, "flyk_gpu_mqa_logits", &rt.mqa))
		return "the kernel library lacks a flyk_gpu_* launcher";
	/* attention is served where the library has it (else SDPA) */
	sym(hk, "flyk_gpu_attention", &rt.attn);
	sym(hk, "flyk_gpu_grouped_gemm_ends", &rt.ggends);
	fly_client_opts o;
	memset(&o, 0, sizeof(o));
	o.socket_path = socket.empty() ? nullptr : socket.c_str();
	o.device = (int)device;
	o.timeout_ms = (uint32_t)timeout_ms;
	int rc = op(&o, &rt.client);
	if (rc)
		return "fly_client_open_opts failed (" + std::to_string(rc) +
		       ")";
	rt.device = (int)device;
	rt.ok = true;
	return "";
}

void set_record(bool on)
{
	rt.record = on;
}

/* The canonical keys of the problems seen since recording began. */
std::vector<std::string> take_recorded()
{
	std::vector<fly_problem> v;
	{
		std::lock_guard<std::mutex> g(rt.mu);
		v.swap(rt.recorded);
	}
	std::vector<std::string> out;
	for (auto &p : v) {
		char buf[FLY_KEY_MAX];
		if (rt.key && rt.key(&p, buf, sizeof(buf)) > 0)
			out.emplace_back(buf);
	}
	return out;
}

/* Re-decide every problem seen (after prepare's tuning), so a capture
 * that follows uses the tuned decisions; not during a capture. */
int64_t refresh()
{
	if (!rt.ok)
		return 0;
	drain_pending();
	std::vector<fly_problem> v;
	{
		std::lock_guard<std::mutex> g(rt.mu);
		for (auto &e : rt.last)
			v.push_back(e.first);
	}
	int64_t tuned = 0;
	for (auto &p : v) {
		fly_decision d;
		rt.decide(rt.client, &p, &d);
		tuned += d.status == FLY_STATUS_TUNED;
		std::lock_guard<std::mutex> g(rt.mu);
		rt.last[p] = d;
	}
	return tuned;
}

std::unordered_map<std::string, int64_t> stats()
{
	std::lock_guard<std::mutex> g(rt.mu);
	return {{"calls", (int64_t)rt.calls.load()},
		{"capture_hits", (int64_t)rt.capture_hits.load()},
		{"capture_misses", (int64_t)rt.capture_misses.load()},
		{"fallbacks", (int64_t)rt.fallbacks.load()},
		{"pending", (int64_t)rt.pending.size()},
		{"known", (int64_t)rt.last.size()},
		{"ok", (int64_t)rt.ok.load()}};
}

/* The last launch the kernel library refused ("" if none). */
std::string last_error()
{
	std::lock_guard<std::mutex> g(rt.mu);
	return rt.last_error;
}

} /* namespace */

TORCH_LIBRARY_IMPL(flytuned, CUDA, m)
{
	m.impl("rms_norm", &rms_norm);
	m.impl("fused_add_rms_norm", &fused_add_rms_norm);
	m.impl("topk", &topk);
	m.impl("mm", &mm);
	m.impl("linear", &linear);
	m.impl("grouped_mm", &grouped_mm);
	m.impl("scaled_mm", &scaled_mm);
	m.impl("mqa_logits", &mqa_logits);
	m.impl("attention", &attention);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod)
{
	mod.def("init", &init);
	mod.def("set_record", &set_record);
	mod.def("take_recorded", &take_recorded);
	mod.def("refresh", &refresh);
	mod.def("stats", &stats);
	mod.def("last_error", &last_error);
}
