"""The ONNX model before import: checks onnxruntime makes at load, and the forms the importer needs.

``prepare_for_import(proto)`` is what both backends import.  torch-mlir's
importer takes the model as it is: it drops what it does not model (a graph
attribute on an ordinary node, a duplicated attribute, a duplicated value
name) and fails with a message that names nothing for others (an attribute
type it has no MLIR form for, external data that was not loaded).
onnxruntime rejects these models at load; here each is refused by name.
The rest is made importable as onnxruntime reads it: the default domain's
alias ``ai.onnx``, ONNX local functions (inlined), node domains without an
opset import (in subgraphs too).  Constant indices into static dims are
checked here, where their values are known (the importer turns every
constant into a resource blob the pass cannot read).
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import onnx
import onnx.defs
from onnx import AttributeProto, numpy_helper

from .errors import GqaTorchMlirError, LoweringError
from .onnx_loops import carried_types_restored, loops_normalized
from .onnx_shapes import GQA, infer_shapes_with_contrib_ops
from .onnx_tensors import check_element_types, needs_raw_data, storage_normalized, tensors_of
from .registry import REGISTRY

#: Attribute types our contrib-op lowerings read; the others have no MLIR form in the importer.
PLAIN_ATTRIBUTE_TYPES = (AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING,
                         AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.STRINGS)


def prepare_for_import(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Checked, with shapes inferred, in the form the importer takes (a copy when changed)."""
    _check_external_data_loaded(proto)
    _check_versions(proto)
    proto = _default_domain_alias_resolved(proto)
    proto = _local_functions_inlined(proto)
    check_contrib_domains(proto)
    opset = _default_opset(proto)
    _check_graph_input_types(proto.graph)
    _check_values_defined(proto.graph, set())
    for graph in all_graphs(proto.graph):
        _check_nodes(graph, opset)
        _check_unique_names(graph)
        _check_tensor_types(graph)
    check_element_types(all_graphs(proto.graph))
    proto, carried = loops_normalized(_tensor_storage_normalized(_graph_forms_normalized(proto)))
    declared = _declared_output_shapes_released(proto)
    try:
        inferred = infer_shapes_with_contrib_ops(proto)  # a new model
    finally:
        _declared_output_shapes_restored(proto, declared)
    proto = inferred
    carried_types_restored(proto, carried)
    _released_outputs_ranked(proto.graph, {proto.graph.output[i].name: len(t.tensor_type.shape.dim) for i, t in declared.items()})
    _type_graph_outputs(proto.graph)
    _check_constant_indices(proto.graph)
    return _unnamed_nodes_labelled(with_node_domains_imported(proto))


def _fail(message: str) -> None:
    raise LoweringError(message, [message])


def _node_label(node: onnx.NodeProto) -> str:
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


