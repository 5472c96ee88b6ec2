#!/usr/bin/env python3
"""gemm_points.py -- every candidate of chosen GEMM / grouped GEMM variants
timed on given shapes, beside the PyTorch peer, with gpu_bench's bench()
(CUDA events per call, L2 cleaned by a read before each rep, median).

A diagnostic, not the benchmark of record (that is gemm_bench.py, which
times the daemon's decisions): it answers "how fast is each point of
gemm_tma on this shape", which the tuner's database answers only for the
points its successive halving kept.

  python3 bench/gemm_points.py [--build DIR] [--variants REGEX]
      [--params REGEX] [--top N] [--envs SETS] [--fill normal|uniform]
      [--tuner] [--out FILE] SHAPE...

SHAPE is gemm:M,N,K or grouped:G,M,N,K (even groups).  Each candidate the
library enumerates (flyk_gpu_candidates) whose variant matches --variants
and whose "variant[params]" text matches --params is timed quickly (12
reps), the best --top again (50 reps); the peer is torch.matmul or
torch._grouped_mm.  Prints a table per shape, fastest first, with the
ratio to the peer; --out writes every point as JSON.  --envs times each
point once per environment set (";" between sets, "," between VAR=VALUE
of a set, "base" for none: for switches the library or the vendor's
libraries read at launch), one right after the other, so drifting clocks
hit all sets alike.  --tuner first has flytuned (GPU backend, a fresh state
directory) tune each shape and shows its trial medians beside ours: the
tuner's timing against the caller's, in one run.
"""
import argparse
import ctypes
import glob
import json
import os
import re
import sqlite3
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench as gb  # noqa: E402
import gemm_bench as gm  # noqa: E402


def shape_of(text):
    kind, _, dims = text.partition(":")
    v = [int(x) for x in dims.split(",")]
    if (kind, len(v)) not in (("gemm", 3), ("grouped", 4)):
        raise argparse.ArgumentTypeError("bad shape %r" % text)
    return kind, v


