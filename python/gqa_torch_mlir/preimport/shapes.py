"""ONNX shape inference that continues past com.microsoft.GroupQueryAttention (and our other contrib ops).

``onnx.shape_inference`` does not know contrib ops: it leaves their outputs,
and everything computed from them, untyped, and torch-mlir's importer then
declares those values ``!torch.none``, which its ONNX lowerings refuse.  Here
each GroupQueryAttention output gets a ``value_info`` computed from the node's
input types (onnxruntime's schema), and inference runs again; one round per
GroupQueryAttention that depends on another, at most.  The outputs of our
other lowered ops ONNX does not know (and of a run-time-shaped Reshape, which
older opsets leave untyped) are typed from their inputs the same way, in
subgraphs too, where the outer scope's types count.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import onnx
from onnx import helper

GQA = ("com.microsoft", "GroupQueryAttention")


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference where it works; contrib ops it does not know are left as they are."""
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # models over 2 GB, or inference bugs: import what we have (a copy: it is edited next)
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy


def infer_shapes_with_contrib_ops(model: onnx.ModelProto) -> onnx.ModelProto:
    """Inference, then our ops' outputs typed from their inputs and inference again, until
    nothing changes (one round per op that depends on another, at most); subgraphs too."""
    model = infer_shapes(model)
    _rank_unshaped_gqa_inputs(model.graph)
    typed_ops = sum(1 for g, _ in graphs_in_scope(model.graph, {}) for n in g.node if (n.domain, n.op_type) == GQA or (n.domain, n.op_type) in _OUTPUT_TYPES)
    for _ in range(typed_ops):
        changed = False
        for graph, outer in graphs_in_scope(model.graph, {}):
            changed |= _type_gqa_outputs(graph, outer)
            changed |= _type_other_outputs(graph, outer)
        if not changed:
            break
        model = infer_shapes(model)
    return model


def graphs_in_scope(graph: onnx.GraphProto, outer: Dict[str, onnx.TypeProto]):
    """(graph, the types its outer scopes give) for the graph and every subgraph in it."""
    yield graph, outer
    inner = {**outer, **known_types(graph)}
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from graphs_in_scope(sub, inner)


def known_types(graph: onnx.GraphProto) -> Dict[str, onnx.TypeProto]:
    """Types with an element type and a shape (torch-mlir's importer types a value without a shape as rank 0)."""
    types = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.elem_type and tt.HasField("shape"):
            types[vi.name] = vi.type
    for init in graph.initializer:
        types.setdefault(init.name, helper.make_tensor_type_proto(init.data_type, list(init.dims)))
    return types


def _dims(tp: onnx.TypeProto) -> Optional[List]:
    if not tp.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tp.tensor_type.shape.dim]


def _type_gqa_outputs(graph: onnx.GraphProto, outer: Optional[Dict[str, onnx.TypeProto]] = None) -> bool:
    """Type the GroupQueryAttention outputs that have no type or no shape, from typed inputs.

    An untyped one gets a value_info; a graph output declared without a shape
    gets the shape in place (onnx's inference does this for its own ops).
    """
    types, added = {**(outer or {}), **known_types(graph)}, False
    outputs = {vi.name: vi for vi in graph.output}
    for node in graph.node:
        if (node.domain, node.op_type) != GQA:
            continue
        missing = [i for i, name in enumerate(node.output) if name and name not in types]
        shapes = _gqa_output_shapes(node, types) if missing else None
        if shapes is None:
            continue
        for i in (i for i in missing if i < len(shapes)):
            typed = helper.make_tensor_value_info(node.output[i], _output_elem(node, types, i), shapes[i])
            declared = outputs.get(node.output[i])
            if declared is not None and declared.type.tensor_type.elem_type:  # keep its element type
                declared.type.tensor_type.shape.CopyFrom(typed.type.tensor_type.shape)
            else:
                graph.value_info.append(typed)
            added = True
    return added


