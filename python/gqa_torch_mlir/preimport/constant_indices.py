"""Constant indices into static dims, checked where their values are known (the importer turns
every constant into a resource blob the pass cannot read).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from .graph import fail, node_label


INDEX_OPS = {"Gather": "axis", "GatherElements": "axis", "ScatterElements": "axis", "GatherND": None, "ScatterND": None}


def _constants(graph: onnx.GraphProto) -> Dict[str, np.ndarray]:
    values = {init.name: init for init in graph.initializer}
    found: Dict[str, np.ndarray] = {}
    for name, init in values.items():
        if init.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and np.prod(init.dims, dtype=np.int64) <= 1 << 16:
            found[name] = numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
                    found[node.output[0]] = numpy_helper.to_array(attr.t)
                elif attr.name == "value_int":
                    found[node.output[0]] = np.array(attr.i, np.int64)
                elif attr.name == "value_ints":
                    found[node.output[0]] = np.array(list(attr.ints), np.int64)
    return found


def _static_dims(graph: onnx.GraphProto) -> Dict[str, List[Optional[int]]]:
    dims: Dict[str, List[Optional[int]]] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            dims[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    for init in graph.initializer:
        dims.setdefault(init.name, list(init.dims))
    return dims


def check_constant_indices(graph: onnx.GraphProto) -> None:
    """Constant indices out of their static data dim, refused (onnxruntime rejects them when run)."""
    constants, dims = _constants(graph), _static_dims(graph)
    for node in graph.node:
        if node.op_type not in INDEX_OPS or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        values, data_dims = constants.get(node.input[1]), dims.get(node.input[0])
        if values is None or data_dims is None:
            continue
        for column, n, bound in _index_bounds(node, values, data_dims):
            bad = column[(column < -n) | (column >= n)]
            if bad.size:
                fail(f"{node_label(node)}: input 1 'indices' holds {int(bad.flat[0])}, outside [-{n}, {n}) for {bound} "
                      "(onnxruntime rejects it at run time)")


def _index_bounds(node: onnx.NodeProto, values: np.ndarray, data_dims: List[Optional[int]]) -> List[Tuple[np.ndarray, int, str]]:
    """(index values, static bound n, what n is) to check; dynamic bounds are checked at run time."""
    rank = len(data_dims)
    attrs = {a.name: a.i for a in node.attribute if a.type == AttributeProto.INT}
    if INDEX_OPS[node.op_type] == "axis":
        axis = attrs.get("axis", 0)
        if not -rank <= axis < rank or data_dims[axis % rank] is None:
            return []
        return [(values, data_dims[axis % rank], f"data dimension {axis}")]
    first = attrs.get("batch_dims", 0) if node.op_type == "GatherND" else 0
    if values.ndim < 1 or not 0 <= first < rank or first + values.shape[-1] > rank:
        return []
    out = []
    for j in range(values.shape[-1]):
        n = data_dims[first + j]
        if n is not None:
            out.append((values[..., j], n, f"column {j} (data dimension {first + j})"))
    return out
