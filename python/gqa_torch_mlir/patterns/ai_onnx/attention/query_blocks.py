"""The standard Attention by query length: a long causal prefill in blocks of query rows
(common/query_blocks.py), and a run-time length's decode row apart (:func:`one_row_apart`).

is_causal lets query s see keys t <= s + P (P the past's rows), whatever
attn_mask adds: the keys a block of queries [start, stop) can see are
[0, P + stop), and the others carry the excluded value in the bias, so
their probabilities are exactly 0 and dropping them changes no sum.  The
bias and the rows-without-keys mask are computed for the whole step and
sliced per block.

Only where nothing needs the whole score matrix: is_causal, no
nonpad_kv_seqlen (its offset is per batch row, read at run time), no
qk_matmul_output.  Static sizes give unrolled blocks; a query length known
only at run time takes them in a loop from common/query_blocks.LOOP_FROM
rows on with the pass option prefill_loop=on, the default (a branch, taken
after the one on S == 1: a decode step's single row is attended with static
shapes, :func:`one_row_apart`).  Each block's attention is compute.py's; in
the loop on the CPU in f32 each block takes its keys in chunks of 64 with an
online softmax (compute.chunked_attention, common/key_chunks.py), every
chunk's shapes static.
"""

from __future__ import annotations

from typing import Optional

from ....builder import Dim, Tensor, TorchBuilder
from ...common.key_chunks import NEG_INF, padded_keys
from ...common.query_blocks import LOOP_FROM, ROWS, joined, long_enough, looped, one_row_branch, padded_rows, row_blocks
from .compute import chunked_attention, grouped_attention
from .masks import KeyMask
from .support import AttentionAttributes


def can_block(attrs: AttentionAttributes, mask: Optional[KeyMask], S: Dim, T: Dim, P: Dim) -> bool:
    """Whether the module docstring's conditions hold (``mask`` as masks.py built it)."""
    return (
        attrs.is_causal and attrs.qk_mode < 0 and long_enough(S) and isinstance(T, int) and isinstance(P, int)
        and mask is not None and mask.bias is not None and mask.nonpad_excluded is None
        and isinstance(mask.bias.shape[2], int) and mask.bias.shape[2] == S  # the causal rows: [B|1,H|1,S,T]
    )


def attend_block(tb: TorchBuilder, attrs: AttentionAttributes, q_BHSbDh: Tensor, bias_BHSbT: Tensor, empty_BHSb1: Tensor,
                 k_BHkvTDh: Tensor, v_BHkvTDv: Tensor, keys: Dim) -> Tensor:
    """compute.py's attention for one block of query rows (its Q, bias rows and rows-without-keys mask),
    on the keys [0, ``keys``) only: [B,H,Sb,Dv]."""
    k_BHkvKDh = tb.slice(k_BHkvTDh, 2, 0, keys)  # [B,Hkv,T,Dh] -> [B,Hkv,K,Dh]
    v_BHkvKDv = tb.slice(v_BHkvTDv, 2, 0, keys)
    block_mask = KeyMask(tb.slice(bias_BHSbT, 3, 0, keys), None, empty_BHSb1)  # bias [..,Sb,T] -> [..,Sb,K]
    return grouped_attention(tb, attrs, q_BHSbDh, k_BHkvKDh, v_BHkvKDv, block_mask)[0]


def blocked_attention(tb: TorchBuilder, attrs: AttentionAttributes, q_BHSDh: Tensor, k_BHkvTDh: Tensor, v_BHkvTDv: Tensor,
                      mask: KeyMask, P: int, rank3: bool) -> Tensor:
    """compute.py's grouped attention per block of query rows; the blocks' [B,H,Sb,Dv] joined on S:
    [B,H,S,Dv] in Q's type (``rank3``: joined as the [B,S,H*Dv] output lays them out)."""
    S, T = q_BHSDh.shape[2], k_BHkvTDh.shape[2]
    blocks = []
    for start, stop in row_blocks(S):
        q_BHSbDh = tb.slice(q_BHSDh, 2, start, stop)  # [B,H,S,Dh] -> [B,H,Sb,Dh]
        bias_BHSbT = tb.slice(mask.bias, 2, start, stop)  # [..,S,T] -> [..,Sb,T]
        empty_BHSb1 = tb.slice(mask.full_rows, 2, start, stop)  # [..,S,1] -> [..,Sb,1]
        keys = min(T, P + stop)  # the keys [0, keys) are all the block can see
        blocks.append(attend_block(tb, attrs, q_BHSbDh, bias_BHSbT, empty_BHSb1, k_BHkvTDh, v_BHkvTDv, keys))
    return joined(tb, blocks, sequence_major=rank3)