def _unnamed_nodes_labelled(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Every unnamed node named by its position: the importer makes a node's name its location,
    and each diagnostic of a later stage starts with it (``""`` for an unnamed one)."""
    if all(node.name for node in all_nodes(proto.graph)):
        return proto
    proto = _copy(proto)
    taken = {node.name for node in all_nodes(proto.graph)}
    for graph in all_graphs(proto.graph):
        where = "" if graph is proto.graph else f" of graph '{graph.name}'"
        for i, node in enumerate(graph.node):
            if not node.name:
                label = f"node #{i}{where} (unnamed)"
                while label in taken:  # a node named so already, or a subgraph of the same name
                    label += "'"
                node.name = label
                taken.add(label)
    return proto


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    return fixed


# -- loading -------------------------------------------------------------------------


def _check_external_data_loaded(proto: onnx.ModelProto) -> None:
    for init in proto.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL and not init.raw_data:
            raise GqaTorchMlirError(
                f"initializer '{init.name}' keeps its data in an external file that was not loaded: pass the "
                "model's path, or load it with onnx.load(path) (which loads external data)"
            )


def _check_versions(proto: onnx.ModelProto) -> None:
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


def _default_domain_alias_resolved(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``ai.onnx`` as ``""`` (onnxruntime reads them as one domain; the importer needs ``""``)."""
    aliased = any(o.domain == "ai.onnx" for o in proto.opset_import) or any(n.domain == "ai.onnx" for n in all_nodes(proto.graph))
    if not aliased:
        return proto
    fixed = _copy(proto)
    versions = {o.domain: o.version for o in fixed.opset_import}
    if "ai.onnx" in versions:
        default = max(versions.get("", 0), versions["ai.onnx"])
        kept = [o for o in fixed.opset_import if o.domain not in ("", "ai.onnx")]
        del fixed.opset_import[:]
        fixed.opset_import.extend(kept + [onnx.helper.make_opsetid("", default)])
    for node in all_nodes(fixed.graph):
        if node.domain == "ai.onnx":
            node.domain = ""
    return fixed


def _local_functions_inlined(proto: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX local functions (``model.functions``) inlined: the importer keeps a call to one as an
    unknown op, so a GroupQueryAttention in its body would never be lowered or checked."""
    if not proto.functions:
        return proto
    default = lambda domain: "" if domain == "ai.onnx" else domain
    for function in proto.functions:
        declared = {default(o.domain) for o in function.opset_import}
        for node in function.node:
            if default(node.domain) not in declared:
                _fail(f"local function '{function.name}': node {node.op_type} is in domain '{node.domain}', which the "
                      "function's opset_import does not declare (onnxruntime rejects the model)")
    from onnx import inliner

    try:
        return inliner.inline_local_functions(proto)
    except Exception as e:  # a malformed function body
        raise GqaTorchMlirError(f"cannot inline the model's local functions: {e}") from None


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
        near = by_lower.get(("onnx." + node.op_type).lower())
        if not domains and near:  # op types are case-sensitive: onnxruntime knows no such op
            _fail(f"{_node_label(node)}: no op {node.op_type} in domain '{domain or 'ai.onnx'}' (onnxruntime rejects the "
                  f"model; op types are case-sensitive: {near[len('onnx.'):]}?)")
        if not domains or domain in domains:
            continue
        where = f"node '{node.name}'" if node.name else f"a {node.op_type} node"
        placed = "the default ONNX domain" if domain == "" else f"domain '{domain}'"
        defined = ", ".join(d or "the default ONNX domain" for d in sorted(domains))
        _fail(f"{where}: {node.op_type} is in {placed}; onnxruntime defines it in {defined} only (set the node's domain)")


def with_node_domains_imported(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Add an opset_import for node domains the model does not declare (subgraphs included).

    onnxruntime runs such a model with the domain's latest version (1 for
    com.microsoft); torch-mlir's importer fails on it.
    """
    declared = {o.domain for o in proto.opset_import}
    missing = sorted(({n.domain for n in all_nodes(proto.graph)} | {""}) - declared - {"ai.onnx"})
    if not missing:
        return proto
    fixed = _copy(proto)
    # The default domain at the newest version ONNX defines (torch-mlir's importer needs one even unused).
    fixed.opset_import.extend(onnx.helper.make_opsetid(d, onnx.defs.onnx_opset_version() if d == "" else 1) for d in missing)
    return fixed


# -- nodes and names ---------------------------------------------------------------------


def _lowered(node: onnx.NodeProto) -> bool:
    """Whether one of our lowerings (or guards) takes this node: the importer drops a graph
    attribute on it silently."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    return any(e.domain == domain for e in REGISTRY.candidates("onnx." + node.op_type))


def _lowered_contrib_op(node: onnx.NodeProto) -> bool:
    return node.domain not in ("", "ai.onnx") and any(e.domain == node.domain for e in REGISTRY.candidates("onnx." + node.op_type))


def _default_opset(proto: onnx.ModelProto) -> Optional[int]:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def _check_nodes(graph: onnx.GraphProto, opset: Optional[int]) -> None:
    for node in graph.node:
        names = [a.name for a in node.attribute]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            _fail(f"{_node_label(node)}: attribute '{twice[0]}' is given more than once (onnxruntime rejects the model)")
        _check_schema_attributes(node, opset)
        if not _lowered(node):  # others (control flow, BeamSearch's subgraphs...) are the importer's
            continue
        for attr in node.attribute:
            if attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                _fail(f"{_node_label(node)}: attribute '{attr.name}' is a graph, which {node.op_type} does not take "
                      "(onnxruntime rejects the model)")
            if _lowered_contrib_op(node) and attr.type not in PLAIN_ATTRIBUTE_TYPES and not attr.ref_attr_name:
                kind = AttributeProto.AttributeType.Name(attr.type)
                _fail(f"{_node_label(node)}: attribute '{attr.name}' has type {kind}; {node.op_type}'s attributes are "
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
            _fail(f"{_node_label(node)}: attribute '{attr.name}' is not an attribute of {node.op_type} at opset {opset} "
                  f"(opset {schema.since_version}'s {node.op_type}); onnxruntime rejects the model")


def _check_tensor_types(graph: onnx.GraphProto) -> None:
    """String tensors (which torch-mlir has no type for) and a graph input listed twice are refused by name."""
    inputs = [i.name for i in graph.input]
    twice = sorted({n for n in inputs if inputs.count(n) > 1})
    if twice:
        _fail(f"graph input '{twice[0]}' is listed more than once (onnxruntime rejects the model)")
    strings = [i.name for i in graph.input if i.type.tensor_type.elem_type == onnx.TensorProto.STRING]
    strings += [i.name for i in graph.initializer if i.data_type == onnx.TensorProto.STRING]
    if strings:
        _fail(f"'{strings[0]}' is a string tensor; supported: numeric tensors (torch-mlir has no string tensors)")
    if graph.sparse_initializer:
        _fail(f"sparse initializer '{graph.sparse_initializer[0].values.name}' is not supported (torch-mlir's importer "
              "reads dense initializers only); store it dense")


def _check_graph_input_types(graph: onnx.GraphProto) -> None:
    """Each input of the main graph has a dense tensor type (or a sequence or optional of one)
    with a defined element type: onnxruntime rejects an untyped input at load, and the importer
    made it ``!torch.none``, which reads as an input left empty (a head_sink or attention_bias
    silently dropped)."""
    for vi in graph.input:
        kind = vi.type.WhichOneof("value")
        if kind is None:
            _fail(f"graph input '{vi.name}' has no type (onnxruntime rejects the model: it needs type information)")
        if kind not in ("tensor_type", "sequence_type", "optional_type"):
            _fail(f"graph input '{vi.name}' is a {kind.replace('_type', '').replace('_', ' ')}; supported: tensors "
                  "(torch-mlir's importer has no type for it)")
        if kind == "tensor_type" and vi.type.tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
            _fail(f"graph input '{vi.name}' has an undefined element type (onnxruntime rejects the model)")
    for init in graph.initializer:
        if init.data_type == onnx.TensorProto.UNDEFINED:
            _fail(f"initializer '{init.name}' has an undefined data type (onnxruntime rejects the model)")


def _check_values_defined(graph: onnx.GraphProto, outer: set) -> None:
    """Every name a node reads, and every graph output, is defined: in the graph (in any order,
    they are sorted later), or for a subgraph in an enclosing one.  The importer stopped with a
    dump of the node; onnxruntime rejects the model."""
    defined = outer | {i.name for i in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.values.name for i in graph.sparse_initializer}  # refused by name later
    defined |= {name for node in graph.node for name in node.output if name}
    for node in graph.node:
        missing = [name for name in node.input if name and name not in defined]
        if missing:
            _fail(f"{_node_label(node)}: input '{missing[0]}' is not a graph input, an initializer or the output of a "
                  "node (onnxruntime rejects the model)")
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _check_values_defined(sub, defined)
    missing = [o.name for o in graph.output if o.name not in defined]
    if missing:
        _fail(f"graph output '{missing[0]}' is not computed in graph '{graph.name}' (onnxruntime rejects the model)")


def _check_unique_names(graph: onnx.GraphProto) -> None:
    """Every value is defined once (graph inputs may repeat initializers, as older models do),
    and every node name is given once (onnxruntime rejects a repeated one; our diagnostics and
    run-time checks name the node)."""
    names = [node.name for node in graph.node if node.name]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        _fail(f"two nodes are named '{twice[0]}' (onnxruntime rejects the model: node names must be unique)")
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    for node in graph.node:
        for name in node.output:
            if not name:
                continue
            if name in defined:
                _fail(f"{_node_label(node)}: output '{name}' is already defined in the graph "
                      "(onnxruntime rejects a duplicate definition)")
            defined.add(name)


# -- graph forms onnxruntime reads and the importer does not ---------------------------


def _graph_forms_normalized(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model (a copy when changed) in forms the importer takes, read as onnxruntime reads
    them: an initializer given twice (onnxruntime uses the first), a negative dim_value
    (unknown, as onnxruntime reads it), nodes out of topological order (sorted), an empty
    graph name (no function name). Initializer data of the wrong size is refused by name,
    as onnxruntime refuses it (the importer splatted a single element)."""
    graphs = list(all_graphs(proto.graph))
    for graph in graphs:
        for init in graph.initializer:
            _check_initializer_size(init)
    if proto.graph.name and not any(_needs_normalizing(g) for g in graphs):
        return proto
    proto = _copy(proto)
    if not proto.graph.name:
        proto.graph.name = "main_graph"
    for graph in all_graphs(proto.graph):
        _first_initializers_kept(graph)
        for dim in _negative_dims(graph):
            dim.Clear()
        _sort_topologically(graph)
    return proto


def _tensor_storage_normalized(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model (a copy when changed) with every tensor's data in ``raw_data`` (onnx_tensors.py)."""
    if not any(needs_raw_data(t) for g in all_graphs(proto.graph) for t, _ in tensors_of(g)):
        return proto
    proto = _copy(proto)
    storage_normalized(all_graphs(proto.graph))
    return proto


def _needs_normalizing(graph: onnx.GraphProto) -> bool:
    names = [i.name for i in graph.initializer]
    return len(set(names)) != len(names) or any(True for _ in _negative_dims(graph)) or _topological_order(graph) != list(range(len(graph.node)))


def _negative_dims(graph: onnx.GraphProto):
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value < 0:
                yield dim


def _first_initializers_kept(graph: onnx.GraphProto) -> None:
    seen, kept = set(), []
    for init in graph.initializer:
        if init.name not in seen:
            seen.add(init.name)
            kept.append(init)
    if len(kept) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


_FOUR_BIT_TYPES = {getattr(onnx.TensorProto, t) for t in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(onnx.TensorProto, t)}


def _check_initializer_size(init: onnx.TensorProto) -> None:
    """The data holds as many elements as the dims say (the importer splats a single one)."""
    n = int(np.prod(init.dims)) if init.dims else 1
    if init.HasField("raw_data"):
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
        except Exception:  # a type numpy has no form for: the importer's to judge
            return
        bits = 4 if init.data_type in _FOUR_BIT_TYPES else 8 * itemsize
        want = -(-n * bits // 8)
        if len(init.raw_data) != want:
            _fail(f"initializer '{init.name}': raw_data holds {len(init.raw_data)} bytes, dims {list(init.dims)} need {want} "
                  "(onnxruntime rejects the model)")
        return
    if init.data_location == onnx.TensorProto.EXTERNAL:
        return
    try:
        numpy_helper.to_array(init)
    except Exception as e:
        _fail(f"initializer '{init.name}': its data does not fit dims {list(init.dims)} ({e}; onnxruntime rejects the model)")


def _sort_topologically(graph: onnx.GraphProto) -> None:
    order = _topological_order(graph)
    if order != list(range(len(graph.node))):
        nodes = [onnx.NodeProto() for _ in order]
        for copy, i in zip(nodes, order):
            copy.CopyFrom(graph.node[i])
        del graph.node[:]
        graph.node.extend(nodes)


def _topological_order(graph: onnx.GraphProto) -> List[int]:
    """Node indices in an order where each input is produced before it is read (onnxruntime
    sorts them too); names from outside the graph (inputs, initializers, an outer scope) are
    ready. A cycle is refused by name."""
    produced_by = {name: i for i, node in enumerate(graph.node) for name in node.output if name}
    reads = [_reads(node) for node in graph.node]
    order, state = [], [0] * len(graph.node)  # 0 new, 1 on the stack, 2 placed
    for root in range(len(graph.node)):
        if state[root]:
            continue
        state[root], stack = 1, [(root, iter(reads[root]))]
        while stack:
            j, pending = stack[-1]
            for name in pending:
                k = produced_by.get(name)
                if k is not None and state[k] == 1:
                    _fail(f"{_node_label(graph.node[k])}: the graph has a cycle through '{name}' (onnxruntime rejects "
                          "the model: it must be acyclic)")
                if k is not None and state[k] == 0:
                    state[k] = 1
                    stack.append((k, iter(reads[k])))
                    break
            else:
                stack.pop()
                state[j] = 2
                order.append(j)
    return order


def _reads(node: onnx.NodeProto) -> List[str]:
    """The names a node reads, its subgraphs' reads of outer values included (not the names
    a subgraph defines itself, which may shadow later outer values)."""
    names = [n for n in node.input if n]
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            own = {i.name for i in sub.input} | {i.name for i in sub.initializer} | {o for n in sub.node for o in n.output}
            names.extend(n for inner in sub.node for n in _reads(inner) if n not in own)
    return names


#: Ops whose declared graph outputs keep their shapes: GroupQueryAttention's are checked by its
#: lowering; ONNX infers no shape for a Loop's or Scan's outputs, and torch-mlir's conversion of
#: them needs the declared type to be the body's (a mismatch fails there, it is never computed).
_KEEP_DECLARED_OUTPUTS = frozenset({GQA, ("", "Loop"), ("", "Scan")})


def _declared_output_shapes_released(proto: onnx.ModelProto) -> Dict[int, onnx.TypeProto]:
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


def _declared_output_shapes_restored(proto: onnx.ModelProto, declared: Dict[int, onnx.TypeProto]) -> None:
    for i, declared_type in declared.items():
        proto.graph.output[i].type.CopyFrom(declared_type)


def _released_outputs_ranked(graph: onnx.GraphProto, ranks: Dict[str, int]) -> None:
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


def _type_graph_outputs(graph: onnx.GraphProto) -> None:
    """Graph outputs declared without a type take the inferred one, as onnxruntime infers it;
    an undefined element type, or a contrib op's output declared a sequence or optional, is refused.
    (The importer would declare the function's result ``!torch.none`` or a list, and the
    module would fail to verify with no name.)"""
    inferred = {vi.name: vi.type for vi in graph.value_info}
    producers = {name: node for node in graph.node for name in node.output if name}
    for out in graph.output:
        kind = out.type.WhichOneof("value")
        node = producers.get(out.name)
        if kind in ("sequence_type", "optional_type", "map_type", "sparse_tensor_type") and node is not None and _lowered_contrib_op(node):
            what = kind.split("_type")[0]
            _fail(f"{_node_label(node)}: graph output '{out.name}' is declared as {'an' if what[0] in 'aeiou' else 'a'} {what}, but "
                  f"{node.op_type}'s outputs are tensors (onnxruntime rejects the model)")
        if kind == "tensor_type" and not out.type.tensor_type.elem_type:
            _fail(f"graph output '{out.name}' is declared a tensor of undefined element type (onnxruntime rejects the model)")
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


# -- constant indices ----------------------------------------------------------------------


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


def _check_constant_indices(graph: onnx.GraphProto) -> None:
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
                _fail(f"{_node_label(node)}: input 1 'indices' holds {int(bad.flat[0])}, outside [-{n}, {n}) for {bound} "
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
