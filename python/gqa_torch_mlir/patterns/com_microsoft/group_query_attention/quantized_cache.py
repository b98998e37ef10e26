"""How GroupQueryAttention's KV cache stores values: float, int8, or packed int4.

With ``k_quant_type``/``v_quant_type`` PER_TENSOR or PER_CHANNEL, onnxruntime's
CPU kernel keeps the cache quantized with the scales ``k_scale``/``v_scale``
(``[1]`` or ``[1,Hkv,1,Dh]``):

* ``kv_cache_bit_width = 8``: int8 cache ``[B,Hkv,T,Dh]``,
  ``q = clamp(round_half_even(x * (1 / scale)), -128, 127)``, read back as ``q * scale``;
  as onnxruntime does, a NaN stores the top code and a zero scale quantizes as 1.
* ``kv_cache_bit_width = 4``: uint8 cache ``[B,Hkv,T,Dh/2]``,
  ``q = clamp(round_half_even(x * (1 / scale)), -8, 7)`` stored as ``q + 8`` nibbles,
  element 2i in the low nibble of byte i and element 2i+1 in the high one.

New K/V rows are quantized before they are written, and attention reads every
row, new ones included, dequantized (checked against onnxruntime 1.32): a
PER_CHANNEL or 4-bit cache as ``q * scale``; with an int8 PER_TENSOR cache the
scale multiplies ``Q.K^T`` and ``P.V`` of the codes instead, as onnxruntime
applies it there (the same numbers, but an infinite or huge scale gives
onnxruntime's infinities, not ``0 * inf``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ....builder import Tensor, TorchBuilder


@dataclass(frozen=True)
class CacheCodec:
    bits: int  # 0: the cache holds the attention dtype; 8 or 4: quantized
    k_scale: Optional[Tensor] = None
    v_scale: Optional[Tensor] = None
    per_tensor: bool = False  # int8 PER_TENSOR: k_scale multiplies Q.K^T, as onnxruntime applies it
    value_scaled_after: bool = False  # ... and v_scale P.V, as onnxruntime's qk_output path does (else V is dequantized)

    @property
    def quantized(self) -> bool:
        return self.bits != 0

    @property
    def dtype(self) -> Optional[str]:
        return {8: "si8", 4: "ui8"}.get(self.bits)

    def scale(self, which: str) -> Tensor:
        return self.k_scale if which == "key" else self.v_scale

    def encode(self, tb: TorchBuilder, x_BHkvSDh: Tensor, which: str) -> Tensor:
        """New rows as stored in the cache: [B,Hkv,S,Dh] -> [B,Hkv,S,Dh] si8 or [B,Hkv,S,Dh/2] ui8."""
        if not self.quantized:
            return x_BHkvSDh
        limit = 127 if self.bits == 8 else 7
        scale = _broadcastable(tb, self.scale(which))
        scale = tb.where_scalar_else(tb.eq_scalar(scale, 0.0), 1.0, scale)  # onnxruntime quantizes with 1 then
        q = tb.mul(tb.to_dtype(x_BHkvSDh, "f32"), tb.reciprocal(scale))  # x * (1 / scale), rounded as onnxruntime's
        q = tb.where_scalar_else(tb.isnan(q), float(limit), q)  # NaN: onnxruntime's top code (a NaN cast is undefined)
        q = tb.clamp(tb.round(q), -limit - 1.0, float(limit))  # integers in f32
        if self.bits == 8:
            return tb.to_dtype(q, "si8")
        Dh = x_BHkvSDh.shape[3]
        even = tb.add_float(tb.slice(q, 3, 0, Dh, 2), 8.0)  # [B,Hkv,S,Dh/2], in [0, 15]
        odd = tb.add_float(tb.slice(q, 3, 1, Dh, 2), 8.0)
        packed = tb.add(even, tb.mul_scalar(odd, 16.0))  # low nibble even, high nibble odd, in [0, 255]
        # Through an integer: f32 -> 8-bit conversion of a value >= 128 is out of
        # range for LLVM's fptosi (poison: IREE's code for some CPUs then stores
        # wrong bytes); f32 -> si32 is exact here and si32 -> ui8 truncates.
        return tb.to_dtype(tb.to_dtype(packed, "si32"), "ui8")

    def decode(self, tb: TorchBuilder, cache_BHkvTDc: Tensor, which: str) -> Tensor:
        """The cache as f32 values [B,Hkv,T,Dh] for attention (the cache itself when float)."""
        if not self.quantized:
            return cache_BHkvTDc
        if self.bits == 8:
            ints = tb.to_dtype(cache_BHkvTDc, "f32")
        else:
            bytes_ = tb.to_dtype(cache_BHkvTDc, "si64")
            low = tb.add_scalar(tb.remainder_scalar(bytes_, 16), -8)  # element 2i
            high = tb.add_scalar(tb.floor_divide_scalar(bytes_, 16), -8)  # element 2i+1
            pairs = tb.cat([tb.unsqueeze(low, 4), tb.unsqueeze(high, 4)], 4)  # [B,Hkv,T,Dh/2,2]
            ints = tb.to_dtype(tb.flatten(pairs, 3, 4), "f32")  # -> [B,Hkv,T,Dh]
        if self._scaled_after(which):
            return ints  # scaled after the matmul (factor)
        return tb.mul(ints, _broadcastable(tb, self.scale(which)))

    def _scaled_after(self, which: str) -> bool:
        return self.quantized and self.per_tensor and (which == "key" or self.value_scaled_after)

    def factor(self, tb: TorchBuilder, which: str) -> Optional[Tensor]:
        """f32 [1]: a PER_TENSOR scale that multiplies the matmul of decoded codes, else None.

        onnxruntime scales the integer Q.K^T, so a code of 0 never meets an infinite
        k_scale; P.V it scales so only with qk_output, and otherwise dequantizes V
        first (a 0 code times an infinite v_scale is NaN there)."""
        return _broadcastable(tb, self.scale(which)) if self._scaled_after(which) else None


def _broadcastable(tb: TorchBuilder, scale: Tensor) -> Tensor:
    """A [1] or [1,Hkv,1,Dh] scale as f32 broadcastable over [B,Hkv,T,Dh]."""
    return tb.to_dtype(scale, "f32")
