"""The lowering's inputs and intermediate records: the op's inputs, the step's positions, the caches after the step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

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
    # total_sequence_length as a host value (positions.host_total), in the branch of a decode step
    # of one batch row that reads no length back mid-step (__init__.py); None elsewhere
    total_on_host: Optional[Dim] = None


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
class CacheWrite:
    """The cache write of one batch row, for the fused decode kernel to make (fused_decode.py):
    present [B,Hkv,T,Dc] is the past [B,Hkv,P,Dc] with rows [start, start + S) the new ones
    [B,Hkv,S,Dc] (rows P.. otherwise 0): a growing cache (T = P + S), made while the kernel reads
    the rows, or (``lengths`` only) a fixed-capacity buffer (T = P), written in place.  ``made``:
    the kernel's presents, which then replace the CacheStep's (built all the same, for every
    other form)."""

    past_key: Tensor
    past_value: Tensor
    new_key: Tensor
    new_value: Tensor
    start: Dim
    present_key: Tensor  # as built for the other forms: the kernel makes the write only where it reads this one
    # si64 [2] on the device (kv_cache.device_lengths): the first new row (T where the new rows do
    # not fit) and the rows read (clamped to [1, T]), for the kernel to read there: no host read
    # mid-step.  None unless S is static and T static or written in place.
    lengths: Optional[Tensor] = None
    # The new rows written into past_key/past_value themselves (the kernel's put): a fixed-capacity
    # buffer (T == P), or the caches grown by a growth known at run time on the host (T at run time)
    in_place: bool = False
    made: Optional[Tuple[Tensor, Tensor]] = None


@dataclass
class CacheStep:
    """The caches after the step, and the rows attention reads."""

    present_key: Tensor  # [B,Hkv,T,Dc] (stored form: int8 / packed int4 when quantized)
    present_value: Tensor
    read_key: Tensor  # [B,Hkv,R,Dc]: the present rows (R <= T), or a window cache's staged rows
    read_value: Tensor
    key_pos: Tensor  # si64 absolute position of each read row: [R], or [B,1,R] (window cache)
    window: Optional[Any] = None  # a window cache's WindowPlan (window_cache.py builds on these records)
    # Every read row is read by every batch row (one batch row, read on its rows [0, seqlens_k + 1)),
    # or a row none reads holds 0 (an empty past: new rows and the growth's zero rows only):
    # nothing to zero before P.V, and no count of the rows all batch rows read to read back.
    every_row_read: bool = False
    write: Optional[CacheWrite] = None  # the write as a kernel may make it (a growing cache of one batch row)

    def presents(self) -> Tuple[Tensor, Tensor]:
        """(present_key, present_value): the fused kernel's where it made the write."""
        if self.write is not None and self.write.made is not None:
            return self.write.made
        return self.present_key, self.present_value
