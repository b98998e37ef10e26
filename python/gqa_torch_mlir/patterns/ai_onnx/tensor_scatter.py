"""Lowering of ``TensorScatter`` (opset 24): the update's rows written into the cache at each batch row's index.

    past_cache [B,D1..,M,..Dn]   update [B,D1..,S,..Dn] (S on ``axis``)   write_indices [B] (absent: 0)
    present[b,..,(w[b] + s) (mod M when circular),..] = update[b,..,s,..]; every other entry is past_cache's

Checked at run time as onnxruntime checks (it rejects the others): S <= M,
w[b] >= 0, and in linear mode w[b] + S <= M; the written rows are clamped
into [0, M) whatever the indices hold, so the scatter stays in bounds.
"""

from __future__ import annotations

from typing import List

from ...binder import OpBinder
from ...builder import Tensor, TorchBuilder
from ...registry import Refusal, onnx_op

OP = "TensorScatter"
MODES = ("linear", "circular")


@onnx_op("TensorScatter", domain="", since=24)
def lower_tensor_scatter(b: OpBinder, tb: TorchBuilder) -> List:
    past, update = b.tensor(0, "past_cache", required=True), b.tensor(1, "update", required=True)
    mode = b.attr_str("mode", "linear")
    if mode not in MODES:
        raise Refusal(f"value '{mode}' is not supported; supported: 'linear' or 'circular'", "attribute 'mode'")
    axis = read_axis(b, past.rank)
    check_shapes(tb, past, update, axis)
    M, S, B = tb.size(past, axis), tb.size(update, axis), tb.size(past, 0)
    write_B = write_indices(b, tb, B)
    rows_BS = written_rows(tb, write_B, M, S, mode)
    index = tb.expand(row_index(tb, rows_BS, update.rank, axis), [tb.size(update, d) for d in range(update.rank)])  # -> update's shape
    return [b.declared_result(tb, 0, tb.scatter_src(past, axis, index, update), "present_cache")]


def read_axis(b: OpBinder, rank: int) -> int:
    axis = b.attr_int("axis", -2)
    if not -rank <= axis < rank or axis % rank == 0:
        raise Refusal(f"value {axis} is not supported for rank {rank}; supported: a sequence dim in [1, {rank}) or [-{rank - 1}, 0)", "attribute 'axis'")
    return axis % rank


def check_shapes(tb: TorchBuilder, past: Tensor, update: Tensor, axis: int) -> None:
    if update.dtype != past.dtype or update.rank != past.rank:
        raise Refusal(f"is {update.dtype} rank {update.rank}; supported: past_cache's {past.dtype} rank {past.rank}", "input 1 'update'")
    for d in range(past.rank):
        if d == axis:
            continue
        p, u = past.shape[d], update.shape[d]
        if p is not None and u is not None and p != u:
            raise Refusal(f"dimension {d} ({u}) differs from past_cache's ({p}); supported: equal but on axis {axis}", "input 1 'update'")
        tb.check_dim(update, d, tb.size(past, d), f"{OP}: input 1 'update' dimension {d} must be past_cache's (onnxruntime rejects it)")
    M, S = past.shape[axis], update.shape[axis]
    if M is not None and S is not None and S > M:
        raise Refusal(f"sequence length {S} exceeds past_cache's {M} (onnxruntime rejects it)", "input 1 'update'")
    if M is None or S is None:
        tb.runtime_assert(tb.dim_le(tb.size(update, axis), tb.size(past, axis)), f"{OP}: the update's sequence length must not exceed past_cache's (onnxruntime rejects it)")


def write_indices(b: OpBinder, tb: TorchBuilder, B) -> Tensor:
    """write_indices [B] int64, or zeros."""
    w = b.tensor(2, "write_indices")
    if w is None:
        return tb.mul_int_scalar(tb.arange(B), 0)  # [B] zeros
    if w.dtype != "si64" or w.rank != 1:
        raise Refusal(f"is {w.dtype} rank {w.rank}; supported: int64 [B]", "input 2 'write_indices'")
    tb.check_dim(w, 0, B, f"{OP}: input 2 'write_indices' must hold one index per batch row")
    return w


def written_rows(tb: TorchBuilder, write_B: Tensor, M, S, mode: str) -> Tensor:
    """[B,S] cache rows w[b] + s (mod M when circular), checked, then clamped into [0, M)."""
    tb.runtime_check(tb.ge_scalar(write_B, 0), f"{OP}: write_indices must be >= 0 (onnxruntime rejects others)")
    if mode == "linear":
        tb.runtime_check(tb.le_scalar(write_B, tb.dim_sub(M, S)), f"{OP}: write_indices[b] + the update's sequence length must not exceed past_cache's (linear mode; onnxruntime rejects others)")
    rows_BS = tb.add(tb.unsqueeze(write_B, 1), tb.arange(S))  # [B,1] + [S] -> [B,S]
    if mode == "circular":
        rows_BS = tb.remainder_scalar(rows_BS, tb.dim_max(M, 1))
    return tb.clamp_int(rows_BS, 0, tb.dim_max(tb.dim_sub(M, 1), 0))


def row_index(tb: TorchBuilder, rows_BS: Tensor, rank: int, axis: int) -> Tensor:
    """[B,S] as [B,1..,S,..1]: B on dim 0, S on ``axis``."""
    for _ in range(axis - 1):
        rows_BS = tb.unsqueeze(rows_BS, 1)  # [B,S] -> [B,1..,S]
    for _ in range(rank - axis - 1):
        rows_BS = tb.unsqueeze(rows_BS, rows_BS.rank)  # -> [B,1..,S,1..]
    return rows_BS
