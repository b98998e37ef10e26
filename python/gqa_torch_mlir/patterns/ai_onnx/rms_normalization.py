"""Lowering of the standard ``RMSNormalization`` (opset 23), as onnxruntime's CPU kernel computes it.

    Y = X / sqrt(mean(X^2 over dims axis..last) + epsilon) * scale      [N...,D...] -> [N...,D...]

onnxruntime runs it on its SimplifiedLayerNormalization kernel (bit for bit
the same output, measured), so the arithmetic, its rounding order and the
checks are those of simplified_layer_normalization.py.  ``stash_type`` 1
(float statistics) is what that kernel computes for f16 and f32 (f64 stays
f64); other stash types, which the spec computes in another precision and
onnxruntime computes alike, are refused by name.
"""

from __future__ import annotations

from typing import List

from ...binder import OpBinder
from ...builder import TorchBuilder
from ...registry import Refusal, onnx_op
from .simplified_layer_normalization import LANES, checked_inputs, rms_normalize, scale_is_broadcast

OP = "RMSNormalization"


@onnx_op("RMSNormalization", domain="", since=23)
def lower_rms_normalization(b: OpBinder, tb: TorchBuilder) -> List:
    stash_type = b.attr_int("stash_type", 1)
    if stash_type != 1:
        raise Refusal(f"value {stash_type} is not supported; supported: 1 (float statistics, as onnxruntime computes)", "attribute 'stash_type'")
    x_ND, scale_D, axis = checked_inputs(b, tb, OP)  # simplified_layer_normalization.py
    epsilon = b.attr_float("epsilon", 1e-5)
    broadcast = scale_is_broadcast(scale_D, x_ND, axis)  # onnxruntime's double path
    y_ND, _ = rms_normalize(tb, x_ND, scale_D, epsilon, range(axis, x_ND.rank), x_ND.dtype, lanes=0 if broadcast else LANES, in_double=broadcast)
    return [b.declared_result(tb, 0, y_ND, "Y")]
