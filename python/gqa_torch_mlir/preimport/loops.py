"""ONNX ``Loop`` nodes in the form torch-mlir's Loop conversion takes.

torch-mlir turns ``Loop`` into ``torch.prim.Loop``, whose loop-carried values
take the types of their initial values, and fails ("unresolved
materialization", "failed to legalize ... onnx.Loop") when the loop's
results, the body's arguments or the body's results are declared otherwise,
when ``M`` or ``cond`` is left empty, and when the body has scan outputs.
onnxruntime runs all of these.  Here, before import:

* an empty ``M`` becomes INT64_MAX and an empty ``cond`` true (the meaning
  ONNX gives an empty input); torch-mlir runs M iterations whatever the
  condition holds, so a body must pass its condition on unchanged (a
  computed one is refused by name) and an initial condition that is not a
  constant true is folded into M (``M * cond``);
* each loop-carried value gets one type everywhere (its initial value, via an
  ``Identity``; the body's argument and result; the loop's result): the
  dims its declarations agree on stay, the others become symbolic.  A
  declaration is trusted by the importer, so a stale static dim would be
  computed with; here it becomes dynamic instead;
* scan outputs, and declarations of different element types or ranks, are
  refused by name.

Dimension letters: ``N`` loop-carried values, ``K`` scan outputs.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import onnx
from onnx import TensorProto, helper

from ..errors import LoweringError
from .graph import all_graphs, all_nodes, fresh_name, node_label

_INT64_MAX = (1 << 63) - 1


def loops_normalized(proto: onnx.ModelProto) -> Tuple[onnx.ModelProto, Dict[str, onnx.TypeProto]]:
    """The model (a copy when it has a Loop) with every Loop in torch-mlir's form, and the
    types its loop-carried values must keep through inference (:func:`carried_types_restored`)."""

    if not any(_is_loop(n) for n in all_nodes(proto.graph)):
        return proto, {}
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    taken = {name for n in all_nodes(copy.graph) for name in [n.name, *n.input, *n.output]}
    taken |= {vi.name for g in all_graphs(copy.graph) for vi in [*g.input, *g.output, *g.initializer]}
    carried: Dict[str, onnx.TypeProto] = {}
    for graph in list(all_graphs(copy.graph)):
        for i, node in enumerate([n for n in graph.node if _is_loop(n)]):
            _normalize(graph, node, _Names(node.name or f"Loop #{i} of graph '{graph.name}'", taken), carried)
    return copy, carried


def carried_types_restored(proto: onnx.ModelProto, carried: Dict[str, onnx.TypeProto]) -> None:
    """Put back, in place, the loop-carried types that ONNX inference made more specific
    (an ``Identity``'s output takes its input's static dims)."""

    for graph in all_graphs(proto.graph):
        for vi in list(graph.value_info) + list(graph.output):
            if vi.name in carried:
                vi.type.CopyFrom(carried[vi.name])


def _is_loop(node: onnx.NodeProto) -> bool:
    return node.op_type == "Loop" and node.domain in ("", "ai.onnx")


class _Names:
    """Fresh value and node names derived from the Loop's name."""

    def __init__(self, loop: str, taken: set) -> None:
        self.loop, self.taken = loop, taken

    def __call__(self, suffix: str) -> str:
        return fresh_name(f"{self.loop}/{suffix}", self.taken)


def _fail(node: onnx.NodeProto, what: str) -> None:

    message = f"{node_label(node)}: {what}"
    raise LoweringError(message, [message])


def _body(node: onnx.NodeProto) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == "body")


def _normalize(graph: onnx.GraphProto, node: onnx.NodeProto, fresh: _Names, carried: Dict[str, onnx.TypeProto]) -> None:
    body = _body(node)
    n = len(node.input) - 2  # N
    if len(body.input) != n + 2 or len(body.output) < n + 1:
        _fail(node, f"the body takes {len(body.input)} inputs and gives {len(body.output)} outputs; with "
                    f"{n} loop-carried values it must take {n + 2} (iteration, cond, values) and give at least {n + 1}")
    if len(node.output) > n or len(body.output) > n + 1:  # K > 0
        _fail(node, f"{max(len(node.output) - n, len(body.output) - n - 1)} scan output(s) are not supported (torch-mlir's Loop conversion "
                    "has none); carry the values instead")
    _check_for_like(node, body)
    _fill_empty_trip_count_and_condition(graph, node, fresh)
    _initial_condition_folded_into_trip_count(graph, node, fresh)
    known = _declared_types(graph)
    for j in range(n):
        _one_type_for_carried(graph, node, j, known, fresh, carried)


