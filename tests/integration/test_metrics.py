#!/usr/bin/env python3
"""test_metrics.py -- issue 20: the Prometheus metrics of the real daemon.

Starts FLY_BUILD_DIR/flytuned-test with metrics_listen on a free port,
scrapes GET /metrics over HTTP and `flytune-ctl metrics`, parses both with
a real exposition parser (prometheus_client, Debian's
python3-prometheus-client), checks every family's TYPE and HELP, checks
that counters move when the daemon works (decide, tune), the listener's
404/405/400/431 answers, and that every metric the Grafana dashboard
(docs/grafana/flytuned.json) queries exists in the daemon's output.

prometheus_client may be installed only for Debian's /usr/bin/python3 (a
pyenv python3 first on PATH lacks it): the script re-executes itself with
/usr/bin/python3 then.  Last line: "N passed, N failed".
"""

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    if sys.executable != "/usr/bin/python3" and \
            os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("FAIL prometheus_client is missing: install "
          "python3-prometheus-client (tools/deps.sh)")
    print("0 passed, 1 failed")
    sys.exit(1)

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("FLY_BUILD_DIR", os.path.join(SRC, "build"))
MULT = float(os.environ.get("FLY_TEST_TIMEOUT_MULTIPLIER", "1") or 1)
CTL = os.path.join(BUILD, "flytune-ctl")
KEY = "rmsnorm/fp32/m=8,n=64"

# The families the daemon must expose (issue 20), with their types.
FAMILIES = {
    "flytuned_build_info": "gauge",
    "flytuned_ready": "gauge",
    "flytuned_degraded": "gauge",
    "flytuned_gpu_healthy": "gauge",
    "flytuned_start_time_seconds": "gauge",
    "flytuned_requests": "counter",
    "flytuned_error_replies": "counter",
    "flytuned_protocol_errors": "counter",
    "flytuned_decide_answers": "counter",
    "flytuned_queue_jobs": "gauge",
    "flytuned_queue_capacity": "gauge",
    "flytuned_queue_rejected": "counter",
    "flytuned_jobs": "counter",
    "flytuned_trials": "counter",
    "flytuned_tuning_seconds": "histogram",
    "flytuned_worker_restarts": "counter",
    "flytuned_worker_healthy": "gauge",
    "flytuned_results": "gauge",
    "flytuned_shm_slots_used": "gauge",
    "flytuned_shm_slots": "gauge",
    "flytuned_shm_generation": "gauge",
    "flytuned_shm_bytes": "gauge",
    "flytuned_db_commit_seconds": "histogram",
    "flytuned_db_quarantines": "counter",
    "flytuned_fleet_enabled": "gauge",
    "flytuned_fleet_connected": "gauge",
    "flytuned_fleet_outbox": "gauge",
    "flytuned_fleet_lag_seconds": "gauge",
    "flytuned_fleet_pushed": "counter",
    "flytuned_fleet_applied": "counter",
    "flytuned_fleet_refused": "counter",
    "flytuned_fleet_errors": "counter",
    "flytuned_clients": "gauge",
    "flytuned_clients_max": "gauge",
    "flytuned_connections": "counter",
    "flytuned_connections_refused": "counter",
    "flytuned_connections_closed": "counter",
    "flytuned_http_requests": "counter",
}


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon(object):
    def __init__(self, extra=None, env=None):
        self.dir = tempfile.mkdtemp(prefix="flymet.")
        self.sock = os.path.join(self.dir, "gpu0.sock")
        self.port = free_port()
        conf = {"backend": "cpu", "policy": "on-request",
                "metrics_listen": "127.0.0.1:%d" % self.port}
        conf.update(extra or {})
        self.conf = os.path.join(self.dir, "flytuned.conf")
        with open(self.conf, "w") as f:
            json.dump(conf, f)
        self.logpath = os.path.join(self.dir, "daemon.log")
        self.log = open(self.logpath, "w")
        e = dict(os.environ)
        e.pop("JOURNAL_STREAM", None)
        e.update(env or {})
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "flytuned-test"), "--state-dir", self.dir,
             "--config", self.conf],
            stdout=self.log, stderr=self.log, env=e)
        deadline = time.time() + 30 * MULT
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited: %s" % self.tail())
            try:
                if request(self.sock, {"req": "hello", "version": 1}).get(
                        "ok"):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("daemon not ready: %s" % self.tail())

    def tail(self):
        self.log.flush()
        with open(self.logpath) as f:
            return f.read()[-3000:]

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


