"""The op's inputs read, checked as onnxruntime checks them, and brought to heads-first layout.

Dimension letters: B batch, H query heads, Hkv key/value heads, S query
tokens, L new key/value tokens, P past tokens, T = P + L, Dh the Q/K head
size, Dv the V head size.

    Q [B,H,S,Dh] | [B,S,H*Dh]      K [B,Hkv,L,Dh] | [B,L,Hkv*Dh]      V [B,Hkv,L,Dv] | [B,L,Hkv*Dv]
    past_key [B,Hkv,P,Dh]  past_value [B,Hkv,P,Dv]  nonpad_kv_seqlen [B] (opset 24)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ....binder import OpBinder
from ....builder import Tensor, TorchBuilder
from ....registry import Refusal
from .support import INPUTS, OP, SUPPORTED_DTYPES, AttentionAttributes, output_requested


@dataclass
class AttentionInputs:
    query_BHSDh: Tensor
    key_BHkvLDh: Tensor
    value_BHkvLDv: Tensor
    attn_mask: Optional[Tensor]  # 2-D to 4-D, broadcast to [B,H,S,T]
    past_key_BHkvPDh: Optional[Tensor]
    past_value_BHkvPDv: Optional[Tensor]
    nonpad_B: Optional[Tensor]  # si64 [B]
    rank3: bool  # Y leaves as [B,S,H*Dv]
    H: int
    Hkv: int


def subject(slot: int) -> str:
    return f"input {slot} '{INPUTS[slot]}'"


def read_inputs(b: OpBinder, tb: TorchBuilder, attrs: AttentionAttributes) -> AttentionInputs:
    q, k, v = (b.tensor(i, INPUTS[i], required=True) for i in range(3))
    check_types(q, k, v)
    rank3 = q.rank == 3
    if rank3:
        q, k, v = split_heads(tb, attrs, q, k, v)  # [B,S,N*D] -> [B,N,S,D]
    else:
        check_head_attributes(attrs, q, k)
    H, Hkv = q.shape[1], k.shape[1]
    if H % Hkv:
        raise Refusal(f"q_num_heads ({H}) must be a multiple of kv_num_heads ({Hkv}) (onnxruntime rejects it)", "input 1 'K'")
    check_shapes(tb, q, k, v)
    past_key, past_value = read_past(b, tb, k, v, attrs.body)
    nonpad = read_nonpad(b, tb, attrs, q, past_key)
    mask = b.tensor(3, INPUTS[3])
    return AttentionInputs(q, k, v, mask, past_key, past_value, nonpad, rank3, H, Hkv)


def check_types(q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.dtype not in SUPPORTED_DTYPES:
        raise Refusal(f"type {q.dtype} is not supported; supported: {', '.join(SUPPORTED_DTYPES)} (onnxruntime's CPU provider)", subject(0))
    for slot, t in ((1, k), (2, v)):
        if t.dtype != q.dtype:
            raise Refusal(f"type {t.dtype} differs from Q's {q.dtype}; supported: Q's type (onnxruntime's CPU kernel)", subject(slot))
        if t.rank != q.rank:
            raise Refusal(f"rank {t.rank} differs from Q's {q.rank}; supported: Q's rank (onnxruntime rejects it)", subject(slot))
    if q.rank not in (3, 4):
        raise Refusal(f"rank {q.rank} is not supported; supported: 3 ([B,S,H*Dh]) or 4 ([B,H,S,Dh])", subject(0))


def split_heads(tb: TorchBuilder, attrs: AttentionAttributes, q: Tensor, k: Tensor, v: Tensor):
    """3-D inputs split into heads by q_num_heads / kv_num_heads: [B,S,N*D] -> [B,S,N,D] -> [B,N,S,D]."""
    for name, value in (("q_num_heads", attrs.q_num_heads), ("kv_num_heads", attrs.kv_num_heads)):
        if value <= 0:
            raise Refusal("is required with 3-D inputs (onnxruntime rejects it otherwise)", f"attribute '{name}'")
    out = []
    for slot, t, heads in ((0, q, attrs.q_num_heads), (1, k, attrs.kv_num_heads), (2, v, attrs.kv_num_heads)):
        hidden = t.shape[2]
        if hidden is None:
            raise Refusal("dimension 2 is dynamic; supported: a static hidden size with 3-D inputs", subject(slot))
        if hidden % heads:
            raise Refusal(f"dimension 2 ({hidden}) is not a multiple of the head count ({heads}) (onnxruntime rejects it)", subject(slot))
        out.append(tb.transpose(tb.unflatten(t, 2, [heads, hidden // heads]), 1, 2))  # [B,S,N*D] -> [B,S,N,D] -> [B,N,S,D]
    return tuple(out)


def check_head_attributes(attrs: AttentionAttributes, q: Tensor, k: Tensor) -> None:
    """4-D inputs: the head counts are dims 1 (static), and head attributes, if given, must agree."""
    if attrs.body and (attrs.q_num_heads or attrs.kv_num_heads):
        raise Refusal("is given with 4-D inputs where onnxruntime runs the function body, which then returns a 3-D Y "
                      "(the spec: 4-D); supported: absent with 4-D inputs", f"attribute '{'q_num_heads' if attrs.q_num_heads else 'kv_num_heads'}'")
    for slot, t, name, value in ((0, q, "q_num_heads", attrs.q_num_heads), (1, k, "kv_num_heads", attrs.kv_num_heads)):
        if t.shape[1] is None:
            raise Refusal("dimension 1 (heads) is dynamic; supported: a static head count", subject(slot))
        if value and value != t.shape[1]:
            raise Refusal(f"value {value} differs from {INPUTS[slot]}'s dimension 1 ({t.shape[1]}) (onnxruntime rejects it)", f"attribute '{name}'")


def check_shapes(tb: TorchBuilder, q: Tensor, k: Tensor, v: Tensor) -> None:
    """Q/K head sizes static and equal, V's static; batch and key/value lengths agree; L >= 1."""
    if q.shape[3] is None or v.shape[3] is None:
        raise Refusal("the head size is dynamic; supported: static head sizes", subject(0 if q.shape[3] is None else 2))
    if k.shape[3] != q.shape[3]:
        raise Refusal(f"head size {k.shape[3]} differs from Q's {q.shape[3]} (onnxruntime rejects it)", subject(1))
    if v.shape[1] != k.shape[1]:
        raise Refusal(f"{v.shape[1]} heads differ from K's {k.shape[1]} (onnxruntime rejects it)", subject(2))
    same(tb, k, 0, q, 0, 1, "batch size")
    same(tb, v, 0, q, 0, 2, "batch size")
    same(tb, v, 2, k, 2, 2, "sequence length")
    if k.shape[2] == 0:
        raise Refusal("the key sequence length is 0; supported: >= 1 (onnxruntime rejects it)", subject(1))
    if k.shape[2] is None:
        tb.runtime_assert(tb.dim_le(1, tb.size(k, 2)), f"{OP}: the key sequence length must be >= 1 (onnxruntime rejects it)")


