"""flyclient.kernels -- launch what the daemon decided, from Python.

A thin ctypes layer over libflykernels_{cuda,hip}.so's exported launchers
(kernels/gpu/launch_api.hip): the same library the daemon measured with,
so the launch is exactly the measured kernel.  Tensors are passed as
device pointers: anything with .data_ptr() (a torch tensor) or an int.

    import flyclient, flyclient.kernels as fk
    c = flyclient.Client(sock)
    k = fk.Kernels()              # $FLYK_LIB, else build/libflykernels_cuda.so
    d = c.decide("mqa_logits", "fp8_e4m3",
                 {"sq": 4096, "skv": 4096, "h": 64, "d": 128},
                 flags=("clean",))
    k.mqa_logits(d, q, kv, kv_scale, weights, ks, ke, logits, clean=True)

Every launcher raises FlyKernelError (negative errno in .code) on
failure: -EINVAL (infeasible for these dims, misaligned pointers),
-ENOENT (variant unknown to this library), -ENODEV (no GPU).
"""

import ctypes
import os

from . import Decision, Problem, OPS, DTYPES, FLAGS, PARAMS_MAX

__all__ = ["Kernels", "FlyKernelError", "decision"]


class FlyKernelError(Exception):
    def __init__(self, fn, code):
        Exception.__init__(self, "%s failed: %s (%d)" %
                           (fn, os.strerror(-code) if code < 0 else "?", code))
        self.code = code


def _ptr(t):
    if t is None:
        return None
    if isinstance(t, int):
        return t
    return t.data_ptr()


def decision(d):
    """A Decision struct from a Client.decide() dict (or a Decision)."""
    if isinstance(d, Decision):
        return d
    out = Decision()
    out.variant = d["variant"].encode()
    params = list(d.get("params", ()))
    if len(params) > PARAMS_MAX:
        raise ValueError("too many params")
    out.nparams = len(params)
    for i, v in enumerate(params):
        out.params[i] = int(v)
    return out


