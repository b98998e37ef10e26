"""Lowering of onnxruntime's ``com.microsoft.GroupQueryAttention`` to torch ops.

Dimension letters (onnxruntime's CPU kernel is the spec):
  B   batch                          S   new tokens this step (query length)
  P   past rows (past_key dim 2)     T   present rows = max(P, total_sequence_length)
  H   query heads (num_heads)        Hkv key/value heads (kv_num_heads)
  G   H / Hkv                        Dh  head size
  R   rotated dims (2 * cos/sin columns; R < Dh is partial rotary)
  Tt  total_sequence_length (the key dim of attention_bias and output_qk)

Per batch row b, ``seqlens_k[b] + 1`` tokens are in the cache after the step.
A first prompt (S == total_sequence_length) starts at row 0; any other step
has ``past_len[b] = seqlens_k[b] + 1 - S`` valid past rows.  New token s sits
at absolute position ``i = past_len[b] + s``: the cache row its K/V are
written to, and (without position_ids) its rotary angle.  Query s sees key t
iff ``t <= hi = min(i, seqlens_k[b])`` and, with a window W >= 0,
``t > hi - W``; with causal=0 it sees every key ``t <= seqlens_k[b]``.

The cache keeps past's rows and grows only when total_sequence_length > P
(onnxruntime's present has ``max(P, total)`` rows): a growing cache gains S
rows, a fixed-capacity buffer (total <= P) keeps its capacity and receives the
new rows in place, at ``past_len[b] + s`` (ExecuTorch's update at start_pos).
A window-sized buffer (sliding_window_cache=1) evicts: see gqa_window.py.
Quantized caches store int8 / packed int4 rows: see gqa_cache.py.

Attention is ``scaled_dot_product_attention`` when the op's scores need no
more than an additive mask; softcap, smooth softmax / head_sink, output_qk and
an empty window (W = 0) use a decomposed form on grouped queries (K/V are
never repeated), in f32 as onnxruntime computes f16 inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

from ..binder import OpBinder
from ..builder import Dim, Tensor, TorchBuilder, parse_vtensor_type
from ..registry import Refusal, onnx_op
from .gqa_cache import CacheCodec
from .gqa_window import WindowPlan, plan_window
from .gqa_support import EMPTY_SEQUENCE, OUTPUTS, GqaAttributes, flat_channel_scale, read_attributes, validate_inputs

NEG_INF = float("-inf")


@dataclass
class GqaInputs:
    query: Tensor  # [B,S,H*Dh] or packed [B,S,(H+2Hkv)*Dh]
    key: Optional[Tensor]  # [B,S,Hkv*Dh]; None when packed
    value: Optional[Tensor]
    past_key: Optional[Tensor]  # [B,Hkv,P,Dh]; None: an empty past
    past_value: Optional[Tensor]
    seqlens_k: Tensor  # [B] (or B entries in more dims of 1: [B,1], [1,B], [B,1,1]...) si32
    total_sequence_length: Tensor  # [] or [1] si32
    cos_cache: Optional[Tensor]  # [M,R/2]
    sin_cache: Optional[Tensor]
    position_ids: Optional[Tensor]  # [B,S] si64
    attention_bias: Optional[Tensor]  # [B|1,H|1,S,Tt]
    head_sink: Optional[Tensor]  # [H]
    k_scale: Optional[Tensor]  # f32 [1] or [1,Hkv,1,Dh], with a quantized cache
    v_scale: Optional[Tensor]
    query_seqlens: Optional[Tensor]  # [B] si32: valid rows of a right-padded chunk
    head_size: int


@dataclass
class Step:
    """This step's lengths and positions."""

    S: Dim
    seqlens_B: Tensor  # si64 [B]
    total: Tensor  # si64 [] (or [1])
    first_prompt: Optional[Tensor]  # i1 [] (or [1]): S == total_sequence_length; None with query_seqlens
    past_len_B: Tensor  # si64 [B]: tokens in the cache before the step
    position_BS: Tensor  # si64 [B,S]: past_len[b] + s


@dataclass
class CacheStep:
    """The caches after the step, and the rows attention reads."""

    present_key: Tensor  # [B,Hkv,T,Dc] (stored form: int8 / packed int4 when quantized)
    present_value: Tensor
    read_key: Tensor  # [B,Hkv,R,Dc]: the present rows (R <= T), or a window cache's staged rows
    read_value: Tensor
    key_pos: Tensor  # si64 absolute position of each read row: [R], or [B,1,R] (window cache)
    window: Optional[WindowPlan] = None  # a window cache's plan


@onnx_op("GroupQueryAttention", domain="com.microsoft", since=1)
def lower_group_query_attention(b: OpBinder, tb: TorchBuilder) -> List:
    attrs = read_attributes(b)
    ins = unify_dims(tb, GqaInputs(**validate_inputs(b, attrs)), attrs)
    step = step_positions(tb, ins)
    check_total(tb, ins, step, attrs.window_cache)
    query_BHSDh, key_BHkvSDh, value_BHkvSDh = split_heads(tb, ins, attrs)
    if ins.cos_cache is not None:  # checked whenever given, as onnxruntime does
        check_rotary_rows(tb, ins, step)
    if attrs.do_rotary:
        positions_BS = checked_rotary_positions(tb, ins, step)
        if ins.cos_cache.shape[1] > 0:  # a width of 0 rotates nothing
            rotary = RotaryTables.gather(tb, ins, positions_BS, attrs.rotary_interleaved)
            query_BHSDh = rotary.apply(tb, query_BHSDh)
            key_BHkvSDh = rotary.apply(tb, key_BHkvSDh)
    per_tensor = attrs.quant_type == "PER_TENSOR" and attrs.kv_bits == 8
    codec = CacheCodec(attrs.kv_bits, ins.k_scale, ins.v_scale, per_tensor, value_scaled_after=per_tensor and attrs.qk_output != 0)
    key_BHkvSDc, value_BHkvSDc = codec.encode(tb, key_BHkvSDh, "key"), codec.encode(tb, value_BHkvSDh, "value")
    update = window_cache_step if attrs.window_cache else kv_cache_step
    cache = update(tb, b, attrs, ins, step, key_BHkvSDc, value_BHkvSDc)
    key_BHkvRDh, value_BHkvRDh = codec.decode(tb, cache.read_key, "key"), codec.decode(tb, cache.read_value, "value")
    visible_BSR = visible_keys(tb, step, attrs, cache.key_pos)
    if attrs.window_cache:
        bias = window_bias(tb, ins, step, cache.key_pos)
    else:
        bias = padded_bias(tb, ins, step, cache.present_key)
    keys_read_B1R, values_read_B1R = read_rows(tb, step, cache, attrs)
    if b.options.attention == "decomposed" or needs_scores(attrs, ins) or codec.quantized:
        attn_BHSDh, qk_BHSTt = decomposed_attention(
            tb, attrs, ins, step, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, bias, values_read_B1R,
            (codec.factor(tb, "key"), codec.factor(tb, "value")),
        )
    else:  # SDPA's additive mask keeps a NaN score: unread K rows are zeroed too
        key_BHkvRDh = zero_unread_rows(tb, keys_read_B1R, key_BHkvRDh)
        value_BHkvRDh = zero_unread_rows(tb, values_read_B1R, value_BHkvRDh)
        attn_BHSDh, qk_BHSTt = sdpa_attention(tb, attrs, ins, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, bias), None
    output_BSHDh = tb.transpose(attn_BHSDh, 1, 2)  # [B,H,S,Dh] -> [B,S,H,Dh]
    output_BSD = tb.flatten(output_BSHDh, 2, 3)  # [B,S,H,Dh] -> [B,S,H*Dh]
    results = [output_BSD, cache.present_key, cache.present_value, qk_BHSTt][: b.num_results]
    return [tb.none() if t is None else b.declared_result(tb, i, t, OUTPUTS[i]) for i, t in enumerate(results)]  # None: an unnamed output_qk


