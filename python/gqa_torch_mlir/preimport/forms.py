"""The model rewritten into forms the importer takes, read as onnxruntime reads them.

The default domain's alias ``ai.onnx``, ONNX local functions (inlined), node domains
without an opset import (in subgraphs too), duplicated initializers, negative dims,
nodes out of order, tensor data in typed fields, unnamed nodes.
"""

from __future__ import annotations

from typing import List

import onnx

from ..errors import GqaTorchMlirError
from .checks import check_initializer_size
from .graph import all_graphs, all_nodes, copy_model, fail, node_label
from .tensors import needs_raw_data, storage_normalized, tensors_of


def unnamed_nodes_labelled(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Every unnamed node named by its position: the importer makes a node's name its location,
    and each diagnostic of a later stage starts with it (``""`` for an unnamed one)."""
    if all(node.name for node in all_nodes(proto.graph)):
        return proto
    proto = copy_model(proto)
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


def default_domain_alias_resolved(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``ai.onnx`` as ``""`` (onnxruntime reads them as one domain; the importer needs ``""``)."""
    aliased = any(o.domain == "ai.onnx" for o in proto.opset_import) or any(n.domain == "ai.onnx" for n in all_nodes(proto.graph))
    if not aliased:
        return proto
    fixed = copy_model(proto)
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


def local_functions_inlined(proto: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX local functions (``model.functions``) inlined: the importer keeps a call to one as an
    unknown op, so a GroupQueryAttention in its body would never be lowered or checked."""
    if not proto.functions:
        return proto
    default = lambda domain: "" if domain == "ai.onnx" else domain
    for function in proto.functions:
        declared = {default(o.domain) for o in function.opset_import}
        for node in function.node:
            if default(node.domain) not in declared:
                fail(f"local function '{function.name}': node {node.op_type} is in domain '{node.domain}', which the "
                      "function's opset_import does not declare (onnxruntime rejects the model)")
    from onnx import inliner

    try:
        return inliner.inline_local_functions(proto)
    except Exception as e:  # a malformed function body
        raise GqaTorchMlirError(f"cannot inline the model's local functions: {e}") from None


def with_node_domains_imported(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Add an opset_import for node domains the model does not declare (subgraphs included).

    onnxruntime runs such a model with the domain's latest version (1 for
    com.microsoft); torch-mlir's importer fails on it.
    """
    declared = {o.domain for o in proto.opset_import}
    missing = sorted(({n.domain for n in all_nodes(proto.graph)} | {""}) - declared - {"ai.onnx"})
    if not missing:
        return proto
    fixed = copy_model(proto)
    # The default domain at the newest version ONNX defines (torch-mlir's importer needs one even unused).
    fixed.opset_import.extend(onnx.helper.make_opsetid(d, onnx.defs.onnx_opset_version() if d == "" else 1) for d in missing)
    return fixed


def graph_forms_normalized(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model (a copy when changed) in forms the importer takes, read as onnxruntime reads
    them: an initializer given twice (onnxruntime uses the first), a negative dim_value
    (unknown, as onnxruntime reads it), nodes out of topological order (sorted), an empty
    graph name (no function name). Initializer data of the wrong size is refused by name,
    as onnxruntime refuses it (the importer splatted a single element)."""
    graphs = list(all_graphs(proto.graph))
    for graph in graphs:
        for init in graph.initializer:
            check_initializer_size(init)
    if proto.graph.name and not any(_needs_normalizing(g) for g in graphs):
        return proto
    proto = copy_model(proto)
    if not proto.graph.name:
        proto.graph.name = "main_graph"
    for graph in all_graphs(proto.graph):
        _first_initializers_kept(graph)
        for dim in _negative_dims(graph):
            dim.Clear()
        _sort_topologically(graph)
    return proto


def tensor_storage_normalized(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model (a copy when changed) with every tensor's data in ``raw_data`` (tensors.py)."""
    if not any(needs_raw_data(t) for g in all_graphs(proto.graph) for t, _ in tensors_of(g)):
        return proto
    proto = copy_model(proto)
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
                    fail(f"{node_label(graph.node[k])}: the graph has a cycle through '{name}' (onnxruntime rejects "
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
