"""Malformed and hostile GroupQueryAttention models, each with its expected diagnostic.

Every case in ``CASES`` is a small ONNX model (one com.microsoft.GroupQueryAttention
node built with onnx.helper, never passed through onnx.checker) that
onnxruntime rejects or that the lowering refuses.  Each is checked through
both entry points:

* Python: ``gqa_torch_mlir.compile(model, "torch")`` (in process) and
  ``gqa_torch_mlir.InferenceSession(model)`` (in a subprocess, so that a crash
  of the compiler is a failed test, not a dead test run) raise a
  :class:`gqa_torch_mlir.errors.GqaTorchMlirError` -- never another exception
  type, never a crash, never an internal error wrapped into one -- whose
  message names the attribute, input or output at fault and what is
  supported or expected;
* CLI: ``gqa-torch-mlir compile MODEL.onnx`` exits non-zero with the same
  diagnostic on stderr and no Python traceback on stdout or stderr (the
  command's ``main`` in process for every case, the installed command in a
  subprocess for one).

Each case also records what onnxruntime 1.32 (CPU provider) does with the
model -- rejects it at session creation ("load"), rejects it at ``run`` with
plausible feeds ("run"), runs it ("accepts"), or kills the process
("crashes") -- and ``test_onnxruntime_does_as_recorded`` keeps that record
honest (onnxruntime is probed in a subprocess, so its crashes are observed,
not suffered).  Cases onnxruntime accepts are fidelity gaps or documented
limits of the lowering (``ORT_ACCEPTS``, each with its reason).  A model
onnxruntime refuses is never compiled: each one found is a case here.

The end of the file has graph-level cases that must WORK against onnxruntime:
two GQA nodes sharing their inputs, a GQA whose present outputs are not graph
outputs (test_gqa_outputs.py: not produced at all), a GQA in both branches of an ``If``, and a
model with no opset import for com.microsoft.

Base model (see :func:`gqa_model`): a decode step, B=1, S=1, P=4, H=4, Hkv=2,
Dh=16, float32, all dims static.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gqa_torch_mlir
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime

F32, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16
I32, I64, BOOL = TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL

CLI = str(Path(sys.executable).parent / "gqa-torch-mlir")

#: The op's 17 input slots (onnxruntime 1.32's schema).
SLOTS = (
    "query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
    "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink",
    "k_scale", "v_scale", "q_norm_weight", "k_norm_weight", "query_seqlens",
)

B, S, P, H, HKV, DH = 1, 1, 4, 4, 2, 16
T = P + S

Shape = Sequence[object]  # ints, dim_param strings, or None (unknown)

#: Python exception names that must never show in a diagnostic (a leaked internal error).
LEAKED = ("Traceback", "internal error", "UnboundLocalError", "AttributeError", "TypeError:", "KeyError",
          "IndexError", "AssertionError", "ZeroDivisionError", "NameError")


# ---------------------------------------------------------------------------
# model construction
# ---------------------------------------------------------------------------


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
    edit: Optional[Callable[[onnx.ModelProto], None]] = None,
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


def _set_output(index: int, elem: Optional[int] = None, dims: Optional[Dict[int, int]] = None):
    def edit(model: onnx.ModelProto) -> None:
        tt = model.graph.output[index].type.tensor_type
        if elem is not None:
            tt.elem_type = elem
        for axis, value in (dims or {}).items():
            tt.shape.dim[axis].dim_value = value

    return edit


def _unranked_query(model: onnx.ModelProto) -> None:
    model.graph.input[0].type.tensor_type.ClearField("shape")


def _add_attributes(*attrs: onnx.AttributeProto):
    return lambda model: model.graph.node[0].attribute.extend(attrs)


def _declare_output_as_sequence(index: int):
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


def _move_to_domain(domain: str):
    def edit(model: onnx.ModelProto) -> None:
        model.graph.node[0].domain = domain
        model.opset_import.append(helper.make_opsetid(domain, 1))
    return edit


def _initializer(name: str, raw: bytes):
    """Input ``name`` also given as an initializer holding the bytes ``raw``."""
    def edit(model: onnx.ModelProto) -> None:
        vi = next(i for i in model.graph.input if i.name == name)
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        init = TensorProto(name=name, data_type=vi.type.tensor_type.elem_type, dims=dims)
        init.raw_data = raw  # helper.make_tensor checks the size
        model.graph.initializer.append(init)
    return edit


def _untyped_input(name: str):
    """Graph input ``name`` declared without a type (the importer made it !torch.none: an input left empty)."""
    def edit(model: onnx.ModelProto) -> None:
        next(i for i in model.graph.input if i.name == name).ClearField("type")
    return edit


def _node_input(slot: int, name: str):
    def edit(model: onnx.ModelProto) -> None:
        model.graph.node[0].input[slot] = name
    return edit


def _second_node_named_gqa(model: onnx.ModelProto) -> None:
    model.graph.node.append(helper.make_node("Identity", ["output"], ["output_copy"], name="gqa"))


def _sparse_past_key(model: onnx.ModelProto) -> None:
    values = helper.make_tensor("past_key", F32, [1], [1.0])
    indices = helper.make_tensor("past_key_indices", I64, [1], [0])
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [B, HKV, P, DH]))
    kept = [i for i in model.graph.input if i.name != "past_key"]
    del model.graph.input[:]
    model.graph.input.extend(kept)


# ---------------------------------------------------------------------------
# the corpus
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[], onnx.ModelProto]
    expect: Tuple[str, ...]  # substrings of the diagnostic: the subject, then what is supported/expected
    ort: str  # onnxruntime 1.32: "load" | "run" (rejects there) | "accepts" | "crashes"
    why: str = ""  # for ort == "accepts": why the lowering refuses anyway
    feeds: Dict[str, object] = field(default_factory=dict)  # overrides of plausible_feeds for the probe


def case(id, expect, ort, why="", feeds=None, **kw) -> Case:
    return Case(id, lambda: gqa_model(**kw), tuple(expect), ort, why, dict(feeds or {}))


def _inp(**kw):
    return {"inputs": kw}


ATTR_NH, ATTR_KV = "attribute 'num_heads'", "attribute 'kv_num_heads'"
Q0, K1, V2, PK3, PV4, SL5, TSL6 = (f"input {i} '{SLOTS[i]}'" for i in range(7))
COS7, SIN8, POS9, BIAS10, SINK11 = (f"input {i} '{SLOTS[i]}'" for i in range(7, 12))
QS16 = "input 16 'query_seqlens'"


def _QUANT(bits=8, quant="PER_TENSOR", past=TensorProto.INT8, k_scale=(F32, [1]), qk_output=0):
    """A quantized-cache decode step (int8 past, one-element scales) with one thing changed."""
    attrs = {"k_quant_type": quant, "v_quant_type": quant, "kv_cache_bit_width": bits}
    if qk_output:
        attrs["qk_output"] = qk_output
    inputs = {"past_key": (past, [B, HKV, P, DH]), "past_value": (past, [B, HKV, P, DH]), "k_scale": k_scale, "v_scale": (F32, [1])}
    return {"attrs": attrs, "inputs": inputs}


_BAD_BATCH_KV = {"query": (F32, [2, S, H * DH]), "key": (F32, [2, S, HKV * DH]), "value": (F32, [2, S, HKV * DH]), "seqlens_k": (I32, [2]),
                 "past_key": (F32, [2, HKV, P, DH]), "past_value": (F32, [2, HKV, P, DH])}
_BAD_BATCH = {"query": (F32, [2, S, H * DH]), "key": (F32, [2, S, HKV * DH]), "value": (F32, [2, S, HKV * DH]), "seqlens_k": (I32, [2])}

CASES: List[Case] = [
    # -- head counts -------------------------------------------------------------------------
    case("num_heads_missing", [ATTR_NH, "required"], "load", drop_attrs=["num_heads"]),
    case("kv_num_heads_missing", [ATTR_KV, "required"], "load", drop_attrs=["kv_num_heads"]),
    case("num_heads_zero", [ATTR_NH, "value 0", "> 0"], "load", attrs={"num_heads": 0}),
    case("kv_num_heads_negative", [ATTR_KV, "value -2", "> 0"], "load", attrs={"kv_num_heads": -2}),
    case("kv_num_heads_not_dividing", [ATTR_KV, "multiple of kv_num_heads (3)"], "run", attrs={"kv_num_heads": 3}),
    case("num_heads_float", [ATTR_NH, "integer"], "load", attrs={"num_heads": 4.0}),
    case("num_heads_list", [ATTR_NH, "integer"], "load", attrs={"num_heads": [4, 4]}),
    # -- hidden sizes --------------------------------------------------------------------------
    case("query_hidden_not_multiple_of_heads", [Q0, "hidden size 66", "multiple of num_heads = 4"], "run",
         **_inp(query=(F32, [B, S, 66]))),
    case("packed_hidden_mismatch", [Q0, "hidden size 100", "packed QKV"], "load",
         **_inp(query=(F32, [B, S, 100]), key=None, value=None)),
    case("head_size_12", [Q0, "head size 12", "multiple of 8"], "run",
         **_inp(query=(F32, [B, S, H * 12]), key=(F32, [B, S, HKV * 12]), value=(F32, [B, S, HKV * 12]),
                past_key=(F32, [B, HKV, P, 12]), past_value=(F32, [B, HKV, P, 12]))),
    case("rotary_head_size_8", [Q0, "head size 8", "multiple of 16 with do_rotary"], "run", attrs={"do_rotary": 1},
         **_inp(query=(F32, [B, S, H * 8]), key=(F32, [B, S, HKV * 8]), value=(F32, [B, S, HKV * 8]),
                past_key=(F32, [B, HKV, P, 8]), past_value=(F32, [B, HKV, P, 8]),
                cos_cache=(F32, [16, 4]), sin_cache=(F32, [16, 4]))),
    case("op_in_the_default_domain", ["node 'gqa'", "default ONNX domain", "com.microsoft"], "load",
         edit=lambda m: setattr(m.graph.node[0], "domain", "")),
    case("key_hidden_not_kv_heads_times_head_size", [K1, "kv_num_heads * head_size (32)"], "run", **_inp(key=(F32, [B, S, 48]))),
    case("value_hidden_differs_from_key", [V2, "kv_num_heads * head_size (32)"], "run", **_inp(value=(F32, [B, S, 48]))),
    case("query_hidden_dynamic", [Q0, "hidden size", "static"], "accepts",
         why="the head size is needed statically; onnxruntime reads it at run time",
         **_inp(query=(F32, [B, S, "hidden"]))),
    # -- ranks and dtypes ----------------------------------------------------------------------
    case("query_rank2", [Q0, "rank 3"], "load", **_inp(query=(F32, [B, H * DH]))),
    case("query_rank4", [Q0, "rank 3"], "load", **_inp(query=(F32, [B, S, H, DH]))),
    Case("query_without_shape", lambda: gqa_model(edit=_unranked_query), (Q0, "hidden size", "static"), "accepts",
         why="declared without a shape, the query's hidden size is unknown; the lowering needs it statically"),
    case("key_rank2", [K1, "rank 3"], "run", **_inp(key=(F32, [B, HKV * DH]))),
    case("past_key_rank3", [PK3, "rank 4"], "load", **_inp(past_key=(F32, [B, HKV, P * DH]))),
    case("seqlens_k_int64", [SL5, "int32"], "load", **_inp(seqlens_k=(I64, [B]))),
    case("seqlens_k_float", [SL5, "int32"], "load", **_inp(seqlens_k=(F32, [B]))),
    case("seqlens_k_rank0", [SL5, "[B]"], "run", **_inp(seqlens_k=(I32, []))),
    case("seqlens_k_2x2", [SL5, "[B]"], "run", **_inp(seqlens_k=(I32, [2, 2]))),
    case("seqlens_k_two_rows_for_batch_1", [SL5, "batch"], "run", **_inp(seqlens_k=(I32, [2]))),
    case("total_sequence_length_rank2", [TSL6, "scalar"], "run", **_inp(total_sequence_length=(I32, [1, 1]))),
    case("total_sequence_length_two_elements", [TSL6, "scalar"], "run", **_inp(total_sequence_length=(I32, [2]))),
    case("total_sequence_length_int64", [TSL6, "int32"], "load", **_inp(total_sequence_length=(I64, []))),
    case("cos_cache_rank1", [COS7, "rank 2"], "crashes",
         attrs={"do_rotary": 1}, **_inp(cos_cache=(F32, [16 * DH // 2]), sin_cache=(F32, [16 * DH // 2]))),
    case("cos_cache_rank3", [COS7, "rank 2"], "run",
         attrs={"do_rotary": 1}, **_inp(cos_cache=(F32, [16, 1, DH // 2]), sin_cache=(F32, [16, 1, DH // 2]))),
    case("cos_cache_f16_query_f32", [COS7, "differs from the query's f32"], "load",
         attrs={"do_rotary": 1}, **_inp(cos_cache=(F16, [16, DH // 2]), sin_cache=(F16, [16, DH // 2]))),
    case("position_ids_int32", [POS9, "int64"], "load", attrs={"do_rotary": 1}, **_inp(**ROTARY, position_ids=(I32, [B, S]))),
    case("position_ids_rank1", [POS9, "rank 2"], "crashes", attrs={"do_rotary": 1}, **_inp(**ROTARY, position_ids=(I64, [B * S]))),
    case("attention_bias_rank3", [BIAS10, "rank 4"], "run", **_inp(attention_bias=(F32, [H, S, T]))),
    case("attention_bias_wrong_head_dim", [BIAS10, "1 or num_heads (4)"], "run", **_inp(attention_bias=(F32, [B, 3, S, T]))),
    case("attention_bias_f16_query_f32", [BIAS10, "differs from the query's f32"], "load",
         **_inp(attention_bias=(F16, [B, H, S, T]))),
    case("attention_bias_batch_3", [BIAS10, "dimension 0"], "run", **_inp(attention_bias=(F32, [3, H, S, T]))),
    case("attention_bias_rows_3", [BIAS10, "dimension 2"], "run", **_inp(attention_bias=(F32, [B, H, 3, T]))),
    case("attention_bias_columns_7", [BIAS10, "dimension 3"], "run", **_inp(attention_bias=(F32, [B, H, S, 7]))),
    case("attention_bias_columns_3", [BIAS10, "dimension 3"], "run", **_inp(attention_bias=(F32, [B, H, S, 3]))),
    case("head_sink_rank2", [SINK11, "rank 1"], "run", **_inp(head_sink=(F32, [1, H]))),
    case("head_sink_wrong_length", [SINK11, "num_heads (4)"], "run", **_inp(head_sink=(F32, [3]))),
    # -- mixed dtypes, bf16 ----------------------------------------------------------------------
    case("f16_query_f32_key", [K1, "differs from the query's f16"], "load", **_inp(query=(F16, [B, S, H * DH]))),
    case("f16_cache_f32_query", [PK3, "f16", "f32"], "accepts",
         why="onnxruntime 1.32 runs f32 attention over an f16 KV cache (T_CACHE != T); the lowering needs cache dtype == query dtype",
         **_inp(past_key=(F16, [B, HKV, P, DH]), past_value=(F16, [B, HKV, P, DH]))),
    case("bf16", [Q0, "bf16", "f32, f16"], "load", **_inp(**{n: (BF16, s) for n, (t, s) in base_inputs().items() if t == F32})),
    # -- rotary ----------------------------------------------------------------------------------
    case("do_rotary_without_caches", [COS7, "required when do_rotary is 1"], "run", attrs={"do_rotary": 1}),
    case("only_cos_cache", [SIN8, "both given or both absent"], "run", attrs={"do_rotary": 1}, **_inp(cos_cache=ROTARY["cos_cache"])),
    case("cos_cache_wider_than_half_head", [COS7, "at most head_size / 2 (8)"], "run",
         attrs={"do_rotary": 1}, **_inp(cos_cache=(F32, [16, DH]), sin_cache=(F32, [16, DH]))),
    case("cos_sin_shapes_differ", [SIN8, "differs from cos_cache's"], "run",
         attrs={"do_rotary": 1}, **_inp(cos_cache=(F32, [16, DH // 2]), sin_cache=(F32, [12, DH // 2]))),
    case("cos_cache_width_dynamic", [COS7, "static"], "accepts",
         why="the rotary width is needed statically; onnxruntime reads it at run time",
         attrs={"do_rotary": 1}, **_inp(cos_cache=(F32, [16, "half"]), sin_cache=(F32, [16, "half"]))),
    case("position_ids_narrower_than_sequence", [POS9, "at least the sequence length (1)"], "run",
         attrs={"do_rotary": 1}, **_inp(**ROTARY, position_ids=(I64, [B, 0]))),
    case("position_ids_batch_1_of_2_rotary_off", ["batch size", "position_ids 1"], "run",
         **_inp(**_BAD_BATCH_KV, position_ids=(I64, [1, S]))),
    case("rotary_width_not_multiple_of_8", [COS7, "multiple of 8"], "run",
         attrs={"do_rotary": 1}, **_inp(cos_cache=(F32, [16, 4]), sin_cache=(F32, [16, 4]))),
    # onnxruntime checks cos/sin whenever they are given, whatever do_rotary says.
    case("rotary_off_cache_too_wide", [COS7, "at most head_size / 2 (8)"], "run", **_inp(cos_cache=(F32, [16, DH]), sin_cache=(F32, [16, DH]))),
    case("rotary_off_cache_rank1", [COS7, "rank 2"], "crashes", **_inp(cos_cache=(F32, [128]), sin_cache=(F32, [128]))),
    case("rotary_off_cache_rank3", [COS7, "rank 2"], "run", **_inp(cos_cache=(F32, [16, 1, 8]), sin_cache=(F32, [16, 1, 8]))),
    case("rotary_off_cache_f16", [COS7, "differs from the query's f32"], "load", **_inp(cos_cache=(F16, [16, 8]), sin_cache=(F16, [16, 8]))),
    case("rotary_off_cache_shapes_differ", [SIN8, "differs from cos_cache's"], "run", **_inp(cos_cache=(F32, [16, 8]), sin_cache=(F32, [12, 8]))),
    case("rotary_off_caches_with_head_size_24", [Q0, "head size 24", "multiple of 16 when cos_cache/sin_cache are given"], "run",
         **_inp(query=(F32, [B, S, H * 24]), key=(F32, [B, S, HKV * 24]), value=(F32, [B, S, HKV * 24]),
                past_key=(F32, [B, HKV, P, 24]), past_value=(F32, [B, HKV, P, 24]),
                cos_cache=(F32, [16, 8]), sin_cache=(F32, [16, 8]))),
    # -- key/value and past/present --------------------------------------------------------------
    case("key_without_value", ["'value'", "give both"], "run", **_inp(value=None)),
    case("value_without_key", ["'key'", "give both"], "run", **_inp(key=None)),
    case("key_longer_than_query", ["sequence size", "key 2"], "run", **_inp(key=(F32, [B, 2, HKV * DH]), value=(F32, [B, 2, HKV * DH]))),
    case("shared_kv_key_without_rows", ["sequence size", "key 0"], "accepts",
         why="onnxruntime's shared-KV form (0 new key rows, attention over the past) is not lowered (docs/limits.md)",
         feeds={"seqlens_k": [P - 1], "total_sequence_length": P},
         **_inp(key=(F32, [B, 0, HKV * DH]), value=(F32, [B, 0, HKV * DH]))),
    case("past_key_without_past_value", [PV4, "both given or both absent"], "load", **_inp(past_value=None)),
    case("past_head_count_wrong", [PK3, "kv_num_heads (2)"], "run",
         **_inp(past_key=(F32, [B, 3, P, DH]), past_value=(F32, [B, 3, P, DH]))),
    case("past_head_size_wrong", [PK3, "head_size (16)"], "run",
         **_inp(past_key=(F32, [B, HKV, P, 8]), past_value=(F32, [B, HKV, P, 8]))),
    case("past_value_longer_than_past_key", [PV4, "dimension 2"], "run", **_inp(past_value=(F32, [B, HKV, 6, DH]))),
    case("batch_query_vs_past_key", ["batch size", "query 2", "past_key 1"], "run", **_inp(**_BAD_BATCH)),
    case("sequence_length_zero", [Q0, "dimension 1"], "run",
         **_inp(query=(F32, [B, 0, H * DH]), key=(F32, [B, 0, HKV * DH]), value=(F32, [B, 0, HKV * DH]))),
    case("batch_size_zero", [Q0, "dimension 0"], "crashes",
         **_inp(query=(F32, [0, S, H * DH]), key=(F32, [0, S, HKV * DH]), value=(F32, [0, S, HKV * DH]),
                past_key=(F32, [0, HKV, P, DH]), past_value=(F32, [0, HKV, P, DH]), seqlens_k=(I32, [0]))),
    case("seqlens_k_empty_for_a_dynamic_batch", [SL5, "no entry", "empty batch"], "run",
         **_inp(query=(F32, ["batch", S, H * DH]), key=(F32, ["batch", S, HKV * DH]), value=(F32, ["batch", S, HKV * DH]),
                past_key=(F32, ["batch", HKV, P, DH]), past_value=(F32, ["batch", HKV, P, DH]), seqlens_k=(I32, [0]))),
    # -- declared output types that contradict the inputs --------------------------------------------
    Case("output_declared_f16_for_f32_inputs", lambda: gqa_model(edit=_set_output(0, elem=F16)), ("output 0 'output'", "f16"), "load"),
    case("present_declared_beyond_past_plus_s", ["output 1 'present_key'", "declared with 7 rows", "4 (fixed capacity) or 4 + 1"], "accepts",
         why="onnxruntime only warns when a declared output shape is wrong; its present has max(P, total) rows, not 7",
         edit=lambda m: [_set_output(i, dims={2: 7})(m) for i in (1, 2)]),
    Case("output_declared_hidden_32", lambda: gqa_model(edit=_set_output(0, dims={2: 32})), ("output 0 'output'", "32"), "accepts",
         why="onnxruntime only warns when a declared output shape is wrong; the lowering must type its results"),
    # -- attribute values ----------------------------------------------------------------------------
    case("causal_2", ["attribute 'causal'", "value 2", "0 or 1"], "load", attrs={"causal": 2}),
    case("causal0_with_window", ["attribute 'local_window_size'", "-1 when causal is 0"], "load",
         attrs={"causal": 0, "local_window_size": 3}),
    case("qk_output_3", ["attribute 'qk_output'", "value 3", "0, 1"], "run",
         attrs={"qk_output": 3}, outputs=("output", "present_key", "present_value", "output_qk")),
    case("qk_output_without_output3", ["attribute 'qk_output'", "output 3"], "run", attrs={"qk_output": 1}),
    case("output3_with_qk_output_0", ["output 3 'output_qk'", "qk_output is 0"], "load",
         outputs=("output", "present_key", "present_value", "output_qk")),
    case("k_quant_type_without_v_quant_type", ["attribute 'v_quant_type'", "k_quant_type"], "run", attrs={"k_quant_type": "PER_TENSOR"}),
    case("quant_type_unknown", ["attribute 'k_quant_type'", "'PER_TENSOR'"], "load", attrs={"k_quant_type": "PER_ROW", "v_quant_type": "PER_ROW"}),
    case("kv_cache_bit_width_without_quant_type", ["attribute 'kv_cache_bit_width'", "quant_type"], "run", attrs={"kv_cache_bit_width": 8}),
    case("kv_cache_bit_width_3", ["attribute 'kv_cache_bit_width'", "value 3"], "run", **_QUANT(bits=3)),
    case("quantized_cache_f32_past", [PK3, "si8"], "run", **_QUANT(past=F32)),
    case("quantized_cache_without_k_scale", ["input 12 'k_scale'", "required"], "run", **_QUANT(k_scale=None)),
    case("per_channel_scale_of_one_element", ["input 12 'k_scale'", "PER_CHANNEL"], "run", **_QUANT(quant="PER_CHANNEL")),
    case("window_cache_int4_head_size_16", [Q0, "head size 16", "multiple of 32 with sliding_window_cache and a 4-bit cache"], "run",
         attrs={"kv_cache_bit_width": 4, "k_quant_type": "PER_TENSOR", "v_quant_type": "PER_TENSOR", "sliding_window_cache": 1, "local_window_size": 3},
         **_inp(past_key=(TensorProto.UINT8, [B, HKV, P, DH // 2]), past_value=(TensorProto.UINT8, [B, HKV, P, DH // 2]),
                k_scale=(F32, [1]), v_scale=(F32, [1]))),
    case("sliding_window_without_window", ["attribute 'local_window_size'", "> 0"], "load", attrs={"sliding_window_cache": 1}),
    case("sliding_window_capacity_below_window", [PK3, "at least local_window_size"], "run",
         attrs={"sliding_window_cache": 1, "local_window_size": 6}),
    case("sliding_window_without_past", [PK3, "required"], "run",
         attrs={"sliding_window_cache": 1, "local_window_size": 2}, **_inp(past_key=None, past_value=None)),
    case("sliding_window_with_qk_output", ["attribute 'qk_output'", "sliding_window_cache"], "run",
         attrs={"sliding_window_cache": 1, "local_window_size": 2, "qk_output": 1},
         outputs=("output", "present_key", "present_value", "output_qk")),
    case("scale_inf", ["attribute 'scale'", "inf", "finite"], "accepts",
         why="onnxruntime runs it into NaN scores, its kernel's shortcuts deciding which outputs stay finite; refusing is a deliberate limit", attrs={"scale": math.inf}),
    case("scale_int", ["attribute 'scale'", "float"], "load", attrs={"scale": 1}),
    case("unknown_attribute", ["attribute 'bogus'", "not an attribute of GroupQueryAttention"], "load", attrs={"bogus": 1}),
    # -- unsupported inputs given ----------------------------------------------------------------------
    case("q_norm_weight", ["input 14 'q_norm_weight'", "not supported"], "run",
         **_inp(q_norm_weight=(F32, [DH]), k_norm_weight=(F32, [DH]))),
    # -- query_seqlens (lowered since 8b46111) in forms onnxruntime refuses -------------------------------
    case("query_seqlens_int64", [QS16, "int32"], "load", **_inp(query_seqlens=(I64, [B]))),
    case("query_seqlens_rank2", [QS16, "rank 1"], "run", **_inp(query_seqlens=(I32, [B, 1]))),
    case("query_seqlens_non_causal", [QS16, "causal=1"], "run", attrs={"causal": 0}, **_inp(query_seqlens=(I32, [B]))),
    case("query_seqlens_without_past", [QS16, "past_key"], "run", **_inp(query_seqlens=(I32, [B]), past_key=None, past_value=None)),
    # -- too many inputs / outputs, required inputs absent ------------------------------------------------
    case("too_many_inputs", ["18 inputs", "defines 17"], "load", extra_inputs=1),
    case("present_key_without_present_value", ["output 1 'present_key'", "without output 2 'present_value'"], "run",
         outputs=("output", "present_key")),
    case("present_value_without_present_key", ["output 2 'present_value'", "without output 1 'present_key'"], "run",
         outputs=("output", "", "present_value")),
    case("output_0_empty", ["output 0 'output'", "first output name is empty"], "load", outputs=("", "present_key", "present_value")),
    case("com_microsoft_opset_2", ["opset 2 for domain 'com.microsoft'", "newer than onnxruntime defines (1)"], "load",
         edit=lambda m: setattr(m.opset_import[1], "version", 2)),
    case("k_quant_type_not_utf8", ["attribute 'k_quant_type'", "must be a string"], "load", attrs={"k_quant_type": b"\xff\xfe"}),
    case("too_many_outputs", ["5 outputs", "defines 4"], "load",
         attrs={"qk_output": 1}, outputs=("output", "present_key", "present_value", "output_qk", "extra")),
    case("seqlens_k_absent", [SL5, "required"], "load", **_inp(seqlens_k=None)),
    case("total_sequence_length_absent", [TSL6, "required"], "load", **_inp(total_sequence_length=None)),
    case("no_outputs", ["output 0 'output'", "no outputs"], "load", outputs=(),
         edit=lambda m: m.graph.output.append(helper.make_tensor_value_info("query", F32, [B, S, H * DH]))),
    case("qk_output_without_a_named_output_qk", ["attribute 'qk_output'", "does not name"], "load",
         attrs={"qk_output": 1}, outputs=("output", "present_key", "present_value", "")),
    case("output_named_like_a_graph_input", ["node 'gqa'", "output 'query'", "already defined"], "load",
         outputs=("query", "present_key", "present_value")),
    case("present_key_declared_a_sequence", ["graph output 'present_key'", "sequence", "tensors"], "load",
         edit=_declare_output_as_sequence(1)),
    case("output_of_undefined_element_type", ["graph output 'output'", "undefined element type"], "load",
         edit=_set_output(0, elem=0)),
    case("k_scale_int8_without_quantization", ["input 12 'k_scale'", "si8", "float32"], "load",
         **_inp(k_scale=(TensorProto.INT8, [3, 3]))),
    # -- attributes the importer would drop or choke on --------------------------------------------
    case("attribute_given_twice", ["node 'gqa'", "attribute 'softcap'", "more than once"], "load",
         edit=_add_attributes(helper.make_attribute("softcap", 0.5), helper.make_attribute("softcap", 0.0))),
    case("graph_valued_attribute", ["node 'gqa'", "attribute 'scale'", "is a graph"], "load",
         edit=_add_attributes(helper.make_attribute("scale", helper.make_graph([], "g", [], [])))),
    case("tensor_valued_attribute", ["node 'gqa'", "attribute 'k_quant_type'", "type TENSOR"], "load",
         edit=_add_attributes(helper.make_attribute("k_quant_type", onnx.numpy_helper.from_array(np.array([1], np.int64))))),
    case("local_function_without_com_microsoft_opset", ["local function 'Attn'", "domain 'com.microsoft'", "opset_import"], "load",
         edit=lambda m: into_local_function(m, declare_com_microsoft=False)),
    # -- graph forms the importer would take otherwise -------------------------------------------
    case("gqa_in_another_domain", ["node 'gqa'", "GroupQueryAttention is in domain 'com.microsoft.experimental'", "com.microsoft only"],
         "load", edit=_move_to_domain("com.microsoft.experimental")),
    case("initializer_data_short", ["initializer 'past_key'", "raw_data holds 4 bytes", "need 512"], "load",
         edit=_initializer("past_key", raw=b"\0\0\x80?")),  # the importer splatted the one float
    case("head_sink_input_without_type", ["graph input 'head_sink'", "has no type"], "load",
         edit=_untyped_input("head_sink"), **_inp(head_sink=(F32, [H]))),
    case("key_of_undefined_element_type", ["graph input 'key'", "undefined element type"], "load",
         edit=lambda m: setattr(m.graph.input[1].type.tensor_type, "elem_type", 0)),
    case("node_input_never_defined", ["node 'gqa'", "input 'nope'", "not a graph input, an initializer or the output"], "load",
         edit=_node_input(0, "nope")),
    case("node_reads_its_own_output", ["node 'gqa'", "cycle through 'output'"], "load", edit=_node_input(0, "output")),
    case("op_type_in_lower_case", ["node 'gqa' (groupqueryattention)", "no op groupqueryattention", "GroupQueryAttention?"], "load",
         edit=lambda m: setattr(m.graph.node[0], "op_type", "groupqueryattention")),
    case("two_nodes_named_alike", ["two nodes are named 'gqa'"], "load", edit=_second_node_named_gqa),
    case("graph_input_listed_twice", ["graph input 'query'", "listed more than once"], "load",
         edit=lambda m: m.graph.input.append(m.graph.input[0])),
    case("string_graph_input", ["'tokens' is a string tensor", "numeric tensors"], "accepts",
         why="torch-mlir has no string tensors; even an unused one failed late, naming nothing",
         edit=lambda m: m.graph.input.append(helper.make_tensor_value_info("tokens", TensorProto.STRING, [2]))),
    case("sparse_initializer", ["sparse initializer 'past_key'", "store it dense"], "accepts",
         why="torch-mlir's importer reads dense initializers only (it failed naming nothing)", edit=_sparse_past_key),
]

CASE_BY_ID = {c.id: c for c in CASES}
ORT_ACCEPTS = {c.id: c.why for c in CASES if c.ort == "accepts"}

def test_corpus():
    assert len(CASES) >= 40
    assert len(CASE_BY_ID) == len(CASES), "case ids must be unique"
    assert all(c.ort in ("load", "run", "accepts", "crashes") for c in CASES)
    assert all(bool(c.why) == (c.ort == "accepts") for c in CASES), "say why exactly for the cases onnxruntime accepts"


# ---------------------------------------------------------------------------
# plausible feeds and subprocess probes
# ---------------------------------------------------------------------------

_NP = {F32: np.float32, F16: np.float16, I32: np.int32, I64: np.int64, BOOL: np.bool_,
       TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8}
_DIM_PARAMS = {"hidden": H * DH, "half": DH // 2}
_FILL = {"seqlens_k": T - 1, "total_sequence_length": T, "position_ids": P, "query_seqlens": S, "k_scale": 1.0, "v_scale": 1.0}


def plausible_feeds(model: onnx.ModelProto, overrides: Optional[dict] = None) -> Optional[Dict[str, np.ndarray]]:
    """Feeds shaped as the graph declares, with the values a valid decode step has
    (seqlens_k = T-1, total_sequence_length = T, position_ids = P); None when a
    type has no numpy equivalent (bf16)."""
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


# Probe scripts: each takes a JSON list of jobs and handles them in turn, printing a
# "start" line before and a result line after each, so that when one job kills the
# process the parent knows which (and starts a new process for the rest).
_ORT_PROBE = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4
    def probe(model_path, feeds_path):
        try:
            sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
        except Exception as e:
            return {"outcome": "load", "error": str(e)}
        if feeds_path == "-":
            return {"outcome": "unfeedable", "error": ""}
        try:
            sess.run(None, dict(np.load(feeds_path)))
        except Exception as e:
            return {"outcome": "run", "error": str(e)}
        return {"outcome": "accepts", "error": ""}
    for job in json.load(open(sys.argv[1])):
        print(json.dumps({"start": job["id"]}), flush=True)
        print(json.dumps({"done": job["id"], **probe(job["model"], job["feeds"])}), flush=True)
    """
)

