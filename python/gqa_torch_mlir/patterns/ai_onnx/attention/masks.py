"""Which keys each query sees: attn_mask, is_causal and nonpad_kv_seqlen, as onnxruntime's kernel composes them.

    bias [B|1,H|1,S,T] (Q's type): a float attn_mask's values, or 0; the lowest finite
        value of the type where a boolean mask is false or causality excludes the key
        (key t > query s + offset; offset = P with a past, nonpad[b] - S with
        nonpad_kv_seqlen, else 0)
    nonpad [B,1,1,T]: keys t >= nonpad_kv_seqlen[b], overwritten with the lowest
        value after the bias is added (mode 2's qk_matmul_output shows them so)
    full_rows [B|1,H|1,S,1]: rows whose every key is excluded (bias <= lowest, or
        nonpad): onnxruntime's output row is 0 there, not NaN nor a uniform average

The kernel (f16, f32) accepts these mask shapes only (it rejects the others):
[S,T], [H|1,S,T], [B|1,H|1,S,T], boolean or of Q's type; f64 runs the op's
function body in onnxruntime, which broadcasts any mask of rank 1 to 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from ....builder import Dim, Tensor, TorchBuilder
from ....registry import Refusal
from .inputs import AttentionInputs, same
from .support import OP, AttentionAttributes, excluded_value, lowest


@dataclass
class KeyMask:
    bias: Optional[Tensor]  # Q's type [B|1,H|1,S,T]
    nonpad_excluded: Optional[Tensor]  # i1 [B,1,1,T]
    full_rows: Tensor  # i1 [B|1,H|1,S,1]


def key_mask(tb: TorchBuilder, attrs: AttentionAttributes, ins: AttentionInputs, T: Dim, P: Dim) -> Optional[KeyMask]:
    """The mask of the step's scores [B,H,S,T], or None when every key is seen."""
    dtype, S = ins.query_BHSDh.dtype, tb.size(ins.query_BHSDh, 2)
    excluded: List[Tensor] = []
    float_mask = None
    if ins.attn_mask is not None:
        mask_BHST = checked_mask(tb, attrs, ins, S, T)
        if mask_BHST.dtype == "i1":
            excluded.append(tb.logical_not(mask_BHST))
        else:
            float_mask = mask_BHST
    if attrs.is_causal and not causal_is_void(tb, ins):
        excluded.append(causal_excluded(tb, attrs, ins, S, T, P))
    nonpad_BT = nonpad_excluded(tb, ins, T) if ins.nonpad_B is not None else None
    if not excluded and float_mask is None and nonpad_BT is None:
        return None
    bias = None
    if excluded or float_mask is not None:
        bias = compose_bias(tb, excluded, float_mask, dtype, excluded_value(attrs, dtype))
    return KeyMask(bias, nonpad_BT, full_rows(tb, attrs, bias, nonpad_BT, dtype))


def checked_mask(tb: TorchBuilder, attrs: AttentionAttributes, ins: AttentionInputs, S: Dim, T: Dim) -> Tensor:
    """attn_mask as [B|1,H|1,S|1,T]: fewer dims gain leading 1s.

    The kernel takes [S,T], [H|1,S,T] and [B|1,H|1,S,T], boolean or of Q's type; the function
    body any mask of rank 1 to 4 broadcast to [B,H,S,T], of any type (added in Q's type), and at
    opset 24 a last dim shorter than T (padded with -inf).
    """
    mask, slot, q = ins.attn_mask, 3, ins.query_BHSDh
    subject = "input 3 'attn_mask'"
    if mask.rank not in ((1, 2, 3, 4) if attrs.body else (2, 3, 4)):
        forms = "[T] to [B|1,H|1,S|1,T]" if attrs.body else "[S,T], [H|1,S,T] or [B|1,H|1,S,T]"
        raise Refusal(f"rank {mask.rank} is not supported; supported: {forms} (onnxruntime rejects others)", subject)
    if mask.dtype.startswith(("si", "ui")) and (ins.nonpad_B is not None or attrs.is_causal):
        raise Refusal(f"type {mask.dtype} with is_causal or nonpad_kv_seqlen is not supported; supported: a bool or float mask "
                      "(onnxruntime's function body combines an integer mask with those unlike the spec)", subject)
    if mask.dtype not in ("i1", q.dtype):  # the function body adds it in Q's type
        mask = tb.to_dtype(mask, q.dtype)
    while mask.rank < 4:
        mask = tb.unsqueeze(mask, 0)  # -> [1,..,T]
    mask = checked_last_dim(tb, attrs, mask, T, subject, q.dtype)
    if not attrs.body:
        same(tb, mask, 2, q, 2, slot, "dimension -2 (the query length)")
    targets = ((2, S, "query length"), (1, ins.H, "query heads"), (0, tb.size(q, 0), "batch size"))
    for d, n, what in targets[0 if attrs.body else 1:]:
        if mask.shape[d] == 1:
            continue
        if mask.shape[d] is not None and isinstance(n, int) and mask.shape[d] != n:
            raise Refusal(f"dimension {d - 4} ({mask.shape[d]}) is neither 1 nor the {what} ({n}) (onnxruntime rejects it)", subject)
        tb.check_dim(mask, d, n, f"{OP}: {subject} dimension {d - 4} must be 1 or the {what} (a dynamic size is checked to be the latter)")
    return mask


