#!/usr/bin/env python3
"""norm_points.py -- every candidate of the RMSNorm variants timed on given
shapes, flushed per call and under CUDA-graph replay, beside eager and
torch.compile (Inductor), with gpu_bench's two timing functions.

A diagnostic, not the benchmark of record (gpu_bench.py times the daemon's
decisions): it answers "which point of which variant is fastest on this
decode-size shape, by each timing", which the tuner's trials answer only
for its flushed timing.  --code prints the Triton source Inductor generated
for each shape (what the peer runs; --code-file F appends its whole source
to F).

  python3 bench/norm_points.py [--build DIR] [--variants REGEX] [--top N]
      [--code [--code-file F]] [--out FILE] [--launch N [--params REGEX]] SHAPE...

SHAPE is DTYPE:M,N or DTYPE:M,N:res (the fused residual: ours r += x in
place, y = rms_norm(r); the peer `t = x + r; (rms_norm(t), t)`).  Every
candidate whose variant matches --variants (default: rows|lat) is timed
quickly flushed (12 reps); the --top fastest, the default and the peers are
then timed side by side, flushed (50 reps) and under graph replay.
--launch N: no timing; the candidates whose "variant[params]" text matches
--params, the default and the peers each run N times, for a profiler
(bench/device_session.sh's normprof stage runs Nsight Compute over it).
"""
import argparse
import ctypes
import json
import os
import re
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench as gb  # noqa: E402


def shape_of(text):
    parts = text.split(":")
    try:
        dt = parts[0]
        m, n = (int(v) for v in parts[1].split(","))
        res = len(parts) == 3 and parts[2] == "res"
        if dt not in gb.DTYPES or len(parts) not in (2, 3) or \
                (len(parts) == 3 and not res):
            raise ValueError
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError("bad shape %r (DTYPE:M,N[:res])"
                                         % text)
    return dt, m, n, res


