"""The builders of the malformed-model corpus (malformed_corpus.py): one GroupQueryAttention node, edited.

:func:`gqa_model` builds the base model -- a decode step, B=1, S=1, P=4, H=4,
Hkv=2, Dh=16, float32, all dims static -- with slots overridden or removed,
attributes changed, and an ``edit`` applied to the finished model (the
``edit`` helpers below: an output retyped, an input untyped, an initializer
added...).  The model is built with onnx.helper and never passed through
onnx.checker, so that it may be as malformed as a case needs.
:func:`plausible_feeds` feeds such a model the values a valid decode step has.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper

F32, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16
I32, I64, BOOL = TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL

#: The op's 17 input slots (onnxruntime 1.32's schema).
SLOTS = (
    "query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
    "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink",
    "k_scale", "v_scale", "q_norm_weight", "k_norm_weight", "query_seqlens",
)

B, S, P, H, HKV, DH = 1, 1, 4, 4, 2, 16
T = P + S

Shape = Sequence[object]  # ints, dim_param strings, or None (unknown)
Edit = Callable[[onnx.ModelProto], None]


def base_inputs() -> Dict[str, Tuple[int, Shape]]:
    """slot name -> (element type, shape) of a valid decode step."""
    return {
        "query": (F32, [B, S, H * DH]),
        "key": (F32, [B, S, HKV * DH]),
        "value": (F32, [B, S, HKV * DH]),
        "past_key": (F32, [B, HKV, P, DH]),
        "past_value": (F32, [B, HKV, P, DH]),
        "seqlens_k": (I32, [B]),
        "total_sequence_length": (I32, []),
    }


ROTARY = {"cos_cache": (F32, [16, DH // 2]), "sin_cache": (F32, [16, DH // 2])}


def _output_types(spec, outputs) -> List[Tuple[int, Optional[Shape]]]:
    """Declared output types consistent with the inputs where those are well formed
    (so that a refusal is about the input at fault, not about a declared output)."""
    elem, q = spec.get("query", (F32, [B, S, H * DH]))
    b, s = (q[0], q[1]) if len(q) == 3 else (B, S)
    packed = "key" not in spec
    cache_elem, past = spec.get("past_key", (elem, [B, HKV, P, DH]))
    dh = past[3] if len(past) == 4 else DH
    hidden = H * dh if packed or len(q) != 3 else q[2]
    t = (past[2] if len(past) == 4 and "past_key" in spec else 0) + (s if isinstance(s, int) else 0)
    shapes = {
        "output": [b, s, hidden],
        "present_key": [b, HKV, t, dh],
        "present_value": [b, HKV, t, dh],
        "output_qk": [b, H, s, t],
    }
    return [(cache_elem if o.startswith("present") else elem, shapes.get(o)) for o in outputs]


def gqa_model(
    inputs: Optional[Dict[str, Optional[Tuple[int, Shape]]]] = None,
    attrs: Optional[dict] = None,
    *,
    drop_attrs: Sequence[str] = (),
    outputs: Sequence[str] = ("output", "present_key", "present_value"),
    extra_inputs: int = 0,
    edit: Optional[Edit] = None,
) -> onnx.ModelProto:
    """A one-node model: the base decode step with ``inputs`` overriding slots
    (None removes one) and ``attrs`` overriding or adding attributes.

    Graph inputs are named after the slots; absent middle slots are "" and
    trailing ones dropped.  ``extra_inputs`` appends inputs beyond the
    schema's 17 slots; ``edit`` changes the finished model in place.
    """
    spec = base_inputs()
    for name, value in (inputs or {}).items():
        if value is None:
            spec.pop(name, None)
        else:
            spec[name] = value
    node_attrs = {"num_heads": H, "kv_num_heads": HKV}
    node_attrs.update(attrs or {})
    for name in drop_attrs:
        node_attrs.pop(name)
    names = [s if s in spec else "" for s in SLOTS]
    graph_inputs = [helper.make_tensor_value_info(s, *spec[s]) for s in SLOTS if s in spec]
    for i in range(extra_inputs):
        names.append(f"extra{i}")
        graph_inputs.append(helper.make_tensor_value_info(f"extra{i}", F32, [1]))
    while names and names[-1] == "":
        names.pop()
    graph_outputs = [helper.make_tensor_value_info(o, elem, shape) for o, (elem, shape) in zip(outputs, _output_types(spec, outputs)) if o]
    node = helper.make_node("GroupQueryAttention", names, list(outputs), name="gqa", domain="com.microsoft", **node_attrs)
    graph = helper.make_graph([node], "malformed", graph_inputs, graph_outputs)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
        producer_name="test_malformed",
    )
    model.ir_version = 10
    if edit is not None:
        edit(model)
    return model


# ---------------------------------------------------------------------------
# edits of the finished model (gqa_model's ``edit``)
# ---------------------------------------------------------------------------


def set_output(index: int, elem: Optional[int] = None, dims: Optional[Dict[int, int]] = None) -> Edit:
    """Graph output ``index`` declared with element type ``elem`` and/or the ``dims`` given by axis."""
    def edit(model: onnx.ModelProto) -> None:
        tt = model.graph.output[index].type.tensor_type
        if elem is not None:
            tt.elem_type = elem
        for axis, value in (dims or {}).items():
            tt.shape.dim[axis].dim_value = value
    return edit


def unranked_query(model: onnx.ModelProto) -> None:
    """The query declared without a shape."""
    model.graph.input[0].type.tensor_type.ClearField("shape")


def add_attributes(*attrs: onnx.AttributeProto) -> Edit:
    """``attrs`` appended to the node's attributes as given (a name twice, a graph value...)."""
    return lambda model: model.graph.node[0].attribute.extend(attrs)


