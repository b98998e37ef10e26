"""Attention arithmetic shared by GroupQueryAttention (com.microsoft) and Attention (ai.onnx)."""

from __future__ import annotations

from ...builder import Dim, Tensor, TorchBuilder


def unless_empty(tb: TorchBuilder, query_BHSDh: Tensor, key_BHkvTDh: Tensor, attend) -> Tensor:
    """``attend(tb)``, skipped for zeros [B,H,S,Dh] when a dynamic B, S or T is 0 at run time.

    torch-mlir's loop lowering of SDPA (tm_tensor.attention) reads the first
    score before looping over them: out of bounds of an empty score buffer.
    """
    sizes = (tb.size(query_BHSDh, 0), tb.size(query_BHSDh, 2), tb.size(key_BHkvTDh, 2))
    dynamic = [d for d in sizes if not isinstance(d, int)]  # static sizes are >= 1 (empty ones are refused)
    if not dynamic:
        return attend(tb)
    elements = dynamic[0]
    for d in dynamic[1:]:
        elements = tb.dim_mul(elements, d)  # B*S*T (its dynamic factors)
    empty = tb.dim_eq(elements, 0)
    return tb.if_else(empty, query_BHSDh.shape, query_BHSDh.dtype, lambda inner: inner.full_like(query_BHSDh, 0.0), attend)


_TANH_SERIES_BELOW = 0.05  # |y| where the odd series to y^7 is exact to f32 (next term ~2e-14 relative)


def soft_cap(tb: TorchBuilder, scores: Tensor, cap: float) -> Tensor:
    """``cap * tanh(x / cap)``, with tanh accurate to f32 for small arguments.

    The refbackend's tanh loses the relative precision of small arguments
    (tanh(1e-6) comes out 1.013e-6, tanh(1e-30) 0), which a large cap then
    multiplies back into the scores: below |y| = 0.05 tanh's odd Taylor
    series y - y^3/3 + 2y^5/15 - 17y^7/315 is used instead.
    """
    y = tb.mul_scalar(scores, 1.0 / cap)
    y2 = tb.mul(y, y)
    inner = tb.add_float(tb.mul_scalar(y2, -17.0 / 315.0), 2.0 / 15.0)  # 2/15 - 17y^2/315
    inner = tb.add_float(tb.mul(y2, inner), -1.0 / 3.0)  # -1/3 + y^2 (...)
    series = tb.mul(y, tb.add_float(tb.mul(y2, inner), 1.0))  # y (1 + y^2 (...))
    small = tb.lt_float(tb.abs(y), _TANH_SERIES_BELOW)
    return tb.mul_scalar(tb.where(small, series, tb.tanh(y)), cap)


def static_or_neg1(d: Dim) -> int:
    """A size for ``unflatten``: the static size, or -1 (inferred) for a dynamic one."""
    return d if isinstance(d, int) else -1