_SESSION_PROBE = textwrap.dedent(
    """
    import json, sys
    import gqa_torch_mlir
    from gqa_torch_mlir.errors import GqaTorchMlirError
    def probe(model_path):
        try:
            gqa_torch_mlir.InferenceSession(model_path)
        except GqaTorchMlirError as e:
            return {"outcome": "refused", "type": type(e).__name__, "message": str(e)}
        except BaseException as e:
            return {"outcome": "other", "type": type(e).__name__, "message": str(e)}
        return {"outcome": "compiled", "type": "", "message": ""}
    for job in json.load(open(sys.argv[1])):
        print(json.dumps({"start": job["id"]}), flush=True)
        print(json.dumps({"done": job["id"], **probe(job["model"])}), flush=True)
    """
)


def run_batch(script: str, jobs: List[dict], workdir: Path, timeout: float = 1200) -> Dict[str, dict]:
    """Run ``script`` over ``jobs`` ({"id", ...}); a job that kills the process gets
    {"outcome": "crashed", "exit": status, "stderr": ...} and the rest run in a new process."""
    results: Dict[str, dict] = {}
    pending = list(jobs)
    while pending:
        jobs_path = workdir / f"jobs-{len(results)}.json"
        jobs_path.write_text(json.dumps(pending))
        proc = subprocess.run([sys.executable, "-c", script, str(jobs_path)], capture_output=True, text=True, timeout=timeout)
        started = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "start" in msg:
                started = msg["start"]
            elif "done" in msg:
                results[msg.pop("done")] = msg
                started = None
        if started is not None:  # the process died in this job
            results[started] = {"outcome": "crashed", "exit": proc.returncode, "stderr": proc.stderr.strip()[-1000:]}
        elif proc.returncode != 0:
            raise RuntimeError(f"probe process failed outside any job (exit {proc.returncode}): {proc.stderr[-2000:]}")
        pending = [j for j in pending if j["id"] not in results]
    return results


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _ort_job(id: str, model: onnx.ModelProto, workdir: Path, overrides: Optional[dict] = None) -> dict:
    model_path = _save(model, workdir / f"{id}.onnx")
    feeds = plausible_feeds(model, overrides)
    feeds_path = "-"
    if feeds is not None:
        feeds_path = str(workdir / f"{id}.feeds.npz")
        np.savez(feeds_path, **feeds)
    return {"id": id, "model": str(model_path), "feeds": feeds_path}


