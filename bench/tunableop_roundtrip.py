#!/usr/bin/env python3
"""tunableop_roundtrip.py -- flytuned and PyTorch TunableOp results files,
both ways, on the GPU machine (issue 20's interop check).

1. PyTorch writes a TunableOp file here (a tiny tuned matmul): its
   Validator lines are this machine's.
2. flytuned (GPU backend) tunes bf16 GEMM keys; `flytune-ctl export
   --format tunableop --validators <PyTorch's file>` writes its vendor
   winners as a TunableOp file.
3. A fresh PyTorch process with PYTORCH_TUNABLEOP_ENABLED=1 and
   PYTORCH_TUNABLEOP_TUNING=0 reads that file (torch.cuda.tunable.read_file)
   and runs the matmuls: get_results() must list flytuned's solutions.
4. The reverse: PyTorch's own H200 file (tests/fixtures/tunableop) goes
   through `flytune-ctl import --format tunableop`, which queues the keys;
   flytuned tunes and serves them (measured, never trusted).

Writes OUT/tunableop-roundtrip.json and prints a summary.
usage: python3 bench/tunableop_roundtrip.py [--build DIR] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpu_bench  # noqa: E402

SHAPES = [(8, 4096, 4096), (256, 4096, 4096), (4096, 4096, 4096)]

WRITE = r'''
import os, torch
torch.cuda.tunable.enable(True)
torch.cuda.tunable.tuning_enable(True)
torch.cuda.tunable.set_filename(os.environ["F"])
a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
(a @ a.t()).sum().item()
'''

READ = r'''
import json, os, torch
# PYTORCH_TUNABLEOP_FILENAME names flytuned's file: PyTorch loads it when
# a tunable op first runs (its GEMM ops register on first use, so an
# explicit read_file before any matmul finds no op to file results under)
torch.cuda.tunable.enable(True)
torch.cuda.tunable.tuning_enable(False)
out = []
for m, n, k in json.loads(os.environ["SHAPES"]):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = a @ b.t()
    ref = a.float() @ b.float().t()
    out.append(float((c.float() - ref).abs().max()))
torch.cuda.synchronize()
ok = torch.cuda.tunable.read_file(os.environ["F"])
print(json.dumps({"read_file": bool(ok), "max_err": out,
                  "results": [list(map(str, r))
                              for r in torch.cuda.tunable.get_results()],
                  "validators": [list(map(str, v)) for v in
                                 torch.cuda.tunable.get_validators()]}))
'''


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="tunableop-")
    res = {}
    pt_file = os.path.join(tmp, "pytorch.csv")
    subprocess.run([sys.executable, "-c", WRITE], check=True,
                   env=dict(os.environ, F=pt_file,
                            PYTORCH_TUNABLEOP_ENABLED="1"))
    res["pytorch_validators"] = [ln for ln in open(pt_file)
                                 if ln.startswith("Validator")]
    daemon = gpu_bench.Daemon(args.build)
    ctl = [os.path.join(args.build, "flytune-ctl"), "--socket", daemon.sock]
    try:
        winners = []
        for m, n, k in SHAPES:
            d = daemon.client.decide_wait("gemm", "bf16",
                                          {"m": m, "n": n, "k": k},
                                          layout="NT", timeout_ms=120000)
            winners.append({"key": d["key"], "variant": d["variant"],
                            "params": d["params"], "status": d["status"]})
        res["flytuned_winners"] = winners
        ours = os.path.join(tmp, "flytuned.csv")
        p = subprocess.run(ctl + ["export", "--format", "tunableop",
                                  "--validators", pt_file, ours],
                           capture_output=True, text=True)
        res["export"] = {"rc": p.returncode, "out": p.stdout + p.stderr,
                         "file": open(ours).read() if p.returncode == 0
                         else None}
        if p.returncode == 0:
            p2 = subprocess.run(
                [sys.executable, "-c", READ], capture_output=True, text=True,
                env=dict(os.environ, F=ours, SHAPES=json.dumps(SHAPES),
                         PYTORCH_TUNABLEOP_ENABLED="1",
                         PYTORCH_TUNABLEOP_TUNING="0",
                         PYTORCH_TUNABLEOP_FILENAME=ours))
            res["pytorch_read"] = (json.loads(p2.stdout.strip().splitlines()[-1])
                                   if p2.returncode == 0 else
                                   {"rc": p2.returncode,
                                    "err": p2.stderr[-2000:]})
        fixture = os.path.join(ROOT, "tests", "fixtures", "tunableop",
                               "tunableop_results_h200_torch2.11.csv")
        p3 = subprocess.run(ctl + ["import", "--format", "tunableop",
                                   fixture], capture_output=True, text=True)
        res["import"] = {"rc": p3.returncode, "out": p3.stdout + p3.stderr}
        served = []
        for m, n, k in SHAPES:
            for lay in ("NT", "NN"):
                d = daemon.client.decide_wait("gemm", "bf16",
                                              {"m": m, "n": n, "k": k},
                                              layout=lay, timeout_ms=120000)
                served.append({"key": d["key"], "status": d["status"],
                               "variant": d["variant"]})
        res["imported_then_served"] = served
    finally:
        daemon.stop()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tunableop-roundtrip.json"), "w") as f:
        json.dump(res, f, indent=1)
    pr = res.get("pytorch_read", {})
    print("export rc %s; PyTorch read_file %s, results %s, max_err %s" %
          (res["export"]["rc"], pr.get("read_file"),
           pr.get("results"), pr.get("max_err")))
    print("export file:\n%s" % res["export"]["file"])
    print("import: %s" % res["import"]["out"].strip())
    print("served: %s" % [(s["key"], s["status"], s["variant"])
                          for s in res["imported_then_served"]])


if __name__ == "__main__":
    main()
