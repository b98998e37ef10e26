"""ONNX shape inference that continues past com.microsoft.GroupQueryAttention (and our other contrib ops).

``onnx.shape_inference`` does not know contrib ops: it leaves their outputs,
and everything computed from them, untyped, and torch-mlir's importer then
declares those values ``!torch.none``, which its ONNX lowerings refuse.  Here
each GroupQueryAttention output gets a ``value_info`` computed from the node's
input types (onnxruntime's schema), and inference runs again; one round per
GroupQueryAttention that depends on another, at most.  An output of another
lowered op ONNX does not know, declared with an element type but no shape,
gets its rank.
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
    model = infer_shapes(model)
    _rank_unshaped_gqa_inputs(model.graph)
    _rank_unshaped_contrib_outputs(model.graph)
    for _ in range(sum(1 for n in model.graph.node if (n.domain, n.op_type) == GQA)):
        if not _type_gqa_outputs(model.graph):
            break
        model = infer_shapes(model)
    return model


def _known_types(graph: onnx.GraphProto) -> Dict[str, onnx.TypeProto]:
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


def _type_gqa_outputs(graph: onnx.GraphProto) -> bool:
    """Type the GroupQueryAttention outputs that have no type or no shape, from typed inputs.

    An untyped one gets a value_info; a graph output declared without a shape
    gets the shape in place (onnx's inference does this for its own ops).
    """
    types, added = _known_types(graph), False
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


# The output ranks of the other lowered ops ONNX's inference does not know, from their input ranks.
_OUTPUT_RANKS = {
    ("com.microsoft", "MatMulNBits"): lambda r: r[0],  # A [..., K] -> [..., N]
    ("com.microsoft", "GatherBlockQuantized"): lambda r: None if r[1] is None else r[0] + r[1] - 1,  # data at indices
    ("com.microsoft", "SkipSimplifiedLayerNormalization"): lambda r: r[0],  # every output has the input's rank
    ("", "SimplifiedLayerNormalization"): lambda r: r[0],  # Y and inv_std_var
}


def _rank_unshaped_contrib_outputs(graph: onnx.GraphProto) -> None:
    """Give an output of those ops declared with an element type but no shape its rank, in unknown dims.

    torch-mlir's importer types it as rank 0, which the lowering would refuse as a
    contradicting declaration; onnxruntime runs such a model.
    """
    declared = {vi.name: vi for vi in list(graph.output) + list(graph.value_info)}
    types = _known_types(graph)
    for node in graph.node:
        rule = _OUTPUT_RANKS.get((node.domain, node.op_type))
        if rule is None:
            continue
        ranks = [len(_dims(types[name])) if name in types else None for name in list(node.input) + ["", ""]]
        if ranks[0] is None or (rank := rule(ranks)) is None:
            continue
        for name in node.output:
            vi = declared.get(name)
            if vi is not None and vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
                shape = vi.type.tensor_type.shape
                for i in range(rank):
                    shape.dim.add().dim_param = f"{name}_dim{i}"