def probe_onnxruntime(models: Dict[str, Tuple[onnx.ModelProto, Optional[dict]]], workdir: Path) -> Dict[str, dict]:
    """What onnxruntime does with each model: {"outcome": load|run|accepts|crashes|unfeedable, "error": ...}."""
    workdir.mkdir(parents=True, exist_ok=True)
    jobs = [_ort_job(id, m, workdir, feeds) for id, (m, feeds) in models.items()]
    results = run_batch(_ORT_PROBE, jobs, workdir)
    for r in results.values():
        if r["outcome"] == "crashed":
            r.update(outcome="crashes", error=f"exit status {r['exit']}: {r['stderr'][-300:]}")
    return results


def probe_sessions(models: Dict[str, onnx.ModelProto], workdir: Path) -> Dict[str, dict]:
    """``InferenceSession(model)`` per model, in subprocesses: refused (GqaTorchMlirError) / other / compiled / crashed."""
    workdir.mkdir(parents=True, exist_ok=True)
    jobs = [{"id": id, "model": str(_save(m, workdir / f"{id}.onnx"))} for id, m in models.items()]
    results = run_batch(_SESSION_PROBE, jobs, workdir)
    for r in results.values():
        if r["outcome"] == "crashed":
            r.update(type="", message=f"exit status {r['exit']}; stderr: {r['stderr']}")
    return results


