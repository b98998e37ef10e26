"""Walking an ONNX model's graphs and nodes, naming them in diagnostics, refusing by name: the leaf the other steps share."""

from __future__ import annotations

from typing import Iterator, Optional

import onnx

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
