#!/usr/bin/env python3
"""layers_bench.py -- whole transformer layers on the H200 (issue 17 item
4): a Llama-3-8B decoder layer and a Mixtral-style MoE layer, in every
mode, timed back to back as a server runs them.

Layers:
  llama  hidden 4096, 32 heads, 8 KV heads, head_dim 128, MLP 14336:
         RMSNorm, QKV, RoPE, SDPA (GQA; causal in prefill, over a KV cache
         of 4096 in decode), O, residual, RMSNorm, gate/up, SiLU-mul, down,
         residual
  moe    hidden 4096, 8 experts, top-2, expert MLP 14336: RMSNorm, router
         GEMM, TopK, softmax, tokens sorted by expert (no host sync),
         grouped GEMM gate/up, SiLU-mul, grouped GEMM down, weighted
         index_add, residual (the MoE block of a Mixtral layer)
Shapes: prefill2048, prefill8192 (tokens, batch 1); decode1, decode8,
  decode64 (batch, one token each, KV 4096).
Modes:
  eager            torch eager
  compile          torch.compile default
  max-autotune     torch.compile mode="max-autotune-no-cudagraphs"
  flytuned         flytuned.torch.enable() + prepare() + torch.compile
                   (the fused residual-add RMSNorm where the layer has one)
  reduce-overhead  decode only: torch.compile mode="reduce-overhead"
  flytuned-graph   decode only: flytuned eager, captured in a CUDA graph
  flytuned-compile-graph  decode only: the flytuned compiled layer
                   captured in a CUDA graph
Attention: SDPA in the torch modes; in the flytuned modes enable() routes
F.scaled_dot_product_attention to flytuned::attention (causal prefill,
decode over the cache; anything it does not take stays SDPA).
Timing: ITERS forwards back to back (no L2 flush), a CUDA event before
each, the median of the per-forward times; setup_s is each mode's time
before its first step (compile, autotune, or flytuned's prepare (tuning,
cold DB for the first shape that meets a key) + compile or capture).

  python3 bench/layers_bench.py [--build build/gpu] [--out DIR]
      [--layers llama,moe] [--shapes prefill2048,...] [--modes eager,...]
      [--budget-s 500] [--iters 50]

Max-autotune compiles are slow: run prefill and decode in separate calls
(--shapes).  Rows {"layer","shape","mode","ms","setup_s"} go to
OUT/<gpu>-layers.json after every row (a killed run keeps what it
measured), merged with the rows already there (--fresh drops them); a
table of every row is printed at the end.  Starts flytuned (backend cuda)
on a temp DB unless $FLYTUNED_SOCKET is set.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_vendor  # noqa: E402 (bench/: the NVIDIA/AMD differences)

ROOT = os.path.normpath(os.path.join(os.path.dirname(
    os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

SHAPES = {"prefill2048": ("prefill", 2048), "prefill8192": ("prefill", 8192),
          "decode1": ("decode", 1), "decode8": ("decode", 8),
          "decode64": ("decode", 64)}
MODES = ["eager", "compile", "max-autotune", "flytuned", "reduce-overhead",
         "flytuned-graph", "flytuned-compile-graph"]
DECODE_ONLY = {"reduce-overhead", "flytuned-graph", "flytuned-compile-graph"}
KV = 4096


def build_layers(torch):
    F = torch.nn.functional
    bf = torch.bfloat16

    def rope(x, cos, sin):
        x1, x2 = x[..., :64], x[..., 64:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Llama(torch.nn.Module):
        def __init__(self, fused=False):
            super().__init__()
            H, I = 4096, 14336
            self.fused = fused
            p = lambda *s: torch.nn.Parameter(  # noqa: E731
                torch.randn(*s, dtype=bf) * s[-1] ** -0.5,
                requires_grad=False)
            self.g1 = torch.nn.Parameter(torch.ones(H, dtype=bf),
                                         requires_grad=False)
            self.g2 = torch.nn.Parameter(torch.ones(H, dtype=bf),
                                         requires_grad=False)
            self.wqkv, self.wo = p(6144, H), p(H, H)
            self.wgu, self.wd = p(2 * I, H), p(H, I)
            # decode: the KV cache [B, 8, KV, 128], buffers (static
            # addresses, so reduce-overhead's graphs may write them)
            self.register_buffer("kc", None)
            self.register_buffer("vc", None)

        def cache(self, B):
            self.kc = torch.randn(B, 8, KV, 128, dtype=bf, device="cuda")
            self.vc = torch.randn(B, 8, KV, 128, dtype=bf, device="cuda")

        def forward(self, x, cos, sin):
            # x [B, T, 4096]
            B, T, _ = x.shape
            kc, vc = self.kc, self.vc
            h = F.rms_norm(x, [4096], self.g1, 1e-5)
            qkv = F.linear(h.view(B * T, 4096), self.wqkv).view(B, T, 48, 128)
            q = rope(qkv[:, :, :32].transpose(1, 2), cos, sin)
            k = rope(qkv[:, :, 32:40].transpose(1, 2), cos, sin)
            v = qkv[:, :, 40:].transpose(1, 2)
            if kc is None:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                   enable_gqa=True)
            else:
                kc[:, :, KV - 1:KV] = k        # this step's slot
                vc[:, :, KV - 1:KV] = v
                a = F.scaled_dot_product_attention(q, kc, vc,
                                                   enable_gqa=True)
            o = F.linear(a.transpose(1, 2).reshape(B * T, 4096), self.wo)
            x2 = x.view(B * T, 4096)
            if self.fused:     # o becomes x + o in place; h2 its norm
                h2 = torch.ops.flytuned.fused_add_rms_norm(x2, o, self.g2,
                                                           1e-5)
                r = o
            else:
                r = x2 + o
                h2 = F.rms_norm(r, [4096], self.g2, 1e-5)
            gu = F.linear(h2, self.wgu)
            g, u = gu[:, :14336], gu[:, 14336:]
            y = r + F.linear(F.silu(g) * u, self.wd)
            return y.view(B, T, 4096)

    class MoE(torch.nn.Module):
        def __init__(self, fused=False):
            super().__init__()
            H, I, E = 4096, 14336, 8
            self.g = torch.nn.Parameter(torch.ones(H, dtype=bf),
                                        requires_grad=False)
            self.wr = torch.nn.Parameter(torch.randn(E, H, dtype=bf) * .02,
                                         requires_grad=False)
            # expert weights stored [E, N, K]; passed as [E, K, N] views
            self.w1 = torch.nn.Parameter(
                torch.randn(E, 2 * I, H, dtype=bf) * H ** -0.5,
                requires_grad=False)
            self.w2 = torch.nn.Parameter(
                torch.randn(E, H, I, dtype=bf) * I ** -0.5,
                requires_grad=False)

        def cache(self, B):
            pass

        def forward(self, x, cos=None, sin=None):
            B, T, H = x.shape
            x2 = x.view(B * T, H)
            n = x2.shape[0]
            h = F.rms_norm(x2, [H], self.g, 1e-5)
            logits = F.linear(h, self.wr)
            w, ids = torch.topk(logits.float(), 2)
            w = torch.softmax(w, dim=-1)
            flat = ids.view(-1)
            order = torch.argsort(flat, stable=True)
            counts = torch.zeros(8, dtype=torch.int32, device=x.device)
            counts.index_add_(0, flat.to(torch.int32).long(),
                              torch.ones_like(flat, dtype=torch.int32))
            offs = torch.cumsum(counts, 0, dtype=torch.int32)
            tok = order // 2
            a = h[tok]
            gu = torch._grouped_mm(a, self.w1.transpose(-2, -1), offs=offs)
            g, u = gu[:, :14336], gu[:, 14336:]
            act = (F.silu(g) * u).contiguous()
            d = torch._grouped_mm(act, self.w2.transpose(-2, -1), offs=offs)
            d = d * w.view(-1)[order].unsqueeze(-1).to(d.dtype)
            out = torch.zeros_like(x2).index_add_(0, tok, d)
            return (x2 + out).view(B, T, H)

    return {"llama": Llama, "moe": MoE}


def inputs(torch, layer, shape):
    kind, n = SHAPES[shape]
    dev, bf = "cuda", torch.bfloat16
    B, T = (1, n) if kind == "prefill" else (n, 1)
    x = torch.randn(B, T, 4096, device=dev, dtype=bf)
    pos = torch.arange(T, device=dev) if kind == "prefill" else \
        torch.full((1,), KV - 1, device=dev)
    f = 1.0 / (500000 ** (torch.arange(0, 64, device=dev) / 64))
    ang = pos[:, None].float() * f[None, :]
    cos = torch.cat((ang.cos(), ang.cos()), -1).to(bf)
    sin = torch.cat((ang.sin(), ang.sin()), -1).to(bf)
    return (x, cos, sin)


def time_ms(torch, fn, iters):
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    for i in range(iters):
        ev[i].record()
        fn()
    ev[iters].record()
    torch.cuda.synchronize()
    return statistics.median(ev[i].elapsed_time(ev[i + 1])
                             for i in range(iters))


def graph_of(torch, fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def run_mode(torch, ft, Layer, layer, shape, mode, iters):
    """(ms, setup_s) of one layer, shape and mode."""
    torch._dynamo.reset()
    args = inputs(torch, layer, shape)
    flyt = mode.startswith("flytuned")
    model = Layer(fused=flyt).cuda().eval()
    if SHAPES[shape][0] == "decode":
        model.cache(args[0].shape[0])
    t0 = time.time()
    if flyt:
        ft.enable()
    try:
        with torch.no_grad():
            if flyt:
                ft.prepare(model, args, timeout_s=300, verbose=False)
            if mode == "eager" or mode == "flytuned-graph":
                fn = lambda: model(*args)  # noqa: E731
            elif mode in ("compile", "flytuned", "flytuned-compile-graph"):
                cm = torch.compile(model)
                fn = lambda: cm(*args)  # noqa: E731
            elif mode == "max-autotune":
                cm = torch.compile(model, mode="max-autotune-no-cudagraphs")
                fn = lambda: cm(*args)  # noqa: E731
            elif mode == "reduce-overhead":
                cm = torch.compile(model, mode="reduce-overhead")
                fn = lambda: cm(*args)  # noqa: E731
            fn()
            if mode in ("flytuned-graph", "flytuned-compile-graph"):
                fn = graph_of(torch, fn)
            fn()
            torch.cuda.synchronize()
            setup = time.time() - t0
            ms = time_ms(torch, fn, iters)
    finally:
        if flyt:
            ft.disable()
    del model
    return ms, setup


def commit():
    if os.environ.get("FLY_COMMIT"):
        return os.environ["FLY_COMMIT"]
    try:
        return subprocess.check_output(["git", "-C", ROOT, "rev-parse",
                                        "--short", "HEAD"],
                                       text=True).strip()
    except Exception:
        return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build",
                                                  "bench-results"))
    ap.add_argument("--layers", default="llama,moe")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--budget-s", type=float, default=500.0)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--fresh", action="store_true",
                    help="drop the rows already in OUT/<gpu>-layers.json")
    args = ap.parse_args()
    t_start = time.time()
    build = os.path.abspath(args.build)
    for var, f in (("FLYCLIENT_LIB", "libflyclient.so"),
                   ("FLYK_LIB", "libflykernels_%s.so" % gpu_vendor.backend()),
                   ("FLYCLIENT_INCLUDE", "include")):
        os.environ.setdefault(var, os.path.join(build, f))
    daemon = None
    if not os.environ.get("FLYTUNED_SOCKET"):
        d = tempfile.mkdtemp(prefix="flylayers.")
        conf = os.path.join(d, "flytuned.conf")
        with open(conf, "w") as f:
            f.write('{"backend":"%s","policy":"on-request"}\n'
                    % gpu_vendor.backend())
        log = open(os.path.join(d, "flytuned.log"), "w")
        daemon = subprocess.Popen(
            [os.path.join(build, "flytuned"), "--foreground", "--state-dir",
             d, "--config", conf], stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, FLYTUNED_KERNELS_DIR=build))
        os.environ["FLYTUNED_SOCKET"] = os.path.join(d, "gpu0.sock")
        for _ in range(300):
            if os.path.exists(os.environ["FLYTUNED_SOCKET"]):
                break
            time.sleep(0.1)
    import torch
    import flytuned.torch as ft
    print("flytuned.torch backend: %s %s" % ft.backend(), flush=True)
    layers = build_layers(torch)
    os.makedirs(args.out, exist_ok=True)
    path = gpu_vendor.result_path(args.out, "layers")
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "commit": commit(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "backend": ft.backend()[0],
           "method": "whole-layer forwards back to back (no L2 flush), "
                     "CUDA event before each, median ms; setup_s: time "
                     "before the first step", "rows": []}
    # Rows of earlier calls (other shapes or layers) are kept: a run that
    # is split over several calls ends with one file.
    if os.path.exists(path) and not args.fresh:
        try:
            with open(path) as f:
                doc["rows"] = json.load(f).get("rows", [])
        except (OSError, ValueError):
            pass
    skipped = []
    try:
        for layer in args.layers.split(","):
            for shape in args.shapes.split(","):
                for mode in args.modes.split(","):
                    if mode in DECODE_ONLY and not shape.startswith("decode"):
                        continue
                    if time.time() - t_start > args.budget_s:
                        skipped.append((layer, shape, mode))
                        continue
                    try:
                        ms, setup = run_mode(torch, ft, layers[layer], layer,
                                             shape, mode, args.iters)
                        row = {"layer": layer, "shape": shape, "mode": mode,
                               "ms": ms, "setup_s": setup}
                    except Exception as e:  # one mode's failure: a row
                        row = {"layer": layer, "shape": shape, "mode": mode,
                               "ms": None, "setup_s": None,
                               "error": str(e).splitlines()[0][:200]
                               if str(e) else type(e).__name__}
                    doc["rows"] = [r for r in doc["rows"] if
                                   (r["layer"], r["shape"], r["mode"]) !=
                                   (layer, shape, mode)] + [row]
                    print(json.dumps(row), flush=True)
                    with open(path, "w") as f:
                        json.dump(doc, f, indent=1)
                    torch.cuda.empty_cache()
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(10)
    for s in skipped:
        print("skipped (budget): %s %s %s" % s)
    table(doc["rows"])
    return 0


def table(rows):
    """Per layer and shape: each mode's ms, and flytuned's ratios."""
    by = {}
    for r in rows:
        by.setdefault((r["layer"], r["shape"]), {})[r["mode"]] = r
    print("%-6s %-12s %-24s %9s %9s" % ("layer", "shape", "mode", "ms",
                                         "setup_s"))
    for (layer, shape), ms in by.items():
        for mode, r in ms.items():
            print("%-6s %-12s %-24s %9s %9s %s" % (
                layer, shape, mode,
                "-" if r["ms"] is None else "%.3f" % r["ms"],
                "-" if r["setup_s"] is None else "%.1f" % r["setup_s"],
                r.get("error", "")))
        f, m = ms.get("flytuned"), ms.get("max-autotune")
        if f and m and f["ms"] and m["ms"]:
            print("   flytuned vs max-autotune: %.3fx, setup %.2fx" %
                  (m["ms"] / f["ms"], f["setup_s"] / m["setup_s"]))
        ro = ms.get("reduce-overhead")
        for k in ("flytuned-graph", "flytuned-compile-graph"):
            g = ms.get(k)
            if g and ro and g["ms"] and ro["ms"]:
                print("   %s vs reduce-overhead: %.3fx" %
                      (k, ro["ms"] / g["ms"]))


if __name__ == "__main__":
    sys.exit(main())
