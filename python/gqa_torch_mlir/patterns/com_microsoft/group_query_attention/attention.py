"""Attention over the read rows: scaled_dot_product_attention, or the decomposed form on grouped queries."""

from __future__ import annotations

import math
from typing import Optional, Tuple

from ....builder import Dim, Tensor, TorchBuilder
from ...common import fused_decode
from ...common.attention import soft_cap, unless_empty
from ...common.key_chunks import chunk, online_attention
from ...common.grouped import grouped, grouped_per_head, grouped_sink, per_grouped_row, ungrouped
from .inputs import GqaInputs, NEG_INF, Step
from .masks import reads_a_prefix, visible_keys, zero_unread_rows
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


def decomposed_attention(tb, attrs, ins, step, query_BHSDh, key_BHkvTDh, value_BHkvTDh, visible_BST, bias, read_B1T, factors=(None, None),
                         options=None, write=None):
    """Scores, softcap, bias, mask, (smooth) softmax and P.V on grouped queries, in f32; with
    attention=fused, a step of up to 16 grouped query rows (softcap and sinks included) in one
    dispatch, where takes_fused says so (fused_decode.py).

    ``factors``: f32 [1] scales multiplying Q.K^T and P.V (a PER_TENSOR cache's,
    whose K or V are then its codes; see CacheCodec.factor), or None.

    Query heads are regrouped by their KV head, [B,H,S,Dh] -> [B,Hkv,G*S,Dh],
    so K/V are read once per KV head and never repeated; the softmax runs in
    that layout (common/grouped.py), where its scale and mask fuse into the Q.K^T
    matmul on iree-cpu.  Returns the attention [B,H,S,Dh] in the input dtype
    and, with qk_output, output_qk [B,H,S,Tt].  ``write`` (inputs.CacheWrite, or None): a
    growing cache's write, which the fused kernel then makes as it reads the rows (``write.made``).
    """
    dtype, Hkv, S = query_BHSDh.dtype, attrs.kv_num_heads, step.S
    G = attrs.num_heads // Hkv
    fused = options is not None and options.attention == "fused"
    if takes_fused(attrs, bias, factors) and fused_decode.applies(fused, S, query_BHSDh, key_BHkvTDh, value_BHkvTDh, Hkv):
        q_BHkvGSDh = tb.mul_scalar(grouped(tb, query_BHSDh, Hkv), effective_scale(attrs, ins.head_size))  # -> [B,Hkv,G*S,Dh]
        if fused_decode.reads_lengths_on_device(write, S):  # the kernel reads the lengths: a bias over all T rows
            visible_BST, read_B1T = keys_of_whole_cache(tb, attrs, step, write)
        bias_BSR = fused_decode.visible_bias(tb, visible_BST, read_B1T)  # [B,S,R]
        attn_BHkvGSDh = fused_decode.fused_decode_attention(tb, q_BHkvGSDh, key_BHkvTDh, value_BHkvTDh, bias_BSR, attrs.softcap,
                                                            sink_logits(tb, attrs, ins, Hkv, S), write)
        return ungrouped(tb, attn_BHkvGSDh, G, S), None  # -> [B,H,S,Dh]
    q_BHkvGSDh = grouped(tb, tb.to_dtype(query_BHSDh, "f32"), Hkv)  # [B,H,S,Dh] -> [B,Hkv,G*S,Dh]
    k, v = tb.to_dtype(key_BHkvTDh, "f32"), tb.to_dtype(value_BHkvTDh, "f32")
    scores_BHkvGST = tb.matmul(q_BHkvGSDh, tb.transpose(k, 2, 3))  # [B,Hkv,G*S,Dh] x [B,Hkv,Dh,T] -> [B,Hkv,G*S,T]
    scores_BHkvGST = scaled_scores(tb, attrs, ins, scores_BHkvGST, factors[0])
    if bias is not None:
        scores_BHkvGST = tb.add(scores_BHkvGST, grouped_per_head(tb, tb.to_dtype(bias, "f32"), attrs.num_heads, Hkv, S))
    visible_B1GST = per_grouped_row(tb, tb.unsqueeze(visible_BST, 1), G, S)  # [B,S,T] -> [B,1,S,T] -> [B,1,G*S,T]
    sink_1HkvGS1 = None if ins.head_sink is None else grouped_sink(tb, tb.to_dtype(ins.head_sink, "f32"), Hkv, S)
    # Softmax normalised after P.V: the division runs over [.., Dh] columns, not [.., T] (a prefill's
    # scores are T wide), and P.V reads the exponentials as they are computed.
    exp_BHkvGST, denom_BHkvGS1 = masked_exp(tb, attrs, scores_BHkvGST, visible_B1GST, sink_1HkvGS1)
    unnormed_BHkvGSDh = probs_times_values(tb, exp_BHkvGST, v, read_B1T, reads_a_prefix(attrs), S)  # x [B,Hkv,T,Dh] -> [B,Hkv,G*S,Dh]
    attn_BHkvGSDh = tb.div(unnormed_BHkvGSDh, denom_BHkvGS1)
    if factors[1] is not None:
        attn_BHkvGSDh = tb.mul(attn_BHkvGSDh, factors[1])  # x v_scale [1]
    qk = None
    if attrs.qk_output:
        raw = scores_BHkvGST if attrs.qk_output == 1 else tb.div(exp_BHkvGST, denom_BHkvGS1)  # masked columns hold 0, as onnxruntime's (even in a NaN row)
        raw_BHST = ungrouped(tb, raw, G, S)  # -> [B,H,S,T]
        raw_BHST = tb.where_else_scalar(qk_written(tb, step, ins, tb.unsqueeze(visible_BST, 1)), raw_BHST, 0.0)
        qk = tb.to_dtype(qk_columns(tb, raw_BHST, step, ins), dtype)
    return tb.to_dtype(ungrouped(tb, attn_BHkvGSDh, G, S), dtype), qk  # -> [B,H,S,Dh]


