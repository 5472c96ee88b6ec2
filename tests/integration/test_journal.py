#!/usr/bin/env python3
"""test_journal.py -- issue 20 item 4: log levels for journald.

Runs FLY_BUILD_DIR/flytuned-test with stderr to a file and
JOURNAL_STREAM="DEV:INODE" of that very file (what systemd sets when
stderr is the journal, systemd.exec(5)): every line of the daemon and of
its worker starts with the syslog priority "<N>" of its level
(sd-daemon(3): 6 info, 4 warn, 3 err ...) and has no timestamp.  With
JOURNAL_STREAM naming another file, or unset, the lines are plain.
Standard library only.  Last line: "N passed, N failed".
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("FLY_BUILD_DIR", os.path.join(SRC, "build"))
MULT = float(os.environ.get("FLY_TEST_TIMEOUT_MULTIPLIER", "1") or 1)

PRIO = {"debug": 7, "info": 6, "warn": 4, "err": 3, "crit": 2}


def run_daemon(journal):
    """Start, wait for the worker's 'ready' line, stop; return the log.
    journal: "self" (stderr's own dev:ino), "other" (another file's),
    None (unset)."""
    d = tempfile.mkdtemp(prefix="flyjrn.")
    try:
        conf = os.path.join(d, "c.json")
        with open(conf, "w") as f:
            json.dump({"backend": "cpu", "policy": "on-request"}, f)
        logpath = os.path.join(d, "daemon.log")
        other = os.path.join(d, "other")
        open(other, "w").close()
        env = dict(os.environ)
        env.pop("JOURNAL_STREAM", None)
        with open(logpath, "w") as log:
            st = os.fstat(log.fileno() if journal == "self" else
                          os.open(other, os.O_RDONLY))
            if journal is not None:
                env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
            p = subprocess.Popen(
                [os.path.join(BUILD, "flytuned-test"), "--state-dir", d,
                 "--config", conf, "--device", "0"],
                stdout=subprocess.DEVNULL, stderr=log, env=env)
            deadline = time.time() + 30 * MULT
            while time.time() < deadline:
                with open(logpath) as f:
                    if re.search(r"(^|[ >])info ready ", f.read(), re.M):
                        break
                if p.poll() is not None:
                    break
                time.sleep(0.05)
            p.terminate()
            p.wait(30 * MULT)
        with open(logpath) as f:
            return f.read()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def t_prefixed_when_journal():
    text = run_daemon("self")
    lines = [l for l in text.splitlines() if l]
    assert len(lines) >= 4, text
    for l in lines:
        m = re.match(r"<(\d)>(\w+) \S", l)
        assert m, "no priority prefix: %r" % l
        assert int(m.group(1)) == PRIO[m.group(2)], l
        assert not re.match(r"<\d>\d{4}-", l), "timestamp kept: %r" % l
    # the worker's lines (same stderr) too, and warn/info levels seen
    assert any(" src=worker" in l for l in lines), text
    assert any(l.startswith("<6>info ready ") for l in lines), text
    assert any(l.startswith("<6>info stopping ") for l in lines), text


def t_plain_otherwise():
    for mode in ("other", None):
        text = run_daemon(mode)
        lines = [l for l in text.splitlines() if l]
        assert len(lines) >= 4, text
        for l in lines:
            assert re.match(r"\d{4}-\d\d-\d\dT[0-9:.]+Z (debug|info|warn|"
                            r"err|crit) ", l), (mode, l)


RESULTS = [0, 0]


def check(name, fn):
    try:
        fn()
        RESULTS[0] += 1
        print("ok   %s" % name)
    except Exception:
        RESULTS[1] += 1
        print("FAIL %s" % name)
        traceback.print_exc()


if __name__ == "__main__":
    check("prefixed_when_journal", t_prefixed_when_journal)
    check("plain_otherwise", t_plain_otherwise)
    print("%d passed, %d failed" % tuple(RESULTS))
    sys.exit(1 if RESULTS[1] else 0)
