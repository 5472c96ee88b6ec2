#!/usr/bin/env python3
"""gemm_bench.py -- flytuned's BF16 GEMM and grouped (MoE) GEMM against
PyTorch on the GPU, in one run, with one timing function for everything.

Starts flytuned on the GPU backend (bench/gpu_bench.py's Daemon: config
{"backend": "cuda"}), asks it through the Python client for every case of
cases.json (gemm_bf16 and grouped_gemm_bf16, primary and serving) with
decide_wait (its wall time is the key's tune_s), launches the decision
through libflykernels_cuda.so (flyk_gpu_gemm / flyk_gpu_grouped_gemm,
ctypes) on PyTorch tensors and the current stream, checks it against
PyTorch in the same run (max_abs_err), and times it beside the peers:

  gemm     "aten"      torch.matmul(a, b.t())  (cuBLAS/cuBLASLt)
           "inductor"  torch.compile(mode="max-autotune-no-cudagraphs"),
                       inductor
                       max_autotune_gemm_backends="ATEN,TRITON"; primary
                       cases only, and only while --inductor-budget seconds
                       of compile time remain (it compiles slowly)
  grouped  "grouped_mm"  torch._grouped_mm(a, w.transpose(-2, -1), offs)
           "loop"        one torch.matmul per expert (host offsets)

Timing: bench/gpu_bench.py's bench_side_by_side() (CUDA events around
each call, the L2 cleaned before each rep by READING a 512 MiB buffer,
warm-ups, the median), ours and every peer of a case in one call with
their reps interleaved, so that the GPU's clocks and temperature are the
same for all (Inductor is compiled before any of them is timed); the
copy ceiling by bench(), the same per-call timing.  The second timing:
gpu_bench.bench_graph_side_by_side() (each callable captured 20 times back
to back in a CUDA graph, replayed; per-call GPU time, host cost excluded;
a failed capture of ours fails the case).

Writes OUT/<gpu>-gemm.json and OUT/<gpu>-grouped_gemm.json as
{"gpu","date","commit","copy_gbps","cases":[{"op","case","set","variant",
"params","status","flytuned_ms","peers":{NAME: ms},"max_abs_err",
"tune_s","graph_ms":{"ours"|NAME: ms},"graph_peer","graph_x_vs_peer"}]}
and prints a table with ratios, then the targets' summary (with the
count of graph_x_vs_peer < 0.95).

usage: python3 bench/gemm_bench.py [--build DIR] [--cases FILE] [--out DIR]
       [--ops gemm,grouped_gemm] [--sets primary,serving] [--no-compile]
       [--inductor-budget S]
"""
import argparse
import ctypes
import json
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench as gb  # noqa: E402  (Problem, Decision, bench, Daemon)
import gpu_vendor  # noqa: E402

ROOT = gb.ROOT
OP_GEMM, OP_GROUPED = 1, 2
DT_BF16, LAYOUT_NT = 3, 1
WS_BYTES = 32 << 20


def load(build):
    """gpu_bench's library (FLYK_LIB or BUILD/libflykernels_cuda.so,
    _hip.so on ROCm; its candidates and defaults) with the GEMM launchers
    declared."""
    lib = gb.load_kernels(build)
    P, vp = ctypes.POINTER, ctypes.c_void_p
    lib.flyk_gpu_gemm.argtypes = [P(gb.Problem), P(gb.Decision), vp, vp, vp,
                                  vp, ctypes.c_float, vp, ctypes.c_size_t, vp]
    lib.flyk_gpu_grouped_gemm.argtypes = [P(gb.Problem), P(gb.Decision), vp,
                                          vp, vp, vp, vp]
    lib.flyk_gpu_gemm.restype = ctypes.c_int
    lib.flyk_gpu_grouped_gemm.restype = ctypes.c_int
    return lib


def problem(op, dims):
    p = gb.Problem()
    p.op, p.dtype, p.layout, p.flags = op, DT_BF16, LAYOUT_NT, 0
    for i, v in enumerate(dims):
        p.dims[i] = v
    return p


def stream():
    return torch.cuda.current_stream().cuda_stream


