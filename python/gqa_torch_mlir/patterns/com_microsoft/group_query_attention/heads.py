"""Q/K/V split into heads, from separate or packed inputs: [B,S,N*Dh] -> [B,N,S,Dh]."""

from __future__ import annotations


from ....builder import Tensor, TorchBuilder
from .inputs import GqaInputs
from .support import GqaAttributes


def split_heads(tb: TorchBuilder, ins: GqaInputs, attrs: GqaAttributes):
    """Q/K/V from separate or packed inputs, each as [B,heads,S,Dh]."""
    H, Hkv, Dh = attrs.num_heads, attrs.kv_num_heads, ins.head_size
    if ins.key is None:  # packed: [B,S,(H+2Hkv)*Dh] -> three slices on dim 2
        q_BSD = tb.slice(ins.query, 2, 0, H * Dh)
        k_BSD = tb.slice(ins.query, 2, H * Dh, (H + Hkv) * Dh)
        v_BSD = tb.slice(ins.query, 2, (H + Hkv) * Dh, (H + 2 * Hkv) * Dh)
    else:
        q_BSD, k_BSD, v_BSD = ins.query, ins.key, ins.value
    return to_heads(tb, q_BSD, H, Dh), to_heads(tb, k_BSD, Hkv, Dh), to_heads(tb, v_BSD, Hkv, Dh)


def to_heads(tb: TorchBuilder, x_BSD: Tensor, heads: int, Dh: int) -> Tensor:
    x_BSNDh = tb.unflatten(x_BSD, 2, [heads, Dh])  # [B,S,N*Dh] -> [B,S,N,Dh]
    return tb.transpose(x_BSNDh, 1, 2)  # [B,S,N,Dh] -> [B,N,S,Dh]
