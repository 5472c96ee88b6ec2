#!/usr/bin/env python3
"""test_torch_ops.py -- flytuned.torch on a GPU: every flytuned:: op
against torch's own, torch.compile(fullgraph=True) over a module of the
ops (each an opaque node), CUDA graph capture + replay == eager (after
prepare(), no capture misses), enable()/disable() routing, and the
fallback (one warning, torch's results) without a daemon.

Needs torch with CUDA and FLY_BUILD_DIR (default build/) holding flytuned,
libflyclient.so and libflykernels_cuda.so; otherwise it prints why it
skips and "0 passed, 0 failed" (the suite stays green where torch is
absent).  Starts its own daemon (backend cuda, temp state dir) and sets
FLYTUNED_SOCKET before importing flytuned.torch.
Last line: "N passed, N failed".
"""

import faulthandler
import os
import subprocess
import sys
import tempfile
import time
import traceback

faulthandler.enable()  # a crash in an op names the Python line
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.path.abspath(os.environ.get("FLY_BUILD_DIR",
                                       os.path.join(SRC, "build")))
PYDIR = os.path.join(SRC, "client", "python")


def skip(why):
    print("SKIP test_torch_ops: %s" % why)
    print("0 passed, 0 failed")
    sys.exit(0)


try:
    import torch
except ImportError:
    skip("PyTorch is not installed (the GPU machine has it)")
if not torch.cuda.is_available():
    skip("torch %s sees no CUDA device" % torch.__version__)
KLIB = os.path.join(BUILD, "libflykernels_cuda.so")
for f in ("flytuned", "libflyclient.so", "libflykernels_cuda.so"):
    if not os.path.exists(os.path.join(BUILD, f)):
        skip("%s not built in %s (make GPU=cuda)" % (f, BUILD))

os.environ.setdefault("FLYCLIENT_LIB", os.path.join(BUILD, "libflyclient.so"))
os.environ.setdefault("FLYK_LIB", KLIB)
os.environ.setdefault("FLYCLIENT_INCLUDE", os.path.join(BUILD, "include"))
sys.path.insert(0, PYDIR)


