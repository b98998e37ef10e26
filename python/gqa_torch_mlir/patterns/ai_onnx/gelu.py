"""Lowering of ``Gelu`` (opset 20), as onnxruntime's CPU kernel computes it.

torch-mlir lowers ``approximate = "tanh"`` through ``aten.gelu``, whose
linalg form is off the formula by up to ~5e-5 in f32 (Gemma's MLP uses it);
here both forms are spelled out with accurate ``tanh`` / ``erf``:

    tanh:  y = 0.5 * x * (1 + tanh(x * (C * x * x + B)))    B = sqrt(2/pi), C = 0.044715 * B
    none:  y = 0.5 * x * (1 + erf(x * sqrt(1/2)))

onnxruntime has a float kernel only (f16 graphs run it between casts), so
f16 is computed in f32 and rounded back.
"""

from __future__ import annotations

import math
from typing import List

from ...binder import OpBinder
from ...builder import TorchBuilder
from ...registry import Refusal, onnx_op

# onnxruntime's constants, as float32 values.
TANH_B = 0.7978845608028654  # sqrt(2 / pi)
TANH_C = 0.035677408136300125  # 0.044715 * sqrt(2 / pi)
APPROXIMATIONS = ("none", "tanh")
DTYPES = ("f32", "f16", "f64")


@onnx_op("Gelu", domain="", since=20)
def lower_gelu(b: OpBinder, tb: TorchBuilder) -> List:
    x = b.tensor(0, "X", required=True)
    if x.dtype not in DTYPES:
        raise Refusal(f"type {x.dtype} is not supported; supported: {', '.join(DTYPES)}", "input 0 'X'")
    approximate = b.attr_str("approximate", "none")
    if approximate not in APPROXIMATIONS:
        raise Refusal(f"value '{approximate}' is not supported; supported: 'none', 'tanh'", "attribute 'approximate'")
    ct = "f64" if x.dtype == "f64" else "f32"
    xc = tb.to_dtype(x, ct)
    if approximate == "tanh":
        inner = tb.mul(xc, tb.add_float(tb.mul_scalar(tb.mul(xc, xc), TANH_C), TANH_B))  # x * (C*x*x + B)
        t = tb.tanh(inner)
    else:
        t = tb.erf(tb.mul_scalar(xc, math.sqrt(0.5)))
    y = tb.mul(tb.mul_scalar(xc, 0.5), tb.add_float(t, 1.0))  # 0.5 * x * (t + 1)
    return [b.declared_result(tb, 0, tb.to_dtype(y, x.dtype))]