def run_cli(model: onnx.ModelProto, path: Path) -> subprocess.CompletedProcess:
    """``gqa-torch-mlir compile`` on the saved model, its ``main`` in this process (the
    installed command itself is run by test_the_installed_cli_refuses_a_malformed_model)."""
    import contextlib
    import io

    from gqa_torch_mlir.tools import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["compile", str(_save(model, path))])
    return subprocess.CompletedProcess(["gqa-torch-mlir", "compile"], code, out.getvalue(), err.getvalue())


class Probes:
    """The subprocess probes of every case, started together on first use."""

    def __init__(self, root: Path):
        # Two batch processes side by side.  Every test using them is in one xdist group
        # (``--dist loadgroup``), so that one worker runs them, once.
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        self.ort = self.pool.submit(probe_onnxruntime, {c.id: (c.build(), c.feeds) for c in CASES}, root / "ort")
        self.sessions = self.pool.submit(probe_sessions, {c.id: c.build() for c in CASES}, root / "session")
        self.root = root

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    p = Probes(tmp_path_factory.mktemp("malformed"))
    yield p
    p.close()


# ---------------------------------------------------------------------------
# the checks
# ---------------------------------------------------------------------------


def _diagnostic_line(message: str) -> Optional[str]:
    """The refusal itself: the text after the op label on the 'error:' line."""
    for line in message.splitlines():
        if "com.microsoft.GroupQueryAttention:" in line:
            return line.split("com.microsoft.GroupQueryAttention:", 1)[1].strip()
    return None


