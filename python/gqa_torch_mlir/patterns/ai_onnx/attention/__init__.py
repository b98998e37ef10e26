"""Lowering of the standard ``Attention`` (opsets 23 and 24), as onnxruntime's CPU kernel computes it.

The contrib ``com.microsoft.Attention`` arrives under the same name;
dispatch.py tells them apart (input 1 is a rank-3/4 key here).  Modules, in
the order the driver runs them:

  support.py   attributes: each value lowered or refused by name
  inputs.py    inputs checked, 3-D split into heads: [B,S,N*D] -> [B,N,S,D]
  (here)       the cache: present = past ++ new rows on the sequence dim (grown, then scattered)
  masks.py     attn_mask, is_causal and nonpad_kv_seqlen as one bias
  compute.py   scores, softcap, bias, softmax, P.V on grouped queries (or SDPA)
  query_blocks.py
               a long causal prefill: compute.py's attention per block of query rows

Dimension letters: B batch, H query heads, Hkv KV heads, S query tokens,
L new KV tokens, P past tokens, T = P + L, Dh / Dv the Q-K / V head sizes.
"""

from __future__ import annotations

from typing import List

from ....binder import OpBinder
from ....builder import Tensor, TorchBuilder
from ....registry import Refusal, onnx_op
from .compute import grouped_attention, sdpa_attention
from .inputs import AttentionInputs, read_inputs
from .masks import key_mask
from .query_blocks import blocked_attention, can_block, can_chunk, can_loop, can_take_one_row_apart, looped_attention, one_row_apart
from .support import OUTPUTS, read_attributes, runs_function_body


@onnx_op("Attention", domain="", since=23)
def lower_attention_23(b: OpBinder, tb: TorchBuilder) -> List:
    return lower_attention(b, tb, opset=23)


@onnx_op("Attention", domain="", since=24)
def lower_attention_24(b: OpBinder, tb: TorchBuilder) -> List:
    return lower_attention(b, tb, opset=24)


def lower_attention(b: OpBinder, tb: TorchBuilder, opset: int) -> List:
    q, mask = b.tensor(0, "Q", required=True), b.tensor(3, "attn_mask")
    body = runs_function_body(q.dtype, mask.dtype if mask is not None else None)
    if body and q.dtype == "f16":
        raise Refusal(f"type {mask.dtype} with f16 inputs is not supported; supported: bool or f16 (onnxruntime's kernel; "
                      "it runs other masks through the op's function body, whose f16 softmax precision is its own)", "input 3 'attn_mask'")
    attrs = read_attributes(b, opset, q.dtype, body)  # support.py
    ins = read_inputs(b, tb, attrs)  # inputs.py: heads first, shapes checked
    key_BHkvTDh, value_BHkvTDv = with_past(tb, ins)  # present = past ++ new: [B,Hkv,P,D] ++ [B,Hkv,L,D] -> [B,Hkv,T,D]
    P = tb.size(ins.past_key_BHkvPDh, 2) if ins.past_key_BHkvPDh is not None else 0
    mask = key_mask(tb, attrs, ins, tb.size(key_BHkvTDh, 2), P)  # masks.py
    if uses_sdpa(b, attrs, ins):
        y_BHSDv, qk_BHST = sdpa_attention(tb, attrs, ins.query_BHSDh, key_BHkvTDh, value_BHkvTDv, mask), None
    elif can_block(attrs, mask, tb.size(ins.query_BHSDh, 2), tb.size(key_BHkvTDh, 2), P):  # query_blocks.py
        y_BHSDv, qk_BHST = blocked_attention(tb, attrs, ins.query_BHSDh, key_BHkvTDh, value_BHkvTDv, mask, P, ins.rank3), None
    elif can_take_one_row_apart(b.options, attrs, tb.size(ins.query_BHSDh, 2)):  # a run-time S: S == 1 apart
        y_BHSDv = one_row_apart(tb, attrs, ins.query_BHSDh, key_BHkvTDh, value_BHkvTDv, mask, ins.rank3,
                                lambda inner: whole(inner, b, attrs, ins, key_BHkvTDh, value_BHkvTDv, mask, P)[0])
        qk_BHST = None
    else:
        y_BHSDv, qk_BHST = whole(tb, b, attrs, ins, key_BHkvTDh, value_BHkvTDv, mask, P)
    return outputs(tb, b, ins, y_BHSDv, key_BHkvTDh, value_BHkvTDv, qk_BHST)


