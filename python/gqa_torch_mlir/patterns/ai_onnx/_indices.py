"""Shared by the index guards (gather.py, gather_elements.py, gather_nd.py,
scatter_elements.py, scatter_nd.py): torch-mlir's lowerings of these ONNX ops
trust their indices and shapes, so a run-time index out of range read or
wrote outside the buffer (garbage, SIGSEGV, heap corruption) where
onnxruntime rejects it.  Each guard checks the run-time values onnxruntime
checks, clamps the indices into range whatever the check says, and rebuilds
the ONNX op on them for torch-mlir's conversion.  Constant indices held
inline are checked at compile time against static bounds (the op is then
left as it is); against a dynamic bound, or held in a resource blob (as the
importer writes every ONNX constant), at run time like the others.  Constant
indices into an ``onnx.Shape`` (shape arithmetic, which torch-mlir folds at
compile time) are left as they are: the Python pipeline checks constant
indices on the ONNX model before importing it (``preimport/constant_indices.py``).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ...binder import OpBinder
from ...builder import Dim, Tensor, TorchBuilder
from ...registry import Refusal

INDEX_DTYPES = ("si64", "si32")


class Indices:
    """An op's integer index input: its Tensor and, for a graph constant whose values the
    IR holds inline, those values (checked at compile time against static bounds)."""

    def __init__(self, tensor: Tensor, values: Optional[np.ndarray]):
        self.tensor, self.values = tensor, values


def index_input(b: OpBinder, slot: int) -> Optional[Indices]:
    """Input ``slot`` when it holds integer indices (run-time or constant), else None."""
    indices = b.tensor(slot, "indices")
    if indices is None or indices.dtype not in INDEX_DTYPES:
        return None
    constant = b.input_is_constant(slot)
    if constant and _produced_by(b, 0, "onnx.Shape"):
        return None  # shape arithmetic, which torch-mlir folds (the pipeline checks such constants on the ONNX model)
    return Indices(indices, _constant_values(b, slot) if constant else None)


def _produced_by(b: OpBinder, slot: int, onnx_op_name: str) -> bool:
    owner = getattr(b.op.operands[slot].owner, "operation", None)  # None for a block argument
    if owner is None or owner.name != "torch.operator" or "name" not in owner.attributes:
        return False
    return b.ir.StringAttr(owner.attributes["name"]).value == onnx_op_name


def _constant_values(b: OpBinder, slot: int) -> Optional[np.ndarray]:
    """The values of a constant index input held inline (``dense<...>``), else None."""
    owner = b.op.operands[slot].owner.operation
    key = "value" if owner.name == "torch.vtensor.literal" else "torch.onnx.value"
    if key not in owner.attributes:
        return None
    try:
        attr = b.ir.DenseIntElementsAttr(owner.attributes[key])
    except (ValueError, TypeError):  # dense_resource blobs (large initializers): checked at run time
        return None
    shape = [int(d) for d in attr.type.shape]
    if attr.is_splat:
        return np.full(shape, int(attr.get_splat_value().value), np.int64)
    return np.array([int(v) for v in attr], np.int64).reshape(shape)


def refuse_constant_out_of_range(values: np.ndarray, n: int, subject: str, bound: str) -> None:
    """Refuse at compile time a constant index outside ``[-n, n)`` (onnxruntime rejects it when run)."""
    bad = values[(values < -n) | (values >= n)]
    if bad.size:
        raise Refusal(f"holds {int(bad.flat[0])}, outside [-{n}, {n}) for {bound} (onnxruntime rejects it at run time)", subject)


def checked_in_range(tb: TorchBuilder, indices: Tensor, n: Dim, message: str) -> Tensor:
    """``indices`` checked against ``[-n, n)`` at run time, and clamped into it."""
    tb.runtime_check(tb.in_range(indices, tb.dim_sub(0, n), tb.dim_sub(n, 1)), message)
    return tb.clamp_int(indices, tb.dim_sub(0, n), tb.dim_sub(n, 1))  # in bounds whatever the check says


def check_dims(tb: TorchBuilder, a: Tensor, b_: Tensor, pairs: Sequence[Tuple[int, int]], message: str, equal: bool = False) -> None:
    """Run-time check that dim i of ``a`` is at most (or equal to) dim j of ``b_``, for each
    (i, j) where either is dynamic (a static contradiction is ``static_mismatch``)."""
    for i, j in pairs:
        x, y = tb.size(a, i), tb.size(b_, j)
        if isinstance(x, int) and isinstance(y, int):
            continue
        tb.runtime_assert(tb.dim_eq(x, y) if equal else tb.dim_le(x, y), message.format(d=i))


def same(dims: Sequence[int]) -> List[Tuple[int, int]]:
    """(d, d) pairs."""
    return [(d, d) for d in dims]


def rebuild(b: OpBinder, tb: TorchBuilder, operands: List[Tensor]) -> List:
    """The same ONNX op (name, attributes, result types) on new operands."""
    attributes = {key: b.op.attributes[key] for key in b.attribute_keys()}
    results = [str(r.type) for r in b.op.results]
    return list(tb.op("torch.operator", [t.value for t in operands], results, attributes))


def static_mismatch(a: Tensor, b_: Tensor, pairs: Sequence[Tuple[int, int]], equal: bool = False) -> bool:
    """Whether a static dim pair already contradicts (left to torch-mlir's conversion to report)."""
    for i, j in pairs:
        x, y = a.shape[i], b_.shape[j]
        if x is not None and y is not None and (x != y if equal else x > y):
            return True
    return False


def checked_index_columns(tb: TorchBuilder, indices: Indices, data: Tensor, first_dim: int, op: str) -> Optional[Tensor]:
    """Index tuples (GatherND/ScatterND): column j of ``indices[..., k]`` checked and clamped
    against data dim ``first_dim + j``.  None when the indices are constants checked here
    against static dims (the op is then left as it is)."""
    tensor, last = indices.tensor, indices.tensor.rank - 1
    bounds = [tb.size(data, first_dim + j) for j in range(tensor.shape[last])]
    if indices.values is not None and all(isinstance(n, int) for n in bounds):
        for j, n in enumerate(bounds):
            refuse_constant_out_of_range(indices.values[..., j], n, "input 1 'indices'", f"column {j} (data dimension {first_dim + j})")
        return None
    columns = []
    for j, n in enumerate(bounds):
        column = tb.slice(tensor, last, j, j + 1)
        message = (f"{op}: indices[..., {j}] must lie in [-n, n), n = data dimension {first_dim + j} "
                   "(onnxruntime rejects them otherwise)")
        columns.append(checked_in_range(tb, column, n, message))
    return tb.cat(columns, last) if len(columns) > 1 else columns[0]


def checked_index_values(tb: TorchBuilder, indices: Indices, n: Dim, op: str, bound: str) -> Optional[Tensor]:
    """``indices`` checked and clamped against ``[-n, n)``; None when they are constants checked
    here against a static n (the op is then left as it is)."""
    if indices.values is not None and isinstance(n, int):
        refuse_constant_out_of_range(indices.values, n, "input 1 'indices'", bound)
        return None
    message = f"{op}: indices must lie in [-n, n), n = {bound} (onnxruntime rejects them otherwise)"
    return checked_in_range(tb, indices.tensor, n, message)


REDUCTIONS = ("none", "add", "mul", "min", "max")


def check_reduction(b: OpBinder) -> str:
    """The ``reduction`` attribute of ScatterElements/ScatterND, refused by name outside ONNX's values
    (onnxruntime runs an unknown one as 'none'; torch-mlir's conversion multiplied)."""
    reduction = b.attr_str("reduction", "none")
    if reduction not in REDUCTIONS:
        raise Refusal(f"value '{reduction}' is not supported; supported: {', '.join(REDUCTIONS)}", "attribute 'reduction'")
    return reduction
