"""flytuned.torch -- flytuned's kernels as PyTorch custom ops.

    import flytuned.torch as ft
    ft.enable()                         # F.rms_norm, torch.topk, torch.mm,
                                        # torch.matmul, F.linear (bf16 2-D),
                                        # torch._scaled_mm, torch._grouped_mm
    ft.prepare(model, (x,))             # record every (op, shape), tune, wait
    model = torch.compile(model)        # the ops are opaque nodes
    # ... or capture a CUDA graph: it replays the tuned kernels

The ops are torch.ops.flytuned.{rms_norm, fused_add_rms_norm, topk, mm,
linear, grouped_mm, scaled_mm, mqa_logits, attention} (schemas in _ops.py),
each with a fake implementation, so torch.compile traces them as single
nodes and CUDA graph capture records their kernels.

At import: where a daemon answers on $FLYTUNED_SOCKET (else
/run/flytuned/gpu<FLYTUNED_DEVICE>.sock), libflyclient and
libflykernels_{cuda,hip}.so are found and a CUDA device exists, the CUDA
kernels are the C++ extension csrc/flytuned_ops.cpp (built by
torch.utils.cpp_extension.load, cached in $FLYTUNED_TORCH_BUILD, default
~/.cache/flytuned/torch_ext), else -- with one warning saying why -- the
ctypes path.  Without a daemon, a kernel library or a GPU every op is
torch's own, with one warning.  FLYTUNED_TORCH_EXT=0 skips the extension.

CUDA graphs: during a capture no op talks to the daemon, synchronises or
allocates outside torch's allocator; a problem never decided before the
capture launches flyk_default's choice and is sent for tuning after it.
The captured graph keeps what it captured until it is captured again:
prepare() before capture.  docs/torch.md.
"""

import os
import threading
import time
import warnings

import torch
import torch.nn.functional as F

from . import _ops, _runtime

__all__ = ["enable", "disable", "is_enabled", "prepare", "backend",
           "stats", "last_error", "ops"]

ops = torch.ops.flytuned


class _State(object):
    backend = "torch"   # "cpp", "ctypes" or "torch"
    reason = ""         # why not "cpp" (or why "torch")
    ext = None          # the C++ extension module
    rt = None           # _runtime.Runtime or TorchOnly
    sock = None
    device = 0


_S = _State()


def _setup():
    _S.device = int(os.environ.get("FLYTUNED_DEVICE", "0") or 0)
    _S.sock = _runtime.socket_path(_S.device)
    why = None
    if not torch.cuda.is_available():
        why = "no CUDA device"
    if why is None:
        try:
            clib, klib = _runtime.client_lib(), _runtime.kernels_lib()
        except OSError as e:
            why = str(e)
    if why is None and not _runtime.daemon_up(_S.sock):
        why = "no flytuned daemon at %s" % _S.sock
    if why is not None:
        _S.reason = why
        _S.rt = _runtime.TorchOnly()
        _ops.register_python_cuda(_S.rt)
        warnings.warn("flytuned.torch: %s; every flytuned op runs torch's "
                      "own" % why, RuntimeWarning, stacklevel=3)
        return
    if os.environ.get("FLYTUNED_TORCH_EXT", "1") != "0":
        try:
            ext = _runtime.build_ext()
            err = ext.init(clib, klib, _S.sock, _S.device, 0)
            if err:
                raise RuntimeError(err)
            _S.ext, _S.rt, _S.backend = ext, ext, "cpp"
            return
        except Exception as e:  # the build or the libraries: say why
            _S.reason = "C++ extension unavailable: %s" % (
                str(e).strip().splitlines() or ["?"])[-1]
            if _S.ext is None and "ext" in locals():
                # registered its CUDA kernels, falls back inside them
                _S.ext, _S.rt, _S.backend = ext, ext, "torch"
                warnings.warn("flytuned.torch: %s; every flytuned op runs "
                              "torch's own" % _S.reason, RuntimeWarning,
                              stacklevel=3)
                return
    else:
        _S.reason = "C++ extension disabled (FLYTUNED_TORCH_EXT=0)"
    _S.rt = _runtime.Runtime(_S.sock, _S.device)
    _S.backend = "ctypes"
    _ops.register_python_cuda(_S.rt)
    warnings.warn("flytuned.torch: %s; using the ctypes path (more host "
                  "time per call)" % _S.reason, RuntimeWarning, stacklevel=3)


