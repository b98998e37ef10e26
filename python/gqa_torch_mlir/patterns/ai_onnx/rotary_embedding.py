"""Lowering of the standard ``RotaryEmbedding`` (opset 23), as onnxruntime's CPU kernel computes it.

The contrib ``com.microsoft.RotaryEmbedding`` arrives under the same name;
dispatch.py tells them apart (input 1 is a float cos_cache here), so only
standard nodes reach this lowering.  Dimension letters: B batch, N heads,
S tokens, Dh head size, R rotated dims (``rotary_embedding_dim``, else Dh),
M rows of the cos/sin caches.

    X [B,N,S,Dh] (or [B,S,N*Dh] with num_heads)
    cos/sin [M,R/2] at position_ids [B,S], or [B,S,R/2] without position_ids
    Y = X with its first R dims rotated (halves, or interleaved pairs)
"""

from __future__ import annotations

from typing import List

from ...binder import OpBinder
from ...builder import Tensor, TorchBuilder
from ...registry import Refusal, onnx_op
from ..common.rotary import RotaryTables

OP = "RotaryEmbedding"
# onnxruntime's CPU kernel is registered for these (bf16 has no CPU kernel to check against).
SUPPORTED_DTYPES = ("f32", "f16")


@onnx_op("RotaryEmbedding", domain="", since=23)
def lower_rotary_embedding(b: OpBinder, tb: TorchBuilder) -> List:
    x = b.tensor(0, "X", required=True)
    if x.dtype not in SUPPORTED_DTYPES:
        raise Refusal(f"type {x.dtype} is not supported; supported: {', '.join(SUPPORTED_DTYPES)} (onnxruntime's CPU kernel)", "input 0 'X'")
    if x.rank == 3 and b.attr_int("num_heads", 0) <= 0:
        raise Refusal(f"value {b.attr_int('num_heads', 0)} is not supported for a 3-D X; supported: the number of heads, >= 1", "attribute 'num_heads'")
    x_BNSDh = heads_first(tb, x, b.attr_int("num_heads", 0))
    Dh = x_BNSDh.shape[3]
    R = rotated_dims(b, Dh)
    tables = RotaryTables(*cos_sin_rows(b, tb, x_BNSDh, R), bool(read_flag(b, "interleaved")))
    y_BNSDh = tables.apply(tb, x_BNSDh)
    y = y_BNSDh if x.rank == 4 else tb.flatten(tb.transpose(y_BNSDh, 1, 2), 2, 3)  # [B,N,S,Dh] -> [B,S,N,Dh] -> [B,S,N*Dh]
    return [b.declared_result(tb, 0, y, "Y")]


def read_flag(b: OpBinder, name: str) -> int:
    value = b.attr_int(name, 0)
    if value not in (0, 1):
        raise Refusal(f"value {value} is not supported; supported: 0 or 1", f"attribute '{name}'")
    return value


