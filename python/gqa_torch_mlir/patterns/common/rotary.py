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
        rotated = self._rotate(tb, x_BNSDh, c, s, R2)  # [B,N,S,R]
        if 2 * R2 != Dh:
            rotated = tb.cat([rotated, tb.slice(x_BNSDh, 3, 2 * R2, Dh)], 3)  # + [B,N,S,Dh-R] -> [B,N,S,Dh]
        return tb.to_dtype(rotated, dtype)

    def _rotate(self, tb: TorchBuilder, x_BNSDh: Tensor, c_B1SR2: Tensor, s_B1SR2: Tensor, R2: int) -> Tensor:
        """Each pair (x1, x2) -> (x1*cos - x2*sin, x2*cos + x1*sin): the halves (i, i + R/2), or
        (interleaved) the pairs (2i, 2i + 1); the same f32 products and sums either way.

        The pairs are a dim of 2 (halves [2,R/2], interleaved [R/2,2]), swapped with a flip and
        signed by [-1, 1]: one elementwise dispatch for IREE.  The halves as two slices and a
        concatenation were 4 dispatches and 4 copies a step (Q, K), each a stage of the step's
        chain that wakes local-task's workers ("CPU, round 18"); stride-2 slices of the pairs
        failed to compile with dynamic dims in f16.
        """
        pair_dim = 4 if self.interleaved else 3  # [B,N,S,R/2,2] or [B,N,S,2,R/2]
        split = [R2, 2] if self.interleaved else [2, R2]
        pairs = tb.unflatten(tb.slice(x_BNSDh, 3, 0, 2 * R2), 3, split)  # [B,N,S,R] -> [B,N,S,..2..]
        sign_2 = tb.to_dtype(tb.add_scalar(tb.mul_int_scalar(tb.arange(2), 2), -1), "f32")  # [-1, 1]
        if not self.interleaved:
            sign_2 = tb.unsqueeze(sign_2, 1)  # -> [2,1]
        swapped = tb.mul(tb.flip(pairs, pair_dim), sign_2)  # (-x2, x1)
        c, s = tb.unsqueeze(c_B1SR2, pair_dim), tb.unsqueeze(s_B1SR2, pair_dim)  # [B,1,S,R/2] -> [B,1,S,..1..]
        rotated = tb.add(tb.mul(pairs, c), tb.mul(swapped, s))
        return tb.flatten(rotated, 3, 4)  # -> [B,N,S,R]