def gemm_launcher(lib, p, a, b, out, ws):
    """run(decision): flyk_gpu_gemm of problem p on the tensors (alpha 1,
    no bias, workspace ws of WS_BYTES), on the current stream."""
    def run(dec):
        return lib.flyk_gpu_gemm(ctypes.byref(p), ctypes.byref(dec),
                                 a.data_ptr(), b.data_ptr(),
                                 out.data_ptr(), None, 1.0,
                                 ws.data_ptr(), WS_BYTES, stream())
    return run


def grouped_launcher(lib, p, a, w, out, doff):
    """run(decision): flyk_gpu_grouped_gemm of problem p on the tensors
    (doff: the int64 device offsets), on the current stream."""
    def run(dec):
        return lib.flyk_gpu_grouped_gemm(ctypes.byref(p),
                                         ctypes.byref(dec), a.data_ptr(),
                                         w.data_ptr(), out.data_ptr(),
                                         doff.data_ptr(), stream())
    return run


def decide(daemon, op, dims):
    t0 = time.time()
    d = daemon.client.decide_wait(op, "bf16", dims, layout="NT",
                                  timeout_ms=120000)
    return d, time.time() - t0


def checked(run, d):
    """fn() launching decision d, raising on a non-zero return (inside a
    CUDA graph capture too: a refused launch must not pass silently)."""
    def fn():
        rc = run(d)
        if rc:
            raise RuntimeError("flytuned launch failed: %d" % rc)
    return fn


def launch_or_default(run, d):
    """Run decision d once; if it is refused on these exact dims (the key
    is bucketed), fall back to the library default and say so."""
    rc = run(d)
    if rc == 0:
        return d, None
    dflt = gb.Decision()
    rc2 = run(dflt)
    if rc2:
        raise RuntimeError("launch failed: %d, default %d" % (rc, rc2))
    return dflt, rc


# ---------------------------------------------------------------- gemm
def run_gemm(args, lib, daemon, cases, res):
    t_ind = [0.0]
    torch._inductor.config.max_autotune_gemm_backends = "ATEN,TRITON"
    ws = torch.empty(WS_BYTES, dtype=torch.uint8, device="cuda")
    gb.each_case(cases, "gemm_bf16", args.sets, res,
                 lambda s, c: one_gemm(args, lib, s, c, res, t_ind, ws,
                                       daemon), "gemm")


def one_gemm(args, lib, s, c, res, t_ind, ws, daemon):
    """One gemm case: tune, check, time ours and the peers."""
    m, n, k = c["m"], c["n"], c["k"]
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda",
                     dtype=torch.bfloat16)
    p = problem(OP_GEMM, (m, n, k))
    dd, tune_s = decide(daemon, "gemm", {"m": m, "n": n, "k": k})
    d = gb.to_decision(dd)

    run = gemm_launcher(lib, p, a, b, out, ws)
    d, refused = launch_or_default(run, d)
    torch.cuda.synchronize()
    ref = torch.matmul(a, b.t())
    err = (out.float() - ref.float()).abs().max().item()
    amax = ref.float().abs().max().item()
    fns = {"ours": checked(run, d), "aten": lambda: torch.matmul(a, b.t())}
    if (not args.no_compile and s == "primary" and
            t_ind[0] < args.inductor_budget):
        t0 = time.time()
        torch._dynamo.reset()
        # no CUDA graphs, as peer_baseline.py: graphs copy the
        # inputs into static buffers on every call (not the GEMM)
        cf = torch.compile(lambda x, y: torch.matmul(x, y.t()),
                           mode="max-autotune-no-cudagraphs",
                           dynamic=False)
        cf(a, b)
        torch.cuda.synchronize()
        t_ind[0] += time.time() - t0
        fns["inductor"] = lambda: cf(a, b)
    peers = gb.bench_side_by_side(fns)
    gms, gfail = gb.bench_graph_side_by_side(fns)
    ours = peers.pop("ours")
    rec = dict(op="gemm", case="m%d n%d k%d" % (m, n, k), set=s,
               status=dd.get("status"), flytuned_ms=ours, peers=peers,
               max_abs_err=err, max_abs_ref=amax, tune_s=tune_s,
               tflops=2.0 * m * n * k / ours / 1e9, **gb.dec_dict(d))
    rec.update(gb.graph_fields(gms, gfail, "ours", list(peers)))
    if refused is not None:
        rec["refused"] = refused
    res.append(rec)
    show(rec)
    del a, b, out, ref


