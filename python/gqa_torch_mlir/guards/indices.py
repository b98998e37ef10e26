"""Index guards for Gather, GatherElements, GatherND, ScatterElements and ScatterND: one table.

torch-mlir's lowerings of these ONNX ops trust their indices and shapes, so
an index out of range read or wrote outside the buffer (garbage, SIGSEGV,
heap corruption) where onnxruntime rejects it.  Each op's row in ``TABLE``
says how its indices address the data and which dims onnxruntime checks;
one guard does the rest, in two places:

* before import (:func:`check_constant_indices`, the pre-import step
  ``check-constant-indices``): constant indices in the ONNX model, checked
  against static data dims and refused when out of range (the importer turns
  every constant into a resource blob the pass cannot read);
* in the ``guard-onnx-indices`` pass (:func:`guard`): indices known at run
  time, and constants held inline against a dynamic bound, are checked at
  run time against ``[-n, n)`` and clamped into it whatever the check says;
  dynamic dims are checked as onnxruntime checks them; the op is then rebuilt
  on the clamped indices for torch-mlir's conversion.  Constants held inline
  against a static bound are checked at compile time; constant indices into
  an ``onnx.Shape`` (shape arithmetic torch-mlir folds) are left as they are.

The ops' other semantics (ScatterElements' min/max, unknown reductions) are
lowerings: patterns/ai_onnx/scatter_elements.py, scatter_nd.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import onnx
from onnx import AttributeProto

from ..binder import OpBinder
from ..builder import Dim, Tensor, TorchBuilder
from ..preimport.graph import fail, integer_constants, node_label
from ..registry import NOT_LOWERED, Refusal, Registry

INDEX_DTYPES = ("si64", "si32")


class DimCheck(NamedTuple):
    """Dims ``(i, j)``: ``a``'s dim i at most (or equal to) ``b``'s dim j; ``{d}`` in the message is i."""

    a: Tensor
    b: Tensor
    pairs: List[Tuple[int, int]]
    equal: bool
    message: str


class Operands(NamedTuple):
    data: Tensor
    indices: Tensor
    updates: Optional[Tensor]
    attrs: Dict[str, int]


@dataclass(frozen=True)
class IndexOp:
    """How one op's indices address its data.

    ``axis``: each index addresses data dim ``attrs['axis']``; otherwise index tuples
    ``indices[..., j]`` address data dim ``first_dim(attrs) + j``.  ``dim_checks``
    returns the dims onnxruntime checks, or None for a form left to torch-mlir's
    conversion (which says what is wrong)."""

    since: int
    inputs: int
    axis: bool
    dim_checks: Callable[[Operands], Optional[List[DimCheck]]]
    first_dim: Callable[[Dict[str, int]], int] = lambda attrs: 0


def _same(dims) -> List[Tuple[int, int]]:
    return [(d, d) for d in dims]


def _axis_ok(o: Operands) -> bool:
    return -o.data.rank <= o.attrs.get("axis", 0) < o.data.rank


def _gather(o: Operands) -> Optional[List[DimCheck]]:
    return [] if _axis_ok(o) else None


def _elements(op: str, o: Operands) -> Optional[List[DimCheck]]:
    """GatherElements/ScatterElements: indices (and updates) of the data's rank, no larger off the axis."""
    data, indices, updates = o.data, o.indices, o.updates
    if not _axis_ok(o) or indices.rank != data.rank or (updates is not None and updates.rank != data.rank):
        return None
    others = [d for d in range(data.rank) if d != o.attrs.get("axis", 0) % data.rank]
    checks = [DimCheck(indices, data, _same(others), False, f"{op}: indices dimension {{d}} must not exceed the data's (onnxruntime rejects it)")]
    if updates is not None:
        checks.append(DimCheck(updates, indices, _same(range(data.rank)), True, f"{op}: updates dimension {{d}} must equal the indices' (onnxruntime rejects it)"))
    return checks


def _gather_nd(o: Operands) -> Optional[List[DimCheck]]:
    """Tuples of width k address dims batch_dims .. batch_dims + k - 1; batch dims equal."""
    data, indices, batch_dims = o.data, o.indices, o.attrs.get("batch_dims", 0)
    if indices.rank < 1 or not 0 <= batch_dims < min(data.rank, indices.rank):
        return None
    k = indices.shape[-1]
    if k is None or not 1 <= k <= data.rank - batch_dims:
        return None
    return [DimCheck(indices, data, _same(range(batch_dims)), True, "GatherND: indices dimension {d} (a batch dim) must equal the data's (onnxruntime rejects it)")]


