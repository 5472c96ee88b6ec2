#!/usr/bin/env python3
"""test_python.py -- the Python client (client/python/flyclient) against
the real daemon: decide -> pending/default, decide_wait -> tuned, decide
again -> tuned and equal; plus problem_key and bad-problem errors.

Starts FLY_BUILD_DIR/flytuned-test --foreground --state-dir TMP itself.
Standard library only.  Last line: "N passed, N failed".
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("FLY_BUILD_DIR", os.path.join(SRC, "build"))
os.environ.setdefault("FLYCLIENT_LIB", os.path.join(BUILD, "libflyclient.so"))
sys.path.insert(0, os.path.join(SRC, "client", "python"))

import flyclient  # noqa: E402

MULT = float(os.environ.get("FLY_TEST_TIMEOUT_MULTIPLIER", "1") or 1)


class Daemon(object):
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="flypy.")
        self.sock = os.path.join(self.dir, "gpu0.sock")
        conf = os.path.join(self.dir, "flytuned.conf")
        with open(conf, "w") as f:
            f.write('{"backend":"cpu","policy":"on-request"}\n')
        self.log = open(os.path.join(self.dir, "daemon.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "flytuned-test"), "--foreground",
             "--state-dir", self.dir, "--config", conf],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30 * MULT
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited: %s" % self.tail())
            if self._ready():
                return
            time.sleep(0.05)
        raise RuntimeError("daemon not ready: %s" % self.tail())

    def _ready(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.sock)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def tail(self):
        self.log.flush()
        with open(os.path.join(self.dir, "daemon.log")) as f:
            return f.read()[-2000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


RESULTS = [0, 0]


def check(name, fn, *args):
    try:
        fn(*args)
        RESULTS[0] += 1
        print("ok   %s" % name)
    except Exception:
        RESULTS[1] += 1
        print("FAIL %s" % name)
        traceback.print_exc()


def t_problem_key():
    k = flyclient.problem_key("gemm", "bf16", {"m": 17, "n": 64, "k": 64},
                              layout="NT")
    assert k == "gemm/bf16/NT/m=32,n=64,k=64", k
    k = flyclient.problem_key("rmsnorm", "fp16", [8192, 4097],
                              flags=["residual"])
    assert k == "rmsnorm/fp16/m=8192,n=4097/residual", k


def t_bad_problem():
    try:
        flyclient.problem_key("rmsnorm", "fp16", {"m": 0, "n": 8})
    except flyclient.FlyError as e:
        assert e.code == -10006, e.code  # FLY_E_BADDIM
    else:
        raise AssertionError("no error for m=0")
    try:
        flyclient.problem_key("conv", "fp16", {})
    except ValueError:
        pass
    else:
        raise AssertionError("no error for an unknown op")


def t_down():
    c = flyclient.Client("/nonexistent/flytuned.sock", timeout_ms=5)
    d = c.decide("rmsnorm", "fp32", {"m": 8, "n": 64})
    assert d["status"] == "default", d
    assert d["variant"] == "", d
    c.close()


def t_decide_flow(dm):
    c = flyclient.Client(socket=dm.sock, timeout_ms=int(2000 * MULT))
    dims = {"m": 8, "n": 64}
    d1 = c.decide("rmsnorm", "fp32", dims)
    assert d1["status"] in ("pending", "default"), d1
    assert d1["key"] == "rmsnorm/fp32/m=8,n=64", d1
    d2 = c.decide_wait("rmsnorm", "fp32", dims,
                       timeout_ms=int(120000 * MULT))
    assert d2["status"] == "tuned", d2
    assert d2["variant"], d2
    assert d2["median_us"] > 0, d2
    d3 = c.decide("rmsnorm", "fp32", dims)
    assert d3["status"] == "tuned", d3
    for f in ("variant", "params", "provisional", "median_us", "key"):
        assert d3[f] == d2[f], (f, d2, d3)
    # a second client (another process cache) sees the same winner
    with flyclient.Client(socket=dm.sock,
                          timeout_ms=int(2000 * MULT)) as c2:
        d4 = c2.decide("rmsnorm", "fp32", dims)
        assert d4["status"] == "tuned", d4
        assert d4["variant"] == d2["variant"], d4
        assert d4["params"] == d2["params"], d4
    c.close()


def main():
    check("problem_key", t_problem_key)
    check("bad_problem", t_bad_problem)
    check("daemon_down", t_down)
    dm = None
    try:
        dm = Daemon()
        check("decide_pending_wait_tuned", t_decide_flow, dm)
    except Exception:
        RESULTS[1] += 1
        print("FAIL daemon start")
        traceback.print_exc()
    finally:
        if dm is not None:
            dm.stop()
    print("%d passed, %d failed" % (RESULTS[0], RESULTS[1]))
    return 1 if RESULTS[1] else 0


if __name__ == "__main__":
    sys.exit(main())
