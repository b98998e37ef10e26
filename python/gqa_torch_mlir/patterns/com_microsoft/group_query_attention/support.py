"""What the GroupQueryAttention lowering accepts: one table, read by the pattern and the docs.

Each ONNX attribute and input of the op (onnxruntime's schema) has an entry
saying which values are lowered.  Anything else is refused by name with the
supported values, never accepted and ignored.  ``support_table_markdown()``
renders the table of docs/support.md.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from typing import Callable, Dict, List

from ....binder import OpBinder
from ....registry import Refusal


@dataclass(frozen=True)
class AttrRule:
    kind: str  # "int" | "float" | "string"
    default: object
    accepts: Callable[[object], bool]
    supported: str  # what the docs and refusals say is supported


def _is(*values):
    return lambda v: v in values


def _finite_nonneg(v):
    return math.isfinite(v) and v >= 0.0


QUANT_TYPES = ("NONE", "PER_TENSOR", "PER_CHANNEL")
_ASCII_UPPER = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)


def _any_int(v):
    return True


def _any_float(v):
    return True  # onnxruntime uses any value as given


def _finite(v):
    # onnxruntime runs a NaN or infinite scale into NaN scores, with its
    # kernel's shortcuts deciding which outputs stay finite: refused.
    return math.isfinite(v)


# onnxruntime's kernel tests flag attributes for the exact value 1: other
# values (2, -1, ...) mean "off", and the lowering does the same.
ATTRIBUTES: Dict[str, AttrRule] = {
    "num_heads": AttrRule("int", None, lambda v: v > 0, "required, > 0"),
    "kv_num_heads": AttrRule("int", None, lambda v: v > 0, "required, > 0, divides num_heads"),
    "do_rotary": AttrRule("int", 0, _any_int, "1 rotates Q and K; any other value means off (as onnxruntime)"),
    "rotary_interleaved": AttrRule("int", 0, _any_int, "1 interleaved pairs, any other value rotate-half"),
    "scale": AttrRule("float", 0.0, _finite, "finite; 0 means 1/sqrt(head_size), other values used as given"),
    "softcap": AttrRule("float", 0.0, _any_float, "> 0 caps scores as softcap*tanh(x/softcap) (infinity: onnxruntime's NaN), <= 0 or NaN off"),
    "local_window_size": AttrRule("int", -1, _any_int, "W >= 0: each query sees its last W keys; < 0 no window"),
    "smooth_softmax": AttrRule("int", -1, _any_int, "1 adds exp(0 - max) to the softmax denominator; other values off"),
    "causal": AttrRule("int", 1, _is(0, 1), "0 or 1 (0 requires local_window_size -1)"),
    "qk_output": AttrRule("int", 0, _is(0, 1, 2), "0, 1 (scores before softmax) or 2 (after), with output 3"),
    "sliding_window_cache": AttrRule("int", 0, _any_int, "1: window-sized buffers with onnxruntime's eviction (needs local_window_size > 0); other values off"),
    "kv_cache_bit_width": AttrRule("int", 0, _is(0, 4, 8), "0 without quantization; 8 (int8 cache) or 4 (uint8 cache, two values a byte) with it"),
    "k_quant_type": AttrRule("string", "NONE", _is(*QUANT_TYPES), "'NONE', 'PER_TENSOR' or 'PER_CHANNEL' (the same as v_quant_type)"),
    "v_quant_type": AttrRule("string", "NONE", _is(*QUANT_TYPES), "'NONE', 'PER_TENSOR' or 'PER_CHANNEL' (the same as k_quant_type; ignored when k_quant_type is 'NONE', as onnxruntime)"),
    # Epsilons only matter with q_norm_weight/k_norm_weight, which are refused;
    # onnxruntime computes whatever they hold without them (0, -1, NaN, inf).
    "qk_norm_epsilon": AttrRule("float", 1e-6, _any_float, "any value (no effect without q/k norm weights, which are refused)"),
    "q_norm_epsilon": AttrRule("float", None, _any_float, "any value (no effect without q/k norm weights, which are refused)"),
    "k_norm_epsilon": AttrRule("float", None, _any_float, "any value (no effect without q/k norm weights, which are refused)"),
}


@dataclass(frozen=True)
class InputRule:
    slot: int
    name: str
    lowered: bool
    note: str


INPUTS: List[InputRule] = [
    InputRule(0, "query", True, "[B,S,H*Dh], or packed QKV [B,S,(H+2*Hkv)*Dh]; Dh a multiple of 8 (16 with rotary); f32 or f16 (onnxruntime's CPU kernel has no bf16)"),
    InputRule(1, "key", True, "[B,S,Hkv*Dh]; absent (empty name) with packed QKV"),
    InputRule(2, "value", True, "[B,S,Hkv*Dh]; absent with packed QKV"),
    InputRule(3, "past_key", True, "[B,Hkv,P,Dh] (int8, or uint8 [B,Hkv,P,Dh/2], when quantized) or absent (empty past); present has max(P, total_sequence_length) rows"),
    InputRule(4, "past_value", True, "[B,Hkv,P,Dh]; given together with past_key"),
    InputRule(5, "seqlens_k", True, "int32 [B] (or B entries with every other dim 1: [B,1], [1,B], [B,1,1]...): total tokens - 1 per row (ragged rows allowed)"),
    InputRule(6, "total_sequence_length", True, "int32 scalar: P+S (growing cache), <= P (fixed capacity), S on a first prompt"),
    InputRule(7, "cos_cache", True, "[M,R/2], R/2 a multiple of 8, R <= Dh (R < Dh: partial rotary, R = 0: none), M >= total_sequence_length; used with do_rotary=1, checked whenever given (as onnxruntime); Dh a multiple of 16 then"),
    InputRule(8, "sin_cache", True, "[M,R/2], like cos_cache"),
    InputRule(9, "position_ids", True, "int64 [B,W,...], W >= S: rotary positions, entry b*S+s of the flattened tensor (as onnxruntime; a first prompt uses entry 0 + s); shape checked whenever given"),
    InputRule(10, "attention_bias", True, "[B|1,H|1,S,total_sequence_length], added to the scaled (soft-capped) scores"),
    InputRule(11, "head_sink", True, "[H]: per-head sink logit in the softmax denominator"),
    InputRule(12, "k_scale", True, "f32 [1] (PER_TENSOR) or [1,Hkv,1,Dh] (PER_CHANNEL; any static shape of Hkv*Dh elements is read flat, as onnxruntime), with a quantized cache; without one its values are ignored (as onnxruntime), its type checked"),
    InputRule(13, "v_scale", True, "like k_scale"),
    InputRule(14, "q_norm_weight", False, "refused when given: onnxruntime's CPU kernel rejects it, so it cannot be verified"),
    InputRule(15, "k_norm_weight", False, "refused when given: onnxruntime's CPU kernel rejects it, so it cannot be verified"),
    InputRule(16, "query_seqlens", True, "int32 [B]: valid rows of right-padded chunks (past_len = seqlens_k + 1 - query_seqlens); needs causal=1 and past; a padding row's position_ids are not read, its output_qk row is 0 (as onnxruntime)"),
]

OUTPUTS = ["output", "present_key", "present_value", "output_qk"]


@dataclass(frozen=True)
class GqaAttributes:
    num_heads: int
    kv_num_heads: int
    do_rotary: bool
    rotary_interleaved: bool
    scale: float  # 0.0: the default 1/sqrt(head_size)
    softcap: float  # <= 0: off
    local_window_size: int  # < 0: no window
    smooth_softmax: bool
    causal: bool
    qk_output: int
    window_cache: bool  # sliding_window_cache == 1
    quant_type: str  # "NONE", "PER_TENSOR" or "PER_CHANNEL"
    kv_bits: int  # 0 (float cache), 8 or 4


# Attributes onnxruntime's CPU kernel reads as int64 and keeps as a C int (static_cast<int>):
# 2**32 + 2 is 2 there.  num_heads and kv_num_heads are checked > 0 before the cast.
NARROWED_TO_INT = ("num_heads", "kv_num_heads", "local_window_size", "qk_output", "kv_cache_bit_width")


def _narrowed(name: str, value: int, rule: AttrRule) -> int:
    """``value`` as onnxruntime's int, two's complement; a head count must be > 0 before and after."""
    narrowed = (value + 2**31) % 2**32 - 2**31
    if name not in ("num_heads", "kv_num_heads"):
        return narrowed
    if value <= 0:
        return value  # refused as it is, as onnxruntime's check before the cast
    if narrowed <= 0:
        raise Refusal(f"value {value} is {narrowed} as onnxruntime's 32-bit int; supported: {rule.supported}", f"attribute '{name}'")
    return narrowed


def _read(b: OpBinder, name: str, rule: AttrRule):
    getter = {"int": b.attr_int, "float": b.attr_float, "string": b.attr_str}[rule.kind]
    return getter(name) if name in ("num_heads", "kv_num_heads") else getter(name, rule.default)


def read_attributes(b: OpBinder) -> GqaAttributes:
    """Check every attribute against :data:`ATTRIBUTES`; refuse unknown or unsupported ones."""
    for name in b.attribute_names():
        if name not in ATTRIBUTES:
            raise Refusal(f"is not an attribute of GroupQueryAttention (known: {', '.join(sorted(ATTRIBUTES))})", f"attribute '{name}'")
    values = {}
    for name, rule in ATTRIBUTES.items():
        if not b.has_attr(name) and rule.default is None and name not in ("num_heads", "kv_num_heads"):
            continue
        value = _read(b, name, rule)
        if name in ("k_quant_type", "v_quant_type"):  # onnxruntime upper-cases them, ASCII letters only
            value = value.translate(_ASCII_UPPER)
        if name in NARROWED_TO_INT:
            value = _narrowed(name, value, rule)
        if not rule.accepts(value):
            raise Refusal(f"value {value!r} is not supported; supported: {rule.supported}", f"attribute '{name}'")
        values[name] = value
    if values["num_heads"] % values["kv_num_heads"]:
        raise Refusal(
            f"num_heads ({values['num_heads']}) must be a multiple of kv_num_heads ({values['kv_num_heads']})",
            "attribute 'kv_num_heads'",
        )
    if values["causal"] == 0 and values["local_window_size"] != -1:
        raise Refusal(
            f"must be -1 when causal is 0, got {values['local_window_size']} (onnxruntime rejects it too)",
            "attribute 'local_window_size'",
        )
    _check_quantization(values)
    if values["sliding_window_cache"] == 1:
        if values["local_window_size"] <= 0:
            raise Refusal(f"sliding_window_cache=1 needs local_window_size > 0, got {values['local_window_size']}", "attribute 'local_window_size'")
        if values["qk_output"]:
            raise Refusal("is not supported with sliding_window_cache=1 (onnxruntime does not implement it either)", "attribute 'qk_output'")
    return GqaAttributes(
        num_heads=values["num_heads"],
        kv_num_heads=values["kv_num_heads"],
        do_rotary=values["do_rotary"] == 1,
        rotary_interleaved=values["rotary_interleaved"] == 1,
        scale=values["scale"],
        softcap=values["softcap"],
        local_window_size=values["local_window_size"],
        smooth_softmax=values["smooth_softmax"] == 1,
        causal=values["causal"] == 1,
        qk_output=values["qk_output"],
        window_cache=values["sliding_window_cache"] == 1,
        quant_type=values["k_quant_type"],
        kv_bits=values["kv_cache_bit_width"] if values["k_quant_type"] != "NONE" else 0,
    )


def _check_quantization(values: dict):
    """k_quant_type turns quantization on (onnxruntime's rule); v_quant_type is
    only read then, and must equal it: with 'NONE' any valid v_quant_type is ignored."""
    quant, bits = values["k_quant_type"], values["kv_cache_bit_width"]
    if quant != "NONE" and quant != values["v_quant_type"]:
        raise Refusal(f"'{values['v_quant_type']}' differs from k_quant_type '{quant}' (onnxruntime requires them equal)", "attribute 'v_quant_type'")
    if quant == "NONE" and bits != 0:
        raise Refusal(f"value {bits} needs k_quant_type/v_quant_type other than 'NONE'", "attribute 'kv_cache_bit_width'")
    if quant != "NONE" and bits not in (4, 8):
        raise Refusal(f"value {bits} is not supported with {quant} quantization; supported: 8 or 4", "attribute 'kv_cache_bit_width'")


def _input_subject(slot: int) -> str:
    return f"input {slot} '{INPUTS[slot].name}'"


def _check_rank(t, slot: int, rank: int):
    if t.rank != rank:
        raise Refusal(f"must have rank {rank}, got shape {_fmt(t.shape)}", _input_subject(slot))


def _check_dim(t, slot: int, dim: int, want: int, what: str):
    if t.shape[dim] is not None and t.shape[dim] != want:
        raise Refusal(f"dimension {dim} ({t.shape[dim]}) must be {what} ({want})", _input_subject(slot))


def _fmt(shape) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def validate_inputs(b: OpBinder, attrs: GqaAttributes) -> dict:
    """Read and check inputs and outputs; return the fields of ``GqaInputs``."""
    for rule in INPUTS:
        if not rule.lowered and b.has_input(rule.slot):
            raise Refusal(f"is not supported ({rule.note})", _input_subject(rule.slot))
    if b.num_input_slots() > len(INPUTS):
        raise Refusal(f"is not an input of GroupQueryAttention: the node has {b.num_input_slots()} inputs; GroupQueryAttention defines {len(INPUTS)}", f"input {len(INPUTS)}")
    _check_outputs(b, attrs)
    t = {r.name: b.tensor(r.slot, r.name) for r in INPUTS if r.lowered}
    query = _require(t, "query")
    _check_rank(query, 0, 3)
    if query.dtype not in ("f32", "f16"):
        raise Refusal(f"element type {query.dtype} is not supported; supported: f32, f16 (onnxruntime's CPU kernel)", _input_subject(0))
    _check_not_empty(query, chunked=t["query_seqlens"] is not None)
    head_size = _head_size(t, attrs)
    _check_kv_and_cache(t, attrs, head_size, query.dtype)
    _check_lengths(t)
    _check_rotary(t, attrs, head_size, query.dtype)
    _check_extras(t, attrs, query.dtype)
    _check_batch_sized(t)
    if not attrs.window_cache:  # a window cache's total exceeds its capacity
        _check_bias_columns(b, t)
    fields = dict(t)
    fields["head_size"] = head_size
    return fields


#: Why an empty sequence is refused, without and with query_seqlens.
EMPTY_SEQUENCE = {
    False: "onnxruntime rejects an empty sequence",
    True: "onnxruntime computes an empty chunk with query_seqlens, which is not lowered",
}


def _check_not_empty(query, chunked: bool):
    B, S = query.shape[0], query.shape[1]
    if B == 0:
        raise Refusal("dimension 0 (batch size) is 0; an empty batch is not supported (onnxruntime crashes on it)", _input_subject(0))
    if S == 0:
        raise Refusal(f"dimension 1 (sequence length) is 0; {EMPTY_SEQUENCE[chunked]}", _input_subject(0))


def _check_batch_sized(t: dict):
    """seqlens_k has B elements ([B], [B,1] or [1,B]); attention_bias [B|1, H|1, S, total]."""
    B, S = t["query"].shape[0], t["query"].shape[1]
    seqlens = t["seqlens_k"]
    if None not in seqlens.shape and math.prod(seqlens.shape) == 0:
        raise Refusal(f"shape {_fmt(seqlens.shape)} holds no entry; an empty batch is not supported (onnxruntime crashes on it)", _input_subject(5))
    if B is not None and None not in seqlens.shape and math.prod(seqlens.shape) != B:
        raise Refusal(f"shape {_fmt(seqlens.shape)} must hold one entry per batch row (batch size {B})", _input_subject(5))
    bias = t["attention_bias"]
    if bias is None:
        return
    if bias.shape[0] not in (1, None) and B is not None and bias.shape[0] != B:
        raise Refusal(f"dimension 0 ({bias.shape[0]}) must be 1 or the batch size ({B})", _input_subject(10))
    if bias.shape[2] is not None and S is not None and bias.shape[2] != S:
        raise Refusal(f"dimension 2 ({bias.shape[2]}) must be the sequence length ({S})", _input_subject(10))


def _check_bias_columns(b: OpBinder, t: dict):
    """attention_bias's last dim is total_sequence_length: P + S for a growing cache,
    at most P for a fixed-capacity one (the declared present rows tell which)."""
    bias, past = t["attention_bias"], t["past_key"]
    if bias is None or past is None or b.num_results < 2:
        return
    from ....builder import parse_vtensor_type

    declared = parse_vtensor_type(b.result_type_text(1))
    P, S, cols = past.shape[2], t["query"].shape[1], bias.shape[3]
    if declared is None or None in (P, S, cols, declared[0][2]):
        return  # checked at run time against total_sequence_length
    T = declared[0][2]
    if T == P + S and S > 0 and cols != T:
        raise Refusal(f"dimension 3 ({cols}) must be total_sequence_length, which a growing cache of {P} + {S} rows makes {T}", _input_subject(10))
    if cols > T:
        raise Refusal(f"dimension 3 ({cols}) must be total_sequence_length, at most the {T} cache rows", _input_subject(10))


def _check_outputs(b: OpBinder, attrs: GqaAttributes):
    if b.num_results > len(OUTPUTS):
        raise Refusal(f"is not an output of GroupQueryAttention: the node has {b.num_results} outputs; GroupQueryAttention defines {len(OUTPUTS)} ({', '.join(OUTPUTS)})", f"output {len(OUTPUTS)}")
    if b.num_results == 0:
        raise Refusal("is required, but the node has no outputs (onnxruntime rejects the model)", "output 0 'output'")
    qk_requested = b.num_results == 4 and b.result_type_text(3) != "!torch.none"  # an empty name is no request
    if attrs.qk_output and not qk_requested:
        raise Refusal(f"qk_output={attrs.qk_output} needs output 3 'output_qk', which the node does not name (onnxruntime rejects the model)", "attribute 'qk_output'")
    if not attrs.qk_output and qk_requested:
        raise Refusal("is requested but qk_output is 0 (onnxruntime leaves it uninitialized)", "output 3 'output_qk'")
    # An output with an empty name imports as a !torch.none result (with no use).
    if b.num_results and b.result_type_text(0) == "!torch.none" and not b.result_is_used(0):
        raise Refusal("is required, but the node's first output name is empty (onnxruntime rejects the model)", "output 0 'output'")
    produced = [i < b.num_results and b.result_type_text(i) != "!torch.none" for i in (1, 2)]
    if produced[0] != produced[1]:
        given, missing = (1, 2) if produced[0] else (2, 1)
        raise Refusal(
            f"is produced without output {missing} '{OUTPUTS[missing]}'; onnxruntime requires both present outputs or neither",
            f"output {given} '{OUTPUTS[given]}'",
        )
    if not produced[0]:  # neither present output: onnxruntime runs only a float cache that is not a window cache
        for on, subject, cache in ((attrs.window_cache, "attribute 'sliding_window_cache'", "sliding_window_cache=1"),
                                   (attrs.kv_bits, "attribute 'kv_cache_bit_width'", f"a {attrs.kv_bits}-bit quantized cache")):
            if on:
                raise Refusal(f"{cache} needs outputs 1 'present_key' and 2 'present_value', which the node omits "
                              "(onnxruntime rejects it at run time)", subject)


def _require(t: dict, name: str):
    if t[name] is None:
        slot = next(r.slot for r in INPUTS if r.name == name)
        raise Refusal("is required but absent", _input_subject(slot))
    return t[name]


def _head_size(t: dict, attrs: GqaAttributes) -> int:
    """Dh from the query's hidden size (static), separate or packed."""
    H, Hkv = attrs.num_heads, attrs.kv_num_heads
    hidden = t["query"].shape[2]
    if hidden is None:
        raise Refusal("dimension 2 (hidden size) must be static", _input_subject(0))
    if (t["key"] is None) != (t["value"] is None):
        present, absent = ("key", "value") if t["value"] is None else ("value", "key")
        raise Refusal(f"'{present}' is given but '{absent}' is absent; give both, or neither for packed QKV", f"input '{absent}'")
    heads_in_query = H if t["key"] is not None else H + 2 * Hkv
    if hidden % heads_in_query:
        form = "num_heads" if t["key"] is not None else "num_heads + 2 * kv_num_heads (packed QKV)"
        raise Refusal(f"hidden size {hidden} is not a multiple of {form} = {heads_in_query}", _input_subject(0))
    head_size = hidden // heads_in_query
    if head_size == 0:
        raise Refusal("hidden size 0 gives head size 0; supported: a head size > 0 (onnxruntime's CPU kernel divides by it)", _input_subject(0))
    rotary_caches = t["cos_cache"] is not None or t["sin_cache"] is not None
    multiple = 16 if attrs.do_rotary or rotary_caches else 8
    why = " with do_rotary" if attrs.do_rotary else " when cos_cache/sin_cache are given" if rotary_caches else ""
    window_quant = (16 if attrs.kv_bits == 8 else 32) if attrs.window_cache and attrs.kv_bits else 0
    if window_quant > multiple:  # onnxruntime's window-cache kernels for quantized caches
        multiple, why = window_quant, f" with sliding_window_cache and a {attrs.kv_bits}-bit cache"
    if head_size % multiple:
        raise Refusal(
            f"head size {head_size} (hidden size {hidden} / {heads_in_query} heads) must be a multiple of {multiple}{why}, "
            "as onnxruntime's CPU kernel requires",
            _input_subject(0),
        )
    return head_size


def _check_kv_and_cache(t: dict, attrs: GqaAttributes, Dh: int, dtype: str):
    Hkv = attrs.kv_num_heads
    for slot, name in ((1, "key"), (2, "value")):
        x = t[name]
        if x is None:
            continue
        if x.rank == 4:  # the past cache moved up a slot, as if empty key/value were dropped
            raise Refusal(f"must have rank 3, got shape {_fmt(x.shape)}, a cache's; with packed QKV the key and "
                          "value slots stay empty (!torch.none operands), and past_key is input 3", _input_subject(slot))
        _check_rank(x, slot, 3)
        _check_dim(x, slot, 2, Hkv * Dh, "kv_num_heads * head_size")
        _check_dtype(x, slot, dtype)
    if (t["past_key"] is None) != (t["past_value"] is None):
        raise Refusal("past_key and past_value must be both given or both absent", _input_subject(3 if t["past_key"] is None else 4))
    cache_dtype, cache_width = {0: (dtype, Dh), 8: ("si8", Dh), 4: ("ui8", Dh // 2)}[attrs.kv_bits]
    for slot, name in ((3, "past_key"), (4, "past_value")):
        cache = t[name]
        if cache is None:
            if attrs.kv_bits:
                raise Refusal("is required with a quantized cache", _input_subject(slot))
            continue
        _check_rank(cache, slot, 4)
        _check_dim(cache, slot, 1, Hkv, "kv_num_heads")
        _check_dim(cache, slot, 3, cache_width, "head_size" if cache_width == Dh else "head_size / 2 (4-bit cache)")
        if cache.dtype != cache_dtype:
            raise Refusal(f"element type {cache.dtype} must be {cache_dtype} for this cache (kv_cache_bit_width {attrs.kv_bits})", _input_subject(slot))
    pk, pv = t["past_key"], t["past_value"]
    if pk is not None and pk.shape[2] is not None and pv.shape[2] is not None and pk.shape[2] != pv.shape[2]:
        raise Refusal(f"dimension 2 ({pv.shape[2]}) must equal past_key's ({pk.shape[2]})", _input_subject(4))
    _check_scales(t, attrs, Dh)


def flat_channel_scale(shape, Hkv: int, Dh: int) -> bool:
    """A PER_CHANNEL scale of another static shape with Hkv*Dh elements, read flat as
    onnxruntime reads it (it checks the element count only): [Hkv*Dh], [Hkv,Dh], ..."""
    return all(d is not None for d in shape) and math.prod(shape) == Hkv * Dh and tuple(shape) != (1, Hkv, 1, Dh)


def _check_scales(t: dict, attrs: GqaAttributes, Dh: int):
    for slot, name in ((12, "k_scale"), (13, "v_scale")):
        scale = t[name]
        if scale is not None and scale.dtype != "f32":  # its type is checked even when unused, as onnxruntime does
            raise Refusal(f"element type {scale.dtype} is not supported; onnxruntime requires float32", _input_subject(slot))
        if not attrs.kv_bits:  # its values are ignored, as onnxruntime ignores them without quantization
            continue
        if scale is None:
            raise Refusal(f"is required with {attrs.quant_type} quantization", _input_subject(slot))
        per_channel = (1, attrs.kv_num_heads, 1, Dh)
        if attrs.quant_type == "PER_CHANNEL":  # a symbolic dim is checked at run time (unify_dims)
            ok = scale.rank == 4 and all(d is None or d == w for d, w in zip(scale.shape, per_channel))
            ok = ok or flat_channel_scale(scale.shape, attrs.kv_num_heads, Dh)
        else:
            ok = all(d is None or d == 1 for d in scale.shape)
        if not ok:
            want = f"[1,Hkv,1,Dh] = {_fmt(per_channel)}, or any static shape of Hkv*Dh = {attrs.kv_num_heads * Dh} elements" if attrs.quant_type == "PER_CHANNEL" else "one element ([1])"
            raise Refusal(f"shape {_fmt(scale.shape)} is not supported for {attrs.quant_type}; supported: {want}", _input_subject(slot))


def _check_dtype(x, slot: int, dtype: str):
    if x.dtype != dtype:
        raise Refusal(f"element type {x.dtype} differs from the query's {dtype}", _input_subject(slot))


def _check_lengths(t: dict):
    seqlens = _require(t, "seqlens_k")
    if seqlens.rank == 0 or sum(d not in (1, None) for d in seqlens.shape) > 1:
        # onnxruntime counts B elements, each dim 1 or B
        raise Refusal(f"must be [B], or B entries with every other dim 1 ([B,1], [1,B]...), got shape {_fmt(seqlens.shape)}", _input_subject(5))
    if seqlens.dtype != "si32":
        raise Refusal(f"element type {seqlens.dtype} is not supported; onnxruntime requires int32", _input_subject(5))
    total = _require(t, "total_sequence_length")
    if total.dtype != "si32":
        raise Refusal(f"element type {total.dtype} is not supported; onnxruntime requires int32", _input_subject(6))
    if total.rank > 1 or (total.rank == 1 and total.shape[0] not in (1, None)):
        raise Refusal(f"must be a scalar, got shape {_fmt(total.shape)}", _input_subject(6))


def _check_rotary(t: dict, attrs: GqaAttributes, Dh: int, dtype: str):
    """cos/sin caches: checked whenever given, as onnxruntime checks them (do_rotary only decides their use)."""
    caches = [(7, t["cos_cache"]), (8, t["sin_cache"])]
    if (caches[0][1] is None) != (caches[1][1] is None):
        raise Refusal("cos_cache and sin_cache must be both given or both absent", _input_subject(7 if caches[0][1] is None else 8))
    if caches[0][1] is None:
        if attrs.do_rotary:
            raise Refusal("is required when do_rotary is 1", _input_subject(7))
        return
    for slot, c in caches:
        _check_rank(c, slot, 2)
        _check_dtype(c, slot, dtype)
        width = c.shape[1]
        if width is None or width % 8 or 2 * width > Dh:
            raise Refusal(
                f"dimension 1 ({'?' if width is None else width}) must be static, a multiple of 8 and at most "
                f"head_size / 2 ({Dh // 2}) (onnxruntime rejects it otherwise)",
                _input_subject(slot),
            )
    cos, sin = caches[0][1].shape, caches[1][1].shape
    if any(c is not None and d is not None and c != d for c, d in zip(cos, sin)):  # a dynamic row count is checked at run time
        raise Refusal(f"shape {_fmt(sin)} differs from cos_cache's {_fmt(cos)}", _input_subject(8))


def _check_extras(t: dict, attrs: GqaAttributes, dtype: str):
    """position_ids, attention_bias and head_sink."""
    pos = t["position_ids"]
    if pos is not None:
        if pos.rank < 2:  # onnxruntime reads dimension 1 of it (and crashes on rank 1)
            raise Refusal(f"must have rank 2 ([B, >= S]) or more, got shape {_fmt(pos.shape)}", _input_subject(9))
        if pos.dtype != "si64":
            raise Refusal(f"element type {pos.dtype} is not supported; onnxruntime requires int64", _input_subject(9))
        query_S = t["query"].shape[1]
        if pos.shape[1] is not None and query_S is not None and pos.shape[1] < query_S:
            raise Refusal(f"dimension 1 ({pos.shape[1]}) must be at least the sequence length ({query_S})", _input_subject(9))
    bias = t["attention_bias"]
    if attrs.window_cache:
        past = t["past_key"]
        if past is None:
            raise Refusal("is required with sliding_window_cache=1", _input_subject(3))
        if past.shape[2] is not None and past.shape[2] < attrs.local_window_size:
            raise Refusal(f"capacity (dimension 2, {past.shape[2]}) must be at least local_window_size ({attrs.local_window_size})", _input_subject(3))
    if bias is not None:
        _check_rank(bias, 10, 4)
        _check_dtype(bias, 10, dtype)
        if bias.shape[1] not in (1, attrs.num_heads, None):
            raise Refusal(f"dimension 1 ({bias.shape[1]}) must be 1 or num_heads ({attrs.num_heads})", _input_subject(10))
    qlens = t["query_seqlens"]
    if qlens is not None:
        _check_rank(qlens, 16, 1)
        if qlens.dtype != "si32":
            raise Refusal(f"element type {qlens.dtype} is not supported; onnxruntime requires int32", _input_subject(16))
        if not attrs.causal:
            raise Refusal("requires causal=1 (onnxruntime rejects it otherwise)", _input_subject(16))
        if t["past_key"] is None:
            raise Refusal("requires past_key and past_value (onnxruntime rejects it otherwise)", _input_subject(16))
    sink = t["head_sink"]
    if sink is not None:
        _check_rank(sink, 11, 1)
        _check_dtype(sink, 11, dtype)
        _check_dim(sink, 11, 0, attrs.num_heads, "num_heads")


def support_table_markdown() -> str:
    """docs/support.md's table of what is lowered and what is refused."""
    rows = ["| kind | name | lowered |", "| --- | --- | --- |"]
    for r in INPUTS:
        rows.append(f"| input {r.slot} | `{r.name}` | {'yes' if r.lowered else 'no'}: {r.note} |")
    for name, rule in ATTRIBUTES.items():
        rows.append(f"| attribute | `{name}` | {rule.supported} |")
    rows.append("| output 3 | `output_qk` | with qk_output 1 or 2: [B,H,S,total_sequence_length] |")
    return "\n".join(rows)
