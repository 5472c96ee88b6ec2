#!/usr/bin/env python3
"""peer_kernels.py -- which kernels the peers launch, a diagnostic.

For the GEMM and grouped GEMM shapes given (default: those where
flytuned trails its peers), runs torch.matmul (ATen: cuBLAS) and
torch._grouped_mm (CUTLASS) under torch.profiler and prints each CUDA
kernel's name (cuBLAS's and CUTLASS's names carry the tile, the cluster
and the schedule) and its median device time; with --inductor, compiles
the GEMM under max-autotune (ATEN,TRITON) and prints Inductor's autotune
table (the Triton configurations it weighed and the one it took).
Times here are the profiler's, with no L2 cleaning: for the names, not
for ratios (gemm_bench.py times the peers).

usage: python3 bench/peer_kernels.py [--gemm M,N,K ...]
       [--grouped G,M,N,K ...] [--inductor] [--reps N]
"""
import argparse
import collections
import statistics
import sys

import torch

GEMMS = ["4096,4096,4096", "4096,4096,8192", "8192,8192,8192",
         "128,4096,4096", "256,4096,4096", "512,4096,4096",
         "4096,256,4096"]
GROUPED = ["8,4096,4096,4096", "2,4096,4096,4096", "8,8192,8192,8192",
           "128,32768,4096,1536"]


def kernels(fn, reps):
    """{kernel name: [device us per launch]} of @p fn run @p reps times."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out = collections.defaultdict(list)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out[e.name].append(e.device_time_total)
    return out


def show(title, ks):
    print("== " + title)
    for name, ts in sorted(ks.items(), key=lambda kv: -sum(kv[1])):
        print("   %8.1f us x%-3d %s" % (statistics.median(ts), len(ts),
                                        name))
    sys.stdout.flush()


def dims(s, n):
    v = [int(x) for x in s.split(",")]
    if len(v) != n:
        raise SystemExit("peer_kernels: %r: want %d numbers" % (s, n))
    return v


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gemm", nargs="*", default=GEMMS)
    ap.add_argument("--grouped", nargs="*", default=GROUPED)
    ap.add_argument("--inductor", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    dev = "cuda"
    bf = torch.bfloat16
    for s in args.gemm:
        m, n, k = dims(s, 3)
        a = torch.randn(m, k, device=dev, dtype=bf)
        b = torch.randn(n, k, device=dev, dtype=bf)
        show("matmul NT m%d n%d k%d" % (m, n, k),
             kernels(lambda: torch.matmul(a, b.t()), args.reps))
        if args.inductor:
            import torch._inductor.config as ic
            ic.max_autotune_gemm_backends = "ATEN,TRITON"
            torch._dynamo.reset()
            cf = torch.compile(lambda x, y: torch.matmul(x, y.t()),
                               mode="max-autotune-no-cudagraphs")
            cf(a, b)
            show("inductor NT m%d n%d k%d" % (m, n, k),
                 kernels(lambda: cf(a, b), args.reps))
    for s in args.grouped:
        g, m, n, k = dims(s, 4)
        a = torch.randn(m, k, device=dev, dtype=bf)
        w = torch.randn(g, n, k, device=dev, dtype=bf)
        offs = torch.arange(1, g + 1, device=dev,
                            dtype=torch.int32) * (m // g)
        show("_grouped_mm g%d m%d n%d k%d" % (g, m, n, k),
             kernels(lambda: torch._grouped_mm(a, w.transpose(-2, -1),
                                               offs=offs), args.reps))


if __name__ == "__main__":
    main()
