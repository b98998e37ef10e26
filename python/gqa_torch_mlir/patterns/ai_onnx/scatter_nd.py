"""ONNX ``ScatterND`` with run-time indices: checked and clamped, then left to torch-mlir.

Each index tuple ``indices[..., :k]`` addresses data dims ``0 .. k - 1``;
column j must lie in ``[-n_j, n_j)``, and updates must have the shape
``indices.shape[:-1] + data.shape[k:]``, as onnxruntime checks.  torch-mlir's
lowering trusts both (an out-of-range tuple wrote outside the output buffer:
heap corruption, SIGSEGV on iree-cpu).  A dynamic tuple width k is left to
torch-mlir.
"""

from __future__ import annotations

from ...binder import OpBinder
from ...builder import TorchBuilder
from ...registry import NOT_LOWERED, onnx_op
from ._indices import check_dims, check_reduction, checked_index_columns, index_input, rebuild, static_mismatch


@onnx_op("ScatterND", domain="", since=11)
def check_scatter_nd_indices(b: OpBinder, tb: TorchBuilder):
    if b.num_input_slots() != 3:
        return NOT_LOWERED
    check_reduction(b)
    data, indices, updates = b.tensor(0, "data"), index_input(b, 1), b.tensor(2, "updates")
    if data is None or indices is None or updates is None or indices.tensor.rank < 1:
        return NOT_LOWERED  # torch-mlir's conversion says what is wrong
    k, q = indices.tensor.shape[-1], indices.tensor.rank
    if k is None or not 1 <= k <= data.rank or updates.rank != q - 1 + data.rank - k:
        return NOT_LOWERED
    from_indices = [(i, i) for i in range(q - 1)]  # updates dim i = indices dim i
    from_data = [(q - 1 + i - k, i) for i in range(k, data.rank)]  # updates dim q-1+i-k = data dim i
    if static_mismatch(updates, indices.tensor, from_indices, equal=True) or static_mismatch(updates, data, from_data, equal=True):
        return NOT_LOWERED
    message = "ScatterND: updates dimension {d} must match indices.shape[:-1] + data.shape[k:] (onnxruntime rejects it)"
    check_dims(tb, updates, indices.tensor, from_indices, message, equal=True)
    check_dims(tb, updates, data, from_data, message, equal=True)
    checked = checked_index_columns(tb, indices, data, 0, "ScatterND")
    return NOT_LOWERED if checked is None else rebuild(b, tb, [data, checked, updates])
