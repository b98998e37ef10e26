"""Static and run-time sizes of the inputs: one batch and sequence size for all, head dims from the attributes."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from ....builder import Tensor, TorchBuilder
from ....registry import Refusal
from .inputs import OP, GqaInputs
from .support import EMPTY_SEQUENCE, GqaAttributes, flat_channel_scale


# Where each input holds the batch (B) and sequence (S) dims.
_BATCH_DIMS = {"query": 0, "key": 0, "value": 0, "past_key": 0, "past_value": 0, "position_ids": 0, "query_seqlens": 0}
_SEQ_DIMS = {"query": 1, "key": 1, "value": 1, "attention_bias": 2}  # position_ids: at least S (_check_paired_dims)
_PAIRED_DIMS = [("past_value", "past_key", 2), ("sin_cache", "cos_cache", 0)]  # (input, the input it must equal, dim)
_NO_BROADCAST = " (a dimension only known at run time is not broadcast; onnxruntime rejects other sizes)"


def unify_dims(tb: TorchBuilder, ins: GqaInputs, attrs: GqaAttributes) -> GqaInputs:
    """Give B and S their static size in every input when any input knows it,
    and the head dims of key, value and the caches theirs; check at run time
    every dim the lowering assumes equal to another but only then knows.

    Mixed static and dynamic batch dims are legal ONNX, but torch-mlir's
    attention lowering rejects operands whose batch dims disagree that way;
    exporters also declare the cache's head size symbolic (onnxruntime-genai's
    ``kv_cache_dim``), which the attributes and the query fix.  onnxruntime
    checks these shapes on every call; torch-mlir's casts and broadcasts trust
    the types, so an unchecked mismatch would read out of bounds.
    """
    Dh, Hkv, H = ins.head_size, attrs.kv_num_heads, attrs.num_heads
    Dc = Dh // 2 if attrs.kv_bits == 4 else Dh
    _refine(tb, ins, "past_key", {1: Hkv, 3: Dc})
    _refine(tb, ins, "past_value", {1: Hkv, 3: Dc})
    _refine(tb, ins, "key", {2: Hkv * Dh})
    _refine(tb, ins, "value", {2: Hkv * Dh})
    _refine(tb, ins, "head_sink", {0: H})
    if attrs.kv_bits:  # one element, or [1,Hkv,1,Dh] per channel
        for name in ("k_scale", "v_scale"):
            scale = getattr(ins, name)
            if attrs.quant_type == "PER_CHANNEL" and flat_channel_scale(scale.shape, Hkv, Dh):
                flat = tb.flatten(scale, 0, scale.rank - 1) if scale.rank > 1 else scale  # [Hkv,Dh]... -> [Hkv*Dh]
                scale = tb.unflatten(flat, 0, [1, Hkv, 1, Dh])  # -> [1,Hkv,1,Dh]
                setattr(ins, name, scale)
            sizes = (1, Hkv, 1, Dh) if attrs.quant_type == "PER_CHANNEL" else (1,) * scale.rank
            _refine(tb, ins, name, dict(enumerate(sizes)), f" ({attrs.quant_type} quantization)")
    if ins.attention_bias is not None and ins.attention_bias.shape[1] is None:
        _refine(tb, ins, "attention_bias", {1: H}, _NO_BROADCAST)
    for what, dims in (("batch", _batch_dims(ins)), ("sequence", _SEQ_DIMS)):
        _unify(tb, ins, what, dims)
    for name, other, d in _PAIRED_DIMS + [(o, n, d) for n, o, d in _PAIRED_DIMS]:  # a static size on one side types both
        if getattr(ins, name) is not None and getattr(ins, other).shape[d] is not None:
            _refine(tb, ins, name, {d: getattr(ins, other).shape[d]}, f" ({other}'s; onnxruntime rejects it otherwise)")
    _check_paired_dims(tb, ins)
    return ins


def with_batch_of_one(tb: TorchBuilder, ins: GqaInputs) -> GqaInputs:
    """``ins`` (unified: :func:`unify_dims`) with each run-time batch dim typed 1, unchecked: for
    a branch taken only when the batch size is 1.  [?,..] -> [1,..]"""
    dims = _batch_dims(ins)
    return replace(ins, **{name: tb.known_static(getattr(ins, name), {d: 1}) for name, d in dims.items() if getattr(ins, name) is not None})


def with_seq_of_one(tb: TorchBuilder, ins: GqaInputs) -> GqaInputs:
    """``ins`` (unified) with each run-time sequence dim typed 1, unchecked: for a branch taken
    only when the query has one row.  [B,?,..] -> [B,1,..]"""
    return replace(ins, **{name: tb.known_static(getattr(ins, name), {d: 1}) for name, d in _SEQ_DIMS.items() if getattr(ins, name) is not None})


def _batch_dims(ins: GqaInputs) -> dict:
    """Input name -> the dim holding its batch size (inputs where one dim does)."""
    dims = dict(_BATCH_DIMS)
    seqlens_batch_dim = _seqlens_batch_dim(ins.seqlens_k)
    if seqlens_batch_dim is not None:  # its static length is the batch size too
        dims["seqlens_k"] = seqlens_batch_dim
    if ins.attention_bias is not None and ins.attention_bias.shape[0] != 1:  # [B,...] (a 1 broadcasts)
        dims["attention_bias"] = 0
    return dims


def _seqlens_batch_dim(seqlens: Tensor) -> Optional[int]:
    """The dim of seqlens_k holding the batch: 0 for [B], the one dim not 1 of [B,1], [1,B,1]...
    (None when no single dim is: all 1, or several dynamic)."""
    if seqlens.rank == 1:
        return 0
    others = [i for i, d in enumerate(seqlens.shape) if d != 1]
    return others[0] if len(others) == 1 else None


def _refine(tb: TorchBuilder, ins: GqaInputs, name: str, dims: dict, why: str = "") -> None:
    t = getattr(ins, name)
    if t is not None:
        setattr(ins, name, tb.refine(t, dims, f"{OP}: {name}", why))


def _unify(tb: TorchBuilder, ins: GqaInputs, what: str, dims: dict) -> None:
    """One size for the batch (or sequence) dim of every input: the static one
    when any input has it, else the query's, checked at run time."""
    given = {n: getattr(ins, n).shape[d] for n, d in dims.items() if getattr(ins, n) is not None}
    known = set(given.values()) - {None}
    if len(known) > 1:
        sizes = ", ".join(f"{n} {s}" for n, s in given.items() if s is not None)
        raise Refusal(f"the inputs disagree on the {what} size: {sizes}")
    why = _NO_BROADCAST if what == "batch" else " (onnxruntime rejects it otherwise)"
    if known:
        size = known.pop()
        for name, d in dims.items():
            _refine(tb, ins, name, {d: size}, why)
        return
    size = tb.size(ins.query, dims["query"])
    for name, d in dims.items():
        t = getattr(ins, name)
        if t is not None and name != "query":
            tb.check_dim(t, d, size, f"{OP}: {name} dimension {d} must equal the {what} size (query dimension {dims['query']}){why}")


