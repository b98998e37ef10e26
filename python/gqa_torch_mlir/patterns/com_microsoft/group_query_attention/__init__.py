"""Lowering of onnxruntime's ``com.microsoft.GroupQueryAttention`` to torch ops.

The driver below reads top-down; each step lives in a module of its own:
  support.py          the op's inputs and attributes: what is lowered, static checks, refusals
  shapes.py           one batch/sequence size for all inputs; head dims (run-time checked); B or S typed 1
  positions.py        past lengths, token positions, rotary rows (the rotation: patterns/common/rotary.py),
                      total_sequence_length on the host where the graph computes it from a shape
  heads.py            Q/K/V into heads
  checks.py           run-time checks of the lengths onnxruntime checks
  kv_cache.py         growing cache and fixed-capacity buffer (the cache update)
  window_cache.py     window-sized buffer (sliding_window_cache=1)
  quantized_cache.py  int8 / packed int4 caches
  masks.py            visible keys, read rows, attention_bias
  query_blocks.py     a long causal prefill attended in blocks of query rows
  attention.py        SDPA or the decomposed form

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
A window-sized buffer (sliding_window_cache=1) evicts: see window_cache.py.
Quantized caches store int8 / packed int4 rows: see quantized_cache.py.

Attention is ``scaled_dot_product_attention`` when the op's scores need no
more than an additive mask; softcap, smooth softmax / head_sink, output_qk and
an empty window (W = 0) use a decomposed form on grouped queries (K/V are
never repeated), in f32 as onnxruntime computes f16 inputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import List, Optional

from ....binder import OpBinder
from ....builder import Dim, Tensor, TorchBuilder
from ....registry import onnx_op
from ....kernels.decode_attention import supported
from .attention import chunked_attention, decomposed_attention, needs_scores, sdpa_attention, takes_fused
from .checks import check_rotary_rows, check_total, checked_rotary_positions
from .heads import split_heads
from .inputs import CacheStep, GqaInputs
from .kv_cache import kv_cache_step
from .masks import padded_bias, read_rows, visible_keys, window_bias, zero_unread_rows
from .query_blocks import blocked_attention, can_block, can_loop, can_take_one_row_apart, looped_attention, one_row_apart
from .positions import host_total, rotary_tables, step_positions
from .quantized_cache import CacheCodec
from .shapes import unify_dims, with_batch_of_one, with_seq_of_one
from .support import OUTPUTS, read_attributes, validate_inputs
from .window_cache import window_cache_step


@onnx_op("GroupQueryAttention", domain="com.microsoft", since=1)
def lower_group_query_attention(b: OpBinder, tb: TorchBuilder) -> List:
    attrs = read_attributes(b)  # support.py: every attribute read, refused by name when not lowered
    ins = unify_dims(tb, GqaInputs(**validate_inputs(b, attrs)), attrs)  # support.py, shapes.py
    general = batch_of_one_apart if b.options.device == "cpu" and ins.query.shape[0] is None else step_results  # B == 1 apart
    return outputs(tb, b, *one_row_decode_apart(tb, b, attrs, ins, general))


def step_results(tb, b, attrs, ins: GqaInputs) -> List[Optional[Tensor]]:
    """[output [B,S,H*Dh], present_key, present_value, output_qk [B,H,S,Tt] or None]."""
    step = step_positions(tb, ins)  # positions.py: past lengths and token positions
    check_total(tb, ins, step, attrs.window_cache)  # checks.py
    query_BHSDh, key_BHkvSDh, value_BHkvSDh = split_heads(tb, ins, attrs)  # heads.py: [B,S,N*Dh] -> [B,N,S,Dh]
    query_BHSDh, key_BHkvSDh = rotate(tb, attrs, ins, step, query_BHSDh, key_BHkvSDh)
    codec = cache_codec(attrs, ins)  # quantized_cache.py (a float cache: the identity)
    cache = update_cache(tb, b, attrs, ins, step, codec, key_BHkvSDh, value_BHkvSDh)  # kv_cache.py, window_cache.py
    attn_BHSDh, qk_BHSTt = attend(tb, b, attrs, ins, step, codec, cache, query_BHSDh)  # masks.py, attention.py
    output_BSD = tb.flatten(tb.transpose(attn_BHSDh, 1, 2), 2, 3)  # [B,H,S,Dh] -> [B,S,H,Dh] -> [B,S,H*Dh]
    return [output_BSD, *cache.presents(), qk_BHSTt]  # the fused kernel's presents where it made the write


def batch_of_one_apart(tb, b, attrs, ins: GqaInputs) -> List[Optional[Tensor]]:
    """:func:`step_results` behind a branch on B == 1, where every size that follows from the batch
    is static (shapes.with_batch_of_one): the CPU forms of one batch row apply (kv_cache.py's block
    copy, the rows read to the last one).  IREE 3.13's code with the batch dynamic ran a 256-token
    prefill 1.4x slower (its cache write alone 1.3 ms: the scatter's index tensors; benchmarks/README.md,
    "CPU, round 8").  The output leaves each branch in its final layout: transposed after the If, it
    was two dispatches and two more queue submissions a decode step ("CPU, round 9")."""
    one = lambda inner: step_results(inner, b, attrs, with_batch_of_one(inner, ins))  # noqa: E731
    return taken_apart(tb, tb.dim_eq(tb.size(ins.query, 0), 1), one, lambda inner: step_results(inner, b, attrs, ins))


def one_row_decode_apart(tb, b, attrs, ins: GqaInputs, general) -> List[Optional[Tensor]]:
    """``general(tb, b, attrs, ins)``, with the decode step of one batch row behind a branch of its
    own where only run-time B, S and cache lengths keep its sizes from being known, and
    total_sequence_length is known on the host (positions.host_total: the builder's attention-mask
    width).  On B == 1 and S == 1 the cache's growth is then known on the host too: the fused kernel
    puts the new row into the cache (the buffer itself, or the grown copy of a growing cache) at
    lengths it reads on the device (fused_decode.py), so the step reads nothing back mid-step (one
    wait, at the end); the other branch reads them mid-step (benchmarks/README.md, "CPU, round 20")."""
    total = host_total(tb, b) if _may_decode_apart(b, attrs, ins) else None
    if total is None:
        return general(tb, b, attrs, ins)
    B, S = tb.size(ins.query, 0), tb.size(ins.query, 1)
    if (B, S) == (1, 1):  # a decode step's sizes: no branch
        return step_results(tb, b, attrs, replace(ins, total_on_host=total))
    holds_in_branch = tb.dim_eq(S if isinstance(B, int) else B, 1)  # true there, on a dynamic dim: not folded

    def decode(inner):
        one_row = with_seq_of_one(inner, with_batch_of_one(inner, ins))
        key, value = _as_join_results(inner, holds_in_branch, one_row.past_key, one_row.past_value)
        results = step_results(inner, b, attrs, replace(one_row, past_key=key, past_value=value, total_on_host=total))
        return [_at_run_time_rows(inner, results[0], B, S)] + results[1:]

    one_row_one_token = tb.dim_le(tb.dim_add(_distance_to_1(tb, B), _distance_to_1(tb, S)), 0)
    return taken_apart(tb, one_row_one_token, decode, lambda inner: general(inner, b, attrs, ins))


def _at_run_time_rows(tb, output_11D: Tensor, B: Dim, S: Dim) -> Tensor:
    """The decode branch's output [1,1,D] viewed as [B,S,D] at the run-time B and S (1 there).
    Yielded at the constants 1, IREE 3.13's integer-range folding sized what the join's consumers
    keep per row (the 8-lane partial sums of an RMSNorm of the output alone: 32 bytes a row) as if
    B*S were at most 2, whatever the other branches yield: a prompt's rows past the second came
    out wrong and the heap overran (benchmarks/README.md, "CPU, round 21")."""
    return tb.tensor_op("torch.aten.view", [output_11D.value, tb.int_list([B, S, output_11D.shape[2]])],
                        (None, None, output_11D.shape[2]), output_11D.dtype)


def _distance_to_1(tb, d):
    """|d - 1| (0 for a static 1)."""
    return tb.dim_max(tb.dim_sub(d, 1), tb.dim_sub(1, d))


def _as_join_results(tb, cond, past_key: Tensor, past_value: Tensor):
    """The caches as the results of a branch on ``cond`` (true where this is called; the other
    branch negates them): IREE 3.13 writes a cache the kernel's put takes in place only where it
    reaches the put as a join's result of one use; the function's argument itself, used in the
    other branches too, it copied whole first (both caches, 16 MiB a step at past 4095).  A growth
    known at run time passes them through such a join anyway (kv_cache.grown_pair); a declared one
    (static cache rows) does not."""
    types = [(p.shape, p.dtype) for p in (past_key, past_value)]
    return tb.if_else_each(cond, types, lambda inner: [past_key, past_value], lambda inner: [inner.neg(p) for p in (past_key, past_value)])


def _may_decode_apart(b, attrs, ins: GqaInputs) -> bool:
    """What the decode branch's kernel, the lengths variant, needs besides B == 1 and S == 1 (fused_decode.py):
    f32 rows, a past, no window cache, none of the inputs and attributes the kernel leaves to the
    decomposed form, and a head layout it has."""
    if b.options.device != "cpu" or b.options.attention != "fused" or ins.query.shape[0] not in (1, None) or ins.query.shape[1] not in (1, None):
        return False
    if ins.past_key is None:
        return False
    if attrs.window_cache or attrs.kv_bits or ins.query_seqlens is not None or not takes_fused(attrs, ins.attention_bias, (None, None)):
        return False
    group = attrs.num_heads // attrs.kv_num_heads
    return ins.query.dtype == ins.past_key.dtype == "f32" and attrs.num_heads % attrs.kv_num_heads == 0 and \
        supported(attrs.kv_num_heads, group, ins.head_size)


def taken_apart(tb, cond, special, general) -> List[Optional[Tensor]]:
    """The step's results behind a branch on ``cond`` (a host !torch.bool): ``special(inner)`` and
    ``general(inner)`` each build the [output, present_key, present_value, output_qk] of one
    branch, joined (the results that are None, output_qk not asked, are so in both)."""
    absent = []

    def branch(results):
        def build(inner):
            built = results(inner)
            absent[:] = [r is None for r in built]
            return [r for r in built if r is not None]
        return build

    joined = iter(tb.if_joined(cond, branch(special), branch(general)))
    return [None if none else next(joined) for none in absent]


def rotate(tb, attrs, ins, step, query_BHSDh, key_BHkvSDh):
    """Q and K rotated at their rotary positions (do_rotary); cos/sin rows checked whenever given."""
    if ins.cos_cache is not None:  # checked whenever given, as onnxruntime does
        check_rotary_rows(tb, ins, step)
    if not attrs.do_rotary:
        return query_BHSDh, key_BHkvSDh
    positions_BS = checked_rotary_positions(tb, ins, step)
    if ins.cos_cache.shape[1] == 0:  # a width of 0 rotates nothing
        return query_BHSDh, key_BHkvSDh
    rotary = rotary_tables(tb, ins, positions_BS, attrs.rotary_interleaved)
    return rotary.apply(tb, query_BHSDh), rotary.apply(tb, key_BHkvSDh)


def cache_codec(attrs, ins) -> CacheCodec:
    per_tensor = attrs.quant_type == "PER_TENSOR" and attrs.kv_bits == 8
    return CacheCodec(attrs.kv_bits, ins.k_scale, ins.v_scale, per_tensor, value_scaled_after=per_tensor and attrs.qk_output != 0)


def update_cache(tb, b, attrs, ins, step, codec, key_BHkvSDh, value_BHkvSDh) -> CacheStep:
    """The new rows encoded and written: a window-sized buffer, or a growing / fixed-capacity cache."""
    key_BHkvSDc, value_BHkvSDc = codec.encode(tb, key_BHkvSDh, "key"), codec.encode(tb, value_BHkvSDh, "value")
    update = window_cache_step if attrs.window_cache else kv_cache_step
    return update(tb, b, attrs, ins, step, key_BHkvSDc, value_BHkvSDc)


def attend(tb, b, attrs, ins, step, codec, cache: CacheStep, query_BHSDh):
    """Attention [B,H,S,Dh] over the rows the cache step reads, and output_qk [B,H,S,Tt] (or None)."""
    key_BHkvRDh, value_BHkvRDh = codec.decode(tb, cache.read_key, "key"), codec.decode(tb, cache.read_value, "value")
    visible_BSR = visible_keys(tb, step, attrs, cache.key_pos)
    if attrs.window_cache:
        bias = window_bias(tb, ins, step, cache.key_pos)
    else:
        bias = padded_bias(tb, ins, step, cache.present_key)
    keys_read_B1R, values_read_B1R = read_rows(tb, step, cache, attrs)
    if cache.every_row_read:  # None: every row is read (attention.py, query_blocks.py)
        keys_read_B1R = values_read_B1R = None
    if b.options.attention != "sdpa" or needs_scores(attrs, ins) or codec.quantized:
        return decomposed(tb, b, attrs, ins, step, codec, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, bias, values_read_B1R,
                          cache.write)
    if keys_read_B1R is not None:  # SDPA's additive mask keeps a NaN score: unread K rows are zeroed too
        key_BHkvRDh = zero_unread_rows(tb, keys_read_B1R, key_BHkvRDh)
        value_BHkvRDh = zero_unread_rows(tb, values_read_B1R, value_BHkvRDh)
    return sdpa_attention(tb, attrs, ins, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, bias), None


def decomposed(tb, b, attrs, ins, step, codec, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, bias, read_B1R, write=None):
    """attention.py's decomposed form by query length (query_blocks.py): a long causal prefill in
    blocks (unrolled for a static S, in a loop for a run-time S with prefill_loop=on), a run-time
    S's decode row with static shapes; (attention [B,H,S,Dh], output_qk [B,H,S,Tt] or None).
    ``write``: the growing cache's write, which the fused kernel may make (all S rows at once only)."""
    factors = (codec.factor(tb, "key"), codec.factor(tb, "value"))
    rows = (query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, read_B1R)

    def attend_block(inner, block_step, q, k, v, visible, read):  # some of the query rows (no bias, no output_qk)
        return decomposed_attention(inner, attrs, ins, block_step, q, k, v, visible, None, read, factors, b.options)[0]

    def attend_chunks(inner, q, k, v, visible, keys):  # a block of query rows over the keys in chunks (CPU)
        return chunked_attention(inner, attrs, ins, q, k, v, visible, keys, factors)

    def whole(inner):  # all S query rows
        if can_loop(b.options, attrs, step, bias):  # a run-time S: in a loop of blocks from LOOP_FROM rows on
            chunked = attend_chunks if b.options.device == "cpu" else None
            return looped_attention(inner, attend_block, step, *rows, chunked=chunked), None
        return decomposed_attention(inner, attrs, ins, step, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, bias, read_B1R, factors,
                                    b.options, write if inner is tb else None)

    if can_block(attrs, step, key_BHkvRDh, bias):  # a long causal prefill, S static
        return blocked_attention(tb, attend_block, step, *rows), None
    if can_take_one_row_apart(b.options, attrs, step, bias):  # a run-time S: S == 1 apart
        return one_row_apart(tb, attend_block, step, *rows, rest=lambda inner: whole(inner)[0]), None
    return whole(tb)


def outputs(tb, b, output_BSD, present_key, present_value, qk_BHSTt) -> List:
    """The op's results, as many as the node declares, each cast to its declared type."""
    results = [output_BSD, present_key, present_value, qk_BHSTt][: b.num_results]
    return [tb.none() if t is None else b.declared_result(tb, i, t, OUTPUTS[i]) for i, t in enumerate(results)]  # None: an unnamed output_qk