def check_diagnostic(c: Case, message: str, where: str) -> None:
    missing = [e for e in c.expect if e not in message]
    assert not missing, f"{c.id} ({where}): diagnostic lacks {missing}:\n{message}"
    leaked = [w for w in LEAKED if w in message]
    assert not leaked, f"{c.id} ({where}): diagnostic leaks {leaked}:\n{message}"


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_compile_refuses(c: Case):
    model = c.build()
    with pytest.raises(Exception) as info:
        gqa_torch_mlir.compile(model, "torch")
    assert isinstance(info.value, GqaTorchMlirError), f"{c.id}: {type(info.value).__name__} is not a GqaTorchMlirError: {info.value}"
    check_diagnostic(c, str(info.value), "compile")


@pytest.mark.xdist_group("malformed_probes")
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_inference_session_refuses(c: Case, probes: Probes):
    got = probes.sessions.result()[c.id]
    assert got["outcome"] != "crashed", f"{c.id}: InferenceSession killed the process: {got['message']}"
    assert got["outcome"] != "compiled", f"{c.id}: InferenceSession compiled the model instead of refusing it"
    assert got["outcome"] == "refused", f"{c.id}: InferenceSession raised {got['type']}, not a GqaTorchMlirError: {got['message']}"
    check_diagnostic(c, got["message"], "InferenceSession")


