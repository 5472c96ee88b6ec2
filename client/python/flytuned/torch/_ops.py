"""flytuned.torch._ops -- the flytuned:: custom op schemas, their fake
(meta) implementations for torch.compile, and the pure-Python (ctypes)
CUDA implementations used when the C++ extension could not be built.

Schemas follow the torch functions they replace:
  rms_norm(input, normalized_shape, weight=None, eps=None)   F.rms_norm
  fused_add_rms_norm(input, residual!, weight, eps)          vLLM's; the
      residual becomes input + residual in place, returns the norm of it
  topk(self, k, dim=-1, largest=True, sorted=True)           torch.topk
  mm(self, mat2)                                             torch.mm
  linear(input, weight, bias=None)                           F.linear
  grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None)
                                                             torch._grouped_mm
  scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None,
            out_dtype=None, use_fast_accum=False)            torch._scaled_mm
  mqa_logits(q, kv, kv_scale, weights, ks, ke, clean_logits=True)
                                                  DeepGEMM's fp8_mqa_logits
  attention(q, k, v, is_causal=False, scale=None)    SDPA ([B,H,S,D]):
      flyk_gpu_attention through the C++ extension (bf16, head_dim
      64/128/256, GQA; causal with Sq == Skv), SDPA otherwise
"""

import torch
import torch.nn.functional as F

# torch's own functions, taken before enable() can replace them: the
# fallbacks below must never route back into flytuned.
ORIG = {"rms_norm": F.rms_norm, "linear": F.linear, "topk": torch.topk,
        "mm": torch.mm, "matmul": torch.matmul,
        "scaled_mm": getattr(torch, "_scaled_mm", None),
        "grouped_mm": getattr(torch, "_grouped_mm", None),
        "sdpa": F.scaled_dot_product_attention}

LIB = torch.library.Library("flytuned", "DEF")

SCHEMAS = {
    "rms_norm": "(Tensor input, int[] normalized_shape, Tensor? weight=None,"
                " float? eps=None) -> Tensor",
    "fused_add_rms_norm": "(Tensor input, Tensor(a!) residual, Tensor weight,"
                          " float eps) -> Tensor",
    "topk": "(Tensor self, int k, int dim=-1, bool largest=True,"
            " bool sorted=True) -> (Tensor, Tensor)",
    "mm": "(Tensor self, Tensor mat2) -> Tensor",
    "linear": "(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
    "grouped_mm": "(Tensor mat_a, Tensor mat_b, Tensor? offs=None,"
                  " Tensor? bias=None, ScalarType? out_dtype=None) -> Tensor",
    "scaled_mm": "(Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b,"
                 " Tensor? bias=None, Tensor? scale_result=None,"
                 " ScalarType? out_dtype=None, bool use_fast_accum=False)"
                 " -> Tensor",
    "mqa_logits": "(Tensor q, Tensor kv, Tensor kv_scale, Tensor weights,"
                  " Tensor ks, Tensor ke, bool clean_logits=True) -> Tensor",
    "attention": "(Tensor q, Tensor k, Tensor v, bool is_causal=False,"
                 " float? scale=None) -> Tensor",
}
for _name, _schema in SCHEMAS.items():
    LIB.define(_name + _schema)


# ------------------------------------------------------------ references
# torch's own ops: the fallback, the CPU implementation, and the tests'
# reference.
def ref_rms_norm(input, normalized_shape, weight=None, eps=None):
    return ORIG["rms_norm"](input, list(normalized_shape), weight, eps)


def ref_fused_add_rms_norm(input, residual, weight, eps):
    residual.add_(input)
    return ORIG["rms_norm"](residual, [residual.shape[-1]], weight, eps)


def ref_topk(self, k, dim=-1, largest=True, sorted=True):
    v, i = ORIG["topk"](self, k, dim, largest, sorted)
    return v, i


def ref_mm(self, mat2):
    return ORIG["mm"](self, mat2)


def ref_linear(input, weight, bias=None):
    return ORIG["linear"](input, weight, bias)


def ref_grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    return ORIG["grouped_mm"](mat_a, mat_b, offs=offs, bias=bias,
                             out_dtype=out_dtype)