def recv_all(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise OSError("EOF")
        b += c
    return b


def request(sock, obj):
    """One framed request (u32 LE length + JSON) on a fresh connection."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10 * MULT)
    try:
        s.connect(sock)
        data = json.dumps(obj).encode()
        s.sendall(struct.pack("<I", len(data)) + data)
        n = struct.unpack("<I", recv_all(s, 4))[0]
        return json.loads(recv_all(s, n))
    finally:
        s.close()


def http(port, raw, timeout=10):
    """Send raw bytes, return (status, headers text, body bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout * MULT)
    try:
        s.sendall(raw)
        data = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, head.decode(), body


def scrape(dm):
    st, head, body = http(dm.port, b"GET /metrics HTTP/1.1\r\n"
                          b"Host: x\r\n\r\n")
    assert st == 200, (st, head)
    assert "text/plain; version=0.0.4" in head, head
    m = re.search(r"Content-Length: (\d+)", head)
    assert m and int(m.group(1)) == len(body), head
    return body.decode()


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams, fam, sample, **labels):
    for s in fams[fam].samples:
        if s.name == sample and all(s.labels.get(k) == v
                                    for k, v in labels.items()):
            return s.value
    raise KeyError("%s %s" % (sample, labels))


def check_families(fams):
    for name, f in fams.items():
        assert f.type != "unknown", "%s has no TYPE" % name
        assert f.documentation, "%s has no HELP" % name
        for s in f.samples:
            assert s.labels.get("device") == "0", (name, s)
    for name, t in FAMILIES.items():
        assert name in fams, "family %s missing" % name
        assert fams[name].type == t, (name, fams[name].type, t)
    # counters end in _total, histograms carry _bucket/_sum/_count
    for name, f in fams.items():
        if f.type == "counter":
            assert all(s.name.endswith(("_total", "_created"))
                       for s in f.samples), name
        if f.type == "histogram":
            names = {s.name for s in f.samples}
            assert {name + "_bucket", name + "_sum",
                    name + "_count"} <= names, (name, names)


# ---------------------------------------------------------------- tests

def t_scrape_parses(dm):
    fams = families(scrape(dm))
    check_families(fams)
    bi = [s for s in fams["flytuned_build_info"].samples]
    assert len(bi) == 1 and bi[0].value == 1, bi
    for k in ("version", "kernels", "backend", "fingerprint", "device_id"):
        assert bi[0].labels.get(k), (k, bi[0].labels)
    assert bi[0].labels["backend"] == "cpu", bi[0].labels
    assert value(fams, "flytuned_ready", "flytuned_ready") == 1
    assert value(fams, "flytuned_shm_slots", "flytuned_shm_slots") > 0


def t_ctl_metrics_same(dm):
    out = subprocess.run([CTL, "--socket", dm.sock, "metrics"],
                         stdout=subprocess.PIPE, check=True,
                         timeout=30 * MULT).stdout.decode()
    fams = families(out)
    check_families(fams)
    assert set(fams) == set(families(scrape(dm))), "ctl vs http families"
    js = subprocess.run([CTL, "--socket", dm.sock, "--json", "metrics"],
                        stdout=subprocess.PIPE, check=True,
                        timeout=30 * MULT).stdout.decode()
    doc = json.loads(js)
    assert doc["ok"] is True and doc["text"].startswith("# HELP"), doc
    assert doc["content_type"] == \
        "text/plain; version=0.0.4; charset=utf-8", doc


def t_counters_move(dm):
    f0 = families(scrape(dm))
    r = request(dm.sock, {"req": "decide", "key": KEY})
    assert r["ok"], r
    r = request(dm.sock, {"req": "tune", "key": KEY, "wait": True,
                          "timeout_ms": int(120000 * MULT)})
    assert r["ok"] and r["status"] == "tuned", r
    r = request(dm.sock, {"req": "decide", "key": KEY})
    assert r["ok"] and r["decision"]["status"] == "tuned", r
    assert not request(dm.sock, {"req": "get", "key": "nope"})["ok"]
    f1 = families(scrape(dm))

    def d(fam, sample, **lab):
        return value(f1, fam, sample, **lab) - value(f0, fam, sample, **lab)

    req = "flytuned_requests_total"
    assert d("flytuned_requests", req, type="decide", result="ok") == 2
    assert d("flytuned_requests", req, type="tune", result="ok") == 1
    assert d("flytuned_requests", req, type="get", result="error") == 1
    dec = "flytuned_decide_answers_total"
    assert d("flytuned_decide_answers", dec, tier="socket", op="rmsnorm",
             status="default") == 1
    assert d("flytuned_decide_answers", dec, tier="socket", op="rmsnorm",
             status="tuned") == 1
    assert d("flytuned_jobs", "flytuned_jobs_total", op="rmsnorm",
             outcome="tuned") == 1
    assert d("flytuned_trials", "flytuned_trials_total", op="rmsnorm",
             outcome="winner") == 1
    assert d("flytuned_tuning_seconds", "flytuned_tuning_seconds_count",
             op="rmsnorm") == 1
    assert d("flytuned_tuning_seconds", "flytuned_tuning_seconds_bucket",
             op="rmsnorm", le="+Inf") == 1
    assert d("flytuned_db_commit_seconds",
             "flytuned_db_commit_seconds_count") == 1
    assert d("flytuned_shm_slots_used", "flytuned_shm_slots_used") == 1
    assert d("flytuned_results", "flytuned_results") == 1
    assert d("flytuned_connections", "flytuned_connections_total") >= 4
    # the same counters as `stats` (one source of truth)
    st = request(dm.sock, {"req": "stats"})["counters"]
    f2 = families(scrape(dm))
    assert st["jobs_done"] == sum(
        s.value for s in f2["flytuned_jobs"].samples
        if s.labels["outcome"] == "tuned"), st
    assert st["decide_tuned"] == sum(
        s.value for s in f2["flytuned_decide_answers"].samples
        if s.labels["status"] == "tuned"), st


