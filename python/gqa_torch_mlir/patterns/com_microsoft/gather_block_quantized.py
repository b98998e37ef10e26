"""Lowering of onnxruntime's ``com.microsoft.GatherBlockQuantized`` (embedding lookup in block-quantized rows).

Dimension letters (onnxruntime's CPU kernel is the spec; uint8 data):
  V   rows (gather_axis 0)                    I...  the indices' dims
  C   bytes per row                           P     values per byte, 8 / bits
  D   values per row, C * P (quantize_axis: the last)
  L   block_size along D                      Db    blocks per row, ceil(D / L)
  Z   zero-point bytes per row, ceil(Db / P)

    out[i..., d] = (q[idx, d] - zero_point[idx, d // L]) * scale[idx, d // L],  idx = indices[i...] (+V if negative)

q are bits-bit values packed low bits first; zero points are packed the same
way ([V, Z] bytes) or, when absent, 2^(bits-1).  An index outside [-V, V)
gives a row of zeros, as onnxruntime.  The product is computed in f32 and
rounded to the scales' type (the output type).

data must be static; V, D and Db come from its shape.  A dim of scales or
zero points declared symbolic is checked at run time against [V, Db] or
[V, Z] (a named check; onnxruntime checks them on every call), then refined
to it.  Negative axes count from data's rank, as onnxruntime counts them
(gather_axis -2 is 0, quantize_axis -1 is 1).
"""

from __future__ import annotations

from typing import List, Optional

from ...binder import OpBinder
from ...builder import Tensor, TorchBuilder
from ...registry import Refusal, onnx_op
from .matmul_nbits import unpack_bits

SUPPORTED_BITS = (4, 8)
SCALE_DTYPES = ("f32", "f16")  # onnxruntime's CPU kernel (bf16 throws)
_OP = "GatherBlockQuantized"
_REJECTS = " (onnxruntime rejects it)"


@onnx_op("GatherBlockQuantized", domain="com.microsoft", since=1)
def lower_gather_block_quantized(b: OpBinder, tb: TorchBuilder) -> List:
    bits, L = read_attributes(b)
    data_VC, indices_I, scales, zero_points = read_inputs(b, bits, L)
    V, Db, Z = block_counts(data_VC, bits, L)
    scales_VDb = refined(tb, scales, (V, Db), "input 2 'scales'")  # [V|?,Db|?] -> [V,Db]
    zero_points_VZ = refined_by_cast(tb, zero_points, (V, Z), "input 3 'zero_points'")  # [V|?,Z|?] -> [V,Z]
    index_I, in_range_I = wrapped_indices(tb, indices_I, V)
    out_ID = dequantized_rows(tb, data_VC, scales_VDb, zero_points_VZ, index_I, bits, L)
    out_ID = tb.where_else_scalar(tb.unsqueeze(in_range_I, -1), out_ID, 0.0)  # rows of out-of-range indices are 0
    return [b.declared_result(tb, 0, tb.to_dtype(out_ID, scales_VDb.dtype))]


def dequantized_rows(tb: TorchBuilder, data_VC, scales_VDb, zero_points_VZ, index_I, bits: int, L: int) -> Tensor:
    """(q - zero_point) * scale of the rows at ``index_I``, in f32: [I...,D]."""
    q_ID = tb.to_dtype(unpack_bits(tb, tb.gather_rows(data_VC, index_I), bits), "f32")  # [V,C] at [I] -> [I...,C] -> [I...,D]
    D, Db = q_ID.shape[-1], block_counts(data_VC, bits, L)[1]  # from data's static shape
    scale_IDb = tb.to_dtype(tb.gather_rows(scales_VDb, index_I), "f32")  # [V,Db] at [I] -> [I...,Db]
    if zero_points_VZ is None:
        centered_ID = tb.add_float(q_ID, -float(1 << (bits - 1)))  # q - 2^(bits-1)
    else:
        zp_IZP = unpack_bits(tb, tb.gather_rows(zero_points_VZ, index_I), bits)  # [V,Z] at [I] -> [I...,Z*P]
        zp_IDb = tb.to_dtype(tb.slice(zp_IZP, zp_IZP.rank - 1, 0, Db), "f32")  # -> [I...,Db]
        centered_ID = tb.sub(q_ID, per_value(tb, zp_IDb, L, D))
    return tb.mul(centered_ID, per_value(tb, scale_IDb, L, D))


def read_attributes(b: OpBinder):
    bits = b.attr_int("bits", 4)
    if bits not in SUPPORTED_BITS:
        raise Refusal(f"value {bits} is not supported; supported: {', '.join(map(str, SUPPORTED_BITS))}", "attribute 'bits'")
    L = b.attr_int("block_size", 128)
    if L < 16 or L & (L - 1):
        raise Refusal(f"value {L} is not supported; supported: a power of 2, >= 16", "attribute 'block_size'")
    return bits, L


