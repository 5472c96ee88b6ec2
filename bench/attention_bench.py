#!/usr/bin/env python3
"""attention_bench.py -- flytuned's attention forward (bf16) against
PyTorch's scaled_dot_product_attention under each of its backends, on
the GPU, one run, one timing function.

Daemon-driven (the default): starts flytuned on the GPU backend
(gpu_bench.Daemon), asks it for each case of cases.json
`attention_fwd_bf16` (seq_q = seq_kv = seq; [batch, seq, heads, head_dim]
tensors) through the Python client (decide_wait: its wall time is the
case's tune_s), launches the decision through flyclient.kernels
(libflykernels_cuda.so's flyk_gpu_attention, LSE written too), checks it,
and times it side by side (gpu_bench.bench_side_by_side: CUDA events per
call, L2 cleaned by a read of 512 MiB before each rep, median, reps
interleaved; and the second timing, gpu_bench.bench_graph_side_by_side:
20 calls captured back to back in a CUDA graph, replayed, per-call GPU
time; a failed capture of ours fails the case) with torch.nn.functional.scaled_dot_product_attention on the
same tensors (viewed [b, h, s, d]; GQA through enable_gqa) under
torch.nn.attention.sdpa_kernel of each backend:
  sdpa_cudnn      SDPBackend.CUDNN_ATTENTION (PyTorch's default on H100/H200)
  sdpa_flash      SDPBackend.FLASH_ATTENTION (FlashAttention-2)
  sdpa_efficient  SDPBackend.EFFICIENT_ATTENTION (mem-efficient)
A backend that refuses a case is recorded under "unsupported" with its
message and left out of that case's "faster" peer.

--variants: no daemon; every feasible point of each of our variants
(flyk_gpu_candidates) is timed quickly, each variant's best point kept,
and every variant's best is timed side by side with the peers: attn_fa2
against the peer even if tuning misbehaves ("flytuned" is then the
fastest of them; tune_s the sweep's wall time).

Checks: our O against the first backend that ran (|ours - peer| <=
|peer| / 32 + 8e-3: both round P to bf16 and O to bf16; the library's own
rule against its fp32 reference is |r| / 64 + 4e-3), and our LSE on 256
rows of two heads of batch 0 against an fp32 logsumexp of the scores.
TFLOP/s count 4 b h sq skv d flops, half under causal.

Writes OUT/<gpu>-attention.json (--variants: <gpu>-attention-variants.json;
<gpu>: h100, h200, the gfx arch on AMD):
  {"gpu","date","commit","torch","mode","method","clocks","cudnn" (the
   version this process runs, its directory, the daemon's LD_LIBRARY_PATH
   head and fingerprint: gpu_bench.Daemon runs it with this process's),
   "cases":[{"op","case","variant","params","status","tune_s",
             "trials_measured","trials","best_by_variant" (each variant's
             fastest timed point in the daemon's tuning: median_us,
             params, outcome),"flytuned_ms" (O only, as SDPA's
             inference call), "flytuned_lse_ms" (O and LSE),
             "peers":{NAME: ms},
             "unsupported":{NAME: msg},"gflop","tflops":{NAME: TF/s},
             "x_vs_peer":{NAME: peer_ms / ours},"faster_peer",
             "x_vs_faster","check","variants"?,"graph_ms":{NAME: ms},
             "graph_peer","graph_x_vs_peer"}],
   "summary":{"geomean_x_vs_faster","min_x_vs_faster",
              "geomean_x_vs":{NAME: ...},"tune_s_max","checks_ok",
              "graph_below_0_95","graph"}}
usage: python3 bench/attention_bench.py [--build DIR] [--cases FILE]
       [--out DIR] [--sets primary] [--only 0,3] [--variants]
       [--batch-div N] [--reps N]
"""
import argparse
import ctypes
import json
import math
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import gpu_bench  # noqa: E402
from mqa_bench import clocks  # noqa: E402

