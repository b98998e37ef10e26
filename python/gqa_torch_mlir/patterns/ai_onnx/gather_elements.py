"""ONNX ``GatherElements`` with run-time indices: checked and clamped, then left to torch-mlir.

indices (the data's rank) must lie in ``[-n, n)``, n = data's size on
``axis``, and be no larger than the data on the other dims, as onnxruntime
checks; torch-mlir's lowering trusts both (an out-of-range index read outside
the data: garbage, or SIGSEGV on iree-cpu).
"""

from __future__ import annotations

from ...binder import OpBinder
from ...builder import TorchBuilder
from ...registry import NOT_LOWERED, onnx_op
from ._indices import check_dims, checked_index_values, index_input, rebuild, same, static_mismatch


@onnx_op("GatherElements", domain="", since=11)
def check_gather_elements_indices(b: OpBinder, tb: TorchBuilder):
    if b.num_input_slots() != 2:
        return NOT_LOWERED
    data, indices = b.tensor(0, "data"), index_input(b, 1)
    axis = b.attr_int("axis", 0)
    if data is None or indices is None or indices.tensor.rank != data.rank or not -data.rank <= axis < data.rank:
        return NOT_LOWERED  # torch-mlir's conversion says what is wrong
    axis %= data.rank
    others = [d for d in range(data.rank) if d != axis]
    if static_mismatch(indices.tensor, data, same(others)):
        return NOT_LOWERED
    check_dims(tb, indices.tensor, data, same(others), "GatherElements: indices dimension {d} must not exceed the data's (onnxruntime rejects it)")
    checked = checked_index_values(tb, indices, tb.size(data, axis), "GatherElements", f"data dimension {axis}")
    return NOT_LOWERED if checked is None else rebuild(b, tb, [data, checked])