def _find():
    env = os.environ.get("FLYK_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.path.normpath(os.path.join(here, "..", "..", "..", "build"))
    dirs = [build]
    # installed: beside the daemon's, PREFIX/lib/flytuned (the package's
    # /usr/lib/flytuned), PREFIX from where libflyclient was installed
    from . import _INSTALLED_LIB
    if _INSTALLED_LIB:
        dirs.append(os.path.join(os.path.dirname(_INSTALLED_LIB), "flytuned"))
    for d in dirs:
        for name in ("libflykernels_cuda.so", "libflykernels_hip.so"):
            if os.path.exists(os.path.join(d, name)):
                return os.path.join(d, name)
    raise OSError("libflykernels_{cuda,hip}.so not found in %s: set "
                  "FLYK_LIB" % ", ".join(dirs))


class Kernels(object):
    """The GPU kernel library; path None: $FLYK_LIB, else the source
    tree's build/, else the installed PREFIX/lib/flytuned."""

    def __init__(self, path=None):
        lib = ctypes.CDLL(path or _find())
        P, vp, i64 = ctypes.POINTER, ctypes.c_void_p, ctypes.c_int64
        lib.flyk_gpu_mqa_logits.argtypes = [P(Problem), P(Decision), vp, vp,
                                            vp, vp, vp, vp, vp, i64, vp]
        lib.flyk_gpu_mqa_logits.restype = ctypes.c_int
        lib.flyk_gpu_scaled_gemm.argtypes = [P(Problem), P(Decision), vp, vp,
                                             vp, vp, vp, vp, vp,
                                             ctypes.c_size_t, vp]
        lib.flyk_gpu_scaled_gemm.restype = ctypes.c_int
        lib.flyk_gpu_attention.argtypes = [P(Problem), P(Decision), vp, vp,
                                           vp, vp, vp, ctypes.c_float,
                                           P(i64), vp, ctypes.c_size_t, vp]
        lib.flyk_gpu_attention.restype = ctypes.c_int
        lib.flyk_gpu_default.argtypes = [P(Problem), P(Decision)]
        lib.flyk_gpu_default.restype = ctypes.c_int
        self.lib = lib

    @staticmethod
    def _stream(stream):
        if stream is not None:
            return stream if isinstance(stream, int) else stream.cuda_stream
        try:
            import torch
            return torch.cuda.current_stream().cuda_stream
        except ImportError:
            return None

    def mqa_problem(self, sq, skv, h, d, dtype="fp8_e4m3", clean=False,
                    kv_fnuz=False):
        p = Problem()
        p.op, p.dtype = OPS["mqa_logits"], DTYPES[dtype]
        p.flags = (FLAGS["clean"] if clean else 0) | \
            (FLAGS["kvfnuz"] if kv_fnuz else 0)
        for i, v in enumerate((sq, skv, h, d)):
            p.dims[i] = int(v)
        return p

    def mqa_logits(self, d, q, kv, kv_scale, weights, ks, ke, logits,
                   clean=False, dtype="fp8_e4m3", kv_fnuz=False, ld=0,
                   stream=None, problem=None):
        """logits[i, j] = sum_h w[i,h] relu(q[i,h,:].kv[j,:]) kv_scale[j]
        for ks[i] <= j < ke[i]; -inf elsewhere with clean.  q [sq,h,d] and
        kv [skv,d] fp8 (uint8 views are fine), kv_scale [skv] and weights
        [sq,h] fp32, ks/ke [sq] int32, logits [sq, ld or skv] fp32."""
        if problem is None:
            sq, h, dd = q.shape
            problem = self.mqa_problem(sq, kv.shape[0], h, dd, dtype, clean,
                                       kv_fnuz)
        dec = decision(d)
        rc = self.lib.flyk_gpu_mqa_logits(
            ctypes.byref(problem), ctypes.byref(dec), _ptr(q), _ptr(kv),
            _ptr(kv_scale), _ptr(weights), _ptr(ks), _ptr(ke), _ptr(logits),
            int(ld), self._stream(stream))
        if rc:
            raise FlyKernelError("flyk_gpu_mqa_logits", rc)
        return logits

    def scaled_problem(self, m, n, k, dtype="fp8_e4m3", bias=False):
        p = Problem()
        p.op, p.dtype, p.layout = OPS["scaled_gemm"], DTYPES[dtype], 1
        p.flags = FLAGS["bias"] if bias else 0
        for i, v in enumerate((m, n, k)):
            p.dims[i] = int(v)
        return p

    def scaled_gemm(self, d, a, b, scale_a, scale_b, c, bias=None,
                    dtype="fp8_e4m3", workspace=None, stream=None,
                    problem=None):
        """c[m,n] (bf16) = a[m,k] . b[n,k]^T with the format's scales, +
        bias[n].  fp8_e4m3/fp8_e4m3fnuz: scale_a, scale_b one fp32 each;
        mxfp8: [m,k/32] and [n,k/32] e8m0 bytes; mxfp4: a [m,k/2], b
        [n,k/2] bytes (low nibble the even k), scales as mxfp8.  workspace:
        a byte tensor (mxfp4 on sg_wgmma needs (m + n) * k bytes)."""
        if problem is None:
            m, n = c.shape
            k = a.shape[1] * (2 if dtype == "mxfp4" else 1)
            problem = self.scaled_problem(m, n, k, dtype, bias is not None)
        dec = decision(d)
        ws_size = 0 if workspace is None else \
            workspace.numel() * workspace.element_size()
        rc = self.lib.flyk_gpu_scaled_gemm(
            ctypes.byref(problem), ctypes.byref(dec), _ptr(a), _ptr(b),
            _ptr(scale_a), _ptr(scale_b), _ptr(bias), _ptr(c),
            _ptr(workspace), ws_size, self._stream(stream))
        if rc:
            raise FlyKernelError("flyk_gpu_scaled_gemm", rc)
        return c

    def attention_problem(self, b, sq, skv, hq, hkv, d, dtype="bf16",
                          causal=False):
        p = Problem()
        p.op, p.dtype = OPS["attention"], DTYPES[dtype]
        p.flags = FLAGS["causal"] if causal else 0
        for i, v in enumerate((b, sq, skv, hq, hkv, d)):
            p.dims[i] = int(v)
        return p

    def attention(self, d, q, k, v, o, lse=None, scale=None, causal=False,
                  dtype=None, workspace=None, stream=None, problem=None):
        """o = softmax(scale q k^T) v, q [b,sq,hq,d], k and v [b,skv,hkv,d]
        (torch tensors: their strides are passed, the last dim must be
        contiguous), o [b,sq,hq,d], bf16/fp16; lse [b,hq,sq] fp32 or None.
        causal aligns bottom-right (query i sees keys <= i + skv - sq);
        rows that see no key are 0 with lse -inf.  scale None: 1/sqrt(d).
        workspace: a byte tensor (attn_fa2_split needs split * b * hq * sq
        * (d + 1) * 4 bytes, at most 32 MiB)."""
        if dtype is None:
            dtype = "fp16" if "float16" in str(q.dtype) else "bf16"
        if problem is None:
            bb, sq, hq, dd = q.shape
            problem = self.attention_problem(bb, sq, k.shape[1], hq,
                                             k.shape[2], dd, dtype, causal)
        if scale is None:
            scale = 1.0 / float(problem.dims[5]) ** 0.5
        strides = (ctypes.c_int64 * 12)()
        for i, t in enumerate((q, k, v, o)):
            if t.stride(3) != 1:
                raise ValueError("attention: the head dim must be "
                                 "contiguous")
            for j in range(3):
                strides[3 * i + j] = int(t.stride(j))
        dec = decision(d)
        ws_size = 0 if workspace is None else \
            workspace.numel() * workspace.element_size()
        rc = self.lib.flyk_gpu_attention(
            ctypes.byref(problem), ctypes.byref(dec), _ptr(q), _ptr(k),
            _ptr(v), _ptr(o), _ptr(lse), float(scale), strides,
            _ptr(workspace), ws_size, self._stream(stream))
        if rc:
            raise FlyKernelError("flyk_gpu_attention", rc)
        return o