def best_configs():
    """Inductor's autotuner's .best_config files: {path: mtime}."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        root = cache_dir()
    except Exception:  # noqa: BLE001 -- older torch: the default place
        root = os.path.join("/tmp", "torchinductor_" +
                            os.environ.get("USER", "root"))
    found = {}
    for dp, _, fns in os.walk(root):
        for fn in fns:
            if fn.endswith(".best_config"):
                path = os.path.join(dp, fn)
                found[path] = os.path.getmtime(path)
    return found


def best_written(before):
    """The contents of the .best_config files written since @p before
    (best_configs()'s answer then): the configs this compile kept."""
    out = []
    for path, mt in best_configs().items():
        if before.get(path) != mt:
            with open(path) as f:
                out.append(f.read().strip())
    return out


def name_of(d):
    return "%s%s" % (d.variant.decode(),
                     [d.params[i] for i in range(d.nparams)])


def one(args, lib, shape):
    dt, m, n, res = shape
    tdt = gb.TORCH_DT[dt]
    x = torch.randn(m, n, device="cuda", dtype=tdt)
    w = torch.randn(n, device="cuda", dtype=tdt)
    r = torch.randn(m, n, device="cuda", dtype=tdt) if res else None
    y = torch.empty_like(x)
    p = gb.problem(gb.OP_RMSNORM, dt, (m, n), gb.F_RESIDUAL if res else 0)
    mk = gb.rms_launcher(lib, p, x, w, y, r)
    cand = (gb.Decision * 512)()
    nc = lib.flyk_gpu_candidates(ctypes.byref(p), cand, 512)
    dflt = gb.Decision()
    lib.flyk_gpu_default(ctypes.byref(p), ctypes.byref(dflt))
    rx = re.compile(args.variants)
    if args.launch:
        return launch_only(args, lib, shape, p, mk, cand, nc, dflt, x, w, r)
    quick = []
    for i in range(max(nc, 0)):
        if not rx.search(cand[i].variant.decode()):
            continue
        quick.append((gb.bench(mk(cand[i]), warmup=2, reps=12,
                               budget_ms=40), name_of(cand[i]), i))
    quick.sort()

    peer, pargs = peer_of(shape, x, w, r)
    torch._dynamo.reset()
    cf = torch.compile(peer, dynamic=False)
    if args.code:
        from torch._inductor.utils import run_and_get_code
        before = best_configs()
        _, code = run_and_get_code(cf, *pargs)
        src = "\n".join(code)
        keep = [ln for ln in src.splitlines()
                if "@triton" in ln or "def triton" in ln or
                "num_warps" in ln or "XBLOCK" in ln or "R0_BLOCK" in ln or
                "RBLOCK" in ln or "tl.load" in ln or "tl.store" in ln or
                "grid" in ln]
        print("-- inductor code for %s:\n%s" % (shape_text(shape),
                                               "\n".join(keep[:60])))
        # the config Inductor's autotuner kept (its local cache writes a
        # .best_config beside each kernel it tuned)
        best = best_written(before)
        print("-- inductor best configs for %s: %s" % (
            shape_text(shape), best or "none written (a cached compile)"))
        if args.code_file:
            with open(args.code_file, "a") as f:
                f.write("# ---- inductor code for %s\n# best: %s\n%s\n"
                        % (shape_text(shape), best, src))
    cf(*pargs)
    fns = {"eager": lambda: peer(*pargs), "inductor": lambda: cf(*pargs)}
    if res:
        # The same fusion updating r in place, as ours does (and as an
        # engine's fused_add_rms_norm does): a call then reads the r the
        # call before it wrote.
        def inplace(a, b, g):
            b.add_(a)
            return F.rms_norm(b, (n,), g, gb.EPS)
        ci = torch.compile(inplace, dynamic=False)
        ri = r.clone()
        ci(x, ri, w)
        fns["inductor in place"] = lambda: ci(x, ri, w)
    tops = [i for _, _, i in quick[:args.top]]
    fns["default " + name_of(dflt)] = mk(dflt)
    for i in tops:
        fns[name_of(cand[i])] = mk(cand[i])
    flushed = gb.bench_side_by_side(fns)
    graph, failed = gb.bench_graph_side_by_side(fns, must=())
    best_peer_f = min(flushed["eager"], flushed["inductor"])
    best_peer_g = min(graph.get("eager", 1e9), graph.get("inductor", 1e9))
    # ("inductor in place" is shown, not counted as the peer: the
    # benchmark of record's peer is the out-of-place fusion.)
    print("== %s: %d candidates timed, inductor %.2f us flushed, %.2f us "
          "graph" % (shape_text(shape), len(quick),
                     flushed["inductor"] * 1e3,
                     graph.get("inductor", float("nan")) * 1e3))
    print("  %-34s %9s %7s %9s %7s" % ("", "flush us", "x peer",
                                        "graph us", "x peer"))
    rows = []
    for nm in fns:
        g = graph.get(nm)
        rows.append(dict(name=nm, flushed_us=flushed[nm] * 1e3,
                         graph_us=None if g is None else g * 1e3))
        print("  %-34s %9.2f %7.3f %9s %7s" % (
            nm[:34], flushed[nm] * 1e3, best_peer_f / flushed[nm],
            "-" if g is None else "%.2f" % (g * 1e3),
            "-" if g is None else "%.3f" % (best_peer_g / g)))
    for ms, nm, _ in quick[args.top:args.top + 8]:
        print("  %-34s %9.2f (quick)" % (nm[:34], ms * 1e3))
    return dict(shape=shape_text(shape), timed=rows, failed=failed,
                quick=[dict(name=nm, flushed_us=ms * 1e3)
                       for ms, nm, _ in quick])


def peer_of(shape, x, w, r):
    """The peer's callable (eager) and its arguments."""
    n = shape[2]
    if r is not None:
        def peer(a, b, g):
            t = a + b
            return F.rms_norm(t, (n,), g, gb.EPS), t
        return peer, (x, r, w)

    def peer(a, g):
        return F.rms_norm(a, (n,), g, gb.EPS)
    return peer, (x, w)


def launch_only(args, lib, shape, p, mk, cand, nc, dflt, x, w, r):
    """Run the matching points, the default and the peers args.launch times
    each (nothing timed: for ncu)."""
    peer, pargs = peer_of(shape, x, w, r)
    torch._dynamo.reset()
    cf = torch.compile(peer, dynamic=False)
    cf(*pargs)
    px = re.compile(args.params)
    fns = [("inductor", lambda: cf(*pargs)), ("eager", lambda: peer(*pargs)),
           ("default " + name_of(dflt), mk(dflt))]
    fns += [(name_of(cand[i]), mk(cand[i])) for i in range(max(nc, 0))
            if px.search(name_of(cand[i]))]
    for nm, fn in fns:
        torch.cuda.nvtx.range_push(nm)
        for _ in range(args.launch):
            fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        print("launched %s: %s x %d" % (shape_text(shape), nm, args.launch),
              flush=True)
    return dict(shape=shape_text(shape), launched=[nm for nm, _ in fns])


def shape_text(s):
    return "%s:%d,%d%s" % (s[0], s[1], s[2], ":res" if s[3] else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(gb.ROOT, "build/gpu"))
    ap.add_argument("--variants", default="rows|lat")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--code", action="store_true")
    ap.add_argument("--code-file", default=None,
                    help="with --code: append Inductor's whole source here")
    ap.add_argument("--out", default=None)
    ap.add_argument("--launch", type=int, default=0)
    ap.add_argument("--params", default=r"^$")
    ap.add_argument("shapes", nargs="+", type=shape_of)
    args = ap.parse_args(argv)
    lib = gb.load_kernels(args.build)
    out = [one(args, lib, s) for s in args.shapes]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(commit=gb.commit(), shapes=out), f, indent=1)


if __name__ == "__main__":
    main()
