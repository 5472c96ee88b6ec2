"""flyclient -- Python bindings (ctypes) for libflyclient.

Client(socket=None, device=0) talks to flytuned exactly as a C serving
engine does: process cache, then the shm table, then the socket.

    import flyclient
    c = flyclient.Client("/run/flytuned/gpu0.sock")
    d = c.decide("gemm", "bf16", {"m": 4096, "n": 6144, "k": 4096},
                 layout="NT")
    d["status"], d["variant"], d["params"]

The library is found through $FLYCLIENT_LIB, else build/libflyclient.so of
the source tree this package lives in, else (an installed copy) the
library `make install` put in $(PREFIX)/lib, else
ctypes.util.find_library.
Thread safety: a Client may be shared by threads (libflyclient is
thread-safe); it is closed by close() or when garbage-collected.
"""

import ctypes
import ctypes.util
import os

__all__ = ["Client", "FlyError", "problem_key", "STATUS_NAMES"]

KEY_MAX = 96
VARIANT_MAX = 40
PARAMS_MAX = 8
DIMS_MAX = 8

OPS = {"gemm": 1, "grouped_gemm": 2, "scaled_gemm": 3, "rmsnorm": 4,
       "topk": 5, "attention": 6, "mqa_logits": 7}
DTYPES = {"fp32": 1, "fp16": 2, "bf16": 3, "fp8_e4m3": 4, "fp8_e5m2": 5,
          "mxfp8": 6, "mxfp4": 7, "fp8_e4m3fnuz": 8}
LAYOUTS = {None: 0, "NT": 1, "NN": 2, "TN": 3, "TT": 4}
FLAGS = {"bias": 0x1, "scale": 0x2, "residual": 0x4, "det": 0x8,
         "deterministic": 0x8, "causal": 0x10, "clean": 0x20,
         "kvfnuz": 0x40, "exact": 0x80}
DIM_NAMES = {
    "gemm": ("m", "n", "k"),
    "grouped_gemm": ("g", "m", "n", "k"),
    "scaled_gemm": ("m", "n", "k"),
    "rmsnorm": ("m", "n"),
    "topk": ("m", "n", "k"),
    "attention": ("b", "sq", "skv", "hq", "hkv", "d"),
    "mqa_logits": ("sq", "skv", "h", "d"),
}
STATUS_NAMES = {0: "default", 1: "pending", 2: "tuned"}
E_TIMEOUT = -10013
# `make install` writes the installed library's path here.
_INSTALLED_LIB = None


class Problem(ctypes.Structure):
    """struct fly_problem (proto/fly_abi.h)."""
    _fields_ = [("op", ctypes.c_uint32),
                ("dtype", ctypes.c_uint32),
                ("layout", ctypes.c_uint32),
                ("flags", ctypes.c_uint32),
                ("dims", ctypes.c_int64 * DIMS_MAX)]


class Decision(ctypes.Structure):
    """struct fly_decision (proto/fly_abi.h)."""
    _fields_ = [("status", ctypes.c_uint32),
                ("provisional", ctypes.c_uint32),
                ("variant", ctypes.c_char * VARIANT_MAX),
                ("nparams", ctypes.c_uint32),
                ("exact", ctypes.c_uint32),
                ("params", ctypes.c_int64 * PARAMS_MAX),
                ("median_us", ctypes.c_double),
                ("generation", ctypes.c_uint64)]


class Opts(ctypes.Structure):
    """struct fly_client_opts (client/flyclient.h)."""
    _fields_ = [("socket_path", ctypes.c_char_p),
                ("device", ctypes.c_int),
                ("timeout_ms", ctypes.c_uint32),
                ("recheck_ms", ctypes.c_uint32),
                ("no_shm", ctypes.c_uint32)]


assert ctypes.sizeof(Problem) == 80
assert ctypes.sizeof(Decision) == 136


class FlyError(Exception):
    """A libflyclient error: .code is the negative error code."""

    def __init__(self, code, text):
        Exception.__init__(self, "%s (%d)" % (text, code))
        self.code = code


def _find_lib():
    env = os.environ.get("FLYCLIENT_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    cand = os.path.normpath(os.path.join(here, "..", "..", "..", "build",
                                         "libflyclient.so"))
    if os.path.exists(cand):
        return cand
    if _INSTALLED_LIB is not None and os.path.exists(_INSTALLED_LIB):
        return _INSTALLED_LIB
    found = ctypes.util.find_library("flyclient")
    if found:
        return found
    raise OSError("libflyclient.so not found: set FLYCLIENT_LIB")


