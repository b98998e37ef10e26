"""Walking an ONNX model's graphs and nodes, naming them in diagnostics, refusing by name: the leaf the other steps share."""

from __future__ import annotations

from typing import Dict, Iterator, Optional

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import LoweringError


def fail(message: str) -> None:
    raise LoweringError(message, [message])


def node_label(node: onnx.NodeProto) -> str:
    return f"node '{node.name}' ({node.op_type})" if node.name else f"a {node.op_type} node"


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from all_graphs(sub)


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for g in all_graphs(graph):
        yield from g.node


def copy_model(proto: onnx.ModelProto) -> onnx.ModelProto:
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    return fixed


def default_opset(proto: onnx.ModelProto) -> Optional[int]:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def fresh_name(name: str, taken: set) -> str:
    """``name``, primed until no value or node of ``taken`` has it; then taken too."""
    while name in taken:
        name += "'"
    taken.add(name)
    return name


def integer_constants(graph: onnx.GraphProto) -> Dict[str, np.ndarray]:
    """Integer initializers (up to 64k elements; not one marked as external data, which
    numpy_helper would read from its file) and Constant nodes' values, by name."""
    INTS = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
    found = {i.name: numpy_helper.to_array(i) for i in graph.initializer
             if i.data_type in INTS and np.prod(i.dims, dtype=np.int64) <= 1 << 16
             and i.data_location != onnx.TensorProto.EXTERNAL}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type in INTS:
                    found[node.output[0]] = numpy_helper.to_array(attr.t)
                elif attr.name == "value_int":
                    found[node.output[0]] = np.array(attr.i, np.int64)
                elif attr.name == "value_ints":
                    found[node.output[0]] = np.array(list(attr.ints), np.int64)
    return found