def window_cache_step(tb, b, attrs, ins, step, key_BHkvSDc, value_BHkvSDc) -> CacheStep:
    """A window-sized buffer: attention reads the staged rows, the buffer keeps the resident ones (gqa_window.py)."""
    past_key, past_value = past_caches(tb, ins, attrs)
    check_window_lengths(tb, step, past_key, attrs.local_window_size, ins.query_seqlens is not None)
    plan = plan_window(tb, past_key, step.past_len_B, step.seqlens_B, step.S, attrs.local_window_size)
    read_key_BHkvXDc, present_key_BHkvCDc = plan.apply(tb, past_key, key_BHkvSDc)
    read_value_BHkvXDc, present_value_BHkvCDc = plan.apply(tb, past_value, value_BHkvSDc)
    return CacheStep(present_key_BHkvCDc, present_value_BHkvCDc, read_key_BHkvXDc, read_value_BHkvXDc, plan.key_abs_B1X, plan)


def kv_cache_step(tb, b, attrs, ins, step, key_BHkvSDc, value_BHkvSDc) -> CacheStep:
    """A growing cache or a fixed-capacity buffer: the new rows are written at their positions.

    A buffer that may be fixed-capacity is read on its rows [0, R) only,
    R = max(seqlens_k) + 1, unless attention_bias or output_qk keep its
    capacity as their key columns.
    """
    past_key, past_value = past_caches(tb, ins, attrs)
    P = tb.size(past_key, 2)
    growth = cache_growth(tb, b, step, past_key)
    write_row_BS = checked_cache_rows(tb, step, ins, P, growth)
    index_BHkvSDc = cache_index(tb, write_row_BS, attrs.kv_num_heads, key_BHkvSDc.shape[3])
    present_key_BHkvTDc = write_cache(tb, past_key, key_BHkvSDc, index_BHkvSDc, growth)
    present_value_BHkvTDc = write_cache(tb, past_value, value_BHkvSDc, index_BHkvSDc, growth)
    read_key_BHkvRDc, read_value_BHkvRDc = present_key_BHkvTDc, present_value_BHkvTDc
    may_be_fixed = not (isinstance(growth, int) and growth > 0)  # a growing cache reads all rows
    if may_be_fixed and ins.attention_bias is None and not attrs.qk_output:
        rows = used_rows(tb, step, tb.size(present_key_BHkvTDc, 2))
        read_key_BHkvRDc = tb.slice(present_key_BHkvTDc, 2, 0, rows)  # [B,Hkv,T,Dc] -> [B,Hkv,R,Dc]
        read_value_BHkvRDc = tb.slice(present_value_BHkvTDc, 2, 0, rows)
    key_pos_R = tb.arange(tb.size(read_key_BHkvRDc, 2))
    return CacheStep(present_key_BHkvTDc, present_value_BHkvTDc, read_key_BHkvRDc, read_value_BHkvRDc, key_pos_R)


# -- shapes -----------------------------------------------------------------------

# Where each input holds the batch (B) and sequence (S) dims.
_BATCH_DIMS = {"query": 0, "key": 0, "value": 0, "past_key": 0, "past_value": 0, "position_ids": 0, "query_seqlens": 0}
_SEQ_DIMS = {"query": 1, "key": 1, "value": 1, "attention_bias": 2}  # position_ids: at least S (_check_paired_dims)
_OP = "GroupQueryAttention"
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
    batch_dims = dict(_BATCH_DIMS)
    seqlens_batch_dim = _seqlens_batch_dim(ins.seqlens_k)
    if seqlens_batch_dim is not None:  # its static length is the batch size too
        batch_dims["seqlens_k"] = seqlens_batch_dim
    if ins.attention_bias is not None:
        if ins.attention_bias.shape[0] != 1:  # [B,...] (a 1 broadcasts)
            batch_dims["attention_bias"] = 0
        if ins.attention_bias.shape[1] is None:
            _refine(tb, ins, "attention_bias", {1: H}, _NO_BROADCAST)
    for what, dims in (("batch", batch_dims), ("sequence", _SEQ_DIMS)):
        _unify(tb, ins, what, dims)
    for name, other, d in _PAIRED_DIMS + [(o, n, d) for n, o, d in _PAIRED_DIMS]:  # a static size on one side types both
        if getattr(ins, name) is not None and getattr(ins, other).shape[d] is not None:
            _refine(tb, ins, name, {d: getattr(ins, other).shape[d]}, f" ({other}'s; onnxruntime rejects it otherwise)")
    _check_paired_dims(tb, ins)
    return ins


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
        setattr(ins, name, tb.refine(t, dims, f"{_OP}: {name}", why))


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
            tb.check_dim(t, d, size, f"{_OP}: {name} dimension {d} must equal the {what} size (query dimension {dims['query']}){why}")


def _check_paired_dims(tb: TorchBuilder, ins: GqaInputs) -> None:
    """past_value's rows are past_key's, sin_cache's shape is cos_cache's, seqlens_k has
    one entry per batch row, total_sequence_length one element and the query at
    least one row (run-time sizes)."""
    for name, other, d in _PAIRED_DIMS:
        t, ref = getattr(ins, name), getattr(ins, other)
        if t is not None:
            tb.check_dim(t, d, tb.size(ref, d), f"{_OP}: {name} dimension {d} must equal {other}'s (onnxruntime rejects it otherwise)")
    B = tb.size(ins.query, 0)
    seqlens = ins.seqlens_k
    entries = tb.size(seqlens, 0)
    for d in range(1, seqlens.rank):
        entries = tb.dim_mul(entries, tb.size(seqlens, d))
    if _seqlens_batch_dim(seqlens) is None and not (isinstance(entries, int) and isinstance(B, int)):
        tb.runtime_assert(tb.dim_eq(entries, B), f"{_OP}: seqlens_k must hold one entry per batch row (query dimension 0)")
    if ins.position_ids is not None and not isinstance(tb.size(ins.position_ids, 1), int):
        tb.runtime_assert(
            tb.dim_le(tb.size(ins.query, 1), tb.size(ins.position_ids, 1)),
            f"{_OP}: position_ids dimension 1 must be at least the sequence length (query dimension 1) (onnxruntime rejects it otherwise)",
        )
    total = ins.total_sequence_length
    if total.rank == 1:
        tb.check_dim(total, 0, 1, f"{_OP}: total_sequence_length must hold one element")
    S = tb.size(ins.query, 1)
    if not isinstance(S, int):  # a static 0 is refused at compile time
        tb.runtime_assert(
            tb.dim_lt(0, S), f"{_OP}: the sequence length (query dimension 1) must be at least 1 ({EMPTY_SEQUENCE[ins.query_seqlens is not None]})"
        )