_setup()


def backend():
    """("cpp" | "ctypes" | "torch", why not "cpp")."""
    return _S.backend, _S.reason


def stats():
    """Counters: calls, capture_hits, capture_misses, fallbacks, pending,
    known (problems with a remembered decision), ok."""
    return dict(_S.rt.stats())


def last_error():
    """Why the kernel library last refused a launch (the op then ran
    torch's own; stats()["fallbacks"] counts them), or ""."""
    return _S.rt.last_error()


# ------------------------------------------------------------ routing
# The routed calls go to each op's one overload directly: calling the
# packet (ops.rms_norm) resolves the overload on every call, host time an
# engine pays per launch (issue 17: routed calls cost 0.8-2 us over the
# ops' own).
_OV = {n: getattr(ops, n).default for n in _ops.SCHEMAS}
_Tensor = torch.Tensor
_grad_on = torch.is_grad_enabled


def _plain(*ts):
    """CUDA tensors that need no autograd (the ops have no backward)."""
    grad = None
    for t in ts:
        if t is None:
            continue
        if not isinstance(t, _Tensor) or not t.is_cuda:
            return False
        if t.requires_grad:
            if grad is None:
                grad = _grad_on()
            if grad:
                return False
    return True


def _rms_norm(input, normalized_shape, weight=None, eps=None):
    if _plain(input, weight):
        if isinstance(normalized_shape, int):
            normalized_shape = [normalized_shape]
        return _OV["rms_norm"](input, list(normalized_shape), weight,
                                 eps)
    return _ops.ORIG["rms_norm"](input, normalized_shape, weight, eps)


def _topk(input, k, dim=-1, largest=True, sorted=True, *, out=None):
    if out is None and _plain(input):
        v, i = _OV["topk"](input, k, dim, largest, sorted)
        return torch.return_types.topk((v, i))
    if out is None:
        return _ops.ORIG["topk"](input, k, dim, largest, sorted)
    return _ops.ORIG["topk"](input, k, dim, largest, sorted, out=out)


def _gemm2d(a, b):
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and
            a.dim() == 2 and b.dim() == 2 and a.dtype == torch.bfloat16 and
            b.dtype == torch.bfloat16 and _plain(a, b))


def _mm(input, mat2, *, out=None):
    if out is None and _gemm2d(input, mat2):
        return _OV["mm"](input, mat2)
    if out is None:
        return _ops.ORIG["mm"](input, mat2)
    return _ops.ORIG["mm"](input, mat2, out=out)


def _matmul(input, other, *, out=None):
    if out is None and _gemm2d(input, other):
        return _OV["mm"](input, other)
    if out is None:
        return _ops.ORIG["matmul"](input, other)
    return _ops.ORIG["matmul"](input, other, out=out)


def _linear(input, weight, bias=None):
    if (input.dtype == torch.bfloat16 and weight.dtype == torch.bfloat16
            and weight.dim() == 2 and _plain(input, weight, bias)):
        return _OV["linear"](input, weight, bias)
    return _ops.ORIG["linear"](input, weight, bias)


def _scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None,
               out_dtype=None, use_fast_accum=False):
    if _plain(self, mat2, scale_a, scale_b, bias, scale_result):
        return _OV["scaled_mm"](self, mat2, scale_a, scale_b, bias,
                                scale_result, out_dtype, use_fast_accum)
    return _ops.ORIG["scaled_mm"](self, mat2, scale_a, scale_b, bias=bias,
                                  scale_result=scale_result,
                                  out_dtype=out_dtype,
                                  use_fast_accum=use_fast_accum)


def _grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    if _plain(mat_a, mat_b, offs, bias):
        return _OV["grouped_mm"](mat_a, mat_b, offs, bias, out_dtype)
    return _ops.ORIG["grouped_mm"](mat_a, mat_b, offs=offs, bias=bias,
                                   out_dtype=out_dtype)


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
          scale=None, enable_gqa=False):
    """Attention without a mask or dropout (GQA as SDPA allows it) through
    flytuned::attention; everything else SDPA."""
    if (attn_mask is None and dropout_p == 0.0 and query.dim() == 4 and
            key.dim() == 4 and (enable_gqa or key.shape[1] == query.shape[1])
            and _plain(query, key, value)):
        return _OV["attention"](query, key, value, is_causal, scale)
    return _ops.ORIG["sdpa"](query, key, value, attn_mask=attn_mask,
                             dropout_p=dropout_p, is_causal=is_causal,
                             scale=scale, enable_gqa=enable_gqa)


