#!/usr/bin/env python3
"""engine_loop.py -- a serving engine's loop on flytuned.torch, in
miniature: a small decoder-ish block (RMSNorm, linear, SiLU-mul, linear,
TopK over the logits), flytuned switched on in one line, prepare() on the
decode shapes (record, tune, wait), one CUDA graph per batch size
captured, then decode steps replayed.

    FLYTUNED_SOCKET=/run/flytuned/gpu0.sock PYTHONPATH=client/python \\
        python3 examples/engine_loop.py [--steps 100]

(from a tree built elsewhere than build/: FLYCLIENT_LIB, FLYK_LIB and
FLYCLIENT_INCLUDE name build/gpu's libflyclient.so,
libflykernels_cuda.so and include/)

Without torch it says so and exits 0; without a daemon the ops run
torch's own (one warning) and the loop still runs.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "client", "python"))
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP engine_loop: PyTorch is not installed")
    sys.exit(0)


class Block(torch.nn.Module):
    def __init__(self, hidden=1024, inter=2816, vocab=4096):
        super().__init__()
        dt = torch.bfloat16
        self.norm = torch.nn.RMSNorm(hidden, eps=1e-6, dtype=dt)
        self.up = torch.nn.Linear(hidden, 2 * inter, bias=False, dtype=dt)
        self.down = torch.nn.Linear(inter, hidden, bias=False, dtype=dt)
        self.head = torch.nn.Linear(hidden, vocab, bias=False, dtype=dt)

    def forward(self, x):
        g, u = self.up(self.norm(x)).chunk(2, dim=-1)
        h = x + self.down(F.silu(g) * u)
        return torch.topk(self.head(h).float(), 8)   # (values, indices)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batches", default="1,8,64")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP engine_loop: no CUDA device")
        return 0
    import flytuned.torch as ft
    print("flytuned.torch backend:", *ft.backend())
    ft.enable()                                        # the one line
    model = Block().cuda().eval()
    batches = [int(b) for b in args.batches.split(",")]
    graphs = {}
    with torch.no_grad():
        for b in batches:                              # prepare: tune
            ft.prepare(model, (torch.randn(b, 1024, device="cuda",
                                           dtype=torch.bfloat16),))
        for b in batches:                              # capture
            x = torch.randn(b, 1024, device="cuda", dtype=torch.bfloat16)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                model(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = model(x)
            graphs[b] = (g, x, out)
        for b in batches:                              # replay
            g, x, out = graphs[b]
            x.copy_(torch.randn_like(x))
            ref = model(x)
            g.replay()
            torch.cuda.synchronize()
            same = torch.equal(ref[0], out[0])
            t0 = time.time()
            for _ in range(args.steps):
                g.replay()
            torch.cuda.synchronize()
            print("batch %d: %.1f us/step replayed, replay == eager: %s" %
                  (b, (time.time() - t0) * 1e6 / args.steps, same))
    print("stats:", ft.stats())
    ft.disable()
    return 0


if __name__ == "__main__":
    sys.exit(main())