# ---------------------------------------------------------------- grouped
def run_grouped(args, lib, daemon, cases, res):
    gb.each_case(cases, "grouped_gemm_bf16", args.sets, res,
                 lambda s, c: one_grouped(args, lib, s, c, res, daemon),
                 "grouped_gemm")


def one_grouped(args, lib, s, c, res, daemon):
    """One grouped case: tune, check, time ours and the peers."""
    g, n, k = c["groups"], c["n"], c["k"]
    rows = c["m_per_group"]
    m = sum(rows)
    offs = [0]
    for r in rows:
        offs.append(offs[-1] + r)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda",
                     dtype=torch.bfloat16)
    doff = torch.tensor(offs, device="cuda", dtype=torch.int64)
    ends = torch.tensor(offs[1:], device="cuda", dtype=torch.int32)
    p = problem(OP_GROUPED, (g, m, n, k))
    dd, tune_s = decide(daemon, "grouped_gemm",
                        {"g": g, "m": m, "n": n, "k": k})
    d = gb.to_decision(dd)

    run = grouped_launcher(lib, p, a, w, out, doff)
    d, refused = launch_or_default(run, d)
    torch.cuda.synchronize()

    def loop():
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for e in range(g):
            if offs[e + 1] > offs[e]:
                torch.matmul(a[offs[e]:offs[e + 1]], w[e].t(),
                             out=y[offs[e]:offs[e + 1]])
        return y
    ref = loop()
    err = (out.float() - ref.float()).abs().max().item()
    amax = ref.float().abs().max().item()
    fns = {"ours": checked(run, d), "loop": loop}
    try:
        wt = w.transpose(-2, -1)
        gm = torch._grouped_mm(a, wt, offs=ends)
        err_gm = (gm.float() - ref.float()).abs().max().item()
        fns["grouped_mm"] = lambda: torch._grouped_mm(a, wt, offs=ends)
    except Exception as e:  # not on this torch/GPU: say so
        err_gm = None
        print("torch._grouped_mm unavailable: %s" % e, flush=True)
    peers = gb.bench_side_by_side(fns)
    gms, gfail = gb.bench_graph_side_by_side(fns)
    ours = peers.pop("ours")
    name = "g%d m%d n%d k%d %s" % (g, m, n, k,
                                   "even" if len(set(rows)) == 1
                                   else "uneven")
    rec = dict(op="grouped_gemm", case=name, set=s,
               status=dd.get("status"), flytuned_ms=ours, peers=peers,
               max_abs_err=err, max_abs_ref=amax, grouped_mm_err=err_gm,
               tune_s=tune_s,
               m_per_group=rows, tflops=2.0 * m * n * k / ours / 1e9,
               **gb.dec_dict(d))
    rec.update(gb.graph_fields(gms, gfail, "ours", list(peers)))
    if refused is not None:
        rec["refused"] = refused
    res.append(rec)
    show(rec)
    del a, w, out, ref


# ---------------------------------------------------------------- report
def show(r):
    best = min(r["peers"].values())
    ratios = " ".join("%s %5.2fx" % (k, v / r["flytuned_ms"])
                      for k, v in sorted(r["peers"].items()))
    print("%-12s %-34s %-7s %9.1f us %6.0f TF/s  %s  vs-faster %5.2fx  "
          "graph %.1f us %5.2fx  err %.3g  tune %.2fs  %s%s" %
          (r["op"], r["case"], r["set"], r["flytuned_ms"] * 1e3, r["tflops"],
           ratios, best / r["flytuned_ms"],
           r["graph_ms"].get("ours", float("nan")) * 1e3,
           r.get("graph_x_vs_peer", float("nan")), r["max_abs_err"],
           r["tune_s"], r["variant"], r["params"]), flush=True)


