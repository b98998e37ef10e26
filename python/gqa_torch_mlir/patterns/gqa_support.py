"""What the GroupQueryAttention lowering accepts: one table, read by the pattern and the docs.

Each ONNX attribute and input of the op (onnxruntime's schema) has an entry
saying which values are lowered.  Anything else is refused by name with the
supported values, never accepted and ignored.  ``support_table_markdown()``
renders the table for the README.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from ..binder import OpBinder
from ..builder import FLOAT_DTYPES
from ..registry import Refusal


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


def _positive_finite(v):
    return math.isfinite(v) and v > 0.0


ATTRIBUTES: Dict[str, AttrRule] = {
    "num_heads": AttrRule("int", None, lambda v: v > 0, "required, > 0"),
    "kv_num_heads": AttrRule("int", None, lambda v: v > 0, "required, > 0, divides num_heads"),
    "do_rotary": AttrRule("int", 0, _is(0, 1), "0 or 1"),
    "rotary_interleaved": AttrRule("int", 0, _is(0), "0 (interleaved rotary is not lowered yet)"),
    "scale": AttrRule("float", 0.0, _finite_nonneg, "finite >= 0 (0 means 1/sqrt(head_size))"),
    "softcap": AttrRule("float", 0.0, _is(0.0), "0.0 (softcap is not lowered yet)"),
    "local_window_size": AttrRule("int", -1, _is(-1), "-1 (sliding window is not lowered yet)"),
    "smooth_softmax": AttrRule("int", -1, _is(-1, 0), "-1 or 0 (smooth softmax is not lowered yet)"),
    "causal": AttrRule("int", 1, _is(1), "1 (non-causal attention is not lowered yet)"),
    "qk_output": AttrRule("int", 0, _is(0), "0 (output_qk is not lowered yet)"),
    "sliding_window_cache": AttrRule("int", 0, _is(0), "0 (window-sized caches are not lowered yet)"),
    "kv_cache_bit_width": AttrRule("int", None, _is(0), "absent or 0 (quantized caches are not lowered)"),
    "k_quant_type": AttrRule("string", "NONE", _is("NONE"), "'NONE' (quantized caches are not lowered)"),
    "v_quant_type": AttrRule("string", "NONE", _is("NONE"), "'NONE' (quantized caches are not lowered)"),
    # Epsilons only matter with q_norm_weight/k_norm_weight, which are refused.
    "qk_norm_epsilon": AttrRule("float", 1e-6, _positive_finite, "finite > 0 (no effect without q/k norm weights)"),
    "q_norm_epsilon": AttrRule("float", None, _positive_finite, "finite > 0 (no effect without q/k norm weights)"),
    "k_norm_epsilon": AttrRule("float", None, _positive_finite, "finite > 0 (no effect without q/k norm weights)"),
}


@dataclass(frozen=True)
class InputRule:
    slot: int
    name: str
    lowered: bool
    note: str


INPUTS: List[InputRule] = [
    InputRule(0, "query", True, "[B,S,H*Dh], or packed QKV [B,S,(H+2*Hkv)*Dh]; f32 or f16"),
    InputRule(1, "key", True, "[B,S,Hkv*Dh]; absent (empty name) with packed QKV"),
    InputRule(2, "value", True, "[B,S,Hkv*Dh]; absent with packed QKV"),
    InputRule(3, "past_key", True, "[B,Hkv,P,Dh], required; the cache grows to P+S"),
    InputRule(4, "past_value", True, "[B,Hkv,P,Dh], required"),
    InputRule(5, "seqlens_k", True, "int32 [B]: total tokens - 1 per row (ragged rows allowed)"),
    InputRule(6, "total_sequence_length", True, "int32 scalar; P+S (growing cache), or S on a first prompt"),
    InputRule(7, "cos_cache", True, "[M,Dh/2], with do_rotary=1"),
    InputRule(8, "sin_cache", True, "[M,Dh/2], with do_rotary=1"),
    InputRule(9, "position_ids", False, "refused when given"),
    InputRule(10, "attention_bias", False, "refused when given"),
    InputRule(11, "head_sink", False, "refused when given"),
    InputRule(12, "k_scale", False, "refused when given (quantized cache)"),
    InputRule(13, "v_scale", False, "refused when given (quantized cache)"),
    InputRule(14, "q_norm_weight", False, "refused when given"),
    InputRule(15, "k_norm_weight", False, "refused when given"),
    InputRule(16, "query_seqlens", False, "refused when given"),
]

OUTPUTS = ["output", "present_key", "present_value", "output_qk"]
MAX_LOWERED_OUTPUTS = 3


@dataclass(frozen=True)
class GqaAttributes:
    num_heads: int
    kv_num_heads: int
    do_rotary: int
    scale: float


def _read(b: OpBinder, name: str, rule: AttrRule):
    getter = {"int": b.attr_int, "float": b.attr_float, "string": b.attr_str}[rule.kind]
    return getter(name) if rule.default is None and name in ("num_heads", "kv_num_heads") else getter(name, rule.default)


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
        if not rule.accepts(value):
            raise Refusal(f"value {value!r} is not supported; supported: {rule.supported}", f"attribute '{name}'")
        values[name] = value
    if values["num_heads"] % values["kv_num_heads"]:
        raise Refusal(
            f"num_heads ({values['num_heads']}) must be a multiple of kv_num_heads ({values['kv_num_heads']})",
            "attribute 'kv_num_heads'",
        )
    return GqaAttributes(values["num_heads"], values["kv_num_heads"], values["do_rotary"], values["scale"])


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
            raise Refusal(f"is not supported yet ({rule.note})", _input_subject(rule.slot))
    if b.num_input_slots() > len(INPUTS):
        raise Refusal(f"the op has {b.num_input_slots()} inputs; GroupQueryAttention defines {len(INPUTS)}")
    if b.num_results > MAX_LOWERED_OUTPUTS:
        raise Refusal("is not supported yet (qk_output must be 0)", "output 3 'output_qk'")
    t = {r.name: b.tensor(r.slot, r.name) for r in INPUTS if r.lowered}
    query = _require(t, "query")
    _check_rank(query, 0, 3)
    if query.dtype not in ("f32", "f16"):
        raise Refusal(f"element type {query.dtype} is not supported; supported: f32, f16", _input_subject(0))
    head_size = _head_size(t, attrs)
    _check_kv_and_cache(t, attrs, head_size, query.dtype)
    _check_lengths(t)
    _check_rotary(t, attrs, head_size, query.dtype)
    return dict(
        query=query,
        key=t["key"],
        value=t["value"],
        past_key=t["past_key"],
        past_value=t["past_value"],
        seqlens_k=t["seqlens_k"],
        total_sequence_length=t["total_sequence_length"],
        cos_cache=t["cos_cache"],
        sin_cache=t["sin_cache"],
        head_size=head_size,
    )


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
    return hidden // heads_in_query


def _check_kv_and_cache(t: dict, attrs: GqaAttributes, Dh: int, dtype: str):
    Hkv = attrs.kv_num_heads
    for slot, name in ((1, "key"), (2, "value")):
        x = t[name]
        if x is None:
            continue
        _check_rank(x, slot, 3)
        _check_dim(x, slot, 2, Hkv * Dh, "kv_num_heads * head_size")
        _check_dtype(x, slot, dtype)
    for slot, name in ((3, "past_key"), (4, "past_value")):
        cache = _require(t, name)
        _check_rank(cache, slot, 4)
        _check_dim(cache, slot, 1, Hkv, "kv_num_heads")
        _check_dim(cache, slot, 3, Dh, "head_size")
        _check_dtype(cache, slot, dtype)


def _check_dtype(x, slot: int, dtype: str):
    if x.dtype != dtype:
        raise Refusal(f"element type {x.dtype} differs from the query's {dtype}", _input_subject(slot))


def _check_lengths(t: dict):
    seqlens = _require(t, "seqlens_k")
    _check_rank(seqlens, 5, 1)
    if seqlens.dtype != "si32":
        raise Refusal(f"element type {seqlens.dtype} is not supported; onnxruntime requires int32", _input_subject(5))
    total = _require(t, "total_sequence_length")
    if total.dtype != "si32":
        raise Refusal(f"element type {total.dtype} is not supported; onnxruntime requires int32", _input_subject(6))
    if total.rank > 1 or (total.rank == 1 and total.shape[0] not in (1, None)):
        raise Refusal(f"must be a scalar, got shape {_fmt(total.shape)}", _input_subject(6))


def _check_rotary(t: dict, attrs: GqaAttributes, Dh: int, dtype: str):
    caches = [(7, t["cos_cache"]), (8, t["sin_cache"])]
    if not attrs.do_rotary:
        for slot, c in caches:
            if c is not None:
                raise Refusal("is given but do_rotary is 0", _input_subject(slot))
        return
    for slot, c in caches:
        if c is None:
            raise Refusal("is required when do_rotary is 1", _input_subject(slot))
        _check_rank(c, slot, 2)
        _check_dtype(c, slot, dtype)
        if c.shape[1] is None or c.shape[1] != Dh // 2:
            raise Refusal(
                f"dimension 1 ({'?' if c.shape[1] is None else c.shape[1]}) must be head_size / 2 ({Dh // 2}); "
                "partial rotary is not lowered yet",
                _input_subject(slot),
            )


def support_table_markdown() -> str:
    """The README's table of what is lowered and what is refused."""
    rows = ["| kind | name | lowered |", "| --- | --- | --- |"]
    for r in INPUTS:
        rows.append(f"| input {r.slot} | `{r.name}` | {'yes' if r.lowered else 'no'}: {r.note} |")
    for name, rule in ATTRIBUTES.items():
        rows.append(f"| attribute | `{name}` | {rule.supported} |")
    rows.append(f"| output 3 | `output_qk` | no: refused when requested |")
    return "\n".join(rows)


def is_float_dtype(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES
