"""A builder decoder with more layers, by graph surgery: layer 1 repeated (compile-time and
whole-model benchmarks, and the tests that need a decoder deeper than the 2-layer fixtures).

``with_layers(model, N)`` keeps layer 0 and the shared nodes (embedding, final norm, lm_head),
copies layer 1's nodes, initializers, inputs, outputs and value infos as layers 1..N-1 with
every layer index in their names moved, and renumbers the final norm.
"""

from __future__ import annotations

import re
from typing import Callable

import onnx
from onnx import helper

# Layer indices in builder names: /model/layers.3/..., model.layers.3.attn..., past_key_values.3.key, present.3.value
_INDEXED = re.compile(r"(layers\.|past_key_values\.|present\.)(\d+)")


def layer_of(*names: str) -> int:
    """The layer an item belongs to: the highest layer index in its names, -1 for shared items
    (a node's name, inputs and outputs: lm_head reads the final norm, /model/layers.<N>/)."""
    return max((int(m.group(2)) for name in names for m in _INDEXED.finditer(name)), default=-1)


def node_layer(node: onnx.NodeProto) -> int:
    return layer_of(node.name, *node.input, *node.output)


def shift(name: str, delta: int) -> str:
    """Every layer index in ``name`` moved by ``delta``."""
    return _INDEXED.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + delta}", name) if delta else name


def shifted_node(node: onnx.NodeProto, delta: int) -> onnx.NodeProto:
    new = onnx.NodeProto()
    new.CopyFrom(node)
    new.name = shift(node.name, delta)
    new.input[:] = [shift(n, delta) for n in node.input]
    new.output[:] = [shift(n, delta) for n in node.output]
    return new


def shifted_named(item, delta: int):
    """A copy of an initializer or value_info with its name shifted."""
    new = type(item)()
    new.CopyFrom(item)
    new.name = shift(item.name, delta)
    return new


def expand(items, key: Callable, copy: Callable, source_layers: int, layers: int, layer_major: bool = False) -> list:
    """Layer 0 and shared items kept, layer 1 repeated as layers 1..N-1, the final
    norm (index = source_layers) renumbered to N; middle source layers dropped.

    ``layer_major``: the copies of layer 1 go as whole layers where it stood
    (nodes, which must stay topologically sorted); else each item's copies
    follow it (graph inputs and outputs: keys 0..N-1, then values 0..N-1)."""
    items = list(items)
    template = [item for item in items if key(item) == 1]
    out = []
    for item in items:
        index = key(item)
        if index < 1:
            out.append(item)
        elif index == source_layers:
            out.append(copy(item, layers - source_layers))
        elif index == 1 and not layer_major:
            out.extend(copy(item, i - 1) for i in range(1, layers))
        elif index == 1 and item is template[0]:
            out.extend(copy(t, i - 1) for i in range(1, layers) for t in template)
    return out


def source_layer_count(graph: onnx.GraphProto) -> int:
    return sum(1 for i in graph.input if re.fullmatch(r"past_key_values\.\d+\.key", i.name))


def with_layers(source: onnx.ModelProto, layers: int) -> onnx.ModelProto:
    """``source`` (a builder decoder of >= 2 layers) with ``layers`` decoder layers."""
    g, n = source.graph, source_layer_count(source.graph)
    if n < 2:
        raise ValueError("the source decoder needs at least 2 layers (layer 1 is the template)")
    by_name = lambda item: layer_of(item.name)  # noqa: E731
    graph = helper.make_graph(
        expand(g.node, node_layer, shifted_node, n, layers, layer_major=True),
        g.name,
        expand(g.input, by_name, shifted_named, n, layers),
        expand(g.output, by_name, shifted_named, n, layers),
        expand(g.initializer, by_name, shifted_named, n, layers),
        value_info=expand(g.value_info, by_name, shifted_named, n, layers),
    )
    return helper.make_model(graph, opset_imports=source.opset_import, ir_version=source.ir_version, producer_name=source.producer_name)
