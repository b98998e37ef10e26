"""A long causal prefill attended in blocks of query rows, each over the keys it can see.

Query s of batch row b sees keys t <= past_len[b] + s, and the run-time
checks keep past_len[b] <= R - S (the new rows fit the R rows read).  So the
queries [start, stop) see no key at or past R - S + stop: each block reads
the keys [0, R - S + stop) only.  Over S = 1024 in blocks of 64 that is
53% of the score matrix, and each block's scores (32 heads x 64 x at most
R floats) stay a sixteenth of the whole, which the softmax's passes over
memory read back.

Only where every size involved is static and nothing needs the whole score
matrix: causal attention over a position-indexed cache (no window cache),
no attention_bias, no output_qk.  The blocks' attention is the decomposed
form's, concatenated along S.
"""

from __future__ import annotations

from dataclasses import replace

from ....builder import Tensor, TorchBuilder


def block_rows(S: int) -> int:
    """Query rows per block, as measured fastest on iree-cpu (benchmarks/README.md, "CPU, round 5";
    smaller blocks skip more masked keys but add dispatches and compile time): with the softmax on
    the grouped scores, S=1024 in blocks of 128/64 ran at 1.14/1.05-1.09x onnxruntime on 1 thread
    and 1.08-1.12/1.00-1.02x on 2 (its compile time 7 s -> 15 s), S=2048 at 1.05/1.10x, S=256 in
    blocks of 64/32 at 0.80/0.78x."""
    return 64 if S <= 1024 else 128


def can_block(attrs, step, key_BHkvRDh: Tensor, bias) -> bool:
    """Whether the module docstring's conditions hold (``bias``: attention_bias as attention sees it, or None)."""
    S, R = step.S, key_BHkvRDh.shape[2]
    return (
        isinstance(S, int) and S >= 2 * block_rows(S) and isinstance(R, int) and R >= S
        and attrs.causal and not attrs.window_cache and not attrs.qk_output and bias is None
    )


def blocked_attention(tb: TorchBuilder, attend, step, query_BHSDh, key_BHkvRDh, value_BHkvRDh, visible_BSR, read_B1R) -> Tensor:
    """``attend(step, q, k, v, visible, read)`` per block of query rows; the blocks' [B,H,Sb,Dh] joined on S
    (returned as [B,H,S,Dh])."""
    S, R = step.S, key_BHkvRDh.shape[2]
    rows, blocks = block_rows(S), []
    for start in range(0, S, rows):
        stop = min(S, start + rows)
        keys = R - S + stop  # the keys [0, keys) are all the block can see
        q_BHSbDh = tb.slice(query_BHSDh, 2, start, stop)  # [B,H,S,Dh] -> [B,H,Sb,Dh]
        k_BHkvKDh = tb.slice(key_BHkvRDh, 2, 0, keys)  # [B,Hkv,R,Dh] -> [B,Hkv,K,Dh]
        v_BHkvKDh = tb.slice(value_BHkvRDh, 2, 0, keys)
        visible_BSbK = tb.slice(tb.slice(visible_BSR, 1, start, stop), 2, 0, keys)  # [B,S,R] -> [B,Sb,R] -> [B,Sb,K]
        read_B1K = None if read_B1R is None else tb.slice(read_B1R, 2, 0, keys)  # [B,1,R] -> [B,1,K]
        attn_BHSbDh = attend(replace(step, S=stop - start), q_BHSbDh, k_BHkvKDh, v_BHkvKDh, visible_BSbK, read_B1K)
        blocks.append(tb.transpose(attn_BHSbDh, 1, 2))  # -> [B,Sb,H,Dh]
    # Joined in the output's layout: each block's transpose fuses into its P.V, and the one below
    # cancels the output's [B,H,S,Dh] -> [B,S,H,Dh], which ran as a dispatch of its own over the
    # joined blocks (with attention.py's normalisation after P.V: S=256 1.05x -> 0.86x onnxruntime,
    # S=1024 1.30x -> 1.22x, 1 thread, benchmarks/README.md).
    return tb.transpose(tb.cat(blocks, 1), 1, 2)  # [B,S,H,Dh] -> [B,H,S,Dh]