def declare_output_as_sequence(index: int) -> Edit:
    """Graph output ``index`` declared a sequence of float tensors."""
    def edit(model: onnx.ModelProto) -> None:
        model.graph.output[index].type.CopyFrom(helper.make_sequence_type_proto(helper.make_tensor_type_proto(F32, None)))
    return edit


def into_local_function(model: onnx.ModelProto, declare_com_microsoft: bool = True) -> None:
    """The GQA node moved into an ONNX local function ``local.Attn``, called once."""
    g, node = model.graph, model.graph.node[0]
    inputs = [i for i in node.input if i]
    imports = [helper.make_opsetid("", 21)] + ([helper.make_opsetid("com.microsoft", 1)] if declare_com_microsoft else [])
    inner = onnx.NodeProto()
    inner.CopyFrom(node)
    model.functions.append(helper.make_function("local", "Attn", inputs, list(node.output), [inner], opset_imports=imports))
    call = helper.make_node("Attn", inputs, list(node.output), domain="local", name="call")
    del g.node[:]
    g.node.append(call)
    model.opset_import.append(helper.make_opsetid("local", 1))


def move_to_domain(domain: str) -> Edit:
    """The node moved to ``domain``, which gets an opset import."""
    def edit(model: onnx.ModelProto) -> None:
        model.graph.node[0].domain = domain
        model.opset_import.append(helper.make_opsetid(domain, 1))
    return edit


def initializer(name: str, raw: bytes) -> Edit:
    """Input ``name`` also given as an initializer holding the bytes ``raw``."""
    def edit(model: onnx.ModelProto) -> None:
        vi = next(i for i in model.graph.input if i.name == name)
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        init = TensorProto(name=name, data_type=vi.type.tensor_type.elem_type, dims=dims)
        init.raw_data = raw  # helper.make_tensor checks the size
        model.graph.initializer.append(init)
    return edit


def untyped_input(name: str) -> Edit:
    """Graph input ``name`` declared without a type (the importer made it !torch.none: an input left empty)."""
    def edit(model: onnx.ModelProto) -> None:
        next(i for i in model.graph.input if i.name == name).ClearField("type")
    return edit


def node_input(slot: int, name: str) -> Edit:
    """The node reads ``name`` in input ``slot``."""
    def edit(model: onnx.ModelProto) -> None:
        model.graph.node[0].input[slot] = name
    return edit


def second_node_named_gqa(model: onnx.ModelProto) -> None:
    """An Identity after the GQA node, given the same node name."""
    model.graph.node.append(helper.make_node("Identity", ["output"], ["output_copy"], name="gqa"))


def sparse_past_key(model: onnx.ModelProto) -> None:
    """past_key given as a sparse initializer instead of a graph input."""
    values = helper.make_tensor("past_key", F32, [1], [1.0])
    indices = helper.make_tensor("past_key_indices", I64, [1], [0])
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [B, HKV, P, DH]))
    kept = [i for i in model.graph.input if i.name != "past_key"]
    del model.graph.input[:]
    model.graph.input.extend(kept)


# ---------------------------------------------------------------------------
# feeds
# ---------------------------------------------------------------------------

_NP = {F32: np.float32, F16: np.float16, I32: np.int32, I64: np.int64, BOOL: np.bool_,
       TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8}
_DIM_PARAMS = {"hidden": H * DH, "half": DH // 2}
_FILL = {"seqlens_k": T - 1, "total_sequence_length": T, "position_ids": P, "query_seqlens": S, "k_scale": 1.0, "v_scale": 1.0}


def plausible_feeds(model: onnx.ModelProto, overrides: Optional[dict] = None) -> Optional[Dict[str, np.ndarray]]:
    """Feeds shaped as the graph declares, with the values a valid decode step has
    (seqlens_k = T-1, total_sequence_length = T, position_ids = P); ``overrides``
    gives some by name; None when a type has no numpy equivalent (bf16)."""
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else _DIM_PARAMS.get(d.dim_param, 1) for d in tt.shape.dim]
        if tt.elem_type == TensorProto.STRING:
            feeds[vi.name] = np.full(dims, "token")
            continue
        if tt.elem_type not in _NP:
            return None
        if not tt.HasField("shape"):
            dims = [B, S, H * DH] if vi.name == "query" else []
        dtype = _NP[tt.elem_type]
        if vi.name in (overrides or {}):
            feeds[vi.name] = np.asarray(overrides[vi.name], dtype=dtype).reshape(dims)
        elif vi.name in _FILL:
            feeds[vi.name] = np.full(dims, _FILL[vi.name], dtype=dtype)
        else:
            feeds[vi.name] = rng.standard_normal(dims).astype(dtype)
    return feeds
