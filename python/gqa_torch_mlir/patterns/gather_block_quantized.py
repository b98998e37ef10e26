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
"""

from __future__ import annotations

from typing import List

from ..binder import OpBinder
from ..builder import Tensor, TorchBuilder
from ..registry import Refusal, onnx_op
from .matmul_nbits import unpack_bits

SUPPORTED_BITS = (4, 8)
SCALE_DTYPES = ("f32", "f16")  # onnxruntime's CPU kernel (bf16 throws)


@onnx_op("GatherBlockQuantized", domain="com.microsoft", since=1)
def lower_gather_block_quantized(b: OpBinder, tb: TorchBuilder) -> List:
    bits, L = read_attributes(b)
    data_VC, indices_I, scales_VDb, zero_points_VZ = read_inputs(b, bits, L)
    index_I, in_range_I = wrapped_indices(tb, indices_I, data_VC.shape[0])
    out_ID = dequantized_rows(tb, data_VC, scales_VDb, zero_points_VZ, index_I, bits, L)
    out_ID = tb.where_else_scalar(tb.unsqueeze(in_range_I, -1), out_ID, 0.0)  # rows of out-of-range indices are 0
    return [b.declared_result(tb, 0, tb.to_dtype(out_ID, scales_VDb.dtype))]


def dequantized_rows(tb: TorchBuilder, data_VC, scales_VDb, zero_points_VZ, index_I, bits: int, L: int) -> Tensor:
    """(q - zero_point) * scale of the rows at ``index_I``, in f32: [I...,D]."""
    q_ID = tb.to_dtype(unpack_bits(tb, tb.gather_rows(data_VC, index_I), bits), "f32")  # [V,C] at [I] -> [I...,C] -> [I...,D]
    D, Db = q_ID.shape[-1], scales_VDb.shape[1]
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
    gather_axis = b.attr_int("gather_axis", 0)
    if gather_axis != 0:
        raise Refusal(f"value {gather_axis} is not supported; supported: 0 (onnxruntime's only axis for uint8 data)", "attribute 'gather_axis'")
    return bits, L


def read_inputs(b: OpBinder, bits: int, L: int):
    """data [V,C] ui8, indices [I...] si32/si64, scales [V,Db], zero points [V,Z] ui8."""
    data = b.tensor(0, "data", required=True)
    if data.dtype != "ui8":
        raise Refusal(f"type {data.dtype} is not supported; supported: ui8 (bit-packed uint8)", "input 0 'data'")
    if data.rank != 2 or None in data.shape:
        raise Refusal(f"shape {list(data.shape)} is not supported; supported: static [rows, bytes]", "input 0 'data'")
    quantize_axis = b.attr_int("quantize_axis", 1)
    if quantize_axis not in (1, -1):
        raise Refusal(f"value {quantize_axis} is not supported; supported: 1, the last axis (uint8 data)", "attribute 'quantize_axis'")
    indices = b.tensor(1, "indices", required=True)
    if indices.dtype not in ("si32", "si64"):
        raise Refusal(f"type {indices.dtype} is not supported; supported: si32, si64", "input 1 'indices'")
    V, D = data.shape[0], data.shape[1] * (8 // bits)
    Db = -(-D // L)
    scales = b.tensor(2, "scales", required=True)
    if scales.dtype not in SCALE_DTYPES:
        raise Refusal(f"type {scales.dtype} is not supported; supported: {', '.join(SCALE_DTYPES)}", "input 2 'scales'")
    check_shape(scales, (V, Db), "input 2 'scales'")
    zero_points = b.tensor(3, "zero_points")
    if zero_points is not None:
        if zero_points.dtype != "ui8":
            raise Refusal(f"type {zero_points.dtype} is not supported; supported: ui8, like data", "input 3 'zero_points'")
        check_shape(zero_points, (V, -(-Db // (8 // bits))), "input 3 'zero_points'")
    return data, indices, scales, zero_points


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