# -- positions ------------------------------------------------------------------


def step_positions(tb: TorchBuilder, ins: GqaInputs) -> Step:
    """past_len[b]: seqlens_k[b] + 1 - query_seqlens[b] for a right-padded chunk;
    else 0 on a first prompt (S == total_sequence_length), seqlens_k[b] + 1 - S otherwise."""
    S = tb.size(ins.query, 1)
    seqlens = ins.seqlens_k if ins.seqlens_k.rank == 1 else tb.flatten(ins.seqlens_k, 0, ins.seqlens_k.rank - 1)  # [B,1]|[1,B]|[1,B,1] -> [B]
    seqlens_B = tb.to_dtype(seqlens, "si64")  # si32 [B] -> si64 [B]
    # Before any position is computed from it (the rotary rows' check would name only positions):
    # the upper bound needs the present length, checked with the cache.
    tb.runtime_check(tb.ge_scalar(seqlens_B, 0), f"{_OP}: seqlens_k[b] must be >= 0 (onnxruntime rejects it otherwise)")
    total = ins.total_sequence_length
    if total.rank == 1 and total.shape[0] is None:  # one element, checked with the inputs
        # [?] -> [?+1] -> [1]: the pad keeps the read in bounds for an empty feed (whose check fails)
        total = tb.slice(tb.pad_dim_end(total, 0, 1), 0, 0, 1, in_bounds=True)
    total = tb.to_dtype(total, "si64")  # si32 [] -> si64 []
    if ins.query_seqlens is not None:  # total_sequence_length is only an upper bound then
        first_prompt = None
        past_len_B = tb.sub(tb.add_scalar(seqlens_B, 1), tb.to_dtype(ins.query_seqlens, "si64"))  # [B]
    else:
        first_prompt = tb.eq_scalar(total, S)
        check_chunk_batch(tb, first_prompt, tb.size(ins.query, 0), S)
        past_len_B = tb.where_scalar_else(first_prompt, 0, tb.add_scalar(seqlens_B, tb.dim_sub(1, S)))  # [B]
    position_BS = tb.add(tb.unsqueeze(past_len_B, 1), tb.arange(S))  # [B,1] + [S] -> [B,S]
    return Step(S, seqlens_B, total, first_prompt, past_len_B, position_BS)


def check_chunk_batch(tb: TorchBuilder, first_prompt: Tensor, B: Dim, S: Dim) -> None:
    """S > 1 tokens after a past need batch 1 (onnxruntime's rule without query_seqlens)."""
    if B == 1 or S == 1:
        return
    ok = first_prompt
    for d in (B, S):
        if not isinstance(d, int):
            ok = tb.logical_or(ok, tb.eq_scalar(tb.dim_tensor(d), 1))
    tb.runtime_check(
        ok,
        "GroupQueryAttention: a step of S > 1 tokens after a past needs batch size 1, or query_seqlens "
        "(onnxruntime rejects it otherwise)",
    )


def rotary_positions(tb: TorchBuilder, ins: GqaInputs, step: Step) -> Tensor:
    """Rotary angle index per token [B,S].

    Without position_ids: the token's position.  With them: position_ids[b, s],
    except on a first prompt, where onnxruntime reads only position_ids[0, 0]
    and uses position_ids[0, 0] + s for every row.
    """
    if ins.position_ids is None:
        return step.position_BS
    position_ids_BS = flat_position_ids(tb, ins.position_ids, tb.size(ins.query, 0), step.S)
    if step.first_prompt is None:  # right-padded chunks: every row reads its own ids
        return position_ids_BS
    base_11 = first_position(tb, position_ids_BS)  # [B,S] -> [1,1]
    first_prompt_1S = tb.add(base_11, tb.arange(step.S))  # [1,1] + [S] -> [1,S]
    return tb.where(step.first_prompt, first_prompt_1S, position_ids_BS)  # -> [B,S]


def flat_position_ids(tb: TorchBuilder, position_ids: Tensor, B: Dim, S: Dim) -> Tensor:
    """position_ids [B,W,...] (W >= S) as [B,S]: onnxruntime reads entry b*S + s of the flattened tensor.

    The common [B,S] is itself; a wider one gives its first B*S entries in
    row-major order, not the first S columns of each row.
    """
    if position_ids.rank == 2 and isinstance(S, int) and position_ids.shape[1] == S:
        return position_ids
    flat_N = tb.flatten(position_ids, 0, position_ids.rank - 1)  # [B,W,...] -> [N]
    index_BS = tb.add(tb.unsqueeze(tb.mul_int_scalar(tb.arange(B), S), 1), tb.arange(S))  # b*S + s: [B,1] + [S] -> [B,S]
    index_BS = tb.clamp_int(index_BS, 0, tb.dim_sub(tb.size(flat_N, 0), 1))  # < B*S <= N once W >= S is checked
    return tb.gather_rows(flat_N, index_BS)  # [N] at [B,S] -> [B,S]


def first_position(tb: TorchBuilder, position_ids_BS: Tensor) -> Tensor:
    """position_ids[0:1, 0:1], in bounds even for an empty batch or sequence.

    A dynamic B or S may be 0 at run time: a zero row and column are appended
    first, so the slice reads the padding then (its value is never used: the
    result has no element).
    """
    first_BS = position_ids_BS
    for dim in (0, 1):
        if first_BS.shape[dim] is None:
            first_BS = tb.pad_dim_end(first_BS, dim, 1)  # [B,S] -> [B+1,S] -> [B+1,S+1]
    first_1S = tb.slice(first_BS, 0, 0, 1, in_bounds=True)  # -> [1,S]
    return tb.slice(first_1S, 1, 0, 1, in_bounds=True)  # -> [1,1]


