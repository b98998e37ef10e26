"""The malformed-model corpus: GroupQueryAttention models onnxruntime rejects or the lowering refuses.

Each row of ``CASES`` is one small model (one com.microsoft.GroupQueryAttention
node, built by :func:`~gqa_torch_mlir.testing.malformed_models.gqa_model`)
with the diagnostic it must get and what onnxruntime 1.32 (CPU provider) does
with it.  test/python/test_malformed.py checks every row: ``compile``,
``InferenceSession`` and the ``gqa-torch-mlir compile`` command refuse the
model with a GqaTorchMlirError whose message holds every ``expect`` substring
and none of ``LEAKED``, and onnxruntime still does what ``ort`` records.

To add a case, add a row::

    case("id", [subject, "what is supported or expected", ...], ort, why="...", feeds={...}, <gqa_model arguments>)

* ``id``: the test id (unique);
* ``expect``: substrings of the diagnostic -- the attribute, input or output at
  fault (``ATTR_NH``, ``Q0``... below), then what is supported or expected;
* ``ort``: "load" (onnxruntime rejects the model at session creation), "run"
  (it rejects it at ``run`` with plausible feeds), "accepts" (it runs it: say
  ``why`` the lowering refuses anyway -- a fidelity gap or a documented limit)
  or "crashes" (it kills the process);
* ``feeds``: values overriding :func:`~gqa_torch_mlir.testing.malformed_models.plausible_feeds`
  for onnxruntime's run;
* the rest goes to ``gqa_model``: ``inputs`` (``_inp(slot=(elem type, shape))``,
  None removing a slot), ``attrs``, ``drop_attrs``, ``outputs``,
  ``extra_inputs``, ``edit`` (the edits in malformed_models.py).

A model onnxruntime refuses is never compiled: each one found is a row here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper

from .malformed_models import (
    B, BF16, DH, F16, F32, H, HKV, I32, I64, P, ROTARY, S, SLOTS, T, add_attributes, base_inputs,
    declare_output_as_sequence, gqa_model, initializer, into_local_function, move_to_domain, node_input,
    second_node_named_gqa, set_output, sparse_past_key, unranked_query, untyped_input,
)


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[], onnx.ModelProto]
    expect: Tuple[str, ...]  # substrings of the diagnostic: the subject, then what is supported/expected
    ort: str  # onnxruntime 1.32: "load" | "run" (rejects there) | "accepts" | "crashes"
    why: str = ""  # for ort == "accepts": why the lowering refuses anyway
    feeds: Dict[str, object] = field(default_factory=dict)  # overrides of plausible_feeds for the probe


def case(id, expect, ort, why="", feeds=None, **kw) -> Case:
    """A row: ``kw`` are :func:`gqa_model`'s arguments."""
    return Case(id, lambda: gqa_model(**kw), tuple(expect), ort, why, dict(feeds or {}))


def _inp(**kw):
    return {"inputs": kw}


