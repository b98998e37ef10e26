"""GroupQueryAttention's total_sequence_length taken as one dim of a shape, in a form the lowering reads on the host.

onnxruntime-genai's model builder computes it as ``Cast(Gather(Shape(attention_mask), 1))``
(int32): the attention mask's width.  Imported, the Gather's index is a constant the lowering
cannot read (the importer stores every initializer as a resource blob), so the total was read
back from the device mid-step.  Here each GroupQueryAttention fed so reads it from
``Cast(Shape(x, start=k, end=k+1))`` instead (one element, [1], which the op takes as it
takes a scalar): the same value, and the lowering turns it into ``size(x, k)``, known on the
host (``group_query_attention/positions.py``, ``host_total``).  The original nodes stay for
any other reader.  Only a Gather of a whole Shape (axis 0, a constant index within x's
known rank) is rewritten: anything else keeps its form, and its read.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import onnx
from onnx import TensorProto, helper

from .graph import all_graphs, default_opset, fresh_name, integer_constants
from .shapes import known_types

GQA = ("com.microsoft", "GroupQueryAttention")
TOTAL_SLOT = 6
SHAPE_SLICE_SINCE = 15  # Shape's start/end attributes


def totals_from_shapes(proto: onnx.ModelProto) -> int:
    """Every GroupQueryAttention total read from a dim of a shape rewritten, in place; returns how many."""
    if (default_opset(proto) or 0) < SHAPE_SLICE_SINCE:
        return 0
    changed = 0
    for graph in all_graphs(proto.graph):
        changed += _rewrite_graph(graph)
    return changed


def _rewrite_graph(graph: onnx.GraphProto) -> int:
    producers = {out: node for node in graph.node for out in node.output}
    constants = _constant_values(graph)
    types = known_types(graph)
    taken = {name for node in graph.node for name in list(node.input) + list(node.output)} | {n.name for n in graph.node}
    rewritten: Dict[str, str] = {}  # total's name -> the new total's name
    new_nodes = []
    for node in graph.node:
        if (node.domain, node.op_type) != GQA or len(node.input) <= TOTAL_SLOT or not node.input[TOTAL_SLOT]:
            continue
        total = node.input[TOTAL_SLOT]
        if total not in rewritten:
            source = _shape_dim(total, producers, constants, types)
            if source is None:
                continue
            x, k = source
            rewritten[total] = fresh_name(f"{total}/as_shape_dim", taken)
            sliced = fresh_name(f"{total}/shape_dim", taken)
            attrs = {"start": k} if k == -1 else {"start": k, "end": k + 1}
            new_nodes.append(helper.make_node("Shape", [x], [sliced], name=fresh_name(f"{total}/Shape", taken), **attrs))
            new_nodes.append(helper.make_node("Cast", [sliced], [rewritten[total]], name=fresh_name(f"{total}/Cast", taken), to=TensorProto.INT32))
            graph.value_info.extend([helper.make_tensor_value_info(sliced, TensorProto.INT64, [1]),  # typed: shape inference has run
                                     helper.make_tensor_value_info(rewritten[total], TensorProto.INT32, [1])])
        node.input[TOTAL_SLOT] = rewritten[total]
    if not new_nodes:
        return 0
    first_reader = min(i for i, n in enumerate(graph.node) if any(name in rewritten.values() for name in n.input))
    for offset, new in enumerate(new_nodes):  # before the first GroupQueryAttention that reads them (x is defined there)
        graph.node.insert(first_reader + offset, new)
    return len(rewritten)


def _shape_dim(total: str, producers, constants, types) -> Optional[Tuple[str, int]]:
    """(x, k) when ``total`` is Cast(to=int32) of Gather(Shape(x), k), k a constant in x's known rank."""
    cast = producers.get(total)
    if cast is None or cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx") or _attr(cast, "to") != TensorProto.INT32:
        return None
    gather = producers.get(cast.input[0])
    if gather is None or gather.op_type != "Gather" or gather.domain not in ("", "ai.onnx") or _attr(gather, "axis", 0) != 0:
        return None
    shape = producers.get(gather.input[0])
    if shape is None or shape.op_type != "Shape" or shape.domain not in ("", "ai.onnx") or shape.attribute:
        return None
    index = constants.get(gather.input[1])
    x_type = types.get(shape.input[0])
    if index is None or index.size != 1 or index.ndim > 1 or x_type is None:
        return None
    rank, k = len(x_type.tensor_type.shape.dim), int(index.reshape(-1)[0])
    if not -rank <= k < rank:  # onnxruntime's Gather fails the step there; Shape would clamp
        return None
    return shape.input[0], k


def _constant_values(graph: onnx.GraphProto) -> dict:
    """The graph's integer constants (graph.integer_constants) but an initializer that is also an
    input: a feed may replace it."""
    overridable = {vi.name for vi in graph.input}
    return {name: value for name, value in integer_constants(graph).items() if name not in overridable}


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default
