#!/usr/bin/env python3
"""torch_host_cost.py -- host time per call of each flytuned.torch op
against the torch op it replaces (issue 17 item 2), on tiny tensors (the
shapes of ../shared/bench/h200_notes.md) so the GPU is not the
bottleneck: the GPU is kept busy (torch.cuda._sleep ahead of the calls),
CALLS calls back to back timed on the host, median of REPS, after
warm-up; the keys are tuned first (prepare), so every decide is a
process-cache hit.  Four columns: torch's op, torch.ops.flytuned.X
called directly (the packet, which resolves the overload per call), its
overload torch.ops.flytuned.X.default (what a compiled graph calls), and
torch's function routed by enable().

    python3 bench/torch_host_cost.py [--build build/gpu] [--out FILE]

Starts flytuned (backend cuda) in a temp dir.  Prints a table and writes
{"op","shape","torch_us","flytuned_us","overload_us","routed_us",
"backend"} rows.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(
    os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_vendor  # noqa: E402 (bench/: the NVIDIA/AMD differences)


def start_daemon(build):
    d = tempfile.mkdtemp(prefix="flyhost.")
    conf = os.path.join(d, "flytuned.conf")
    with open(conf, "w") as f:
        f.write('{"backend":"%s","policy":"on-request"}\n'
                    % gpu_vendor.backend())
    log = open(os.path.join(d, "flytuned.log"), "w")
    p = subprocess.Popen([os.path.join(build, "flytuned"), "--foreground",
                          "--state-dir", d, "--config", conf], stdout=log,
                         stderr=subprocess.STDOUT,
                         env=dict(os.environ, FLYTUNED_KERNELS_DIR=build))
    sock = os.path.join(d, "gpu0.sock")
    for _ in range(300):
        if os.path.exists(sock) or p.poll() is not None:
            break
        time.sleep(0.1)
    return p, sock


def host_us(torch, fn, calls, reps):
    """Median host us per call, or None where the calls waited for the
    GPU: a stream holds about 1,024 pending launches, so CALLS calls of an
    op of several kernels can fill it and then each call waits for the
    sleep kernel (measured on the H200 at --calls 1000: every op of more
    than one kernel read ~109 us, 0.1 s / 1000 calls).  A rep counts only
    if the sleep kernel was still running when the last call returned;
    None unless most reps count."""
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        torch.cuda._sleep(int(2e8))  # ~0.1 s of GPU work ahead of the calls
        slept = torch.cuda.Event()
        slept.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        # a full queue frees a slot only once the GPU moves past the
        # sleep: still asleep now, no call can have waited
        if not slept.query():
            out.append((t1 - t0) * 1e6 / calls)
        torch.cuda.synchronize()
    return statistics.median(out) if len(out) * 2 > reps else None


def cases(torch):
    F = torch.nn.functional
    fo = torch.ops.flytuned

    class _Ov(object):
        """fo.X.default: the overload itself, as a compiled graph calls
        it (fo.X, the packet, resolves it per call)."""
        def __getattr__(self, name):
            return getattr(fo, name).default
    ov = _Ov()
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(1, 4096, device=dev, dtype=bf)
    g = torch.randn(4096, device=dev, dtype=bf)
    r = torch.randn_like(x)
    t = torch.randn(4, 1024, device=dev)
    a = torch.randn(8, 4096, device=dev, dtype=bf)
    w = torch.randn(4096, 4096, device=dev, dtype=bf)
    a8 = torch.randn(16, 4096, device=dev).to(torch.float8_e4m3fn)
    w8 = torch.randn(4096, 4096, device=dev).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device=dev)
    ag = torch.randn(64, 1024, device=dev, dtype=bf)
    wg = torch.randn(8, 1024, 1024, device=dev, dtype=bf).transpose(-2, -1)
    ends = torch.tensor([8, 16, 24, 32, 40, 48, 56, 64], device=dev,
                        dtype=torch.int32)

    def torch_fadd():
        y = x + r
        return F.rms_norm(y, [4096], g, 1e-6)
    return [
        ("rms_norm", "1x4096 bf16", lambda: F.rms_norm(x, [4096], g, 1e-6),
         lambda: fo.rms_norm(x, [4096], g, 1e-6),
         lambda: F.rms_norm(x, [4096], g, 1e-6),
         lambda: ov.rms_norm(x, [4096], g, 1e-6)),
        ("fused_add_rms_norm", "1x4096 bf16", torch_fadd,
         lambda: fo.fused_add_rms_norm(x, r, g, 1e-6), None,
         lambda: ov.fused_add_rms_norm(x, r, g, 1e-6)),
        ("topk", "4x1024 k8 fp32", lambda: torch.topk(t, 8),
         lambda: fo.topk(t, 8), lambda: torch.topk(t, 8),
         lambda: ov.topk(t, 8)),
        ("mm", "8x4096x4096 bf16", lambda: torch.matmul(a, w.t()),
         lambda: fo.mm(a, w.t()), lambda: torch.matmul(a, w.t()),
         lambda: ov.mm(a, w.t())),
        ("linear", "8x4096x4096 bf16", lambda: F.linear(a, w),
         lambda: fo.linear(a, w), lambda: F.linear(a, w),
         lambda: ov.linear(a, w)),
        ("grouped_mm", "g8 64x1024x1024 bf16",
         lambda: torch._grouped_mm(ag, wg, offs=ends),
         lambda: fo.grouped_mm(ag, wg, ends),
         lambda: torch._grouped_mm(ag, wg, offs=ends),
         lambda: ov.grouped_mm(ag, wg, ends)),
        ("scaled_mm", "16x4096x4096 fp8",
         lambda: torch._scaled_mm(a8, w8.t(), one, one, out_dtype=bf),
         lambda: fo.scaled_mm(a8, w8.t(), one, one, out_dtype=bf),
         lambda: torch._scaled_mm(a8, w8.t(), one, one, out_dtype=bf),
         lambda: ov.scaled_mm(a8, w8.t(), one, one, out_dtype=bf)),
    ]


def _commit():
    if os.environ.get("FLY_COMMIT"):  # a tree copied without .git
        return os.environ["FLY_COMMIT"]
    try:
        return subprocess.check_output(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            stderr=subprocess.DEVNULL).decode().strip()
    except Exception:
        return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--calls", type=int, default=100,
                    help="calls per rep, few enough that a rep's launches "
                    "fit the stream's queue (default 100)")
    ap.add_argument("--reps", type=int, default=21)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    os.environ.setdefault("FLYCLIENT_LIB", os.path.join(build,
                                                        "libflyclient.so"))
    os.environ.setdefault("FLYK_LIB", gpu_vendor.kernels_lib(build))
    os.environ.setdefault("FLYCLIENT_INCLUDE", os.path.join(build, "include"))
    daemon, sock = start_daemon(build)
    os.environ["FLYTUNED_SOCKET"] = sock
    rows = []
    try:
        import torch
        import flytuned.torch as ft
        be = ft.backend()
        print("flytuned.torch backend: %s %s" % be, flush=True)
        cs = cases(torch)
        with torch.no_grad():
            ft.prepare(lambda: [c[3]() for c in cs], (), timeout_s=240)
            print("%-20s %-22s %9s %9s %9s %9s" % (
                "op", "shape", "torch_us", "flytuned", "overload", "routed"))
            for op, shape, tf, ff, rf, of in cs:
                tu = host_us(torch, tf, args.calls, args.reps)
                fu = host_us(torch, ff, args.calls, args.reps)
                ou = host_us(torch, of, args.calls, args.reps)
                ru = None
                if rf is not None:
                    ft.enable()
                    ru = host_us(torch, rf, args.calls, args.reps)
                    ft.disable()
                rows.append({"op": op, "shape": shape, "torch_us": tu,
                             "flytuned_us": fu, "overload_us": ou,
                             "routed_us": ru,
                             "backend": be[0]})
                def f(v):
                    return "-" if v is None else "%.2f" % v
                print("%-20s %-22s %9s %9s %9s %9s %s" % (
                    op, shape, f(tu), f(fu), f(ou), f(ru),
                    "queue full: no figure" if None in (tu, fu) else
                    "ok" if fu <= tu else "OVER"), flush=True)
        print("stats:", ft.stats())
    finally:
        daemon.terminate()
        daemon.wait(10)
    if args.out:
        doc = {"gpu": torch.cuda.get_device_name(),
               "torch": torch.__version__, "commit": _commit(),
               "date": time.strftime("%Y-%m-%d", time.gmtime()),
               "method": "host us per call, the GPU kept busy ahead of the "
                         "calls, %d calls a rep, median of %d reps, keys "
                         "tuned first (process-cache hits); a rep counts "
                         "only if the GPU was still busy at its end"
                         % (args.calls, args.reps),
               "rows": rows}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
