#!/usr/bin/env python3
"""mqa_split_sim.py -- the numerics of an MQA-logits epilogue not built yet
(bench/README.md, "the linear-part split"), simulated on the host in pure
Python: no GPU, no torch, no numpy.

  sum_h w_h relu(x_h) = (sum_h w_h |x_h| + L) / 2,   x_h = q_h . kv,
  L = kv . q',  q' = sum_h w_h q_h

with q' scaled by a power of two into e4m3's range and split into PARTS
e4m3 values (each the rounding of what the ones before left), so that L
would come from the fp8 tensor cores as PARTS more B rows, and the
epilogue would need one FFMA with an |x| operand per accumulator.  Prints
the largest error over the sampled positions divided by the largest
|logit| -- the form of the Triton peer's check() (< 2e-3) and of the
tuner's -- for the peer's inputs (randn cast to e4m3) and for per-token
full-range inputs (each row scaled to an amax of 448 first, as a
quantizing indexer sends).  Products of e4m3 values are exact; sums are
rounded to fp32 where the kernel would round them.

  python3 bench/mqa_split_sim.py [--parts 1,2,3,4] [--rows 8] [--kv 40]
"""
import argparse
import bisect
import math
import random
import struct


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


# the non-negative e4m3fn values, ascending (0x7f/0xff are NaN)
POS = sorted({(1 + (b & 7) / 8) * 2.0 ** (((b >> 3) & 15) - 7)
              if (b >> 3) & 15 else (b & 7) * 2.0 ** -9
              for b in range(127)})


def e4m3(x):
    """x rounded to e4m3fn, to nearest, ties to even, saturating at 448."""
    a = abs(x)
    if a >= POS[-1]:
        r = POS[-1]
    else:
        i = bisect.bisect_left(POS, a)
        if POS[i] == a:
            r = a
        else:
            lo, hi = POS[i - 1], POS[i]
            if a - lo != hi - a:
                r = lo if a - lo < hi - a else hi
            else:
                r = lo if (i - 1) % 2 == 0 else hi
    return -r if x < 0 else r


def vec(rnd, n, full):
    v = [rnd.gauss(0, 1) for _ in range(n)]
    if full:
        a = max(abs(x) for x in v)
        v = [x * POS[-1] / a for x in v]
    return [e4m3(x) for x in v]


def run(full, parts, rows, nkv, h=64, d=128, seed=1):
    rnd = random.Random(seed)
    errs, big = [], 0.0
    for _ in range(rows):
        q = [vec(rnd, d, full) for _ in range(h)]
        w = [f32(rnd.gauss(0, 0.25)) for _ in range(h)]
        qp = [f32(sum(w[k] * q[k][i] for k in range(h))) for i in range(d)]
        mx = max(abs(x) for x in qp)
        sc = 2.0 ** (math.floor(math.log2(POS[-1] / mx)) if mx else 0)
        res, split = [x * sc for x in qp], []
        for _ in range(parts):
            p = [e4m3(x) for x in res]
            split.append(p)
            res = [f32(x - y) for x, y in zip(res, p)]
        for _ in range(nkv):
            kv = vec(rnd, d, full)
            x = [sum(q[k][i] * kv[i] for i in range(d)) for k in range(h)]
            exact = sum(w[k] * max(x[k], 0.0) for k in range(h))
            a = 0.0
            for k in range(h):
                a = f32(a + f32(w[k] * abs(x[k])))
            lin = 0.0
            for p in split:
                lin = f32(lin + f32(sum(kv[i] * p[i] for i in range(d))))
            got = f32((a + lin / sc) / 2)
            big = max(big, abs(exact))
            errs.append(abs(got - exact))
    return max(errs) / big, big


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="1,2,3,4")
    ap.add_argument("--rows", type=int, default=8,
                    help="query rows (64 heads each) a distribution")
    ap.add_argument("--kv", type=int, default=40, help="KV rows a query row")
    args = ap.parse_args(argv)
    for full in (False, True):
        for parts in [int(x) for x in args.parts.split(",")]:
            r, big = run(full, parts, args.rows, args.kv)
            print("%-10s parts %d: max error / max |logit| = %.2e "
                  "(max |logit| %.3g)" % ("full-range" if full else "peer",
                                          parts, r, big))


if __name__ == "__main__":
    main()
