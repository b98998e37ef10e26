"""The checks onnxruntime makes when it loads a model, each failure a refusal that names what is at fault.

torch-mlir's importer takes the model as it is: it drops what it does not model
(a graph attribute on an ordinary node, a duplicated attribute, a duplicated value
name) and fails with a message that names nothing for others (an attribute type it
has no MLIR form for, external data that was not loaded).  onnxruntime rejects these
models at load; here each is refused by name.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from ..dispatch import SHARED_NAMES
from ..errors import GqaTorchMlirError
from ..registry import REGISTRY
from .graph import all_nodes, fail, node_label
from .tensors import FOUR_BIT_TYPES


#: Attribute types our contrib-op lowerings read; the others have no MLIR form in the importer.
PLAIN_ATTRIBUTE_TYPES = (AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING,
                         AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.STRINGS)


def check_external_data_loaded(proto: onnx.ModelProto) -> None:
    for init in proto.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL and not init.raw_data:
            raise GqaTorchMlirError(
                f"initializer '{init.name}' keeps its data in an external file that was not loaded: pass the "
                "model's path, or load it with onnx.load(path) (which loads external data)"
            )


def check_versions(proto: onnx.ModelProto) -> None:
    """An IR version or default-domain opset newer than the onnx package defines (onnxruntime
    rejects those too): no importer reads them."""
    import onnx.defs

    if not proto.HasField("graph"):
        raise GqaTorchMlirError("the model has no graph (an empty or truncated ModelProto?); onnxruntime rejects it too")
    if not proto.opset_import:
        raise GqaTorchMlirError("the model imports no opset (ONNX requires at least one); onnxruntime rejects it too")
    if proto.ir_version > onnx.IR_VERSION:
        raise GqaTorchMlirError(f"the model's ir_version {proto.ir_version} is newer than ONNX defines ({onnx.IR_VERSION})")
    newest = onnx.defs.onnx_opset_version()
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > newest:
            raise GqaTorchMlirError(f"the model imports opset {o.version} of the default ONNX domain, newer than ONNX defines ({newest})")


def check_contrib_domains(proto: onnx.ModelProto) -> None:
    """Refuse an op we lower placed in another domain than the one onnxruntime defines it in.

    torch-mlir's importer names every node ``onnx.<OpType>`` whatever its
    domain, so the pass cannot tell; onnxruntime refuses such a model at load
    (it defines e.g. GroupQueryAttention in com.microsoft only).
    """
    by_lower = {name.lower(): name for name in REGISTRY.names()}
    for node in all_nodes(proto.graph):
        domain = "" if node.domain == "ai.onnx" else node.domain
        domains = {e.domain for e in REGISTRY.candidates("onnx." + node.op_type)}
        if domains and "onnx." + node.op_type in SHARED_NAMES:  # two domains define it: both are fine (dispatch.py)
            domains |= set(SHARED_NAMES["onnx." + node.op_type].since)
        near = by_lower.get(("onnx." + node.op_type).lower())
        if not domains and near:  # op types are case-sensitive: onnxruntime knows no such op
            fail(f"{node_label(node)}: no op {node.op_type} in domain '{domain or 'ai.onnx'}' (onnxruntime rejects the "
                  f"model; op types are case-sensitive: {near[len('onnx.'):]}?)")
        if not domains or domain in domains:
            continue
        where = f"node '{node.name}'" if node.name else f"a {node.op_type} node"
        placed = "the default ONNX domain" if domain == "" else f"domain '{domain}'"
        defined = ", ".join(d or "the default ONNX domain" for d in sorted(domains))
        fail(f"{where}: {node.op_type} is in {placed}; onnxruntime defines it in {defined} only (set the node's domain)")


def _lowered(node: onnx.NodeProto) -> bool:
    """Whether one of our lowerings (or guards) takes this node: the importer drops a graph
    attribute on it silently."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    return any(e.domain == domain for e in REGISTRY.candidates("onnx." + node.op_type))


def lowered_contrib_op(node: onnx.NodeProto) -> bool:
    return node.domain not in ("", "ai.onnx") and any(e.domain == node.domain for e in REGISTRY.candidates("onnx." + node.op_type))


def check_nodes(graph: onnx.GraphProto, opset: Optional[int]) -> None:
    for node in graph.node:
        names = [a.name for a in node.attribute]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            fail(f"{node_label(node)}: attribute '{twice[0]}' is given more than once (onnxruntime rejects the model)")
        _check_schema_attributes(node, opset)
        if not _lowered(node):  # others (control flow, BeamSearch's subgraphs...) are the importer's
            continue
        for attr in node.attribute:
            if attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                fail(f"{node_label(node)}: attribute '{attr.name}' is a graph, which {node.op_type} does not take "
                      "(onnxruntime rejects the model)")
            if lowered_contrib_op(node) and attr.type not in PLAIN_ATTRIBUTE_TYPES and not attr.ref_attr_name:
                kind = AttributeProto.AttributeType.Name(attr.type)
                fail(f"{node_label(node)}: attribute '{attr.name}' has type {kind}; {node.op_type}'s attributes are "
                      "ints, floats or strings (onnxruntime rejects the model)")


