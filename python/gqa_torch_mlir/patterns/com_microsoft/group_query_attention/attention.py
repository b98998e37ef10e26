"""Attention over the read rows: scaled_dot_product_attention, or the decomposed form on grouped queries."""

from __future__ import annotations

import math
from typing import Optional, Tuple

from ....builder import Dim, Tensor, TorchBuilder
from ...common.attention import soft_cap, static_or_neg1, unless_empty
from .inputs import GqaInputs, NEG_INF, Step
from .masks import reads_a_prefix, zero_unread_rows
from .positions import valid_query_rows
from .support import GqaAttributes


def probs_times_values(tb: TorchBuilder, probs_BHkvGST: Tensor, v_BHkvTDh: Tensor, read_B1T: Optional[Tensor],
                       prefix: bool = True, S: Dim = 1) -> Tensor:
    """P.V with the value rows a batch row does not read zeroed (a 0 probability times a NaN row is NaN);
    ``read_B1T`` None: every row is read.

    Decode (S = 1): at the cost of those rows only.  Rows [0, m), m the
    fewest rows any batch row reads, are read by every row: a plain matmul.
    Only rows [m, T) go through the select; with batch 1 (or aligned rows)
    that tail is empty.  No control flow: IREE's multi-threaded runtime fails
    on an ``scf.if`` here.

    Several query rows (S > 1, static): one select over all of V, which
    costs little beside S times as many multiply-adds, and a matmul with the
    shapes as they are.  The split's m is read back mid-step and leaves the
    matmul's reduction dimension dynamic, which IREE's CPU code ran at 60% of
    the static one's speed (a prefill of 256 tokens spent a third of its
    time there).
    """
    T = tb.size(v_BHkvTDh, 2)
    if read_B1T is None:  # every row is read by every batch row
        return tb.matmul(probs_BHkvGST, v_BHkvTDh)
    if not prefix or (isinstance(S, int) and S > 1):  # zeroed over all rows (a window's read rows are a range)
        return tb.matmul(probs_BHkvGST, zero_unread_rows(tb, read_B1T, v_BHkvTDh))
    if T == 1:  # row 0 is read by every batch row
        return tb.matmul(probs_BHkvGST, v_BHkvTDh)
    counts_B11 = tb.sum_dim(tb.to_dtype(read_B1T, "si64"), 2)  # [B,1,T] -> [B,1,1]
    m = tb.dim_min(tb.dim_max(tb.item(tb.amin(counts_B11, 0)), 0), T)  # -> [1,1,1] -> int in [0, T]
    head = tb.matmul(tb.slice(probs_BHkvGST, 3, 0, m), tb.slice(v_BHkvTDh, 2, 0, m))  # [..,GS,m] x [..,m,Dh]
    tail_v = zero_unread_rows(tb, tb.slice(read_B1T, 2, m, T), tb.slice(v_BHkvTDh, 2, m, T))  # [B,Hkv,T-m,Dh]
    tail = tb.matmul(tb.slice(probs_BHkvGST, 3, m, T), tail_v)  # [..,GS,T-m] x [..,T-m,Dh]
    return tb.add(head, tail)  # -> [B,Hkv,G*S,Dh]


def needs_scores(attrs: GqaAttributes, ins: GqaInputs) -> bool:
    """True when SDPA's softmax(QK^T*scale + mask) cannot express the op."""
    return (
        attrs.softcap > 0
        or attrs.smooth_softmax
        or ins.head_sink is not None
        or attrs.qk_output != 0
        or attrs.local_window_size == 0  # no visible key: onnxruntime outputs 0, SDPA NaN
    )


def effective_scale(attrs: GqaAttributes, Dh: int) -> float:
    return attrs.scale if attrs.scale != 0.0 else 1.0 / math.sqrt(Dh)


