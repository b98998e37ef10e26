"""GroupQueryAttention's window-sized KV cache (``sliding_window_cache = 1``).

The past/present buffers hold ``C`` rows (the capacity, ``C >= W``, ``W =
local_window_size``).  After ``T`` tokens a batch row keeps the ``L(T)`` most
recent positions at rows ``[0, L)``, row ``r`` holding absolute position
``T - L + r`` (onnxruntime's schema)::

    G = C - W + 1
    L(T) = T                            if T <= C
    L(T) = T - G * ceil((T - C) / G)    otherwise

A step of S tokens is staged: the new rows are scattered after the resident
ones, ``X = [past rows [0, L(Tp)) | new rows]`` with ``Tp = T - S`` tokens
before the step, so row ``r`` of X holds absolute position
``base + r``, ``base = Tp - L(Tp)``.  Attention reads X with the usual
window over absolute positions, and the new buffer is the rows of X holding
``[T - L(T), T)``, gathered to start at row 0.  Rows past ``L(T)`` are
unspecified, as in onnxruntime.

Letters: B batch, Hkv kv heads, C capacity, S new tokens, X = C + S staged
rows, Dc stored row width.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....builder import Dim, Tensor, TorchBuilder
from .checks import check_window_lengths
from .inputs import CacheStep
from .kv_cache import past_caches


@dataclass
class WindowPlan:
    """Where this step's rows go and which rows stay, shared by K and V."""

    S: Dim
    write_index_BHkvSDc: Tensor  # new token s of row b -> staged row L(Tp) + s
    keep_index_BHkvCDc: Tensor  # present row j <- staged row T - L(T) - base + j (clamped in bounds)
    key_abs_B1X: Tensor  # si64: absolute position of each staged row
    staged_first_B: Tensor  # si64: absolute position of staged row 0, Tp - L(Tp)
    kept_first_B: Tensor  # si64: absolute position of the new buffer's row 0, T - L(T)

    def values_read_from(self, tb: TorchBuilder, window_first_B1: Tensor) -> Tensor:
        """si64 [B,1]: the first position onnxruntime's P.V reads, given the lowest first key of the
        step's queries' windows.  When the new buffer holds every key the step's queries see, its
        P.V spans the new buffer's rows [T - L(T), T), else every staged row [Tp - L(Tp), T).
        Either may start before the windows: a NaN value there reaches all of the step's queries.
        """
        kept_B1, staged_B1 = tb.unsqueeze(self.kept_first_B, 1), tb.unsqueeze(self.staged_first_B, 1)
        return tb.where(tb.le(kept_B1, window_first_B1), kept_B1, staged_B1)  # [B,1]

    def apply(self, tb: TorchBuilder, past_BHkvCDc: Tensor, new_BHkvSDc: Tensor):
        """(staged rows X [B,Hkv,C+S,Dc] for attention, the new buffer [B,Hkv,C,Dc])."""
        staged_BHkvXDc = tb.scatter_src(tb.pad_dim_end(past_BHkvCDc, 2, self.S), 2, self.write_index_BHkvSDc, new_BHkvSDc)
        return staged_BHkvXDc, tb.gather(staged_BHkvXDc, 2, self.keep_index_BHkvCDc)


def resident_rows(tb: TorchBuilder, tokens_B: Tensor, C: Dim, W: int) -> Tensor:
    """L(T) per batch row, si64 [B].

    Past the capacity, ``L(T) = C - G + 1 + ((T - C - 1) mod G)``, the closed form above without
    a division: IREE lowers an integer division through f32 (wrong past 2^24), ``remsi`` is exact.
    """
    G = tb.dim_max(tb.dim_add(tb.dim_sub(C, W), 1), 1)  # C - W + 1 (>= 1: a capacity below W fails a run-time check)
    behind_B = tb.remainder_scalar(tb.add_scalar(tokens_B, tb.dim_sub(-1, C)), G)  # (T - C - 1) mod G, in [0, G)
    evicted_B = tb.add_scalar(behind_B, tb.dim_add(tb.dim_sub(C, G), 1))  # L(T) for T > C
    return tb.where(tb.le_scalar(tokens_B, C), tokens_B, evicted_B)


def plan_window(tb: TorchBuilder, past_BHkvCDc: Tensor, past_len_B: Tensor, seqlens_B: Tensor, S: Dim, W: int) -> WindowPlan:
    """Tp = past_len[b] tokens before the step, T = seqlens_k[b] + 1 after it."""
    C = tb.size(past_BHkvCDc, 2)
    Hkv, Dc = past_BHkvCDc.shape[1], past_BHkvCDc.shape[3]
    tokens_B = tb.add_scalar(seqlens_B, 1)
    resident_before_B = resident_rows(tb, past_len_B, C, W)  # L(Tp)
    X = tb.dim_add(C, S)
    write_row_BS = tb.add(tb.unsqueeze(resident_before_B, 1), tb.arange(S))  # L(Tp) + s: [B,S]
    write_row_BS = tb.clamp_int(write_row_BS, 0, tb.dim_sub(X, 1))  # in bounds whatever the lengths hold
    base_B = tb.sub(past_len_B, resident_before_B)  # absolute position of staged row 0: Tp - L(Tp)
    key_abs_BX = tb.add(tb.unsqueeze(base_B, 1), tb.arange(X))  # base + r: [B,X]
    kept_first_B = tb.sub(tokens_B, resident_rows(tb, tokens_B, C, W))  # T - L(T)
    first_kept_row_B = tb.sub(kept_first_B, base_B)  # T - L(T) - base
    keep_row_BC = tb.clamp_int(tb.add(tb.unsqueeze(first_kept_row_B, 1), tb.arange(C)), 0, tb.dim_sub(X, 1))  # [B,C]
    return WindowPlan(
        S=S,
        write_index_BHkvSDc=_rows_to_index(tb, write_row_BS, Hkv, Dc),
        keep_index_BHkvCDc=_rows_to_index(tb, keep_row_BC, Hkv, Dc),
        key_abs_B1X=tb.unsqueeze(key_abs_BX, 1),
        staged_first_B=base_B,
        kept_first_B=kept_first_B,
    )


def _rows_to_index(tb: TorchBuilder, rows_BN: Tensor, Hkv: int, Dc: int) -> Tensor:
    """Row numbers [B,N] as a dim-2 scatter/gather index [B,Hkv,N,Dc]."""
    return tb.expand(tb.unsqueeze(tb.unsqueeze(rows_BN, 1), 3), [-1, Hkv, -1, Dc])


def window_cache_step(tb, b, attrs, ins, step, key_BHkvSDc, value_BHkvSDc) -> CacheStep:
    """A window-sized buffer: attention reads the staged rows, the buffer keeps the resident ones (the plan above)."""
    past_key, past_value = past_caches(tb, ins, attrs)
    check_window_lengths(tb, step, past_key, attrs.local_window_size, ins.query_seqlens is not None)
    plan = plan_window(tb, past_key, step.past_len_B, step.seqlens_B, step.S, attrs.local_window_size)
    read_key_BHkvXDc, present_key_BHkvCDc = plan.apply(tb, past_key, key_BHkvSDc)
    read_value_BHkvXDc, present_value_BHkvCDc = plan.apply(tb, past_value, value_BHkvSDc)
    return CacheStep(present_key_BHkvCDc, present_value_BHkvCDc, read_key_BHkvXDc, read_value_BHkvXDc, plan.key_abs_B1X, plan)