@dataclass
class RotaryTables:
    """cos/sin rows at each token's position, broadcastable over heads: [B,1,S,R/2]."""

    cos_B1SR2: Tensor
    sin_B1SR2: Tensor
    interleaved: bool

    @staticmethod
    def gather(tb: TorchBuilder, ins: GqaInputs, position_BS: Tensor, interleaved: bool) -> "RotaryTables":
        def rows(cache_MR2):
            return tb.unsqueeze(tb.gather_rows(cache_MR2, position_BS), 1)  # [M,R/2] at [B,S] -> [B,S,R/2] -> [B,1,S,R/2]

        return RotaryTables(rows(ins.cos_cache), rows(ins.sin_cache), interleaved)

    def apply(self, tb: TorchBuilder, x_BNSDh: Tensor) -> Tensor:
        """Rotate the first R dims of [B,N,S,Dh]; dims [R, Dh) pass through (partial rotary).

        Computed in f32 and rounded once to the input dtype, as onnxruntime does
        for f16 (rounding each product in f16 shifts quantized caches by a step).
        """
        dtype = x_BNSDh.dtype
        x_BNSDh = tb.to_dtype(x_BNSDh, "f32")
        R2 = self.cos_B1SR2.shape[3]
        Dh = x_BNSDh.shape[3]
        c, s = tb.to_dtype(self.cos_B1SR2, "f32"), tb.to_dtype(self.sin_B1SR2, "f32")
        if self.interleaved:
            rotated = self._rotate_pairs(tb, x_BNSDh, c, s, R2)
        else:  # halves (i, i + R/2)
            x1, x2 = tb.slice(x_BNSDh, 3, 0, R2), tb.slice(x_BNSDh, 3, R2, 2 * R2)
            y1_BNSR2 = tb.sub(tb.mul(x1, c), tb.mul(x2, s))  # x1*cos - x2*sin
            y2_BNSR2 = tb.add(tb.mul(x2, c), tb.mul(x1, s))  # x2*cos + x1*sin
            rotated = tb.cat([y1_BNSR2, y2_BNSR2], 3)  # [B,N,S,R/2] x2 -> [B,N,S,R]
        if 2 * R2 != Dh:
            rotated = tb.cat([rotated, tb.slice(x_BNSDh, 3, 2 * R2, Dh)], 3)  # + [B,N,S,Dh-R] -> [B,N,S,Dh]
        return tb.to_dtype(rotated, dtype)

    @staticmethod
    def _rotate_pairs(tb: TorchBuilder, x_BNSDh: Tensor, c_B1SR2: Tensor, s_B1SR2: Tensor, R2: int) -> Tensor:
        """Interleaved pairs (x1, x2) = (2i, 2i+1) -> (x1*cos - x2*sin, x2*cos + x1*sin), as whole pairs.

        No stride-2 slices or concatenation (IREE fails to compile those with
        dynamic dims in f16): the pairs are a trailing dim of 2, swapped with
        a flip and signed by [-1, 1]; the same f32 products and sums.
        """
        pairs_BNSR22 = tb.unflatten(tb.slice(x_BNSDh, 3, 0, 2 * R2), 3, [R2, 2])  # [B,N,S,R] -> [B,N,S,R/2,2]
        sign_2 = tb.to_dtype(tb.add_scalar(tb.mul_int_scalar(tb.arange(2), 2), -1), "f32")  # [-1, 1]
        swapped_BNSR22 = tb.mul(tb.flip(pairs_BNSR22, 4), sign_2)  # (-x2, x1)
        c, s = tb.unsqueeze(c_B1SR2, 4), tb.unsqueeze(s_B1SR2, 4)  # [B,1,S,R/2] -> [B,1,S,R/2,1]
        rotated_BNSR22 = tb.add(tb.mul(pairs_BNSR22, c), tb.mul(swapped_BNSR22, s))
        return tb.flatten(rotated_BNSR22, 3, 4)  # -> [B,N,S,R]


# -- heads ------------------------------------------------------------------------


def split_heads(tb: TorchBuilder, ins: GqaInputs, attrs: GqaAttributes):
    """Q/K/V from separate or packed inputs, each as [B,heads,S,Dh]."""
    H, Hkv, Dh = attrs.num_heads, attrs.kv_num_heads, ins.head_size
    if ins.key is None:  # packed: [B,S,(H+2Hkv)*Dh] -> three slices on dim 2
        q_BSD = tb.slice(ins.query, 2, 0, H * Dh)
        k_BSD = tb.slice(ins.query, 2, H * Dh, (H + Hkv) * Dh)
        v_BSD = tb.slice(ins.query, 2, (H + Hkv) * Dh, (H + 2 * Hkv) * Dh)
    else:
        q_BSD, k_BSD, v_BSD = ins.query, ins.key, ins.value
    return to_heads(tb, q_BSD, H, Dh), to_heads(tb, k_BSD, Hkv, Dh), to_heads(tb, v_BSD, Hkv, Dh)


def to_heads(tb: TorchBuilder, x_BSD: Tensor, heads: int, Dh: int) -> Tensor:
    x_BSNDh = tb.unflatten(x_BSD, 2, [heads, Dh])  # [B,S,N*Dh] -> [B,S,N,Dh]
    return tb.transpose(x_BSNDh, 1, 2)  # [B,S,N,Dh] -> [B,N,S,Dh]


# -- run-time checks ------------------------------------------------------------
#
# Whatever seqlens_k, total_sequence_length, query_seqlens or position_ids
# hold, every data-dependent index is clamped into its buffer, so compiled code
# never reads or writes out of bounds; the inputs onnxruntime rejects also fail
# a run-time check with onnxruntime's rule in the message.


def check_total(tb: TorchBuilder, ins: GqaInputs, step: Step, window_cache: bool) -> None:
    """total_sequence_length covers every row's tokens (seqlens_k[b] + 1), is >= 1 and, but for
    a window cache, >= S: onnxruntime's rules (a first prompt's rows then never exceed S)."""
    covers = tb.le(tb.add_scalar(step.seqlens_B, 1), step.total)  # [B] <= [] (or [1])
    least = 1 if window_cache else step.S
    tb.runtime_check(
        tb.logical_and(covers, tb.ge_scalar(step.total, least)),
        f"GroupQueryAttention: total_sequence_length must be at least seqlens_k[b] + 1 for every row and at least "
        f"{'1' if window_cache else 'S (query dimension 1)'} (onnxruntime rejects it otherwise)",
    )


def checked_cache_rows(tb: TorchBuilder, step: Step, ins: GqaInputs, P: Dim, growth: Dim) -> Tensor:
    """Cache rows of the new tokens (their positions), clamped into [0, T), T = P + growth.

    total_sequence_length decides the cache mode: P + S grows it, <= P keeps
    its capacity.  When the declared types fix the growth, total must give
    that mode, or the present would not have onnxruntime's max(P, total) rows.
    """
    last = tb.dim_sub(tb.dim_add(P, growth), 1)
    tb.runtime_check(
        tb.in_range(step.seqlens_B, 0, last),
        "GroupQueryAttention: seqlens_k[b] must lie in [0, present length) (onnxruntime rejects it otherwise)",
    )
    tb.runtime_check(
        tb.in_range(step.position_BS, 0, last),
        "GroupQueryAttention: the new tokens must fit the cache: 0 <= seqlens_k[b] + 1 - S (or - query_seqlens[b]) "
        "and seqlens_k[b] + 1 - S + S <= present length",
    )
    growing, fixed = tb.eq_scalar(step.total, tb.dim_add(P, step.S)), tb.le_scalar(step.total, P)
    if isinstance(growth, int) and growth > 0:  # present declared with P + S rows
        total_ok, rule = growing, "equal past length + S: the present is declared with past length + S rows (a growing cache)"
    elif growth == 0 and isinstance(P, int):  # present declared with P rows
        total_ok, rule = fixed, "be at most the past length: the present is declared with the past's rows (fixed capacity)"
    elif ins.query_seqlens is not None:  # an upper bound: present has max(P, total) rows
        total_ok, rule = tb.le_scalar(step.total, tb.dim_add(P, step.S)), "be at most past length + S (with query_seqlens)"
    else:
        total_ok, rule = tb.logical_or(growing, fixed), "equal past length + S (growing cache) or be at most the past length (fixed capacity)"
    tb.runtime_check(tb.logical_and(total_ok, tb.ge_scalar(step.total, 1)), f"GroupQueryAttention: total_sequence_length must {rule}, and be >= 1")
    if ins.query_seqlens is not None:
        qlens_B = tb.to_dtype(ins.query_seqlens, "si64")
        tb.runtime_check(
            tb.logical_and(tb.in_range(qlens_B, 0, step.S), tb.le(qlens_B, tb.add_scalar(step.seqlens_B, 1))),
            "GroupQueryAttention: query_seqlens[b] must lie in [0, min(S, seqlens_k[b] + 1)]",
        )
    return tb.clamp_int(step.position_BS, 0, last)


