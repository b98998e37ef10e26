"""The attention itself, in onnxruntime's kernel order, on grouped queries (or through SDPA).

    scores = scale * Q.K^T          [B,H,S,T]  (qk_matmul_output mode 0)
    scores = softcap(scores)                    (mode 1; only when softcap > 0)
    scores = scores + bias; nonpad keys set to the lowest value   (mode 2)
    probs  = softmax(scores); rows with no key seen -> 0          (mode 3)
    Y      = probs . V              [B,H,S,Dv]

Computed in f32 (f64 for f64 inputs); after each stage the value is rounded
to Q's type, as the kernel stores each stage.  Query heads are regrouped by
their KV head, [B,H,S,Dh] -> [B,Hkv,G*S,Dh], so K/V are read once per KV
head and never repeated.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from ....builder import Tensor, TorchBuilder
from ...common.attention import soft_cap, static_or_neg1, unless_empty
from .masks import KeyMask
from .support import AttentionAttributes, excluded_value


def compute_dtype(dtype: str) -> str:
    return "f64" if dtype == "f64" else "f32"


def effective_scale(attrs: AttentionAttributes, Dh: int) -> float:
    """The scale attribute, or 1/sqrt(Dh) computed in double then rounded to float (as onnxruntime)."""
    return attrs.scale if attrs.scale_given else float(_f32(1.0 / math.sqrt(Dh)))


def grouped_attention(tb: TorchBuilder, attrs: AttentionAttributes, q_BHSDh: Tensor, k_BHkvTDh: Tensor, v_BHkvTDv: Tensor,
                      mask: Optional[KeyMask]) -> Tuple[Tensor, Optional[Tensor]]:
    """Y [B,H,S,Dv] and qk_matmul_output [B,H,S,T] (None unless requested), in Q's type."""
    dtype, ct = q_BHSDh.dtype, compute_dtype(q_BHSDh.dtype)
    H, Hkv, S = q_BHSDh.shape[1], k_BHkvTDh.shape[1], q_BHSDh.shape[2]
    G = H // Hkv

    def stored(t: Tensor) -> Tensor:  # rounded to Q's type, computed on in ct
        return t if dtype == ct else tb.to_dtype(tb.to_dtype(t, dtype), ct)

    q, k, v = (tb.to_dtype(t, ct) for t in (q_BHSDh, k_BHkvTDh, v_BHkvTDv))
    q_BHkvGSDh = tb.flatten(tb.unflatten(q, 1, [Hkv, G]), 2, 3)  # [B,H,S,Dh] -> [B,Hkv,G,S,Dh] -> [B,Hkv,G*S,Dh]
    scores_BHkvGST = tb.matmul(q_BHkvGSDh, tb.transpose(k, 2, 3))  # x [B,Hkv,Dh,T] -> [B,Hkv,G*S,T]
    scores_BHST = tb.flatten(tb.unflatten(scores_BHkvGST, 2, [G, static_or_neg1(S)]), 1, 2)  # -> [B,Hkv,G,S,T] -> [B,H,S,T]
    stages = {}
    scores_BHST = stages[0] = stored(tb.mul_scalar(scores_BHST, effective_scale(attrs, q.shape[3])))
    if attrs.softcap > 0:
        scores_BHST = stored(soft_cap(tb, scores_BHST, attrs.softcap))
    stages[1] = scores_BHST
    if mask is not None and mask.bias is not None:
        scores_BHST = stored(tb.add(scores_BHST, tb.to_dtype(mask.bias, ct)))
    if mask is not None and mask.nonpad_excluded is not None:
        scores_BHST = tb.where_scalar_else(mask.nonpad_excluded, excluded_value(attrs, dtype), scores_BHST)
    stages[2] = scores_BHST
    if attrs.softmax_f32:  # f64 asked to run its softmax in float
        probs_BHST = tb.to_dtype(softmax(tb, tb.to_dtype(scores_BHST, "f32")), ct)
    else:
        probs_BHST = softmax(tb, scores_BHST)
    if mask is not None:
        probs_BHST = tb.where_scalar_else(mask.full_rows, 0.0, probs_BHST)  # onnxruntime's zero rows
    probs_BHST = stages[3] = stored(probs_BHST)
    probs_BHkvGST = tb.flatten(tb.unflatten(probs_BHST, 1, [Hkv, G]), 2, 3)  # [B,H,S,T] -> [B,Hkv,G*S,T]
    y_BHkvGSDv = tb.matmul(probs_BHkvGST, v)  # x [B,Hkv,T,Dv] -> [B,Hkv,G*S,Dv]
    y_BHSDv = tb.flatten(tb.unflatten(y_BHkvGSDv, 2, [G, static_or_neg1(S)]), 1, 2)  # -> [B,H,S,Dv]
    qk = tb.to_dtype(stages[attrs.qk_mode], dtype) if attrs.qk_mode >= 0 else None
    return tb.to_dtype(y_BHSDv, dtype), qk


def softmax(tb: TorchBuilder, scores_BHST: Tensor) -> Tensor:
    """Softmax over T; a row of -inf gives zeros (its max taken as 0), never NaN."""
    max_BHS1 = tb.amax(scores_BHST, 3)
    max_BHS1 = tb.where_scalar_else(tb.eq_scalar(max_BHS1, float("-inf")), 0.0, max_BHS1)
    exp_BHST = tb.exp(tb.sub(scores_BHST, max_BHS1))
    denom_BHS1 = tb.sum_dim(exp_BHST, 3)
    denom_BHS1 = tb.where_scalar_else(tb.eq_scalar(denom_BHS1, 0.0), 1.0, denom_BHS1)
    return tb.div(exp_BHST, denom_BHS1)


def sdpa_attention(tb: TorchBuilder, attrs: AttentionAttributes, q_BHSDh: Tensor, k_BHkvTDh: Tensor, v_BHkvTDv: Tensor,
                   mask: Optional[KeyMask]) -> Tensor:
    """``scaled_dot_product_attention`` (K/V repeated by torch-mlir's lowering), in f32; rows with no key seen -> 0.

    Only when its softmax(scale * Q.K^T + bias) is the op: no softcap, no qk_matmul_output,
    no nonpad_kv_seqlen (the caller checks).  Another scale than 1/sqrt(Dh) is folded into Q.
    """
    dtype, Dh = q_BHSDh.dtype, q_BHSDh.shape[3]
    q, k, v = (tb.to_dtype(t, "f32") for t in (q_BHSDh, k_BHkvTDh, v_BHkvTDv))
    scale = effective_scale(attrs, Dh)
    if scale == 0 or not math.isclose(scale, 1.0 / math.sqrt(Dh), rel_tol=1e-7, abs_tol=0.0):
        q = tb.mul_scalar(q, scale * math.sqrt(Dh))
    bias = tb.to_dtype(mask.bias, "f32") if mask is not None else None
    y_BHSDv = unless_empty(tb, q, k, lambda inner: inner.sdpa(q, k, v, bias, enable_gqa=True))
    if mask is not None:
        y_BHSDv = tb.where_scalar_else(mask.full_rows, 0.0, y_BHSDv)
    return tb.to_dtype(y_BHSDv, dtype)



def _f32(x: float) -> float:
    return float(np.float32(x))
