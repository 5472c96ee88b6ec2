#!/usr/bin/env python3
"""gpu_bench.py -- flytuned's RMSNorm and TopK kernels against PyTorch on
the GPU, in one run, with one timing function for everything.

Daemon-driven (the default): starts flytuned on the GPU backend
(BUILD/flytuned --foreground --state-dir DIR, config {"backend": "cuda"},
"hip" on ROCm),
asks it through the Python client for each case of cases.json (rmsnorm,
topk: primary and serving, and with --sets long the topk "long" set of
few very long rows, LONG_TOPK below; topk with FLY_F_DETERMINISTIC off
and on) with
decide_wait (its wall time is the case's tune_s), launches the decision
through libflykernels_cuda.so or, on ROCm, libflykernels_hip.so
(flyk_gpu_rmsnorm / flyk_gpu_topk_ws, ctypes)
on PyTorch tensors and the current stream, and times it beside the peers:
torch.nn.functional.rms_norm eager ("aten") and under torch.compile
("inductor"); torch.topk with torch.use_deterministic_algorithms off
("aten_det0") and on ("aten_det1").  rmsnorm_residual (the bf16 serving
shapes): ours with FLY_F_RESIDUAL (r += x in place, y = rms_norm(r))
against `s = x + r; y = rms_norm(s)` returning (y, s), eager ("eager")
and under torch.compile ("inductor", one fused kernel).

--standalone: no daemon; every feasible (variant, point) of the library
(flyk_gpu_candidates) is timed per case and the fastest kept (variant
"best of sweep"; tune_s is then the sweep's wall time).  That is how the
kernels were iterated on before the daemon existed.

Timing (bench()): CUDA events around each call, the L2 cleaned before
each rep by READING a 512 MiB buffer (torch.sum into one element), a few
warm-ups, the median of up to `reps` reps within a budget.  Ours and the
peers of a case are timed in one bench_side_by_side() call, their reps
interleaved (the same per-call timing), so that clocks and temperature
are the same for all; the copy ceiling and the sweep by bench().

The second timing (bench_graph_side_by_side(), also used by
gemm_bench.py, scaled_gemm_bench.py, attention_bench.py and
mqa_bench.py): each callable captured GRAPH_CALLS times back to back in
a CUDA graph, no clean between the calls, replayed; per-call GPU time =
replay time / calls, the median over interleaved replays (host cost
excluded, caches as back-to-back calls leave them).  A capture of ours
that fails stops the case with GraphCaptureError; it is never timed
another way instead.

Writes OUT/<gpu>-rmsnorm.json, OUT/<gpu>-rmsnorm_residual.json and
OUT/<gpu>-topk.json as
{"gpu","date","commit","copy_gbps","cases":[{"op","case","set","variant",
"params","flytuned_ms","peers":{NAME: ms},"max_abs_err","tune_s",
"graph_ms":{"ours"|NAME: ms},"graph_peer","graph_x_vs_peer",
"graph_calls"}]} and prints a table: ratios vs each peer and vs the
faster peer, GB/s against the measured copy bandwidth, the graph-replay
ratio; the summary counts the cases where graph_x_vs_peer < 0.95.

usage: python3 bench/gpu_bench.py [--standalone] [--build DIR]
       [--cases FILE] [--out DIR] [--ops rmsnorm,rmsnorm_residual,topk]
       [--sets primary,serving[,long]]
"""
import argparse
import ctypes
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_vendor  # noqa: E402 (bench/: the NVIDIA/AMD differences)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OP_RMSNORM, OP_TOPK = 4, 5
DTYPES = {"fp32": 1, "fp16": 2, "bf16": 3}
TORCH_DT = {"fp32": torch.float32, "fp16": torch.float16,
            "bf16": torch.bfloat16}
F_RESIDUAL, F_DET = 0x4, 0x8
EPS = 1e-6
TOPK_WS_BYTES = 1 << 20  # FLYK_TOPK_WS_BYTES (flyk.h)