def _check_paired_dims(tb: TorchBuilder, ins: GqaInputs) -> None:
    """past_value's rows are past_key's, sin_cache's shape is cos_cache's, seqlens_k has
    one entry per batch row, total_sequence_length one element and the query at
    least one row (run-time sizes)."""
    for name, other, d in _PAIRED_DIMS:
        t, ref = getattr(ins, name), getattr(ins, other)
        if t is not None:
            tb.check_dim(t, d, tb.size(ref, d), f"{OP}: {name} dimension {d} must equal {other}'s (onnxruntime rejects it otherwise)")
    B = tb.size(ins.query, 0)
    seqlens = ins.seqlens_k
    entries = tb.size(seqlens, 0)
    for d in range(1, seqlens.rank):
        entries = tb.dim_mul(entries, tb.size(seqlens, d))
    if _seqlens_batch_dim(seqlens) is None and not (isinstance(entries, int) and isinstance(B, int)):
        tb.runtime_assert(tb.dim_eq(entries, B), f"{OP}: seqlens_k must hold one entry per batch row (query dimension 0)")
    if ins.position_ids is not None and not isinstance(tb.size(ins.position_ids, 1), int):
        tb.runtime_assert(
            tb.dim_le(tb.size(ins.query, 1), tb.size(ins.position_ids, 1)),
            f"{OP}: position_ids dimension 1 must be at least the sequence length (query dimension 1) (onnxruntime rejects it otherwise)",
        )
    total = ins.total_sequence_length
    if total.rank == 1:
        tb.check_dim(total, 0, 1, f"{OP}: total_sequence_length must hold one element")
    S = tb.size(ins.query, 1)
    if not isinstance(S, int):  # a static 0 is refused at compile time
        tb.runtime_assert(
            tb.dim_lt(0, S), f"{OP}: the sequence length (query dimension 1) must be at least 1 ({EMPTY_SEQUENCE[ins.query_seqlens is not None]})"
        )
