"""The standard Attention's long causal prefill in blocks of query rows (common/query_blocks.py).

is_causal lets query s see keys t <= s + P (P the past's rows), whatever
attn_mask adds: the keys a block of queries [start, stop) can see are
[0, P + stop), and the others carry the excluded value in the bias, so
their probabilities are exactly 0 and dropping them changes no sum.  The
bias and the rows-without-keys mask are computed for the whole step and
sliced per block.

Only where every size involved is static and nothing needs the whole score
matrix: is_causal, no nonpad_kv_seqlen (its offset is per batch row, read at
run time), no qk_matmul_output.  Each block's attention is compute.py's.
"""

from __future__ import annotations

from typing import Optional

from ....builder import Dim, Tensor, TorchBuilder
from ...common.query_blocks import joined, long_enough, row_blocks
from .compute import grouped_attention
from .masks import KeyMask
from .support import AttentionAttributes


def can_block(attrs: AttentionAttributes, mask: Optional[KeyMask], S: Dim, T: Dim, P: Dim) -> bool:
    """Whether the module docstring's conditions hold (``mask`` as masks.py built it)."""
    return (
        attrs.is_causal and attrs.qk_mode < 0 and long_enough(S) and isinstance(T, int) and isinstance(P, int)
        and mask is not None and mask.bias is not None and mask.nonpad_excluded is None
        and isinstance(mask.bias.shape[2], int) and mask.bias.shape[2] == S  # the causal rows: [B|1,H|1,S,T]
    )


def blocked_attention(tb: TorchBuilder, attrs: AttentionAttributes, q_BHSDh: Tensor, k_BHkvTDh: Tensor, v_BHkvTDv: Tensor,
                      mask: KeyMask, P: int, rank3: bool) -> Tensor:
    """compute.py's grouped attention per block of query rows; the blocks' [B,H,Sb,Dv] joined on S:
    [B,H,S,Dv] in Q's type (``rank3``: joined as the [B,S,H*Dv] output lays them out)."""
    S, T = q_BHSDh.shape[2], k_BHkvTDh.shape[2]
    blocks = []
    for start, stop in row_blocks(S):
        keys = min(T, P + stop)  # the keys [0, keys) are all the block can see
        q_BHSbDh = tb.slice(q_BHSDh, 2, start, stop)  # [B,H,S,Dh] -> [B,H,Sb,Dh]
        k_BHkvKDh = tb.slice(k_BHkvTDh, 2, 0, keys)  # [B,Hkv,T,Dh] -> [B,Hkv,K,Dh]
        v_BHkvKDv = tb.slice(v_BHkvTDv, 2, 0, keys)
        bias = tb.slice(tb.slice(mask.bias, 2, start, stop), 3, 0, keys)  # [..,S,T] -> [..,Sb,T] -> [..,Sb,K]
        block_mask = KeyMask(bias, None, tb.slice(mask.full_rows, 2, start, stop))  # [..,S,1] -> [..,Sb,1]
        blocks.append(grouped_attention(tb, attrs, q_BHSbDh, k_BHkvKDh, v_BHkvKDv, block_mask)[0])
    return joined(tb, blocks, sequence_major=rank3)