def whole(tb: TorchBuilder, b: OpBinder, attrs, ins: AttentionInputs, key_BHkvTDh, value_BHkvTDv, mask, P):
    """All S query rows: in a loop of blocks for a run-time S with prefill_loop=on (query_blocks.py),
    else at once; (Y [B,H,S,Dv], qk_matmul_output or None)."""
    if can_loop(b.options, attrs, mask, tb.size(ins.query_BHSDh, 2)):
        chunked = can_chunk(b.options, attrs, ins.query_BHSDh.dtype)
        return looped_attention(tb, attrs, ins.query_BHSDh, key_BHkvTDh, value_BHkvTDv, mask, P, ins.rank3, chunked), None
    return grouped_attention(tb, attrs, ins.query_BHSDh, key_BHkvTDh, value_BHkvTDv, mask)


def with_past(tb: TorchBuilder, ins: AttentionInputs):
    if ins.past_key_BHkvPDh is None:
        return ins.key_BHkvLDh, ins.value_BHkvLDv
    return tuple(append_rows(tb, past, new) for past, new in ((ins.past_key_BHkvPDh, ins.key_BHkvLDh), (ins.past_value_BHkvPDv, ins.value_BHkvLDv)))


def append_rows(tb: TorchBuilder, past_BHkvPD: Tensor, new_BHkvLD: Tensor) -> Tensor:
    """past ++ new on the sequence dim: [B,Hkv,P,D] ++ [B,Hkv,L,D] -> [B,Hkv,P+L,D].

    As GroupQueryAttention's cache is written: the past grown by L zero rows, the new rows
    scattered into them (a step measured ~10% faster on iree-cpu than a concatenation of the
    two, and IREE fails on a concatenation with dynamic dims, where the past is padded instead).
    """
    P, L = tb.size(past_BHkvPD, 2), tb.size(new_BHkvLD, 2)
    if None in past_BHkvPD.shape or not isinstance(L, int):
        grown_BHkvTD = tb.pad_dim_end(past_BHkvPD, 2, L)  # [B,Hkv,P,D] -> [B,Hkv,P+L,D]
    else:
        empty_BHkv0D = tb.slice(past_BHkvPD, 2, 0, 0, in_bounds=True)
        grown_BHkvTD = tb.cat([past_BHkvPD, tb.pad_dim_end(empty_BHkv0D, 2, L)], 2)  # zero rows for the new ones
    rows_L = tb.add_scalar(tb.arange(L), P)  # P .. P+L-1
    index_11L1 = tb.unsqueeze(tb.unsqueeze(tb.unsqueeze(rows_L, 1), 0), 0)  # [L] -> [L,1] -> [1,1,L,1]
    index_BHkvLD = tb.expand(index_11L1, [tb.size(new_BHkvLD, d) for d in range(4)])  # -> [B,Hkv,L,D]
    return tb.scatter_src(grown_BHkvTD, 2, index_BHkvLD, new_BHkvLD)


def uses_sdpa(b: OpBinder, attrs, ins: AttentionInputs) -> bool:
    """The sdpa option, where SDPA's softmax(scale * Q.K^T + bias) is the op (see compute.sdpa_attention)."""
    return (b.options.attention == "sdpa" and attrs.softcap == 0 and attrs.qk_mode < 0 and ins.nonpad_B is None
            and ins.value_BHkvLDv.shape[3] == ins.query_BHSDh.shape[3] and ins.query_BHSDh.dtype != "f64")  # SDPA runs in f32


def outputs(tb: TorchBuilder, b: OpBinder, ins: AttentionInputs, y_BHSDv: Tensor, key, value, qk) -> List:
    """The op's results, as many as the node declares, each cast to its declared type."""
    if ins.rank3:
        y_BHSDv = tb.flatten(tb.transpose(y_BHSDv, 1, 2), 2, 3)  # [B,H,S,Dv] -> [B,S,H,Dv] -> [B,S,H*Dv]
    results = [y_BHSDv, key, value, qk][: b.num_results]
    return [tb.none() if b.result_type_text(i) == "!torch.none" or t is None else b.declared_result(tb, i, t, OUTPUTS[i])
            for i, t in enumerate(results)]
