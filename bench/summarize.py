#!/usr/bin/env python3
"""summarize.py -- the results files of gpu_bench.py / gemm_bench.py as
markdown tables, with every ratio recomputed from the medians they hold
and the issues' targets checked.

usage: python3 bench/summarize.py bench/results/h200-*.json

Per case: our median (us), each peer's, the ratio peer / ours for each
and for the faster peer, the graph-replay ratio (graph_x_vs_peer, where
the file has one), the variant the daemon chose and tune_s.  Then
per op and set: geometric means and the minimum of those ratios.  Cases
that failed in the run (an "error" entry) are listed, not hidden.
"""
import json
import math
import sys

TARGETS = {
    # op: (peer for the gmean (None: the faster), gmean >=, min >=)
    "rmsnorm": [("aten", 1.8, None), (None, 1.2, 0.97)],
    "topk": [(None, 6.0, 2.0)],
    "gemm": [(None, 1.10, 0.98)],
    "grouped_gemm": [("grouped_mm", 1.20, None)],
    "rmsnorm_residual": [("inductor", 1.10, None)],
    "attention": [(None, 1.0, 0.95)],
}


def peers_of(r):
    """The peers' medians (ms): a peer that could not run the case holds
    None, and some files keep notes beside them (the peer's variant)."""
    return {k: v for k, v in r.get("peers", {}).items()
            if isinstance(v, (int, float)) and v > 0}


def set_of(r):
    """The case's set; the results files without sets hold primary cases
    only (mqa_logits, scaled_gemm, attention)."""
    return r.get("set", "primary")


def gmean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def ratio(r, peer):
    ps = peers_of(r)
    if peer is None:
        return min(ps.values()) / r["flytuned_ms"] if ps else None
    return ps[peer] / r["flytuned_ms"] if peer in ps else None


def table(doc):
    cases = [r for r in doc["cases"] if "error" not in r]
    peers = sorted({p for r in cases for p in peers_of(r)})
    out = ["| set | case | ours us | " + " | ".join(p + " us" for p in peers) +
           " | " + " | ".join("x " + p for p in peers) +
           " | x faster | graph x | variant | tune s |",
           "|" + "---|" * (6 + 2 * len(peers) + 1)]
    for r in cases:
        us = r["flytuned_ms"] * 1e3
        pv = [peers_of(r).get(p) for p in peers]
        gx = r.get("graph_x_vs_peer")
        out.append("| %s | %s | %.1f | %s | %s | %.2f | %s | %s%s | %s |" % (
            set_of(r), r["case"], us,
            " | ".join("%.1f" % (v * 1e3) if v else "-" for v in pv),
            " | ".join("%.2f" % (v / r["flytuned_ms"]) if v else "-"
                       for v in pv),
            ratio(r, None) or float("nan"),
            "%.2f" % gx if gx is not None else "-", r["variant"],
            r.get("params", []),
            "%.2f" % r["tune_s"] if r.get("tune_s") is not None else "-"))
    for r in doc["cases"]:
        if "error" in r:
            out.append("| %s | %s | FAILED: %s |" % (set_of(r), r["case"],
                                                    r["error"]))
    return out


def verdicts(doc):
    lines = []
    cases = [r for r in doc["cases"] if "error" not in r]
    ops = sorted({r["op"] for r in cases})
    for op in ops:
        for s in ("primary", "serving"):
            rs = [r for r in cases if r["op"] == op and set_of(r) == s]
            if not rs:
                continue
            modes = sorted({r["case"].split()[-1] for r in rs
                            if op == "topk"}) or [None]
            for mode in modes:
                sub = [r for r in rs if mode is None or
                       r["case"].endswith(mode)]
                for peer, g_t, m_t in TARGETS.get(op, []):
                    v = [x for x in (ratio(r, peer) for r in sub)
                         if x is not None]
                    if not v:
                        continue
                    ok = ""
                    if s == "primary":
                        met = gmean(v) >= g_t and (m_t is None or
                                                   min(v) >= m_t)
                        ok = "  -> target %s" % ("met" if met else "NOT met")
                    prim = s == "primary"  # the targets are on primary
                    lines.append(
                        "%s %s%s (%d): gmean vs %s %.2fx%s, min %.2fx%s%s" % (
                            op, s, " " + mode if mode else "", len(v),
                            peer or "the faster peer", gmean(v),
                            " (target %.2f)" % g_t if prim else "", min(v),
                            " (target %.2f)" % m_t if m_t and prim else "",
                            ok))
        gx = [r["graph_x_vs_peer"] for r in cases if r["op"] == op and
              "graph_x_vs_peer" in r]
        if gx:
            lines.append("%s graph replay (%d): %d below 0.95x of the "
                         "faster peer (target 0), min %.2fx" %
                         (op, len(gx), sum(1 for x in gx if x < 0.95),
                          min(gx)))
        ts = [r["tune_s"] for r in cases if r["op"] == op and
              r.get("tune_s") is not None]
        if ts:
            lines.append("%s tune_s: max %.2f s, median %.2f s" %
                         (op, max(ts), sorted(ts)[len(ts) // 2]))
    bad = [r["case"] for r in cases
           if r["op"] in ("rmsnorm", "rmsnorm_residual", "topk") and
           not r["max_abs_err"] <= 0.05]
    bad += [r["case"] for r in cases if "max_abs_ref" in r and
            not r["max_abs_err"] <= r["max_abs_ref"] / 64 + 1e-3]
    lines.append("numerics: %s" % ("all agree with PyTorch" if not bad
                                   else "DISAGREE on " + ", ".join(bad)))
    return lines


def main(argv):
    for path in argv[1:]:
        doc = json.load(open(path))
        print("## %s (%s, commit %s, %s, copy %.0f GB/s)\n" % (
            path, doc.get("gpu"), doc.get("commit"), doc.get("date"),
            doc.get("copy_gbps", 0)))
        print("\n".join(table(doc)))
        print()
        print("\n".join(verdicts(doc)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
