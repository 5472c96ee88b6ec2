#!/usr/bin/env python3
"""mqa_ab.py -- two or more builds of libflykernels_cuda timed side by side
on MQA-logits cases, in one process, at the same mqa_wgmma points (and one
Triton peer config): the way to see what a kernel change does before a
run of record, without a launch-time switch in the kernel (a diagnostic,
not a result of record).

  python3 bench/mqa_ab.py --lib old=build/ab/old.so --lib new=build/ab/new.so \\
      --cases 0,4,3,10,5 --points 1,2,2,8,0,1 0,2,2,8,0,1

Each build is loaded by its own path (ctypes, so the same symbols in two
files do not clash); NAME=PATH:X also sets FLYK_MQA_X=X around that
build's launches (for a build that reads one).  Every output is checked
with the Triton peer's check() first (" BAD" after a name that fails);
the timing is gpu_bench.bench_side_by_side's (events per call, caches
cleaned by a read, median, the callables interleaved), ratios against the
peer config of the same run.  On 2026-12-06 it showed a port of a kernel
change 11-30% slower than the form it was measured in (a multiply beside
a load), which the run of record would have carried.
"""
import argparse
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import gpu_bench  # noqa: E402
import mqa_bench  # noqa: E402
from mqa_profile import checked  # noqa: E402


def parse_lib(s):
    name, _, rest = s.partition("=")
    if not name or not rest:
        raise argparse.ArgumentTypeError("--lib NAME=PATH[:X], got %r" % s)
    path, _, x = rest.partition(":")
    return name, path, x


def one_case(ci, c, peer, libs, pts, tname, tcfg):
    """Every build at every point on case @p ci, and the peer, timed
    side by side; one line each, fastest first."""
    sq, skv = c["s_q"], c["s_kv"]
    kind, clean = c["window"], c["clean_logits"]
    q, kv, sc, w, ks, ke = peer.make_inputs(sq, skv, kind, seed=ci)
    out = torch.empty((sq, skv), dtype=torch.float32, device="cuda")
    qb, kvb = q.view(torch.uint8), kv.view(torch.uint8)
    fns = {}
    for name, kern, x in libs:
        p = kern.mqa_problem(sq, skv, mqa_bench.H, mqa_bench.D,
                             clean=clean)
        for pt in pts:
            d = {"variant": "mqa_wgmma", "params": pt}

            def f(kern=kern, d=d, p=p, x=x):
                if x:
                    os.environ["FLYK_MQA_X"] = x
                else:
                    os.environ.pop("FLYK_MQA_X", None)
                kern.mqa_logits(d, qb, kvb, sc, w, ks, ke, out,
                                problem=p)
            try:
                bad = checked(peer, f, out, (q, kv, sc, w, ks, ke), clean)
            except Exception as e:  # a point this build does not have
                print("  %s %s: skipped (%s)" % (name, pt, e), flush=True)
                continue
            fns["%s %s%s" % (name, pt, bad)] = f
    tout = torch.empty_like(out)
    fns["triton " + tname] = (
        lambda: peer.mqa_logits_triton(q, kv, sc, w, ks, ke, clean,
                                       tcfg, out=tout))
    ms = gpu_bench.bench_side_by_side(fns, warmup=3, reps=30,
                                      budget_ms=300)
    base = ms["triton " + tname]
    print("case %d %s" % (ci, c), flush=True)
    for k, v in sorted(ms.items(), key=lambda kv_: kv_[1]):
        print("  %-30s %.4f ms  x%.3f vs the peer" % (k, v, base / v),
              flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", action="append", type=parse_lib, required=True,
                    help="NAME=PATH[:X]: a build of libflykernels_cuda.so "
                    "(X: FLYK_MQA_X around its launches); give two or more")
    ap.add_argument("--cases", default="0",
                    help="indexes into cases.json's mqa_logits_fp8 primary "
                    "list, comma-separated")
    ap.add_argument("--points", nargs="+", default=["1,2,2,8,0,1"],
                    help="mqa_wgmma points in the build's parameter order: "
                    "lin,rows,stages,split,pipe,tma (a build before the "
                    "lin parameter: rows,stages,split,pipe,tma); a point "
                    "a build refuses is skipped for that build, with a "
                    "line saying so")
    ap.add_argument("--triton", default="D:2:64:4:3",
                    help="the Triton peer's config V:BQ:BKV:warps:stages")
    ap.add_argument("--cases-file", default=os.path.join(
        ROOT, "..", "shared", "bench", "cases.json"))
    args = ap.parse_args(argv)
    if not os.path.exists(args.cases_file):
        args.cases_file = os.path.join(ROOT, ".devdeps", "bench",
                                       "cases.json")
    import flyclient.kernels as fk
    allc = json.load(open(args.cases_file))["mqa_logits_fp8"]["primary"]
    peer = mqa_bench.peer_module()
    loaded = {}
    libs = []
    for name, path, x in args.lib:
        if path not in loaded:
            loaded[path] = fk.Kernels(path)
        libs.append((name, loaded[path], x))
    tv, bq, bkv, nw, ns = args.triton.split(":")
    tcfg = (tv, int(bq), int(bkv), int(nw), int(ns))
    pts = [[int(v) for v in p.split(",")] for p in args.points]
    for ci in [int(x) for x in args.cases.split(",")]:
        one_case(ci, allc[ci], peer, libs, pts, args.triton, tcfg)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
