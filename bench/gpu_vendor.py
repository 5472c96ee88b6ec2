"""The bench scripts' one place for what differs between an NVIDIA machine
(PyTorch-CUDA) and an AMD one (PyTorch-ROCm, where torch.cuda is HIP): the
kernel library's name, the daemon's backend, the SMI tool that samples
clocks and power, and the fp8 e4m3 flavour (fnuz on gfx940/941/942, fn
elsewhere).  Everything else in bench/ is written once for both.

Importable without torch (is_rocm() then says False) so that the pure parts
are checked anywhere: `python3 bench/gpu_vendor.py --self-test`, run by
`make test` (tests/integration/test_bench_vendor.sh).
"""
import os
import re
import shutil
import subprocess
import sys

# gfx parts whose fp8 is the "fnuz" encoding (no -0, NaN = 0x80, bias 8).
FNUZ_ARCHS = ("gfx940", "gfx941", "gfx942")


def is_rocm():
    """True under PyTorch-ROCm (torch.version.hip set)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(getattr(torch.version, "hip", None))


def backend():
    """The daemon's GPU backend name for this machine."""
    return "hip" if is_rocm() else "cuda"


def kernels_lib(build):
    """Path of the GPU kernel library: FLYK_LIB, else BUILD/
    libflykernels_hip.so on ROCm, BUILD/libflykernels_cuda.so on CUDA."""
    return os.environ.get("FLYK_LIB") or os.path.join(
        build, "libflykernels_%s.so" % backend())


def gfx_arch(index=0):
    """"gfx942" (the part before ':' of gcnArchName) on ROCm, "" else."""
    if not is_rocm():
        return ""
    import torch
    name = getattr(torch.cuda.get_device_properties(index), "gcnArchName",
                   "")
    return name.split(":")[0]


def fp8_e4m3_name(arch):
    """torch's name of the e4m3 dtype the GPU @p arch computes in."""
    return "float8_e4m3fnuz" if arch in FNUZ_ARCHS else "float8_e4m3fn"


def fp8_e4m3(index=0):
    """The torch e4m3 dtype of this GPU (fnuz on gfx940-942)."""
    import torch
    return getattr(torch, fp8_e4m3_name(gfx_arch(index)))


# Infinity Cache (MALL) behind the L2 by gfx name (as kernels/devid.c):
# MI300A/X and MI350/355, 256 MiB; none on MI200/MI100.
GFX_LLC_MIB = {"gfx940": 256, "gfx941": 256, "gfx942": 256, "gfx950": 256}


def flush_bytes_for(l2_bytes, arch):
    """Bytes the cache clean reads: 512 MiB (the NVIDIA figure: >= 4x any
    L2 so far), or 4x the largest cache where that is more (1 GiB on
    MI300X's 256 MiB Infinity Cache)."""
    big = max(l2_bytes, GFX_LLC_MIB.get(arch, 0) << 20)
    return max(512 << 20, 4 * big)


def flush_bytes(index=0):
    """flush_bytes_for() this GPU."""
    import torch
    l2 = getattr(torch.cuda.get_device_properties(index), "L2_cache_size",
                 0)
    return flush_bytes_for(l2, gfx_arch(index))


def smi_tool():
    """"nvidia-smi", "amd-smi", "rocm-smi" (the first found, in the
    order fitting the machine), or None."""
    order = ("amd-smi", "rocm-smi", "nvidia-smi") if is_rocm() else \
        ("nvidia-smi", "amd-smi", "rocm-smi")
    for t in order:
        if shutil.which(t):
            return t
    return None


def smi_query_cmd(tool):
    """One-shot clocks/power/temperature command line for @p tool."""
    if tool == "nvidia-smi":
        return [tool, "--query-gpu=clocks.sm,clocks.mem,power.draw,"
                "temperature.gpu,clocks_throttle_reasons.active",
                "--format=csv,noheader"]
    if tool == "amd-smi":
        return [tool, "metric", "--clock", "--power", "--temperature",
                "--csv"]
    if tool == "rocm-smi":
        return [tool, "--showclocks", "--showpower", "--showtemp",
                "--showmaxpower", "--csv"]
    return None


def machine_tag_of(name, arch=""):
    """The result files' prefix for a GPU named @p name (torch's device
    name; @p arch its gfx arch on ROCm): "h100", "h200", "a100", ...,
    the gfx arch on AMD, else the name's first model-like word."""
    if arch:
        return arch
    words = re.findall(r"[a-z]+[0-9]+[a-z0-9]*", name.lower())
    for w in words:
        if re.match(r"^(h|a|b|gb|gh|l|v|t|rtx)[0-9]", w):
            return w
    return words[0] if words else "gpu"


def machine_tag(index=0):
    """machine_tag_of() of this machine's GPU @p index."""
    import torch
    return machine_tag_of(torch.cuda.get_device_name(index),
                          gfx_arch(index))


def result_path(out, op, index=0):
    """OUT/<machine>-<op>.json: one results file per op and machine."""
    return os.path.join(out, "%s-%s.json" % (machine_tag(index), op))


def clocks():
    """Clocks and power now, as the SMI tool prints them, or "n/a (..)"."""
    cmd = smi_query_cmd(smi_tool())
    if not cmd:
        return "n/a (no nvidia-smi, amd-smi or rocm-smi)"
    try:
        out = subprocess.check_output(cmd, stderr=subprocess.STDOUT)
        return out.decode().strip()
    except Exception as e:
        return "n/a (%s)" % e


def _self_test():
    assert fp8_e4m3_name("gfx942") == "float8_e4m3fnuz"
    assert fp8_e4m3_name("gfx940") == "float8_e4m3fnuz"
    assert fp8_e4m3_name("gfx950") == "float8_e4m3fn"
    assert fp8_e4m3_name("gfx90a") == "float8_e4m3fn"
    assert fp8_e4m3_name("") == "float8_e4m3fn"
    for t in ("nvidia-smi", "amd-smi", "rocm-smi"):
        assert smi_query_cmd(t)[0] == t
    assert smi_query_cmd(None) is None
    assert flush_bytes_for(50 << 20, "") == 512 << 20  # H100: unchanged
    assert flush_bytes_for(4 << 20, "gfx942") == 1 << 30  # MI300X
    assert flush_bytes_for(8 << 20, "gfx90a") == 512 << 20  # MI250X
    os.environ.pop("FLYK_LIB", None)
    lib = kernels_lib("build")
    assert lib == "build/libflykernels_%s.so" % backend(), lib
    os.environ["FLYK_LIB"] = "/x/lib.so"
    assert kernels_lib("build") == "/x/lib.so"
    assert machine_tag_of("NVIDIA H100 80GB HBM3") == "h100"
    assert machine_tag_of("NVIDIA H200") == "h200"
    assert machine_tag_of("NVIDIA A100-SXM4-80GB") == "a100"
    assert machine_tag_of("AMD Instinct MI300X", "gfx942") == "gfx942"
    assert machine_tag_of("Something") == "gpu"
    print("gpu_vendor: backend %s, smi %s" % (backend(), smi_tool()))
    print("gpu_vendor: 1 passed, 0 failed")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        _self_test()
    else:
        print("backend=%s lib=%s smi=%s gfx=%s" % (
            backend(), kernels_lib(sys.argv[1] if len(sys.argv) > 1
                                   else "build"), smi_tool(), gfx_arch()))