def _check_schema_attributes(node: onnx.NodeProto, opset: Optional[int]) -> None:
    """A default-domain op's attributes must exist at the model's opset (``reduction`` of
    ScatterElements before 16, say): onnxruntime rejects the model; torch-mlir's conversion
    would read them anyway."""
    if node.domain not in ("", "ai.onnx") or opset is None:
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:  # an op ONNX does not define (onnxruntime's own, in the default domain)
        return
    for attr in node.attribute:
        if attr.name not in schema.attributes:
            fail(f"{node_label(node)}: attribute '{attr.name}' is not an attribute of {node.op_type} at opset {opset} "
                  f"(opset {schema.since_version}'s {node.op_type}); onnxruntime rejects the model")


def check_tensor_types(graph: onnx.GraphProto) -> None:
    """String tensors (which torch-mlir has no type for) and a graph input listed twice are refused by name."""
    inputs = [i.name for i in graph.input]
    twice = sorted({n for n in inputs if inputs.count(n) > 1})
    if twice:
        fail(f"graph input '{twice[0]}' is listed more than once (onnxruntime rejects the model)")
    strings = [i.name for i in graph.input if i.type.tensor_type.elem_type == onnx.TensorProto.STRING]
    strings += [i.name for i in graph.initializer if i.data_type == onnx.TensorProto.STRING]
    if strings:
        fail(f"'{strings[0]}' is a string tensor; supported: numeric tensors (torch-mlir has no string tensors)")
    if graph.sparse_initializer:
        fail(f"sparse initializer '{graph.sparse_initializer[0].values.name}' is not supported (torch-mlir's importer "
              "reads dense initializers only); store it dense")


def check_graph_input_types(graph: onnx.GraphProto) -> None:
    """Each input of the main graph has a dense tensor type (or a sequence or optional of one)
    with a defined element type: onnxruntime rejects an untyped input at load, and the importer
    made it ``!torch.none``, which reads as an input left empty (a head_sink or attention_bias
    silently dropped)."""
    for vi in graph.input:
        kind = vi.type.WhichOneof("value")
        if kind is None:
            fail(f"graph input '{vi.name}' has no type (onnxruntime rejects the model: it needs type information)")
        if kind not in ("tensor_type", "sequence_type", "optional_type"):
            fail(f"graph input '{vi.name}' is a {kind.replace('_type', '').replace('_', ' ')}; supported: tensors "
                  "(torch-mlir's importer has no type for it)")
        if kind == "tensor_type" and vi.type.tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
            fail(f"graph input '{vi.name}' has an undefined element type (onnxruntime rejects the model)")
    for init in graph.initializer:
        if init.data_type == onnx.TensorProto.UNDEFINED:
            fail(f"initializer '{init.name}' has an undefined data type (onnxruntime rejects the model)")


def check_values_defined(graph: onnx.GraphProto, outer: set) -> None:
    """Every name a node reads, and every graph output, is defined: in the graph (in any order,
    they are sorted later), or for a subgraph in an enclosing one.  The importer stopped with a
    dump of the node; onnxruntime rejects the model."""
    defined = outer | {i.name for i in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.values.name for i in graph.sparse_initializer}  # refused by name later
    defined |= {name for node in graph.node for name in node.output if name}
    for node in graph.node:
        missing = [name for name in node.input if name and name not in defined]
        if missing:
            fail(f"{node_label(node)}: input '{missing[0]}' is not a graph input, an initializer or the output of a "
                  "node (onnxruntime rejects the model)")
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                check_values_defined(sub, defined)
    missing = [o.name for o in graph.output if o.name not in defined]
    if missing:
        fail(f"graph output '{missing[0]}' is not computed in graph '{graph.name}' (onnxruntime rejects the model)")


def check_unique_names(graph: onnx.GraphProto) -> None:
    """Every value is defined once (graph inputs may repeat initializers, as older models do),
    and every node name is given once (onnxruntime rejects a repeated one; our diagnostics and
    run-time checks name the node)."""
    names = [node.name for node in graph.node if node.name]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        fail(f"two nodes are named '{twice[0]}' (onnxruntime rejects the model: node names must be unique)")
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    for node in graph.node:
        for name in node.output:
            if not name:
                continue
            if name in defined:
                fail(f"{node_label(node)}: output '{name}' is already defined in the graph "
                      "(onnxruntime rejects a duplicate definition)")
            defined.add(name)


def check_initializer_size(init: onnx.TensorProto) -> None:
    """The data holds as many elements as the dims say (the importer splats a single one)."""
    n = int(np.prod(init.dims)) if init.dims else 1
    if init.HasField("raw_data"):
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
        except Exception:  # a type numpy has no form for: the importer's to judge
            return
        bits = 4 if init.data_type in FOUR_BIT_TYPES else 8 * itemsize
        want = -(-n * bits // 8)
        if len(init.raw_data) != want:
            fail(f"initializer '{init.name}': raw_data holds {len(init.raw_data)} bytes, dims {list(init.dims)} need {want} "
                  "(onnxruntime rejects the model)")
        return
    if init.data_location == onnx.TensorProto.EXTERNAL:
        return
    try:
        numpy_helper.to_array(init)
    except Exception as e:
        fail(f"initializer '{init.name}': its data does not fit dims {list(init.dims)} ({e}; onnxruntime rejects the model)")
