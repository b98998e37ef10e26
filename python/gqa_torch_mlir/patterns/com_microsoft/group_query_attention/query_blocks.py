"""GroupQueryAttention's attention by query length: a long causal prefill in blocks of query rows
(common/query_blocks.py), and a run-time length's decode row apart (:func:`one_row_apart`).

Query s of batch row b sees keys t <= past_len[b] + s, and the run-time
checks keep past_len[b] <= R - S (the new rows fit the R rows read).  So the
queries [start, stop) see no key at or past R - S + stop: each block reads
the keys [0, R - S + stop) only.

Only where nothing needs the whole score matrix: causal attention over a
position-indexed cache (no window cache), no attention_bias, no output_qk.
Static sizes give unrolled blocks; a query length known only at run time
takes them in a loop from common/query_blocks.LOOP_FROM rows on (a branch)
with the pass option prefill_loop=on, the default.  The blocks' attention is
the decomposed form's; in the loop on the CPU (device=cpu) each block takes
its keys in chunks of 64 with an online softmax (attention.py's
chunked_attention, common/key_chunks.py), every chunk's shapes static.

A query length known only at run time first branches on S == 1: a decode
step's one row is attended with static shapes (and, for a run-time batch
size, on B == 1 inside that branch), so it never reaches the loop's branch.
"""

from __future__ import annotations

from dataclasses import replace

from ....builder import Tensor, TorchBuilder
from ...common.key_chunks import padded_keys
from ...common.query_blocks import LOOP_FROM, ROWS, joined, long_enough, looped, one_row_branch, padded_rows, row_blocks
from .masks import zero_unread_rows


def can_block(attrs, step, key_BHkvRDh: Tensor, bias) -> bool:
    """Whether the module docstring's conditions hold (``bias``: attention_bias as attention sees it, or None)."""
    S, R = step.S, key_BHkvRDh.shape[2]
    return (
        long_enough(S) and isinstance(R, int) and R >= S
        and attrs.causal and not attrs.window_cache and not attrs.qk_output and bias is None
    )


def can_loop(options, attrs, step, bias) -> bool:
    """The conditions of :func:`can_block` but for the query length, known only at run time, with
    the pass option prefill_loop=on (options.py: on by default)."""
    return (
        options.prefill_loop == "on" and not isinstance(step.S, int)
        and attrs.causal and not attrs.window_cache and not attrs.qk_output and bias is None
    )


def attend_block(tb: TorchBuilder, attend, step, rows: int, q_BHSbDh, visible_BSbR, key_BHkvRDh, value_BHkvRDh, read_B1R,
                 keys) -> Tensor:
    """``attend`` over one block of ``rows`` query rows (its Q [B,H,Sb,Dh] and visible rows [B,Sb,R]),
    on the keys [0, ``keys``) only: [B,H,Sb,Dh]."""
    k_BHkvKDh = tb.slice(key_BHkvRDh, 2, 0, keys)  # [B,Hkv,R,Dh] -> [B,Hkv,K,Dh]
    v_BHkvKDh = tb.slice(value_BHkvRDh, 2, 0, keys)
    visible_BSbK = tb.slice(visible_BSbR, 2, 0, keys)  # [B,Sb,R] -> [B,Sb,K]
    read_B1K = None if read_B1R is None else tb.slice(read_B1R, 2, 0, keys)  # [B,1,R] -> [B,1,K]
    return attend(tb, replace(step, S=rows), q_BHSbDh, k_BHkvKDh, v_BHkvKDh, visible_BSbK, read_B1K)


def blocked_attention(tb: TorchBuilder, attend, step, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, read_B1R) -> Tensor:
    """``attend(tb, step, q, k, v, visible, read)`` per block of query rows; the blocks' [B,H,Sb,Dh] joined on S
    (returned as [B,H,S,Dh])."""
    S, R = step.S, key_BHkvRDh.shape[2]
    blocks = []
    for start, stop in row_blocks(S):
        q_BHSbDh = tb.slice(query_BHSDh, 2, start, stop)  # [B,H,S,Dh] -> [B,H,Sb,Dh]
        visible_BSbR = tb.slice(visible_BSR, 1, start, stop)  # [B,S,R] -> [B,Sb,R]
        keys = R - S + stop  # the keys [0, keys) are all the block can see
        blocks.append(attend_block(tb, attend, step, stop - start, q_BHSbDh, visible_BSbR, key_BHkvRDh, value_BHkvRDh, read_B1R, keys))
    return joined(tb, blocks)


