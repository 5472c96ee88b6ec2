#!/usr/bin/env python3
"""fleet_bench.py -- the fleet (issue 24) on one machine: N daemons
(separate state dirs, CPU backend) on one throw-away PostgreSQL.

Measures:
  join_s       a new node's start until its shm table serves all ROWS fleet
               rows as tuned (`status` -> shm.count == ROWS); target <= 10 s
               for 100,000 rows
  propagate_s  for each of KEYS winners committed on node 0 (a real tune),
               the time until every other connected node serves it (`get`);
               target <= 1 s
  duplicates   benchmarks run beyond one per key when every node is asked
               to tune the same DUP keys at once (sum of jobs_done - DUP,
               and per key: fleet_measurements rows beyond one, each
               node's own measurement of a key being one row); target 0
               (single flight: one node takes the key's fleet advisory
               lock and tunes, the others wait for its winner).  The DUP
               keys are the CPU backend's cheapest to tune: rmsnorm in
               bf16 and fp16, m 8/16/32/64, n = 64 k for k = 1, 2, ...
               (small shapes first), with job_budget_s 0.02 on every node;
               each node is sent all of them, 256 at a time per node,
               round robin over the nodes, so all nodes ask at once

The fleet rows for the join are written straight into PostgreSQL with
fleet_push() (as other nodes would have), all valid for this machine's
CPU backend (the variant and params node 0 measured for a seed key,
replicated over canonical keys that it is feasible for).

Usage: bench/fleet_bench.py [--full] [--nodes N] [--rows R] [--keys K]
                            [--dup D]
Default (small): 4 nodes, 10,000 rows, 5 keys, 200 duplicate keys.
--full: 20 nodes, 100,000 rows, 20 keys, 10,000 duplicate keys.
Needs build/flytuned, build/flytune-ctl (make GPU=none) and PostgreSQL
(initdb, pg_ctl on PATH or in /usr/lib/postgresql/*/bin).
"""
import argparse
import glob
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("FLY_BUILD_DIR", "build")
SEED = "rmsnorm/fp32/m=8,n=64"


def pg_bin():
    for d in os.environ.get("PATH", "").split(":") + sorted(
            glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if d and os.access(os.path.join(d, "initdb"), os.X_OK) and \
                os.access(os.path.join(d, "pg_ctl"), os.X_OK):
            return d
    sys.exit("fleet_bench: no PostgreSQL (initdb, pg_ctl)")


class PG(object):
    def __init__(self):
        self.bin = pg_bin()
        self.dir = tempfile.mkdtemp(prefix="flybpg.")
        self.pre = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "nobody", "nogroup")
            self.pre = ["setpriv", "--reuid=nobody", "--regid=nogroup",
                        "--clear-groups"]
        log = open(os.path.join(self.dir, "pg_ctl.log"), "a")
        subprocess.check_call(self.pre + [
            self.bin + "/initdb", "-D", self.dir + "/data", "-U", "fleet",
            "-A", "trust", "--no-sync"], stdout=log, stderr=log)
        subprocess.check_call(self.pre + [
            self.bin + "/pg_ctl", "-D", self.dir + "/data", "-l",
            self.dir + "/server.log", "-w", "-o",
            "-k %s -c listen_addresses='' -c max_connections=200"
            % self.dir, "start"], stdout=log, stderr=log)
        self.conninfo = "host=%s user=fleet dbname=postgres" % self.dir

    def sql(self, q):
        return subprocess.check_output(
            ["psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1",
             self.conninfo, "-c", q]).decode().strip()

    def stop(self):
        subprocess.call(self.pre + [self.bin + "/pg_ctl", "-D",
                                    self.dir + "/data", "-m", "fast", "-w",
                                    "stop"], stdout=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)