def check_window_lengths(tb: TorchBuilder, step: Step, past_BHkvCDc: Tensor, W: int, query_seqlens: bool) -> None:
    """Lengths a window-sized buffer needs, as onnxruntime checks them: also on a first prompt
    (whose past length is 0 whatever seqlens_k says), seqlens_k[b] + 1 >= S without query_seqlens."""
    enough_B = tb.ge_scalar(step.past_len_B, 0)
    if not query_seqlens:
        enough_B = tb.logical_and(enough_B, tb.ge_scalar(step.seqlens_B, tb.dim_sub(step.S, 1)))
    tb.runtime_check(
        tb.logical_and(tb.ge_scalar(step.seqlens_B, 0), enough_B),
        "GroupQueryAttention: seqlens_k[b] must be >= 0 and seqlens_k[b] + 1 >= the step's new tokens",
    )
    if past_BHkvCDc.shape[2] is None:  # a static capacity below W is refused at compile time
        tb.runtime_check(
            tb.ge_scalar(tb.dim_tensor(tb.size(past_BHkvCDc, 2)), W),
            "GroupQueryAttention: sliding_window_cache: the cache capacity (past_key dimension 2) must be at least "
            "local_window_size (onnxruntime rejects it otherwise)",
        )


def check_rotary_rows(tb: TorchBuilder, ins: GqaInputs, step: Step) -> None:
    """cos_cache rows >= total_sequence_length: onnxruntime's rule whenever the caches are given."""
    tb.runtime_check(
        tb.le_scalar(step.total, tb.size(ins.cos_cache, 0)),
        "GroupQueryAttention: cos_cache dimension 0 must not be less than total_sequence_length (onnxruntime rejects it otherwise)",
    )


def checked_rotary_positions(tb: TorchBuilder, ins: GqaInputs, step: Step) -> Tensor:
    """Rotary rows, clamped into the cos/sin caches [0, M)."""
    positions_BS = rotary_positions(tb, ins, step)
    last = tb.dim_sub(tb.size(ins.cos_cache, 0), 1)
    ok_BS = tb.in_range(positions_BS, 0, last)
    if ins.query_seqlens is not None:  # onnxruntime never reads a padding row's position (-1 is a common pad)
        ok_BS = tb.logical_or(ok_BS, tb.logical_not(valid_query_rows(tb, step)))
    tb.runtime_check(
        ok_BS,
        "GroupQueryAttention: rotary positions (position_ids, or the tokens' positions) must lie in [0, cos_cache rows)",
    )
    return tb.clamp_int(positions_BS, 0, last)


# -- cache ------------------------------------------------------------------------


def past_caches(tb: TorchBuilder, ins: GqaInputs, attrs: GqaAttributes):
    """past_key/past_value, or empty [B,Hkv,0,Dh] caches when absent."""
    if ins.past_key is not None:
        return ins.past_key, ins.past_value
    empty_B0D = tb.slice(ins.query, 1, 0, 0, in_bounds=True)  # [B,S,D] -> [B,0,D]
    empty_B10Dh = tb.slice(tb.unsqueeze(empty_B0D, 1), 3, 0, ins.head_size)  # -> [B,1,0,D] -> [B,1,0,Dh] (D >= Dh)
    empty = tb.expand(empty_B10Dh, [-1, attrs.kv_num_heads, 0, ins.head_size])  # -> [B,Hkv,0,Dh]: only the 1 broadcasts
    return empty, empty


def cache_growth(tb: TorchBuilder, b: OpBinder, step: Step, past: Tensor) -> Dim:
    """Rows the cache gains: max(0, total_sequence_length - P) (onnxruntime's present has max(P, total) rows).

    Static when the op's declared present type and P are: S for a growing
    cache, 0 for a fixed-capacity buffer.  Otherwise read from
    total_sequence_length at run time, clamped to [0, S] so no value can make
    the buffer grow past what a valid input needs.
    """
    P = past.shape[2]
    declared = _declared_present_rows(b)
    if declared is not None and P is not None:
        growth = declared - P
        if growth == 0:
            return 0
        if growth < 0 or (isinstance(step.S, int) and growth != step.S):
            S = step.S if isinstance(step.S, int) else "S"
            raise Refusal(
                f"is declared with {declared} rows, but onnxruntime's present has max(past length, total_sequence_length) rows: "
                f"{P} (fixed capacity) or {P} + {S} (a growing cache) with a past of {P} rows",
                "output 1 'present_key'",
            )
        if not isinstance(step.S, int):
            tb.runtime_assert(
                tb.dim_eq(step.S, growth),
                f"GroupQueryAttention: the present is declared with {declared} rows, past length {P} + S: S (query dimension 1) must be {growth}",
            )
        return growth
    total = tb.item(step.total)
    return tb.dim_max(tb.dim_min(tb.dim_sub(total, tb.size(past, 2)), step.S), 0)  # in [0, S] whatever total holds


def _declared_present_rows(b: OpBinder) -> Optional[int]:
    for i in (1, 2):
        if b.num_results > i:
            parsed = parse_vtensor_type(b.result_type_text(i))
            if parsed and len(parsed[0]) == 4 and parsed[0][2] is not None:
                return parsed[0][2]
    return None


def cache_index(tb: TorchBuilder, position_BS: Tensor, Hkv: int, Dc: int) -> Tensor:
    """Scatter index for the new K/V rows: position[b,s] broadcast to [B,Hkv,S,Dc] (Dc: stored row width)."""
    index_B1S1 = tb.unsqueeze(tb.unsqueeze(position_BS, 1), 3)  # [B,S] -> [B,1,S] -> [B,1,S,1]
    return tb.expand(index_B1S1, [-1, Hkv, -1, Dc])  # -> [B,Hkv,S,Dc]


def write_cache(tb: TorchBuilder, past_BHkvPDh: Tensor, new_BHkvSDh: Tensor, index_BHkvSDh: Tensor, growth: Dim) -> Tensor:
    """Grow the cache by ``growth`` zero rows, then write new token s of row b at position[b,s].

    Rows before ``past_len[b]`` keep the past; rows after the new ones are
    unspecified, as in onnxruntime.
    """
    if growth == 0:
        grown_BHkvTDh = past_BHkvPDh
    elif isinstance(growth, int) and None not in past_BHkvPDh.shape and past_BHkvPDh.shape[2] > 0:
        grown_BHkvTDh = grow_rows(tb, past_BHkvPDh, growth)  # [B,Hkv,P,Dh] -> [B,Hkv,T,Dh]
    else:  # an empty past is all new rows; IREE fails on a concatenation with dynamic dims
        grown_BHkvTDh = tb.pad_dim_end(past_BHkvPDh, 2, growth)  # [B,Hkv,P,Dh] -> [B,Hkv,T,Dh]
    return tb.scatter_src(grown_BHkvTDh, 2, index_BHkvSDh, new_BHkvSDh)  # rows position[b,s] <- new


