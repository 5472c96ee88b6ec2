"""flytuned.torch._runtime -- finding the libraries and the daemon,
building the C++ extension, and the pure-Python (ctypes) kernels.

The ctypes kernels mirror csrc/flytuned_ops.cpp: decide (flyclient, with a
map key -> last decision that a CUDA-graph capture uses instead of the
daemon), launch through libflykernels' flyk_gpu_* on the current stream,
torch's own op for anything the kernels do not serve.
"""

import ctypes
import os
import socket as _socket
import sys
import threading
import warnings

import torch

from . import _ops

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
if PYROOT not in sys.path:
    sys.path.append(PYROOT)
import flyclient  # noqa: E402
from flyclient import Problem, Decision, OPS, DTYPES  # noqa: E402

WS_BYTES = 32 << 20  # FLYK_GEMM_WS_BYTES
TOPK_WS_BYTES = 1 << 20  # FLYK_TOPK_WS_BYTES: topk's own, zeroed once
_DT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def socket_path(device=0):
    return os.environ.get("FLYTUNED_SOCKET") or \
        "/run/flytuned/gpu%d.sock" % device


def daemon_up(path):
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def client_lib():
    return flyclient._find_lib()


def kernels_lib():
    from flyclient import kernels
    return kernels._find()


def include_dir():
    """Where flyclient.h is: $FLYCLIENT_INCLUDE, the tree's build/include,
    the installed prefix's include."""
    cands = [os.environ.get("FLYCLIENT_INCLUDE"),
             os.path.join(PYROOT, "..", "..", "build", "include")]
    lib = flyclient._INSTALLED_LIB
    if lib:
        cands.append(os.path.join(os.path.dirname(lib), "..", "include"))
    cands += ["/usr/local/include", "/usr/include"]
    for c in cands:
        if c and os.path.exists(os.path.join(c, "flyclient.h")):
            return os.path.normpath(c)
    raise OSError("flyclient.h not found (set FLYCLIENT_INCLUDE)")


def build_ext(verbose=False):
    """torch.utils.cpp_extension.load of csrc/flytuned_ops.cpp, cached in
    $FLYTUNED_TORCH_BUILD (default ~/.cache/flytuned/torch_ext)."""
    from torch.utils.cpp_extension import load
    bdir = os.environ.get("FLYTUNED_TORCH_BUILD") or os.path.join(
        os.path.expanduser("~"), ".cache", "flytuned", "torch_ext")
    os.makedirs(bdir, exist_ok=True)
    return load(name="flytuned_ops",
                sources=[os.path.join(HERE, "csrc", "flytuned_ops.cpp")],
                extra_include_paths=[include_dir()],
                extra_cflags=["-O2"], extra_ldflags=["-ldl"],
                with_cuda=True, build_directory=bdir, verbose=verbose)