def same(tb: TorchBuilder, t: Tensor, d: int, other: Tensor, od: int, slot: int, what: str) -> None:
    """Dim d of t equals dim od of other: refused when both are static and differ, checked at run time otherwise."""
    a, c = t.shape[d], other.shape[od]
    if a is not None and c is not None and a != c:
        raise Refusal(f"{what} {a} differs from {c} (onnxruntime rejects it)", subject(slot))
    tb.check_dim(t, d, tb.size(other, od), f"{OP}: {subject(slot)} {what} must match (onnxruntime rejects it)")


def read_past(b: OpBinder, tb: TorchBuilder, k: Tensor, v: Tensor, body: bool):
    past_key, past_value = b.tensor(4, INPUTS[4]), b.tensor(5, INPUTS[5])
    if (past_key is None) != (past_value is None):
        missing = 5 if past_value is None else 4
        raise Refusal("is absent while the other past input is given; supported: both or neither", subject(missing))
    if past_key is None:
        return None, None
    if not body and not (output_requested(b, 1) and output_requested(b, 2)):  # the function body takes it
        raise Refusal("past_key/past_value are given but present_key/present_value are not requested; supported: "
                      "both presents with a past (onnxruntime's f16/f32 kernel rejects it)", "output 1 'present_key'")
    refined = []
    for slot, past, new in ((4, past_key, k), (5, past_value, v)):
        if past.dtype != new.dtype or past.rank != 4:
            raise Refusal(f"is {past.dtype} rank {past.rank}; supported: {new.dtype} [B,Hkv,P,D]", subject(slot))
        for d, what in ((1, "head count"), (3, "head size")):
            if past.shape[d] != new.shape[d] and past.shape[d] is not None:
                raise Refusal(f"{what} {past.shape[d]} differs from the new rows' {new.shape[d]}", subject(slot))
        past = tb.checked_static(past, {d: new.shape[d] for d in (1, 3) if past.shape[d] is None}, f"{OP}: {subject(slot)}")
        same(tb, past, 0, new, 0, slot, "batch size")
        refined.append(past)
    same(tb, refined[1], 2, refined[0], 2, 5, "past sequence length")
    return tuple(refined)


def read_nonpad(b: OpBinder, tb: TorchBuilder, attrs: AttentionAttributes, q: Tensor, past_key) -> Optional[Tensor]:
    nonpad = b.tensor(6, INPUTS[6])
    if nonpad is None:
        return None
    if attrs.opset < 24:
        raise Refusal(f"is an opset-24 input; the model imports opset {attrs.opset} (onnxruntime rejects it)", subject(6))
    if past_key is not None:
        raise Refusal("is given with past_key/past_value; supported: one or the other (onnxruntime rejects both)", subject(6))
    if nonpad.dtype != "si64" or nonpad.rank != 1:
        raise Refusal(f"is {nonpad.dtype} rank {nonpad.rank}; supported: int64 [B]", subject(6))
    same(tb, nonpad, 0, q, 0, 6, "batch size")
    return nonpad
