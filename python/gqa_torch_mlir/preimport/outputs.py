"""Declared graph output shapes: released for shape inference (onnxruntime ignores them but for GroupQueryAttention and loops), then typed."""

from __future__ import annotations

from typing import Dict

import onnx

from .checks import lowered_contrib_op
from .graph import fail, node_label
from .shapes import GQA


#: Ops whose declared graph outputs keep their shapes: GroupQueryAttention's are checked by its
#: lowering; ONNX infers no shape for a Loop's or Scan's outputs, and torch-mlir's conversion of
#: them needs the declared type to be the body's (a mismatch fails there, it is never computed).
_KEEP_DECLARED_OUTPUTS = frozenset({GQA, ("", "Loop"), ("", "Scan")})


def declared_output_shapes_released(proto: onnx.ModelProto) -> Dict[int, onnx.TypeProto]:
    """Clear, in place, the declared shapes of the graph outputs that ops other than
    GroupQueryAttention compute, for inference to type them; returns their declared
    types by output index, which the caller puts back (the model is the caller's).

    onnxruntime computes an output whatever its declared shape says (it only
    warns); the importer typed the value by the declaration and torch-mlir's
    lowerings computed the declared number of rows: logits declared
    [batch, 1, vocab] gave row 0 of a 5-token prefill (the caches lost rows 1-4)
    on iree-cpu and a double free on the refbackend, a declared batch of 2 read
    past the buffer.  GroupQueryAttention's own declared outputs are checked by
    its lowering."""
    graph = proto.graph
    producers = {name: node for node in graph.node for name in node.output if name}
    given = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    declared = {}
    for i, out in enumerate(graph.output):
        node = producers.get(out.name)
        if node is None or out.name in given or (node.domain, node.op_type) in _KEEP_DECLARED_OUTPUTS:
            continue
        if out.type.HasField("tensor_type") and out.type.tensor_type.HasField("shape"):
            declared[i] = onnx.TypeProto()
            declared[i].CopyFrom(out.type)
            out.type.tensor_type.ClearField("shape")
    return declared


def declared_output_shapes_restored(proto: onnx.ModelProto, declared: Dict[int, onnx.TypeProto]) -> None:
    for i, declared_type in declared.items():
        proto.graph.output[i].type.CopyFrom(declared_type)


def released_outputs_ranked(graph: onnx.GraphProto, ranks: Dict[str, int]) -> None:
    """A released output inference left without a shape keeps its declared rank, every dim symbolic."""
    inferred = {vi.name: vi.type for vi in graph.value_info}
    for out in graph.output:
        if out.name not in ranks or out.type.tensor_type.HasField("shape"):
            continue
        if out.name in inferred and inferred[out.name].tensor_type.HasField("shape"):
            out.type.tensor_type.shape.CopyFrom(inferred[out.name].tensor_type.shape)
            continue
        shape = out.type.tensor_type.shape
        for i in range(ranks[out.name]):
            shape.dim.add().dim_param = f"{out.name}_dim{i}"


def type_graph_outputs(graph: onnx.GraphProto) -> None:
    """Graph outputs declared without a type take the inferred one, as onnxruntime infers it;
    an undefined element type, or a contrib op's output declared a sequence or optional, is refused.
    (The importer would declare the function's result ``!torch.none`` or a list, and the
    module would fail to verify with no name.)"""
    inferred = {vi.name: vi.type for vi in graph.value_info}
    producers = {name: node for node in graph.node for name in node.output if name}
    for out in graph.output:
        kind = out.type.WhichOneof("value")
        node = producers.get(out.name)
        if kind in ("sequence_type", "optional_type", "map_type", "sparse_tensor_type") and node is not None and lowered_contrib_op(node):
            what = kind.split("_type")[0]
            fail(f"{node_label(node)}: graph output '{out.name}' is declared as {'an' if what[0] in 'aeiou' else 'a'} {what}, but "
                  f"{node.op_type}'s outputs are tensors (onnxruntime rejects the model)")
        if kind == "tensor_type" and not out.type.tensor_type.elem_type:
            fail(f"graph output '{out.name}' is declared a tensor of undefined element type (onnxruntime rejects the model)")
        if kind is None and out.name in inferred and inferred[out.name].tensor_type.elem_type:
            out.type.CopyFrom(inferred[out.name])
    _type_repeated_graph_outputs(graph)


def _type_repeated_graph_outputs(graph: onnx.GraphProto) -> None:
    """A value listed twice as a graph output (onnxruntime returns it twice) takes, where one
    listing has no shape, the shaped listing's type: the importer typed the bare one rank 0."""
    shaped = {}
    for out in graph.output:
        if out.type.HasField("tensor_type") and out.type.tensor_type.HasField("shape"):
            shaped.setdefault(out.name, out.type)
    for out in graph.output:
        bare = not out.type.HasField("tensor_type") or not out.type.tensor_type.HasField("shape")
        if bare and out.name in shaped and (not out.type.tensor_type.elem_type or out.type.tensor_type.elem_type == shaped[out.name].tensor_type.elem_type):
            out.type.CopyFrom(shaped[out.name])