@pytest.mark.xdist_group("malformed_probes")
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_cli_refuses(c: Case, probes: Probes):
    proc = run_cli(c.build(), probes.root / "cli" / f"{c.id}.onnx")
    out = f"exit status {proc.returncode}\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode > 0, f"{c.id}: the CLI did not fail cleanly:\n{out}"
    assert "Traceback" not in proc.stderr + proc.stdout, f"{c.id}: traceback:\n{out}"
    assert proc.stderr.startswith("gqa-torch-mlir: error:"), f"{c.id}: stderr is not a one-line-led error:\n{out}"
    check_diagnostic(c, proc.stderr, "CLI")
    try:
        gqa_torch_mlir.compile(c.build(), "torch")
    except GqaTorchMlirError as e:
        line = _diagnostic_line(str(e))
        if line is not None:
            assert line in proc.stderr, f"{c.id}: CLI and Python disagree: Python says {line!r}\n{out}"


@pytest.mark.xdist_group("malformed_probes")
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_onnxruntime_does_as_recorded(c: Case, probes: Probes):
    got = probes.ort.result()[c.id]
    assert got["outcome"] == c.ort, f"{c.id}: onnxruntime {got['outcome']} (recorded: {c.ort}): {got['error'][:500]}"


def test_com_microsoft_opset_0_is_refused_not_left_to_torch_mlir():
    """Version 0 of com.microsoft is below our lowering's since-version: the op is
    refused by the plugin pass, never handed to torch-mlir's own GQA lowering
    (onnxruntime refuses the model at load)."""
    model = gqa_model(edit=lambda m: setattr(m.opset_import[1], "version", 0))
    with pytest.raises(GqaTorchMlirError, match="opset 0 for domain 'com.microsoft' is below the lowest version lowered"):
        gqa_torch_mlir.compile(model, "torch")