def heads_first(tb: TorchBuilder, x: Tensor, num_heads: int) -> Tensor:
    """X as [B,N,S,Dh]: a 4-D input is (num_heads is the 3-D form's); a 3-D [B,S,N*Dh] is split into num_heads."""
    if x.rank == 4:
        return x
    if x.rank != 3:
        raise Refusal(f"rank {x.rank} is not supported; supported: 3 ([B,S,N*Dh]) or 4 ([B,N,S,Dh])", "input 0 'X'")
    hidden = x.shape[2]
    if hidden is None:
        raise Refusal("dimension 2 is dynamic; supported: a static hidden size with a 3-D X", "input 0 'X'")
    if hidden % num_heads:
        raise Refusal(f"dimension 2 ({hidden}) is not a multiple of num_heads ({num_heads})", "input 0 'X'")
    x_BSND = tb.unflatten(x, 2, [num_heads, hidden // num_heads])  # [B,S,N*Dh] -> [B,S,N,Dh]
    return tb.transpose(x_BSND, 1, 2)  # -> [B,N,S,Dh]


def rotated_dims(b: OpBinder, Dh) -> int:
    if Dh is None:
        raise Refusal("the head size is dynamic; supported: a static head size", "input 0 'X'")
    R = b.attr_int("rotary_embedding_dim", 0) or Dh
    if not 0 < R <= Dh or R % 2:
        raise Refusal(f"value {R} is not supported; supported: 0 (the head size, {Dh}) or an even size <= {Dh}", "attribute 'rotary_embedding_dim'")
    return R


def cos_sin_rows(b: OpBinder, tb: TorchBuilder, x_BNSDh: Tensor, R: int):
    """cos and sin as [B,1,S,R/2]: rows of [M,R/2] caches at position_ids, or the given [B,S,R/2]."""
    cos, sin = b.tensor(1, "cos_cache", required=True), b.tensor(2, "sin_cache", required=True)
    position_ids = b.tensor(3, "position_ids")
    B, S = tb.size(x_BNSDh, 0), tb.size(x_BNSDh, 2)
    for slot, t, name in ((1, cos, "cos_cache"), (2, sin, "sin_cache")):
        check_cache(tb, t, slot, name, x_BNSDh.dtype, R, position_ids is None, B, S)
    if position_ids is None:
        return tb.unsqueeze(cos, 1), tb.unsqueeze(sin, 1)  # [B,S,R/2] -> [B,1,S,R/2]
    rows_BS = checked_positions(tb, position_ids, cos, B, S)
    if sin.shape[0] is None or sin.shape[0] != cos.shape[0]:
        tb.check_dim(sin, 0, tb.size(cos, 0), f"{OP}: input 2 'sin_cache' must have as many rows as cos_cache (onnxruntime reads both)")
    return tuple(tb.unsqueeze(tb.gather_rows(t, rows_BS), 1) for t in (cos, sin))  # [M,R/2] at [B,S] -> [B,1,S,R/2]


def check_cache(tb: TorchBuilder, t: Tensor, slot: int, name: str, dtype: str, R: int, per_token: bool, B, S) -> None:
    subject = f"input {slot} '{name}'"
    if t.dtype != dtype:
        raise Refusal(f"type {t.dtype} differs from X's {dtype}; supported: X's type", subject)
    want_rank = 3 if per_token else 2
    form = "[B,S,R/2] without position_ids" if per_token else "[M,R/2] with position_ids"
    if t.rank != want_rank:
        raise Refusal(f"rank {t.rank} is not supported; supported: {form}", subject)
    if t.shape[-1] is not None and t.shape[-1] != R // 2:
        raise Refusal(f"last dimension {t.shape[-1]} is not rotary_embedding_dim / 2 ({R // 2})", subject)
    if t.shape[-1] is None:
        tb.check_dim(t, t.rank - 1, R // 2, f"{OP}: {subject} last dimension must be rotary_embedding_dim / 2 ({R // 2})")
    if per_token:
        for d, size, what in ((0, B, "batch size"), (1, S, "sequence length")):
            if isinstance(size, int) and isinstance(t.shape[d], int) and size != t.shape[d]:
                raise Refusal(f"dimension {d} ({t.shape[d]}) is not X's {what} ({size})", subject)
            tb.check_dim(t, d, size, f"{OP}: {subject} dimension {d} must be X's {what}")


def checked_positions(tb: TorchBuilder, position_ids: Tensor, cos_MR2: Tensor, B, S, op: str = OP, slot: int = 3) -> Tensor:
    """position_ids [B,S], checked to lie in [0, M) and clamped there (the read stays in bounds)."""
    subject = f"input {slot} 'position_ids'"
    if position_ids.rank != 2:
        raise Refusal(f"rank {position_ids.rank} is not supported; supported: [B,S]", subject)
    if position_ids.dtype != "si64":
        raise Refusal(f"type {position_ids.dtype} is not supported; supported: int64", subject)
    for d, size, what in ((0, B, "batch size"), (1, S, "sequence length")):
        if isinstance(size, int) and isinstance(position_ids.shape[d], int) and size != position_ids.shape[d]:
            raise Refusal(f"dimension {d} ({position_ids.shape[d]}) is not X's {what} ({size})", subject)
        tb.check_dim(position_ids, d, size, f"{op}: {subject} dimension {d} must be X's {what}")
    return in_cache(tb, position_ids, cos_MR2, S, op)


def in_cache(tb: TorchBuilder, position_BS: Tensor, cos_MR2: Tensor, S, op: str = OP, cos_subject: str = "input 1 'cos_cache'") -> Tensor:
    """Positions checked to lie in [0, M), M >= S (onnxruntime rejects others), and clamped there."""
    M = tb.size(cos_MR2, 0)
    if isinstance(M, int) and isinstance(S, int) and M < S:
        raise Refusal(f"has {M} rows, fewer than the sequence length {S} (onnxruntime rejects it)", cos_subject)
    if not (isinstance(M, int) and isinstance(S, int)):
        tb.runtime_assert(tb.dim_le(S, M), f"{op}: {cos_subject} must have at least as many rows as the sequence length (onnxruntime rejects it)")
    last = tb.dim_sub(M, 1)
    tb.runtime_check(tb.in_range(position_BS, 0, last), f"{op}: position_ids must lie in [0, cos_cache rows)")
    return tb.clamp_int(position_BS, 0, last)