def checked_last_dim(tb: TorchBuilder, attrs: AttentionAttributes, mask: Tensor, T: Dim, subject: str, dtype: str) -> Tensor:
    """The mask's key dim: T, or (the function body, opset 24) up to T, padded to T with -inf (False)."""
    short = attrs.body and attrs.opset >= 24
    n = mask.shape[3]
    if n is not None and isinstance(T, int) and (n > T if short else n != T):
        allowed = f"at most the total sequence length ({T})" if short else f"exactly the total sequence length ({T})"
        raise Refusal(f"dimension -1 ({n}) is not supported; supported: {allowed} (onnxruntime rejects others)", subject)
    if not short:
        tb.check_dim(mask, 3, T, f"{OP}: {subject} dimension -1 must be the total sequence length (onnxruntime rejects others)")
        return mask
    tb.runtime_assert(tb.dim_le(tb.size(mask, 3), T), f"{OP}: {subject} dimension -1 must be at most the total sequence length")
    if mask.dtype == "i1":
        mask = tb.where_scalars(mask, 0.0, float("-inf"), dtype)  # a bool mask as Q's-type bias
    missing = tb.dim_sub(T, tb.size(mask, 3))
    if missing == 0:
        return mask
    return tb.pad_dim_end(mask, 3, missing, float("-inf"))  # [..,n] -> [..,T]


def causal_is_void(tb: TorchBuilder, ins: AttentionInputs) -> bool:
    """One new key after a past (a decode step): query s sees keys t <= s + P, and T - 1 = P, so none is excluded."""
    return ins.nonpad_B is None and ins.past_key_BHkvPDh is not None and ins.key_BHkvLDh.shape[2] == 1


def causal_excluded(tb: TorchBuilder, attrs: AttentionAttributes, ins: AttentionInputs, S: Dim, T: Dim, P: Dim) -> Tensor:
    """i1 [1|B,1,S,T]: key t > query s + offset."""
    if not attrs.body:  # the function body applies the spec's mask there too
        check_single_query_decode(tb, ins, S, P)
    rows_S1 = tb.unsqueeze(tb.arange(S), 1)  # [S] -> [S,1]
    if ins.nonpad_B is not None:  # offset = nonpad[b] - S, per batch row
        offset_B = tb.add_scalar(ins.nonpad_B, tb.dim_sub(0, S))
        last_BS1 = tb.add(tb.unsqueeze(tb.unsqueeze(offset_B, 1), 2), rows_S1)  # [B,1,1] + [S,1] -> [B,S,1]
        return tb.unsqueeze(tb.ge(tb.unsqueeze(tb.arange(T), 0), tb.add_scalar(last_BS1, 1)), 1)  # t > s + offset: [B,S,T] -> [B,1,S,T]
    last_S1 = tb.add_scalar(rows_S1, P) if P != 0 else rows_S1  # s + offset
    excluded_ST = tb.ge(tb.unsqueeze(tb.arange(T), 0), tb.add_scalar(last_S1, 1))  # [1,T] >= [S,1] + 1 -> [S,T]
    return tb.unsqueeze(tb.unsqueeze(excluded_ST, 0), 0)  # -> [1,1,S,T]