def sdpa_attention(tb, attrs, ins, query_BHSDh, key_BHkvTDh, value_BHkvTDh, visible_BST, bias) -> Tensor:
    """``scaled_dot_product_attention`` with an additive 0/-inf (+ bias) mask and GQA.

    SDPA is emitted with its default scale 1/sqrt(Dh) (an explicit scale is
    dropped by torch-mlir's linalg lowering); another scale is folded into Q.
    """
    mask_B1ST = tb.unsqueeze(tb.where_scalars(visible_BST, 0.0, NEG_INF, query_BHSDh.dtype), 1)  # [B,S,T] -> [B,1,S,T]
    if bias is not None:  # a select, not a sum: a NaN or +inf bias in a masked column must stay masked
        mask_B1ST = tb.where_else_scalar(tb.unsqueeze(visible_BST, 1), bias, NEG_INF)  # [B,1,S,T] ? [B|1,H|1,S,T] : -inf
    scale, Dh, dtype = effective_scale(attrs, ins.head_size), ins.head_size, query_BHSDh.dtype
    # f32 as onnxruntime computes f16 (torch-mlir's f16 SDPA loses rows with large scores)
    q, k, v, mask = (tb.to_dtype(t, "f32") for t in (query_BHSDh, key_BHkvTDh, value_BHkvTDh, mask_B1ST))
    if not math.isclose(scale, 1.0 / math.sqrt(Dh), rel_tol=1e-7, abs_tol=0.0):
        q = tb.mul_scalar(q, scale * math.sqrt(Dh))
    attn_BHSDh = unless_empty(tb, q, k, lambda inner: inner.sdpa(q, k, v, mask, enable_gqa=True))
    return tb.to_dtype(attn_BHSDh, dtype)


def decomposed_attention(tb, attrs, ins, step, query_BHSDh, key_BHkvTDh, value_BHkvTDh, visible_BST, bias, read_B1T, factors=(None, None)):
    """Scores, softcap, bias, mask, (smooth) softmax and P.V on grouped queries, in f32.

    ``factors``: f32 [1] scales multiplying Q.K^T and P.V (a PER_TENSOR cache's,
    whose K or V are then its codes; see CacheCodec.factor), or None.

    Query heads are regrouped by their KV head, [B,H,S,Dh] -> [B,Hkv,G*S,Dh],
    so K/V are read once per KV head and never repeated.  Returns the
    attention [B,H,S,Dh] in the input dtype and, with qk_output, output_qk
    [B,H,S,Tt].
    """
    dtype, H, Hkv = query_BHSDh.dtype, attrs.num_heads, attrs.kv_num_heads
    G = H // Hkv
    q = tb.to_dtype(query_BHSDh, "f32")
    k, v = tb.to_dtype(key_BHkvTDh, "f32"), tb.to_dtype(value_BHkvTDh, "f32")
    q_BHkvGSDh = tb.flatten(tb.unflatten(q, 1, [Hkv, G]), 2, 3)  # [B,H,S,Dh] -> [B,Hkv,G,S,Dh] -> [B,Hkv,G*S,Dh]
    scores_BHkvGST = tb.matmul(q_BHkvGSDh, tb.transpose(k, 2, 3))  # [B,Hkv,G*S,Dh] x [B,Hkv,Dh,T] -> [B,Hkv,G*S,T]
    if factors[0] is not None:
        scores_BHkvGST = tb.mul(scores_BHkvGST, factors[0])  # x k_scale [1]
    scores_BHST = tb.flatten(tb.unflatten(scores_BHkvGST, 2, [G, static_or_neg1(step.S)]), 1, 2)  # -> [B,Hkv,G,S,T] -> [B,H,S,T]
    scores_BHST = tb.mul_scalar(scores_BHST, effective_scale(attrs, ins.head_size))
    if attrs.softcap > 0:
        scores_BHST = soft_cap(tb, scores_BHST, attrs.softcap)
    if bias is not None:
        scores_BHST = tb.add(scores_BHST, tb.to_dtype(bias, "f32"))
    visible_B1ST = tb.unsqueeze(visible_BST, 1)  # [B,S,T] -> [B,1,S,T]
    # Softmax normalised after P.V: the division runs over [.., Dh] columns, not [.., T] (a prefill's
    # scores are T wide), and P.V reads the exponentials as they are computed.
    exp_BHST, denom_BHS1 = masked_exp(tb, attrs, ins, scores_BHST, visible_B1ST)
    exp_BHkvGST = tb.flatten(tb.unflatten(exp_BHST, 1, [Hkv, G]), 2, 3)  # [B,H,S,T] -> [B,Hkv,G*S,T]
    unnormed_BHkvGSDh = probs_times_values(tb, exp_BHkvGST, v, read_B1T, reads_a_prefix(attrs), step.S)  # x [B,Hkv,T,Dh] -> [B,Hkv,G*S,Dh]
    attn_BHkvGSDh = tb.div(unnormed_BHkvGSDh, tb.flatten(tb.unflatten(denom_BHS1, 1, [Hkv, G]), 2, 3))  # / [B,Hkv,G*S,1]
    if factors[1] is not None:
        attn_BHkvGSDh = tb.mul(attn_BHkvGSDh, factors[1])  # x v_scale [1]
    attn_BHSDh = tb.flatten(tb.unflatten(attn_BHkvGSDh, 2, [G, static_or_neg1(step.S)]), 1, 2)  # -> [B,H,S,Dh]
    qk = None
    if attrs.qk_output:
        raw = scores_BHST if attrs.qk_output == 1 else tb.div(exp_BHST, denom_BHS1)  # masked columns hold 0, as onnxruntime's (even in a NaN row)
        raw = tb.where_else_scalar(qk_written(tb, step, ins, visible_B1ST), raw, 0.0)
        qk = tb.to_dtype(qk_columns(tb, raw, step, ins), dtype)
    return tb.to_dtype(attn_BHSDh, dtype), qk


