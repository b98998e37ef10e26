"""A long causal prefill attended in blocks of query rows, each block over the keys it can see
(GroupQueryAttention's and the standard Attention's decomposed forms).

Causal attention lets query s see keys t <= offset + s, so the queries
[start, stop) see no key at or past offset + stop: a block reads the keys
[0, offset + stop) only.  Over S = 1024 in blocks of 64 that is 53% of the
score matrix instead of all of it, and each block's scores stay a sixteenth
of the whole, which the softmax's passes over memory read back.  Each op's
own module says when its blocks apply; the blocks are joined here.

A query length known only at run time (the exporters' dynamic axes) takes the
blocks in a loop (:func:`looped`) when it is LOOP_FROM rows or more, each
block ROWS rows (the last padded); IREE's CPU code for the whole step's
matmuls, with every size dynamic, ran a 512-token prefill at 3.5x
onnxruntime's time.  On the CPU, GroupQueryAttention's blocks take their keys in
chunks of static size (common/key_chunks.py).  Before that branch, a decode
step's single row takes one of its own to static shapes (:func:`one_row_branch`).
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


ROWS = 64  # query rows per block of a loop (a run-time S)
LOOP_FROM = 2 * ROWS  # a run-time S of fewer rows is attended whole


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


def looped(tb: TorchBuilder, S: Dim, sizes_BHD, dtype: str, block, sequence_major: bool = True) -> Tensor:
    """A run-time query length S in blocks of ROWS rows, in a loop (``torch.prim.Loop``) of
    ceil(S / ROWS) iterations: ``block(inner, start)`` emits, with the builder ``inner``, one
    block's attention for the query rows [start, start + ROWS): [B,ROWS,H,D] (``sequence_major``)
    or [B,H,ROWS,D].  The caller pads its tensors indexed by query row to ceil(S / ROWS) * ROWS
    rows (the last block's extra rows are computed and dropped).  ``sizes_BHD``: the result's B,
    H and D.  Returns [B,S,H,D] (``sequence_major``) or [B,H,S,D].

    The loop carries the joined blocks; IREE 3.13 copies that tensor once per iteration
    (its copy elision does not see through the loop), a cost that grows with S^2.
    """
    blocks = tb.dim_floordiv(tb.dim_add(S, ROWS - 1), ROWS)
    B, H, D = sizes_BHD
    dim = 1 if sequence_major else 2  # the rows' dim
    padded = [B, tb.dim_mul(blocks, ROWS), H, D] if sequence_major else [B, H, tb.dim_mul(blocks, ROWS), D]
    init = tb.full_sized(padded, 0.0, dtype)  # [B,S_pad,H,D] / [B,H,S_pad,D]

    def iteration(inner: TorchBuilder, i, acc: Tensor) -> Tensor:
        start = inner.dim_mul(i, ROWS)
        return inner.slice_scatter(acc, block(inner, start), dim, start, inner.dim_add(start, ROWS))

    return tb.slice(tb.loop(blocks, init, iteration), dim, 0, S)  # S_pad rows -> S


def padded_rows(tb: TorchBuilder, t: Tensor, dim: int, S: Dim) -> Tensor:
    """``t`` with its ``dim`` (S query rows) padded to ceil(S / ROWS) * ROWS rows (of zeros / false)."""
    return padded_to_multiple(tb, t, dim, S, ROWS)


def padded_to_multiple(tb: TorchBuilder, t: Tensor, dim: int, size: Dim, multiple: int, value: float = 0.0) -> Tensor:
    """``t`` with its ``dim`` (``size`` long) padded to the next multiple of ``multiple`` with
    ``value`` (false for a mask)."""
    padded = tb.dim_mul(tb.dim_floordiv(tb.dim_add(size, multiple - 1), multiple), multiple)
    if t.dtype == "i1":  # constant_pad_nd pads numbers: through si8
        return tb.ne_scalar(tb.pad_dim_end(tb.to_dtype(t, "si8"), dim, tb.dim_sub(padded, size)), 0)
    return tb.pad_dim_end(t, dim, tb.dim_sub(padded, size), value)


def one_row_branch(tb: TorchBuilder, S: Dim, B: Dim, shape, seq_dim: int, dtype: str, one_row, other_lengths,
                   batch_apart: bool = True) -> Tensor:
    """A run-time query length S: ``one_row(inner, batch)`` behind a branch on S == 1 (a decode
    step, its shapes then static), ``other_lengths(inner)`` for every other S.  ``shape``: the
    result's, S (at ``seq_dim``) dynamic.  ``batch`` is ``{0: 1}`` in a branch on B == 1 nested
    there when the batch size B is a run-time value (and ``batch_apart``: not when the caller
    branched on B == 1 before), else ``{}``: the caller types its tensors' batch dim with it
    (``known_static``).

    IREE 3.13's CPU matmuls with the grouped query rows dynamic ran a decode step's Q.K^T and P.V
    at a third of the static speed, and with the batch dynamic it kept K's transpose as a
    dispatch of its own (benchmarks/README.md, "CPU, round 7").
    """
    def decode(inner: TorchBuilder) -> Tensor:
        if isinstance(B, int) or not batch_apart:
            return one_row(inner, {})
        row_shape = tuple(1 if d == seq_dim else size for d, size in enumerate(shape))
        return inner.if_else(inner.dim_eq(B, 1), row_shape, dtype, lambda one: one_row(one, {0: 1}),
                             lambda any_b: one_row(any_b, {}))

    return tb.if_else(tb.dim_eq(S, 1), shape, dtype, decode, other_lengths)
