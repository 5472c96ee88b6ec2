#!/usr/bin/env python3
"""mqa_profile.py -- one MQA-logits case launched through given points of
mqa_wgmma and given Triton peer configs, each twice (a warm-up, then the
profiled launch), no daemon and no timing of its own: the program that
Nsight Compute wraps to say where a kernel's time goes (a diagnostic, not
a result of record).

  ncu --clock-control none -k regex:'mqa' --launch-skip-before-match 0 \\
      --section SpeedOfLight --section ComputeWorkloadAnalysis \\
      --section MemoryWorkloadAnalysis --section WarpStateStats \\
      python3 bench/mqa_profile.py --build build/gpu --case 0 \\
      --points 1,2,2,16,0,1 --triton D:2:64:4:3

--case indexes cases.json's mqa_logits_fp8 primary list; --points and
--triton take several values separated by spaces.  Every output is checked
with the peer's check() so a profile of a wrong kernel is flagged.
"""
import argparse
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import mqa_bench  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cases", default=os.path.join(ROOT, "..", "shared",
                                                    "bench", "cases.json"))
    ap.add_argument("--case", type=int, default=0)
    ap.add_argument("--points", nargs="*", default=["1,2,2,16,0,1"])
    ap.add_argument("--triton", nargs="*", default=["D:2:64:4:3"])
    ap.add_argument("--time", default="",
                    help="environment variable NAME=v1,v2,...: time every "
                    "point under each value of NAME (read by the library at "
                    "launch) beside the Triton configs, gpu_bench's timing, "
                    "instead of the profiling launches; FLYK_PDL is read "
                    "once a process: set it outside, one run per value")
    ap.add_argument("--cases-list", default="",
                    help="with --time: several case indexes, comma-separated")
    ap.add_argument("--graph", action="store_true",
                    help="with --time: also time each under CUDA-graph "
                    "replay (gpu_bench.bench_graph_side_by_side: 20 calls a "
                    "graph, no clean between them)")
    args = ap.parse_args(argv)
    if not os.path.exists(args.cases):
        args.cases = os.path.join(ROOT, ".devdeps", "bench", "cases.json")
    allc = json.load(open(args.cases))["mqa_logits_fp8"]["primary"]
    if args.time:
        return time_points(args, allc)
    c = allc[args.case]
    peer = mqa_bench.peer_module()
    import flyclient.kernels as fk
    kern = fk.Kernels(os.path.join(args.build, "libflykernels_cuda.so"))
    sq, skv, kind, clean = c["s_q"], c["s_kv"], c["window"], c["clean_logits"]
    q, kv, sc, w, ks, ke = peer.make_inputs(sq, skv, kind, seed=args.case)
    p = kern.mqa_problem(sq, skv, mqa_bench.H, mqa_bench.D, clean=clean)
    out = torch.empty((sq, skv), dtype=torch.float32, device="cuda")
    qb, kvb = q.view(torch.uint8), kv.view(torch.uint8)
    print("case %d: %s" % (args.case, c), flush=True)
    for pt in args.points:
        d = {"variant": "mqa_wgmma",
             "params": [int(x) for x in pt.split(",")]}
        for _ in range(2):
            out.fill_(float("nan"))
            kern.mqa_logits(d, qb, kvb, sc, w, ks, ke, out, problem=p)
        torch.cuda.synchronize()
        print("mqa_wgmma %s: %s" % (pt, peer.check(out, q, kv, sc, w, ks,
                                                   ke, clean)), flush=True)
    for t in args.triton:
        v, bq, bkv, nw, ns = t.split(":")
        cfg = (v, int(bq), int(bkv), int(nw), int(ns))
        for _ in range(2):
            out.fill_(float("nan"))
            peer.mqa_logits_triton(q, kv, sc, w, ks, ke, clean, cfg, out=out)
        torch.cuda.synchronize()
        print("triton %s: %s" % (t, peer.check(out, q, kv, sc, w, ks, ke,
                                               clean)), flush=True)


def checked(peer, f, out, inputs, clean):
    """Run @p f once into @p out, NaN-poisoned first, and check it with
    the peer's check() on @p inputs (q, kv, kv_scale, w, ks, ke): "" if
    it passes, " BAD" (a mark for the timing's name) if not."""
    out.fill_(float("nan"))
    f()
    torch.cuda.synchronize()
    return "" if peer.check(out, *inputs, clean)["ok"] else " BAD"


def time_points(args, allc):
    import gpu_bench
    import flyclient.kernels as fk
    peer = mqa_bench.peer_module()
    kern = fk.Kernels(os.path.join(args.build, "libflykernels_cuda.so"))
    name, vals = args.time.split("=")
    idx = [int(x) for x in (args.cases_list or str(args.case)).split(",")]

    def one(ci):
        """Case @p ci timed and printed; its tensors die at return."""
        c = allc[ci]
        sq, skv = c["s_q"], c["s_kv"]
        kind, clean = c["window"], c["clean_logits"]
        q, kv, sc, w, ks, ke = peer.make_inputs(sq, skv, kind, seed=ci)
        p = kern.mqa_problem(sq, skv, mqa_bench.H, mqa_bench.D, clean=clean)
        out = torch.empty((sq, skv), dtype=torch.float32, device="cuda")
        qb, kvb = q.view(torch.uint8), kv.view(torch.uint8)
        fns = {}
        for pt in args.points:
            d = {"variant": "mqa_wgmma",
                 "params": [int(x) for x in pt.split(",")]}
            for v in vals.split(","):
                def f(d=d, v=v):
                    os.environ[name] = v
                    kern.mqa_logits(d, qb, kvb, sc, w, ks, ke, out,
                                    problem=p)
                bad = checked(peer, f, out, (q, kv, sc, w, ks, ke), clean)
                fns["%s %s=%s%s" % (pt, name, v, bad)] = f
        tout = torch.empty_like(out)
        for t in args.triton:
            tv, bq, bkv, nw, ns = t.split(":")
            cfg = (tv, int(bq), int(bkv), int(nw), int(ns))
            fns["triton " + t] = (lambda cfg=cfg: peer.mqa_logits_triton(
                q, kv, sc, w, ks, ke, clean, cfg, out=tout))
        ms = gpu_bench.bench_side_by_side(fns, warmup=3, reps=30,
                                          budget_ms=300)
        best_t = min(v for k, v in ms.items() if k.startswith("triton"))
        print("case %d %s" % (ci, c), flush=True)
        for k, v in sorted(ms.items(), key=lambda x: x[1]):
            print("  %-28s %.4f ms  x%.3f vs best triton" %
                  (k, v, best_t / v), flush=True)
        if args.graph:
            gms, _ = gpu_bench.bench_graph_side_by_side(fns, must=(),
                                                        budget_ms=300)
            best_g = min(v for k, v in gms.items() if k.startswith("triton"))
            for k, v in sorted(gms.items(), key=lambda x: x[1]):
                print("  graph %-22s %.4f ms  x%.3f vs best triton" %
                      (k, v, best_g / v), flush=True)

    for ci in idx:
        one(ci)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