def rand(fill, *shape):
    """Operands as gemm_bench.py makes them (normal), or uniform in
    [-1, 1) as the library's tuning case does."""
    if fill == "uniform":
        return torch.rand(*shape, device="cuda",
                          dtype=torch.bfloat16) * 2 - 1
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def setup(lib, kind, v, fill="normal"):
    """The problem, a launcher of a decision, and the peer."""
    if kind == "gemm":
        m, n, k = v
        a = rand(fill, m, k)
        b = rand(fill, n, k)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ws = torch.empty(gm.WS_BYTES, dtype=torch.uint8, device="cuda")
        p = gm.problem(gm.OP_GEMM, (m, n, k))

        def ref():
            return torch.matmul(a, b.t())
        return (p, gm.gemm_launcher(lib, p, a, b, c, ws), ref, c,
                2.0 * m * n * k)
    g, m, n, k = v
    a = rand(fill, m, k)
    w = rand(fill, g, n, k)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    offs = [m * e // g for e in range(g + 1)]
    doff = torch.tensor(offs, device="cuda", dtype=torch.int64)
    ends = torch.tensor(offs[1:], device="cuda", dtype=torch.int32)
    wt = w.transpose(-2, -1)
    p = gm.problem(gm.OP_GROUPED, (g, m, n, k))

    def ref():
        return torch._grouped_mm(a, wt, offs=ends)
    return (p, gm.grouped_launcher(lib, p, a, w, c, doff), ref, c,
            2.0 * m * n * k)


def tune_all(args):
    """{(kind, dims): {"variant[p,...]": (median_us, reps), "winner": ...}}
    from a fresh flytuned that tuned every shape."""
    daemon = gb.Daemon(args.build)
    out = {}
    try:
        for kind, v in args.shapes:
            op = "gemm" if kind == "gemm" else "grouped_gemm"
            names = ("m", "n", "k") if kind == "gemm" else ("g", "m", "n",
                                                            "k")
            d, _ = gm.decide(daemon, op, dict(zip(names, v)))
            out[(kind, tuple(v))] = {"winner": "%s%s" % (
                d["variant"], list(d["params"]))}
        daemon.stop()
        for db in glob.glob(os.path.join(daemon.dir, "*.db")):
            con = sqlite3.connect(db)
            try:
                rows = con.execute("select key, variant, params, median_us,"
                                   " reps from trials").fetchall()
            except sqlite3.Error:
                continue
            for key, var, params, med, reps in rows:
                dims = tuple(int(x.split("=")[1])
                             for x in key.split("/")[-1].split(","))
                kind = "gemm" if key.startswith("gemm/") else "grouped"
                if (kind, dims) in out and reps:
                    out[(kind, dims)][var + params.replace(" ", "")] = (
                        med, reps)
    finally:
        daemon.stop()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(gb.ROOT, "build/gpu"))
    ap.add_argument("--variants", default="tma",
                    help="regex on the variant name (default: tma)")
    ap.add_argument("--params", default="",
                    help="regex on 'variant[p, ...]' (default: all)")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--envs", default="base")
    ap.add_argument("--fill", default="normal", choices=("normal", "uniform"),
                    help="operand values: normal (as gemm_bench.py) or "
                    "uniform in [-1, 1) (as the library's tuning case)")
    ap.add_argument("--tuner", action="store_true",
                    help="tune each shape with flytuned first and show its "
                    "trial medians beside these")
    ap.add_argument("--out", default=None)
    ap.add_argument("shapes", nargs="+", type=shape_of)
    args = ap.parse_args(argv)
    lib = gm.load(args.build)
    vre, pre = re.compile(args.variants), re.compile(args.params)
    envs = []
    for e in args.envs.split(";"):
        kv = [x.split("=", 1) for x in e.split(",") if x and x != "base"]
        envs.append((e if kv else "", dict(kv)))
    names = {k for _, d in envs for k in d}

    def set_env(d):
        for k in names:
            os.environ.pop(k, None)
        os.environ.update(d)
    report = []
    tuned = tune_all(args) if args.tuner else {}
    for kind, v in args.shapes:
        p, run, ref, c, flop = setup(lib, kind, v, args.fill)
        cand = (gb.Decision * 1024)()
        n = lib.flyk_gpu_candidates(ctypes.byref(p), cand, 1024)
        want = ref()
        pts = []
        for i in range(max(n, 0)):
            d = cand[i]
            dd = gb.dec_dict(d)
            name = "%s%s" % (dd["variant"], dd["params"])
            if not vre.search(dd["variant"]) or not pre.search(name):
                continue
            for tag, env in envs:
                set_env(env)
                pn = name + (" {%s}" % tag if tag else "")
                c.fill_(float("nan"))
                rc = run(d)
                if rc:
                    pts.append(dict(point=pn, rc=rc))
                    continue
                torch.cuda.synchronize()
                err = (c.float() - want.float()).abs().max().item()
                ms = gb.bench(lambda: run(d), warmup=2, reps=12,
                              budget_ms=40)
                pts.append(dict(point=pn, ms=ms, err=err, i=i, env=env))
        set_env({})
        timed = sorted((q for q in pts if "ms" in q), key=lambda q: q["ms"])
        for q in timed[:args.top]:
            d = cand[q["i"]]
            set_env(q["env"])
            q["ms"] = gb.bench(lambda: run(d))
        set_env({})
        timed = sorted(timed, key=lambda q: q["ms"])
        peer = gb.bench(ref)
        title = "%s %s %s (%d candidates, %d timed)" % (
            kind, ",".join(map(str, v)), args.fill, n, len(timed))
        print("\n## " + title)
        print("peer %s: %.1f us, %.0f TFLOP/s" % (
            "torch.matmul" if kind == "gemm" else "torch._grouped_mm",
            peer * 1e3, flop / peer / 1e9))
        tr = tuned.get((kind, tuple(v)), {})
        if tr:
            print("tuner picked %s; 'tuner' = its trial median (reps)" %
                  tr.get("winner"))
        for q in timed[:max(args.top, 12)]:
            t = tr.get(q["point"].split(" {")[0].replace(" ", ""))
            q["tuner_us"] = t[0] if t else None
            print("  %8.1f us  %5.0f TFLOP/s  x%.2f  err %.3g  %s%s" % (
                q["ms"] * 1e3, flop / q["ms"] / 1e9, peer / q["ms"],
                q["err"], q["point"],
                "  tuner %.1f us (%d)" % t if t else ""))
        bad = [q for q in pts if "rc" in q]
        if bad:
            print("  refused: %d (%s ...)" % (len(bad), bad[0]["point"]))
        report.append(dict(shape=title, kind=kind, dims=v, peer_ms=peer,
                           points=[{k2: q[k2] for k2 in q
                                    if k2 not in ("i", "env")}
                                   for q in pts]))
        sys.stdout.flush()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(envs=args.envs, shapes=report), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