@pytest.mark.parametrize("attrs,extra", [({"do_rotary": 1}, {}), ({"do_rotary": 1}, {"position_ids": (I64, [B, S])}), ({}, {})],
                         ids=["rotary", "rotary_positions_in_range", "rotary_off"])
def test_cos_cache_shorter_than_total_fails_at_run_time(attrs, extra, tmp_path):
    """cos/sin with 3 rows for total_sequence_length 5: onnxruntime rejects it at run
    time (also when the positions read lie in the rows, and with do_rotary=0); the
    compiled model does too (its run-time checks), with a clear error."""
    model = gqa_model(attrs=attrs, inputs={"cos_cache": (F32, [3, DH // 2]), "sin_cache": (F32, [3, DH // 2]), **extra})
    feeds = plausible_feeds(model, {"position_ids": np.zeros((B, S), np.int64)} if extra else None)
    assert probe_onnxruntime({"m": (model, feeds)}, tmp_path)["m"]["outcome"] == "run"
    sess = InferenceSession(model)
    with pytest.raises(GqaTorchMlirError, match="cos_cache dimension 0 must not be less than total_sequence_length"):
        sess.run(None, feeds)


# ---------------------------------------------------------------------------
# graph-level cases that must work
# ---------------------------------------------------------------------------

DECODE = GQAConfig(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True)
_NAMES = ("output", "present_key", "present_value")


def _ours(model: onnx.ModelProto, feeds: dict) -> Dict[str, np.ndarray]:
    sess = InferenceSession(model)
    wanted = {i.name for i in sess.get_inputs()}
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {k: v for k, v in feeds.items() if k in wanted})))


def _assert_node_matches(cfg: GQAConfig, got: dict, want: dict, feeds: dict, names: Sequence[str], what: str) -> None:
    """Compare one node's outputs, renamed to the harness's names (valid cache rows only)."""
    rename = lambda d: {std: d[n] for std, n in zip(_NAMES, names) if n in d}
    msgs = compare(cfg, rename(got), rename(want), feeds)
    assert msgs == [], f"{what}: mismatches against onnxruntime:\n  " + "\n  ".join(msgs)


def _typed_outputs(cfg: GQAConfig, names: Sequence[str]) -> List[onnx.ValueInfoProto]:
    base = {o.name: o for o in make_model(cfg).graph.output}
    outs = []
    for std, name in zip(_NAMES, names):
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(base[std])
        vi.name = name
        outs.append(vi)
    return outs


def test_two_nodes_share_query_and_past():
    """Two GQA nodes read the same query/key/value/past/rotary inputs with different attributes."""
    cfg = DECODE
    model = make_model(cfg)
    g = model.graph
    first = g.node[0]
    second = onnx.NodeProto()
    second.CopyFrom(first)
    second.name = "gqa_window"
    del second.output[:]
    second.output.extend(["output_w", "present_key_w", "present_value_w"])
    second.attribute.extend([helper.make_attribute("local_window_size", 2), helper.make_attribute("softcap", 3.0)])
    g.node.append(second)
    g.output.extend(_typed_outputs(cfg, second.output))
    feeds = make_inputs(cfg, seed=11)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    _assert_node_matches(cfg, got, want, feeds, _NAMES, "first node")
    _assert_node_matches(cfg, got, want, feeds, list(second.output), "second node (window 2, softcap 3)")
    assert not np.allclose(want["output"], want["output_w"]), "the two nodes should differ"


def test_present_outputs_not_graph_outputs():
    """The node has its three outputs but only ``output`` is a graph output."""
    cfg = DECODE
    model = make_model(cfg)
    del model.graph.output[1:]
    feeds = make_inputs(cfg, seed=12)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert sorted(got) == sorted(want) == ["output"]
    assert compare(cfg, got, want, feeds) == []


def _branch(cfg: GQAConfig, node: onnx.NodeProto, suffix: str, attrs: dict) -> onnx.GraphProto:
    """A subgraph with one GQA node reading the outer graph's inputs."""
    n = onnx.NodeProto()
    n.CopyFrom(node)
    n.name = f"gqa_{suffix}"
    del n.output[:]
    names = [f"{x}_{suffix}" for x in _NAMES]
    n.output.extend(names)
    for k, v in attrs.items():
        n.attribute.append(helper.make_attribute(k, v))
    return helper.make_graph([n], f"branch_{suffix}", [], _typed_outputs(cfg, names))


@pytest.mark.parametrize("cond", [True, False])
def test_gqa_inside_if_branches(cond: bool):
    """An If on a bool graph input, with a GQA in each branch (different attributes)."""
    cfg = DECODE
    model = make_model(cfg)
    g = model.graph
    gqa = g.node[0]
    then_g = _branch(cfg, gqa, "then", {})
    else_g = _branch(cfg, gqa, "else", {"local_window_size": 2, "softcap": 3.0})
    if_node = helper.make_node("If", ["cond"], list(_NAMES), name="if", then_branch=then_g, else_branch=else_g)
    del g.node[:]
    g.node.append(if_node)
    g.input.append(helper.make_tensor_value_info("cond", BOOL, []))
    feeds = {**make_inputs(cfg, seed=13), "cond": np.asarray(cond)}
    want = run_onnxruntime(model, feeds)
    got = _ours(model, feeds)
    assert compare(cfg, got, want, feeds) == []


def test_model_without_com_microsoft_opset_import():
    """onnxruntime runs a model whose opset_import lacks com.microsoft (it takes the
    domain's latest version).  The pipeline should run it too, or refuse it with a
    message naming the missing domain -- not leak an importer exception."""
    cfg = DECODE
    model = make_model(cfg)
    kept = [o for o in model.opset_import if o.domain != "com.microsoft"]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    feeds = make_inputs(cfg, seed=14)
    want = run_onnxruntime(model, feeds)
    try:
        got = _ours(model, feeds)
    except GqaTorchMlirError as e:
        message = str(e)
        leaked = [w for w in LEAKED if w in message]
        assert "com.microsoft" in message and not leaked, f"unclear refusal of a model onnxruntime runs: {message}"
        return
    assert compare(cfg, got, want, feeds) == []


def test_unnamed_output_qk_is_not_requested():
    """Outputs [output, present_key, present_value, ""] with qk_output 0: the empty name asks for nothing."""
    cfg = DECODE
    model = make_model(cfg)
    model.graph.node[0].output.append("")
    feeds = make_inputs(cfg, seed=15)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert sorted(got) == sorted(want)
    assert compare(cfg, got, want, feeds) == []


def test_gqa_inside_a_local_function():
    """A GQA in an ONNX local function's body is inlined, lowered and checked like any other."""
    cfg = DECODE
    model = make_model(cfg)
    into_local_function(model)
    feeds = make_inputs(cfg, seed=16)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert compare(cfg, got, want, feeds) == []
    model.functions[0].node[0].attribute.append(helper.make_attribute("causal", 2))
    with pytest.raises(GqaTorchMlirError, match="attribute 'causal': value 2 is not supported"):
        gqa_torch_mlir.compile(model, "torch")


def test_if_branches_without_com_microsoft_opset_import():
    """The domain of a GQA that only occurs in If branches gets its opset import too."""
    cfg = DECODE
    model = make_model(cfg)
    g = model.graph
    gqa = g.node[0]
    if_node = helper.make_node("If", ["cond"], list(_NAMES), name="if", then_branch=_branch(cfg, gqa, "then", {}),
                               else_branch=_branch(cfg, gqa, "else", {"softcap": 3.0}))
    del g.node[:]
    g.node.append(if_node)
    g.input.append(helper.make_tensor_value_info("cond", BOOL, []))
    kept = [o for o in model.opset_import if o.domain != "com.microsoft"]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    feeds = {**make_inputs(cfg, seed=17), "cond": np.asarray(False)}
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert compare(cfg, got, want, feeds) == []


def test_default_domain_declared_as_ai_onnx():
    """An opset import for "ai.onnx" (the default domain's alias, as onnxruntime reads it)."""
    cfg = DECODE
    model = make_model(cfg)
    for o in model.opset_import:
        if o.domain == "":
            o.domain = "ai.onnx"
    feeds = make_inputs(cfg, seed=18)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert compare(cfg, got, want, feeds) == []


def test_graph_output_declared_without_a_type():
    """onnxruntime infers a graph output's type when the model gives none; so does the pipeline."""
    cfg = DECODE
    model = make_model(cfg)
    model.graph.output[0].ClearField("type")
    feeds = make_inputs(cfg, seed=19)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert compare(cfg, got, want, feeds) == []


FORMS = GQAConfig(batch=1, seq=1, past=4, rotary=True)  # every present row specified


def _first_of_two_initializers(model):
    past = make_inputs(FORMS, seed=20)["past_key"]
    model.graph.initializer.extend([onnx.numpy_helper.from_array(past, "past_key"), onnx.numpy_helper.from_array(past * 3, "past_key")])
    kept = [i for i in model.graph.input if i.name != "past_key"]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return {"past_key"}


def _reversed_nodes(model):
    model.graph.node.append(helper.make_node("Identity", ["q"], ["query_id"], name="later"))  # after its reader
    model.graph.node[0].input[0] = "query_id"
    next(i for i in model.graph.input if i.name == "query").name = "q"
    return set()


def _negative_dims(model):
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = -3
    return set()


def _no_graph_name(model):
    model.graph.name = ""
    return set()


def _no_default_opset(model):
    kept = [o for o in model.opset_import if o.domain != ""]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    return set()


@pytest.mark.parametrize("edit", [_first_of_two_initializers, _reversed_nodes, _negative_dims, _no_graph_name, _no_default_opset],
                         ids=lambda f: f.__name__.strip("_"))
def test_graph_forms_onnxruntime_reads(edit):
    """Forms onnxruntime runs and the importer took otherwise: an initializer given twice (the first
    counts; ours used the last, silently), nodes out of order, a dim_value of -3, an empty graph name,
    no default-domain opset import (each failed in the importer or torch-mlir before)."""
    model = make_model(FORMS)
    fed_by_initializers = edit(model)
    feeds = {k: v for k, v in make_inputs(FORMS, seed=20).items() if k not in fed_by_initializers}
    if "q" in {i.name for i in model.graph.input}:
        feeds["q"] = feeds.pop("query")
    want = run_onnxruntime(model, feeds)
    got = _ours(model, feeds)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_stale_static_dims_of_graph_outputs_are_ignored_as_onnxruntime_does(backend, tmp_path):
    """Outputs of ordinary ops declared with static dims the run contradicts (a [batch, 1, N]
    logits fed a 3-token step, a batch of 2 fed 1): onnxruntime computes them (it warns).
    The importer trusted the declarations: row 0 only on iree-cpu, a read past the buffer,
    a double free on the refbackend.  In a child process, under runtime verification."""
    from onnx import numpy_helper

    from gqa_torch_mlir.testing.isolated import run_isolated

    cfg = GQAConfig(batch=1, seq=3, past=4, rotary=True, dynamic=True)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=21)
    width = cfg.num_heads * cfg.head_size
    weight = np.random.default_rng(0).standard_normal((width, 5)).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(weight, "w"))
    model.graph.node.append(helper.make_node("MatMul", ["output", "w"], ["logits"], name="lm_head"))
    model.graph.node.append(helper.make_node("Relu", ["logits"], ["relu"], name="relu"))
    model.graph.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1, 5]))
    model.graph.output.append(helper.make_tensor_value_info("relu", TensorProto.FLOAT, [2, "seq", 5]))
    want = run_onnxruntime(model, feeds)
    got = run_isolated(model, feeds, tmp_path, backend=backend)
    assert got.results is not None, got.describe()
    for name in ("logits", "relu", "output"):
        np.testing.assert_allclose(got.results[name], want[name], atol=1e-4, err_msg=name)