def used_rows(tb: TorchBuilder, step: Step, T: Dim) -> Dim:
    """R = max_b(seqlens_k[b]) + 1 clamped to [1, T]: the fixed-capacity rows attention can see.

    onnxruntime's kernel reads only rows [0, seqlens_k[b]]; a shared buffer's
    capacity (max_length) is usually far larger, and the rows past the valid
    ones may hold anything (a NaN there would reach P.V as 0 * NaN).
    """
    last = tb.item(tb.amax(step.seqlens_B, 0))  # [B] -> [1] -> int
    return tb.dim_max(tb.dim_min(tb.dim_add(last, 1), T), 1)


def read_rows(tb: TorchBuilder, step: Step, cache: CacheStep, attrs: GqaAttributes):
    """i1 [B,1,T] twice: the key rows and the value rows onnxruntime reads for batch row b.

    Both are positions <= seqlens_k[b].  In a window cache (W =
    local_window_size) the keys are also >= the lowest first key of the
    step's windows, min_s(hi) + 1 - W, and the values start where
    onnxruntime's P.V does (``WindowPlan.values_read_from``).  Ours span all T
    rows with probability 0 past them, and 0 * NaN is NaN: a NaN in a row b
    never reads (a shorter row of a ragged batch, a shared buffer's unused
    rows, a row the window left behind) must not reach b's output.
    ``cache.key_pos``: [T], or per batch row [B,1,T] (window cache).
    """
    key_pos = cache.key_pos
    last_B11 = tb.unsqueeze(tb.unsqueeze(step.seqlens_B, 1), 2)  # [B] -> [B,1,1]
    read_B1T = tb.le(key_pos, last_B11)  # [T] or [B,1,T] <= [B,1,1] -> [B,1,T]
    if cache.window is None:  # onnxruntime's P.V over a growing or fixed cache spans every row up to seqlens_k
        return read_B1T, read_B1T
    hi_BS = tb.minimum(step.position_BS, tb.unsqueeze(step.seqlens_B, 1))  # [B,S]
    window_first_B1 = tb.add_scalar(tb.amin(hi_BS, 1), 1 - attrs.local_window_size)  # [B,S] -> [B,1]
    values_first_B1 = cache.window.values_read_from(tb, window_first_B1)  # [B,1]
    keys_B1T = tb.logical_and(read_B1T, tb.ge(key_pos, tb.unsqueeze(window_first_B1, 2)))  # vs [B,1,1]
    values_B1T = tb.logical_and(read_B1T, tb.ge(key_pos, tb.unsqueeze(values_first_B1, 2)))
    return keys_B1T, values_B1T


def reads_a_prefix(attrs: GqaAttributes) -> bool:
    """Whether every batch row reads a prefix [0, n) of the rows (all but a window cache)."""
    return not attrs.window_cache


def zero_unread_rows(tb: TorchBuilder, read_B1T: Tensor, x_BHkvTD: Tensor) -> Tensor:
    """``x`` with the rows batch row b does not read set to 0 (a select over the whole tensor)."""
    return tb.where_else_scalar(tb.unsqueeze(read_B1T, 3), x_BHkvTD, 0.0)  # [B,1,T,1] ? x : 0


def probs_times_values(tb: TorchBuilder, probs_BHkvGST: Tensor, v_BHkvTDh: Tensor, read_B1T: Tensor, prefix: bool = True) -> Tensor:
    """P.V with the value rows a batch row does not read zeroed, at the cost of those rows only.

    Rows [0, m), m the fewest rows any batch row reads, are read by every
    row: a plain matmul.  Only rows [m, T) go through the select; with batch
    1 (or aligned rows) that tail is empty.  No control flow: IREE's
    multi-threaded runtime fails on an ``scf.if`` here.
    """
    T = tb.size(v_BHkvTDh, 2)
    if not prefix:  # a local window: the rows read are a range, zeroed outside it over all rows
        return tb.matmul(probs_BHkvGST, zero_unread_rows(tb, read_B1T, v_BHkvTDh))
    if T == 1:  # row 0 is read by every batch row
        return tb.matmul(probs_BHkvGST, v_BHkvTDh)
    counts_B11 = tb.sum_dim(tb.to_dtype(read_B1T, "si64"), 2)  # [B,1,T] -> [B,1,1]
    m = tb.dim_min(tb.dim_max(tb.item(tb.amin(counts_B11, 0)), 0), T)  # -> [1,1,1] -> int in [0, T]
    head = tb.matmul(tb.slice(probs_BHkvGST, 3, 0, m), tb.slice(v_BHkvTDh, 2, 0, m))  # [..,GS,m] x [..,m,Dh]
    tail_v = zero_unread_rows(tb, tb.slice(read_B1T, 2, m, T), tb.slice(v_BHkvTDh, 2, m, T))  # [B,Hkv,T-m,Dh]
    tail = tb.matmul(tb.slice(probs_BHkvGST, 3, m, T), tail_v)  # [..,GS,T-m] x [..,T-m,Dh]
    return tb.add(head, tail)  # -> [B,Hkv,G*S,Dh]


def grow_rows(tb: TorchBuilder, past_BHkvPDh: Tensor, growth: Dim) -> Tensor:
    """past followed by ``growth`` zero rows, as a concatenation: backends then fill the new rows only.

    (``constant_pad_nd`` of the whole cache is lowered by IREE to a fill of
    the whole present buffer before the past is copied in: twice the writes.)
    """
    empty_BHkv0Dh = tb.slice(past_BHkvPDh, 2, 0, 0, in_bounds=True)  # [B,Hkv,P,Dh] -> [B,Hkv,0,Dh]
    zeros_BHkvGDh = tb.pad_dim_end(empty_BHkv0Dh, 2, growth)  # -> [B,Hkv,G,Dh]
    return tb.cat([past_BHkvPDh, zeros_BHkvGDh], 2)  # -> [B,Hkv,P+G,Dh]


# -- masking ----------------------------------------------------------------------


def visible_keys(tb: TorchBuilder, step: Step, attrs: GqaAttributes, key_pos_T: Tensor) -> Tensor:
    """i1 [B,S,T]: which cache rows each query attends (see the module docstring).

    ``key_pos_T`` is each row's absolute position: [T] for a cache indexed by
    position, [B,1,T] for the staged rows of a window cache.
    """
    seqlens_B1 = tb.unsqueeze(step.seqlens_B, 1)  # [B] -> [B,1]
    if not attrs.causal:  # every valid key, for every query: t <= seqlens_k[b]
        visible_B1T = tb.le(key_pos_T, tb.unsqueeze(seqlens_B1, 2))  # [T] vs [B,1,1] -> [B,1,T]
        return tb.expand(visible_B1T, [-1, step.S, -1])  # -> [B,S,T]
    last_key_BS = tb.minimum(step.position_BS, seqlens_B1)  # hi = min(i, seqlens_k[b]): [B,S]
    last_key_BS1 = tb.unsqueeze(last_key_BS, 2)  # [B,S,1]
    visible_BST = tb.le(key_pos_T, last_key_BS1)  # t <= hi: [T] vs [B,S,1] -> [B,S,T]
    if attrs.local_window_size >= 0:
        first_key_BS1 = tb.add_scalar(last_key_BS1, 1 - attrs.local_window_size)  # hi + 1 - W
        visible_BST = tb.logical_and(visible_BST, tb.ge(key_pos_T, first_key_BS1))
    return visible_BST