def _scatter_nd(o: Operands) -> Optional[List[DimCheck]]:
    """Tuples of width k address dims 0 .. k - 1; updates = indices.shape[:-1] + data.shape[k:]."""
    data, indices, updates = o.data, o.indices, o.updates
    if indices.rank < 1:
        return None
    k, q = indices.shape[-1], indices.rank
    if k is None or not 1 <= k <= data.rank or updates.rank != q - 1 + data.rank - k:
        return None
    message = "ScatterND: updates dimension {d} must match indices.shape[:-1] + data.shape[k:] (onnxruntime rejects it)"
    from_indices = _same(range(q - 1))  # updates dim i = indices dim i
    from_data = [(q - 1 + i - k, i) for i in range(k, data.rank)]  # updates dim q-1+i-k = data dim i
    return [DimCheck(updates, indices, from_indices, True, message), DimCheck(updates, data, from_data, True, message)]


TABLE: Dict[str, IndexOp] = {
    "Gather": IndexOp(since=1, inputs=2, axis=True, dim_checks=_gather),
    "GatherElements": IndexOp(since=11, inputs=2, axis=True, dim_checks=partial(_elements, "GatherElements")),
    "ScatterElements": IndexOp(since=11, inputs=3, axis=True, dim_checks=partial(_elements, "ScatterElements")),
    "GatherND": IndexOp(since=11, inputs=2, axis=False, dim_checks=_gather_nd, first_dim=lambda attrs: attrs.get("batch_dims", 0)),
    "ScatterND": IndexOp(since=11, inputs=3, axis=False, dim_checks=_scatter_nd),
}


# -- the pass's guard -------------------------------------------------------------------


def guard(op_type: str, b: OpBinder, tb: TorchBuilder):
    """Check and clamp the indices of one ``torch.operator "onnx.<op_type>"``; rebuild it on them."""
    row = TABLE[op_type]
    if b.num_input_slots() != row.inputs:
        return NOT_LOWERED
    data, indices = b.tensor(0, "data"), _index_input(b)
    updates = b.tensor(2, "updates") if row.inputs == 3 else None
    if data is None or indices is None or (row.inputs == 3 and updates is None):
        return NOT_LOWERED  # torch-mlir's conversion says what is wrong
    attrs = {"axis": b.attr_int("axis", 0)} if row.axis else {"batch_dims": b.attr_int("batch_dims", 0)}
    checks = row.dim_checks(Operands(data, indices.tensor, updates, attrs))
    if checks is None or any(_static_mismatch(c) for c in checks):
        return NOT_LOWERED
    for c in checks:
        _check_dims(tb, c)
    if row.axis:
        axis = attrs["axis"] % data.rank
        checked = _checked_values(tb, indices, tb.size(data, axis), op_type, f"data dimension {attrs['axis']}")
    else:
        checked = _checked_columns(tb, indices, data, row.first_dim(attrs), op_type)
    if checked is None:
        return NOT_LOWERED
    return _rebuild(b, tb, [data, checked] + ([updates] if updates is not None else []))


#: The guard pass's registry: every row of the table.
GUARDS = Registry()
for _op_type, _row in TABLE.items():
    GUARDS.register(_op_type, domain="", since=_row.since)(partial(guard, _op_type))


class _Indices(NamedTuple):
    tensor: Tensor
    values: Optional[np.ndarray]  # a constant's values, when the IR holds them inline


def _index_input(b: OpBinder) -> Optional[_Indices]:
    """Input 1 when it holds integer indices (run-time or constant), else None."""
    indices = b.tensor(1, "indices")
    if indices is None or indices.dtype not in INDEX_DTYPES:
        return None
    if not b.input_is_constant(1):
        return _Indices(indices, None)
    if _produced_by(b, 0, "onnx.Shape"):
        return None  # shape arithmetic, which torch-mlir folds (checked before import)
    return _Indices(indices, _inline_values(b, 1))


def _produced_by(b: OpBinder, slot: int, onnx_op_name: str) -> bool:
    owner = getattr(b.op.operands[slot].owner, "operation", None)  # None for a block argument
    if owner is None or owner.name != "torch.operator" or "name" not in owner.attributes:
        return False
    return b.ir.StringAttr(owner.attributes["name"]).value == onnx_op_name


def _inline_values(b: OpBinder, slot: int) -> Optional[np.ndarray]:
    """The values of a constant input held inline (``dense<...>``), else None."""
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


def _static_mismatch(c: DimCheck) -> bool:
    """Whether a static dim pair already contradicts (left to torch-mlir's conversion to report)."""
    for i, j in c.pairs:
        x, y = c.a.shape[i], c.b.shape[j]
        if x is not None and y is not None and (x != y if c.equal else x > y):
            return True
    return False


def _check_dims(tb: TorchBuilder, c: DimCheck) -> None:
    """Run-time checks of the pairs where either dim is dynamic."""
    for i, j in c.pairs:
        x, y = tb.size(c.a, i), tb.size(c.b, j)
        if not (isinstance(x, int) and isinstance(y, int)):
            tb.runtime_assert(tb.dim_eq(x, y) if c.equal else tb.dim_le(x, y), c.message.format(d=i))


