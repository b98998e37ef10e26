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
from .simplified_layer_normalization import (
    LANES,
    check_float_dtype,
    check_normalized_size,
    check_scale_shape,
    checked_like,
    read_axis,
    rms_normalize,
    scale_is_broadcast,
)

OP = "RMSNormalization"


@onnx_op("RMSNormalization", domain="", since=23)
def lower_rms_normalization(b: OpBinder, tb: TorchBuilder) -> List:
    x_ND = b.tensor(0, "X", required=True)
    scale_D = b.tensor(1, "scale", required=True)
    check_float_dtype(x_ND, "input 0 'X'")
    if scale_D.dtype != x_ND.dtype:
        raise Refusal(f"type {scale_D.dtype} differs from X's {x_ND.dtype}; supported: X's type (onnxruntime's CPU kernel)", "input 1 'scale'")
    stash_type = b.attr_int("stash_type", 1)
    if stash_type != 1:
        raise Refusal(f"value {stash_type} is not supported; supported: 1 (float statistics, as onnxruntime computes)", "attribute 'stash_type'")
    axis = read_axis(b, x_ND.rank)
    check_normalized_size(tb, x_ND, axis, OP)
    check_scale_shape(scale_D, x_ND.shape, "input 1 'scale'")
    scale_D = checked_like(tb, scale_D, x_ND, OP + ": input 1 'scale'")
    epsilon = b.attr_float("epsilon", 1e-5)
    broadcast = scale_is_broadcast(scale_D, x_ND, axis)  # onnxruntime's double path
    y_ND, _ = rms_normalize(tb, x_ND, scale_D, epsilon, range(axis, x_ND.rank), x_ND.dtype, lanes=0 if broadcast else LANES, in_double=broadcast)
    return [b.declared_result(tb, 0, y_ND, "Y")]
