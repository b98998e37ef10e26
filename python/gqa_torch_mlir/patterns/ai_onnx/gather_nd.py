"""ONNX ``GatherND`` with run-time indices: checked and clamped, then left to torch-mlir.

Each index tuple ``indices[..., :k]`` addresses data dims ``batch_dims ..
batch_dims + k - 1``; column j must lie in ``[-n_j, n_j)``, and the batch
dims of indices and data must agree, as onnxruntime checks.  torch-mlir's
lowering trusts both (an out-of-range tuple read outside the data: garbage,
or SIGSEGV on iree-cpu).  A dynamic tuple width k is left to torch-mlir.
"""

from __future__ import annotations

from ...binder import OpBinder
from ...builder import TorchBuilder
from ...registry import NOT_LOWERED, onnx_op
from ._indices import check_dims, checked_index_columns, index_input, rebuild, same, static_mismatch


@onnx_op("GatherND", domain="", since=11)
def check_gather_nd_indices(b: OpBinder, tb: TorchBuilder):
    if b.num_input_slots() != 2:
        return NOT_LOWERED
    data, indices = b.tensor(0, "data"), index_input(b, 1)
    batch_dims = b.attr_int("batch_dims", 0)
    if data is None or indices is None or indices.tensor.rank < 1 or not 0 <= batch_dims < min(data.rank, indices.tensor.rank):
        return NOT_LOWERED  # torch-mlir's conversion says what is wrong
    k = indices.tensor.shape[-1]
    if k is None or not 1 <= k <= data.rank - batch_dims or static_mismatch(indices.tensor, data, same(range(batch_dims)), equal=True):
        return NOT_LOWERED
    check_dims(tb, indices.tensor, data, same(range(batch_dims)), "GatherND: indices dimension {d} (a batch dim) must equal the data's (onnxruntime rejects it)", equal=True)
    checked = checked_index_columns(tb, indices, data, batch_dims, "GatherND")
    return NOT_LOWERED if checked is None else rebuild(b, tb, [data, checked])
