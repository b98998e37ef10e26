"""ONNX ``GatherElements`` with run-time indices: checked and clamped, then left to torch-mlir.

indices (the data's rank) must lie in ``[-n, n)``, n = data's size on
``axis``, and be no larger than the data on the other dims, as onnxruntime
checks; torch-mlir's lowering trusts both (an out-of-range index read outside
the data: garbage, or SIGSEGV on iree-cpu).
"""

from __future__ import annotations

from ..binder import OpBinder
from ..builder import TorchBuilder
from ..registry import NOT_LOWERED, onnx_op
from ._indices import check_dims, checked_in_range, rebuild, runtime_indices, same, static_mismatch


@onnx_op("GatherElements", domain="", since=11)
def check_gather_elements_indices(b: OpBinder, tb: TorchBuilder):
    if b.num_input_slots() != 2:
        return NOT_LOWERED
    data, indices = b.tensor(0, "data"), runtime_indices(b, 1)
    axis = b.attr_int("axis", 0)
    if data is None or indices is None or indices.rank != data.rank or not -data.rank <= axis < data.rank:
        return NOT_LOWERED  # torch-mlir's conversion says what is wrong
    axis %= data.rank
    others = [d for d in range(data.rank) if d != axis]
    if static_mismatch(indices, data, same(others)):
        return NOT_LOWERED
    check_dims(tb, indices, data, same(others), "GatherElements: indices dimension {d} must not exceed the data's (onnxruntime rejects it)")
    message = f"GatherElements: indices must lie in [-n, n), n = data dimension {axis} (onnxruntime rejects them otherwise)"
    return rebuild(b, tb, [data, checked_in_range(tb, indices, tb.size(data, axis), message)])