def read_axes(b: OpBinder, rank: int) -> None:
    """gather_axis 0 and quantize_axis the last, negative ones counted from data's ``rank`` as onnxruntime."""
    gather_axis = b.attr_int("gather_axis", 0)
    if normalized_axis(gather_axis, rank) != 0:
        raise Refusal(f"value {gather_axis} is not supported; supported: 0 or {-rank} (onnxruntime's only axis for uint8 data)", "attribute 'gather_axis'")
    quantize_axis = b.attr_int("quantize_axis", 1)
    if normalized_axis(quantize_axis, rank) != rank - 1:
        raise Refusal(f"value {quantize_axis} is not supported; supported: {rank - 1} or -1, the last axis (uint8 data)", "attribute 'quantize_axis'")


def normalized_axis(axis: int, rank: int) -> Optional[int]:
    """``axis`` in [0, rank), a negative one counted from the end; None outside [-rank, rank)."""
    return axis + rank if -rank <= axis < 0 else axis if 0 <= axis < rank else None


def read_inputs(b: OpBinder, bits: int, L: int):
    """data [V,C] ui8, indices [I...] si32/si64, scales [V,Db], zero points [V,Z] ui8."""
    data = b.tensor(0, "data", required=True)
    if data.dtype != "ui8":
        raise Refusal(f"type {data.dtype} is not supported; supported: ui8 (bit-packed uint8)", "input 0 'data'")
    if data.rank != 2 or None in data.shape:
        raise Refusal(f"shape {list(data.shape)} is not supported; supported: static [rows, bytes]", "input 0 'data'")
    read_axes(b, data.rank)
    indices = b.tensor(1, "indices", required=True)
    if indices.dtype not in ("si32", "si64"):
        raise Refusal(f"type {indices.dtype} is not supported; supported: si32, si64", "input 1 'indices'")
    V, Db, Z = block_counts(data, bits, L)
    scales = b.tensor(2, "scales", required=True)
    if scales.dtype not in SCALE_DTYPES:
        raise Refusal(f"type {scales.dtype} is not supported; supported: {', '.join(SCALE_DTYPES)}", "input 2 'scales'")
    check_shape(scales, (V, Db), "input 2 'scales'")
    zero_points = b.tensor(3, "zero_points")
    if zero_points is not None:
        if zero_points.dtype != "ui8":
            raise Refusal(f"type {zero_points.dtype} is not supported; supported: ui8, like data", "input 3 'zero_points'")
        check_shape(zero_points, (V, Z), "input 3 'zero_points'")
    return data, indices, scales, zero_points


def block_counts(data_VC: Tensor, bits: int, L: int):
    """(V, Db, Z) from data's static [V,C]: Db = ceil(C * P / L) blocks a row, Z = ceil(Db / P) zero-point bytes."""
    P = 8 // bits
    V, D = data_VC.shape[0], data_VC.shape[1] * P
    Db = -(-D // L)
    return V, Db, -(-Db // P)


def refined_by_cast(tb: TorchBuilder, t: Optional[Tensor], shape, subject: str) -> Optional[Tensor]:
    """Like :func:`refined`, with ``TorchBuilder.refine``'s cast instead of slices (zero points).

    IREE's code for the sliced zero points of a dynamic graph input crashed (SIGSEGV) on valid
    feeds; with the cast, IREE's own shape assert on the input fails first (naming no input).
    """
    return None if t is None else tb.refine(t, dict(enumerate(shape)), f"{_OP}: {subject}", _REJECTS)


def refined(tb: TorchBuilder, t: Optional[Tensor], shape, subject: str) -> Optional[Tensor]:
    """``t`` with its dynamic dims refined to ``shape``, each checked at run time by name (None stays None).

    onnxruntime checks them on every call; the lowered gathers would trust a wrong size.
    """
    return None if t is None else tb.checked_static(t, dict(enumerate(shape)), f"{_OP}: {subject}", _REJECTS)


def check_shape(t: Tensor, shape, subject: str) -> None:
    if t.rank != len(shape) or any(d is not None and d != s for d, s in zip(t.shape, shape)):
        raise Refusal(f"shape {list(t.shape)} is not supported; supported: [{','.join(map(str, shape))}]", subject)


def wrapped_indices(tb: TorchBuilder, indices_I: Tensor, V: int):
    """(row per index, in [0, V); i1 whether the index was in [-V, V))."""
    idx_I = tb.to_dtype(indices_I, "si64")
    in_range_I = tb.logical_and(tb.ge_scalar(idx_I, -V), tb.lt_scalar(idx_I, V))
    wrapped_I = tb.where(tb.lt_scalar(idx_I, 0), tb.add_scalar(idx_I, V), idx_I)  # negative counts from the end
    return tb.clamp_int(wrapped_I, 0, V - 1), in_range_I  # out-of-range rows read row 0, then are zeroed


def per_value(tb: TorchBuilder, t_IDb: Tensor, L: int, D: int) -> Tensor:
    """Per-block values [I...,Db] repeated for each of the block's L values: -> [I...,D]."""
    last = t_IDb.rank - 1
    t_IDb1 = tb.unsqueeze(t_IDb, -1)  # [I...,Db,1]
    sizes = [-1] * t_IDb.rank + [L]
    t_IDbL = tb.expand(t_IDb1, sizes)  # -> [I...,Db,L]
    t_IDp = tb.flatten(t_IDbL, last, last + 1)  # -> [I...,Db*L]
    Db = t_IDb.shape[-1]
    return t_IDp if Db * L == D else tb.slice(t_IDp, last, 0, D)  # -> [I...,D]
