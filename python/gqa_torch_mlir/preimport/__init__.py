"""The ONNX model before import: onnxruntime's load checks, and the forms torch-mlir's importer takes.

``prepare_for_import(proto)`` is what both backends import: :data:`STEPS` run in
order, each named for what it does, on a :class:`Preparation` (the model, a copy
once a step changes it, and what one step leaves for a later one).

  graph.py             walking graphs and nodes, labels, refusals (the leaf the others share)
  checks.py            onnxruntime's load checks, each a refusal by name
  forms.py             domain aliases, local functions, graph forms, tensor storage, node names
  tensors.py           tensor storage forms and element types
  loops.py             Loop nodes in the form torch-mlir's Loop conversion takes
  shapes.py            shape inference past our contrib ops
  outputs.py           declared graph output shapes released for inference, then typed
  dims.py              symbolic dims fixed in a copy of the model (for specialize.py; not a step)
  totals.py            GroupQueryAttention's total_sequence_length from a shape, in a form read on the host
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Tuple

import onnx

from .checks import (check_contrib_domains, check_external_data_loaded, check_graph_input_types, check_nodes,
                     check_tensor_types, check_unique_names, check_values_defined, check_versions)
from .forms import (default_domain_alias_resolved, graph_forms_normalized, local_functions_inlined, tensor_storage_normalized,
                    unnamed_nodes_labelled, with_node_domains_imported)
from .graph import all_graphs, default_opset
from .loops import carried_types_restored, loops_normalized
from .outputs import declared_output_shapes_released, declared_output_shapes_restored, released_outputs_ranked, type_graph_outputs
from .shapes import infer_shapes_with_contrib_ops
from .tensors import check_element_types
from .totals import totals_from_shapes


@dataclass
class Preparation:
    proto: onnx.ModelProto
    carried: Dict[str, onnx.TypeProto] = field(default_factory=dict)  # loop-carried types, restored after inference


def check_loading(p: Preparation) -> None:
    """External data loaded, IR and opset versions onnxruntime takes."""
    check_external_data_loaded(p.proto)
    check_versions(p.proto)


def resolve_domains(p: Preparation) -> None:
    """``ai.onnx`` read as the default domain, local functions inlined, contrib domains checked."""
    p.proto = local_functions_inlined(default_domain_alias_resolved(p.proto))
    check_contrib_domains(p.proto)


def check_graphs(p: Preparation) -> None:
    """Typed inputs, defined values, known nodes and attributes, unique names, importable types."""
    opset = default_opset(p.proto)
    check_graph_input_types(p.proto.graph)
    check_values_defined(p.proto.graph, set())
    for graph in all_graphs(p.proto.graph):
        check_nodes(graph, opset)
        check_unique_names(graph)
        check_tensor_types(graph)
    check_element_types(all_graphs(p.proto.graph))


def normalize_forms(p: Preparation) -> None:
    """Graph forms and tensor data in the forms the importer takes (forms.py)."""
    p.proto = tensor_storage_normalized(graph_forms_normalized(p.proto))


def normalize_loops(p: Preparation) -> None:
    """Loop nodes as torch-mlir's Loop conversion takes them; their carried types kept aside."""
    p.proto, p.carried = loops_normalized(p.proto)


def infer_shapes(p: Preparation) -> None:
    """Shapes inferred past our ops (declared output shapes released, as onnxruntime ignores them), outputs typed."""
    declared = declared_output_shapes_released(p.proto)
    try:
        inferred = infer_shapes_with_contrib_ops(p.proto)  # a new model
    finally:
        declared_output_shapes_restored(p.proto, declared)
    p.proto = inferred
    carried_types_restored(p.proto, p.carried)
    released_outputs_ranked(p.proto.graph, {p.proto.graph.output[i].name: len(t.tensor_type.shape.dim) for i, t in declared.items()})
    type_graph_outputs(p.proto.graph)


def totals_on_the_host(p: Preparation) -> None:
    """A total_sequence_length taken from a dim of a shape, in the form the lowering reads on the host
    (totals.py; the model is the inferred copy by now)."""
    totals_from_shapes(p.proto)


def check_indices(p: Preparation) -> None:
    """Constant Gather/Scatter indices against static dims: the index guards' table owns the check."""
    from ..guards.indices import check_constant_indices  # (late: guards/indices.py reads graph.py, in this package)

    check_constant_indices(p.proto.graph)


def name_for_import(p: Preparation) -> None:
    """Every node's domain imported, every node named (the importer makes the name its location)."""
    p.proto = unnamed_nodes_labelled(with_node_domains_imported(p.proto))


STEPS: Tuple[Tuple[str, Callable[[Preparation], None]], ...] = (
    ("check-loading", check_loading),
    ("resolve-domains", resolve_domains),
    ("check-graphs", check_graphs),
    ("normalize-forms", normalize_forms),
    ("normalize-loops", normalize_loops),
    ("infer-shapes", infer_shapes),
    ("totals-on-the-host", totals_on_the_host),
    ("check-constant-indices", check_indices),
    ("name-for-import", name_for_import),
)


def prepare_for_import(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Checked, with shapes inferred, in the form the importer takes (a copy when changed)."""
    p = Preparation(proto)
    for _name, step in STEPS:
        step(p)
    return p.proto
