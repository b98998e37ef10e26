"""Q/K/V split into heads, from separate or packed inputs: [B,S,N*Dh] -> [B,N,S,Dh]."""

from __future__ import annotations


from ....builder import Tensor, TorchBuilder
from .inputs import GqaInputs
from .support import GqaAttributes


def split_heads(tb: TorchBuilder, ins: GqaInputs, attrs: GqaAttributes):
    """Q/K/V from separate or packed inputs, each as [B,heads,S,Dh]."""
    H, Hkv, Dh = attrs.num_heads, attrs.kv_num_heads, ins.head_size
    if ins.key is None:  # packed: heads first, then three slices of whole heads
        # (slicing the flat [B,S,(H+2Hkv)*Dh] rows gave IREE 3.13's CUDA code wrong K/V for S > 1)
        qkv_BNSDh = to_heads(tb, ins.query, H + 2 * Hkv, Dh)  # [B,S,(H+2Hkv)*Dh] -> [B,H+2Hkv,S,Dh]
        return (tb.slice(qkv_BNSDh, 1, 0, H), tb.slice(qkv_BNSDh, 1, H, H + Hkv),  # -> [B,H,S,Dh], [B,Hkv,S,Dh]
                tb.slice(qkv_BNSDh, 1, H + Hkv, H + 2 * Hkv))
    return to_heads(tb, ins.query, H, Dh), to_heads(tb, ins.key, Hkv, Dh), to_heads(tb, ins.value, Hkv, Dh)


def to_heads(tb: TorchBuilder, x_BSD: Tensor, heads: int, Dh: int) -> Tensor:
    x_BSNDh = tb.unflatten(x_BSD, 2, [heads, Dh])  # [B,S,N*Dh] -> [B,S,N,Dh]
    return tb.transpose(x_BSNDh, 1, 2)  # [B,S,N,Dh] -> [B,N,S,Dh]