def _output_elem(node: onnx.NodeProto, types, i: int) -> int:
    """Output i's element type: past_key's for present_key/value (int8/uint8 when quantized), else the query's."""
    past = node.input[3] if len(node.input) > 3 else ""
    source = past if i in (1, 2) and past in types else node.input[0]
    return types[source].tensor_type.elem_type


def _gqa_output_shapes(node: onnx.NodeProto, types) -> Optional[List[List]]:
    """[output, present_key, present_value, output_qk] shapes; unknown dims as None."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    H, Hkv = (_as_c_int(attrs.get(name)) for name in ("num_heads", "kv_num_heads"))  # as onnxruntime keeps them
    query = _dims(types[node.input[0]]) if node.input and node.input[0] in types else None
    if not H or not Hkv or H < 0 or Hkv < 0 or query is None or len(query) != 3 or not isinstance(query[2], int):
        return None
    packed = len(node.input) < 2 or not node.input[1]
    Dh = query[2] // (H + 2 * Hkv) if packed else query[2] // H
    B, S = query[0], query[1]
    quantized = attrs.get("k_quant_type", b"NONE") not in (b"NONE", "NONE")
    cache = [B, Hkv, None, Dh // 2 if quantized and attrs.get("kv_cache_bit_width") == 4 else Dh]  # int4: two values a byte
    return [[B, S, H * Dh], cache, cache, [B, H, S, None]]


def _as_c_int(value):
    """An int64 attribute as onnxruntime's static_cast<int> keeps it (None stays None)."""
    return None if not isinstance(value, int) else (value + 2**31) % 2**32 - 2**31


# The rank of each GroupQueryAttention input slot (total_sequence_length: a scalar, as unshaped imports).
_SLOT_RANKS = {0: 3, 1: 3, 2: 3, 3: 4, 4: 4, 5: 1, 7: 2, 8: 2, 9: 2, 10: 4, 11: 1, 16: 1}