# (module, attribute, replacement)
_ROUTES = [(F, "rms_norm", _rms_norm), (torch, "topk", _topk),
           (torch, "mm", _mm), (torch, "matmul", _matmul),
           (F, "linear", _linear), (torch, "_scaled_mm", _scaled_mm),
           (torch, "_grouped_mm", _grouped_mm),
           (F, "scaled_dot_product_attention", _sdpa)]
_saved = {}


def enable():
    """Route F.rms_norm, torch.topk, torch.mm / torch.matmul and F.linear
    (bf16, 2-D), torch._scaled_mm, torch._grouped_mm and
    F.scaled_dot_product_attention (no mask, no dropout) through flytuned's
    ops (the way torch.cuda.tunable.enable() switches TunableOp on).  Calls
    on CPU tensors, or needing autograd, stay torch's.  Tensor methods
    (x.topk(), a @ b) are not routed.  Idempotent."""
    for mod, name, fn in _ROUTES:
        if (mod, name) in _saved or not hasattr(mod, name):
            continue
        _saved[(mod, name)] = getattr(mod, name)
        setattr(mod, name, fn)


def disable():
    """Undo enable()."""
    for (mod, name), fn in list(_saved.items()):
        setattr(mod, name, fn)
        del _saved[(mod, name)]


def is_enabled():
    return bool(_saved)


# ------------------------------------------------------------ prepare
def _decide_wait(key, timeout_ms):
    """fly_decide_wait on a key; (status name, seconds)."""
    import ctypes
    import flyclient
    lib = flyclient._load()
    P = ctypes.POINTER
    lib.fly_problem_from_key.argtypes = [ctypes.c_char_p, P(flyclient.Problem)]
    lib.fly_problem_from_key.restype = ctypes.c_int
    p, d = flyclient.Problem(), flyclient.Decision()
    if lib.fly_problem_from_key(key.encode(), ctypes.byref(p)) < 0:
        return "badkey", 0.0
    t0 = time.time()
    with flyclient.Client(_S.sock, device=_S.device) as c:
        lib.fly_decide_wait(c._h, ctypes.byref(p), int(timeout_ms),
                            ctypes.byref(d))
    return flyclient.STATUS_NAMES.get(d.status, "?"), time.time() - t0


def prepare(model, example_inputs, timeout_s=600.0, threads=4,
            verbose=True):
    """Run model(*example_inputs) once (no_grad, routing on) recording
    every (op, shape) flytuned serves, have the daemon tune them (explicit
    tune requests, `threads` at a time) and wait, at most timeout_s in
    all, printing progress; then refresh the decisions the ops remember,
    so a CUDA graph captured afterwards replays the tuned kernels.
    Returns {key: status} ("tuned", or "pending"/"default" on timeout)."""
    if _S.backend == "torch":
        if verbose:
            print("flytuned.prepare: %s; nothing to tune" % _S.reason,
                  flush=True)
        return {}
    was = is_enabled()
    enable()
    _S.rt.set_record(True) if _S.ext is not None else \
        setattr(_S.rt, "recorded", [])
    try:
        with torch.no_grad():
            model(*example_inputs)
        torch.cuda.synchronize()
    finally:
        keys = sorted(set(_S.rt.take_recorded()))
        if _S.ext is not None:
            _S.rt.set_record(False)
        else:
            _S.rt.recorded = None
        if not was:
            disable()
    out, lock, t0 = {}, threading.Lock(), time.time()
    todo = list(keys)

    def work():
        while True:
            with lock:
                if not todo:
                    return
                key = todo.pop(0)
            left = timeout_s - (time.time() - t0)
            st, dt = _decide_wait(key, max(1, int(left * 1000))) \
                if left > 0 else ("pending", 0.0)
            with lock:
                out[key] = st
                if verbose:
                    print("flytuned.prepare: %d/%d %s %s (%.2f s)" %
                          (len(out), len(keys), key, st, dt), flush=True)

    ts = [threading.Thread(target=work) for _ in range(max(1, threads))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    tuned = _S.rt.refresh()
    if verbose:
        print("flytuned.prepare: %d keys, %d tuned, %.1f s" %
              (len(keys), sum(v == "tuned" for v in out.values()),
               time.time() - t0), flush=True)
    del tuned
    return out
