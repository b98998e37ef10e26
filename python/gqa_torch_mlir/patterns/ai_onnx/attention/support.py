"""What the standard Attention lowering supports: its attributes read, each value lowered or refused by name.

onnxruntime 1.32 is the oracle.  Its CPU kernel runs f32 and f16 with a
boolean mask or one of Q's type; any other node (f64, or a mask of another
type) runs the op's ONNX function body, the spec's own semantics, which take
more (any mask broadcast, shorter masks at 24, a past without presents, scale
0) and exclude keys with -inf rather than the lowest finite value.  Where
onnxruntime accepts a value the spec gives another meaning (a negative
softcap, a softmax precision other than the one it computes in, a negative
scale run into NaN), the value is refused by name rather than computed one
way or the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ....binder import OpBinder
from ....registry import Refusal

OP = "Attention"  # how run-time check messages name the op
INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
OUTPUTS = ("Y", "present_key", "present_value", "qk_matmul_output")
SUPPORTED_DTYPES = ("f32", "f16", "f64")  # bf16: onnxruntime has no CPU kernel
# softmax_precision values computed as asked, by the type of Q: onnxruntime's kernel runs the softmax
# of f16 and f32 in float; the function body runs f64's in float (1) or double (11).
SOFTMAX_PRECISION = {"f16": (1,), "f32": (1,), "f64": (1, 11)}
_ONNX_TYPE_NAMES = {1: "float", 10: "float16", 11: "double", 16: "bfloat16"}


def lowest(dtype: str) -> float:
    """The most negative finite value of ``dtype``: onnxruntime's mark of an excluded key."""
    return float(np.finfo({"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype]).min)


@dataclass(frozen=True)
class AttentionAttributes:
    opset: int
    q_num_heads: int  # 0: absent (4-D inputs)
    kv_num_heads: int
    scale: float  # 0.0: absent (1/sqrt(head size)) unless scale_given
    is_causal: bool
    softcap: float  # 0.0: none
    qk_mode: int  # -1: no qk_matmul_output requested
    body: bool = False  # onnxruntime runs the op's function body (runs_function_body)
    scale_given: bool = False
    softmax_f32: bool = False  # f64 with softmax_precision 1: the softmax in float
    fused: bool = False  # attention=fused: a decode step in one dispatch where it can (compute.py)


def excluded_value(attrs: AttentionAttributes, dtype: str) -> float:
    """What an excluded key's score becomes: the kernel's lowest finite value, or the function body's -inf."""
    return float("-inf") if attrs.body else lowest(dtype)


def runs_function_body(q_dtype: str, mask_dtype) -> bool:
    """Whether onnxruntime runs the op's function body rather than its f16/f32 kernel."""
    return q_dtype == "f64" or mask_dtype not in (None, "i1", q_dtype)


def read_attributes(b: OpBinder, opset: int, dtype: str, body: bool = False) -> AttentionAttributes:
    scale = b.attr_float("scale", 0.0)
    if b.has_attr("scale") and not (math.isfinite(scale) and (scale > 0 or (body and scale == 0))):
        allowed = "a finite value >= 0 (the function body runs a negative one into NaN)" if body else "a finite value > 0 (onnxruntime's kernel rejects others)"
        raise Refusal(f"value {scale} is not supported; supported: {allowed}", "attribute 'scale'")
    softcap = b.attr_float("softcap", 0.0)
    if not (math.isfinite(softcap) and softcap >= 0):
        raise Refusal(f"value {softcap} is not supported; supported: 0 (none) or a finite value > 0", "attribute 'softcap'")
    is_causal = b.attr_int("is_causal", 0)
    if is_causal not in (0, 1):
        raise Refusal(f"value {is_causal} is not supported; supported: 0 or 1", "attribute 'is_causal'")
    check_softmax_precision(b, dtype)
    heads = tuple(b.attr_int(name, 0) for name in ("q_num_heads", "kv_num_heads"))
    for name, value in zip(("q_num_heads", "kv_num_heads"), heads):
        if value < 0:
            raise Refusal(f"value {value} is not supported; supported: a count >= 1", f"attribute '{name}'")
    softmax_f32 = dtype == "f64" and b.has_attr("softmax_precision") and b.attr_int("softmax_precision") == 1
    return AttentionAttributes(opset, heads[0], heads[1], scale, bool(is_causal), softcap, qk_mode(b), body, b.has_attr("scale"), softmax_f32,
                               b.options.attention == "fused")


def check_softmax_precision(b: OpBinder, dtype: str) -> None:
    if not b.has_attr("softmax_precision"):
        return
    value, allowed = b.attr_int("softmax_precision"), SOFTMAX_PRECISION.get(dtype, ())
    if value not in allowed:
        names = ", ".join(f"{v} ({_ONNX_TYPE_NAMES[v]})" for v in allowed)
        raise Refusal(
            f"value {value} is not supported for {dtype} inputs; supported: absent, or {names}, "
            "the precision onnxruntime computes the softmax in",
            "attribute 'softmax_precision'",
        )


def qk_mode(b: OpBinder) -> int:
    """The qk_matmul_output mode when that output is requested, else -1 (the attribute is then unused)."""
    if not output_requested(b, 3):
        return -1
    mode = b.attr_int("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        raise Refusal(
            f"value {mode} is not supported with output 3 'qk_matmul_output' requested; supported: 0, 1, 2 or 3",
            "attribute 'qk_matmul_output_mode'",
        )
    return mode


def output_requested(b: OpBinder, i: int) -> bool:
    return b.num_results > i and b.result_type_text(i) != "!torch.none"
