"""A decode step's attention as one IREE CPU dispatch (``attention=fused``; kernels/decode_attention.py).

The grouped query rows [B,Hkv,G,Dh] (S = 1), scaled, against the K/V rows the
step reads; the caches are handed to the kernel whole, with the count of rows
read, so that a fixed-capacity buffer read on its first rows is read in place
(as a slice it would be copied out: IREE passes only whole tensors to a
dispatch).  Everything else (masks, softcap, sinks, biases, output_qk,
quantized caches, several query rows) stays in the decomposed form: the
caller asks :func:`applies` first.

A growing cache whose rows are known only at run time is grown by one row
for the kernel by a copy dispatch of ours (:func:`grown_by_one_row`,
kernels/cache_grow.py), where :func:`grows_by_kernel`.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ...builder import Dim, Tensor, TorchBuilder
from ...kernels import cache_grow
from ...kernels.decode_attention import HEAD_SIZES, KernelShape, render, supported

# IREE's ONNX input pipeline asks every function for an opset; the kernel's has no ONNX op.
_OPSET = 21


def applies(enabled: bool, S: Dim, q_BHSDh: Tensor, key_BHkvTDh: Tensor, value_BHkvTDh: Tensor, Hkv: int) -> bool:
    """``enabled`` (attention=fused), a static number of query rows S, f32 Q, K and V, and a KV head
    layout the kernel has (G*S grouped rows at most MAX_GROUP)."""
    if not enabled or not (isinstance(S, int) and S >= 1):
        return False
    if any(t.dtype != "f32" for t in (q_BHSDh, key_BHkvTDh, value_BHkvTDh)):
        return False
    H, Dh = q_BHSDh.shape[1], q_BHSDh.shape[3]
    return H is not None and Dh is not None and H % Hkv == 0 and supported(Hkv, H // Hkv * S, Dh)


def _read_in_place(tb: TorchBuilder, rows_BHkvRDh: Tensor) -> Tuple[Tensor, Dim]:
    """(the buffer, the rows read): the source of our own ``slice(buffer, 2, 0, rows)``, or the tensor itself."""
    op = rows_BHkvRDh.value.owner  # a Block for a block argument
    if getattr(op, "name", None) == "torch.aten.slice.Tensor" and len(op.operands) == 5:
        ir = tb.ir
        dim, start, step = (_constant_int(ir, v) for v in (op.operands[1], op.operands[2], op.operands[4]))
        if (dim, start, step) == (2, 0, 1):
            source = Tensor.of(op.operands[0])
            end = _constant_int(ir, op.operands[3])
            return source, (end if end is not None else op.operands[3])
    return rows_BHkvRDh, tb.size(rows_BHkvRDh, 2)


def _same(a: Dim, b: Dim) -> bool:
    return a == b if isinstance(a, int) and isinstance(b, int) else (not isinstance(a, int) and not isinstance(b, int) and a == b)


def _constant_int(ir, value) -> Optional[int]:
    owner = value.owner
    if getattr(owner, "name", None) != "torch.constant.int":
        return None
    return ir.IntegerAttr(owner.attributes["value"]).value


LOWEST = float(np.finfo(np.float32).min)


def visible_bias(tb: TorchBuilder, visible_BSR: Tensor, read_B1R: Optional[Tensor]) -> Tensor:
    """The kernel's bias from which keys each query row attends (i1 [B,S,R]) and its batch row
    reads (i1 [B,1,R]; None: all): f32 [B,S,R], 0 where attended, the lowest f32 where masked but
    read (its value row still multiplies a 0 probability, so a NaN there reaches the output, as in
    the decomposed form and onnxruntime's P.V over the rows it reads), -inf where not read (skipped)."""
    bias_BSR = tb.where_scalars(visible_BSR, 0.0, LOWEST, "f32")
    if read_B1R is None:
        return bias_BSR
    return tb.where_else_scalar(read_B1R, bias_BSR, float("-inf"))  # [B,1,R] broadcast over S


def fused_decode_attention(tb: TorchBuilder, q_BHkvGSDh: Tensor, key_BHkvRDh: Tensor, value_BHkvRDh: Tensor,
                           bias_BSR: Tensor, softcap: float = 0.0, sink_1HkvGS1: Optional[Tensor] = None, write=None) -> Tensor:
    """Attention [B,Hkv,G*S,Dh] f32 of the scaled grouped rows (row g*S + s), each score (softcapped
    if ``softcap`` > 0) plus its query row's bias (f32 [B|1,S,R]; -inf only where the batch row
    reads the key for no s), with a sink logit per grouped row (f32 [1,Hkv,G*S,1]) if given.

    ``write`` (the CacheWrite of one batch row, or None): with its lengths on the device
    (reads_lengths_on_device; ``bias_BSR`` then over all T rows) the kernel reads them there and
    makes the write, in place or as a growing cache's present; else, for a growing cache, K and V
    are the first R rows of its present, which the kernel then writes from the past and the new
    rows as it reads them, where the caches' shapes allow: one pass over the past instead of a
    copy into present and a read of present.  Either way ``write.made`` holds the presents."""
    B, Hkv, GS, Dh = q_BHkvGSDh.shape
    S = bias_BSR.shape[1]
    if reads_lengths_on_device(write, S):  # bias_BSR over all T rows (the caller's)
        T = write.present_key.shape[2]  # None: a fixed-capacity buffer's, at run time
        shape = KernelShape(B, Hkv, GS, Dh, T, S, softcap, sink_1HkvGS1 is not None, writes=not write.in_place, lengths=True)
        return _call_kernel(tb, shape, q_BHkvGSDh, bias_BSR, sink_1HkvGS1, write, [tb.builtin(write.lengths)])
    key_BHkvTDh, rows = _read_in_place(tb, key_BHkvRDh)
    value_BHkvTDh, value_rows = _read_in_place(tb, value_BHkvRDh)
    if value_BHkvTDh.shape != key_BHkvTDh.shape or not _same(value_rows, rows):
        key_BHkvTDh, value_BHkvTDh, rows = key_BHkvRDh, value_BHkvRDh, tb.size(key_BHkvRDh, 2)
    writes = write is not None and _writable(write, key_BHkvTDh, S)
    shape = KernelShape(B, Hkv, GS, Dh, key_BHkvTDh.shape[2], S, softcap, sink_1HkvGS1 is not None, writes)
    if writes:
        return _call_kernel(tb, shape, q_BHkvGSDh, bias_BSR, sink_1HkvGS1, write, [tb.index(rows), tb.index(write.start)])
    return _call_kernel(tb, shape, q_BHkvGSDh, bias_BSR, sink_1HkvGS1, None, [tb.index(rows)], (key_BHkvTDh, value_BHkvTDh))


def _call_kernel(tb: TorchBuilder, shape: KernelShape, q_BHkvGSDh: Tensor, bias_BSR: Tensor, sink_1HkvGS1: Optional[Tensor],
                 write, tail: list, caches=None) -> Tensor:
    """The kernel's function called on q, the caches (``write``'s past and new rows when it makes
    the write, else ``caches``), the bias, the sinks and ``tail`` (its sizes as operands); the
    attention [B,Hkv,G*S,Dh], with ``write.made`` set to the presents it returns."""
    B, Hkv, _, Dh = q_BHkvGSDh.shape
    S = bias_BSR.shape[1]
    symbol, text = render(shape, _OPSET)
    if bias_BSR.shape[0] != B:  # one for every batch row
        bias_BSR = tb.expand(bias_BSR, [tb.size(q_BHkvGSDh, 0), -1, -1])  # [1,S,R] -> [B,S,R]
    past, new = ((write.past_key, write.past_value), (write.new_key, write.new_value)) if write is not None else (caches, ())
    operands = [tb.builtin(q_BHkvGSDh)] + [tb.builtin(c, (B,) + c.shape[1:]) for c in past]
    operands += [tb.builtin(bias_BSR, (B, S, None))] + [tb.builtin(c, (B,) + c.shape[1:]) for c in new]
    if sink_1HkvGS1 is not None:
        operands.append(tb.builtin(tb.flatten(tb.flatten(sink_1HkvGS1, 2, 3), 0, 1)))  # -> [Hkv,G*S]
    operands += tail
    if write is None:
        return tb.call_function(symbol, text, operands, q_BHkvGSDh.shape, "f32")
    present = ((B, Hkv, shape.rows, Dh), "f32")
    attn, present_key, present_value = tb.call_function_results(symbol, text, operands, [(q_BHkvGSDh.shape, "f32"), present, present])
    write.made = (present_key, present_value)  # [B,Hkv,T,Dh]
    return attn


def reads_lengths_on_device(write, S) -> bool:
    """The kernel makes ``write`` (inputs.CacheWrite) with its first new row and rows read taken on
    the device (``write.lengths``), its bias then over all T rows (the caller's): a static S, f32
    caches, and either a fixed-capacity buffer (T == P, static or at run time: written in place)
    or a growing cache of static sizes (T = P + S, P > 0): the write variant."""
    if write is None or write.lengths is None:
        return False
    if not (isinstance(S, int) and write.new_key.shape[2] == S):
        return False
    if any(c.dtype != "f32" for c in (write.past_key, write.past_value, write.new_key, write.new_value)):
        return False
    return write.in_place or _grows_in_kernel(write, write.present_key.shape[2], S)


def _writable(write, present_BHkvTDh: Tensor, S) -> bool:
    """The kernel writes present itself: the rows read are the write's present's (f32, as
    ``applies`` asked) and the write variant takes it (:func:`_grows_in_kernel`)."""
    return present_BHkvTDh.value == write.present_key.value and _grows_in_kernel(write, present_BHkvTDh.shape[2], S)


def _grows_in_kernel(write, T, S) -> bool:
    """The write variant makes a growing cache's present of T rows: static sizes with T = P + S,
    P > 0, S new rows."""
    P = write.past_key.shape[2]
    return isinstance(P, int) and isinstance(T, int) and P > 0 and T == P + S and write.new_key.shape[2] == S


def grows_by_kernel(enabled: bool, past_BHkvPDh: Tensor) -> bool:
    """``enabled`` (attention=fused on the CPU) and an f32 cache of a head size the kernels have."""
    return enabled and past_BHkvPDh.dtype == "f32" and past_BHkvPDh.shape[1] is not None and past_BHkvPDh.shape[3] in HEAD_SIZES


def grown_by_one_row(tb: TorchBuilder, past_BHkvPDh: Tensor) -> Tensor:
    """The cache with one zero row after the past's, copied by kernels/cache_grow.py (where
    :func:`grows_by_kernel`).  [B,Hkv,P,Dh] -> [B,Hkv,P+1,Dh] (B and P+1 dynamic)"""
    Hkv, Dh = past_BHkvPDh.shape[1], past_BHkvPDh.shape[3]
    symbol, text = cache_grow.render(Hkv, Dh, _OPSET)
    shape = (None, Hkv, None, Dh)
    return tb.call_function(symbol, text, [tb.builtin(past_BHkvPDh, shape)], shape, "f32")
