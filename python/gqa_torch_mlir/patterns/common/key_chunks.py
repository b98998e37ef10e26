"""One block of query rows attended over a run-time number of keys in chunks of KEYS keys, each
chunk's shapes static, the softmax carried across them online (the decomposed forms' loop of a
run-time query length on the CPU, common/query_blocks.py: GroupQueryAttention's, and the
standard Attention's in f32).

IREE 3.13's CPU code for a block over a run-time key count ran its matmuls
up to 1.4x and its softmax's row reductions about 6x slower than static
ones (benchmarks/README.md, "CPU, round 8" and "round 11").  Here each
chunk's Q.K^T is [G*Sb,Dh] x [Dh,KEYS] and its P.V [G*Sb,KEYS] x [KEYS,Dh];
only the number of chunks is a run-time value.  The keys are padded once to
whole chunks (zeros, which the caller's scores exclude).  A 1024-token
prefill on one thread took 20-28% less time; on two about the same (each
iteration of a loop is a submission of its own on IREE's runtime, which
wakes the workers).

Per chunk, with the running maximum m (-inf at first), the running sum l and
the unnormalised output acc of each row:

    m' = max(m, max_t x_t)       the chunk's scores x_t, -inf where a key is not seen
    a  = e^(m - m')              (0 while m is -inf)
    l' = a l + sum_t e^(x_t - m')
    acc' = a acc + e^(x - m') . V

A row whose keys so far are all masked keeps m = -inf and subtracts 0 instead
(its e^x are then 0): a row with no visible key ends with l = 0 and an output
of 0, as the whole softmax's (attention.py's masked_exp).  An excluded key
may also carry the lowest finite value instead (the standard Attention's
bias): while a row has seen no other key it counts, and the first key it
does see rescales it away (a = e^(lowest - m') = 0), as in the whole
softmax, where e^(lowest - max) is 0.  A sink logit z joins at the end:
M = max(m, z), l'' = l e^(m - M) + e^(z - M).
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


def padded_keys(tb: TorchBuilder, t: Tensor, dim: int, value: float = 0.0) -> Tensor:
    """``t`` with its key ``dim`` padded to whole chunks, with ``value`` (false for a mask)."""
    return padded_to_multiple(tb, t, dim, tb.size(t, dim), KEYS, value)


def online_attention(tb: TorchBuilder, q_BHkvRDh: Tensor, k_BHkvTpDh: Tensor, v_BHkvTpDv: Tensor, keys: Dim,
                     chunk_scores: Callable[[TorchBuilder, Tensor, Dim], Tensor],
                     sink_BHkvR1: Optional[Tensor] = None) -> Tensor:
    """softmax(scores) . V over the keys [0, ``keys``), f32, in chunks of KEYS keys: [B,Hkv,R,Dv].
    R: grouped query rows; K/V padded to whole chunks (:func:`padded_keys`) holding at least
    ``keys`` keys; ``chunk_scores(inner, qk, start)`` makes the chunk of keys [start, start + KEYS)
    from its Q.K^T [B,Hkv,R,KEYS] as the softmax takes it: scaled (capped, biased), and -inf (or
    the lowest finite value) at every key a row does not see, the padding too (:func:`chunk`
    slices a mask or bias padded alike); ``sink_BHkvR1``: each row's sink logit, or None."""
    B, Hkv, R = (tb.size(q_BHkvRDh, d) for d in range(3))
    stats = [B, Hkv, R, 1]
    init = [tb.full_sized(stats, NEG_INF, "f32"), tb.full_sized(stats, 0.0, "f32"),
            tb.full_sized([B, Hkv, R, tb.size(v_BHkvTpDv, 3)], 0.0, "f32")]

    def step(inner: TorchBuilder, j, carried):
        max_BHkvR1, sum_BHkvR1, acc_BHkvRDv = carried
        start = inner.dim_mul(j, KEYS)
        k_BHkvCDh = chunk(inner, k_BHkvTpDh, 2, start)  # [B,Hkv,Tp,Dh] -> [B,Hkv,KEYS,Dh]
        v_BHkvCDv = chunk(inner, v_BHkvTpDv, 2, start)
        qk_BHkvRC = inner.matmul(q_BHkvRDh, inner.transpose(k_BHkvCDh, 2, 3))  # -> [B,Hkv,R,KEYS]
        masked_BHkvRC = chunk_scores(inner, qk_BHkvRC, start)
        new_max = inner.maximum(max_BHkvR1, inner.amax(masked_BHkvRC, 3))  # [B,Hkv,R,1]
        shift = finite_or_zero(inner, new_max)
        exp_BHkvRC = inner.exp(inner.sub(masked_BHkvRC, shift))
        rescale = inner.exp(inner.sub(max_BHkvR1, shift))  # e^(m - m'): 0 while m is -inf
        new_sum = inner.add(inner.mul(sum_BHkvR1, rescale), inner.sum_dim(exp_BHkvRC, 3))
        new_acc = inner.add(inner.mul(acc_BHkvRDv, rescale), inner.matmul(exp_BHkvRC, v_BHkvCDv))  # + [R,KEYS] x [KEYS,Dv]
        return [new_max, new_sum, new_acc]

    max_BHkvR1, sum_BHkvR1, acc_BHkvRDv = tb.loop_each(chunks_of(tb, keys), init, step)
    if sink_BHkvR1 is not None:
        sum_BHkvR1, acc_BHkvRDv = with_sink(tb, max_BHkvR1, sum_BHkvR1, acc_BHkvRDv, sink_BHkvR1)
    denom_BHkvR1 = tb.where_scalar_else(tb.eq_scalar(sum_BHkvR1, 0.0), 1.0, sum_BHkvR1)  # no visible key: 0 / 1
    return tb.div(acc_BHkvRDv, denom_BHkvR1)


def chunk(tb: TorchBuilder, t: Tensor, dim: int, start: Dim) -> Tensor:
    """The keys [start, start + KEYS) of ``t``'s key ``dim`` (padded to whole chunks)."""
    return tb.slice_rows(t, dim, start, KEYS)


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
