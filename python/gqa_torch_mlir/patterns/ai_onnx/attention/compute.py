"""The attention itself, in onnxruntime's kernel order, on grouped queries (or through SDPA).

    scores = scale * Q.K^T          [B,H,S,T]  (qk_matmul_output mode 0)
    scores = softcap(scores)                    (mode 1; only when softcap > 0)
    scores = scores + bias; nonpad keys set to the lowest value   (mode 2)
    probs  = softmax(scores); rows with no key seen -> 0          (mode 3)
    Y      = probs . V              [B,H,S,Dv]

Computed in f32 (f64 for f64 inputs); after each stage the value is rounded
to Q's type, as the kernel stores each stage.  Query heads are regrouped by
their KV head, [B,H,S,Dh] -> [B,Hkv,G*S,Dh], so K/V are read once per KV
head and never repeated; the stages run on the scores in that layout, the
mask regrouped to match (common/grouped.py), so that on iree-cpu the scale
and the mask fuse into the Q.K^T matmul.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from ....builder import Tensor, TorchBuilder
from ...common import fused_decode
from ...common.attention import soft_cap, unless_empty
from ...common.grouped import grouped, grouped_per_head, ungrouped
from ...common.key_chunks import chunk, online_attention
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
    H, Hkv, S = q_BHSDh.shape[1], k_BHkvTDh.shape[1], tb.size(q_BHSDh, 2)
    G = H // Hkv
    if takes_fused(attrs, q_BHSDh, k_BHkvTDh, v_BHkvTDv, mask):
        return fused(tb, attrs, q_BHSDh, k_BHkvTDh, v_BHkvTDv, mask), None

    def stored(t: Tensor) -> Tensor:  # rounded to Q's type, computed on in ct
        return t if dtype == ct else tb.to_dtype(tb.to_dtype(t, dtype), ct)

    q, k, v = (tb.to_dtype(t, ct) for t in (q_BHSDh, k_BHkvTDh, v_BHkvTDv))
    q_BHkvGSDh = grouped(tb, q, Hkv)  # [B,H,S,Dh] -> [B,Hkv,G*S,Dh]
    scores_BHkvGST = tb.matmul(q_BHkvGSDh, tb.transpose(k, 2, 3))  # x [B,Hkv,Dh,T] -> [B,Hkv,G*S,T]
    stages = {}  # each [B,Hkv,G*S,T]
    scores_BHkvGST = stages[0] = stored(tb.mul_scalar(scores_BHkvGST, effective_scale(attrs, q.shape[3])))
    if attrs.softcap > 0:
        scores_BHkvGST = stored(soft_cap(tb, scores_BHkvGST, attrs.softcap))
    stages[1] = scores_BHkvGST
    if mask is not None and mask.bias is not None:  # [B|1,H|1,S|1,T] -> [B|1,Hkv|1,G*S,T]
        scores_BHkvGST = stored(tb.add(scores_BHkvGST, grouped_per_head(tb, tb.to_dtype(mask.bias, ct), H, Hkv, S)))
    if mask is not None and mask.nonpad_excluded is not None:  # [B,1,1,T] broadcasts over the rows
        scores_BHkvGST = tb.where_scalar_else(mask.nonpad_excluded, excluded_value(attrs, dtype), scores_BHkvGST)
    stages[2] = scores_BHkvGST
    if attrs.softmax_f32:  # f64 asked to run its softmax in float
        probs_BHkvGST = tb.to_dtype(softmax(tb, tb.to_dtype(scores_BHkvGST, "f32")), ct)
    else:
        probs_BHkvGST = softmax(tb, scores_BHkvGST)
    if mask is not None:  # onnxruntime's zero rows
        probs_BHkvGST = tb.where_scalar_else(grouped_per_head(tb, mask.full_rows, H, Hkv, S), 0.0, probs_BHkvGST)
    probs_BHkvGST = stages[3] = stored(probs_BHkvGST)
    y_BHkvGSDv = tb.matmul(probs_BHkvGST, v)  # x [B,Hkv,T,Dv] -> [B,Hkv,G*S,Dv]
    y_BHSDv = ungrouped(tb, y_BHkvGSDv, G, S)  # -> [B,H,S,Dv]
    qk = tb.to_dtype(ungrouped(tb, stages[attrs.qk_mode], G, S), dtype) if attrs.qk_mode >= 0 else None  # -> [B,H,S,T]
    return tb.to_dtype(y_BHSDv, dtype), qk


def takes_fused(attrs: AttentionAttributes, q_BHSDh: Tensor, k_BHkvTDh: Tensor, v_BHkvTDv: Tensor, mask: Optional[KeyMask]) -> bool:
    """A decode step the fused kernel computes as the kernel stages do: f32, Dv = Dh, no softcap or
    qk_matmul_output, and a mask (if any) of one bias row per batch row, without nonpad_kv_seqlen."""
    if not attrs.fused or attrs.body or attrs.softcap > 0 or attrs.qk_mode >= 0 or v_BHkvTDv.shape[3] != q_BHSDh.shape[3]:
        return False
    if mask is not None and (mask.nonpad_excluded is not None or (mask.bias is not None and mask.bias.shape[1:3] != (1, 1))):
        return False
    S = q_BHSDh.shape[2]
    return S == 1 and fused_decode.applies(True, S, q_BHSDh, k_BHkvTDh, v_BHkvTDv, k_BHkvTDh.shape[1])


def fused(tb: TorchBuilder, attrs: AttentionAttributes, q_BH1Dh: Tensor, k_BHkvTDh: Tensor, v_BHkvTDh: Tensor,
          mask: Optional[KeyMask]) -> Tensor:
    """Y [B,H,1,Dh] by the fused kernel (common/fused_decode.py): the mask's bias row as the kernel's
    (excluded keys at the lowest value still multiply their value rows by 0, as here), then
    onnxruntime's zero rows (no key above the lowest value)."""
    H, Hkv, Dh = q_BH1Dh.shape[1], k_BHkvTDh.shape[1], q_BH1Dh.shape[3]
    q_BHkvGDh = tb.mul_scalar(grouped(tb, q_BH1Dh, Hkv), effective_scale(attrs, Dh))  # [B,H,1,Dh] -> [B,Hkv,G,Dh]
    if mask is not None and mask.bias is not None:
        bias_B1T = tb.flatten(mask.bias, 1, 2)  # [B|1,1,1,T] -> [B|1,1,T]
    else:
        bias_B1T = tb.full_sized([1, 1, tb.size(k_BHkvTDh, 2)], 0.0, "f32")  # every key: [1,1,T]
    y_BHkvGDh = fused_decode.fused_decode_attention(tb, q_BHkvGDh, k_BHkvTDh, v_BHkvTDh, bias_B1T)
    y_BH1Dh = ungrouped(tb, y_BHkvGDh, H // Hkv, 1)  # -> [B,H,1,Dh]
    if mask is not None:
        y_BH1Dh = tb.where_scalar_else(mask.full_rows, 0.0, y_BH1Dh)
    return y_BH1Dh


def chunked_attention(tb: TorchBuilder, attrs: AttentionAttributes, q_BHSbDh: Tensor, k_BHkvTpDh: Tensor, v_BHkvTpDv: Tensor,
                      bias_BHSbTp: Tensor, keys) -> Tensor:
    """:func:`grouped_attention`'s Y for one block of f32 query rows (no nonpad, no qk_matmul_output)
    over the keys [0, ``keys``), in chunks of static size (common/key_chunks.py): K/V padded to
    whole chunks, and the bias [B|1,H|1,Sb,Tp] with them, -inf at the padding and in the rows
    with no key to see (onnxruntime's zero rows: their sum stays 0).  [B,H,Sb,Dv]."""
    H, Hkv, Sb = q_BHSbDh.shape[1], k_BHkvTpDh.shape[1], q_BHSbDh.shape[2]
    q_BHkvGSbDh = grouped(tb, q_BHSbDh, Hkv)  # [B,H,Sb,Dh] -> [B,Hkv,G*Sb,Dh]
    scale = effective_scale(attrs, q_BHSbDh.shape[3])

    def scores(inner: TorchBuilder, qk_BHkvGSbC: Tensor, start) -> Tensor:  # grouped_attention's stages 0-2
        scores_BHkvGSbC = inner.mul_scalar(qk_BHkvGSbC, scale)
        if attrs.softcap > 0:
            scores_BHkvGSbC = soft_cap(inner, scores_BHkvGSbC, attrs.softcap)
        bias_BHSbC = chunk(inner, bias_BHSbTp, 3, start)  # [..,Sb,Tp] -> [..,Sb,KEYS]
        return inner.add(scores_BHkvGSbC, grouped_per_head(inner, bias_BHSbC, H, Hkv, Sb))  # + [B|1,Hkv|1,G*Sb,KEYS]

    y_BHkvGSbDv = online_attention(tb, q_BHkvGSbDh, k_BHkvTpDh, v_BHkvTpDv, keys, scores)
    return ungrouped(tb, y_BHkvGSbDv, H // Hkv, Sb)  # -> [B,H,Sb,Dv]


def softmax(tb: TorchBuilder, scores_BRT: Tensor) -> Tensor:
    """Softmax over T of 4-D rows; a row of -inf gives zeros (its max taken as 0), never NaN."""
    max_BR1 = tb.amax(scores_BRT, 3)
    max_BR1 = tb.where_scalar_else(tb.eq_scalar(max_BR1, float("-inf")), 0.0, max_BR1)
    exp_BRT = tb.exp(tb.sub(scores_BRT, max_BR1))
    denom_BR1 = tb.sum_dim(exp_BRT, 3)
    denom_BR1 = tb.where_scalar_else(tb.eq_scalar(denom_BR1, 0.0), 1.0, denom_BR1)
    return tb.div(exp_BRT, denom_BR1)


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