class Daemon(object):
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="flytorch.")
        conf = os.path.join(self.dir, "flytuned.conf")
        with open(conf, "w") as f:
            f.write('{"backend":"cuda","policy":"always"}\n')
        self.log = open(os.path.join(self.dir, "flytuned.log"), "w")
        env = dict(os.environ, FLYTUNED_KERNELS_DIR=BUILD)
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "flytuned"), "--foreground", "--state-dir",
             self.dir, "--config", conf], stdout=self.log,
            stderr=subprocess.STDOUT, env=env)
        self.sock = os.path.join(self.dir, "gpu0.sock")
        for _ in range(300):
            if os.path.exists(self.sock) or self.proc.poll() is not None:
                break
            time.sleep(0.1)
        if not os.path.exists(self.sock):
            raise RuntimeError("flytuned did not start: " + self.log.name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


# ---------------------------------------------------------------- no daemon
def check_fallback_without_daemon():
    """A child without a daemon: one RuntimeWarning naming the reason,
    backend "torch", results torch's."""
    code = r'''
import warnings, torch, torch.nn.functional as F
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    import flytuned.torch as ft
    x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(256, device="cuda", dtype=torch.bfloat16)
    ft.enable()
    y = F.rms_norm(x, [256], g, 1e-6)
    y2 = torch.ops.flytuned.rms_norm(x, [256], g, 1e-6)
    ft.disable()
ours = [str(m.message) for m in w if "flytuned" in str(m.message)]
assert len(ours) == 1, ours
assert "no flytuned daemon" in ours[0], ours
assert ft.backend()[0] == "torch", ft.backend()
ref = F.rms_norm(x, [256], g, 1e-6)
assert torch.equal(y, ref) and torch.equal(y2, ref)
print("ok")
'''
    env = dict(os.environ, FLYTUNED_SOCKET="/nonexistent/flytuned.sock",
               PYTHONPATH=PYDIR)
    r = subprocess.run([sys.executable, "-c", code], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), \
        r.stdout + r.stderr


# ---------------------------------------------------------------- the ops
def close(a, b, tol):
    a, b = a.float(), b.float()
    err = (a - b).abs().max().item()
    scale = max(1.0, b.abs().max().item())
    assert err <= tol * scale, "max err %g (scale %g)" % (err, scale)


def check_ops(ft):
    F = torch.nn.functional
    dev = "cuda"
    torch.manual_seed(0)
    fo = torch.ops.flytuned
    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2),
                    (torch.float16, 2e-3)):
        x = torch.randn(64, 4096, device=dev, dtype=dt)
        g = torch.randn(4096, device=dev, dtype=dt)
        close(fo.rms_norm(x, [4096], g, 1e-6), F.rms_norm(x, [4096], g, 1e-6),
              tol)
        r = torch.randn_like(x)
        r2 = r.clone()
        y = fo.fused_add_rms_norm(x, r, g, 1e-6)
        r2 += x
        close(r, r2, tol)
        close(y, F.rms_norm(r2, [4096], g, 1e-6), tol)
        t = torch.randn(256, 1024, device=dev, dtype=dt)
        v, i = fo.topk(t, 8)
        rv, _ = torch.topk(t, 8)
        assert torch.equal(v, rv), "topk values"
        assert torch.equal(t.gather(-1, i), v), "topk indices"
    a = torch.randn(256, 512, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, 512, device=dev, dtype=torch.bfloat16)
    close(fo.mm(a, w.t()), a @ w.t(), 2e-2)                # NT
    bb = torch.randn(512, 768, device=dev, dtype=torch.bfloat16)
    close(fo.mm(a, bb), a @ bb, 2e-2)                      # NN
    bias = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    close(fo.linear(a.view(2, 128, 512), w, bias),
          F.linear(a.view(2, 128, 512), w, bias), 2e-2)
    G, N, K = 4, 256, 512
    wg = torch.randn(G, N, K, device=dev, dtype=torch.bfloat16)
    ends = torch.tensor([64, 64, 192, 256], device=dev, dtype=torch.int32)
    got = fo.grouped_mm(a, wg.transpose(-2, -1), ends)
    ref = torch._grouped_mm(a, wg.transpose(-2, -1), offs=ends)
    close(got, ref, 2e-2)
    e4 = torch.float8_e4m3fn
    a8 = torch.randn(128, 512, device=dev).to(e4)
    b8 = torch.randn(256, 512, device=dev).to(e4)
    sa = torch.tensor(0.5, device=dev)
    sb = torch.tensor(2.0, device=dev)
    close(fo.scaled_mm(a8, b8.t(), sa, sb, out_dtype=torch.bfloat16),
          torch._scaled_mm(a8, b8.t(), sa, sb, out_dtype=torch.bfloat16),
          2e-2)
    sq, h, d, skv = 64, 16, 128, 512
    q = torch.randn(sq, h, d, device=dev).to(e4)
    kv = torch.randn(skv, d, device=dev).to(e4)
    kvs = torch.rand(skv, device=dev) + 0.5
    wt = torch.randn(sq, h, device=dev)
    ks = torch.zeros(sq, device=dev, dtype=torch.int32)
    ke = torch.arange(sq, device=dev, dtype=torch.int32) * 8 + 8
    from flytuned.torch import _ops
    got = fo.mqa_logits(q, kv, kvs, wt, ks, ke, True)
    ref = _ops.ref_mqa_logits(q, kv, kvs, wt, ks, ke, True)
    assert torch.equal(torch.isinf(got), torch.isinf(ref)), "mqa -inf mask"
    fin = ~torch.isinf(ref)
    close(got[fin], ref[fin], 1e-3)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        dt = torch.bfloat16
        self.g = torch.nn.Parameter(torch.randn(1024, dtype=dt),
                                    requires_grad=False)
        self.w = torch.nn.Parameter(torch.randn(2048, 1024, dtype=dt) * .03,
                                    requires_grad=False)

    def forward(self, x, r):
        fo = torch.ops.flytuned
        h = fo.fused_add_rms_norm(x, r, self.g, 1e-6)
        y = torch.nn.functional.silu(fo.linear(h, self.w))
        v, i = fo.topk(y.float(), 4)
        return y, v, i


def check_compile(ft):
    m = Block().cuda()
    x = torch.randn(32, 1024, device="cuda", dtype=torch.bfloat16)
    r = torch.randn_like(x)
    seen = []

    def backend(gm, example_inputs):
        for n in gm.graph.nodes:
            if n.op == "call_function" and "flytuned" in str(n.target):
                seen.append(str(n.target))
        return gm.forward

    with torch.no_grad():
        r1, r2 = r.clone(), r.clone()
        eager = m(x, r1)
        torch._dynamo.reset()
        got = torch.compile(m, fullgraph=True, backend=backend)(x, r2)
        assert any("fused_add_rms_norm" in s for s in seen), seen
        assert any("linear" in s for s in seen), seen
        assert any("topk" in s for s in seen), seen
        close(got[0], eager[0], 1e-2)           # split-K may reorder sums
        close(got[1], eager[1], 1e-2)
        close(r2, r1, 1e-2)
        torch._dynamo.reset()
        r3 = r.clone()
        ind = torch.compile(m, fullgraph=True)(x, r3)    # inductor
        close(ind[0], eager[0], 2e-2)
        close(r3, r1, 1e-2)