def ref_scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None,
                  out_dtype=None, use_fast_accum=False):
    return ORIG["scaled_mm"](self, mat2, scale_a, scale_b, bias=bias,
                            scale_result=scale_result, out_dtype=out_dtype,
                            use_fast_accum=use_fast_accum)


def ref_mqa_logits(q, kv, kv_scale, weights, ks, ke, clean_logits=True):
    s = ORIG["matmul"](q.float(), kv.float().t())           # [sq, h, skv]
    s = (torch.relu(s) * weights.float().unsqueeze(-1)).sum(1)
    s = s * kv_scale.float()
    if clean_logits:
        j = torch.arange(kv.shape[0], device=q.device)
        out = (j[None, :] < ks[:, None]) | (j[None, :] >= ke[:, None])
        s = s.masked_fill(out, float("-inf"))
    return s


def _attn_out(q, v):
    """flytuned::attention's output: [B, Hq, Sq, Dv] laid out as
    [B, Sq, Hq, Dv] (every path and the fake alike: Inductor asserts the
    strides the fake gave)."""
    if q.dim() != 4:
        return q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    b, h, s, _ = q.shape
    return q.new_empty((b, s, h, v.shape[-1])).transpose(1, 2)


def ref_attention(q, k, v, is_causal=False, scale=None):
    r = ORIG["sdpa"](q, k, v, is_causal=is_causal, scale=scale,
                     enable_gqa=k.shape[1] != q.shape[1])
    return _attn_out(q, v).copy_(r) if r.dim() == 4 else r


REFS = {"rms_norm": ref_rms_norm, "fused_add_rms_norm": ref_fused_add_rms_norm,
        "topk": ref_topk, "mm": ref_mm, "linear": ref_linear,
        "grouped_mm": ref_grouped_mm, "scaled_mm": ref_scaled_mm,
        "mqa_logits": ref_mqa_logits, "attention": ref_attention}


# ------------------------------------------------------------------ fakes
def _fake_rms_norm(input, normalized_shape, weight=None, eps=None):
    return torch.empty_like(input)


def _fake_fused_add_rms_norm(input, residual, weight, eps):
    return torch.empty_like(input)


def _fake_topk(self, k, dim=-1, largest=True, sorted=True):
    shape = list(self.shape)
    shape[dim] = k
    return (self.new_empty(shape),
            self.new_empty(shape, dtype=torch.int64))


def _fake_mm(self, mat2):
    return self.new_empty((self.shape[0], mat2.shape[1]))


def _fake_linear(input, weight, bias=None):
    return input.new_empty(tuple(input.shape[:-1]) + (weight.shape[0],))


def _fake_grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    return mat_a.new_empty((mat_a.shape[0], mat_b.shape[-1]),
                           dtype=out_dtype or mat_a.dtype)


def _fake_scaled_mm(self, mat2, scale_a, scale_b, bias=None,
                    scale_result=None, out_dtype=None, use_fast_accum=False):
    return self.new_empty((self.shape[0], mat2.shape[1]),
                          dtype=out_dtype or self.dtype)


def _fake_mqa_logits(q, kv, kv_scale, weights, ks, ke, clean_logits=True):
    return q.new_empty((q.shape[0], kv.shape[0]), dtype=torch.float32)


def _fake_attention(q, k, v, is_causal=False, scale=None):
    return _attn_out(q, v)


FAKES = {"rms_norm": _fake_rms_norm,
         "fused_add_rms_norm": _fake_fused_add_rms_norm,
         "topk": _fake_topk, "mm": _fake_mm, "linear": _fake_linear,
         "grouped_mm": _fake_grouped_mm, "scaled_mm": _fake_scaled_mm,
         "mqa_logits": _fake_mqa_logits, "attention": _fake_attention}

for _name, _fn in FAKES.items():
    torch.library.register_fake("flytuned::" + _name, _fn, lib=LIB)
for _name, _fn in REFS.items():
    LIB.impl(_name, _fn, "CPU")
# attention on CUDA: the C++ extension's kernel (flyk_gpu_attention);
# on the ctypes path SDPA (register_python_cuda).


def register_python_cuda(rt):
    """The CUDA kernels of every op through ctypes (rt: _runtime.Runtime),
    when the C++ extension is not there."""
    for name in REFS:
        if name == "attention":
            LIB.impl(name, ref_attention, "CUDA")
            continue
        LIB.impl(name, getattr(rt, name), "CUDA")