def can_loop(options, attrs: AttentionAttributes, mask: Optional[KeyMask], S: Dim) -> bool:
    """The conditions of :func:`can_block` for a query length known at run time only, with the pass
    option prefill_loop=on (options.py: on by default)."""
    return (
        options.prefill_loop == "on" and not isinstance(S, int) and attrs.is_causal and attrs.qk_mode < 0
        and mask is not None and mask.bias is not None and mask.nonpad_excluded is None
    )


def can_chunk(options, attrs: AttentionAttributes, dtype: str) -> bool:
    """Whether the loop's blocks take their keys in chunks (compute.chunked_attention): on the CPU,
    f32 (an f16 step rounds each stage to f16, which a softmax carried across chunks cannot; f64
    is computed in f64)."""
    return options.device == "cpu" and dtype == "f32" and not attrs.softmax_f32


def looped_attention(tb: TorchBuilder, attrs: AttentionAttributes, q_BHSDh: Tensor, k_BHkvTDh: Tensor, v_BHkvTDv: Tensor,
                     mask: KeyMask, P: Dim, rank3: bool, chunked: bool = False) -> Tensor:
    """compute.py's grouped attention over blocks of ROWS query rows in a loop when the run-time
    S >= LOOP_FROM, else over all of S: [B,H,S,Dv] in Q's type (``rank3``: the branches give
    the [B,S,H*Dv] output's layout, so that no transpose follows the branch).  ``chunked``
    (:func:`can_chunk`): each block's keys in chunks of static size instead."""
    S, T = tb.size(q_BHSDh, 2), tb.size(k_BHkvTDh, 2)
    sizes = (tb.size(q_BHSDh, 0), tb.size(q_BHSDh, 1), tb.size(v_BHkvTDv, 3))

    def laid_out(inner: TorchBuilder, y_BHSDv: Tensor) -> Tensor:
        return inner.transpose(y_BHSDv, 1, 2) if rank3 else y_BHSDv  # -> [B,S,H,Dv] for a 3-D output

    def whole(inner: TorchBuilder) -> Tensor:
        return laid_out(inner, grouped_attention(inner, attrs, q_BHSDh, k_BHkvTDh, v_BHkvTDv, mask)[0])

    def in_blocks(inner: TorchBuilder) -> Tensor:
        q_BHSpDh = padded_rows(inner, q_BHSDh, 2, S)  # [B,H,S,Dh] -> [B,H,S_pad,Dh]
        # A bias may be shared by the rows ([..,1,T]: a causal mask that excludes nothing, one new key
        # after a past): broadcast to S rows before they are padded and sliced.
        bias_BHSpT = padded_rows(inner, inner.expand(mask.bias, [-1, -1, S, -1]), 2, S)  # [B|1,H|1,S|1,T] -> [..,S_pad,T]
        empty_BHSp1 = padded_rows(inner, inner.expand(mask.full_rows, [-1, -1, S, -1]), 2, S)  # [..,S|1,1] -> [..,S_pad,1]
        block_of = chunks_block(inner, attrs, k_BHkvTDh, v_BHkvTDv, bias_BHSpT, empty_BHSp1) if chunked else None

        def block(it: TorchBuilder, start) -> Tensor:
            q_BHSbDh = it.slice_rows(q_BHSpDh, 2, start, ROWS)  # -> [B,H,ROWS,Dh]
            keys = it.dim_min(T, it.dim_add(P, it.dim_add(start, ROWS)))  # [0, P + stop)
            if block_of:
                return laid_out(it, block_of(it, q_BHSbDh, start, keys))
            bias_BHSbT = it.slice_rows(bias_BHSpT, 2, start, ROWS)  # -> [..,ROWS,T]
            empty_BHSb1 = it.slice_rows(empty_BHSp1, 2, start, ROWS)  # -> [..,ROWS,1]
            return laid_out(it, attend_block(it, attrs, q_BHSbDh, bias_BHSbT, empty_BHSb1, k_BHkvTDh, v_BHkvTDv, keys))

        return looped(inner, S, sizes, q_BHSDh.dtype, block, sequence_major=rank3)

    B, H, Dv = q_BHSDh.shape[0], q_BHSDh.shape[1], v_BHkvTDv.shape[3]
    shape = (B, None, H, Dv) if rank3 else (B, H, None, Dv)
    y = tb.if_else(tb.dim_le(LOOP_FROM, S), shape, q_BHSDh.dtype, in_blocks, whole)
    return tb.transpose(y, 1, 2) if rank3 else y  # -> [B,H,S,Dv]


