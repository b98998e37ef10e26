"""Lowering of ``SimplifiedLayerNormalization`` (RMSNorm), as onnxruntime's CPU kernel computes it.

onnxruntime registers the op in the default ONNX domain (onnxruntime-genai's
model builder emits it there).  Dimension letters:
  N   the dims before ``axis`` (one row each)
  D   the normalized dims, ``axis`` to the last (one dim with the default axis -1)

    Y = X / sqrt(mean(X^2 over D) + epsilon) * scale      (scale broadcast to X, NumPy-style, as onnxruntime)
    inv_std_var = 1 / sqrt(mean(X^2 over D) + epsilon), shaped [N..., 1...]

f16 and f32 inputs are computed in f32 and f64 in f64 (onnxruntime's kernel
widens f16 to float; ``stash_type`` 1 is that float statistic).  The helper
:func:`rms_normalize` is shared with SkipSimplifiedLayerNormalization.

A scale with fewer elements than a row (broadcast) takes the kernel's
other path: everything in double, rounded once.

Rounding, as onnxruntime 1.32's x86 CPU kernels round (bit for bit on an AVX2
host, measured): this op sums the squares in 8 lanes (element i into lane
i mod 8, the last D mod 8 elements added one by one after the lanes are
reduced as halves, 8 -> 4 -> 2 -> 1) and multiplies by 1/std; the skip
variant sums them in element order and divides by std.  Both orders are
written out in the ops (:func:`lane_sum_of_squares`), so every backend keeps
them; what cannot be written is onnxruntime's fused multiply-add in the lanes
(each square rounded before it is added here), which leaves a last-bit
difference in about one row in ten (docs/limits.md).
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

from ...binder import OpBinder
from ...builder import Tensor, TorchBuilder
from ...registry import Refusal, onnx_op

# onnxruntime's CPU kernels take these (bf16 has no CPU kernel to check against).
SUPPORTED_DTYPES = ("f32", "f16", "f64")
# onnxruntime reads stash_type as the inv_std_var element type: 1 (float) and 0 give the same float statistics.
STASH_TYPES = (1, 0)
_OP = "SimplifiedLayerNormalization"


@onnx_op("SimplifiedLayerNormalization", domain="", since=1)
def lower_simplified_layer_normalization(b: OpBinder, tb: TorchBuilder) -> List:
    x_ND, scale_D, axis = checked_inputs(b, tb, _OP)
    stash_type = b.attr_int("stash_type", 1)
    inv_std_requested = b.num_results > 1 and b.result_type_text(1) != "!torch.none"
    if stash_type not in STASH_TYPES and inv_std_requested:  # it types inv_std_var only (Y alone: any value)
        raise Refusal(
            f"value {stash_type} is not supported; supported: 1 or 0 (float statistics; onnxruntime's CPU kernel computes both alike)",
            "attribute 'stash_type'",
        )
    epsilon = b.attr_float("epsilon", 1e-5)
    broadcast = scale_is_broadcast(scale_D, x_ND, axis)
    y_ND, inv_std_N1 = rms_normalize(tb, x_ND, scale_D, epsilon, range(axis, x_ND.rank), x_ND.dtype, lanes=0 if broadcast else LANES,
                                     in_double=broadcast)
    results = [y_ND, inv_std_N1][: b.num_results]
    return [b.declared_result(tb, i, t) for i, t in enumerate(results)]


def checked_inputs(b: OpBinder, tb: TorchBuilder, op: str) -> Tuple[Tensor, Tensor, int]:
    """X [N...,D...], scale (X's type, broadcast to X, checked) and the first normalized dim."""
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
    check_normalized_size(tb, x_ND, axis, op)
    check_scale_shape(scale_D, x_ND.shape, "input 1 'scale'")
    return x_ND, checked_like(tb, scale_D, x_ND, op + ": input 1 'scale'"), axis


def check_float_dtype(t: Tensor, subject: str) -> None:
    if t.dtype not in SUPPORTED_DTYPES:
        raise Refusal(f"type {t.dtype} is not supported; supported: {', '.join(SUPPORTED_DTYPES)}", subject)


def read_axis(b: OpBinder, rank: int) -> int:
    axis = b.attr_int("axis", -1)
    if not -rank <= axis < rank:
        raise Refusal(f"value {axis} is out of range for a rank-{rank} input; supported: [-{rank}, {rank})", "attribute 'axis'")
    return axis % rank


def check_normalized_size(tb: TorchBuilder, x: Tensor, axis: int, op: str = _OP, subject: str = "input 0 'X'") -> None:
    """x.shape[axis:] must hold at least one element (onnxruntime rejects an empty row)."""
    for d in range(axis, x.rank):
        if x.shape[d] == 0:
            raise Refusal(f"dimension {d} is 0; supported: normalized dims (axis {axis} on) of size >= 1", subject)
        if x.shape[d] is None:
            tb.runtime_assert(tb.dim_le(1, tb.size(x, d)), f"{op}: {subject} dimension {d} is normalized and must be >= 1 (onnxruntime rejects an empty row)")


def check_scale_shape(scale: Tensor, x_shape: Sequence[Optional[int]], subject: str) -> None:
    """scale must broadcast to X as NumPy does (right-aligned, each dim 1 or X's; unknown dims match anything)."""
    lead = len(x_shape) - scale.rank
    fits = lead >= 0 and all(s is None or d is None or s in (1, d) for s, d in zip(scale.shape, x_shape[lead:]))
    if not fits:
        want = "[" + ",".join("?" if d is None else str(d) for d in x_shape) + "]"
        got = "[" + ",".join("?" if d is None else str(d) for d in scale.shape) + "]"
        raise Refusal(f"shape {got} is not supported; supported: a shape that broadcasts to X's, {want} (as onnxruntime)", subject)


def checked_like(tb: TorchBuilder, t: Tensor, x: Tensor, what: str) -> Tensor:
    """``t`` (right-aligned to ``x``) with each dim only known at run time checked to be x's.

    A dim of ``t`` that is dynamic while x's is static is refined to it; a dim
    of ``x`` that is dynamic is compared with ``t``'s (a static 1 of ``t``
    broadcasts).  torch-mlir's broadcasts trust the types otherwise: a short
    ``t`` was read out of bounds on iree-cpu.
    """
    lead = x.rank - t.rank
    refined = {i: x.shape[lead + i] for i in range(t.rank) if t.shape[i] is None and x.shape[lead + i] is not None}
    t = tb.refine(t, refined, what, " (onnxruntime rejects it)")
    for i in range(t.rank):
        if x.shape[lead + i] is None and t.shape[i] != 1:
            tb.check_dim(t, i, tb.size(x, lead + i), f"{what} dimension {i} must be the input's dimension {lead + i} (onnxruntime rejects it)")
    return t


def compute_dtype(dtype: str) -> str:
    """The type onnxruntime's CPU kernel computes statistics in: f64 for f64, else f32."""
    return "f64" if dtype == "f64" else "f32"


#: onnxruntime's f32 SimplifiedLayerNormalization sums squares in this many lanes (its AVX2 kernel).
LANES = 8


def scale_is_broadcast(scale: Tensor, x: Tensor, axis: int) -> bool:
    """Whether scale holds fewer elements than a normalized row (static sizes; dynamic ones count as a row).

    onnxruntime's kernel then takes another path: the row computed in double, rounded once.
    """
    row = x.shape[axis:]
    return None not in row and None not in scale.shape and math.prod(scale.shape) != math.prod(row)


def rms_normalize(tb: TorchBuilder, x: Tensor, scale: Tensor, epsilon: float, dims: Sequence[int], out_dtype: str,
                  lanes: int = 0, in_double: bool = False) -> Tuple[Tensor, Tensor]:
    """``(x * scale / sqrt(mean(x^2) + epsilon), 1 / sqrt(mean(x^2) + epsilon))`` over ``dims``.

    Computed in :func:`compute_dtype` of ``out_dtype`` (``x`` may already be
    wider, as a skip sum is); the normalized output is cast to ``out_dtype``,
    the inverse std to f32 (stash_type 1, the type ONNX declares for it),
    shaped [N..., 1...].  ``lanes``: sum the squares in that many lanes and
    multiply by 1/std (onnxruntime's SimplifiedLayerNormalization, f32
    compute and static normalized dims, read as one row); 0: in element order and
    divide by std (its SkipSimplifiedLayerNormalization).  ``in_double``: all of it
    in f64, rounded once (its path for a broadcast scale, :func:`scale_is_broadcast`).
    """
    ct = "f64" if in_double else compute_dtype(out_dtype)
    x = tb.to_dtype(x, ct)
    first = min(dims)
    row_dims = x.shape[first:]  # the normalized dims, axis to the last
    in_lanes = lanes and ct == "f32" and None not in row_dims
    if in_lanes:
        D = math.prod(row_dims)
        x_row = x if len(row_dims) == 1 else tb.flatten(x, first, x.rank - 1)  # [N...,D...] -> [N...,D]
        mean_square_N1 = tb.div_scalar(lane_sum_of_squares(tb, x_row, lanes), float(D))  # -> [N...,1]
        for _ in row_dims[1:]:
            mean_square_N1 = tb.unsqueeze(mean_square_N1, mean_square_N1.rank)  # -> [N...,1,1...]
    else:
        mean_square_N1 = tb.mean_dims(tb.mul(x, x), dims)  # [N..., D...] -> [N..., 1...]
    std_N1 = tb.sqrt(tb.add_float(mean_square_N1, epsilon))
    inv_std_N1 = tb.div(tb.full_like(std_N1, 1.0), std_N1)
    if in_lanes:
        y = tb.mul(tb.mul(x, inv_std_N1), tb.to_dtype(scale, ct))  # x * (1/std) * scale
    else:
        y = tb.mul(tb.div(x, std_N1), tb.to_dtype(scale, ct))  # x / std * scale
    return tb.to_dtype(y, out_dtype), tb.to_dtype(inv_std_N1, "f32")


def lane_sum_of_squares(tb: TorchBuilder, x_ND: Tensor, lanes: int) -> Tensor:
    """Sum of squares over the (static) last dim D, in onnxruntime's order: [N...,D] -> [N...,1].

    Element i < K = D - D mod lanes goes to lane i mod lanes (each lane summed
    in element order); the lanes are reduced as halves; the last D - K
    squares are then added one by one.
    """
    D = x_ND.shape[-1]
    K = D - D % lanes
    sq_ND = tb.mul(x_ND, x_ND)
    last = x_ND.rank - 1
    if K:
        rows_NRL = tb.unflatten(tb.slice(sq_ND, last, 0, K), last, [K // lanes, lanes])  # [N...,K] -> [N...,K/L,L]
        acc_NL = tb.flatten(tb.sum_dim(rows_NRL, last), last, last + 1)  # -> [N...,1,L] -> [N...,L], each lane in order
        while acc_NL.shape[-1] > 1:  # halves: [N...,L] -> [N...,L/2] ... -> [N...,1]
            half = acc_NL.shape[-1] // 2
            acc_NL = tb.add(tb.slice(acc_NL, last, 0, half), tb.slice(acc_NL, last, half, 2 * half))
        total_N1 = acc_NL
    else:
        total_N1 = tb.full_like(tb.slice(sq_ND, last, 0, 1), 0.0)  # [N...,1] zeros
    for i in range(K, D):
        total_N1 = tb.add(total_N1, tb.slice(sq_ND, last, i, i + 1))  # + x[i]^2, in order
    return total_N1
