"""Rotary position embedding, shared by GroupQueryAttention (com.microsoft) and RotaryEmbedding (ai.onnx, 23).

Dimension letters: B batch, N heads, S tokens, Dh head size, R the rotated
dims (R <= Dh; the rest pass through), R/2 the cos/sin columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...builder import Tensor, TorchBuilder


@dataclass
class RotaryTables:
    """cos/sin rows at each token's position, broadcastable over heads: [B,1,S,R/2]."""

    cos_B1SR2: Tensor
    sin_B1SR2: Tensor
    interleaved: bool

    def apply(self, tb: TorchBuilder, x_BNSDh: Tensor) -> Tensor:
        """Rotate the first R dims of [B,N,S,Dh]; dims [R, Dh) pass through (partial rotary).

        Computed in f32 and rounded once to the input dtype, as onnxruntime does
        for f16 (rounding each product in f16 shifts quantized caches by a step).
        """
        dtype = x_BNSDh.dtype
        x_BNSDh = tb.to_dtype(x_BNSDh, "f32")
        R2 = self.cos_B1SR2.shape[3]
        Dh = x_BNSDh.shape[3]
        c, s = tb.to_dtype(self.cos_B1SR2, "f32"), tb.to_dtype(self.sin_B1SR2, "f32")
        if self.interleaved:
            rotated = self._rotate_pairs(tb, x_BNSDh, c, s, R2)
        else:  # halves (i, i + R/2)
            x1, x2 = tb.slice(x_BNSDh, 3, 0, R2), tb.slice(x_BNSDh, 3, R2, 2 * R2)
            y1_BNSR2 = tb.sub(tb.mul(x1, c), tb.mul(x2, s))  # x1*cos - x2*sin
            y2_BNSR2 = tb.add(tb.mul(x2, c), tb.mul(x1, s))  # x2*cos + x1*sin
            rotated = tb.cat([y1_BNSR2, y2_BNSR2], 3)  # [B,N,S,R/2] x2 -> [B,N,S,R]
        if 2 * R2 != Dh:
            rotated = tb.cat([rotated, tb.slice(x_BNSDh, 3, 2 * R2, Dh)], 3)  # + [B,N,S,Dh-R] -> [B,N,S,Dh]
        return tb.to_dtype(rotated, dtype)

    @staticmethod
    def _rotate_pairs(tb: TorchBuilder, x_BNSDh: Tensor, c_B1SR2: Tensor, s_B1SR2: Tensor, R2: int) -> Tensor:
        """Interleaved pairs (x1, x2) = (2i, 2i+1) -> (x1*cos - x2*sin, x2*cos + x1*sin), as whole pairs.

        No stride-2 slices or concatenation (IREE fails to compile those with
        dynamic dims in f16): the pairs are a trailing dim of 2, swapped with
        a flip and signed by [-1, 1]; the same f32 products and sums.
        """
        pairs_BNSR22 = tb.unflatten(tb.slice(x_BNSDh, 3, 0, 2 * R2), 3, [R2, 2])  # [B,N,S,R] -> [B,N,S,R/2,2]
        sign_2 = tb.to_dtype(tb.add_scalar(tb.mul_int_scalar(tb.arange(2), 2), -1), "f32")  # [-1, 1]
        swapped_BNSR22 = tb.mul(tb.flip(pairs_BNSR22, 4), sign_2)  # (-x2, x1)
        c, s = tb.unsqueeze(c_B1SR2, 4), tb.unsqueeze(s_B1SR2, 4)  # [B,1,S,R/2] -> [B,1,S,R/2,1]
        rotated_BNSR22 = tb.add(tb.mul(pairs_BNSR22, c), tb.mul(swapped_BNSR22, s))
        return tb.flatten(rotated_BNSR22, 3, 4)  # -> [B,N,S,R]