def check_compile_attention(ft):
    """flytuned::attention on q/k/v viewed out of a [B, S, H*D] projection
    (a layer's pattern) under Inductor: the output's strides are the
    fake's (Inductor asserts them), and the values SDPA's."""
    fo = torch.ops.flytuned
    B, S, H, HKV, D = 1, 256, 8, 2, 128

    def attn(x):
        q = x[..., :H * D].view(B, S, H, D).transpose(1, 2)
        k = x[..., H * D:(H + HKV) * D].view(B, S, HKV, D).transpose(1, 2)
        v = x[..., (H + HKV) * D:].view(B, S, HKV, D).transpose(1, 2)
        o = fo.attention(q, k, v, True)
        return o.transpose(1, 2).reshape(B, S, H * D) * 2

    x = torch.randn(B, S, (H + 2 * HKV) * D, device="cuda",
                    dtype=torch.bfloat16)
    with torch.no_grad():
        eager = attn(x)
        from flytuned.torch import _ops
        q = x[..., :H * D].view(B, S, H, D).transpose(1, 2)
        k = x[..., H * D:(H + HKV) * D].view(B, S, HKV, D).transpose(1, 2)
        v = x[..., (H + HKV) * D:].view(B, S, HKV, D).transpose(1, 2)
        o = fo.attention(q, k, v, True)
        fake = _ops._attn_out(q, v)
        assert o.stride() == fake.stride(), (o.stride(), fake.stride())
        ref = _ops.ORIG["sdpa"](q, k, v, is_causal=True, enable_gqa=True)
        close(o, ref, 2e-2)
        torch._dynamo.reset()
        got = torch.compile(attn, fullgraph=True)(x)
        close(got, eager, 2e-2)


def check_graph(ft):
    m = Block().cuda()
    x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
    r = torch.randn_like(x)
    with torch.no_grad():
        ft.prepare(m, (x, r.clone()), timeout_s=120)
        eager = m(x, r.clone())
        st0 = ft.stats()
        sx, sr = x.clone(), r.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):       # warm-up, as torch's docs say
            m(sx, sr.clone())
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = m(sx, sr)
        st1 = ft.stats()
        assert st1["capture_misses"] == st0["capture_misses"], \
            "a capture after prepare missed: %s -> %s" % (st0, st1)
        assert st1["capture_hits"] > st0["capture_hits"], (st0, st1)
        sr.copy_(r)
        g.replay()
        torch.cuda.synchronize()
        close(out[0], eager[0], 1e-2)
        close(out[1], eager[1], 1e-2)
        # new inputs, same graph
        x2 = torch.randn_like(x)
        sx.copy_(x2)
        sr.copy_(r)
        g.replay()
        e2 = m(x2, r.clone())
        close(out[0], e2[0], 1e-2)
        close(out[1], e2[1], 1e-2)
        assert not torch.allclose(e2[0].float(), eager[0].float()), \
            "new inputs gave the old outputs"


def check_routing(ft):
    F = torch.nn.functional
    x = torch.randn(16, 512, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(512, device="cuda", dtype=torch.bfloat16)
    orig = F.rms_norm
    ft.enable()
    try:
        assert F.rms_norm is not orig
        c0 = ft.stats()["calls"]
        y = F.rms_norm(x, [512], g, 1e-6)
        torch.topk(x.float(), 4)
        torch.matmul(x, x.t())
        assert ft.stats()["calls"] == c0 + 3, ft.stats()
        close(y, orig(x, [512], g, 1e-6), 2e-2)
        xc = x.cpu()                         # CPU: torch's own
        F.rms_norm(xc, [512], g.cpu(), 1e-6)
        assert ft.stats()["calls"] == c0 + 3
    finally:
        ft.disable()
    assert F.rms_norm is orig
    c1 = ft.stats()["calls"]
    F.rms_norm(x, [512], g, 1e-6)
    assert ft.stats()["calls"] == c1, "disable() left routing on"


def main():
    passed = failed = 0
    tests = [("fallback_without_daemon", check_fallback_without_daemon)]
    daemon = Daemon()
    os.environ["FLYTUNED_SOCKET"] = daemon.sock
    try:
        import flytuned.torch as ft
        print("flytuned.torch backend: %s (%s)" % ft.backend())
        if ft.backend()[0] == "torch":
            print("FAIL: a daemon is up but the ops run torch's own")
            failed += 1
        for name, fn in [("ops", check_ops), ("compile", check_compile),
                         ("compile_attention", check_compile_attention),
                         ("cuda_graph", check_graph),
                         ("routing", check_routing)]:
            tests.append((name, lambda fn=fn: fn(ft)))
        for name, fn in tests:
            try:
                f0 = ft.stats().get("fallbacks", 0)
                fn()
                f1 = ft.stats().get("fallbacks", 0)
                # a refused launch falls back to torch silently (right
                # answers, not ours): a failure here
                assert f1 == f0, "%d launch(es) refused, ran torch's: %s" \
                    % (f1 - f0, ft.last_error())
                print("PASS %s" % name)
                passed += 1
            except Exception:
                print("FAIL %s\n%s" % (name, traceback.format_exc()))
                failed += 1
    finally:
        daemon.stop()
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
