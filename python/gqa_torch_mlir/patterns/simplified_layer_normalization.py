"""Lowering of ``SimplifiedLayerNormalization`` (RMSNorm), as onnxruntime's CPU kernel computes it.

onnxruntime registers the op in the default ONNX domain (onnxruntime-genai's
model builder emits it there).  Dimension letters:
  N   the dims before ``axis`` (one row each)
  D   the normalized dims, ``axis`` to the last (one dim with the default axis -1)

    Y = X / sqrt(mean(X^2 over D) + epsilon) * scale
    inv_std_var = 1 / sqrt(mean(X^2 over D) + epsilon), shaped [N..., 1...]

f16 and f32 inputs are computed in f32 and f64 in f64 (onnxruntime's kernel
widens f16 to float; ``stash_type`` 1 is that float statistic).  The helper
:func:`rms_normalize` is shared with SkipSimplifiedLayerNormalization.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..binder import OpBinder
from ..builder import Tensor, TorchBuilder
from ..registry import Refusal, onnx_op

# onnxruntime's CPU kernels take these (bf16 has no CPU kernel to check against).
SUPPORTED_DTYPES = ("f32", "f16", "f64")


@onnx_op("SimplifiedLayerNormalization", domain="", since=1)
def lower_simplified_layer_normalization(b: OpBinder, tb: TorchBuilder) -> List:
    x_ND = b.tensor(0, "X", required=True)
    scale_D = b.tensor(1, "scale", required=True)
    check_float_dtype(x_ND, "input 0 'X'")
    if scale_D.dtype != x_ND.dtype:
        raise Refusal(
            f"type {scale_D.dtype} differs from X's {x_ND.dtype}; supported: the same type "
            "(onnxruntime's CPU kernel reads scale as X's type)",
            "input 1 'scale'",
        )
    axis = read_axis(b, x_ND.rank)
    check_scale_shape(scale_D, x_ND.shape[axis:], "input 1 'scale'")
    stash_type = b.attr_int("stash_type", 1)
    if stash_type != 1:
        raise Refusal(f"value {stash_type} is not supported; supported: 1 (float statistics)", "attribute 'stash_type'")
    epsilon = b.attr_float("epsilon", 1e-5)
    y_ND, inv_std_N1 = rms_normalize(tb, x_ND, scale_D, epsilon, range(axis, x_ND.rank), x_ND.dtype)
    results = [y_ND, inv_std_N1][: b.num_results]
    return [b.declared_result(tb, i, t) for i, t in enumerate(results)]


def check_float_dtype(t: Tensor, subject: str) -> None:
    if t.dtype not in SUPPORTED_DTYPES:
        raise Refusal(f"type {t.dtype} is not supported; supported: {', '.join(SUPPORTED_DTYPES)}", subject)


def read_axis(b: OpBinder, rank: int) -> int:
    axis = b.attr_int("axis", -1)
    if not -rank <= axis < rank:
        raise Refusal(f"value {axis} is out of range for a rank-{rank} input; supported: [-{rank}, {rank})", "attribute 'axis'")
    return axis % rank


def check_scale_shape(scale: Tensor, normalized: Sequence[Optional[int]], subject: str) -> None:
    """scale must have the normalized dims' shape (unknown dims match anything)."""
    fits = scale.rank == len(normalized) and all(s is None or d is None or s == d for s, d in zip(scale.shape, normalized))
    if not fits:
        want = "[" + ",".join("?" if d is None else str(d) for d in normalized) + "]"
        got = "[" + ",".join("?" if d is None else str(d) for d in scale.shape) + "]"
        raise Refusal(f"shape {got} is not supported; supported: the normalized dims of X, {want}", subject)


def compute_dtype(dtype: str) -> str:
    """The type onnxruntime's CPU kernel computes statistics in: f64 for f64, else f32."""
    return "f64" if dtype == "f64" else "f32"


def rms_normalize(tb: TorchBuilder, x: Tensor, scale: Tensor, epsilon: float, dims: Sequence[int], out_dtype: str) -> Tuple[Tensor, Tensor]:
    """``(x / sqrt(mean(x^2) + epsilon) * scale, 1 / sqrt(mean(x^2) + epsilon))`` over ``dims``.

    Computed in :func:`compute_dtype` of ``out_dtype`` (``x`` may already be
    wider, as a skip sum is); the normalized output is cast to ``out_dtype``,
    the inverse std to f32 (stash_type 1, the type ONNX declares for it),
    shaped [N..., 1...].
    """
    ct = compute_dtype(out_dtype)
    x = tb.to_dtype(x, ct)
    mean_square_N1 = tb.mean_dims(tb.mul(x, x), dims)  # [N..., D...] -> [N..., 1...]
    std_N1 = tb.sqrt(tb.add_float(mean_square_N1, epsilon))
    y = tb.mul(tb.div(x, std_N1), tb.to_dtype(scale, ct))  # x / std * scale, in onnxruntime's order
    inv_std_N1 = tb.div(tb.full_like(std_N1, 1.0), std_N1)
    return tb.to_dtype(y, out_dtype), tb.to_dtype(inv_std_N1, "f32")
