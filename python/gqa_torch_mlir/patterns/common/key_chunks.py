"""One block of query rows attended over a run-time number of keys in chunks of KEYS keys, each
chunk's shapes static, the softmax carried across them online (the decomposed forms' loop of a
run-time query length, common/query_blocks.py).

IREE 3.13's CPU code for a block over a run-time key count ran its matmuls
up to 1.4x and its softmax's row reductions about 6x slower than static
ones (benchmarks/README.md, "CPU, round 8" and "round 11").  Here each
chunk's Q.K^T is [G*Sb,Dh] x [Dh,KEYS] and its P.V [G*Sb,KEYS] x [KEYS,Dh];
only the number of chunks is a run-time value.  The keys are padded once to
whole chunks (zeros, invisible).  A 1024-token prefill on one thread took
20-28% less time; on two about the same (each iteration of a loop is a
submission of its own on IREE's runtime, which wakes the workers).

Per chunk, with the running maximum m (-inf at first), the running sum l and
the unnormalised output acc of each row:

    m' = max(m, max_t x_t)       the visible scores x_t of the chunk
    a  = e^(m - m')              (0 while m is -inf)
    l' = a l + sum_t e^(x_t - m')
    acc' = a acc + e^(x - m') . V

A row whose keys so far are all masked keeps m = -inf and subtracts 0 instead
(its e^x are then 0): a row with no visible key ends with l = 0 and an output
of 0, as the whole softmax's (attention.py's masked_exp).  A sink logit z
joins at the end: M = max(m, z), l'' = l e^(m - M) + e^(z - M).
"""

from __future__ import annotations

from typing import Callable, Optional

from ...builder import Dim, Tensor, TorchBuilder
from .query_blocks import padded_to_multiple

KEYS = 64  # keys per chunk: the blocks' step (ROWS), so a block reads no chunk past its last key; 128, 256 measured slower
NEG_INF = float("-inf")


def chunks_of(tb: TorchBuilder, keys: Dim) -> Dim:
    """ceil(keys / KEYS): the chunks that hold the keys [0, keys)."""
    return tb.dim_floordiv(tb.dim_add(keys, KEYS - 1), KEYS)


def padded_keys(tb: TorchBuilder, t: Tensor, dim: int) -> Tensor:
    """``t`` with its key ``dim`` padded to whole chunks, with zeros (false for a mask)."""
    return padded_to_multiple(tb, t, dim, tb.size(t, dim), KEYS)


def online_attention(tb: TorchBuilder, q_BHkvRDh: Tensor, k_BHkvTpDh: Tensor, v_BHkvTpDv: Tensor, visible_B1RTp: Tensor,
                     keys: Dim, scores: Callable[[TorchBuilder, Tensor], Tensor],
                     sink_BHkvR1: Optional[Tensor] = None) -> Tensor:
    """softmax(scores(Q.K^T) over the visible keys [0, ``keys``)) . V, f32, in chunks of KEYS keys:
    [B,Hkv,R,Dv].  R: grouped query rows; K/V/visible padded to whole chunks (:func:`padded_keys`)
    holding at least ``keys`` keys; ``scores(inner, qk)`` scales (and caps) one chunk's [B,Hkv,R,KEYS];
    ``sink_BHkvR1``: each row's sink logit, or None."""
    B, Hkv, R = (tb.size(q_BHkvRDh, d) for d in range(3))
    stats = [B, Hkv, R, 1]
    init = [tb.full_sized(stats, NEG_INF, "f32"), tb.full_sized(stats, 0.0, "f32"),
            tb.full_sized([B, Hkv, R, tb.size(v_BHkvTpDv, 3)], 0.0, "f32")]

    def chunk(inner: TorchBuilder, j, carried):
        max_BHkvR1, sum_BHkvR1, acc_BHkvRDv = carried
        start = inner.dim_mul(j, KEYS)
        k_BHkvCDh = inner.slice_rows(k_BHkvTpDh, 2, start, KEYS)  # [B,Hkv,Tp,Dh] -> [B,Hkv,KEYS,Dh]
        v_BHkvCDv = inner.slice_rows(v_BHkvTpDv, 2, start, KEYS)
        visible_B1RC = inner.slice_rows(visible_B1RTp, 3, start, KEYS)  # [B,1,R,Tp] -> [B,1,R,KEYS]
        qk_BHkvRC = scores(inner, inner.matmul(q_BHkvRDh, inner.transpose(k_BHkvCDh, 2, 3)))  # -> [B,Hkv,R,KEYS]
        masked_BHkvRC = inner.where_else_scalar(visible_B1RC, qk_BHkvRC, NEG_INF)
        new_max = inner.maximum(max_BHkvR1, inner.amax(masked_BHkvRC, 3))  # [B,Hkv,R,1]
        shift = finite_or_zero(inner, new_max)
        exp_BHkvRC = inner.exp(inner.sub(masked_BHkvRC, shift))
        rescale = inner.exp(inner.sub(max_BHkvR1, shift))  # e^(m - m'): 0 while m is -inf
        new_sum = inner.add(inner.mul(sum_BHkvR1, rescale), inner.sum_dim(exp_BHkvRC, 3))
        new_acc = inner.add(inner.mul(acc_BHkvRDv, rescale), inner.matmul(exp_BHkvRC, v_BHkvCDv))  # + [R,KEYS] x [KEYS,Dv]
        return [new_max, new_sum, new_acc]

    max_BHkvR1, sum_BHkvR1, acc_BHkvRDv = tb.loop_each(chunks_of(tb, keys), init, chunk)
    if sink_BHkvR1 is not None:
        sum_BHkvR1, acc_BHkvRDv = with_sink(tb, max_BHkvR1, sum_BHkvR1, acc_BHkvRDv, sink_BHkvR1)
    denom_BHkvR1 = tb.where_scalar_else(tb.eq_scalar(sum_BHkvR1, 0.0), 1.0, sum_BHkvR1)  # no visible key: 0 / 1
    return tb.div(acc_BHkvRDv, denom_BHkvR1)


def finite_or_zero(tb: TorchBuilder, max_BR1: Tensor) -> Tensor:
    """The running maximum to subtract: 0 for a row with no visible key yet (-inf - -inf is NaN)."""
    return tb.where_scalar_else(tb.eq_scalar(max_BR1, NEG_INF), 0.0, max_BR1)


def with_sink(tb: TorchBuilder, max_BR1: Tensor, sum_BR1: Tensor, acc_BRD: Tensor, sink_BR1: Tensor):
    """The sum and output rescaled to M = max(m, z), the sum gaining e^(z - M); a row with no
    visible key (m = -inf, l = 0) is rescaled by 0, not by e^(0 - M), which may overflow."""
    shift = finite_or_zero(tb, tb.maximum(max_BR1, sink_BR1))
    rescale = tb.where_scalar_else(tb.eq_scalar(max_BR1, NEG_INF), 0.0, tb.exp(tb.sub(max_BR1, shift)))
    sum_BR1 = tb.add(tb.mul(sum_BR1, rescale), tb.exp(tb.sub(sink_BR1, shift)))
    return sum_BR1, tb.mul(acc_BRD, rescale)
