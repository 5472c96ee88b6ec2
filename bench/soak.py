#!/usr/bin/env python3
"""soak.py -- one flytuned under a mixed load for a long time, watched for
growth (issue 21 item 7, RELIABILITY.md L10).

Starts flytuned on the CPU backend in a temp state dir and runs CLIENTS
processes (default 50), each with its own libflyclient handle, for
SECONDS (default 3600).  Each process loops over a random mix:

  decide      (~95%) fly_decide of a key from a shared pool of tuned
              rmsnorm keys, timed per call (time.perf_counter_ns around
              the one call: the Python cost is in it, the same in every
              interval)
  tune        (~3%)  fly_decide_wait of a new key (a fresh rmsnorm shape:
              one benchmark each, the queue and the worker kept busy)
  import      (~1%)  flytune-ctl import of a small export file (a fresh
              key each time)
  forget      (~1%, and whenever the process holds over 32 keys of its
              own)  flytune-ctl forget of a key that process tuned or
              imported: the daemon's state stays bounded

Every INTERVAL seconds (default 60) the parent samples the daemon's RSS
(VmRSS), open fds (/proc/PID/fd) and mappings (/proc/PID/maps lines) and
the interval's decide latencies (p50, p99, count) from every process.

Writes OUT/soak.json ({"machine","commit","clients","seconds","intervals":
[{"t","rss_kib","fds","maps","decides","p50_us","p99_us","tunes",
"imports","forgets","errors"}],"verdict"}) and prints a table.  Verdict
(from the second interval on: the first holds the start-up's growth):
RSS, fds and mappings flat (the last within 10% / +8 / +8 of the second's
-- the shm table's generations and the process caches may grow by steps),
p99 flat (the last interval's within 2x of the second's), 0 errors, the
daemon alive at the end.

    GPU=none make && python3 bench/soak.py --seconds 3600 --out OUT
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def nfds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def nmaps(pid):
    with open("/proc/%d/maps" % pid) as f:
        return sum(1 for _ in f)


def pct(v, q):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def export_doc(key, ident, median):
    """An export file of one result for @p key: this daemon's device and
    library, the variant and point one of the pool's keys tuned to."""
    return {"format": "flytuned-export", "version": 1,
            "libver": ident["libver"],
            "device": {"backend": "cpu", "fingerprint": ident["fp"],
                       "id": ident["id"]},
            "results": [{"key": key, "device": ident["id"],
                         "libver": ident["libver"],
                         "variant": ident["variant"],
                         "params": ident["params"],
                         "median_us": median, "mad_us": 0.0, "tune_s": 0.0,
                         "tuned_at": int(time.time())}]}