def t_http_errors(dm):
    st, head, _ = http(dm.port, b"GET /other HTTP/1.1\r\n\r\n")
    assert st == 404, head
    st, head, _ = http(dm.port, b"POST /metrics HTTP/1.1\r\n"
                       b"Content-Length: 0\r\n\r\n")
    assert st == 405 and "Allow: GET" in head, head
    st, head, _ = http(dm.port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    assert st == 405, head
    st, head, _ = http(dm.port, b"garbage\r\n\r\n")
    assert st == 400, head
    big = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 8192 + b"\r\n\r\n"
    st, head, _ = http(dm.port, big)
    assert st == 431, head
    st, _, _ = http(dm.port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
    assert st == 200
    fams = families(scrape(dm))
    h = "flytuned_http_requests_total"
    for code, n in (("404", 1), ("405", 2), ("400", 1), ("431", 1)):
        assert value(fams, "flytuned_http_requests", h, code=code) == n, code


def t_http_slow_request_times_out(dm):
    """A request head never finished gets 408 after the listener's 5 s."""
    s = socket.create_connection(("127.0.0.1", dm.port), timeout=30 * MULT)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        data = b""
        while True:
            c = s.recv(4096)
            if not c:
                break
            data += c
    finally:
        s.close()
    assert data.startswith(b"HTTP/1.1 408 "), data[:80]


def t_metrics_listen_refused():
    """A bad metrics_listen is a configuration error (exit 6)."""
    d = tempfile.mkdtemp(prefix="flymet.")
    try:
        conf = os.path.join(d, "c.json")
        for bad in ("nohost", "localhost:9464", "127.0.0.1:65536",
                    "127.0.0.1:", "127.0.0.1:-1", "[::1]", "::1:9464x",
                    "1.2.3:80", 9464):
            with open(conf, "w") as f:
                json.dump({"backend": "cpu", "metrics_listen": bad}, f)
            p = subprocess.run([os.path.join(BUILD, "flytuned-test"),
                                "--state-dir", d, "--config", conf],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=30 * MULT)
            assert p.returncode == 6, (bad, p.returncode, p.stderr[-500:])
            assert b"metrics_listen" in p.stderr, p.stderr[-500:]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def dashboard_metrics():
    """Every flytuned_* metric name the dashboard's queries use."""
    with open(os.path.join(SRC, "docs", "grafana", "flytuned.json")) as f:
        dash = json.load(f)
    exprs = []

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k in ("expr", "query") and isinstance(v, str):
                    exprs.append(v)
                else:
                    walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(dash)
    names = set()
    for e in exprs:
        names.update(re.findall(r"\bflytuned_[a-z0-9_]+", e))
    return exprs, names


def t_dashboard_names_exist(dm):
    exprs, names = dashboard_metrics()
    assert len(exprs) >= 8 and names, exprs
    fams = families(scrape(dm))
    samples = {s.name for f in fams.values() for s in f.samples}
    missing = sorted(n for n in names if n not in samples)
    assert not missing, "dashboard queries unknown metrics: %s" % missing


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


def main():
    check("metrics_listen_refused", t_metrics_listen_refused)
    dm = None
    try:
        dm = Daemon()
        check("scrape_parses", t_scrape_parses, dm)
        check("ctl_metrics_same", t_ctl_metrics_same, dm)
        check("counters_move", t_counters_move, dm)
        check("http_errors", t_http_errors, dm)
        check("http_slow_request_times_out",
              t_http_slow_request_times_out, dm)
        check("dashboard_names_exist", t_dashboard_names_exist, dm)
        if RESULTS[1]:
            print(dm.tail())
    except Exception:
        RESULTS[1] += 1
        traceback.print_exc()
    finally:
        if dm is not None:
            dm.stop()
    print("%d passed, %d failed" % tuple(RESULTS))
    return 1 if RESULTS[1] else 0


if __name__ == "__main__":
    sys.exit(main())
