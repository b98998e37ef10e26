"""Which cache rows each query sees and each batch row reads; attention_bias laid over the read rows."""

from __future__ import annotations

from typing import Optional

from ....builder import Tensor, TorchBuilder
from .inputs import CacheStep, GqaInputs, Step
from .support import GqaAttributes


def read_rows(tb: TorchBuilder, step: Step, cache: CacheStep, attrs: GqaAttributes):
    """i1 [B,1,T] twice: the key rows and the value rows onnxruntime reads for batch row b.

    Both are positions <= seqlens_k[b].  In a window cache (W =
    local_window_size) the keys are also >= the lowest first key of the
    step's windows, min_s(hi) + 1 - W, and the values start where
    onnxruntime's P.V does (``WindowPlan.values_read_from``).  Ours span all T
    rows with probability 0 past them, and 0 * NaN is NaN: a NaN in a row b
    never reads (a shorter row of a ragged batch, a shared buffer's unused
    rows, a row the window left behind) must not reach b's output.
    ``cache.key_pos``: [T], or per batch row [B,1,T] (window cache).
    """
    key_pos = cache.key_pos
    last_B11 = tb.unsqueeze(tb.unsqueeze(step.seqlens_B, 1), 2)  # [B] -> [B,1,1]
    read_B1T = tb.le(key_pos, last_B11)  # [T] or [B,1,T] <= [B,1,1] -> [B,1,T]
    if cache.window is None:  # onnxruntime's P.V over a growing or fixed cache spans every row up to seqlens_k
        return read_B1T, read_B1T
    hi_BS = tb.minimum(step.position_BS, tb.unsqueeze(step.seqlens_B, 1))  # [B,S]
    window_first_B1 = tb.add_scalar(tb.amin(hi_BS, 1), 1 - attrs.local_window_size)  # [B,S] -> [B,1]
    values_first_B1 = cache.window.values_read_from(tb, window_first_B1)  # [B,1]
    keys_B1T = tb.logical_and(read_B1T, tb.ge(key_pos, tb.unsqueeze(window_first_B1, 2)))  # vs [B,1,1]
    values_B1T = tb.logical_and(read_B1T, tb.ge(key_pos, tb.unsqueeze(values_first_B1, 2)))
    return keys_B1T, values_B1T


def reads_a_prefix(attrs: GqaAttributes) -> bool:
    """Whether every batch row reads a prefix [0, n) of the rows (all but a window cache)."""
    return not attrs.window_cache


def zero_unread_rows(tb: TorchBuilder, read_B1T: Tensor, x_BHkvTD: Tensor) -> Tensor:
    """``x`` with the rows batch row b does not read set to 0 (a select over the whole tensor)."""
    return tb.where_else_scalar(tb.unsqueeze(read_B1T, 3), x_BHkvTD, 0.0)  # [B,1,T,1] ? x : 0


def visible_keys(tb: TorchBuilder, step: Step, attrs: GqaAttributes, key_pos_T: Tensor) -> Tensor:
    """i1 [B,S,T]: which cache rows each query attends (see the module docstring).

    ``key_pos_T`` is each row's absolute position: [T] for a cache indexed by
    position, [B,1,T] for the staged rows of a window cache.
    """
    seqlens_B1 = tb.unsqueeze(step.seqlens_B, 1)  # [B] -> [B,1]
    if not attrs.causal:  # every valid key, for every query: t <= seqlens_k[b]
        visible_B1T = tb.le(key_pos_T, tb.unsqueeze(seqlens_B1, 2))  # [T] vs [B,1,1] -> [B,1,T]
        return tb.expand(visible_B1T, [-1, step.S, -1])  # -> [B,S,T]
    last_key_BS = tb.minimum(step.position_BS, seqlens_B1)  # hi = min(i, seqlens_k[b]): [B,S]
    last_key_BS1 = tb.unsqueeze(last_key_BS, 2)  # [B,S,1]
    visible_BST = tb.le(key_pos_T, last_key_BS1)  # t <= hi: [T] vs [B,S,1] -> [B,S,T]
    if attrs.local_window_size >= 0:
        first_key_BS1 = tb.add_scalar(last_key_BS1, 1 - attrs.local_window_size)  # hi + 1 - W
        visible_BST = tb.logical_and(visible_BST, tb.ge(key_pos_T, first_key_BS1))
    return visible_BST


def checked_bias(tb: TorchBuilder, ins: GqaInputs, step: Step) -> Optional[Tensor]:
    """attention_bias, with its last dim checked against total_sequence_length at run time."""
    bias = ins.attention_bias
    if bias is not None:
        tb.runtime_check(
            tb.eq_scalar(step.total, tb.size(bias, 3)),
            "GroupQueryAttention: attention_bias's last dimension must equal total_sequence_length",
        )
    return bias


def padded_bias(tb: TorchBuilder, ins: GqaInputs, step: Step, present_BHkvTDh: Tensor) -> Optional[Tensor]:
    """attention_bias [B|1,H|1,S,Tt] padded with zeros to the cache's T key columns."""
    bias = checked_bias(tb, ins, step)
    if bias is None:
        return None
    T, Tt = present_BHkvTDh.shape[2], bias.shape[3]
    if T is not None and Tt is not None:
        extra = max(T - Tt, 0)
    else:  # never negative, whatever the run-time sizes
        extra = tb.dim_max(tb.dim_sub(tb.size(present_BHkvTDh, 2), tb.size(bias, 3)), 0)
    return bias if extra == 0 else tb.pad_dim_end(bias, 3, extra)


def window_bias(tb: TorchBuilder, ins: GqaInputs, step: Step, key_abs_B1X: Tensor) -> Optional[Tensor]:
    """attention_bias columns for a window cache's staged rows: [B|1,H|1,S,Tt] -> [B,H|1,S,X].

    Its last dim is indexed by absolute key position (onnxruntime's schema);
    positions past it are never visible, so the index is clamped in bounds.
    """
    bias = checked_bias(tb, ins, step)
    if bias is None:
        return None
    B = tb.size(ins.query, 0)
    bias_BHSTt = tb.expand(bias, [B, -1, -1, -1])  # a batch dim of 1 broadcasts
    column_B11X = tb.clamp_int(tb.unsqueeze(key_abs_B1X, 1), 0, tb.dim_sub(tb.size(bias, 3), 1))
    column_BHSX = tb.expand(column_B11X, [-1, bias.shape[1], step.S, -1])
    return tb.gather(bias_BHSTt, 3, column_BHSX)