def worker(idx, args, sock, ctl, pool, ident, q, stop):
    import flyclient
    rnd = random.Random(idx)
    c = flyclient.Client(sock, timeout_ms=50)
    env = dict(os.environ, FLYTUNED_SOCKET=sock)
    lat, n = [], {"tunes": 0, "imports": 0, "forgets": 0, "errors": 0}
    mine, seq = [], 0
    tmp = tempfile.mkdtemp(prefix="soak-%d-" % idx)
    last = time.time()
    while not stop.is_set():
        # a process keeps at most 32 keys of its own: the daemon's state
        # stays bounded, so its RSS may be expected flat
        r = 1.0 if len(mine) > 32 else rnd.random()
        try:
            if r < 0.95:
                m, k = pool[rnd.randrange(len(pool))]
                t0 = time.perf_counter_ns()
                c.decide("rmsnorm", "fp32", {"m": m, "n": k})
                lat.append((time.perf_counter_ns() - t0) / 1000.0)
            elif r < 0.98:
                seq += 1
                m, k = 8 + idx, 4096 + 64 * seq
                d = c.decide_wait("rmsnorm", "fp32", {"m": m, "n": k},
                                  timeout_ms=60000)
                n["tunes"] += 1
                if d["status"] != "tuned":
                    n["errors"] += 1
                else:
                    mine.append("rmsnorm/fp32/m=%d,n=%d" % (m, k))
            elif r < 0.99 or (r < 1.0 and not mine):
                seq += 1
                key = "rmsnorm/fp32/m=%d,n=%d" % (1000 + idx, 64 * seq)
                f = os.path.join(tmp, "imp.json")
                with open(f, "w") as fh:
                    json.dump(export_doc(key, ident, 1.0 + rnd.random()),
                              fh)
                p = subprocess.run([ctl, "import", f], env=env,
                                   capture_output=True, timeout=60)
                n["imports"] += 1
                if p.returncode != 0:
                    n["errors"] += 1
                else:
                    mine.append(key)
            else:
                key = mine.pop(rnd.randrange(len(mine)))
                p = subprocess.run([ctl, "forget", key], env=env,
                                   capture_output=True, timeout=60)
                n["forgets"] += 1
                if p.returncode != 0:
                    n["errors"] += 1
        except Exception:
            n["errors"] += 1
        if time.time() - last >= 1.0:
            q.put((idx, lat, dict(n)))
            lat, last = [], time.time()
            n = {k: 0 for k in n}
    q.put((idx, lat, dict(n)))
    c.close()
    shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--interval", type=int, default=60)
    ap.add_argument("--keys", type=int, default=64,
                    help="tuned keys in the decide pool")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "soak"))
    args = ap.parse_args(argv)
    os.environ.setdefault("FLYCLIENT_LIB",
                          os.path.join(args.build, "libflyclient.so"))
    import flyclient
    d = tempfile.mkdtemp(prefix="flysoak-")
    conf = os.path.join(d, "flytuned.conf")
    with open(conf, "w") as f:
        json.dump({"backend": "cpu", "max_clients": 4 * args.clients + 64},
                  f)
    log = open(os.path.join(d, "flytuned.log"), "w")
    daemon = subprocess.Popen(
        [os.path.join(args.build, "flytuned"), "--foreground",
         "--state-dir", d, "--config", conf],
        stdout=log, stderr=subprocess.STDOUT)
    sock = os.path.join(d, "gpu0.sock")
    for _ in range(300):
        if os.path.exists(sock) or daemon.poll() is not None:
            break
        time.sleep(0.1)
    ctl = os.path.join(args.build, "flytune-ctl")
    res = {"machine": os.uname().nodename, "cpus": os.cpu_count(),
           "clients": args.clients, "seconds": args.seconds,
           "method": "fly_decide timed per call with perf_counter_ns "
                     "(Python's call cost included); daemon RSS, fds, "
                     "maps sampled each interval",
           "intervals": []}
    try:
        import gpu_bench
        res["commit"] = gpu_bench.commit()
    except Exception:
        res["commit"] = None
    try:
        c = flyclient.Client(sock)
        pool = [(1 + (i % 16) * 8, 256 * (1 + i // 16))
                for i in range(args.keys)]
        for m, k in pool:
            c.decide_wait("rmsnorm", "fp32", {"m": m, "n": k},
                          timeout_ms=120000)
        st = json.loads(subprocess.run(
            [ctl, "--json", "--socket", sock, "status"],
            capture_output=True, check=True).stdout)
        dev = st["device"]
        lib = [w[4:] for w in dev["fingerprint"].split()
               if w.startswith("lib=")]
        d0 = c.decide("rmsnorm", "fp32", {"m": pool[0][0], "n": pool[0][1]})
        ident = {"id": dev["id"], "fp": dev["fingerprint"],
                 "libver": lib[0] if lib else "0.1.0",
                 "variant": d0["variant"], "params": list(d0["params"])}
        c.close()
        q, stop = mp.Queue(), mp.Event()
        procs = [mp.Process(target=worker,
                            args=(i, args, sock, ctl, pool, ident, q, stop))
                 for i in range(args.clients)]
        for p in procs:
            p.start()
        t0 = time.time()
        end = t0 + args.seconds
        while time.time() < end:
            iv_end = min(end, time.time() + args.interval)
            lat, n = [], {"tunes": 0, "imports": 0, "forgets": 0,
                          "errors": 0}
            while time.time() < iv_end:
                try:
                    _, l, k = q.get(timeout=0.5)
                except Exception:
                    continue
                lat.extend(l)
                for x in n:
                    n[x] += k[x]
            row = dict(t=round(time.time() - t0, 1),
                       rss_kib=rss_kib(daemon.pid), fds=nfds(daemon.pid),
                       maps=nmaps(daemon.pid), decides=len(lat),
                       p50_us=pct(lat, 0.5), p99_us=pct(lat, 0.99), **n)
            res["intervals"].append(row)
            print(json.dumps(row), flush=True)
        stop.set()
        for p in procs:
            p.join(60)
        alive = daemon.poll() is None
    finally:
        if daemon.poll() is None:
            daemon.terminate()
            daemon.wait(30)
        log.close()
    iv = res["intervals"]
    v = {"daemon_alive_at_end": alive,
         "errors": sum(r["errors"] for r in iv)}
    if len(iv) >= 3:
        a, b = iv[1], iv[-1]
        v["rss_flat"] = b["rss_kib"] <= a["rss_kib"] * 1.10
        v["fds_flat"] = b["fds"] <= a["fds"] + 8
        v["maps_flat"] = b["maps"] <= a["maps"] + 8
        v["p99_flat"] = (a["p99_us"] is not None and b["p99_us"] is not None
                         and b["p99_us"] <= 2 * a["p99_us"])
    v["ok"] = all(v.get(k, True) for k in ("rss_flat", "fds_flat",
                                           "maps_flat", "p99_flat")) and \
        alive and v["errors"] == 0 and len(iv) >= 3
    res["verdict"] = v
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "soak.json"), "w") as f:
        json.dump(res, f, indent=1)
    print("verdict:", json.dumps(v))
    shutil.rmtree(d, ignore_errors=True)
    return 0 if v["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