def summary(res):
    lines = []
    errs = [r for r in res if "error" in r]
    res = [r for r in res if "error" not in r]
    prim = [r for r in res if r["set"] == "primary"]
    ge = [r for r in prim if r["op"] == "gemm"]
    if ge:
        v = [min(r["peers"].values()) / r["flytuned_ms"] for r in ge]
        lines.append("gemm primary (%d): gmean vs faster of aten/inductor "
                     "%.2fx (target >= 1.10), min %.2fx (>= 0.98)" %
                     (len(ge), gb.gmean(v), min(v)))
    gg = [r for r in prim if r["op"] == "grouped_gemm" and
          "grouped_mm" in r["peers"]]
    if gg:
        v = [r["peers"]["grouped_mm"] / r["flytuned_ms"] for r in gg]
        lines.append("grouped primary (%d): gmean vs torch._grouped_mm "
                     "%.2fx (target >= 1.20), min %.2fx" %
                     (len(gg), gb.gmean(v), min(v)))
    # bf16 outputs: one rounding each side is |C| / 128; allow two
    bad = [r["case"] for r in res
           if not (r["max_abs_err"] <= r["max_abs_ref"] / 64 + 1e-3)]
    lines.append("numerics: %s" % ("all agree with PyTorch" if not bad else
                                   "DISAGREE on " + ", ".join(bad)))
    ts = [r["tune_s"] for r in res if r["op"] == "gemm"]
    if ts:
        lines.append("gemm tune_s per key: max %.2f s, median %.2f s "
                     "(target <= 1.5 s)" % (max(ts), sorted(ts)[len(ts) // 2]))
    for op in ("gemm", "grouped_gemm"):
        if any(r["op"] == op for r in res):
            lines.append(gb.graph_summary([r for r in res if r["op"] == op],
                                          op))
    for r in errs:
        lines.append("FAILED: %s %s: %s" % (r["op"], r["case"], r["error"]))
    ref = [r["case"] for r in res if "refused" in r]
    if ref:
        lines.append("decisions refused on exact dims (default used): " +
                     ", ".join(ref))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cases", default=os.path.join(ROOT, "..", "shared",
                                                    "bench", "cases.json"))
    ap.add_argument("--out", default=os.environ.get(
        "OUT", os.path.join(ROOT, "build", "bench-results")))
    ap.add_argument("--ops", default="gemm,grouped_gemm")
    ap.add_argument("--sets", default="primary,serving")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--inductor-budget", type=float, default=240.0)
    args = ap.parse_args(argv)
    args.sets = args.sets.split(",")
    if not os.path.exists(args.cases):
        args.cases = os.path.join(ROOT, "bench", "cases.json")
    cases = json.load(open(args.cases))
    torch.manual_seed(0)
    lib = load(args.build)
    copy_gbps = gb.copy_gbps()
    daemon = gb.Daemon(args.build)
    ops = args.ops.split(",")
    head = dict(gpu=torch.cuda.get_device_name(),
                date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                commit=gb.commit(), copy_gbps=copy_gbps)
    all_res = []
    try:
        for op, fn in (("gemm", run_gemm), ("grouped_gemm", run_grouped)):
            if op not in ops:
                continue
            res = []
            try:
                fn(args, lib, daemon, cases, res)
            except Exception as e:  # keep what was measured so far
                print("%s: stopped: %r" % (op, e), flush=True)
            all_res += res
            os.makedirs(args.out, exist_ok=True)
            with open(gpu_vendor.result_path(args.out, op), "w") as f:
                json.dump(dict(head, cases=res), f, indent=1)
    finally:
        daemon.stop()
        os.makedirs(args.out, exist_ok=True)
        shutil.copy(daemon.log.name, os.path.join(args.out, "flytuned.log"))
        db = os.path.join(daemon.dir, "tuning.db")  # every trial, for later
        if os.path.exists(db):
            shutil.copy(db, os.path.join(args.out, "tuning.db"))
    for line in summary(all_res):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