class Runtime(object):
    """The ctypes path: a flyclient.Client and libflykernels."""

    def __init__(self, sock, device):
        self.client = flyclient.Client(sock, device=device)
        self.device = device
        lib = ctypes.CDLL(kernels_lib())
        P, vp, i64 = ctypes.POINTER, ctypes.c_void_p, ctypes.c_int64
        pd = [P(Problem), P(Decision)]
        lib.flyk_gpu_rmsnorm.argtypes = pd + [vp, vp, vp, vp, ctypes.c_float,
                                              vp]
        lib.flyk_gpu_topk_ws.argtypes = pd + [vp, vp, vp, vp,
                                              ctypes.c_size_t, vp]
        lib.flyk_gpu_gemm.argtypes = pd + [vp, vp, vp, vp, ctypes.c_float,
                                           vp, ctypes.c_size_t, vp]
        lib.flyk_gpu_grouped_gemm.argtypes = pd + [vp, vp, vp, vp, vp]
        lib.flyk_gpu_scaled_gemm.argtypes = pd + [vp] * 7 + [ctypes.c_size_t,
                                                             vp]
        lib.flyk_gpu_mqa_logits.argtypes = pd + [vp] * 7 + [i64, vp]
        self.lib = lib
        self.last = {}       # key tuple -> Decision (what a capture uses)
        self.pending = []    # problems a capture missed
        self.recorded = None  # a list while prepare() records
        self.ws = {}         # stream -> workspace tensor
        self.topk_ws = {}    # stream -> topk's workspace (zeroed)
        self.mu = threading.Lock()
        self.warned = set()
        self.error = ""
        self.calls = self.capture_hits = self.capture_misses = 0
        self.fallbacks = 0

    # ------------------------------------------------------------ decide
    @staticmethod
    def problem(op, dtype, layout, flags, dims):
        p = Problem()
        p.op, p.dtype, p.layout, p.flags = OPS[op], DTYPES[dtype], layout, \
            flags
        for i, v in enumerate(dims):
            p.dims[i] = int(v)
        return p

    def decide(self, p):
        self.calls += 1
        t = (p.op, p.dtype, p.layout, p.flags, tuple(p.dims))
        if self.recorded is not None:
            self.recorded.append(p)
        if not torch.cuda.is_current_stream_capturing():
            self.drain()
            d = Decision()
            flyclient._load().fly_decide(self.client._h, ctypes.byref(p),
                                         ctypes.byref(d))
            self.last[t] = d
            return d
        d = self.last.get(t)
        if d is not None:
            self.capture_hits += 1
            return d
        self.capture_misses += 1
        with self.mu:
            self.pending.append(p)
        return Decision()  # status default, variant "": flyk_default

    def drain(self):
        if not self.pending:
            return
        with self.mu:
            todo, self.pending = self.pending, []
        for p in todo:
            d = Decision()
            flyclient._load().fly_decide(self.client._h, ctypes.byref(p),
                                         ctypes.byref(d))
            self.last[(p.op, p.dtype, p.layout, p.flags, tuple(p.dims))] = d

    def refresh(self):
        self.drain()
        tuned = 0
        for t in list(self.last):
            p = Problem()
            p.op, p.dtype, p.layout, p.flags = t[:4]
            for i, v in enumerate(t[4]):
                p.dims[i] = v
            d = Decision()
            flyclient._load().fly_decide(self.client._h, ctypes.byref(p),
                                         ctypes.byref(d))
            self.last[t] = d
            tuned += d.status == 2
        return tuned

    def take_recorded(self):
        out = []
        buf = ctypes.create_string_buffer(flyclient.KEY_MAX)
        for p in self.recorded or ():
            if flyclient._load().fly_problem_key(ctypes.byref(p), buf,
                                                 flyclient.KEY_MAX) > 0:
                out.append(buf.value.decode())
        self.recorded = []
        return out

    def stats(self):
        return {"calls": self.calls, "capture_hits": self.capture_hits,
                "capture_misses": self.capture_misses,
                "fallbacks": self.fallbacks, "pending": len(self.pending),
                "known": len(self.last), "ok": 1}

    # ------------------------------------------------------------ helpers
    def _served(self, t):
        return t.is_cuda and t.get_device() == self.device and t.numel() > 0

    def _failed(self, op, rc):
        self.fallbacks += 1
        self.error = ("flytuned::%s: the kernel library refused the launch "
                      "(%d: %s); running torch's own op"
                      % (op, rc, os.strerror(abs(rc))))
        if op not in self.warned:
            self.warned.add(op)
            warnings.warn(self.error)

    def last_error(self):
        return self.error

    @staticmethod
    def _stream():
        return torch.cuda.current_stream().cuda_stream

    def _ws(self, s, like):
        w = self.ws.get(s)
        if w is None:
            w = torch.empty(WS_BYTES, dtype=torch.uint8, device=like.device)
            self.ws[s] = w
        return w.data_ptr()

    def _topk_ws(self, s, like):
        w = self.topk_ws.get(s)
        if w is None:
            w = torch.zeros(TOPK_WS_BYTES, dtype=torch.uint8,
                            device=like.device)
            self.topk_ws[s] = w
        return w.data_ptr()

    # ---------------------------------------------------------------- ops
    def rms_norm(self, input, normalized_shape, weight=None, eps=None):
        n = input.shape[-1] if input.dim() else 0
        if (not self._served(input) or input.dtype not in _DT or
                list(normalized_shape) != [n] or weight is None or
                weight.dtype != input.dtype or not input.is_contiguous() or
                not weight.is_contiguous()):
            return _ops.ref_rms_norm(input, normalized_shape, weight, eps)
        e = torch.finfo(input.dtype).eps if eps is None else eps
        p = self.problem("rmsnorm", _DT[input.dtype], 0, 0,
                         (input.numel() // n, n))
        s = self._stream()
        d = self.decide(p)
        y = torch.empty_like(input)
        rc = self.lib.flyk_gpu_rmsnorm(ctypes.byref(p), ctypes.byref(d),
                                       input.data_ptr(), weight.data_ptr(),
                                       y.data_ptr(), None, e, s)
        if rc:
            self._failed("rms_norm", rc)
            return _ops.ref_rms_norm(input, normalized_shape, weight, eps)
        return y

    def fused_add_rms_norm(self, input, residual, weight, eps):
        n = input.shape[-1] if input.dim() else 0
        if (not self._served(input) or input.dtype not in _DT or
                residual.shape != input.shape or
                residual.dtype != input.dtype or weight.dtype != input.dtype
                or weight.numel() != n or not input.is_contiguous() or
                not residual.is_contiguous() or not weight.is_contiguous()):
            return _ops.ref_fused_add_rms_norm(input, residual, weight, eps)
        p = self.problem("rmsnorm", _DT[input.dtype], 0, 0x4,
                         (input.numel() // n, n))
        s = self._stream()
        d = self.decide(p)
        y = torch.empty_like(input)
        rc = self.lib.flyk_gpu_rmsnorm(ctypes.byref(p), ctypes.byref(d),
                                       input.data_ptr(), weight.data_ptr(),
                                       y.data_ptr(), residual.data_ptr(),
                                       eps, s)
        if rc:
            self._failed("fused_add_rms_norm", rc)
            return _ops.ref_fused_add_rms_norm(input, residual, weight, eps)
        return y

    def topk(self, self_, k, dim=-1, largest=True, sorted=True):
        x = self_
        nd = x.dim()
        if (not self._served(x) or x.dtype not in _DT or nd < 1 or
                dim not in (-1, nd - 1) or not largest or
                not x.is_contiguous() or k < 1 or k > x.shape[-1]):
            return _ops.ref_topk(x, k, dim, largest, sorted)
        n = x.shape[-1]
        p = self.problem("topk", _DT[x.dtype], 0, 0, (x.numel() // n, n, k))
        s = self._stream()
        d = self.decide(p)
        shape = tuple(x.shape[:-1]) + (k,)
        v = torch.empty(shape, dtype=x.dtype, device=x.device)
        i = torch.empty(shape, dtype=torch.int64, device=x.device)
        rc = self.lib.flyk_gpu_topk_ws(ctypes.byref(p), ctypes.byref(d),
                                       x.data_ptr(), v.data_ptr(),
                                       i.data_ptr(), self._topk_ws(s, x),
                                       TOPK_WS_BYTES, s)
        if rc:
            self._failed("topk", rc)
            return _ops.ref_topk(x, k, dim, largest, sorted)
        return v, i

    def _gemm_ok(self, a, b):
        return (self._served(a) and a.dim() == 2 and b.dim() == 2 and
                a.dtype == torch.bfloat16 and b.dtype == torch.bfloat16 and
                b.is_cuda and a.is_contiguous() and a.shape[1] == b.shape[0]
                and b.numel() > 0)

    def _gemm(self, a, b, layout, bias):
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        p = self.problem("gemm", "bf16", layout, 0x1 if bias is not None
                         else 0, (m, n, k))
        s = self._stream()
        d = self.decide(p)
        c = torch.empty((m, n), dtype=a.dtype, device=a.device)
        rc = self.lib.flyk_gpu_gemm(
            ctypes.byref(p), ctypes.byref(d), a.data_ptr(), b.data_ptr(),
            c.data_ptr(), None if bias is None else bias.data_ptr(), 1.0,
            self._ws(s, a), WS_BYTES, s)
        if rc:
            self._failed("mm", rc)
            return None
        return c

    def mm(self, self_, mat2):
        a, b = self_, mat2
        lay = 2 if b.is_contiguous() else 1 if b.t().is_contiguous() else 0
        if not self._gemm_ok(a, b) or not lay:
            return _ops.ref_mm(a, b)
        c = self._gemm(a, b, lay, None)
        return _ops.ref_mm(a, b) if c is None else c

    def linear(self, input, weight, bias=None):
        if (input.dim() < 1 or not input.is_contiguous() or
                weight.dim() != 2 or not weight.is_contiguous() or
                (bias is not None and (bias.dtype != torch.bfloat16 or
                                       not bias.is_contiguous()))):
            return _ops.ref_linear(input, weight, bias)
        a2 = input.reshape(-1, input.shape[-1])
        if not self._gemm_ok(a2, weight.t()):
            return _ops.ref_linear(input, weight, bias)
        c = self._gemm(a2, weight.t(), 1, bias)
        if c is None:
            return _ops.ref_linear(input, weight, bias)
        return c.view(tuple(input.shape[:-1]) + (weight.shape[0],))

    def grouped_mm(self, mat_a, mat_b, offs=None, bias=None, out_dtype=None):
        a, b = mat_a, mat_b
        fit = (self._served(a) and a.dim() == 2 and b.dim() == 3 and
               a.dtype == torch.bfloat16 and b.dtype == torch.bfloat16 and
               a.is_contiguous() and b.transpose(-2, -1).is_contiguous() and
               a.shape[1] == b.shape[1] and offs is not None and
               offs.dtype == torch.int32 and offs.dim() == 1 and
               offs.shape[0] == b.shape[0] and bias is None and
               out_dtype in (None, torch.bfloat16))
        if not fit:
            return _ops.ref_grouped_mm(a, b, offs, bias, out_dtype)
        g, m, k, n = b.shape[0], a.shape[0], a.shape[1], b.shape[2]
        p = self.problem("grouped_gemm", "bf16", 1, 0, (g, m, n, k))
        s = self._stream()
        d = self.decide(p)
        o = torch.empty(g + 1, dtype=torch.int64, device=a.device)
        o[:1].zero_()
        o[1:].copy_(offs)
        c = torch.empty((m, n), dtype=a.dtype, device=a.device)
        rc = self.lib.flyk_gpu_grouped_gemm(
            ctypes.byref(p), ctypes.byref(d), a.data_ptr(), b.data_ptr(),
            c.data_ptr(), o.data_ptr(), s)
        if rc:
            self._failed("grouped_mm", rc)
            return _ops.ref_grouped_mm(a, b, offs, bias, out_dtype)
        return c

    def scaled_mm(self, self_, mat2, scale_a, scale_b, bias=None,
                  scale_result=None, out_dtype=None, use_fast_accum=False):
        a, b = self_, mat2
        e4 = torch.float8_e4m3fn
        fit = (self._served(a) and a.dim() == 2 and b.dim() == 2 and
               a.dtype == e4 and b.dtype == e4 and a.is_contiguous() and
               b.t().is_contiguous() and a.shape[1] == b.shape[0] and
               scale_a.numel() == 1 and scale_b.numel() == 1 and
               scale_a.dtype == torch.float32 and
               scale_b.dtype == torch.float32 and scale_result is None and
               out_dtype == torch.bfloat16 and
               (bias is None or (bias.dtype == torch.bfloat16 and
                                 bias.is_contiguous())))
        if not fit:
            return _ops.ref_scaled_mm(a, b, scale_a, scale_b, bias,
                                      scale_result, out_dtype, use_fast_accum)
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        p = self.problem("scaled_gemm", "fp8_e4m3", 1,
                         0x1 if bias is not None else 0, (m, n, k))
        s = self._stream()
        d = self.decide(p)
        c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        rc = self.lib.flyk_gpu_scaled_gemm(
            ctypes.byref(p), ctypes.byref(d), a.data_ptr(), b.data_ptr(),
            scale_a.data_ptr(), scale_b.data_ptr(),
            None if bias is None else bias.data_ptr(), c.data_ptr(),
            self._ws(s, a), WS_BYTES, s)
        if rc:
            self._failed("scaled_mm", rc)
            return _ops.ref_scaled_mm(a, b, scale_a, scale_b, bias,
                                      scale_result, out_dtype, use_fast_accum)
        return c

    def mqa_logits(self, q, kv, kv_scale, weights, ks, ke,
                   clean_logits=True):
        e4 = torch.float8_e4m3fn
        fit = (self._served(q) and q.dim() == 3 and kv.dim() == 2 and
               q.dtype == e4 and kv.dtype == e4 and
               all(t.is_contiguous() for t in (q, kv, kv_scale, weights, ks,
                                               ke)) and
               ks.dtype == torch.int32 and ke.dtype == torch.int32 and
               kv_scale.dtype == torch.float32 and
               weights.dtype == torch.float32)
        if not fit:
            return _ops.ref_mqa_logits(q, kv, kv_scale, weights, ks, ke,
                                       clean_logits)
        sq, h, dd = q.shape
        skv = kv.shape[0]
        p = self.problem("mqa_logits", "fp8_e4m3", 0,
                         0x20 if clean_logits else 0, (sq, skv, h, dd))
        s = self._stream()
        d = self.decide(p)
        out = torch.empty((sq, skv), dtype=torch.float32, device=q.device)
        rc = self.lib.flyk_gpu_mqa_logits(
            ctypes.byref(p), ctypes.byref(d), q.data_ptr(), kv.data_ptr(),
            kv_scale.data_ptr(), weights.data_ptr(), ks.data_ptr(),
            ke.data_ptr(), out.data_ptr(), 0, s)
        if rc:
            self._failed("mqa_logits", rc)
            return _ops.ref_mqa_logits(q, kv, kv_scale, weights, ks, ke,
                                       clean_logits)
        return out


class TorchOnly(object):
    """No daemon, no kernel library or no GPU: torch's own ops."""

    def __getattr__(self, name):
        if name in _ops.REFS:
            return _ops.REFS[name]
        raise AttributeError(name)

    def decide(self, p):
        return Decision()

    def refresh(self):
        return 0

    def take_recorded(self):
        return []

    def stats(self):
        return {"ok": 0}

    def last_error(self):
        return ""