def masked_exp(tb, attrs, ins, scores_BHST, visible_B1ST) -> Tuple[Tensor, Tensor]:
    """Softmax over the visible keys, in f32, as its numerators e^(x - m) [B,H,S,T] and their
    denominator [B,H,S,1] (the probabilities are their quotient).

    With a sink logit z (head_sink[h], or 0 for smooth_softmax) the
    denominator gains e^(z - m), m = max(max_t x_t, z).  A row with no visible
    key gives zeros (onnxruntime's W = 0), not NaN.
    """
    masked_BHST = tb.where_else_scalar(visible_B1ST, scores_BHST, NEG_INF)
    max_BHS1 = tb.amax(masked_BHST, 3)
    sink_1H11 = None
    if ins.head_sink is not None:
        sink_H = tb.to_dtype(ins.head_sink, "f32")
        sink_1H11 = tb.unsqueeze(tb.unsqueeze(tb.unsqueeze(sink_H, 0), 2), 3)  # [H] -> [1,H,1,1]
        max_BHS1 = tb.maximum(max_BHS1, sink_1H11)
    elif attrs.smooth_softmax:
        max_BHS1 = tb.clamp_min(max_BHS1, 0.0)  # sink logit 0
    max_BHS1 = tb.where_scalar_else(tb.eq_scalar(max_BHS1, NEG_INF), 0.0, max_BHS1)  # empty rows: exp(-inf - 0) = 0
    exp_BHST = tb.exp(tb.sub(masked_BHST, max_BHS1))
    denom_BHS1 = tb.sum_dim(exp_BHST, 3)
    if sink_1H11 is not None:
        denom_BHS1 = tb.add(denom_BHS1, tb.exp(tb.sub(sink_1H11, max_BHS1)))
    elif attrs.smooth_softmax:
        denom_BHS1 = tb.add(denom_BHS1, tb.exp(tb.neg(max_BHS1)))
    denom_BHS1 = tb.where_scalar_else(tb.eq_scalar(denom_BHS1, 0.0), 1.0, denom_BHS1)
    return exp_BHST, denom_BHS1


def qk_written(tb: TorchBuilder, step: Step, ins: GqaInputs, visible_B1ST: Tensor) -> Tensor:
    """i1 [B,1,S,T]: the output_qk entries onnxruntime fills; the others hold 0.

    The visible keys of each query, and with query_seqlens only its valid rows
    s < query_seqlens[b] (a padding row has i = past_len[b] + s > seqlens_k[b]).
    """
    if ins.query_seqlens is None:
        return visible_B1ST
    valid_B1S1 = tb.unsqueeze(tb.unsqueeze(valid_query_rows(tb, step), 1), 3)  # [B,S] -> [B,1,S,1]
    return tb.logical_and(visible_B1ST, valid_B1S1)


def qk_columns(tb, qk_BHST: Tensor, step: Step, ins: GqaInputs) -> Tensor:
    """output_qk keeps the first total_sequence_length key columns: [B,H,S,T] -> [B,H,S,Tt]."""
    total = tb.item(step.total)
    return tb.slice(qk_BHST, 3, 0, total)

