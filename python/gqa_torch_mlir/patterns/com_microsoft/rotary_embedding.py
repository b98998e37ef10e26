"""Lowering of ``com.microsoft.RotaryEmbedding``, as onnxruntime's CPU kernel computes it.

torch-mlir's own conversion binds this op too, and computes it wrongly (rows
after the first rotated at the wrong angles) or fails to compile (interleaved);
dispatch.py sends a node here when input 1 is int64 position_ids, else to
the standard op's lowering (ai_onnx/rotary_embedding.py), whose pieces this
one shares.  Dimension letters: B batch, N heads, S tokens, Dh head size,
R rotated dims, M rows of the cos/sin caches.

    input [B,S,N*Dh] or [B,N,S,Dh]
    position_ids [B,S], or one element: the first token's position (token s at p + s)
    cos/sin [M,R/2]
"""

from __future__ import annotations

from typing import List

from ...binder import OpBinder
from ...builder import Tensor, TorchBuilder
from ...registry import Refusal, onnx_op
from ..ai_onnx.rotary_embedding import SUPPORTED_DTYPES, check_cache, checked_positions, heads_first, in_cache, read_flag
from ..common.rotary import RotaryTables

OP = "com.microsoft.RotaryEmbedding"


@onnx_op("RotaryEmbedding", domain="com.microsoft", since=1)
def lower_contrib_rotary_embedding(b: OpBinder, tb: TorchBuilder) -> List:
    x = b.tensor(0, "input", required=True)
    position_ids = b.tensor(1, "position_ids", required=True)
    cos, sin = b.tensor(2, "cos_cache", required=True), b.tensor(3, "sin_cache", required=True)
    if x.dtype not in SUPPORTED_DTYPES:
        raise Refusal(f"type {x.dtype} is not supported; supported: {', '.join(SUPPORTED_DTYPES)}", "input 0 'input'")
    if read_flag(b, "is_packed_batching"):
        raise Refusal("value 1 is not supported; supported: 0 (onnxruntime's CPU kernel)", "attribute 'is_packed_batching'")
    x_BNSDh = heads_first(tb, x, heads_of(b, x, cos))
    Dh = x_BNSDh.shape[3]
    R = b.attr_int("rotary_embedding_dim", 0) or Dh
    if not 0 < R <= Dh or R % 2:
        raise Refusal(f"value {R} is not supported; supported: 0 (the head size, {Dh}) or an even size <= {Dh}", "attribute 'rotary_embedding_dim'")
    B, S = tb.size(x_BNSDh, 0), tb.size(x_BNSDh, 2)
    for slot, t, name in ((2, cos, "cos_cache"), (3, sin, "sin_cache")):
        check_cache(tb, t, slot, name, x.dtype, R, False, B, S)
    rows_BS = positions(tb, position_ids, cos, B, S)
    cos_B1SR2, sin_B1SR2 = (tb.unsqueeze(tb.gather_rows(t, rows_BS), 1) for t in (cos, sin))  # [M,R/2] at [B,S] -> [B,1,S,R/2]
    y_BNSDh = RotaryTables(cos_B1SR2, sin_B1SR2, bool(read_flag(b, "interleaved"))).apply(tb, x_BNSDh)
    y = y_BNSDh if x.rank == 4 else tb.flatten(tb.transpose(y_BNSDh, 1, 2), 2, 3)  # [B,N,S,Dh] -> [B,S,N,Dh] -> [B,S,N*Dh]
    return [b.declared_result(tb, 0, y, "output")]


def heads_of(b: OpBinder, x: Tensor, cos: Tensor) -> int:
    """3-D input: num_heads, or without it hidden / (2 * cos_cache's width) (full rotation)."""
    num_heads = b.attr_int("num_heads", 0)
    if b.attr_int("rotary_embedding_dim", 0) and num_heads <= 0:
        raise Refusal("is required with rotary_embedding_dim (onnxruntime rejects it otherwise)", "attribute 'num_heads'")
    if x.rank != 3 or num_heads > 0:
        return num_heads
    if x.shape[2] is None or cos.rank != 2 or not cos.shape[1]:
        raise Refusal("cannot be derived (a dynamic hidden size or cos_cache width); supported: num_heads given", "attribute 'num_heads'")
    return x.shape[2] // (2 * cos.shape[1])


def positions(tb: TorchBuilder, position_ids: Tensor, cos_MR2: Tensor, B, S) -> Tensor:
    """[B,S] rows of the caches: position_ids, or its one element plus s."""
    if position_ids.rank == 2:
        return checked_positions(tb, position_ids, cos_MR2, B, S, OP, slot=1)
    if position_ids.rank > 1 or position_ids.shape[0] not in (1, None) or position_ids.dtype != "si64":
        raise Refusal(f"is {position_ids.dtype} {list(position_ids.shape)}; supported: int64 [B,S] or one element", "input 1 'position_ids'")
    if position_ids.rank == 1 and position_ids.shape[0] is None:
        tb.check_dim(position_ids, 0, 1, f"{OP}: input 1 'position_ids' must be [B,S] or hold one element")
    first_11 = tb.unsqueeze(position_ids, 0) if position_ids.rank == 1 else tb.unsqueeze(tb.unsqueeze(position_ids, 0), 0)  # -> [1,1]
    position_1S = tb.add(first_11, tb.arange(S))  # [1,1] + [S] -> [1,S]
    position_BS = tb.expand(position_1S, [B, S])  # -> [B,S]
    return in_cache(tb, position_BS, cos_MR2, S, OP, "input 2 'cos_cache'")