class Node(object):
    def __init__(self, pg, i):
        self.dir = tempfile.mkdtemp(prefix="flybn%d." % i)
        os.chmod(self.dir, 0o700)
        self.sock = os.path.join(self.dir, "gpu0.sock")
        with open(os.path.join(self.dir, "c.conf"), "w") as f:
            json.dump({"backend": "cpu", "policy": "on-request",
                       "fleet_url": pg.conninfo, "fleet_retry_ms": 200,
                       "shm_capacity": 262144, "queue_cap": 100000,
                       "job_budget_s": 0.02}, f)
        self.t0 = time.time()
        self.proc = subprocess.Popen(
            [BUILD + "/flytuned", "--state-dir", self.dir, "--config",
             self.dir + "/c.conf"], stderr=open(self.dir + "/log", "w"))
        self.fd = None

    def req(self, obj):
        for _ in range(400):
            if self.fd is not None:
                break
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.sock)
                self.fd = s
            except OSError:
                time.sleep(0.025)
        b = json.dumps(obj).encode()
        self.fd.sendall(struct.pack("<I", len(b)) + b)
        hdr = self._read(4)
        return json.loads(self._read(struct.unpack("<I", hdr)[0]))

    def _read(self, n):
        buf = b""
        while len(buf) < n:
            c = self.fd.recv(n - len(buf))
            if not c:
                raise OSError("closed")
            buf += c
        return buf

    def status(self):
        return self.req({"req": "status"})

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def wait(pred, timeout=120.0, step=0.005):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return time.time() - t0
        time.sleep(step)
    return None


