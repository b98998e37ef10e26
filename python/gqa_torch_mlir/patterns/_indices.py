"""Shared by the index guards (gather.py, gather_elements.py, gather_nd.py,
scatter_elements.py, scatter_nd.py): torch-mlir's lowerings of these ONNX ops
trust their indices and shapes, so a run-time index out of range read or
wrote outside the buffer (garbage, SIGSEGV, heap corruption) where
onnxruntime rejects it.  Each guard checks the run-time values onnxruntime
checks, clamps the indices into range whatever the check says, and rebuilds
the ONNX op on them for torch-mlir's conversion.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..binder import OpBinder
from ..builder import Dim, Tensor, TorchBuilder

INDEX_DTYPES = ("si64", "si32")


def runtime_indices(b: OpBinder, slot: int) -> Optional[Tensor]:
    """Input ``slot`` when it holds integer indices known only at run time, else None."""
    if b.input_is_constant(slot):
        return None
    indices = b.tensor(slot, "indices")
    return indices if indices is not None and indices.dtype in INDEX_DTYPES else None


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


def checked_index_columns(tb: TorchBuilder, indices: Tensor, data: Tensor, first_dim: int, op: str) -> Tensor:
    """Index tuples (GatherND/ScatterND): column j of ``indices[..., k]`` checked and clamped
    against data dim ``first_dim + j``."""
    last = indices.rank - 1
    columns = []
    for j in range(indices.shape[last]):
        column = tb.slice(indices, last, j, j + 1)
        message = (f"{op}: indices[..., {j}] must lie in [-n, n), n = data dimension {first_dim + j} "
                   "(onnxruntime rejects them otherwise)")
        columns.append(checked_in_range(tb, column, tb.size(data, first_dim + j), message))
    return tb.cat(columns, last) if len(columns) > 1 else columns[0]
