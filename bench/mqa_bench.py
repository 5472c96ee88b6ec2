#!/usr/bin/env python3
"""mqa_bench.py -- flytuned's FP8 MQA-logits (lightning indexer) against
the Triton peer and the dense torch reference on the GPU, one run, one
timing function.

Daemon-driven: starts flytuned on the GPU backend (gpu_bench.Daemon), asks
it for each primary case of cases.json `mqa_logits_fp8` through the Python
client (decide_wait: its wall time is the case's tune_s), launches the
decision on the case's own inputs and windows through
flyclient.kernels (libflykernels_cuda.so's flyk_gpu_mqa_logits), checks
it with the peer's check() (fp32 reference on the exact fp8 inputs,
relative error < 2e-3 on every window position, exact -inf outside under
clean_logits), and times it side by side (gpu_bench.bench_side_by_side:
CUDA events per call, L2 cleaned by a read of 512 MiB before each rep,
median, reps interleaved; and the second timing,
gpu_bench.bench_graph_side_by_side: 20 calls captured back to back in a
CUDA graph, replayed, per-call GPU time; a failed capture of ours fails
the case) with:
  triton     ../shared/bench/peers/mqa_logits_triton.py, its DEFAULT_CONFIGS
             swept per case (quick median each), the fastest config
  torch_ref  the peer's dense torch reference (per-head bf16 matmuls),
             on cases with sq * skv <= 2^27 only (it is 8 ms at 4096^2)
TFLOP/s count 2 * H * D flops per valid (row, column) pair.  The SM
clock and power are sampled with nvidia-smi (amd-smi or rocm-smi on
ROCm) before and after.

Writes OUT/<gpu>-mqa_logits.json:
  {"gpu","date","commit","method","clocks":{...},
   "cases":[{"op","case","variant","params","flytuned_ms",
             "peers":{"triton":ms,"torch_ref":ms},"triton_cfg",
             "tflops":{"flytuned","triton"},"check","tune_s","status",
             "graph_ms":{NAME: ms},"graph_peer","graph_x_vs_peer"}]}
usage: python3 bench/mqa_bench.py [--build DIR] [--cases FILE] [--out DIR]
       [--only 0,3,11]
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

H, D = 64, 128


def peer_module():
    for d in (os.path.join(ROOT, "..", "shared", "bench", "peers"),
              os.path.join(ROOT, ".devdeps", "bench", "peers")):
        if os.path.exists(os.path.join(d, "mqa_logits_triton.py")):
            sys.path.insert(0, d)
            import mqa_logits_triton
            return mqa_logits_triton
    raise RuntimeError("peers/mqa_logits_triton.py not found")


def aiter_module():
    """aiter's Triton fp8_mqa_logits (the ROCm peer), or None with a line
    saying why it is skipped."""
    try:
        from aiter.ops.triton.fp8_mqa_logits import fp8_mqa_logits
        return fp8_mqa_logits
    except Exception as e:
        print("aiter fp8_mqa_logits: not importable (%s): skipped" % e,
              flush=True)
        return None


def aiter_peer(fn, q, kv, sc, w, ks, ke):
    """A callable running aiter's fp8_mqa_logits on @p q, @p kv recast to
    this GPU's e4m3 flavour (fnuz on gfx942: the peer's inputs are e4m3fn,
    all within fnuz's +-240, so exactly), and its first output; or None
    with a line saying why it is skipped."""
    f8 = gpu_vendor.fp8_e4m3()
    qa = q.float().to(f8) if q.dtype != f8 else q
    kva = kv.float().to(f8) if kv.dtype != f8 else kv
    try:
        run = (lambda: fn(qa, kva, sc, w, ks, ke))
        out = run()
        torch.cuda.synchronize()
    except Exception as e:
        print("  aiter fp8_mqa_logits: call failed (%r): skipped" % e,
              flush=True)
        return None, None
    return run, out


def clocks():
    return gpu_vendor.clocks()


def one_case(args, peer, kern, daemon, idx, c, aiter_fn=None):
    sq, skv, kind, clean = c["s_q"], c["s_kv"], c["window"], c["clean_logits"]
    q, kv, sc, w, ks, ke = peer.make_inputs(sq, skv, kind, seed=idx)
    pairs = peer.valid_pairs(ks, ke, skv)
    gflop = 2.0 * H * D * pairs / 1e9
    flags = ("clean",) if clean else ()
    d, tune_s = daemon.decide("mqa_logits", "fp8_e4m3",
                              {"sq": sq, "skv": skv, "h": H, "d": D}, flags)
    p = kern.mqa_problem(sq, skv, H, D, clean=clean)
    out = torch.empty((sq, skv), dtype=torch.float32, device="cuda")
    qb, kvb = q.view(torch.uint8), kv.view(torch.uint8)

    def ours():
        kern.mqa_logits(d, qb, kvb, sc, w, ks, ke, out, problem=p)

    out.fill_(float("nan"))
    ours()
    torch.cuda.synchronize()
    chk = peer.check(out, q, kv, sc, w, ks, ke, clean)
    # the Triton peer: every default config, quick, then the fastest
    tout = torch.empty_like(out)
    quick = []
    for cfg in peer.DEFAULT_CONFIGS:
        try:
            fn = (lambda cfg=cfg: peer.mqa_logits_triton(
                q, kv, sc, w, ks, ke, clean, cfg, out=tout))
            fn()
            quick.append((gpu_bench.bench(fn, warmup=2, reps=10,
                                          budget_ms=60), cfg))
        except Exception as e:  # a config that does not compile here
            print("  triton %s: %r" % (peer.cfg_name(cfg), e), flush=True)
    quick.sort(key=lambda x: x[0])
    tcfg = quick[0][1] if quick else None
    tchk = peer.check(tout, q, kv, sc, w, ks, ke, clean) if quick else {}
    fns = {"flytuned": ours}
    if quick:
        fns["triton"] = lambda: peer.mqa_logits_triton(
            q, kv, sc, w, ks, ke, clean, tcfg, out=tout)
    else:  # e.g. fp8 e4m3fn on a gfx942 Triton that has fnuz only
        print("  triton peer: no config ran here: skipped", flush=True)
    achk = {}
    if aiter_fn is not None:
        arun, aout = aiter_peer(aiter_fn, q, kv, sc, w, ks, ke)
        if arun is not None:
            fns["aiter"] = arun
            try:
                achk = peer.check(aout if torch.is_tensor(aout) else aout[0],
                                  q, kv, sc, w, ks, ke, clean)
            except Exception as e:
                achk = {"ok": None, "error": repr(e)}
    if sq * skv <= (1 << 27):
        fns["torch_ref"] = lambda: peer.torch_ref_bf16(q, kv, sc, w, ks, ke,
                                                       clean)
    ms = gpu_bench.bench_side_by_side(fns, warmup=3, reps=args.reps,
                                      budget_ms=400)
    gms, gfail = gpu_bench.bench_graph_side_by_side(fns, budget_ms=400)
    r = {"op": "mqa_logits", "case": dict(c, index=idx),
         "variant": d["variant"], "params": d["params"],
         "status": d["status"], "tune_s": tune_s,
         "flytuned_ms": ms["flytuned"],
         "peers": {"triton": ms.get("triton"),
                   "torch_ref": ms.get("torch_ref"),
                   "aiter": ms.get("aiter")},
         "triton_cfg": peer.cfg_name(tcfg) if tcfg else None,
         "gflop": gflop,
         "tflops": {nm: gflop / v for nm, v in ms.items()},
         "check": chk, "triton_check": tchk, "aiter_check": achk}
    # the peer of record is Triton's (torch_ref is a dense reference)
    r.update(gpu_bench.graph_fields(gms, gfail, "flytuned",
                                    [x for x in ("triton", "aiter")
                                     if x in fns]))
    print("case %2d %5dx%-6d %-11s clean=%d  ours %-10s %-12s %.4f ms "
          "(%4.0f TF/s)  triton %.4f ms (%s)  x%.2f  graph x%.2f  "
          "tune %.2fs  ok=%s" %
          (idx, sq, skv, kind, clean, d["variant"], d["params"],
           ms["flytuned"], r["tflops"]["flytuned"],
           ms.get("triton", float("nan")), r["triton_cfg"],
           ms.get("triton", float("nan")) / ms["flytuned"],
           r.get("graph_x_vs_peer", float("nan")), tune_s or 0,
           chk.get("ok")), flush=True)
    if "aiter" in ms:
        print("        aiter %.4f ms  x%.2f  ok=%s" %
              (ms["aiter"], ms["aiter"] / ms["flytuned"], achk.get("ok")),
              flush=True)
    del q, kv, sc, w, ks, ke, out, tout
    torch.cuda.empty_cache()
    return r


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cases", default=os.path.join(ROOT, "..", "shared",
                                                    "bench", "cases.json"))
    ap.add_argument("--out", default=os.environ.get(
        "OUT", os.path.join(ROOT, "build", "bench-results")))
    ap.add_argument("--only", default="")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args(argv)
    if not os.path.exists(args.cases):
        args.cases = os.path.join(ROOT, ".devdeps", "bench", "cases.json")
    cases = json.load(open(args.cases))["mqa_logits_fp8"]["primary"]
    peer = peer_module()
    import flyclient.kernels as fk
    kern = fk.Kernels(gpu_vendor.kernels_lib(args.build))
    head = {"gpu": torch.cuda.get_device_name(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": gpu_bench.commit(), "torch": torch.__version__,
            "method": "CUDA/HIP events per call, caches cleaned by reading "
                      "%d MiB before each rep, median ms, reps interleaved"
                      % (gpu_vendor.flush_bytes() >> 20),
            "clocks": {"before": clocks()}}
    aiter_fn = aiter_module()
    daemon = gpu_bench.Daemon(args.build)
    res = []
    only = [int(x) for x in args.only.split(",")] if args.only else None
    try:
        for i, c in enumerate(cases):
            if only is not None and i not in only:
                continue
            try:
                res.append(one_case(args, peer, kern, daemon, i, c,
                                    aiter_fn))
            except Exception as e:
                print("case %d: failed: %r" % (i, e), flush=True)
                res.append({"op": "mqa_logits", "case": dict(c, index=i),
                            "error": repr(e)})
    finally:
        daemon.stop()
        head["clocks"]["after"] = clocks()
        os.makedirs(args.out, exist_ok=True)
        with open(gpu_vendor.result_path(args.out, "mqa_logits"), "w") as f:
            json.dump(dict(head, cases=res), f, indent=1)
        import shutil
        shutil.copy(daemon.log.name, os.path.join(args.out,
                                                  "flytuned-mqa.log"))
    ok = [r for r in res if "flytuned_ms" in r]
    if ok:
        ratios = [r["peers"]["triton"] / r["flytuned_ms"] for r in ok]
        g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print("geomean vs triton over %d cases: x%.3f (min x%.3f); all "
              "checks ok: %s" % (len(ok), g, min(ratios),
                                 all(r["check"].get("ok") for r in ok)))
        print(gpu_bench.graph_summary(ok, "mqa_logits"))


if __name__ == "__main__":
    main()
