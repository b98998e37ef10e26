"""ONNX ``ScatterElements`` with run-time indices: checked and clamped, then left to torch-mlir.

As GatherElements (gather_elements.py), and updates must have the indices'
shape.  torch-mlir's lowering trusts them: an out-of-range index wrote outside
the output buffer (heap corruption, SIGSEGV on iree-cpu).
"""

from __future__ import annotations

from ..binder import OpBinder
from ..builder import TorchBuilder
from ..registry import NOT_LOWERED, onnx_op
from ._indices import check_dims, checked_index_values, index_input, rebuild, same, static_mismatch


@onnx_op("ScatterElements", domain="", since=11)
def check_scatter_elements_indices(b: OpBinder, tb: TorchBuilder):
    if b.num_input_slots() != 3:
        return NOT_LOWERED
    data, indices, updates = b.tensor(0, "data"), index_input(b, 1), b.tensor(2, "updates")
    axis = b.attr_int("axis", 0)
    if data is None or indices is None or updates is None or not -data.rank <= axis < data.rank:
        return NOT_LOWERED  # torch-mlir's conversion says what is wrong
    if indices.tensor.rank != data.rank or updates.rank != data.rank:
        return NOT_LOWERED
    axis %= data.rank
    others = [d for d in range(data.rank) if d != axis]
    if static_mismatch(indices.tensor, data, same(others)) or static_mismatch(updates, indices.tensor, same(range(data.rank)), equal=True):
        return NOT_LOWERED
    check_dims(tb, indices.tensor, data, same(others), "ScatterElements: indices dimension {d} must not exceed the data's (onnxruntime rejects it)")
    check_dims(tb, updates, indices.tensor, same(range(data.rank)), "ScatterElements: updates dimension {d} must equal the indices' (onnxruntime rejects it)", equal=True)
    checked = checked_index_values(tb, indices, tb.size(data, axis), "ScatterElements", f"data dimension {axis}")
    return NOT_LOWERED if checked is None else rebuild(b, tb, [data, checked, updates])