def _check_for_like(node: onnx.NodeProto, body: onnx.GraphProto) -> None:
    """The body's condition must be the one it is given (passed on, or through an Identity) or a
    constant true: torch-mlir's Loop conversion runs the M iterations whatever a computed one holds."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    producer = next((n for n in body.node if cond_out in n.output), None)
    passed_on = cond_out == cond_in or (producer is not None and producer.op_type == "Identity" and producer.input[0] == cond_in)
    if passed_on or _constant_true(body, cond_out):
        return
    _fail(node, f"the body computes its condition ('{cond_out}'), which is not supported: torch-mlir's Loop "
                "conversion runs M iterations whatever it holds; supported: a condition the body passes on unchanged")


def _constant_true(graph: onnx.GraphProto, name: str) -> bool:
    from onnx import numpy_helper

    tensors = [i for i in graph.initializer if i.name == name]
    tensors += [a.t for n in graph.node if n.op_type == "Constant" and name in n.output for a in n.attribute if a.name == "value"]
    return any(numpy_helper.to_array(t).size == 1 and bool(numpy_helper.to_array(t).reshape(())) for t in tensors)


def _initial_condition_folded_into_trip_count(graph: onnx.GraphProto, node: onnx.NodeProto, fresh: "_Names") -> None:
    """A for-like loop whose initial ``cond`` is not a constant true runs M * cond times:
    ``M' = M * int64(cond)`` and cond true (torch-mlir's conversion takes such a loop's
    condition as true)."""
    if _constant_true(graph, node.input[1]):
        return
    cond_i64, trips, true = fresh("cond_as_int64"), fresh("trip_count"), fresh("true")
    at = list(graph.node).index(node)
    graph.node.insert(at, helper.make_node("Mul", [node.input[0], cond_i64], [trips], name=trips))
    graph.node.insert(at, helper.make_node("Cast", [node.input[1]], [cond_i64], to=TensorProto.INT64, name=cond_i64))
    graph.initializer.append(helper.make_tensor(true, TensorProto.BOOL, [], [True]))
    node.input[0], node.input[1] = trips, true


def _fill_empty_trip_count_and_condition(graph: onnx.GraphProto, node: onnx.NodeProto, fresh: _Names) -> None:
    for slot, (dtype, value, what) in enumerate(((TensorProto.INT64, _INT64_MAX, "M"), (TensorProto.BOOL, True, "cond"))):
        if node.input[slot]:
            continue
        name = fresh(what)
        graph.initializer.append(helper.make_tensor(name, dtype, [], [value]))
        node.input[slot] = name


def _declared_types(graph: onnx.GraphProto) -> Dict[str, onnx.TypeProto]:
    declared = {vi.name: vi.type for vi in list(graph.input) + list(graph.value_info) + list(graph.output)}
    for init in graph.initializer:
        declared.setdefault(init.name, helper.make_tensor_type_proto(init.data_type, list(init.dims)))
    return declared


def _dims(tp: Optional[onnx.TypeProto]) -> Optional[List]:
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim]


def _one_type_for_carried(graph: onnx.GraphProto, node: onnx.NodeProto, j: int, known: Dict[str, onnx.TypeProto],
                          fresh: _Names, carried: Dict[str, onnx.TypeProto]) -> None:
    """Loop-carried value ``j``: its initial value, body argument, body result and loop result share one type."""
    body = _body(node)
    arg, res = body.input[2 + j], body.output[1 + j]
    result = node.output[j] if j < len(node.output) else ""  # a loop may leave final values unnamed
    types = {"initial value": known.get(node.input[2 + j]), "body input": arg.type, "body output": res.type,
             "loop output": known.get(result) if result else None}
    elems = {where: t.tensor_type.elem_type for where, t in types.items() if t is not None and t.tensor_type.elem_type}
    shapes = {where: d for where, t in types.items() if (d := _dims(t)) is not None}
    if len(set(elems.values())) > 1 or len({len(d) for d in shapes.values()}) > 1:
        found = ", ".join(f"{where} {onnx.helper.printable_type(t)}" for where, t in types.items() if t is not None)
        _fail(node, f"loop-carried value {j} ('{node.input[2 + j]}') is declared with different element types or "
                    f"ranks: {found}")
    if not elems or not shapes:
        return  # nothing to agree on: the importer's own typing stands
    joined = [dims[0] if len(set(dims)) == 1 else None for dims in zip(*shapes.values())]
    if "body input" not in shapes or "body output" not in shapes:  # the body may change any dim it does not declare
        joined = [None] * len(joined)
    shared = helper.make_tensor_type_proto(
        next(iter(elems.values())), [d if d is not None else fresh(f"carried{j}_dim{k}") for k, d in enumerate(joined)]
    )
    for declared in (arg.type, res.type):
        declared.CopyFrom(shared)
    initial = fresh(f"carried{j}")
    graph.node.insert(list(graph.node).index(node), helper.make_node("Identity", [node.input[2 + j]], [initial], name=initial))
    node.input[2 + j] = initial
    graph.value_info.append(helper.make_value_info(initial, shared))
    carried[initial] = shared
    if not result:
        return
    carried[result] = shared
    outputs = {vi.name: vi for vi in list(graph.output) + list(graph.value_info)}
    if result in outputs:
        outputs[result].type.CopyFrom(shared)
    else:
        graph.value_info.append(helper.make_value_info(result, shared))
