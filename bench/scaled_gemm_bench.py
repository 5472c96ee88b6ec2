#!/usr/bin/env python3
"""scaled_gemm_bench.py -- flytuned's scaled low-precision GEMM (fp8 per
tensor, MXFP8, MXFP4) against PyTorch on the GPU, one run, one timing
function.

Daemon-driven: starts flytuned on the GPU backend (gpu_bench.Daemon), asks
it for each primary case of cases.json `scaled_gemm` x format through the
Python client (decide_wait: its wall time is the case's tune_s), launches
the decision on the case's inputs through flyclient.kernels
(libflykernels_cuda.so's flyk_gpu_scaled_gemm), checks it, and times it
side by side (gpu_bench.bench_side_by_side: CUDA events per call, L2
cleaned by a read of 512 MiB before each rep, median, reps interleaved;
and the second timing, gpu_bench.bench_graph_side_by_side: 20 calls
captured back to back in a CUDA graph, replayed, per-call GPU time)
with:
  fp8_e4m3   torch._scaled_mm (per-tensor fp32 scales, bf16 out, no fast
             accumulation: its default)
  mxfp8/mxfp4  dequantize to bf16 (the e8m0 block scales applied, exact)
             then torch.matmul: the only path PyTorch has on sm_90; and
             flytuned's own fp8 per-tensor decision on the same shape
             (what block scaling costs)
Checks: the bf16 output against the peer's (fp8: torch._scaled_mm; MX: the
dequantized bf16 matmul, exact inputs, fp32 sums) within the library's
stated tolerance, |ours - ref| <= 2^-6 |ref| + 2^-8 max|ref|.
TFLOP/s count 2 m n k.

Writes OUT/<gpu>-scaled_gemm.json:
  {"gpu","date","commit","method","clocks",
   "cases":[{"op","format","case","variant","params","status","tune_s",
             "flytuned_ms","peers":{...},"tflops":{...},"check",
             "graph_ms":{...},"graph_peer","graph_x_vs_peer"}]}
usage: python3 bench/scaled_gemm_bench.py [--build DIR] [--cases FILE]
       [--out DIR] [--only 0,3] [--formats fp8_e4m3,mxfp8,mxfp4]
"""
import argparse
import json
import math
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import gpu_bench  # noqa: E402
import gpu_vendor  # noqa: E402
from mqa_bench import clocks  # noqa: E402

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def rand_fp8(rows, k, g):
    """e4m3fn bytes: sign, exponent field 4..9, any mantissa (never zero
    or NaN), as the library's own cases."""
    r = torch.randint(0, 1 << 30, (rows, k), device="cuda", generator=g,
                      dtype=torch.int32)
    b = ((r & 1) << 7) | ((4 + (r >> 1) % 6) << 3) | ((r >> 8) & 7)
    return b.to(torch.uint8)


def rand_scales(rows, nb, g):
    return torch.randint(124, 131, (rows, nb), device="cuda", generator=g,
                         dtype=torch.int32).to(torch.uint8)


def dequant_mx(x, s, fmt, k):
    """bf16 [rows, k]: the elements times 2^(e - 127) of their block."""
    if fmt == "mxfp4":
        lut = torch.tensor(E2M1, device="cuda", dtype=torch.float32)
        lo, hi = lut[(x & 15).long()], lut[(x >> 4).long()]
        v = torch.stack((lo, hi), dim=-1).reshape(x.shape[0], k)
    else:
        v = x.view(torch.float8_e4m3fn).to(torch.float32)
    sc = torch.exp2(s.to(torch.float32) - 127.0)
    return (v * sc.repeat_interleave(32, dim=1)).to(torch.bfloat16)


def decide(daemon, fmt, m, n, k):
    t0 = time.time()
    d = daemon.client.decide_wait("scaled_gemm", fmt,
                                  {"m": m, "n": n, "k": k}, layout="NT",
                                  timeout_ms=60000)
    return d, time.time() - t0


def check(out, ref):
    o, r = out.float(), ref.float()
    big = r.abs().max().item()
    err = (o - r).abs()
    bad = int((err > r.abs() * 2.0 ** -6 + big * 2.0 ** -8).sum().item())
    nan = int(torch.isnan(o).sum().item())
    return {"ok": bad == 0 and nan == 0, "bad": bad, "nan": nan,
            "max_err": err.max().item(), "max_ref": big}