def checked_bias(tb: TorchBuilder, ins: GqaInputs, step: Step) -> Optional[Tensor]:
    """attention_bias, with its last dim checked against total_sequence_length at run time."""
    bias = ins.attention_bias
    if bias is not None:
        tb.runtime_check(
            tb.eq_scalar(step.total, tb.size(bias, 3)),
            "GroupQueryAttention: attention_bias's last dimension must equal total_sequence_length",
        )
    return bias


def padded_bias(tb: TorchBuilder, ins: GqaInputs, step: Step, present_BHkvTDh: Tensor) -> Optional[Tensor]:
    """attention_bias [B|1,H|1,S,Tt] padded with zeros to the cache's T key columns."""
    bias = checked_bias(tb, ins, step)
    if bias is None:
        return None
    T, Tt = present_BHkvTDh.shape[2], bias.shape[3]
    if T is not None and Tt is not None:
        extra = max(T - Tt, 0)
    else:  # never negative, whatever the run-time sizes
        extra = tb.dim_max(tb.dim_sub(tb.size(present_BHkvTDh, 2), tb.size(bias, 3)), 0)
    return bias if extra == 0 else tb.pad_dim_end(bias, 3, extra)


def window_bias(tb: TorchBuilder, ins: GqaInputs, step: Step, key_abs_B1X: Tensor) -> Optional[Tensor]:
    """attention_bias columns for a window cache's staged rows: [B|1,H|1,S,Tt] -> [B,H|1,S,X].

    Its last dim is indexed by absolute key position (onnxruntime's schema);
    positions past it are never visible, so the index is clamped in bounds.
    """
    bias = checked_bias(tb, ins, step)
    if bias is None:
        return None
    B = tb.size(ins.query, 0)
    bias_BHSTt = tb.expand(bias, [B, -1, -1, -1])  # a batch dim of 1 broadcasts
    column_B11X = tb.clamp_int(tb.unsqueeze(key_abs_B1X, 1), 0, tb.dim_sub(tb.size(bias, 3), 1))
    column_BHSX = tb.expand(column_B11X, [-1, bias.shape[1], step.S, -1])
    return tb.gather(bias_BHSTt, 3, column_BHSX)


# -- attention --------------------------------------------------------------------


def needs_scores(attrs: GqaAttributes, ins: GqaInputs) -> bool:
    """True when SDPA's softmax(QK^T*scale + mask) cannot express the op."""
    return (
        attrs.softcap > 0
        or attrs.smooth_softmax
        or ins.head_sink is not None
        or attrs.qk_output != 0
        or attrs.local_window_size == 0  # no visible key: onnxruntime outputs 0, SDPA NaN
    )


def effective_scale(attrs: GqaAttributes, Dh: int) -> float:
    return attrs.scale if attrs.scale != 0.0 else 1.0 / math.sqrt(Dh)


def sdpa_attention(tb, attrs, ins, query_BHSDh, key_BHkvTDh, value_BHkvTDh, visible_BST, bias) -> Tensor:
    """``scaled_dot_product_attention`` with an additive 0/-inf (+ bias) mask and GQA.

    SDPA is emitted with its default scale 1/sqrt(Dh) (an explicit scale is
    dropped by torch-mlir's linalg lowering); another scale is folded into Q.
    """
    mask_B1ST = tb.unsqueeze(tb.where_scalars(visible_BST, 0.0, NEG_INF, query_BHSDh.dtype), 1)  # [B,S,T] -> [B,1,S,T]
    if bias is not None:  # a select, not a sum: a NaN or +inf bias in a masked column must stay masked
        mask_B1ST = tb.where_else_scalar(tb.unsqueeze(visible_BST, 1), bias, NEG_INF)  # [B,1,S,T] ? [B|1,H|1,S,T] : -inf
    scale, Dh, dtype = effective_scale(attrs, ins.head_size), ins.head_size, query_BHSDh.dtype
    # f32 as onnxruntime computes f16 (torch-mlir's f16 SDPA loses rows with large scores)
    q, k, v, mask = (tb.to_dtype(t, "f32") for t in (query_BHSDh, key_BHkvTDh, value_BHkvTDh, mask_B1ST))
    if not math.isclose(scale, 1.0 / math.sqrt(Dh), rel_tol=1e-7, abs_tol=0.0):
        q = tb.mul_scalar(q, scale * math.sqrt(Dh))
    attn_BHSDh = unless_empty(tb, q, k, lambda inner: inner.sdpa(q, k, v, mask, enable_gqa=True))
    return tb.to_dtype(attn_BHSDh, dtype)


def unless_empty(tb: TorchBuilder, query_BHSDh: Tensor, key_BHkvTDh: Tensor, attend) -> Tensor:
    """``attend(tb)``, skipped for zeros [B,H,S,Dh] when a dynamic B, S or T is 0 at run time.

    torch-mlir's loop lowering of SDPA (tm_tensor.attention) reads the first
    score before looping over them: out of bounds of an empty score buffer.
    """
    sizes = (tb.size(query_BHSDh, 0), tb.size(query_BHSDh, 2), tb.size(key_BHkvTDh, 2))
    dynamic = [d for d in sizes if not isinstance(d, int)]  # static sizes are >= 1 (empty ones are refused)
    if not dynamic:
        return attend(tb)
    elements = dynamic[0]
    for d in dynamic[1:]:
        elements = tb.dim_mul(elements, d)  # B*S*T (its dynamic factors)
    empty = tb.dim_eq(elements, 0)
    return tb.if_else(empty, query_BHSDh.shape, query_BHSDh.dtype, lambda inner: inner.full_like(query_BHSDh, 0.0), attend)


