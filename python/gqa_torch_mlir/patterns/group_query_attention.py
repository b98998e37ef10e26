"""Lowering of onnxruntime's ``com.microsoft.GroupQueryAttention`` to torch ops.

Dimension letters (onnxruntime's CPU kernel is the spec):
  B   batch                         S   new tokens this step (query length)
  P   past capacity (past_key dim 2)  T   present length = P + S
  H   query heads (num_heads)       Hkv key/value heads (kv_num_heads)
  G   H / Hkv                       Dh  head size
  R   rotary half width (cos/sin cache columns)   M  rotary cache rows

Per batch row b, ``seqlens_k[b] + 1`` tokens are in the cache after the step.
A first prompt (S == total_sequence_length) starts at row 0; any other step
has ``past_len[b] = seqlens_k[b] + 1 - S`` valid past rows.  New token s sits
at absolute position ``past_len[b] + s``: that position selects the rotary
angle and the cache row the new K/V are written to, and query s sees keys
``t <= min(past_len[b] + s, seqlens_k[b])`` (onnxruntime's CPU kernel; the
minimum matters only for right-padded first prompts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

from ..binder import OpBinder
from ..builder import Dim, Tensor, TorchBuilder
from ..registry import Refusal, onnx_op
from .gqa_support import GqaAttributes, read_attributes, validate_inputs

NEG_INF = float("-inf")


@dataclass
class GqaInputs:
    query: Tensor  # [B,S,H*Dh] or packed [B,S,(H+2Hkv)*Dh]
    key: Optional[Tensor]  # [B,S,Hkv*Dh]; None when packed
    value: Optional[Tensor]
    past_key: Tensor  # [B,Hkv,P,Dh]
    past_value: Tensor
    seqlens_k: Tensor  # [B] si32
    total_sequence_length: Tensor  # [] or [1] si32
    cos_cache: Optional[Tensor]  # [M,R]
    sin_cache: Optional[Tensor]
    head_size: int


@onnx_op("GroupQueryAttention", domain="com.microsoft", since=1)
def lower_group_query_attention(b: OpBinder, tb: TorchBuilder) -> List:
    attrs = read_attributes(b)
    ins = GqaInputs(**validate_inputs(b, attrs))
    query_BHSDh, key_BHkvSDh, value_BHkvSDh = split_heads(tb, ins, attrs)
    S = tb.size(ins.query, 1)
    seqlens_B = tb.to_dtype(ins.seqlens_k, "si64")  # si32 [B] -> si64 [B]
    position_BS = token_positions(tb, ins, seqlens_B, S)
    if attrs.do_rotary:
        rotary = RotaryTables.gather(tb, ins, position_BS)
        query_BHSDh = rotary.apply(tb, query_BHSDh)
        key_BHkvSDh = rotary.apply(tb, key_BHkvSDh)
    index_BHkvSDh = cache_index(tb, position_BS, attrs.kv_num_heads, ins.head_size)
    present_key_BHkvTDh = write_cache(tb, ins.past_key, key_BHkvSDh, index_BHkvSDh, S)
    present_value_BHkvTDh = write_cache(tb, ins.past_value, value_BHkvSDh, index_BHkvSDh, S)
    mask_B1ST = causal_mask(tb, position_BS, seqlens_B, present_key_BHkvTDh, query_BHSDh.dtype)
    query_BHSDh = fold_scale(tb, query_BHSDh, attrs.scale, ins.head_size)
    attn_BHSDh = tb.sdpa(query_BHSDh, present_key_BHkvTDh, present_value_BHkvTDh, mask_B1ST, enable_gqa=True)
    output_BSHDh = tb.transpose(attn_BHSDh, 1, 2)  # [B,H,S,Dh] -> [B,S,H,Dh]
    output_BSD = tb.flatten(output_BSHDh, 2, 3)  # [B,S,H,Dh] -> [B,S,H*Dh]
    results = [output_BSD, present_key_BHkvTDh, present_value_BHkvTDh][: b.num_results]
    return [tb.static_info_cast(t, b.result_type_text(i)) for i, t in enumerate(results)]


def split_heads(tb: TorchBuilder, ins: GqaInputs, attrs: GqaAttributes):
    """Q/K/V from separate or packed inputs, each as [B,heads,S,Dh]."""
    H, Hkv, Dh = attrs.num_heads, attrs.kv_num_heads, ins.head_size
    if ins.key is None:  # packed: [B,S,(H+2Hkv)*Dh] -> three slices on dim 2
        q_BSD = tb.slice(ins.query, 2, 0, H * Dh)
        k_BSD = tb.slice(ins.query, 2, H * Dh, (H + Hkv) * Dh)
        v_BSD = tb.slice(ins.query, 2, (H + Hkv) * Dh, (H + 2 * Hkv) * Dh)
    else:
        q_BSD, k_BSD, v_BSD = ins.query, ins.key, ins.value
    return (
        to_heads(tb, q_BSD, H, Dh),
        to_heads(tb, k_BSD, Hkv, Dh),
        to_heads(tb, v_BSD, Hkv, Dh),
    )


def to_heads(tb: TorchBuilder, x_BSD: Tensor, heads: int, Dh: int) -> Tensor:
    x_BSNDh = tb.unflatten(x_BSD, 2, [heads, Dh])  # [B,S,N*Dh] -> [B,S,N,Dh]
    return tb.transpose(x_BSNDh, 1, 2)  # [B,S,N,Dh] -> [B,N,S,Dh]


def token_positions(tb: TorchBuilder, ins: GqaInputs, seqlens_B: Tensor, S: Dim) -> Tensor:
    """Absolute position of each new token, past_len[b] + s, as si64 [B,S].

    past_len[b] = 0 on a first prompt (S == total_sequence_length), else seqlens_k[b] + 1 - S.
    """
    total = tb.to_dtype(ins.total_sequence_length, "si64")  # si32 [] -> si64 []
    first_prompt = tb.eq_scalar(total, S)  # [] i1
    past_len_B = tb.where_int_else(first_prompt, 0, tb.add_scalar(seqlens_B, tb.dim_sub(1, S)))  # [B]
    past_len_B1 = tb.unsqueeze(past_len_B, 1)  # [B] -> [B,1]
    return tb.add(past_len_B1, tb.arange(S))  # [B,1] + [S] -> [B,S]


@dataclass
class RotaryTables:
    """cos/sin rows at each token's position, broadcastable over heads: [B,1,S,R]."""

    cos_B1SR: Tensor
    sin_B1SR: Tensor

    @staticmethod
    def gather(tb: TorchBuilder, ins: GqaInputs, position_BS: Tensor) -> "RotaryTables":
        def rows(cache_MR):
            return tb.unsqueeze(tb.gather_rows(cache_MR, position_BS), 1)  # [M,R] at [B,S] -> [B,S,R] -> [B,1,S,R]

        return RotaryTables(rows(ins.cos_cache), rows(ins.sin_cache))

    def apply(self, tb: TorchBuilder, x_BNSDh: Tensor) -> Tensor:
        """Rotate-half rotary (onnxruntime's non-interleaved form) on [B,N,S,Dh]."""
        R = self.cos_B1SR.shape[3]
        x1_BNSR = tb.slice(x_BNSDh, 3, 0, R)  # first half
        x2_BNSR = tb.slice(x_BNSDh, 3, R, 2 * R)  # second half
        y1_BNSR = tb.sub(tb.mul(x1_BNSR, self.cos_B1SR), tb.mul(x2_BNSR, self.sin_B1SR))  # x1*cos - x2*sin
        y2_BNSR = tb.add(tb.mul(x2_BNSR, self.cos_B1SR), tb.mul(x1_BNSR, self.sin_B1SR))  # x2*cos + x1*sin
        return tb.cat([y1_BNSR, y2_BNSR], 3)  # [B,N,S,R] x2 -> [B,N,S,Dh]


