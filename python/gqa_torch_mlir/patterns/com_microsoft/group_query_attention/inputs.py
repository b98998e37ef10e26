"""The lowering's inputs and intermediate records: the op's inputs, the step's positions, the caches after the step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ....builder import Dim, Tensor

OP = "GroupQueryAttention"  # how run-time check messages name the op
NEG_INF = float("-inf")


@dataclass
class GqaInputs:
    query: Tensor  # [B,S,H*Dh] or packed [B,S,(H+2Hkv)*Dh]
    key: Optional[Tensor]  # [B,S,Hkv*Dh]; None when packed
    value: Optional[Tensor]
    past_key: Optional[Tensor]  # [B,Hkv,P,Dh]; None: an empty past
    past_value: Optional[Tensor]
    seqlens_k: Tensor  # [B] (or B entries in more dims of 1: [B,1], [1,B], [B,1,1]...) si32
    total_sequence_length: Tensor  # [] or [1] si32
    cos_cache: Optional[Tensor]  # [M,R/2]
    sin_cache: Optional[Tensor]
    position_ids: Optional[Tensor]  # [B,S] si64
    attention_bias: Optional[Tensor]  # [B|1,H|1,S,Tt]
    head_sink: Optional[Tensor]  # [H]
    k_scale: Optional[Tensor]  # f32 [1] or [1,Hkv,1,Dh], with a quantized cache
    v_scale: Optional[Tensor]
    query_seqlens: Optional[Tensor]  # [B] si32: valid rows of a right-padded chunk
    head_size: int


@dataclass
class Step:
    """This step's lengths and positions."""

    S: Dim
    seqlens_B: Tensor  # si64 [B]
    # si32 [B] as fed: the run-time checks and the max over rows read these (positions.py says why)
    seqlens_fed_B: Tensor
    total: Tensor  # si64 [] (or [1])
    first_prompt: Optional[Tensor]  # i1 [] (or [1]): S == total_sequence_length; None with query_seqlens
    past_len_B: Tensor  # si64 [B]: tokens in the cache before the step
    position_BS: Tensor  # si64 [B,S]: past_len[b] + s


@dataclass
class CacheStep:
    """The caches after the step, and the rows attention reads."""

    present_key: Tensor  # [B,Hkv,T,Dc] (stored form: int8 / packed int4 when quantized)
    present_value: Tensor
    read_key: Tensor  # [B,Hkv,R,Dc]: the present rows (R <= T), or a window cache's staged rows
    read_value: Tensor
    key_pos: Tensor  # si64 absolute position of each read row: [R], or [B,1,R] (window cache)
    window: Optional[Any] = None  # a window cache's WindowPlan (window_cache.py builds on these records)
    # Every read row is read by every batch row (one batch row, read on its rows [0, seqlens_k + 1)):
    # nothing to zero before P.V, and no count of the rows all batch rows read to read back.
    every_row_read: bool = False