WS_BYTES = 32 << 20  # attn_fa2_split's workspace (ATTN_WS_BYTES)


def backends():
    """{name: SDPBackend} of the backends this PyTorch has."""
    from torch.nn.attention import SDPBackend
    out = {}
    for name, attr in (("sdpa_cudnn", "CUDNN_ATTENTION"),
                       ("sdpa_flash", "FLASH_ATTENTION"),
                       ("sdpa_efficient", "EFFICIENT_ATTENTION")):
        if hasattr(SDPBackend, attr):
            out[name] = getattr(SDPBackend, attr)
    return out


def sdpa_fn(be, qt, kt, vt, causal, gqa):
    from torch.nn.attention import sdpa_kernel

    def fn():
        with sdpa_kernel([be]):
            if gqa:
                return F.scaled_dot_product_attention(
                    qt, kt, vt, is_causal=causal, enable_gqa=True)
            return F.scaled_dot_product_attention(qt, kt, vt,
                                                  is_causal=causal)
    return fn


def check_o(out, ref):
    o, r = out.float(), ref.float()
    err = (o - r).abs()
    bad = int((err > r.abs() / 32 + 8e-3).sum().item())
    nan = int(torch.isnan(o).sum().item())
    return {"ok": bad == 0 and nan == 0, "bad": bad, "nan": nan,
            "max_err": err.max().item(), "max_ref": r.abs().max().item()}


def check_lse(lse, q, k, scale, causal, hq, hkv):
    """Our LSE on 256 rows (the last ones: causal rows see most keys) of
    heads 0 and hq - 1 of batch 0 against fp32 logsumexp."""
    s = q.shape[1]
    rows = torch.arange(max(0, s - 256), s, device="cuda")
    worst = 0.0
    for h in (0, hq - 1):
        hk = h // (hq // hkv)
        sc = (q[0, rows, h].float() @ k[0, :, hk].float().t()) * scale
        if causal:
            j = torch.arange(k.shape[1], device="cuda")
            sc = sc.masked_fill(j[None, :] > rows[:, None] +
                                (k.shape[1] - s), float("-inf"))
        ref = torch.logsumexp(sc, dim=1)
        got = lse[0, h, rows]
        e = ((got - ref).abs() / ref.abs().clamp(min=1.0)).max().item()
        worst = max(worst, e if e == e else float("inf"))
    return {"ok": worst <= 1e-3, "max_rel_err": worst}


def flops(c, b):
    f = 4.0 * b * c["heads"] * c["seq"] * c["seq"] * c["head_dim"]
    return f * (0.5 if c["causal"] else 1.0)


def our_fn(kern, dec, p, q, k, v, o, lse, ws):
    def fn():
        kern.attention(dec, q, k, v, o, lse=lse, workspace=ws, problem=p)
    return fn


def sweep_variants(kern, p, mk):
    """{variant: (ms, decision dict)}: each candidate quickly, each
    variant's best 2 again (the reference left out)."""
    from flyclient import Decision
    cand = (Decision * 512)()
    lib = kern.lib
    lib.flyk_gpu_candidates.argtypes = [ctypes.POINTER(type(p)),
                                        ctypes.POINTER(Decision),
                                        ctypes.c_int]
    lib.flyk_gpu_candidates.restype = ctypes.c_int
    n = lib.flyk_gpu_candidates(ctypes.byref(p), cand, 512)
    if n <= 0:
        raise RuntimeError("no candidates (%d)" % n)
    per = {}
    for i in range(n):
        d = {"variant": cand[i].variant.decode(),
             "params": [cand[i].params[j] for j in range(cand[i].nparams)]}
        if d["variant"].endswith("_ref"):
            continue
        try:
            ms = gpu_bench.bench(mk(d), warmup=1, reps=6, budget_ms=60)
        except Exception as e:
            print("  %s %s: %r" % (d["variant"], d["params"], e), flush=True)
            continue
        per.setdefault(d["variant"], []).append((ms, d))
    best = {}
    for v, pts in per.items():
        pts.sort(key=lambda x: x[0])
        again = [(gpu_bench.bench(mk(d), warmup=2, reps=15, budget_ms=150),
                  d) for _, d in pts[:2]]
        best[v] = min(again, key=lambda x: x[0])
    return best


