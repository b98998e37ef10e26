"""Per-head tensors regrouped by KV head, the layout of the decomposed attention's matmuls
(GroupQueryAttention and the standard Attention).

Query head h = kv * G + g (G = H / Hkv) reads KV head kv: its rows are laid
out [B,Hkv,G*S,X], row g*S + s, so that K and V are read once per KV head.
The softmax runs on the scores in that layout as Q.K^T makes them; what it
needs per query head or per query row (masks, biases, sinks) is regrouped to
match.
"""

from __future__ import annotations

from ...builder import Dim, Tensor, TorchBuilder
from .attention import static_or_neg1


def grouped(tb: TorchBuilder, x_BHSX: Tensor, Hkv: int) -> Tensor:
    """[B,H,S,X] -> [B,Hkv,G,S,X] -> [B,Hkv,G*S,X] (a reshape)."""
    return tb.flatten(tb.unflatten(x_BHSX, 1, [Hkv, -1]), 2, 3)


def ungrouped(tb: TorchBuilder, x_BHkvGSX: Tensor, G: int, S: Dim) -> Tensor:
    """[B,Hkv,G*S,X] -> [B,Hkv,G,S,X] -> [B,H,S,X] (a reshape)."""
    return tb.flatten(tb.unflatten(x_BHkvGSX, 2, [G, static_or_neg1(S)]), 1, 2)


def per_grouped_row(tb: TorchBuilder, x_B1SX: Tensor, G: int, S: Dim) -> Tensor:
    """What every head shares per query row, for the grouped rows: [B,1,S,X] -> [B,1,G*S,X].

    Copied G times along S (one query row: as it is, it broadcasts).  A
    broadcast reshaped into the rows would be no copy, but IREE 3.13's CPU
    dispatch formation then keeps the score mask's select out of the Q.K^T
    matmul: a pass of its own over the scores (benchmarks/README.md, "CPU,
    round 5").
    """
    return x_B1SX if G == 1 or (isinstance(S, int) and S == 1) else tb.cat([x_B1SX] * G, 2)


def grouped_per_head(tb: TorchBuilder, x_BHSX: Tensor, H: int, Hkv: int, S: Dim) -> Tensor:
    """A per-head, per-query-row tensor (a bias, a mask) for the grouped rows: [B|1,H|1,S|1,X] ->
    [B|1,Hkv|1,G*S,X]."""
    if not (isinstance(S, int) and x_BHSX.shape[2] == S):  # broadcast over the queries (or not known not to be)
        x_BHSX = tb.expand(x_BHSX, [-1, -1, S, -1])
    if x_BHSX.shape[1] == 1:  # shared by every head: per query row
        return per_grouped_row(tb, x_BHSX, H // Hkv, S)  # -> [B|1,1,G*S,X]
    return grouped(tb, tb.expand(x_BHSX, [-1, H, -1, -1]), Hkv)  # a dynamic head dim is H or 1


def grouped_sink(tb: TorchBuilder, sink_H: Tensor, Hkv: int, S: Dim) -> Tensor:
    """head_sink [H] per grouped row: -> [1,Hkv,G,1] -> [1,Hkv,G*S,1]."""
    sink_1HkvG1 = tb.unsqueeze(tb.unsqueeze(tb.unflatten(sink_H, 0, [Hkv, -1]), 0), 3)  # [H] -> [Hkv,G] -> [1,Hkv,G,1]
    if isinstance(S, int) and S == 1:
        return sink_1HkvG1
    sink_1HkvGS1 = tb.expand(tb.unsqueeze(sink_1HkvG1, 3), [-1, -1, -1, S, -1])  # -> [1,Hkv,G,1,1] -> [1,Hkv,G,S,1]
    return tb.flatten(sink_1HkvGS1, 2, 3)  # -> [1,Hkv,G*S,1]