def cache_index(tb: TorchBuilder, position_BS: Tensor, Hkv: int, Dh: int) -> Tensor:
    """Scatter index for the new K/V rows: position[b,s] broadcast to [B,Hkv,S,Dh]."""
    index_B1S1 = tb.unsqueeze(tb.unsqueeze(position_BS, 1), 3)  # [B,S] -> [B,1,S] -> [B,1,S,1]
    return tb.expand(index_B1S1, [-1, Hkv, -1, Dh])  # -> [B,Hkv,S,Dh]


def write_cache(tb: TorchBuilder, past_BHkvPDh: Tensor, new_BHkvSDh: Tensor, index_BHkvSDh: Tensor, S: Dim) -> Tensor:
    """Grow the cache by S rows, then write new token s of row b at position[b,s].

    Rows before ``past_len[b]`` keep the past; rows after the new ones are
    unspecified, as in onnxruntime.
    """
    padded_BHkvTDh = tb.pad_dim_end(past_BHkvPDh, 2, S)  # [B,Hkv,P,Dh] -> [B,Hkv,P+S,Dh], zeros
    return tb.scatter_src(padded_BHkvTDh, 2, index_BHkvSDh, new_BHkvSDh)  # rows position[b,s] <- new


def causal_mask(tb: TorchBuilder, position_BS: Tensor, seqlens_B: Tensor, present_BHkvTDh: Tensor, dtype: str) -> Tensor:
    """Additive mask [B,1,S,T]: 0 where key t <= min(position[b,s], seqlens_k[b]), else -inf.

    The bound also hides cache rows past each row's valid length.
    """
    last_key_BS = tb.minimum(position_BS, tb.unsqueeze(seqlens_B, 1))  # [B,S] min [B,1] -> [B,S]
    key_pos_T = tb.arange(tb.size(present_BHkvTDh, 2))  # [T]
    visible_BST = tb.le(key_pos_T, tb.unsqueeze(last_key_BS, 2))  # [T] <= [B,S,1] -> [B,S,T]
    mask_BST = tb.where_scalars(visible_BST, 0.0, NEG_INF, dtype)
    return tb.unsqueeze(mask_BST, 1)  # [B,S,T] -> [B,1,S,T]


def fold_scale(tb: TorchBuilder, query_BHSDh: Tensor, scale: float, Dh: int) -> Tensor:
    """SDPA is emitted with its default scale 1/sqrt(Dh) (an explicit one is dropped
    by torch-mlir's linalg lowering); another ``scale`` is folded into Q."""
    if scale == 0.0 or math.isclose(scale, 1.0 / math.sqrt(Dh), rel_tol=0, abs_tol=0):
        return query_BHSDh
    return tb.mul_scalar(query_BHSDh, scale * math.sqrt(Dh))