#: Subjects of diagnostics: the attributes and inputs at fault.
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
    case("query_without_shape", [Q0, "hidden size", "static"], "accepts",
         why="declared without a shape, the query's hidden size is unknown; the lowering needs it statically", edit=unranked_query),
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
    case("output_declared_f16_for_f32_inputs", ["output 0 'output'", "f16"], "load", edit=set_output(0, elem=F16)),
    case("present_declared_beyond_past_plus_s", ["output 1 'present_key'", "declared with 7 rows", "4 (fixed capacity) or 4 + 1"], "accepts",
         why="onnxruntime only warns when a declared output shape is wrong; its present has max(P, total) rows, not 7",
         edit=lambda m: [set_output(i, dims={2: 7})(m) for i in (1, 2)]),
    case("output_declared_hidden_32", ["output 0 'output'", "32"], "accepts",
         why="onnxruntime only warns when a declared output shape is wrong; the lowering must type its results",
         edit=set_output(0, dims={2: 32})),
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
         edit=declare_output_as_sequence(1)),
    case("output_of_undefined_element_type", ["graph output 'output'", "undefined element type"], "load",
         edit=set_output(0, elem=0)),
    case("k_scale_int8_without_quantization", ["input 12 'k_scale'", "si8", "float32"], "load",
         **_inp(k_scale=(TensorProto.INT8, [3, 3]))),
    # -- attributes the importer would drop or choke on --------------------------------------------
    case("attribute_given_twice", ["node 'gqa'", "attribute 'softcap'", "more than once"], "load",
         edit=add_attributes(helper.make_attribute("softcap", 0.5), helper.make_attribute("softcap", 0.0))),
    case("graph_valued_attribute", ["node 'gqa'", "attribute 'scale'", "is a graph"], "load",
         edit=add_attributes(helper.make_attribute("scale", helper.make_graph([], "g", [], [])))),
    case("tensor_valued_attribute", ["node 'gqa'", "attribute 'k_quant_type'", "type TENSOR"], "load",
         edit=add_attributes(helper.make_attribute("k_quant_type", onnx.numpy_helper.from_array(np.array([1], np.int64))))),
    case("local_function_without_com_microsoft_opset", ["local function 'Attn'", "domain 'com.microsoft'", "opset_import"], "load",
         edit=lambda m: into_local_function(m, declare_com_microsoft=False)),
    # -- graph forms the importer would take otherwise -------------------------------------------
    case("gqa_in_another_domain", ["node 'gqa'", "GroupQueryAttention is in domain 'com.microsoft.experimental'", "com.microsoft only"],
         "load", edit=move_to_domain("com.microsoft.experimental")),
    case("initializer_data_short", ["initializer 'past_key'", "raw_data holds 4 bytes", "need 512"], "load",
         edit=initializer("past_key", raw=b"\0\0\x80?")),  # the importer splatted the one float
    case("head_sink_input_without_type", ["graph input 'head_sink'", "has no type"], "load",
         edit=untyped_input("head_sink"), **_inp(head_sink=(F32, [H]))),
    case("key_of_undefined_element_type", ["graph input 'key'", "undefined element type"], "load",
         edit=lambda m: setattr(m.graph.input[1].type.tensor_type, "elem_type", 0)),
    case("node_input_never_defined", ["node 'gqa'", "input 'nope'", "not a graph input, an initializer or the output"], "load",
         edit=node_input(0, "nope")),
    case("node_reads_its_own_output", ["node 'gqa'", "cycle through 'output'"], "load", edit=node_input(0, "output")),
    case("op_type_in_lower_case", ["node 'gqa' (groupqueryattention)", "no op groupqueryattention", "GroupQueryAttention?"], "load",
         edit=lambda m: setattr(m.graph.node[0], "op_type", "groupqueryattention")),
    case("two_nodes_named_alike", ["two nodes are named 'gqa'"], "load", edit=second_node_named_gqa),
    case("graph_input_listed_twice", ["graph input 'query'", "listed more than once"], "load",
         edit=lambda m: m.graph.input.append(m.graph.input[0])),
    case("string_graph_input", ["'tokens' is a string tensor", "numeric tensors"], "accepts",
         why="torch-mlir has no string tensors; even an unused one failed late, naming nothing",
         edit=lambda m: m.graph.input.append(helper.make_tensor_value_info("tokens", TensorProto.STRING, [2]))),
    case("sparse_initializer", ["sparse initializer 'past_key'", "store it dense"], "accepts",
         why="torch-mlir's importer reads dense initializers only (it failed naming nothing)", edit=sparse_past_key),
]

CASE_BY_ID = {c.id: c for c in CASES}
ORT_ACCEPTS = {c.id: c.why for c in CASES if c.ort == "accepts"}

#: Python exception names that must never show in a diagnostic (a leaked internal error).
LEAKED = ("Traceback", "internal error", "UnboundLocalError", "AttributeError", "TypeError:", "KeyError",
          "IndexError", "AssertionError", "ZeroDivisionError", "NameError")