def decomposed_attention(tb, attrs, ins, step, query_BHSDh, key_BHkvTDh, value_BHkvTDh, visible_BST, bias, read_B1T, factors=(None, None)):
    """Scores, softcap, bias, mask, (smooth) softmax and P.V on grouped queries, in f32.

    ``factors``: f32 [1] scales multiplying Q.K^T and P.V (a PER_TENSOR cache's,
    whose K or V are then its codes; see CacheCodec.factor), or None.

    Query heads are regrouped by their KV head, [B,H,S,Dh] -> [B,Hkv,G*S,Dh],
    so K/V are read once per KV head and never repeated.  Returns the
    attention [B,H,S,Dh] in the input dtype and, with qk_output, output_qk
    [B,H,S,Tt].
    """
    dtype, H, Hkv = query_BHSDh.dtype, attrs.num_heads, attrs.kv_num_heads
    G = H // Hkv
    q = tb.to_dtype(query_BHSDh, "f32")
    k, v = tb.to_dtype(key_BHkvTDh, "f32"), tb.to_dtype(value_BHkvTDh, "f32")
    q_BHkvGSDh = tb.flatten(tb.unflatten(q, 1, [Hkv, G]), 2, 3)  # [B,H,S,Dh] -> [B,Hkv,G,S,Dh] -> [B,Hkv,G*S,Dh]
    scores_BHkvGST = tb.matmul(q_BHkvGSDh, tb.transpose(k, 2, 3))  # [B,Hkv,G*S,Dh] x [B,Hkv,Dh,T] -> [B,Hkv,G*S,T]
    if factors[0] is not None:
        scores_BHkvGST = tb.mul(scores_BHkvGST, factors[0])  # x k_scale [1]
    scores_BHST = tb.flatten(tb.unflatten(scores_BHkvGST, 2, [G, _static_or_neg1(step.S)]), 1, 2)  # -> [B,Hkv,G,S,T] -> [B,H,S,T]
    scores_BHST = tb.mul_scalar(scores_BHST, effective_scale(attrs, ins.head_size))
    if attrs.softcap > 0:
        scores_BHST = soft_cap(tb, scores_BHST, attrs.softcap)
    if bias is not None:
        scores_BHST = tb.add(scores_BHST, tb.to_dtype(bias, "f32"))
    visible_B1ST = tb.unsqueeze(visible_BST, 1)  # [B,S,T] -> [B,1,S,T]
    probs_BHST = masked_softmax(tb, attrs, ins, scores_BHST, visible_B1ST)
    probs_BHkvGST = tb.flatten(tb.unflatten(probs_BHST, 1, [Hkv, G]), 2, 3)  # [B,H,S,T] -> [B,Hkv,G*S,T]
    attn_BHkvGSDh = probs_times_values(tb, probs_BHkvGST, v, read_B1T, reads_a_prefix(attrs))  # [B,Hkv,G*S,T] x [B,Hkv,T,Dh] -> [B,Hkv,G*S,Dh]
    if factors[1] is not None:
        attn_BHkvGSDh = tb.mul(attn_BHkvGSDh, factors[1])  # x v_scale [1]
    attn_BHSDh = tb.flatten(tb.unflatten(attn_BHkvGSDh, 2, [G, _static_or_neg1(step.S)]), 1, 2)  # -> [B,H,S,Dh]
    qk = None
    if attrs.qk_output:
        raw = scores_BHST if attrs.qk_output == 1 else probs_BHST  # masked columns hold 0, as onnxruntime's (even in a NaN row)
        raw = tb.where_else_scalar(qk_written(tb, step, ins, visible_B1ST), raw, 0.0)
        qk = tb.to_dtype(qk_columns(tb, raw, step, ins), dtype)
    return tb.to_dtype(attn_BHSDh, dtype), qk


_TANH_SERIES_BELOW = 0.05  # |y| where the odd series to y^7 is exact to f32 (next term ~2e-14 relative)


def soft_cap(tb: TorchBuilder, scores: Tensor, cap: float) -> Tensor:
    """``cap * tanh(x / cap)``, with tanh accurate to f32 for small arguments.

    The refbackend's tanh loses the relative precision of small arguments
    (tanh(1e-6) comes out 1.013e-6, tanh(1e-30) 0), which a large cap then
    multiplies back into the scores: below |y| = 0.05 tanh's odd Taylor
    series y - y^3/3 + 2y^5/15 - 17y^7/315 is used instead.
    """
    y = tb.mul_scalar(scores, 1.0 / cap)
    y2 = tb.mul(y, y)
    inner = tb.add_float(tb.mul_scalar(y2, -17.0 / 315.0), 2.0 / 15.0)  # 2/15 - 17y^2/315
    inner = tb.add_float(tb.mul(y2, inner), -1.0 / 3.0)  # -1/3 + y^2 (...)
    series = tb.mul(y, tb.add_float(tb.mul(y2, inner), 1.0))  # y (1 + y^2 (...))
    small = tb.lt_float(tb.abs(y), _TANH_SERIES_BELOW)
    return tb.mul_scalar(tb.where(small, series, tb.tanh(y)), cap)


def masked_softmax(tb, attrs, ins, scores_BHST, visible_B1ST) -> Tensor:
    """Softmax over the visible keys, in f32.

    With a sink logit z (head_sink[h], or 0 for smooth_softmax) the
    denominator gains e^(z - m), m = max(max_t x_t, z).  A row with no visible
    key gives zeros (onnxruntime's W = 0), not NaN.
    """
    masked_BHST = tb.where_else_scalar(visible_B1ST, scores_BHST, NEG_INF)
    max_BHS1 = tb.amax(masked_BHST, 3)
    sink_1H11 = None
    if ins.head_sink is not None:
        sink_H = tb.to_dtype(ins.head_sink, "f32")
        sink_1H11 = tb.unsqueeze(tb.unsqueeze(tb.unsqueeze(sink_H, 0), 2), 3)  # [H] -> [1,H,1,1]
        max_BHS1 = tb.maximum(max_BHS1, sink_1H11)
    elif attrs.smooth_softmax:
        max_BHS1 = tb.clamp_min(max_BHS1, 0.0)  # sink logit 0
    max_BHS1 = tb.where_scalar_else(tb.eq_scalar(max_BHS1, NEG_INF), 0.0, max_BHS1)  # empty rows: exp(-inf - 0) = 0
    exp_BHST = tb.exp(tb.sub(masked_BHST, max_BHS1))
    denom_BHS1 = tb.sum_dim(exp_BHST, 3)
    if sink_1H11 is not None:
        denom_BHS1 = tb.add(denom_BHS1, tb.exp(tb.sub(sink_1H11, max_BHS1)))
    elif attrs.smooth_softmax:
        denom_BHS1 = tb.add(denom_BHS1, tb.exp(tb.neg(max_BHS1)))
    denom_BHS1 = tb.where_scalar_else(tb.eq_scalar(denom_BHS1, 0.0), 1.0, denom_BHS1)
    return tb.div(exp_BHST, denom_BHS1)


def qk_written(tb: TorchBuilder, step: Step, ins: GqaInputs, visible_B1ST: Tensor) -> Tensor:
    """i1 [B,1,S,T]: the output_qk entries onnxruntime fills; the others hold 0.

    The visible keys of each query, and with query_seqlens only its valid rows
    s < query_seqlens[b] (a padding row has i = past_len[b] + s > seqlens_k[b]).
    """
    if ins.query_seqlens is None:
        return visible_B1ST
    valid_B1S1 = tb.unsqueeze(tb.unsqueeze(valid_query_rows(tb, step), 1), 3)  # [B,S] -> [B,1,S,1]
    return tb.logical_and(visible_B1ST, valid_B1S1)


def valid_query_rows(tb: TorchBuilder, step: Step) -> Tensor:
    """i1 [B,S]: the rows s < query_seqlens[b] of a right-padded chunk, i = past_len[b] + s <= seqlens_k[b]."""
    return tb.le(step.position_BS, tb.unsqueeze(step.seqlens_B, 1))


def qk_columns(tb, qk_BHST: Tensor, step: Step, ins: GqaInputs) -> Tensor:
    """output_qk keeps the first total_sequence_length key columns: [B,H,S,T] -> [B,H,S,Tt]."""
    total = tb.item(step.total)
    return tb.slice(qk_BHST, 3, 0, total)


def _static_or_neg1(d: Dim) -> int:
    return d if isinstance(d, int) else -1