def _refuse_out_of_range(values: np.ndarray, n: int, bound: str) -> None:
    bad = values[(values < -n) | (values >= n)]
    if bad.size:
        raise Refusal(f"holds {int(bad.flat[0])}, outside [-{n}, {n}) for {bound} (onnxruntime rejects it at run time)", "input 1 'indices'")


def _checked_in_range(tb: TorchBuilder, indices: Tensor, n: Dim, message: str) -> Tensor:
    """``indices`` checked against ``[-n, n)`` at run time, and clamped into it."""
    tb.runtime_check(tb.in_range(indices, tb.dim_sub(0, n), tb.dim_sub(n, 1)), message)
    return tb.clamp_int(indices, tb.dim_sub(0, n), tb.dim_sub(n, 1))  # in bounds whatever the check says


def _checked_values(tb: TorchBuilder, indices: _Indices, n: Dim, op: str, bound: str) -> Optional[Tensor]:
    """Indices against ``[-n, n)``; None when constants checked here against a static n."""
    if indices.values is not None and isinstance(n, int):
        _refuse_out_of_range(indices.values, n, bound)
        return None
    message = f"{op}: indices must lie in [-n, n), n = {bound} (onnxruntime rejects them otherwise)"
    return _checked_in_range(tb, indices.tensor, n, message)


def _checked_columns(tb: TorchBuilder, indices: _Indices, data: Tensor, first_dim: int, op: str) -> Optional[Tensor]:
    """Column j of ``indices[..., k]`` against data dim ``first_dim + j``; None when constants
    checked here against static dims."""
    tensor, last = indices.tensor, indices.tensor.rank - 1
    bounds = [tb.size(data, first_dim + j) for j in range(tensor.shape[last])]
    if indices.values is not None and all(isinstance(n, int) for n in bounds):
        for j, n in enumerate(bounds):
            _refuse_out_of_range(indices.values[..., j], n, f"column {j} (data dimension {first_dim + j})")
        return None
    columns = []
    for j, n in enumerate(bounds):
        message = (f"{op}: indices[..., {j}] must lie in [-n, n), n = data dimension {first_dim + j} "
                   "(onnxruntime rejects them otherwise)")
        columns.append(_checked_in_range(tb, tb.slice(tensor, last, j, j + 1), n, message))
    return tb.cat(columns, last) if len(columns) > 1 else columns[0]


def _rebuild(b: OpBinder, tb: TorchBuilder, operands: List[Tensor]) -> List:
    """The same ONNX op (name, attributes, result types) on new operands."""
    attributes = {key: b.op.attributes[key] for key in b.attribute_keys()}
    results = [str(r.type) for r in b.op.results]
    return list(tb.op("torch.operator", [t.value for t in operands], results, attributes))


# -- before import: constants in the ONNX model -------------------------------------------


def check_constant_indices(graph: onnx.GraphProto) -> None:
    """Constant indices out of their static data dim, refused (onnxruntime rejects them when run)."""
    constants, dims = integer_constants(graph), _onnx_static_dims(graph)
    for node in graph.node:
        if node.op_type not in TABLE or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        values, data_dims = constants.get(node.input[1]), dims.get(node.input[0])
        if values is None or data_dims is None:
            continue
        for column, n, bound in _onnx_index_bounds(node, values, data_dims):
            bad = column[(column < -n) | (column >= n)]
            if bad.size:
                fail(f"{node_label(node)}: input 1 'indices' holds {int(bad.flat[0])}, outside [-{n}, {n}) for {bound} "
                     "(onnxruntime rejects it at run time)")


def _onnx_index_bounds(node: onnx.NodeProto, values: np.ndarray, data_dims: List[Optional[int]]) -> List[Tuple[np.ndarray, int, str]]:
    """(index values, static bound n, what n is) to check; dynamic bounds are checked at run time."""
    row, rank = TABLE[node.op_type], len(data_dims)
    attrs = {a.name: a.i for a in node.attribute if a.type == AttributeProto.INT}
    if row.axis:
        axis = attrs.get("axis", 0)
        if not -rank <= axis < rank or data_dims[axis % rank] is None:
            return []
        return [(values, data_dims[axis % rank], f"data dimension {axis}")]
    first = row.first_dim(attrs)
    if values.ndim < 1 or not 0 <= first < rank or first + values.shape[-1] > rank:
        return []
    return [(values[..., j], data_dims[first + j], f"column {j} (data dimension {first + j})")
            for j in range(values.shape[-1]) if data_dims[first + j] is not None]


def _onnx_static_dims(graph: onnx.GraphProto) -> Dict[str, List[Optional[int]]]:
    dims: Dict[str, List[Optional[int]]] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            dims[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    for init in graph.initializer:
        dims.setdefault(init.name, list(init.dims))
    return dims