def one_case(args, kern, daemon, idx, c, fmt):
    m, n, k = c["m"], c["n"], c["k"]
    g = torch.Generator(device="cuda")
    g.manual_seed(1000 + idx)
    gflop = 2.0 * m * n * k / 1e9
    d, tune_s = decide(daemon, fmt, m, n, k)
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    # the library's largest need: 32 MiB + A and B as bf16 (sg_dq_*)
    ws = torch.empty((32 << 20) + 2 * (m + n) * k, dtype=torch.uint8,
                     device="cuda")
    a8, b8 = rand_fp8(m, k, g), rand_fp8(n, k, g)
    fns, peers = {}, {}
    if fmt == "fp8_e4m3":
        sa = torch.rand((), device="cuda", generator=g) + 0.5
        sb = torch.rand((), device="cuda", generator=g) + 0.5
        a, b = a8, b8
        af, bf = a8.view(torch.float8_e4m3fn), b8.view(torch.float8_e4m3fn)
        f8 = gpu_bench.gpu_vendor.fp8_e4m3()
        if f8 != torch.float8_e4m3fn:
            # gfx940-942's _scaled_mm takes fnuz: rand_fp8's values
            # (|x| < 8) are exact in it
            af, bf = af.float().to(f8), bf.float().to(f8)

        def peer():
            return torch._scaled_mm(af, bf.t(), scale_a=sa, scale_b=sb,
                                    out_dtype=torch.bfloat16)
        fns["torch_scaled_mm"] = peer
        ref = peer()
    else:
        nb = k // 32
        sa, sb = rand_scales(m, nb, g), rand_scales(n, nb, g)
        if fmt == "mxfp4":
            a = torch.randint(0, 256, (m, k // 2), device="cuda",
                              generator=g, dtype=torch.int32).to(torch.uint8)
            b = torch.randint(0, 256, (n, k // 2), device="cuda",
                              generator=g, dtype=torch.int32).to(torch.uint8)
        else:
            a, b = a8, b8

        def peer():
            return torch.matmul(dequant_mx(a, sa, fmt, k),
                                dequant_mx(b, sb, fmt, k).t())
        fns["dequant_matmul"] = peer
        ref = peer()
        # flytuned's own fp8 per-tensor decision on this shape
        d8, _ = decide(daemon, "fp8_e4m3", m, n, k)
        p8 = kern.scaled_problem(m, n, k, "fp8_e4m3")
        one = torch.ones((), device="cuda")
        o8 = torch.empty_like(out)
        fns["flytuned_fp8"] = lambda: kern.scaled_gemm(
            d8, a8, b8, one, one, o8, dtype="fp8_e4m3", workspace=ws,
            problem=p8)
        peers["fp8_variant"] = d8["variant"]
    p = kern.scaled_problem(m, n, k, fmt)
    tc = gpu_bench.trial_counts(args.build, daemon, d["key"])
    measured, total = tc.get("ok"), tc.get("total", tc.get("error"))

    def ours():
        kern.scaled_gemm(d, a, b, sa, sb, out, dtype=fmt, workspace=ws,
                         problem=p)
    out.fill_(float("nan"))
    ours()
    torch.cuda.synchronize()
    chk = check(out, ref)
    fns = dict({"flytuned": ours}, **fns)
    ms = gpu_bench.bench_side_by_side(fns, warmup=3, reps=args.reps,
                                      budget_ms=300)
    gms, gfail = gpu_bench.bench_graph_side_by_side(
        fns, must=("flytuned", "flytuned_fp8"), budget_ms=300)
    peer_name = [x for x in fns if x not in ("flytuned", "flytuned_fp8")][0]
    r = {"op": "scaled_gemm", "format": fmt, "case": dict(c, index=idx),
         "variant": d["variant"], "params": d["params"],
         "status": d["status"], "tune_s": tune_s,
         "trials_measured": measured, "trials_timed": tc.get("timed"),
         "trials": total, "best_by_variant": tc.get("best_by_variant"),
         "flytuned_ms": ms["flytuned"],
         "peers": dict({x: ms[x] for x in ms if x != "flytuned"}, **peers),
         "gflop": gflop,
         "tflops": {x: gflop / ms[x] for x in ms}, "check": chk,
         "x_vs_peer": ms[peer_name] / ms["flytuned"]}
    r.update(gpu_bench.graph_fields(gms, gfail, "flytuned", [peer_name]))
    if "flytuned_fp8" in ms:
        r["fp8_over_mx"] = ms["flytuned_fp8"] / ms["flytuned"]
    print("%-8s %2d m%-5d n%-5d k%-5d ours %-11s %-28s %.4f ms (%5.0f TF/s)"
          "  %s %.4f ms  x%.2f  graph x%.2f%s  tune %.2fs (%s/%s/%s trials "
          "ok/timed/listed)  ok=%s" %
          (fmt, idx, m, n, k, d["variant"], d["params"], ms["flytuned"],
           gflop / ms["flytuned"], peer_name, ms[peer_name], r["x_vs_peer"],
           r.get("graph_x_vs_peer", float("nan")),
           ("  fp8/mx %.2f" % r["fp8_over_mx"]) if "fp8_over_mx" in r
           else "", tune_s or 0, measured, tc.get("timed"), total,
           chk["ok"]), flush=True)
    del a, b, a8, b8, out, ws, ref
    torch.cuda.empty_cache()
    return r


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cases", default=os.path.join(ROOT, "..", "shared",
                                                    "bench", "cases.json"))
    ap.add_argument("--out", default=os.environ.get(
        "OUT", os.path.join(ROOT, "bench", "results")))
    ap.add_argument("--only", default="")
    ap.add_argument("--formats", default="fp8_e4m3,mxfp8,mxfp4")
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args(argv)
    if not os.path.exists(args.cases):
        args.cases = os.path.join(ROOT, ".devdeps", "bench", "cases.json")
    cases = json.load(open(args.cases))["scaled_gemm"]["primary"]
    import flyclient.kernels as fk
    kern = fk.Kernels(gpu_bench.gpu_vendor.kernels_lib(args.build))
    head = {"gpu": torch.cuda.get_device_name(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": gpu_bench.commit(), "torch": torch.__version__,
            "method": "CUDA events per call, L2 cleaned by reading 512 MiB "
                      "before each rep, median ms, reps interleaved",
            "clocks": {"before": clocks()}}
    daemon = gpu_bench.Daemon(args.build)
    res = []
    only = [int(x) for x in args.only.split(",")] if args.only else None
    try:
        for fmt in args.formats.split(","):
            for i, c in enumerate(cases):
                if only is not None and i not in only:
                    continue
                try:
                    res.append(one_case(args, kern, daemon, i, c, fmt))
                except Exception as e:
                    print("%s case %d: failed: %r" % (fmt, i, e), flush=True)
                    res.append({"op": "scaled_gemm", "format": fmt,
                                "case": dict(c, index=i), "error": repr(e)})
    finally:
        daemon.stop()
        head["clocks"]["after"] = clocks()
        os.makedirs(args.out, exist_ok=True)
        with open(gpu_vendor.result_path(args.out, "scaled_gemm"), "w") as f:
            json.dump(dict(head, cases=res), f, indent=1)
        import shutil
        shutil.copy(daemon.log.name, os.path.join(args.out,
                                                  "flytuned-scaled.log"))
    for fmt in args.formats.split(","):
        ok = [r for r in res if r.get("format") == fmt and "flytuned_ms" in r]
        if not ok:
            continue
        x = [r["x_vs_peer"] for r in ok]
        gm = math.exp(sum(math.log(v) for v in x) / len(x))
        line = "%-8s geomean x%.3f (min x%.3f) over %d cases; tune_s max " \
               "%.2f; checks ok: %s" % (fmt, gm, min(x), len(ok),
                                        max(r["tune_s"] or 0 for r in ok),
                                        all(r["check"]["ok"] for r in ok))
        tt = [r.get("trials_timed") or 0 for r in ok]
        tl = [r["trials"] if isinstance(r.get("trials"), int) else 0
              for r in ok]
        line += "; trials timed %d-%d (keys with >= 30 listed: %d, of " \
                "them >= 30 timed: %d)" % (
                    min(tt), max(tt), sum(1 for v in tl if v >= 30),
                    sum(1 for a, b in zip(tt, tl) if b >= 30 and a >= 30))
        f8 = [r["fp8_over_mx"] for r in ok if "fp8_over_mx" in r]
        if f8:
            line += "; fp8/mx time geomean %.3f" % math.exp(
                sum(math.log(v) for v in f8) / len(f8))
        print(line)
        print(gpu_bench.graph_summary(ok, fmt))


if __name__ == "__main__":
    main()