class Problem(ctypes.Structure):
    """struct fly_problem (proto/fly_abi.h)."""
    _fields_ = [("op", ctypes.c_uint32), ("dtype", ctypes.c_uint32),
                ("layout", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("dims", ctypes.c_int64 * 8)]


class Decision(ctypes.Structure):
    """struct fly_decision (proto/fly_abi.h)."""
    _fields_ = [("status", ctypes.c_uint32), ("provisional", ctypes.c_uint32),
                ("variant", ctypes.c_char * 40), ("nparams", ctypes.c_uint32),
                ("exact", ctypes.c_uint32), ("params", ctypes.c_int64 * 8),
                ("median_us", ctypes.c_double),
                ("generation", ctypes.c_uint64)]


assert ctypes.sizeof(Problem) == 80 and ctypes.sizeof(Decision) == 136


def load_kernels(build):
    path = gpu_vendor.kernels_lib(build)  # _hip.so on ROCm
    lib = ctypes.CDLL(path)
    P, vp = ctypes.POINTER, ctypes.c_void_p
    lib.flyk_gpu_rmsnorm.argtypes = [P(Problem), P(Decision), vp, vp, vp, vp,
                                     ctypes.c_float, vp]
    lib.flyk_gpu_topk.argtypes = [P(Problem), P(Decision), vp, vp, vp, vp]
    lib.flyk_gpu_topk_ws.argtypes = [P(Problem), P(Decision), vp, vp, vp,
                                     vp, ctypes.c_size_t, vp]
    lib.flyk_gpu_candidates.argtypes = [P(Problem), P(Decision), ctypes.c_int]
    lib.flyk_gpu_default.argtypes = [P(Problem), P(Decision)]
    for f in (lib.flyk_gpu_rmsnorm, lib.flyk_gpu_topk, lib.flyk_gpu_topk_ws,
              lib.flyk_gpu_candidates, lib.flyk_gpu_default):
        f.restype = ctypes.c_int
    return lib


# ---------------------------------------------------------------- timing
_flush = None
_sink = None


def clean_l2():
    """Read 512 MiB (>= 4x the L2; on MI300X 1 GiB, 4x its 256 MiB
    Infinity Cache: gpu_vendor.flush_bytes), write one element: not a
    memset."""
    global _flush, _sink
    if _flush is None:
        _flush = torch.ones(gpu_vendor.flush_bytes(), dtype=torch.uint8,
                            device="cuda").view(torch.int64)
        _sink = torch.empty((), dtype=torch.int64, device="cuda")
    torch.sum(_flush, dim=0, out=_sink)


def bench(fn, warmup=5, reps=50, budget_ms=150.0):
    """Median ms of fn, each rep timed alone by CUDA events after an L2
    clean by read.  THE timing function: ours, peers, copy alike."""
    for _ in range(warmup):
        fn()
    ev = [(torch.cuda.Event(enable_timing=True),
           torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    n = 0
    for i in range(reps):
        clean_l2()
        ev[i][0].record()
        fn()
        ev[i][1].record()
        n += 1
        if i == 4:
            torch.cuda.synchronize()
            spent = sum(a.elapsed_time(b) for a, b in ev[:5]) / 5
            if spent * reps > budget_ms:
                reps = max(10, int(budget_ms / max(spent, 1e-3)))
        if n >= reps:
            break
    torch.cuda.synchronize()
    return sorted(a.elapsed_time(b) for a, b in ev[:n])[n // 2]


def bench_side_by_side(fns, warmup=5, reps=50, budget_ms=150.0):
    """{name: median ms} of the callables in @p fns, each rep timed as
    bench() times it (events around the one call, after an L2 clean by
    read), the reps interleaved: rep i of every one in turn, the order
    rotating by one each rep.  Timed one after the other, the first got
    the GPU as the tuning had left it (hot, power-capped) and the last,
    after Inductor's compile (the GPU idle for seconds), cool clocks:
    on M4096 N4096 K8192 that made the same cuBLAS kernel 6% faster as
    Inductor's pick than as torch.matmul.  budget_ms is per callable."""
    names = list(fns)
    for nm in names:
        for _ in range(warmup):
            fns[nm]()
    ev = {nm: [] for nm in names}
    i = 0
    while i < reps:
        r = i % len(names)
        for nm in names[r:] + names[:r]:
            e = (torch.cuda.Event(enable_timing=True),
                 torch.cuda.Event(enable_timing=True))
            clean_l2()
            e[0].record()
            fns[nm]()
            e[1].record()
            ev[nm].append(e)
        i += 1
        if i == 5:
            torch.cuda.synchronize()
            spent = sum(sum(a.elapsed_time(b) for a, b in ev[nm]) / 5
                        for nm in names)
            if spent * reps > budget_ms * len(names):
                reps = max(10, int(budget_ms * len(names) /
                                   max(spent, 1e-3)))
    torch.cuda.synchronize()
    return {nm: sorted(a.elapsed_time(b) for a, b in ev[nm])[len(ev[nm]) // 2]
            for nm in names}


GRAPH_CALLS = 20


class GraphCaptureError(RuntimeError):
    """A callable that must be timed under graph replay did not capture."""


def bench_graph_side_by_side(fns, must=("ours", "flytuned"),
                             calls=GRAPH_CALLS, reps=20, budget_ms=150.0):
    """The second timing (issue 22 item 7): GPU time per call as a server
    replaying CUDA graphs sees it, host cost excluded.  Each callable of
    @p fns is captured `calls` times back to back into its own CUDA graph
    (no L2 clean between the calls, nor between replays: what the calls
    leave in L2 is what the next one finds, as in a replayed decode
    step); each replay is timed by CUDA events; per-call ms = replay ms /
    calls, the median over the replays.  The replays are interleaved with
    a rotating order, as bench_side_by_side() interleaves its reps.
    Warm-ups run on a side stream first (torch's rule before a capture).

    Returns ({name: per-call ms}, {name: capture error}).  A callable
    named in @p must whose capture fails raises GraphCaptureError: ours
    is never timed some other way in its place; a peer that cannot be
    captured is left out and its error returned.  budget_ms is per
    callable, as in bench_side_by_side()."""
    names = list(fns)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for nm in names:
            for _ in range(3):
                fns[nm]()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graphs, failed = {}, {}
    for nm in names:
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                for _ in range(calls):
                    fns[nm]()
        except Exception as e:
            torch.cuda.synchronize()
            if nm in must:
                raise GraphCaptureError("%s: CUDA graph capture failed: %r"
                                        % (nm, e)) from e
            failed[nm] = repr(e)
            continue
        graphs[nm] = g
    names = [nm for nm in names if nm in graphs]
    for nm in names:  # the first replay uploads the graph
        graphs[nm].replay()
    torch.cuda.synchronize()
    ev = {nm: [] for nm in names}
    i = 0
    while i < reps and names:
        r = i % len(names)
        for nm in names[r:] + names[:r]:
            e = (torch.cuda.Event(enable_timing=True),
                 torch.cuda.Event(enable_timing=True))
            e[0].record()
            graphs[nm].replay()
            e[1].record()
            ev[nm].append(e)
        i += 1
        if i == 3:
            torch.cuda.synchronize()
            spent = sum(sum(a.elapsed_time(b) for a, b in ev[nm]) / 3
                        for nm in names)
            if spent * reps > budget_ms * len(names):
                reps = max(5, int(budget_ms * len(names) /
                                  max(spent, 1e-3)))
    torch.cuda.synchronize()
    out = {nm: sorted(a.elapsed_time(b) for a, b in ev[nm])[
        len(ev[nm]) // 2] / calls for nm in names}
    del graphs
    return out, failed


def graph_fields(gms, failed, ours, peers):
    """The graph-replay fields of a result row: graph_ms {name: ms} (ours
    under @p ours, the peers under their names), graph_x_vs_peer (the
    faster of @p peers that captured, over ours), graph_peer (its name),
    graph_failed (peers that did not capture, if any)."""
    out = {"graph_ms": dict(gms), "graph_calls": GRAPH_CALLS}
    ok = [p for p in peers if p in gms]
    if ok and ours in gms:
        fp = min(ok, key=gms.get)
        out["graph_peer"] = fp
        out["graph_x_vs_peer"] = gms[fp] / gms[ours]
    if failed:
        out["graph_failed"] = failed
    return out


def graph_summary(res, what, limit=0.95):
    """One summary line: how many rows of @p res have graph_x_vs_peer
    below @p limit (the item-7 target: none), naming them."""
    g = [r for r in res if "graph_x_vs_peer" in r]
    if not g:
        return "%s graph replay: no rows" % what
    low = [r for r in g if r["graph_x_vs_peer"] < limit]
    v = [r["graph_x_vs_peer"] for r in g]
    line = ("%s graph replay (%d calls a graph, %d rows): %d below %.2fx of "
            "the faster peer (target 0); gmean %.2fx, min %.2fx" %
            (what, GRAPH_CALLS, len(g), len(low), limit, gmean(v), min(v)))
    if low:
        line += ": " + ", ".join("%s %.2fx" % (r.get("case"),
                                               r["graph_x_vs_peer"])
                                 for r in low)
    return line


def copy_gbps():
    """The copy ceiling: a 1 GiB device-to-device copy timed by bench(),
    bytes read + written per second (GB/s); printed too."""
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = bench(lambda: b.copy_(a))
    gbps = 2 * a.numel() / ms / 1e6
    del a, b
    print("copy 1 GiB d2d: %.1f us, %.0f GB/s" % (ms * 1e3, gbps))
    return gbps


# ---------------------------------------------------------------- daemon
def process_cudnn():
    """The cuDNN this process runs (PyTorch's own, loaded by torch, whose
    SONAME our libflykernels_cuda.so then binds to): (version, directory),
    or (None, None) without one."""
    try:
        ver = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 (a ROCm or cuDNN-less build)
        ver = None
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if os.path.basename(path).startswith("libcudnn.so"):
                return ver, os.path.dirname(path)
    return ver, None


class Daemon(object):
    """flytuned on the GPU backend in a temp state dir.  It loads the
    cuDNN this process loaded (PyTorch's, first on its LD_LIBRARY_PATH),
    as a deployment runs the daemon with its engine's cuDNN: engine
    indices and their speeds belong to one cuDNN version, and a point
    tuned under another is replayed, or substituted, on this one.
    FLY_DAEMON_CUDNN=system keeps the loader's default instead."""

    def __init__(self, build):
        self.dir = tempfile.mkdtemp(prefix="flybench-")
        conf = os.path.join(self.dir, "flytuned.conf")
        with open(conf, "w") as f:
            json.dump({"backend": gpu_vendor.backend()}, f)
        exe = os.path.join(build, "flytuned")
        env = dict(os.environ, FLYTUNED_KERNELS_DIR=build)
        self.cudnn_version, self.cudnn_dir = process_cudnn()
        if self.cudnn_dir and os.environ.get("FLY_DAEMON_CUDNN") != "system":
            env["LD_LIBRARY_PATH"] = self.cudnn_dir + (
                ":" + env["LD_LIBRARY_PATH"]
                if env.get("LD_LIBRARY_PATH") else "")
        else:
            self.cudnn_dir = None
        self.log = open(os.path.join(self.dir, "flytuned.log"), "w")
        self.proc = subprocess.Popen(
            [exe, "--foreground", "--state-dir", self.dir, "--config", conf],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.sock = os.path.join(self.dir, "gpu0.sock")
        for _ in range(300):
            if os.path.exists(self.sock) or self.proc.poll() is not None:
                break
            time.sleep(0.1)
        if not os.path.exists(self.sock):
            self.stop()
            raise RuntimeError("flytuned did not start: see " + self.log.name)
        sys.path.insert(0, os.path.join(ROOT, "client", "python"))
        os.environ.setdefault("FLYCLIENT_LIB",
                              os.path.join(build, "libflyclient.so"))
        import flyclient
        self.client = flyclient.Client(self.sock)
        self.ready_s = self.wait_ready(build)

    def wait_ready(self, build, limit_s=120.0):
        """Seconds until `status` says the daemon is past "starting" (its
        worker opened the device: CUDA, the flush buffer, cuDNN's first
        plan), so that a case's tune_s times its tuning, as a server
        started at boot serves its first request, not the daemon's
        start-up."""
        t0 = time.time()
        ctl = os.path.join(build, "flytune-ctl")
        while time.time() - t0 < limit_s:
            try:
                out = subprocess.run([ctl, "--socket", self.sock, "--json",
                                      "status"], capture_output=True,
                                     text=True, timeout=30).stdout
                if json.loads(out).get("state") not in (None, "starting"):
                    break
            except (ValueError, subprocess.SubprocessError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("flytuned exited: see " + self.log.name)
            time.sleep(0.05)
        dt = time.time() - t0
        print("daemon ready in %.2f s" % dt, flush=True)
        return dt

    def fingerprint(self, build):
        """The device identity the daemon tunes under (its dnn= names
        the cuDNN it loaded), from `flytune-ctl status`; None on error."""
        try:
            out = subprocess.run(
                [os.path.join(build, "flytune-ctl"), "--socket", self.sock,
                 "--json", "status"], capture_output=True, text=True,
                timeout=30).stdout
            return json.loads(out)["device"]["fingerprint"]
        except Exception as e:  # noqa: BLE001 (recorded, not fatal)
            return "unknown: %r" % (e,)

    def decide(self, op, dtype, dims, flags):
        t0 = time.time()
        d = self.client.decide_wait(op, dtype, dims, flags=flags,
                                    timeout_ms=20000)
        return d, time.time() - t0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def to_decision(d):
    out = Decision()
    out.variant = d["variant"].encode()
    out.nparams = len(d["params"])
    for i, v in enumerate(d["params"]):
        out.params[i] = v
    return out


def dec_dict(d):
    return {"variant": d.variant.decode(),
            "params": [d.params[i] for i in range(d.nparams)]}


# ---------------------------------------------------------------- cases
# One or a few very long rows (issue 22 item 4: >= 1.5x torch.topk),
# unless cases.json has its own topk "long" set.
LONG_TOPK = [dict(m=m, n=n, k=k, dtype=dt) for dt in ("fp32", "bf16")
             for m, n, k in ((1, 131072, 50), (1, 128256, 50),
                             (1, 262144, 128), (1, 1048576, 128),
                             (4, 524288, 64), (8, 131072, 128))]


def lists(cases, op, sets):
    v = dict(cases[op])
    if op == "topk":
        v.setdefault("long", LONG_TOPK)
    return [(s, c) for s in ("primary", "serving", "long") if s in sets
            for c in v.get(s, [])]


def problem(op, dtype, dims, flags=0):
    p = Problem()
    p.op, p.dtype, p.flags = op, DTYPES[dtype], flags
    for i, v in enumerate(dims):
        p.dims[i] = v
    return p


def sweep(lib, p, mk_fn):
    """Every feasible candidate: quick median, then the best 3 again."""
    cand = (Decision * 512)()
    n = lib.flyk_gpu_candidates(ctypes.byref(p), cand, 512)
    if n <= 0:
        raise RuntimeError("no candidates (%d)" % n)
    t0 = time.time()
    quick = []
    for i in range(n):
        d = cand[i]
        if d.variant.decode().endswith("_ref"):
            continue
        quick.append((bench(mk_fn(d), warmup=2, reps=12, budget_ms=40), i))
    quick.sort()
    best = min((bench(mk_fn(cand[i])), i) for _, i in quick[:3])
    pts = [dict(dec_dict(cand[i]), ms=ms) for ms, i in quick]
    return cand[best[1]], time.time() - t0, pts


def rms_launcher(lib, p, x, w, y, r=None):
    """mk(decision) -> fn(): flyk_gpu_rmsnorm on the tensors (with r:
    FLY_F_RESIDUAL, r += x in place, then y = rms_norm(r))."""
    def mk(d):
        dd = Decision.from_buffer_copy(d)

        def fn():
            rc = lib.flyk_gpu_rmsnorm(ctypes.byref(p), ctypes.byref(dd),
                                      x.data_ptr(), w.data_ptr(), y.data_ptr(),
                                      None if r is None else r.data_ptr(),
                                      EPS,
                                      torch.cuda.current_stream().cuda_stream)
            if rc:
                raise RuntimeError("flyk_gpu_rmsnorm: %d" % rc)
        return fn
    return mk


def topk_launcher(lib, p, x, vals, idx, ws):
    """ws: the topk workspace (TOPK_WS_BYTES, zeroed once: flyk.h)."""
    def mk(d):
        dd = Decision.from_buffer_copy(d)

        def fn():
            rc = lib.flyk_gpu_topk_ws(ctypes.byref(p), ctypes.byref(dd),
                                      x.data_ptr(), vals.data_ptr(),
                                      idx.data_ptr(), ws.data_ptr(),
                                      TOPK_WS_BYTES,
                                      torch.cuda.current_stream().cuda_stream)
            if rc:
                raise RuntimeError("flyk_gpu_topk_ws: %d" % rc)
        return fn
    return mk


def choose(args, lib, daemon, op, dtype, dims, flags, p, mk):
    if daemon is not None:
        names = (("det",) if flags & F_DET else ()) + \
            (("residual",) if flags & F_RESIDUAL else ())
        try:
            dd, tune_s = daemon.decide(op, dtype, dict(dims), names)
        except Exception as e:  # what an engine does: the library default
            d = Decision()
            rc = lib.flyk_gpu_default(ctypes.byref(p), ctypes.byref(d))
            if rc:
                raise RuntimeError("tuning failed (%s), no default (%d)" %
                                   (e, rc))
            return d, None, "tune failed (%s): default" % e, None
        return to_decision(dd), tune_s, dd.get("status"), None
    d, tune_s, pts = sweep(lib, p, mk)
    return d, tune_s, "sweep", pts


def each_case(cases, op, sets, res, fn, name=None):
    """fn(set, case) per case of cases[op]; a case that fails is recorded
    (error, as op `name`, default op) and the run goes on with the next."""
    name = name or op
    for s, c in lists(cases, op, sets):
        try:
            fn(s, c)
        except Exception as e:
            print("%s %s: FAILED: %r" % (name, c, e), flush=True)
            res.append(dict(op=name, set=s, case=str(c), error=repr(e)))


def run_rmsnorm(args, lib, daemon, cases, res, sweeps):
    each_case(cases, "rmsnorm", args.sets, res,
              lambda s, c: one_rmsnorm(args, lib, daemon, s, c, res, sweeps))


def one_rmsnorm(args, lib, daemon, s, c, res, sweeps):
    dt, m, n = c["dtype"], c["m"], c["n"]
    x = torch.randn(m, n, device="cuda", dtype=TORCH_DT[dt])
    w = torch.randn(n, device="cuda", dtype=TORCH_DT[dt])
    y = torch.full_like(x, float("nan"))
    p = problem(OP_RMSNORM, dt, (m, n))
    mk = rms_launcher(lib, p, x, w, y)
    d, tune_s, status, pts = choose(args, lib, daemon, "rmsnorm", dt,
                                    (("m", m), ("n", n)), 0, p, mk)
    fn = mk(d)
    fn()
    torch.cuda.synchronize()
    ref = F.rms_norm(x, (n,), w, EPS)
    err = (y.float() - ref.float()).abs().max().item()
    fns = {"ours": fn, "aten": lambda: F.rms_norm(x, (n,), w, EPS)}
    if not args.no_compile:
        torch._dynamo.reset()
        cf = torch.compile(lambda a, b: F.rms_norm(a, (n,), b, EPS),
                           dynamic=False)
        cf(x, w)
        fns["inductor"] = lambda: cf(x, w)
    peers = bench_side_by_side(fns)
    gms, gfail = bench_graph_side_by_side(fns)
    ours = peers.pop("ours")
    name = "%s %dx%d" % (dt, m, n)
    rec = dict(op="rmsnorm", case=name, set=s, status=status,
               flytuned_ms=ours, peers=peers, max_abs_err=err,
               tune_s=tune_s, bytes=(2 * m * n + n) * x.element_size(),
               **dec_dict(d))
    rec.update(graph_fields(gms, gfail, "ours", list(peers)))
    res.append(rec)
    if pts is not None:
        sweeps.append(dict(case=name, points=pts))
    show(rec, args.copy_gbps)
    del x, w, y, ref


def residual_cases(cases):
    """The fused residual's cases: rmsnorm's bf16 serving shapes, or a
    "rmsnorm_residual" list of cases.json where there is one."""
    if "rmsnorm_residual" in cases:
        return cases
    v = cases["rmsnorm"].get("serving", [])
    return {"rmsnorm_residual": {
        "serving": [c for c in v if c["dtype"] == "bf16"]}}


def run_rmsnorm_residual(args, lib, daemon, cases, res, sweeps):
    each_case(residual_cases(cases), "rmsnorm_residual",
              args.sets, res,
              lambda s, c: one_rmsnorm_residual(args, lib, daemon, s, c, res,
                                                sweeps))


def one_rmsnorm_residual(args, lib, daemon, s, c, res, sweeps):
    """Fused residual add + RMSNorm: ours with FLY_F_RESIDUAL (r += x in
    place, y = rms_norm(r)) against `s = x + r; y = rms_norm(s)`
    returning (y, s), eager ("eager") and under torch.compile
    ("inductor", which fuses both into one kernel)."""
    dt, m, n = c["dtype"], c["m"], c["n"]
    x = torch.randn(m, n, device="cuda", dtype=TORCH_DT[dt])
    r0 = torch.randn(m, n, device="cuda", dtype=TORCH_DT[dt])
    w = torch.randn(n, device="cuda", dtype=TORCH_DT[dt])
    y = torch.full_like(x, float("nan"))
    r = r0.clone()
    p = problem(OP_RMSNORM, dt, (m, n), F_RESIDUAL)
    mk = rms_launcher(lib, p, x, w, y, r)
    d, tune_s, status, pts = choose(args, lib, daemon, "rmsnorm", dt,
                                    (("m", m), ("n", n)), F_RESIDUAL, p, mk)
    r.copy_(r0)
    fn = mk(d)
    fn()
    torch.cuda.synchronize()

    def fused(a, b, g):
        t = a + b
        return F.rms_norm(t, (n,), g, EPS), t
    ref_y, ref_s = fused(x, r0, w)
    err = max((y.float() - ref_y.float()).abs().max().item(),
              (r.float() - ref_s.float()).abs().max().item())
    fns = {"ours": fn, "eager": lambda: fused(x, r0, w)}
    if not args.no_compile:
        torch._dynamo.reset()
        cf = torch.compile(fused, dynamic=False)
        cf(x, r0, w)
        fns["inductor"] = lambda: cf(x, r0, w)
    peers = bench_side_by_side(fns)
    gms, gfail = bench_graph_side_by_side(fns)
    ours = peers.pop("ours")
    name = "%s %dx%d residual" % (dt, m, n)
    rec = dict(op="rmsnorm_residual", case=name, set=s, status=status,
               flytuned_ms=ours, peers=peers, max_abs_err=err,
               tune_s=tune_s, bytes=(4 * m * n + n) * x.element_size(),
               **dec_dict(d))
    rec.update(graph_fields(gms, gfail, "ours", list(peers)))
    res.append(rec)
    if pts is not None:
        sweeps.append(dict(case=name, points=pts))
    show(rec, args.copy_gbps)
    del x, r0, r, w, y, ref_y, ref_s


def run_topk(args, lib, daemon, cases, res, sweeps):
    for det in (0, 1):
        torch.use_deterministic_algorithms(bool(det))
        each_case(cases, "topk", args.sets, res,
                  lambda s, c: one_topk(args, lib, daemon, s, c, det, res,
                                        sweeps))
    torch.use_deterministic_algorithms(False)


def one_topk(args, lib, daemon, s, c, det, res, sweeps):
    m, n, k, dt = c["m"], c["n"], c["k"], c.get("dtype", "fp32")
    x = torch.randn(m, n, device="cuda", dtype=TORCH_DT[dt])
    vals = torch.full((m, k), float("nan"), device="cuda",
                      dtype=x.dtype)
    idx = torch.full((m, k), -1, device="cuda", dtype=torch.int64)
    flags = F_DET if det else 0
    p = problem(OP_TOPK, dt, (m, n, k), flags)
    ws = torch.zeros(TOPK_WS_BYTES, device="cuda", dtype=torch.uint8)
    mk = topk_launcher(lib, p, x, vals, idx, ws)
    d, tune_s, status, pts = choose(
        args, lib, daemon, "topk", dt,
        (("m", m), ("n", n), ("k", k)), flags, p, mk)
    fn = mk(d)
    fn()
    torch.cuda.synchronize()
    tv, ti = torch.topk(x, k, dim=-1)
    err = (vals.float() - tv.float()).abs().max().item()
    got = torch.gather(x, 1, idx.clamp(0, n - 1))
    if (idx < 0).any() or (idx >= n).any() or \
            not torch.equal(got, vals):
        err = float("inf")
    fns = {"ours": fn, "aten_det%d" % det: lambda: torch.topk(x, k, dim=-1)}
    peers = bench_side_by_side(fns)
    gms, gfail = bench_graph_side_by_side(fns)
    ours = peers.pop("ours")
    name = "%dx%d k%d det%d%s" % (m, n, k, det,
                                  "" if dt == "fp32" else " " + dt)
    rec = dict(op="topk", case=name, set=s, status=status,
               flytuned_ms=ours, peers=peers, max_abs_err=err,
               tune_s=tune_s, bytes=m * n * x.element_size() +
               m * k * (8 + x.element_size()), **dec_dict(d))
    rec.update(graph_fields(gms, gfail, "ours", list(peers)))
    res.append(rec)
    if pts is not None:
        sweeps.append(dict(case=name, points=pts))
    show(rec, args.copy_gbps)
    del x, vals, idx, ws


# ---------------------------------------------------------------- report
def show(r, copy_gbps):
    best = min(r["peers"].values())
    gbps = r["bytes"] / r["flytuned_ms"] / 1e6
    ratios = " ".join("%s %5.2fx" % (k, v / r["flytuned_ms"])
                      for k, v in sorted(r["peers"].items()))
    print("%-8s %-26s %-7s %8.1f us  %s  vs-faster %5.2fx  %6.0f GB/s "
          "(%3.0f%% copy)  graph %.1f us %5.2fx  err %.2g  tune %.2fs  "
          "%s%s" %
          (r["op"], r["case"], r["set"], r["flytuned_ms"] * 1e3, ratios,
           best / r["flytuned_ms"], gbps, 100 * gbps / copy_gbps,
           r["graph_ms"].get("ours", float("nan")) * 1e3,
           r.get("graph_x_vs_peer", float("nan")),
           r["max_abs_err"], r["tune_s"] or 0, r["variant"], r["params"]),
          flush=True)


def gmean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def summary(res):
    lines = []
    errs = [r for r in res if "error" in r]
    res = [r for r in res if "error" not in r]
    prim = [r for r in res if r["set"] == "primary"]
    rms = [r for r in prim if r["op"] == "rmsnorm"]
    if rms:
        va = [r["peers"]["aten"] / r["flytuned_ms"] for r in rms]
        vf = [min(r["peers"].values()) / r["flytuned_ms"] for r in rms]
        lines.append("rmsnorm primary (%d): gmean vs aten %.2fx (target "
                     ">= 1.8), vs faster peer %.2fx (>= 1.2), min vs faster "
                     "%.2fx (>= 0.97)" % (len(rms), gmean(va), gmean(vf),
                                          min(vf)))
    srv = [r for r in res if r["set"] == "serving" and
           r["op"] == "rmsnorm"]
    if srv:
        vf = [min(r["peers"].values()) / r["flytuned_ms"] for r in srv]
        lines.append("rmsnorm serving (%d): gmean vs faster peer %.2fx "
                     "(target >= 1.10), min %.2fx (>= 1.0)" %
                     (len(srv), gmean(vf), min(vf)))
    fr = [r for r in res if r["op"] == "rmsnorm_residual" and
          "inductor" in r["peers"]]
    if fr:
        vi = [r["peers"]["inductor"] / r["flytuned_ms"] for r in fr]
        ve = [r["peers"]["eager"] / r["flytuned_ms"] for r in fr]
        lines.append("rmsnorm_residual bf16 serving (%d): gmean vs "
                     "torch.compile %.2fx (target >= 1.10), min %.2fx; vs "
                     "eager %.2fx" % (len(fr), gmean(vi), min(vi),
                                      gmean(ve)))
    for det in (0, 1):
        tk = [r for r in prim if r["op"] == "topk" and
              r["case"].endswith("det%d" % det)]
        if tk:
            v = [min(r["peers"].values()) / r["flytuned_ms"] for r in tk]
            lines.append("topk primary det%d (%d): gmean vs torch.topk "
                         "%.2fx (>= 6), min %.2fx (>= 2)" %
                         (det, len(tk), gmean(v), min(v)))
    for det in (0, 1):
        tk = [r for r in res if r["set"] == "long" and r["op"] == "topk" and
              (" det%d" % det) in r["case"]]
        if tk:
            v = [min(r["peers"].values()) / r["flytuned_ms"] for r in tk]
            lines.append("topk long det%d (%d): gmean vs torch.topk %.2fx, "
                         "min %.2fx (target: none below 1.5)" %
                         (det, len(tk), gmean(v), min(v)))
    for op in ("rmsnorm", "rmsnorm_residual", "topk"):
        if any(r["op"] == op for r in res):
            lines.append(graph_summary([r for r in res if r["op"] == op],
                                       op))
    bad = [r["case"] for r in res if not (r["max_abs_err"] <= 0.05)]
    lines.append("numerics: %s" % ("all agree with PyTorch" if not bad else
                                   "DISAGREE on " + ", ".join(bad)))
    ts = [r["tune_s"] for r in res if r["tune_s"] is not None]
    if ts:
        lines.append("tune_s per key: max %.2f s, median %.2f s" %
                     (max(ts), sorted(ts)[len(ts) // 2]))
    for r in res:
        if r["status"] not in ("tuned", "sweep"):
            lines.append("not tuned: %s %s (%s)" % (r["op"], r["case"],
                                                    r["status"]))
    for r in errs:
        lines.append("FAILED: %s %s: %s" % (r["op"], r["case"], r["error"]))
    return lines


def trial_counts(build, daemon, key):
    """The key's trials from flytune-ctl explain: {"ok": survivors of
    every rejection round, "timed": run and timed on the device (ok, and
    rejected for speed: every rejection follows a timing), "total": all
    listed}; {"error": ...} when explain fails."""
    try:
        out = subprocess.check_output(
            [os.path.join(build, "flytune-ctl"), "--socket",
             daemon.sock, "explain", key, "--json"], timeout=20)
        t = json.loads(out).get("trials", [])
    except Exception as e:
        return {"error": repr(e)}
    if os.environ.get("FLY_TRIALS_DIR"):  # every trial, for diagnosis
        os.makedirs(os.environ["FLY_TRIALS_DIR"], exist_ok=True)
        with open(os.path.join(os.environ["FLY_TRIALS_DIR"], "trials.jsonl"),
                  "a") as f:
            f.write(json.dumps({"key": key, "trials": t}) + "\n")
    oc = [x.get("outcome") for x in t]
    best = {}  # each variant's fastest timed point (median us)
    for x in t:
        med, v = x.get("median_us"), x.get("variant")
        if isinstance(med, (int, float)) and med > 0 and v and (
                v not in best or med < best[v]["median_us"]):
            best[v] = {"median_us": med, "params": x.get("params"),
                       "outcome": x.get("outcome")}
    return {"ok": oc.count("ok"),
            "timed": oc.count("ok") + oc.count("rejected"),
            "total": len(t), "best_by_variant": best}


def trials(build, daemon, key):
    """(measured, total) trials of the key, from flytune-ctl explain."""
    c = trial_counts(build, daemon, key)
    if "error" in c:
        return None, c["error"]
    return c["ok"], c["total"]


def commit():
    if os.environ.get("FLY_COMMIT"):  # a tree copied without .git
        return os.environ["FLY_COMMIT"]
    try:
        return subprocess.check_output(["git", "-C", ROOT, "rev-parse",
                                        "--short", "HEAD"]).decode().strip()
    except Exception:
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cases", default=os.path.join(ROOT, "..", "shared",
                                                    "bench", "cases.json"))
    ap.add_argument("--out", default=os.environ.get(
        "OUT", os.path.join(ROOT, "build", "bench-results")))
    ap.add_argument("--ops", default="rmsnorm,rmsnorm_residual,topk")
    ap.add_argument("--sets", default="primary,serving")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args(argv)
    args.sets = args.sets.split(",")
    if not os.path.exists(args.cases):
        args.cases = os.path.join(ROOT, "bench", "cases.json")
    cases = json.load(open(args.cases))
    torch.manual_seed(0)
    lib = load_kernels(args.build)
    args.copy_gbps = copy_gbps()
    daemon = None if args.standalone else Daemon(args.build)
    head = {"gpu": torch.cuda.get_device_name(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": commit(), "copy_gbps": args.copy_gbps,
            "torch": torch.__version__,
            "mode": "standalone sweep" if args.standalone else "daemon",
            "method": "CUDA events per call, L2 cleaned by reading 512 MiB "
                      "before each rep, median ms",
            "graph_method": "%d back-to-back calls captured in a CUDA "
                            "graph, no clean, replay ms / calls, median "
                            "of interleaved replays" % GRAPH_CALLS}
    if daemon is not None:  # tune_s starts once it is ready (wait_ready)
        head["daemon_ready_s"] = daemon.ready_s
    os.makedirs(args.out, exist_ok=True)
    allres = []
    try:
        for op, fn in (("rmsnorm", run_rmsnorm),
                       ("rmsnorm_residual", run_rmsnorm_residual),
                       ("topk", run_topk)):
            if op not in args.ops.split(","):
                continue
            res, sweeps = [], []
            try:
                fn(args, lib, daemon, cases, res, sweeps)
            except Exception as e:  # keep what was measured so far
                print("%s: stopped: %r" % (op, e), flush=True)
            allres += res
            with open(gpu_vendor.result_path(args.out, op), "w") as f:
                json.dump(dict(head, cases=res), f, indent=1)
            if sweeps:
                with open(os.path.join(args.out, "sweep-%s.json" % op),
                          "w") as f:
                    json.dump(dict(head, sweeps=sweeps), f)
    finally:
        if daemon is not None:
            daemon.stop()
            shutil.copy(daemon.log.name, os.path.join(args.out,
                                                      "flytuned.log"))
            db = os.path.join(daemon.dir, "tuning.db")  # every trial
            if os.path.exists(db):
                shutil.copy(db, os.path.join(args.out, "tuning.db"))
    for line in summary(allres):
        print(line)


if __name__ == "__main__":
    main()