def chunks_block(tb: TorchBuilder, attrs: AttentionAttributes, k_BHkvTDh: Tensor, v_BHkvTDv: Tensor, bias_BHSpT: Tensor,
                 empty_BHSp1: Tensor):
    """K, V and the bias padded to whole key chunks once, before the loop (the bias with -inf there
    and in the rows with no key to see); returns ``block(inner, q_BHSbDh, start, keys)``, the
    attention of the query rows [start, start + ROWS) over the keys [0, keys): [B,H,ROWS,Dv]."""
    k_BHkvTpDh, v_BHkvTpDv = (padded_keys(tb, t, 2) for t in (k_BHkvTDh, v_BHkvTDv))  # [B,Hkv,T,D] -> [B,Hkv,Tp,D]
    bias_BHSpT = tb.where_scalar_else(empty_BHSp1, NEG_INF, bias_BHSpT)  # onnxruntime's zero rows
    bias_BHSpTp = padded_keys(tb, bias_BHSpT, 3, NEG_INF)  # [..,S_pad,T] -> [..,S_pad,Tp]

    def block(inner: TorchBuilder, q_BHSbDh: Tensor, start, keys) -> Tensor:
        bias_BHSbTp = inner.slice_rows(bias_BHSpTp, 2, start, ROWS)  # -> [..,ROWS,Tp]
        return chunked_attention(inner, attrs, q_BHSbDh, k_BHkvTpDh, v_BHkvTpDv, bias_BHSbTp, keys)

    return block


def can_take_one_row_apart(options, attrs: AttentionAttributes, S: Dim) -> bool:
    """A query length known only at run time on the CPU, no qk_matmul_output: a decode step's
    one row gets the static-shape attention (:func:`one_row_apart`)."""
    return options.device == "cpu" and not isinstance(S, int) and attrs.qk_mode < 0


def one_row_apart(tb: TorchBuilder, attrs: AttentionAttributes, q_BHSDh: Tensor, k_BHkvTDh: Tensor, v_BHkvTDv: Tensor,
                  mask: Optional[KeyMask], rank3: bool, rest) -> Tensor:
    """A run-time query length: compute.py's attention with S = 1 static (and B = 1 for a run-time
    batch of one) behind common/query_blocks.one_row_branch, ``rest(inner)`` -> [B,H,S,Dv] for
    every other S; [B,H,S,Dv] in Q's type.  The mask's rows are 1 or S and its batch 1 or B
    (masks.checked_mask checks a dynamic one is S or B), so 1 in the branches."""
    def laid_out(inner: TorchBuilder, y_BHSDv: Tensor) -> Tensor:
        return inner.transpose(y_BHSDv, 1, 2) if rank3 else y_BHSDv  # -> [B,S,H,Dv] for a 3-D output

    def one_row(inner: TorchBuilder, batch: dict) -> Tensor:  # batch: {0: 1} for a batch of one, or {}
        q_BH1Dh = inner.known_static(q_BHSDh, {2: 1, **batch})  # [B,H,S,Dh] -> [B|1,H,1,Dh]
        k, v = inner.known_static(k_BHkvTDh, batch), inner.known_static(v_BHkvTDv, batch)
        row_mask = None if mask is None else KeyMask(
            None if mask.bias is None else inner.known_static(mask.bias, {2: 1, **batch}),  # [B|1,..,S|1,T] -> [..,1,T]
            None if mask.nonpad_excluded is None else inner.known_static(mask.nonpad_excluded, batch),
            inner.known_static(mask.full_rows, {2: 1, **batch}))  # [B|1,..,S|1,1] -> [..,1,1]
        return laid_out(inner, grouped_attention(inner, attrs, q_BH1Dh, k, v, row_mask)[0])

    B, H, Dv = q_BHSDh.shape[0], q_BHSDh.shape[1], v_BHkvTDv.shape[3]
    shape, seq_dim = ((B, None, H, Dv), 1) if rank3 else ((B, H, None, Dv), 2)
    y = one_row_branch(tb, tb.size(q_BHSDh, 2), tb.size(q_BHSDh, 0), shape, seq_dim, q_BHSDh.dtype, one_row,
                       lambda inner: laid_out(inner, rest(inner)))
    return tb.transpose(y, 1, 2) if rank3 else y  # -> [B,H,S,Dv]