def check_single_query_decode(tb: TorchBuilder, ins: AttentionInputs, S: Dim, P: Dim) -> None:
    """One query after a past with several new keys: onnxruntime skips the causal mask (the spec applies it).

    With one new key the two agree (every key is at or before the query); with more, the
    results differ, so the case is refused rather than computed either way.
    """
    if ins.past_key_BHkvPDh is None:
        return
    L = tb.size(ins.key_BHkvLDh, 2)
    conditions = [(S, 1, "eq"), (P, 1, "ge"), (L, 2, "ge")]
    if any(isinstance(d, int) and not (d == v if op == "eq" else d >= v) for d, v, op in conditions):
        return
    if all(isinstance(d, int) for d, _, _ in conditions):
        raise Refusal("is_causal with one query after a past and several new keys: onnxruntime skips the causal mask "
                      "there, the spec applies it; supported: S > 1, or a single new key", "attribute 'is_causal'")
    bad = None
    for d, v, op in conditions:
        if isinstance(d, int):
            continue
        t = tb.dim_tensor(d)
        flag = tb.eq_scalar(t, v) if op == "eq" else tb.ge_scalar(t, v)
        bad = flag if bad is None else tb.logical_and(bad, flag)
    tb.runtime_check(tb.logical_not(bad), f"{OP}: is_causal with one query after a past and several new keys is not supported "
                     "(onnxruntime skips the causal mask there, the spec applies it)")


def nonpad_excluded(tb: TorchBuilder, ins: AttentionInputs, T: Dim) -> Tensor:
    """i1 [B,1,1,T]: keys t >= nonpad_kv_seqlen[b], which must lie in [0, T] (onnxruntime rejects others)."""
    tb.runtime_check(tb.in_range(ins.nonpad_B, 0, T), f"{OP}: nonpad_kv_seqlen values must lie in [0, total sequence length] (onnxruntime rejects others)")
    lens_B1 = tb.unsqueeze(ins.nonpad_B, 1)  # [B] -> [B,1]
    excluded_BT = tb.ge(tb.unsqueeze(tb.arange(T), 0), lens_B1)  # [1,T] >= [B,1] -> [B,T]
    return tb.unsqueeze(tb.unsqueeze(excluded_BT, 1), 1)  # -> [B,1,1,T]


def compose_bias(tb: TorchBuilder, excluded: List[Tensor], float_mask: Optional[Tensor], dtype: str, value: float) -> Tensor:
    """The float mask (or 0) with ``value`` (lowest, or -inf) where any exclusion holds."""
    any_excluded = excluded[0] if excluded else None
    for e in excluded[1:]:
        any_excluded = tb.logical_or(any_excluded, e)
    if float_mask is not None and float_mask.dtype != dtype:
        float_mask = tb.to_dtype(float_mask, dtype)
    if float_mask is None:
        return tb.where_scalars(any_excluded, value, 0.0, dtype)
    if any_excluded is None:
        return float_mask
    return tb.where_scalar_else(any_excluded, value, float_mask)


def full_rows(tb: TorchBuilder, attrs: AttentionAttributes, bias: Optional[Tensor], nonpad_BT: Optional[Tensor], dtype: str) -> Tensor:
    """i1 [..,S,1]: no key of the row has a bias above the lowest value (the function body: above -inf),
    nor is before nonpad."""
    floor = np.array(lowest(dtype), dtype=_NP[dtype])
    above = float(floor if attrs.body else np.nextafter(floor, np.array(0, dtype=_NP[dtype])))
    seen = tb.logical_not(tb.lt_float(bias, above)) if bias is not None else None  # NaN counts as seen, as onnxruntime's
    if nonpad_BT is not None:
        kept = tb.logical_not(nonpad_BT)
        seen = kept if seen is None else tb.logical_and(seen, kept)
    any_seen = tb.amax(tb.to_dtype(seen, "f32"), 3)  # [..,S,T] -> [..,S,1]
    return tb.lt_float(any_seen, 0.5)


_NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