def looped_attention(tb: TorchBuilder, attend, step, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, read_B1R,
                     chunked=None) -> Tensor:
    """A run-time query length: ``attend`` over blocks of ROWS rows in a loop when S >= LOOP_FROM,
    else over all of S; [B,H,S,Dh].  With ``chunked(inner, q, k, v, visible, keys)`` (attention.py's
    chunked_attention) the blocks take the keys in chunks of static size instead (CPU)."""
    S, R = step.S, tb.size(key_BHkvRDh, 2)

    def whole(inner: TorchBuilder) -> Tensor:
        attn_BHSDh = attend(inner, step, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, read_B1R)
        return inner.transpose(attn_BHSDh, 1, 2)  # -> [B,S,H,Dh]

    def in_blocks(inner: TorchBuilder) -> Tensor:
        q_BHSpDh = padded_rows(inner, query_BHSDh, 2, S)  # [B,H,S,Dh] -> [B,H,S_pad,Dh]
        visible_BSpR = padded_rows(inner, visible_BSR, 1, S)  # [B,S,R] -> [B,S_pad,R]
        block_of = chunks_block(inner, chunked, key_BHkvRDh, value_BHkvRDh, visible_BSpR, read_B1R) if chunked else None

        def block(it: TorchBuilder, start) -> Tensor:
            q_BHSbDh = it.slice_rows(q_BHSpDh, 2, start, ROWS)  # -> [B,H,ROWS,Dh]
            keys = it.dim_min(R, it.dim_add(it.dim_sub(R, S), it.dim_add(start, ROWS)))  # [0, R - S + stop)
            if block_of:
                attn_BHSbDh = block_of(it, q_BHSbDh, start, keys)
            else:
                visible_BSbR = it.slice_rows(visible_BSpR, 1, start, ROWS)  # -> [B,ROWS,R]
                attn_BHSbDh = attend_block(it, attend, step, ROWS, q_BHSbDh, visible_BSbR, key_BHkvRDh, value_BHkvRDh, read_B1R, keys)
            return it.transpose(attn_BHSbDh, 1, 2)  # -> [B,ROWS,H,Dh]

        sizes = (inner.size(query_BHSDh, 0), inner.size(query_BHSDh, 1), inner.size(query_BHSDh, 3))
        return looped(inner, S, sizes, query_BHSDh.dtype, block)  # [B,S,H,Dh]

    # Both branches give the output's [B,S,H,Dh] layout: the op's own transpose to it (outputs()) then
    # cancels the one below, and no dispatch follows the branch (each part of a step the branch splits
    # off is a submission of its own on IREE's runtime).
    B, _, H, Dh = query_BHSDh.shape
    attn_BSHDh = tb.if_else(tb.dim_le(LOOP_FROM, S), (B, None, H, Dh), query_BHSDh.dtype, in_blocks, whole)
    return tb.transpose(attn_BSHDh, 1, 2)  # -> [B,H,S,Dh]


def chunks_block(tb: TorchBuilder, chunked, key_BHkvRDh, value_BHkvRDh, visible_BSpR, read_B1R):
    """K, V and the visible keys padded to whole key chunks once, before the loop (V's unread rows
    zeroed: a 0 probability times a NaN row is NaN); returns ``block(inner, q_BHSbDh, start, keys)``,
    the attention of the query rows [start, start + ROWS) over the keys [0, keys): [B,H,ROWS,Dh]."""
    value_BHkvRDh = value_BHkvRDh if read_B1R is None else zero_unread_rows(tb, read_B1R, value_BHkvRDh)
    k_BHkvTpDh = padded_keys(tb, tb.to_dtype(key_BHkvRDh, "f32"), 2)  # [B,Hkv,R,Dh] -> [B,Hkv,Tp,Dh]
    v_BHkvTpDh = padded_keys(tb, tb.to_dtype(value_BHkvRDh, "f32"), 2)
    visible_BSpTp = padded_keys(tb, visible_BSpR, 2)  # [B,S_pad,R] -> [B,S_pad,Tp]

    def block(inner: TorchBuilder, q_BHSbDh, start, keys) -> Tensor:
        visible_BSbTp = inner.slice_rows(visible_BSpTp, 1, start, ROWS)  # -> [B,ROWS,Tp]
        return chunked(inner, q_BHSbDh, k_BHkvTpDh, v_BHkvTpDh, visible_BSbTp, keys)

    return block


def can_take_one_row_apart(options, attrs, step, bias) -> bool:
    """A query length known only at run time on the CPU, nothing else with S rows (attention_bias,
    output_qk): a decode step's one row gets the static-shape attention (:func:`one_row_apart`)."""
    return options.device == "cpu" and not isinstance(step.S, int) and bias is None and not attrs.qk_output


def one_row_apart(tb: TorchBuilder, attend, step, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, read_B1R, rest) -> Tensor:
    """A run-time query length: ``attend`` with S = 1 static behind common/query_blocks.one_row_branch,
    ``rest(inner)`` -> [B,H,S,Dh] for every other S; [B,H,S,Dh].  A run-time batch size is no
    branch of its own here: the op's whole step took B == 1 apart before (``batch_of_one_apart``)."""
    def one_row(inner: TorchBuilder, batch: dict) -> Tensor:  # batch: {} (batch_apart=False)
        q_BH1Dh = inner.known_static(query_BHSDh, {2: 1})  # [B,H,S,Dh] -> [B,H,1,Dh]
        visible_B1R = inner.known_static(visible_BSR, {1: 1})  # [B,S,R] -> [B,1,R]
        attn_BH1Dh = attend(inner, replace(step, S=1), q_BH1Dh, key_BHkvRDh, value_BHkvRDh, visible_B1R, read_B1R)
        return inner.transpose(attn_BH1Dh, 1, 2)  # -> [B,1,H,Dh]

    # As looped_attention's branches: the output's [B,S,H,Dh] layout, no dispatch after the branch.
    B, H, _, Dh = query_BHSDh.shape
    attn_BSHDh = one_row_branch(tb, step.S, tb.size(query_BHSDh, 0), (B, None, H, Dh), 1, query_BHSDh.dtype, one_row,
                                lambda inner: inner.transpose(rest(inner), 1, 2), batch_apart=False)  # [B,H,S,Dh] -> [B,S,H,Dh]
    return tb.transpose(attn_BSHDh, 1, 2)  # -> [B,H,S,Dh]
