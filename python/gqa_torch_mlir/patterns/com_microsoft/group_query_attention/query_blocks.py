"""GroupQueryAttention's long causal prefill in blocks of query rows (common/query_blocks.py).

Query s of batch row b sees keys t <= past_len[b] + s, and the run-time
checks keep past_len[b] <= R - S (the new rows fit the R rows read).  So the
queries [start, stop) see no key at or past R - S + stop: each block reads
the keys [0, R - S + stop) only.

Only where every size involved is static and nothing needs the whole score
matrix: causal attention over a position-indexed cache (no window cache),
no attention_bias, no output_qk.  The blocks' attention is the decomposed
form's.
"""

from __future__ import annotations

from dataclasses import replace

from ....builder import Tensor, TorchBuilder
from ...common.query_blocks import joined, long_enough, row_blocks


def can_block(attrs, step, key_BHkvRDh: Tensor, bias) -> bool:
    """Whether the module docstring's conditions hold (``bias``: attention_bias as attention sees it, or None)."""
    S, R = step.S, key_BHkvRDh.shape[2]
    return (
        long_enough(S) and isinstance(R, int) and R >= S
        and attrs.causal and not attrs.window_cache and not attrs.qk_output and bias is None
    )


def blocked_attention(tb: TorchBuilder, attend, step, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, read_B1R) -> Tensor:
    """``attend(step, q, k, v, visible, read)`` per block of query rows; the blocks' [B,H,Sb,Dh] joined on S
    (returned as [B,H,S,Dh])."""
    S, R = step.S, key_BHkvRDh.shape[2]
    blocks = []
    for start, stop in row_blocks(S):
        keys = R - S + stop  # the keys [0, keys) are all the block can see
        q_BHSbDh = tb.slice(query_BHSDh, 2, start, stop)  # [B,H,S,Dh] -> [B,H,Sb,Dh]
        k_BHkvKDh = tb.slice(key_BHkvRDh, 2, 0, keys)  # [B,Hkv,R,Dh] -> [B,Hkv,K,Dh]
        v_BHkvKDh = tb.slice(value_BHkvRDh, 2, 0, keys)
        visible_BSbK = tb.slice(tb.slice(visible_BSR, 1, start, stop), 2, 0, keys)  # [B,S,R] -> [B,Sb,R] -> [B,Sb,K]
        read_B1K = None if read_B1R is None else tb.slice(read_B1R, 2, 0, keys)  # [B,1,R] -> [B,1,K]
        blocks.append(attend(replace(step, S=stop - start), q_BHSbDh, k_BHkvKDh, v_BHkvKDh, visible_BSbK, read_B1K))
    return joined(tb, blocks)
