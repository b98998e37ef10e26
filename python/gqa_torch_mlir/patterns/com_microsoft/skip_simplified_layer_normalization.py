"""Lowering of onnxruntime's ``com.microsoft.SkipSimplifiedLayerNormalization`` (residual add + RMSNorm).

Dimension letters (onnxruntime's CPU kernel is the spec):
  B   batch (absent for a rank-2 input)      S   sequence (rows)
  D   hidden size (the normalized last dim)

    sum    = input + skip (+ bias)                       [B,S,D]; skip may be [S,D] or [1,S,D] (broadcast)
    output = sum / sqrt(mean(sum^2 over D) + epsilon) * gamma
    outputs: 0 output, 1 mean (0 for the simplified norm), 2 inv_std_var [B,S,1] (float),
             3 input_skip_bias_sum (the sum, in the input type)

f16 inputs are summed and normalized in f32, as onnxruntime's kernel does,
and the sum is rounded back to f16 for output 3.
"""

from __future__ import annotations

from typing import List

from ...binder import OpBinder
from ...builder import Tensor, TorchBuilder
from ...registry import Refusal, onnx_op
from ..ai_onnx.simplified_layer_normalization import check_float_dtype, check_normalized_size, checked_like, compute_dtype, rms_normalize

# onnxruntime's default for SkipLayerNormalization / SkipSimplifiedLayerNormalization.
DEFAULT_EPSILON = 1e-12
_OP = "SkipSimplifiedLayerNormalization"


@onnx_op("SkipSimplifiedLayerNormalization", domain="com.microsoft", since=1)
def lower_skip_simplified_layer_normalization(b: OpBinder, tb: TorchBuilder) -> List:
    input_BSD, skip_BSD, gamma_D, bias_D = read_inputs(b)
    epsilon = b.attr_float("epsilon", DEFAULT_EPSILON)
    if not epsilon >= 0:  # NaN too, as onnxruntime's check
        raise Refusal(f"value {epsilon} is not supported; supported: >= 0", "attribute 'epsilon'")
    check_normalized_size(tb, input_BSD, input_BSD.rank - 1, _OP, "input 0 'input'")  # hidden size >= 1, as onnxruntime
    skip_BSD = checked_like(tb, skip_BSD, input_BSD, _OP + ": input 1 'skip'")
    gamma_D = checked_like(tb, gamma_D, input_BSD, _OP + ": input 2 'gamma'")
    if bias_D is not None:
        bias_D = checked_like(tb, bias_D, input_BSD, _OP + ": input 3 'bias'")
    dtype, ct = input_BSD.dtype, compute_dtype(input_BSD.dtype)
    sum_BSD = tb.add(tb.to_dtype(input_BSD, ct), tb.to_dtype(skip_BSD, ct))  # [B,S,D] + [B|1,S,D] | [S,D] | [D]
    if bias_D is not None:
        sum_BSD = tb.add(sum_BSD, tb.to_dtype(bias_D, ct))  # + [D]
    output_BSD, inv_std_BS1 = rms_normalize(tb, sum_BSD, gamma_D, epsilon, [input_BSD.rank - 1], dtype)
    mean_BS1 = tb.full_like(inv_std_BS1, 0.0)  # the simplified norm has no centering term
    results = [output_BSD, mean_BS1, inv_std_BS1, tb.to_dtype(sum_BSD, dtype)]
    return [b.declared_result(tb, i, t) for i, t in enumerate(results[: b.num_results])]


def read_inputs(b: OpBinder):
    """input [B,S,D] or [S,D], skip broadcastable to it over leading dims, gamma [D], optional bias [D]."""
    if b.has_input(4):
        raise Refusal("is not an input of SkipSimplifiedLayerNormalization (input, skip, gamma, bias)", "input 4")
    x = b.tensor(0, "input", required=True)
    skip = b.tensor(1, "skip", required=True)
    gamma = b.tensor(2, "gamma", required=True)
    bias = b.tensor(3, "bias")
    check_float_dtype(x, "input 0 'input'")
    if x.rank not in (2, 3):
        raise Refusal(f"rank {x.rank} is not supported; supported: 2 or 3 (as onnxruntime)", "input 0 'input'")
    D = x.shape[-1]
    for slot, name, t in ((1, "skip", skip), (2, "gamma", gamma), (3, "bias", bias)):
        if t is None:
            continue
        if t.dtype != x.dtype:
            raise Refusal(f"type {t.dtype} differs from input's {x.dtype}; supported: the same type", f"input {slot} '{name}'")
        if t.shape[-1] is not None and D is not None and t.shape[-1] != D:
            raise Refusal(f"last dim {t.shape[-1]} is not the hidden size {D}", f"input {slot} '{name}'")
    for slot, name, t in ((2, "gamma", gamma), (3, "bias", bias)):
        if t is not None and t.rank != 1:
            raise Refusal(f"rank {t.rank} is not supported; supported: 1 ([hidden size])", f"input {slot} '{name}'")
    check_skip_shape(x, skip)
    return x, skip, gamma, bias


def check_skip_shape(x: Tensor, skip: Tensor) -> None:
    """skip is the input's shape, or broadcasts over its leading dims ([S,D], [1,S,D])."""
    lead = x.shape[-skip.rank :] if skip.rank <= x.rank else None
    fits = lead is not None and all(
        s is None or d is None or s == d or (s == 1 and i < skip.rank - 2) for i, (s, d) in enumerate(zip(skip.shape, lead))
    )
    if not fits or skip.rank < 2:
        raise Refusal(
            f"shape {list(skip.shape)} does not broadcast to input {list(x.shape)}; supported: the input's shape, [S,D] or [1,S,D]",
            "input 1 'skip'",
        )