_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(_find_lib())
    P = ctypes.POINTER
    lib.fly_client_open_opts.argtypes = [P(Opts), P(ctypes.c_void_p)]
    lib.fly_client_open_opts.restype = ctypes.c_int
    lib.fly_client_close.argtypes = [ctypes.c_void_p]
    lib.fly_client_close.restype = None
    lib.fly_decide.argtypes = [ctypes.c_void_p, P(Problem), P(Decision)]
    lib.fly_decide.restype = ctypes.c_int
    lib.fly_decide_wait.argtypes = [ctypes.c_void_p, P(Problem),
                                    ctypes.c_uint32, P(Decision)]
    lib.fly_decide_wait.restype = ctypes.c_int
    lib.fly_problem_key.argtypes = [P(Problem), ctypes.c_char_p,
                                    ctypes.c_size_t]
    lib.fly_problem_key.restype = ctypes.c_int
    lib.fly_strerror.argtypes = [ctypes.c_int]
    lib.fly_strerror.restype = ctypes.c_char_p
    _lib = lib
    return lib


def _check(rc):
    if rc < 0:
        raise FlyError(rc, _load().fly_strerror(rc).decode())
    return rc


def _problem(op, dtype, dims, layout=None, flags=()):
    if op not in OPS:
        raise ValueError("unknown op %r (one of %s)" % (op, sorted(OPS)))
    if dtype not in DTYPES:
        raise ValueError("unknown dtype %r" % (dtype,))
    if layout not in LAYOUTS:
        raise ValueError("unknown layout %r" % (layout,))
    p = Problem()
    p.op = OPS[op]
    p.dtype = DTYPES[dtype]
    p.layout = LAYOUTS[layout]
    for f in flags:
        if f not in FLAGS:
            raise ValueError("unknown flag %r" % (f,))
        p.flags |= FLAGS[f]
    names = DIM_NAMES[op]
    if isinstance(dims, dict):
        extra = set(dims) - set(names)
        if extra:
            raise ValueError("unknown dims %s for %s" % (sorted(extra), op))
        vals = [dims.get(n, 0) for n in names]
    else:
        vals = list(dims)
        if len(vals) != len(names):
            raise ValueError("%s takes dims %s" % (op, names))
    for i, v in enumerate(vals):
        p.dims[i] = int(v)
    return p


def problem_key(op, dtype, dims, layout=None, flags=()):
    """The canonical (bucketed) key of a problem."""
    p = _problem(op, dtype, dims, layout, flags)
    buf = ctypes.create_string_buffer(KEY_MAX)
    _check(_load().fly_problem_key(ctypes.byref(p), buf, KEY_MAX))
    return buf.value.decode()


def _as_dict(d, key):
    return {"status": STATUS_NAMES.get(d.status, str(d.status)),
            "variant": d.variant.decode(),
            "params": [d.params[i] for i in range(min(d.nparams,
                                                      PARAMS_MAX))],
            "provisional": bool(d.provisional),
            "exact": bool(d.exact),
            "median_us": d.median_us,
            "key": key}


class Client(object):
    """A libflyclient handle.

    socket: the daemon's socket path (None: $FLYTUNED_SOCKET, else
    /run/flytuned/gpu<device>.sock).  timeout_ms: fly_decide's budget
    (0: 5 ms).  Connection is lazy: decide() answers "default" while the
    daemon is down.
    """

    def __init__(self, socket=None, device=0, timeout_ms=0, recheck_ms=0,
                 no_shm=False):
        lib = _load()
        self._path = socket.encode() if socket is not None else None
        o = Opts(self._path, int(device), int(timeout_ms), int(recheck_ms),
                 1 if no_shm else 0)
        h = ctypes.c_void_p()
        _check(lib.fly_client_open_opts(ctypes.byref(o), ctypes.byref(h)))
        self._lib = lib  # kept: module globals may be gone in __del__
        self._h = h

    def close(self):
        if getattr(self, "_h", None):
            self._lib.fly_client_close(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def decide(self, op, dtype, dims, layout=None, flags=()):
        """Which variant to launch: dict(status, variant, params,
        provisional, exact, median_us, key); exact: the shape's own
        exact-shape row answered (issue 22), not its bucket's.  Never waits for tuning; raises
        ValueError/FlyError only for a bad problem."""
        p = _problem(op, dtype, dims, layout, flags)
        d = Decision()
        _check(_load().fly_decide(self._h, ctypes.byref(p), ctypes.byref(d)))
        return _as_dict(d, problem_key(op, dtype, dims, layout, flags))

    def decide_wait(self, op, dtype, dims, layout=None, flags=(),
                    timeout_ms=60000):
        """Like decide(), but asks the daemon to tune now and waits up to
        timeout_ms.  On a timeout the best answer so far is returned
        (status not "tuned"); other failures raise FlyError."""
        p = _problem(op, dtype, dims, layout, flags)
        d = Decision()
        rc = _load().fly_decide_wait(self._h, ctypes.byref(p),
                                     int(timeout_ms), ctypes.byref(d))
        if rc < 0 and rc != E_TIMEOUT:
            _check(rc)
        return _as_dict(d, problem_key(op, dtype, dims, layout, flags))