def test_the_installed_cli_refuses_a_malformed_model(tmp_path):
    """The installed command, in a subprocess, on one case: what a user runs."""
    c = CASE_BY_ID["num_heads_zero"]
    proc = subprocess.run([CLI, "compile", str(_save(c.build(), tmp_path / "m.onnx"))], capture_output=True, text=True, timeout=600)
    assert proc.returncode > 0 and "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("gqa-torch-mlir: error:")
    check_diagnostic(c, proc.stderr, "CLI")


def test_graph_attributes_of_ops_we_do_not_lower_are_left_to_the_importer():
    """BeamSearch, If and friends take graphs: only ops we lower are checked for a graph attribute."""
    from gqa_torch_mlir.preimport import prepare_for_import

    model = make_model(DECODE)
    body = helper.make_graph([], "decoder", [], [])
    model.graph.node.append(helper.make_node("BeamSearch", ["query"], ["beams"], domain="com.microsoft", decoder=body))
    prepare_for_import(model)  # no refusal
    model.graph.node[0].attribute.append(helper.make_attribute("decoder", body))
    with pytest.raises(GqaTorchMlirError, match="attribute 'decoder' is a graph, which GroupQueryAttention does not take"):
        prepare_for_import(model)


@pytest.mark.parametrize("chunked", [False, True], ids=["plain", "query_seqlens"])
def test_static_empty_sequence_is_refused_saying_why(chunked):
    """onnxruntime rejects S = 0, except with query_seqlens (an empty chunk), which is not lowered."""
    inputs = {"query": (F32, [B, 0, H * DH]), "key": (F32, [B, 0, HKV * DH]), "value": (F32, [B, 0, HKV * DH])}
    if chunked:
        inputs["query_seqlens"] = (I32, [B])
    why = "empty chunk with query_seqlens, which is not lowered" if chunked else "onnxruntime rejects an empty sequence"
    with pytest.raises(GqaTorchMlirError, match=f"input 0 'query': dimension 1 \\(sequence length\\) is 0; .*{why}"):
        gqa_torch_mlir.compile(gqa_model(inputs), "torch")