def commit():
    try:
        c = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"],
                                    stderr=subprocess.DEVNULL).decode()
        d = subprocess.call(["git", "diff", "--quiet", "HEAD"],
                            stderr=subprocess.DEVNULL)
        return c.strip() + ("-dirty" if d else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def dup_keys(n):
    """n distinct cheap keys: rmsnorm bf16/fp16, m 8..64, n = 64 k."""
    keys, k = [], 1
    while len(keys) < n:
        for dt in ("bf16", "fp16"):
            for m in (8, 16, 32, 64):
                keys.append("rmsnorm/%s/m=%d,n=%d" % (dt, m, 64 * k))
        k += 1
    return keys[:n]


def ask_all(ns, keys, chunk=256):
    """Every node sent a tune of every key (no wait), chunk by chunk,
    round robin; returns the answers that were not ok."""
    bad = []
    for i in range(0, len(keys), chunk):
        part = keys[i:i + chunk]
        for n in ns:
            n.fd.sendall(b"".join(
                struct.pack("<I", len(b)) + b for b in
                (json.dumps({"req": "tune", "key": k}).encode()
                 for k in part)))
        for n in ns:
            for _ in part:
                r = json.loads(n._read(struct.unpack("<I", n._read(4))[0]))
                if not r.get("ok"):
                    bad.append(r)
    return bad


def fleet_sum(ns, name):
    return sum(n.status()["fleet"].get(name, 0) for n in ns)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--rows", type=int)
    ap.add_argument("--keys", type=int)
    ap.add_argument("--dup", type=int)
    a = ap.parse_args()
    nodes = a.nodes or (20 if a.full else 4)
    rows = a.rows or (100000 if a.full else 10000)
    nkeys = a.keys or (20 if a.full else 5)
    ndup = a.dup or (10000 if a.full else 200)
    pg = PG()
    ns = []
    try:
        ns = [Node(pg, i) for i in range(nodes)]
        for n in ns:
            wait(lambda: n.status().get("fleet", {}).get("state")
                 == "connected")
        # Seed: node 0 tunes one key for real.
        r = ns[0].req({"req": "tune", "key": SEED, "wait": True,
                       "timeout_ms": 120000})
        st = ns[0].status()
        dev = st["device"]["id"]
        g = ns[0].req({"req": "get", "key": SEED})["result"]
        variant, params = g["variant"], g["params"]
        libver = g["libver"]

        # Propagation: KEYS real winners committed on node 0.
        prop = []
        for key in ["rmsnorm/fp32/m=%d,n=%d" % (m, 96 * (i + 1))
                    for i, m in enumerate([8, 16, 32, 64] * 20)][:nkeys]:
            ns[0].req({"req": "tune", "key": key, "wait": True,
                       "timeout_ms": 120000})
            t0 = time.time()
            for n in ns[1:]:
                wait(lambda: n.req({"req": "get", "key": key}).get("ok"),
                     step=0.001)
            prop.append(time.time() - t0)

        # Duplicates: every node asked to tune the same keys at once.
        before = sum(n.req({"req": "stats"})["counters"]["jobs_done"]
                     for n in ns)
        shm0 = min(n.status()["shm"]["count"] for n in ns)
        dkeys = dup_keys(ndup)
        t0 = time.time()
        bad = ask_all(ns, dkeys)
        ask_s = time.time() - t0
        # Done: every node serves every key from its shm table, no job
        # queued or running anywhere, every outbox empty.
        dup_done = wait(lambda: all(
            st["shm"]["count"] >= shm0 + len(dkeys) and
            st["queue"]["queued"] == 0 and st["queue"]["running"] is None
            and st["fleet"]["outbox"] == 0
            for st in [n.status() for n in ns]), timeout=3600, step=1.0)
        dup_s = time.time() - t0
        after = sum(n.req({"req": "stats"})["counters"]["jobs_done"]
                    for n in ns)
        dup = after - before - len(dkeys)
        per_key = pg.sql(
            "SELECT count(*) || ' ' || coalesce(sum(n), 0) || ' ' || "
            "coalesce(sum(n - 1), 0) || ' ' || coalesce(max(n), 0) || ' ' "
            "|| count(*) FILTER (WHERE n > 1) FROM (SELECT key, count(*) n "
            "FROM fleet_measurements WHERE key LIKE 'rmsnorm/bf16/%' OR "
            "key LIKE 'rmsnorm/fp16/%' GROUP BY key) k").split()
        sf = {c: fleet_sum(ns, c) for c in
              ("locked", "waits", "satisfied", "wait_timeouts",
               "holders_lost")}

        # Join: ROWS fleet rows, then a new node.
        t0 = time.time()
        # Canonical keys: m a bucket value (8..1024), n a multiple of 64.
        pg.sql("SELECT count(fleet_push('%s', '%s', 'rmsnorm/fp32/m=' || m "
               "|| ',n=' || (64 * k), 'seed', '%s', '{%s}', 1.0 + random(),"
               " 0.01, 0.1, 1, 0.03)) FROM (SELECT m, k FROM unnest("
               "array[8,16,32,64,128,256,512,1024]) m, generate_series(1, "
               "%d) k ORDER BY k, m LIMIT %d) v"
               % (dev, libver, variant, ",".join(str(p) for p in params),
                  rows // 8 + 1, rows))
        seed_s = time.time() - t0
        want = int(pg.sql("SELECT count(*) FROM fleet_results WHERE "
                          "device = '%s'" % dev))
        # Wait until the connected nodes have them too (NOTIFY).
        t0 = time.time()
        wait(lambda: all(n.status()["shm"]["count"] >= want for n in ns),
             timeout=600, step=0.05)
        notify_all_s = time.time() - t0
        j = Node(pg, nodes)
        ns.append(j)
        join = wait(lambda: j.status()["shm"]["count"] >= want,
                    timeout=600, step=0.02)
        join_total = time.time() - j.t0
        jf = j.status()["fleet"]
        print(json.dumps({
            "commit": commit(), "command": "python3 bench/fleet_bench.py "
            + " ".join(sys.argv[1:]), "machine": "%d cores" % os.cpu_count(),
            "nodes": nodes, "fleet_rows": want,
            "propagate_s": {"n": len(prop), "max": max(prop),
                            "median": sorted(prop)[len(prop) // 2]},
            "duplicate_benchmarks": dup, "dup_keys": len(dkeys),
            "dup_nodes_asking": nodes, "dup_requests_refused": len(bad),
            "dup_all_served": dup_done is not None,
            "dup_ask_s": round(ask_s, 2), "dup_until_all_served_s":
            round(dup_s, 2),
            "dup_per_key": {"keys_measured": int(per_key[0]),
                            "measurements": int(per_key[1]),
                            "beyond_one": int(per_key[2]),
                            "max_per_key": int(per_key[3]),
                            "keys_measured_twice_or_more": int(per_key[4])},
            "dup_single_flight": sf,
            "seed_rows_s": round(seed_s, 2),
            "notify_rows_to_all_nodes_s": round(notify_all_s, 2),
            "join_s": round(join_total, 2) if join is not None else None,
            "join_refused": jf["refused"], "join_applied": jf["applied"],
        }, indent=1))
    finally:
        for n in ns:
            n.stop()
        pg.stop()


if __name__ == "__main__":
    main()
