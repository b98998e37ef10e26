"""ONNX ``ScatterElements`` with run-time indices: checked and clamped, then left to torch-mlir.

As GatherElements (gather_elements.py), and updates must have the indices'
shape.  torch-mlir's lowering trusts them: an out-of-range index wrote outside
the output buffer (heap corruption, SIGSEGV on iree-cpu).  The ``min`` and
``max`` reductions, which torch-mlir's conversion lacks, are lowered here to
``aten.scatter_reduce`` (``amin``/``amax``, the data's value included).
"""

from __future__ import annotations

from ...binder import OpBinder
from ...builder import Tensor, TorchBuilder
from ...registry import NOT_LOWERED, Refusal, onnx_op
from ._indices import check_dims, check_reduction, checked_index_values, index_input, rebuild, same, static_mismatch


@onnx_op("ScatterElements", domain="", since=11)
def check_scatter_elements_indices(b: OpBinder, tb: TorchBuilder):
    if b.num_input_slots() != 3:
        return NOT_LOWERED
    reduction = check_reduction(b)
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
    if reduction in MIN_MAX and data.dtype == "i1":
        raise Refusal(f"reduction '{reduction}' of bool data is not supported (onnxruntime's kernel has none)", "input 0 'data'")
    if reduction in MIN_MAX:  # torch-mlir's conversion has no min/max: lowered here
        return [scatter_min_max(b, tb, data, indices.tensor if checked is None else checked, updates, axis, MIN_MAX[reduction])]
    return NOT_LOWERED if checked is None else rebuild(b, tb, [data, checked, updates])


# ONNX's reductions torch-mlir's ScatterElements conversion lacks, as aten.scatter_reduce modes.
MIN_MAX = {"min": "amin", "max": "amax"}


def scatter_min_max(b: OpBinder, tb: TorchBuilder, data: Tensor, indices: Tensor, updates: Tensor, axis: int, mode: str):
    """data with each update combined into data[.., index, ..] by min or max (data's own value included, as ONNX)."""
    n = tb.size(data, axis)
    index_si64 = tb.to_dtype(indices, "si64")  # in [-n, n) (checked)
    wrapped = tb.where(tb.lt_scalar(index_si64, 0), tb.add_scalar(index_si64, n), index_si64)  # negative counts from the end
    if data.dtype.startswith(("f", "bf")):
        no_nan(tb, updates, "updates", mode)
        no_nan(tb, tb.gather(data, axis, wrapped), "data where updates go", mode)
    operands = [data.value, tb.int(axis), wrapped.value, updates.value, tb.string(mode), tb.bool(True)]
    out = tb.tensor_op("torch.aten.scatter_reduce.two", operands, data.shape, data.dtype)
    return b.declared_result(tb, 0, out, "output")


def no_nan(tb: TorchBuilder, t: Tensor, what: str, mode: str) -> None:
    """A NaN fails a named check: onnxruntime's min/max keeps or drops it by the updates' order
    (a NaN update survives only as the last one; a NaN accumulator is replaced), which
    aten.scatter_reduce, NaN-propagating, does not reproduce."""
    not_nan = tb.tensor_op("torch.aten.logical_not", [tb.isnan(t).value], t.shape, "i1")
    reduction = mode[1:]
    tb.runtime_check(not_nan, f"ScatterElements: reduction '{reduction}' with a NaN in the {what} is not supported (onnxruntime's result depends on the update order)")
