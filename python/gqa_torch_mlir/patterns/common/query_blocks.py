"""A long causal prefill attended in blocks of query rows, each block over the keys it can see
(GroupQueryAttention's and the standard Attention's decomposed forms).

Causal attention lets query s see keys t <= offset + s, so the queries
[start, stop) see no key at or past offset + stop: a block reads the keys
[0, offset + stop) only.  Over S = 1024 in blocks of 64 that is 53% of the
score matrix instead of all of it, and each block's scores stay a sixteenth
of the whole, which the softmax's passes over memory read back.  Each op's
own module says when its blocks apply; the blocks are joined here.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

from ...builder import Dim, Tensor, TorchBuilder


def block_rows(S: int) -> int:
    """Query rows per block, as measured fastest on iree-cpu (benchmarks/README.md, "CPU, round 5";
    smaller blocks skip more masked keys but add dispatches and compile time): with the softmax on
    the grouped scores, S=1024 in blocks of 128/64 ran at 1.14/1.05-1.09x onnxruntime on 1 thread
    and 1.08-1.12/1.00-1.02x on 2 (its compile time 7 s -> 15 s), S=2048 at 1.05/1.10x, S=256 in
    blocks of 64/32 at 0.80/0.78x."""
    return 64 if S <= 1024 else 128


def long_enough(S: Dim) -> bool:
    """A static query length of two blocks or more (fewer would be one block: the whole)."""
    return isinstance(S, int) and S >= 2 * block_rows(S)


def row_blocks(S: int) -> List[Tuple[int, int]]:
    """The blocks' query rows, [start, stop) in order."""
    rows = block_rows(S)
    return [(start, min(S, start + rows)) for start in range(0, S, rows)]


def joined(tb: TorchBuilder, blocks_BHSbD: Sequence[Tensor], sequence_major: bool = True) -> Tensor:
    """The blocks' [B,H,Sb,D] joined on S: [B,H,S,D].

    ``sequence_major``: the op's output is [B,S,H*D], so the blocks are joined in
    that layout: each block's transpose fuses into its P.V, and the one after
    cancels the op's own [B,H,S,D] -> [B,S,H,D], which ran as a dispatch of its
    own over the joined blocks (S=256 1.05x -> 0.86x onnxruntime, S=1024 1.30x
    -> 1.22x, 1 thread, benchmarks/README.md).
    """
    if not sequence_major:
        return tb.cat(list(blocks_BHSbD), 2)
    blocks_BSbHD = [tb.transpose(b, 1, 2) for b in blocks_BHSbD]  # [B,H,Sb,D] -> [B,Sb,H,D]
    return tb.transpose(tb.cat(blocks_BSbHD, 1), 1, 2)  # [B,S,H,D] -> [B,H,S,D]
