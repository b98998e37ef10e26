"""ONNX ``ScatterElements``: the ``min`` and ``max`` reductions, which torch-mlir's conversion lacks.

They are lowered here to ``aten.scatter_reduce`` (``amin``/``amax``, the
data's value included); an unknown ``reduction`` is refused by name (as for
ScatterND); the rest is left to torch-mlir.  The indices and shapes are
checked, and the indices clamped, by the ``guard-onnx-indices`` pass
(guards/indices.py), which runs first.
"""

from __future__ import annotations

from ...binder import OpBinder
from ...builder import Tensor, TorchBuilder
from ...registry import NOT_LOWERED, Refusal, onnx_op

REDUCTIONS = ("none", "add", "mul", "min", "max")

# ONNX's reductions torch-mlir's ScatterElements conversion lacks, as aten.scatter_reduce modes.
MIN_MAX = {"min": "amin", "max": "amax"}


def check_reduction(b: OpBinder) -> str:
    """The ``reduction`` attribute of ScatterElements/ScatterND, refused by name outside ONNX's values
    (onnxruntime runs an unknown one as 'none'; torch-mlir's conversion multiplied)."""
    reduction = b.attr_str("reduction", "none")
    if reduction not in REDUCTIONS:
        raise Refusal(f"value '{reduction}' is not supported; supported: {', '.join(REDUCTIONS)}", "attribute 'reduction'")
    return reduction


@onnx_op("ScatterElements", domain="", since=11)
def lower_scatter_elements_min_max(b: OpBinder, tb: TorchBuilder):
    reduction = check_reduction(b)
    if reduction not in MIN_MAX or b.num_input_slots() != 3:
        return NOT_LOWERED
    data, indices, updates = b.tensor(0, "data"), b.tensor(1, "indices"), b.tensor(2, "updates")
    axis = b.attr_int("axis", 0)
    if data is None or indices is None or updates is None or not -data.rank <= axis < data.rank:
        return NOT_LOWERED  # torch-mlir's conversion says what is wrong
    if indices.dtype not in ("si64", "si32") or indices.rank != data.rank or updates.rank != data.rank:
        return NOT_LOWERED
    if data.dtype == "i1":
        raise Refusal(f"reduction '{reduction}' of bool data is not supported (onnxruntime's kernel has none)", "input 0 'data'")
    return [scatter_min_max(b, tb, data, indices, updates, axis % data.rank, MIN_MAX[reduction])]


def scatter_min_max(b: OpBinder, tb: TorchBuilder, data: Tensor, indices: Tensor, updates: Tensor, axis: int, mode: str):
    """data with each update combined into data[.., index, ..] by min or max (data's own value included, as ONNX)."""
    n = tb.size(data, axis)
    index_si64 = tb.to_dtype(indices, "si64")  # in [-n, n): checked and clamped by guard-onnx-indices
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