def one_case(args, kern, daemon, idx, c):
    b = max(1, c["batch"] // args.batch_div)
    s, hq, hkv, dd, causal = (c["seq"], c["heads"], c["kv_heads"],
                              c["head_dim"], c["causal"])
    gflop = flops(c, b) / 1e9
    g = torch.Generator(device="cuda")
    g.manual_seed(2000 + idx)
    q = (torch.rand((b, s, hq, dd), device="cuda", generator=g) * 4 - 2) \
        .to(torch.bfloat16)
    k = (torch.rand((b, s, hkv, dd), device="cuda", generator=g) * 2 - 1) \
        .to(torch.bfloat16)
    v = (torch.rand((b, s, hkv, dd), device="cuda", generator=g) * 2 - 1) \
        .to(torch.bfloat16)
    o = torch.empty_like(q)
    lse = torch.empty((b, hq, s), device="cuda", dtype=torch.float32)
    ws = torch.empty(WS_BYTES, dtype=torch.uint8, device="cuda")
    scale = 1.0 / math.sqrt(dd)
    p = kern.attention_problem(b, s, s, hq, hkv, dd, "bf16", causal)

    def mk(d):
        return our_fn(kern, d, p, q, k, v, o, lse, ws)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    fns, unsupported, ref = {}, {}, None
    for name, be in backends().items():
        fn = sdpa_fn(be, qt, kt, vt, causal, hkv != hq)
        try:
            out = fn()
            torch.cuda.synchronize()
        except Exception as e:
            unsupported[name] = str(e).splitlines()[0][:300] if str(e) \
                else repr(e)
            continue
        fns[name] = fn
        if ref is None:
            ref = out.transpose(1, 2)
    variants = None
    if daemon is not None:
        t0 = time.time()
        dec = daemon.client.decide_wait(
            "attention", "bf16", {"b": b, "sq": s, "skv": s, "hq": hq,
                                  "hkv": hkv, "d": dd},
            flags=("causal",) if causal else (), timeout_ms=120000)
        tune_s = time.time() - t0
        tc = gpu_bench.trial_counts(args.build, daemon, dec["key"])
        measured, total = tc.get("ok"), tc.get("total", tc.get("error"))
        best_by_variant = tc.get("best_by_variant")
        status = dec["status"]
    else:
        t0 = time.time()
        best = sweep_variants(kern, p, mk)
        tune_s = time.time() - t0
        if not best:
            raise RuntimeError("no variant ran")
        dec = min(best.values(), key=lambda x: x[0])[1]
        measured, total, status = None, None, "sweep"
        best_by_variant = None
        variants = {vn: {"params": d["params"]} for vn, (_, d) in
                    best.items()}
    o.fill_(float("nan"))
    lse.fill_(float("nan"))
    mk(dec)()
    torch.cuda.synchronize()
    chk = {"o": check_o(o, ref) if ref is not None else None,
           "lse": check_lse(lse, q, k, scale, causal, hq, hkv)}
    # SDPA's inference path returns O alone: ours is timed the same way
    # (no LSE asked for, the engine's common call), checked again so; the
    # call with the LSE is timed beside it (flytuned_lse_ms).
    nolse = our_fn(kern, dec, p, q, k, v, o, None, ws)
    o.fill_(float("nan"))
    nolse()
    torch.cuda.synchronize()
    chk["o_no_lse"] = check_o(o, ref) if ref is not None else None
    chk["ok"] = (chk["o"] is None or chk["o"]["ok"]) and chk["lse"]["ok"] \
        and (chk["o_no_lse"] is None or chk["o_no_lse"]["ok"])
    ours = {"flytuned": nolse, "flytuned_lse": mk(dec)}
    if variants:
        for vn, (_, d) in best.items():
            ours[vn] = mk(d)
    ms = gpu_bench.bench_side_by_side(dict(ours, **fns), warmup=2,
                                      reps=args.reps, budget_ms=400)
    gms, gfail = gpu_bench.bench_graph_side_by_side(
        dict(ours, **fns), must=tuple(ours), budget_ms=400)
    peers = {n: ms[n] for n in fns}
    if variants:
        for vn in variants:
            variants[vn]["ms"] = ms[vn]
            variants[vn]["tflops"] = gflop / ms[vn]
    r = {"op": "attention", "case": dict(c, batch=b, index=idx),
         "variant": dec["variant"], "params": dec["params"],
         "status": status, "tune_s": tune_s,
         "trials_measured": measured, "trials": total,
         "best_by_variant": best_by_variant,
         "flytuned_ms": ms["flytuned"],
         "flytuned_lse_ms": ms["flytuned_lse"], "peers": peers,
         "unsupported": unsupported, "gflop": gflop,
         "tflops": dict({"flytuned": gflop / ms["flytuned"]},
                        **{n: gflop / peers[n] for n in peers}),
         "x_vs_peer": {n: peers[n] / ms["flytuned"] for n in peers},
         "check": chk}
    if peers:
        fp = min(peers, key=peers.get)
        r["faster_peer"], r["x_vs_faster"] = fp, peers[fp] / ms["flytuned"]
    r.update(gpu_bench.graph_fields(gms, gfail, "flytuned", list(fns)))
    if variants:
        r["variants"] = variants
    print("%2d b%-3d s%-6d h%-3d/%-3d d%-4d %-6s ours %-15s %-16s %7.3f ms "
          "(%4.0f TF/s)  %s  x%.3f vs %s  graph x%.3f  tune %.2fs  ok=%s%s" %
          (idx, b, s, hq, hkv, dd, "causal" if causal else "", dec["variant"],
           dec["params"], ms["flytuned"], gflop / ms["flytuned"],
           " ".join("%s %.3f" % (n, peers[n]) for n in peers),
           r.get("x_vs_faster", float("nan")), r.get("faster_peer"),
           r.get("graph_x_vs_peer", float("nan")), tune_s, chk["ok"],
           ("  " + " ".join("%s %.0fTF/s" % (vn, x["tflops"]) for vn, x in
                            variants.items())) if variants else ""),
          flush=True)
    del q, k, v, o, lse, ws, qt, kt, vt, ref
    torch.cuda.empty_cache()
    return r


def gmean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def summarize(res):
    ok = [r for r in res if "x_vs_faster" in r]
    if not ok:
        return {}
    x = [r["x_vs_faster"] for r in ok]
    names = sorted({n for r in ok for n in r["x_vs_peer"]})
    out = {"cases": len(ok), "geomean_x_vs_faster": gmean(x),
           "min_x_vs_faster": min(x),
           "geomean_x_vs": {n: gmean([r["x_vs_peer"][n] for r in ok
                                      if n in r["x_vs_peer"]])
                            for n in names},
           "tune_s_max": max(r["tune_s"] or 0 for r in ok),
           "checks_ok": all(r["check"]["ok"] for r in ok),
           "graph_below_0_95": sum(1 for r in ok if
                                   r.get("graph_x_vs_peer", 1) < 0.95),
           "graph": gpu_bench.graph_summary(ok, "attention")}
    var = {}
    for r in ok:
        fp = r["peers"][r["faster_peer"]]
        for vn, vd in r.get("variants", {}).items():
            var.setdefault(vn, []).append(fp / vd["ms"])
    if var:
        out["geomean_x_vs_faster_by_variant"] = {vn: gmean(v) for vn, v in
                                                 var.items()}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cases", default=os.path.join(ROOT, "..", "shared",
                                                    "bench", "cases.json"))
    ap.add_argument("--out", default=os.environ.get(
        "OUT", os.path.join(ROOT, "bench", "results")))
    ap.add_argument("--sets", default="primary")
    ap.add_argument("--only", default="", help="case indices, e.g. 0,3")
    ap.add_argument("--variants", "--standalone", dest="variants",
                    action="store_true",
                    help="no daemon: time each variant's best point")
    ap.add_argument("--batch-div", type=int, default=1,
                    help="divide every case's batch (a quick look)")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    # A stage time limit (timeout's SIGTERM) still writes what was measured:
    # SystemExit unwinds through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not os.path.exists(args.cases):
        args.cases = os.path.join(ROOT, ".devdeps", "bench", "cases.json")
    allc = json.load(open(args.cases))["attention_fwd_bf16"]
    import flyclient.kernels as fk
    kern = fk.Kernels(gpu_bench.gpu_vendor.kernels_lib(args.build))
    head = {"gpu": torch.cuda.get_device_name(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": gpu_bench.commit(), "torch": torch.__version__,
            "mode": "variants sweep" if args.variants else "daemon",
            "batch_div": args.batch_div,
            "method": "CUDA events per call, L2 cleaned by reading 512 MiB "
                      "before each rep, median ms, reps interleaved",
            "clocks": {"before": clocks()}}
    daemon = None if args.variants else gpu_bench.Daemon(args.build)
    ver, where = gpu_bench.process_cudnn()
    head["cudnn"] = {"process": ver, "process_dir": where,
                     "daemon_dir": daemon.cudnn_dir if daemon else None,
                     "daemon_fingerprint": daemon.fingerprint(args.build)
                     if daemon else None}
    only = [int(x) for x in args.only.split(",")] if args.only else None
    res = []
    try:
        for st in args.sets.split(","):
            for i, c in enumerate(allc.get(st, [])):
                if only is not None and i not in only:
                    continue
                try:
                    r = one_case(args, kern, daemon, i, c)
                    r["set"] = st
                    res.append(r)
                except Exception as e:
                    print("case %s %d: failed: %r" % (st, i, e), flush=True)
                    res.append({"op": "attention", "set": st,
                                "case": dict(c, index=i), "error": repr(e)})
                    torch.cuda.empty_cache()
    finally:
        if daemon is not None:
            daemon.stop()
        head["clocks"]["after"] = clocks()
        os.makedirs(args.out, exist_ok=True)
        name = "attention%s" % ("-variants" if args.variants else "")
        with open(gpu_bench.gpu_vendor.result_path(args.out, name),
                  "w") as f:
            json.dump(dict(head, cases=res, summary=summarize(res)), f,
                      indent=1)
        if daemon is not None:
            import shutil
            shutil.copy(daemon.log.name, os.path.join(args.out,
                                                      "flytuned-attn.log"))
    sm = summarize(res)
    if sm:
        print("attention: geomean x%.3f vs the faster SDPA backend (min "
              "x%.3f) over %d cases; vs each: %s; tune_s max %.2f; checks "
              "ok: %s" % (sm["geomean_x_vs_faster"], sm["min_x_vs_faster"],
                          sm["cases"], " ".join(
                              "%s x%.3f" % (n, v) for n, v in
                              sm["geomean_x_vs"].items()),
                          sm["tune_s_max"], sm["checks_ok"]))
        print(sm["graph"])
        for vn, v in sm.get("geomean_x_vs_faster_by_variant", {}).items():
            print("  %s alone: geomean x%.3f vs the faster backend" % (vn, v))
    for r in res:
        if "error" in r:
            print("FAILED: case %s: %s" % (r["case"], r["error"]))


if __name__ == "__main__":
    main()