def _rank_unshaped_gqa_inputs(graph: onnx.GraphProto) -> None:
    """Give a graph input declared without a shape the rank of the GroupQueryAttention slot it feeds.

    torch-mlir's importer types a value without a shape as rank 0; onnxruntime
    runs such a model.  Its dims become symbolic, which the lowering checks at
    run time (or refuses by name where it needs a static size).
    """
    unshaped = {vi.name: vi for vi in graph.input if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")}
    for node in graph.node:
        if (node.domain, node.op_type) != GQA or not unshaped:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        per_channel = attrs.get("k_quant_type") in (b"PER_CHANNEL", "PER_CHANNEL")
        for slot, name in enumerate(node.input):
            rank = _SLOT_RANKS.get(slot, 4 if per_channel else 1 if slot in (12, 13) else None)
            if name in unshaped and rank is not None:
                shape = unshaped.pop(name).type.tensor_type.shape
                for i in range(rank):
                    shape.dim.add().dim_param = f"{name}_dim{i}"


# The output types of the other lowered ops ONNX's inference does not know (and of a
# Reshape whose run-time shape older opsets leave untyped), from their input types:
# [(element type, dims)] per output, or None when the inputs' types do not tell.
F32 = onnx.TensorProto.FLOAT


def _matmul_nbits(node, attrs, x):  # A [..., K] -> [..., N]
    a = x(0)
    return None if a is None else [(a[0], a[1][:-1] + [attrs.get("N")])]


def _skip_simplified_layer_norm(node, attrs, x):  # output, mean, inv_std_var, input_skip_bias_sum
    t = x(0)
    return None if t is None else [t, (F32, t[1][:-1] + [1]), (F32, t[1][:-1] + [1]), t]


def _simplified_layer_norm(node, attrs, x):  # Y, inv_std_var ([N..., 1...] over axis..)
    t = x(0)
    if t is None:
        return None
    rank = len(t[1])
    axis = attrs.get("axis", -1) % rank if rank else 0
    return [t, (F32, t[1][:axis] + [1] * (rank - axis))]


def _gather_block_quantized(node, attrs, x):  # data [V, C] bytes at indices -> [I..., C * 8/bits]
    data, indices, scales = x(0), x(1), x(2)
    if data is None or indices is None or scales is None or len(data[1]) != 2 or not isinstance(data[1][1], int):
        return None
    return [(scales[0], indices[1] + [data[1][1] * (8 // attrs.get("bits", 4))])]


def _reshape(node, attrs, x):  # data to a shape of L values -> rank L
    data, shape = x(0), x(1)
    if data is None or shape is None or len(shape[1]) != 1 or not isinstance(shape[1][0], int):
        return None
    return [(data[0], [None] * shape[1][0])]


def _attention(node, attrs, x):  # Y, present_key, present_value, qk_matmul_output (ONNX leaves presents without a past untyped)
    q, k, v, past = x(0), x(1), x(2), x(4)
    if q is None or k is None or v is None or len(q[1]) not in (3, 4) or len(k[1]) != len(q[1]) or len(v[1]) != len(q[1]):
        return None
    _sum = lambda a, b: a + b if isinstance(a, int) and isinstance(b, int) else None
    if len(q[1]) == 4:
        (B, H, S, _), (_, Hkv, L, Dh), Dv = q[1], k[1], v[1][3]
        y = q[1][:3] + [Dv]
    else:
        H, Hkv = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
        if not H or not Hkv or not all(isinstance(t[1][2], int) for t in (k, v)):
            return None
        (B, S, _), L, Dh, Dv = q[1], k[1][1], k[1][2] // Hkv, v[1][2] // Hkv
        y = [B, S, H * Dv]
    T = _sum(past[1][2], L) if past is not None and len(past[1]) == 4 else L
    return [(q[0], y), (k[0], [B, Hkv, T, Dh]), (v[0], [B, Hkv, T, Dv]), (q[0], [B, H, S, T])]


_OUTPUT_TYPES = {
    ("", "Attention"): _attention,
    ("com.microsoft", "RotaryEmbedding"): lambda node, attrs, x: None if x(0) is None else [x(0)],  # output: the input's type
    ("com.microsoft", "MatMulNBits"): _matmul_nbits,
    ("com.microsoft", "SkipSimplifiedLayerNormalization"): _skip_simplified_layer_norm,
    ("", "SimplifiedLayerNormalization"): _simplified_layer_norm,
    ("com.microsoft", "GatherBlockQuantized"): _gather_block_quantized,
    ("", "Reshape"): _reshape,
}


def _type_other_outputs(graph: onnx.GraphProto, outer: Optional[Dict[str, onnx.TypeProto]] = None) -> bool:
    """Type the outputs of the ops in :data:`_OUTPUT_TYPES` that have no type or no shape.

    torch-mlir's importer types a value without a shape as rank 0 (and one
    without a type as ``!torch.none``), which the lowerings refuse; onnxruntime
    infers them.  Like GroupQueryAttention's, an untyped output gets a
    value_info and a declaration without a shape gets the shape in place.
    """
    types, added = {**(outer or {}), **known_types(graph)}, False
    declared = {vi.name: vi for vi in list(graph.output) + list(graph.value_info)}
    for node in graph.node:
        rule = _OUTPUT_TYPES.get(("" if node.domain == "ai.onnx" else node.domain, node.op_type))
        missing = [i for i, name in enumerate(node.output) if name and name not in types] if rule else []
        if not missing:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        x = lambda i: (types[node.input[i]].tensor_type.elem_type, _dims(types[node.input[i]])) if i < len(node.input) and node.input[i] in types else None
        outputs = rule(node, attrs, x)
        for i in (i for i in missing if outputs and i < len(outputs)):
            elem, dims = outputs[i]
            typed = helper.make_tensor_value_info(node.output[i], elem, dims)
            vi = declared.get(node.output[i])
            if vi is not None and vi.type.HasField("tensor_type"):
                vi.type.tensor_type.shape.CopyFrom(typed.type.tensor_type.shape)
                vi.type.tensor_type.elem_type = vi.type.tensor_type.elem_type or elem
            else:
                graph.value_info.append(typed)
            added = True
    return added