def keys_of_whole_cache(tb, attrs, step, write) -> Tuple[Tensor, Tensor]:
    """(i1 [B,S,T] the keys each query row attends, i1 [1,1,T] the rows read) over all T rows of
    the write's present, the rows read [0, R) with R on the device (``write.lengths``)."""
    key_pos_T = tb.arange(tb.size(write.present_key, 2))
    last_read_1 = tb.add_scalar(tb.slice(write.lengths, 0, 1, 2), -1)  # [2] -> [1]: R - 1
    read_11T = tb.unsqueeze(tb.unsqueeze(tb.le(key_pos_T, last_read_1), 0), 0)  # [T] -> [1,1,T]
    return visible_keys(tb, step, attrs, key_pos_T), read_11T


def takes_fused(attrs, bias, factors) -> bool:
    """Whether the fused kernel can compute the step, shapes aside (fused_decode.applies): no
    attention_bias, no quantized cache's factors, no output_qk, and local_window_size != 0 (a
    row of no visible key there reads every key masked, which the kernel would average)."""
    return bias is None and factors == (None, None) and attrs.qk_output == 0 and attrs.local_window_size != 0


def sink_logits(tb, attrs, ins, Hkv: int, S) -> Optional[Tensor]:
    """f32 [1,Hkv,G*S,1]: head_sink per grouped row, or 0 with smooth_softmax; None without either."""
    if ins.head_sink is not None:
        return grouped_sink(tb, tb.to_dtype(ins.head_sink, "f32"), Hkv, S)
    if attrs.smooth_softmax:
        return tb.full_sized([1, Hkv, attrs.num_heads // Hkv * S, 1], 0.0, "f32")
    return None


def scaled_scores(tb, attrs, ins, qk_BHkvGST: Tensor, key_factor: Optional[Tensor]) -> Tensor:
    """Q.K^T times k_scale (a PER_TENSOR cache's factor, or None) and the op's scale, then softcapped."""
    if key_factor is not None:
        qk_BHkvGST = tb.mul(qk_BHkvGST, key_factor)  # x k_scale [1]
    qk_BHkvGST = tb.mul_scalar(qk_BHkvGST, effective_scale(attrs, ins.head_size))
    return soft_cap(tb, qk_BHkvGST, attrs.softcap) if attrs.softcap > 0 else qk_BHkvGST


def chunked_attention(tb, attrs, ins, query_BHSbDh, key_BHkvTpDh, value_BHkvTpDh, visible_BSbTp, keys, factors=(None, None)) -> Tensor:
    """:func:`decomposed_attention`'s result for one block of query rows (no bias, no output_qk) over
    the keys [0, ``keys``), in chunks of static size (common/key_chunks.py): K, V and the visible
    keys padded to whole chunks, K and V in f32 and V's unread rows zeroed.  [B,H,Sb,Dh]."""
    dtype, Hkv, Sb = query_BHSbDh.dtype, attrs.kv_num_heads, query_BHSbDh.shape[2]
    G = attrs.num_heads // Hkv
    q_BHkvGSbDh = grouped(tb, tb.to_dtype(query_BHSbDh, "f32"), Hkv)  # [B,H,Sb,Dh] -> [B,Hkv,G*Sb,Dh]

    visible_B1GSbTp = per_grouped_row(tb, tb.unsqueeze(visible_BSbTp, 1), G, Sb)  # [B,Sb,Tp] -> [B,1,G*Sb,Tp]

    def scores(inner, qk_BHkvGSbC, start):  # as decomposed_attention scales (and caps) its scores, then masks them
        visible_B1GSbC = chunk(inner, visible_B1GSbTp, 3, start)  # [B,1,G*Sb,Tp] -> [B,1,G*Sb,KEYS]
        return inner.where_else_scalar(visible_B1GSbC, scaled_scores(inner, attrs, ins, qk_BHkvGSbC, factors[0]), NEG_INF)

    sink = None
    if ins.head_sink is not None:
        sink = grouped_sink(tb, tb.to_dtype(ins.head_sink, "f32"), Hkv, Sb)  # -> [1,Hkv,G*Sb,1]
    elif attrs.smooth_softmax:
        sink = tb.full_sized([1, 1, 1, 1], 0.0, "f32")  # sink logit 0
    attn_BHkvGSbDh = online_attention(tb, q_BHkvGSbDh, key_BHkvTpDh, value_BHkvTpDh, keys, scores, sink)
    if factors[1] is not None:
        attn_BHkvGSbDh = tb.mul(attn_BHkvGSbDh, factors[1])  # x v_scale [1]
    return tb.to_dtype(ungrouped(tb, attn_BHkvGSbDh, G, Sb), dtype)  # -> [B,H,Sb,Dh]


def masked_exp(tb, attrs, scores_BRT, visible_BRT, sink_BR1) -> Tuple[Tensor, Tensor]:
    """Softmax over the visible keys of each row, in f32, as its numerators e^(x - m) [..,R,T] and
    their denominator [..,R,1] (the probabilities are their quotient), over 4-D rows.

    With a sink logit z (``sink_BR1``, head_sink's per row, or 0 for
    smooth_softmax) the denominator gains e^(z - m), m = max(max_t x_t, z).
    A row with no visible key gives zeros (onnxruntime's W = 0), not NaN.
    """
    masked_BRT = tb.where_else_scalar(visible_BRT, scores_BRT, NEG_INF)
    max_BR1 = tb.amax(masked_BRT, 3)
    if sink_BR1 is not None:
        max_BR1 = tb.maximum(max_BR1, sink_BR1)
    elif attrs.smooth_softmax:
        max_BR1 = tb.clamp_min(max_BR1, 0.0)  # sink logit 0
    max_BR1 = tb.where_scalar_else(tb.eq_scalar(max_BR1, NEG_INF), 0.0, max_BR1)  # empty rows: exp(-inf - 0) = 0
    exp_BRT = tb.exp(tb.sub(masked_BRT, max_BR1))
    denom_BR1 = tb.sum_dim(exp_BRT, 3)
    if sink_BR1 is not None:
        denom_BR1 = tb.add(denom_BR1, tb.exp(tb.sub(sink_BR1, max_BR1)))
    elif attrs.smooth_softmax:
        denom_BR1 = tb.add(denom_BR1, tb.exp(tb.neg(max_BR1)))
    denom_BR1 = tb.where_scalar_else(tb.eq_scalar(denom_BR1, 0.0), 1.0, denom_BR1)
    return exp_BRT, denom_BR1


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

