"""Lowering of onnxruntime's ``com.microsoft.MatMulNBits`` (block-quantized weight matmul).

Dimension letters (onnxruntime's CPU kernel is the spec):
  M   the rows of A (all its leading dims)      K   input features (attribute K)
  N   output features (attribute N)             L   block_size, along K
  Kb  blocks per column, ceil(K / L)            P   values per byte, 8 / bits
  Z   zero-point bytes per column, ceil(Kb / P)

    W[n, k] = (q[n, k] - zero_point[n, k // L]) * scale[n, k // L]    (q: bits-bit, low bits first in each byte)
    Y = A @ W^T (+ bias)

B is [N, Kb, L/P] bytes, scales [N*Kb] (or [N, Kb]), zero points packed like
B ([N*Z] or [N, Z] bytes) or unpacked in A's type ([N*Kb]); without them the
zero point is 2^(bits-1).  Everything is computed in f32 (onnxruntime widens
f16 A and scales) and Y is rounded to A's type.

A of rank 1 ([K]) is one row (M = 1): Y is [N], as onnxruntime gives.
onnxruntime checks every input's shape on each call, so a dim declared
symbolic (of B, scales, zero points, bias, or A's last) is checked at run
time against the size above (a named check), then refined to it: the casts
and broadcasts of the lowered code trust the types.

``accuracy_level`` 4 changes onnxruntime's results: where its CPU kernel
runs the int8 path (B a constant with bit-packed or no zero points, bits 4
or 8) A is quantized per block of L values along K to int8 — scale
max|a| / 127, values round-half-even(a * 127 / max|a|) — before the product.
The lowering reproduces that quantization.  Any other value computes in f32:
onnxruntime's kernel (``GetComputeType`` in matmul_nbits.cc) picks the int8
path only for exactly 4, so 0-3 and values it does not define (5, -1, ...)
all take its f32 path; they are accepted as it accepts them.

With ``matmul_nbits=kernel`` a 4-bit weight in blocks of whole 32-value chunks
is multiplied in one dispatch that reads its packed bytes (kernels/nbits_matmul.py),
whatever the rows; other weights are dequantized first.  ``matmul_nbits=vnni``
(iree-cpu's default on a host with AVX-512 VNNI) takes the int8 path's nodes whose K
is whole 128-value groups to kernels/nbits_matmul_vnni.py instead: A's int8 values
and block scales, multiplied in integers as onnxruntime's kernel does.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from ...binder import OpBinder
from ...builder import Tensor, TorchBuilder, vtensor_type_text
from ...kernels import nbits_matmul, nbits_matmul_vnni
from ...registry import Refusal, onnx_op

SUPPORTED_BITS = (4, 8)
A_DTYPES = ("f32", "f16")  # onnxruntime's CPU kernels (no bf16)
INT8_ACCURACY_LEVEL = 4  # the only level onnxruntime's CPU kernel runs in int8; every other value is f32
_OP = "MatMulNBits"
_REJECTS = " (onnxruntime rejects it)"
_OPSET = 21  # IREE's ONNX input pipeline asks every function for an opset; the kernel's has no ONNX op


@onnx_op("MatMulNBits", domain="com.microsoft", since=1)
def lower_matmul_nbits(b: OpBinder, tb: TorchBuilder) -> List:
    K, N, bits, L, level = read_attributes(b)
    a, packed_NKbB, scales, zero_points, bias_N = (refined(tb, *spec) for spec in read_inputs(b, K, N, bits, L))
    quantize_a = level == INT8_ACCURACY_LEVEL and b.input_is_constant(1) and (zero_points is None or zero_points.dtype == "ui8")
    a_MK32 = tb.to_dtype(a if a.rank > 1 else tb.unsqueeze(a, 0), "f32")  # a rank-1 A: [K] -> [1,K]
    weight = (packed_NKbB, scales, zero_points, K, N, bits, L)
    form = b.options.matmul_nbits if b.options is not None else "dequantize"
    if form == "vnni" and quantize_a and nbits_matmul_vnni.supported(bits, K, L):
        y_MN = by_rows(tb, a_MK32, weight, vnni_product)  # A quantized in the products' own form
    else:
        a_MK32 = int8_block_quantized(tb, a_MK32, K, L) if quantize_a else a_MK32  # as the int8 path sees it, in f32
        if form in ("kernel", "vnni") and nbits_matmul.supported(bits, K, L):
            y_MN = by_rows(tb, a_MK32, weight, kernel_product)
        else:
            y_MN = dequantized_product(tb, a_MK32, weight)
    if bias_N is not None:
        y_MN = tb.add(y_MN, tb.to_dtype(bias_N, "f32"))  # + [N]
    y = y_MN if a.rank > 1 else tb.flatten(y_MN, 0, 1)  # a rank-1 A: [1,N] -> [N]
    return [b.declared_result(tb, 0, tb.to_dtype(y, a.dtype))]


def dequantized_product(tb: TorchBuilder, a_MK: Tensor, weight) -> Tensor:
    """A [M..,K] f32 by the weight dequantized to f32 [N,K]: -> [M..,N]."""
    w_NK = dequantize_weight(tb, *weight)
    return tb.matmul(a_MK, tb.transpose(w_NK, 0, 1))  # [M..,K] x [K,N] -> [M..,N]


def by_rows(tb: TorchBuilder, a_MK: Tensor, weight, product) -> Tensor:
    """A [M..,K] f32 by the packed weight in one of the kernels' dispatches, ``product`` (A's rows
    flattened): -> [M..,N] f32."""
    leading = [tb.size(a_MK, d) for d in range(a_MK.rank - 1)]
    y_RN = product(tb, tb.flatten(a_MK, 0, a_MK.rank - 2), weight)  # [M..,K] -> [M,K] -> [M,N]
    return y_RN if a_MK.rank == 2 else tb.unflatten(y_RN, 0, leading)  # -> [M..,N]


def kernel_product(tb: TorchBuilder, a_RK: Tensor, weight) -> Tensor:
    """A [M,K] f32 by the packed weight: -> [M,N] f32."""
    packed_NKbB, scales, zero_points, K, N, bits, L = weight
    Kb, C = K // L, K // nbits_matmul.CHUNK
    a_RCHP = tb.unflatten(a_RK, 1, [C, 16, 2])  # [M,K] -> [M,C,16,2]: value 32c + 2j + p at [c, j, p]
    a_RCPH = tb.transpose(a_RCHP, 2, 3)  # -> [M,C,2,16]: the chunk's even values, then its odd ones
    q_NCH = tb.unflatten(tb.flatten(packed_NKbB, 1, 2), 1, [C, 16])  # [N,Kb,L/2] -> [N,K/2] -> [N,C,16] bytes
    operands = [tb.builtin(a_RCPH, (None, C, 2, 16)), tb.builtin(q_NCH), tb.builtin(per_block(tb, scales, N, Kb))]
    if zero_points is None:  # 2^(bits-1) in the kernel
        form = "none"
    elif zero_points.dtype == "ui8":  # a byte a block: a quarter of f32's bytes to read
        form, zero_NKb = "u8", zero_point_bytes(tb, zero_points, N, Kb, bits)
    else:
        form, zero_NKb = "f32", per_block(tb, zero_points, N, Kb)
    if form != "none":
        operands.append(tb.builtin(zero_NKb))
    symbol, text = nbits_matmul.render(K, N, L, form, _OPSET)
    y_RN = tb.call_function(symbol, text, operands, (None, N), "f32")  # the function's rows are dynamic
    return rows_typed(tb, y_RN, a_RK, N)


def vnni_product(tb: TorchBuilder, a_RK: Tensor, weight) -> Tensor:
    """A [M,K] f32, quantized per block to int8 as onnxruntime's int8 path, by the packed weight in
    kernels/nbits_matmul_vnni.py's dispatch: -> [M,N] f32."""
    packed_NKbB, scales, zero_points, K, N, bits, L = weight
    Kb, G = K // L, K // nbits_matmul_vnni.GROUP
    q_RKbL, scale_RKb1 = int8_blocks(tb, a_RK, K, L)
    aq_RK = tb.to_dtype(tb.flatten(q_RKbL, 1, 2), "si8")  # [M,Kb,L] -> [M,K] int8 values
    aq_RG4HP = tb.unflatten(aq_RK, 1, [G, 4, 16, 2])  # -> [M,G,4,16,2]: value 128g + 32i + 2j + p at [g, i, j, p]
    aq_RGPHI = tb.transpose(aq_RG4HP, 2, 4)  # -> [M,G,2,16,4]
    aq_RGP64 = tb.flatten(tb.transpose(aq_RGPHI, 3, 4), 3, 4)  # -> [M,G,2,4,16] -> [M,G,2,64]: even values, then odd
    q_NK2 = tb.flatten(packed_NKbB, 1, 2)  # [N,Kb,L/2] -> [N,K/2] bytes
    operands = [tb.builtin(aq_RGP64, (None, G, 2, 64)), tb.builtin(tb.flatten(scale_RKb1, 1, 2), (None, Kb)), tb.builtin(q_NK2),
                tb.builtin(per_block(tb, scales, N, Kb))]
    form = "none" if zero_points is None else "u8"  # the int8 path takes packed zero points or none
    if form == "u8":
        operands.append(tb.builtin(zero_point_bytes(tb, zero_points, N, Kb, bits)))
    symbol, text = nbits_matmul_vnni.render(K, N, L, form, _OPSET)
    return rows_typed(tb, tb.call_function(symbol, text, operands, (None, N), "f32"), a_RK, N)


def rows_typed(tb: TorchBuilder, y_RN: Tensor, a_RK: Tensor, N: int) -> Tensor:
    """A kernel's result [?,N] cast to A's static row count where it has one."""
    if a_RK.shape[0] is None:
        return y_RN
    return Tensor(tb.static_info_cast(y_RN, vtensor_type_text((a_RK.shape[0], N), "f32")), (a_RK.shape[0], N), "f32")


def zero_points_f32(tb: TorchBuilder, zero_points: Tensor, N: int, Kb: int, bits: int) -> Tensor:
    """Each block's zero point as f32 [N,Kb]: unpacked from bytes, or the values given."""
    if zero_points.dtype == "ui8":
        return tb.to_dtype(unpacked_zero_points(tb, zero_points, N, Kb, bits), "f32")
    return per_block(tb, zero_points, N, Kb)


def zero_point_bytes(tb: TorchBuilder, zero_points: Tensor, N: int, Kb: int, bits: int) -> Tensor:
    """Packed zero-point bytes -> a byte a block, ui8 [N,Kb] (the kernels' "u8" form)."""
    return tb.to_dtype(unpacked_zero_points(tb, zero_points, N, Kb, bits), "ui8")


def unpacked_zero_points(tb: TorchBuilder, zero_points: Tensor, N: int, Kb: int, bits: int) -> Tensor:
    """Packed zero-point bytes [N*Z] or [N,Z] -> each block's value, si64 [N,Kb]."""
    zp_NZ = zero_points if zero_points.rank == 2 else tb.unflatten(zero_points, 0, [N, -1])  # [N*Z] -> [N,Z]
    return tb.slice(unpack_bits(tb, zp_NZ, bits), 1, 0, Kb)  # [N,Z] -> [N,Z*P] -> [N,Kb]


def read_attributes(b: OpBinder):
    K, N = b.attr_int("K"), b.attr_int("N")
    for name, v in (("K", K), ("N", N)):
        if v <= 0:
            raise Refusal(f"value {v} is not supported; supported: > 0", f"attribute '{name}'")
    bits = b.attr_int("bits", 4)
    if bits not in SUPPORTED_BITS:
        raise Refusal(
            f"value {bits} is not supported; supported: 4, 8 (onnxruntime's CPU compute mode for 2 bits depends on block_size)",
            "attribute 'bits'",
        )
    L = b.attr_int("block_size")
    if L < 16 or L & (L - 1):
        raise Refusal(f"value {L} is not supported; supported: a power of 2, >= 16", "attribute 'block_size'")
    level = b.attr_int("accuracy_level", 0)  # any value, as onnxruntime: 4 is its int8 path, the others f32
    prepacked = b.attr_int("weight_prepacked", 0)
    if prepacked != 0:
        raise Refusal(f"value {prepacked} is not supported; supported: 0 (raw blockwise weights)", "attribute 'weight_prepacked'")
    return K, N, bits, L, level


def read_inputs(b: OpBinder, K: int, N: int, bits: int, L: int):
    """A [M..,K] (or [K]), B [N,Kb,L*bits/8], scales, zero points, bias [N]; refuses g_idx.

    Each as (tensor or None, {dim: size} it must have, subject), for :func:`refined`;
    everything static is checked here, before any op is built.
    """
    if b.has_input(4):
        raise Refusal("is not supported (deprecated act-order index); supported: absent", "input 4 'g_idx'")
    Kb, P = -(-K // L), 8 // bits
    a = b.tensor(0, "A", required=True)
    if a.dtype not in A_DTYPES:
        raise Refusal(f"type {a.dtype} is not supported; supported: {', '.join(A_DTYPES)}", "input 0 'A'")
    if a.rank < 1 or a.shape[-1] not in (None, K):
        raise Refusal(f"shape {list(a.shape)} is not supported; supported: [K={K}] or [..., M, K={K}]", "input 0 'A'")
    specs = [(a, {a.rank - 1: K}, "input 0 'A'")]
    specs.append(expect_shape(b.tensor(1, "B", required=True), [(N, Kb, L // P)], "ui8", "input 1 'B'"))
    specs.append(expect_shape(b.tensor(2, "scales", required=True), [(N * Kb,), (N, Kb)], a.dtype, "input 2 'scales'"))
    specs.append(expect_zero_points(b.tensor(3, "zero_points"), a.dtype, N, Kb, P))
    specs.append(expect_shape(b.tensor(5, "bias"), [(N,)], a.dtype, "input 5 'bias'"))
    return specs


def expect_zero_points(zero_points: Optional[Tensor], a_dtype: str, N: int, Kb: int, P: int):
    """Packed bytes [N*Z] or [N,Z] (Z = ceil(Kb / P)), or values in A's type [N*Kb] or [N,Kb]."""
    subject = "input 3 'zero_points'"
    if zero_points is not None and zero_points.dtype == "ui8":
        Z = -(-Kb // P)
        return expect_shape(zero_points, [(N * Z,), (N, Z)], "ui8", subject)
    return expect_shape(zero_points, [(N * Kb,), (N, Kb)], a_dtype, subject)


def expect_shape(t: Optional[Tensor], shapes, dtype: str, subject: str):
    """``t`` has type ``dtype`` and one of ``shapes`` (unknown dims match): (t, that shape as {dim: size}, subject).

    The shapes differ in rank, so the declared rank picks the one to refine to.
    An absent optional input (None) has nothing to check.
    """
    if t is None:
        return None, {}, subject
    if t.dtype != dtype:
        raise Refusal(f"type {t.dtype} is not supported; supported: {dtype}", subject)
    for shape in shapes:
        if len(shape) == t.rank and all(d is None or d == s for d, s in zip(t.shape, shape)):
            return t, dict(enumerate(shape)), subject
    listed = " or ".join("[" + ",".join(map(str, s)) + "]" for s in shapes)
    raise Refusal(f"shape {list(t.shape)} is not supported; supported: {listed}", subject)


def refined(tb: TorchBuilder, t: Optional[Tensor], dims: Dict[int, int], subject: str) -> Optional[Tensor]:
    """``t`` with its dynamic ``dims`` made their static sizes, each checked at run time by name
    (onnxruntime checks them on every call; the lowered code would trust a wrong size)."""
    return None if t is None else tb.checked_static(t, dims, f"{_OP}: {subject}", _REJECTS)


def unpack_bits(tb: TorchBuilder, packed_XC: Tensor, bits: int) -> Tensor:
    """Bytes [..., C] -> their bits-bit values, low bits first, as si64 [..., C*8/bits]."""
    P = 8 // bits
    bytes_XC1 = tb.unsqueeze(tb.to_dtype(packed_XC, "si64"), -1)  # [..., C] -> [..., C, 1]
    shifts_P = tb.mul_int_scalar(tb.arange(P), bits)  # [P]: 0, bits, 2*bits, ...
    values_XCP = tb.bitwise_and_scalar(tb.bitwise_right_shift(bytes_XC1, shifts_P), (1 << bits) - 1)  # [..., C, P]
    return tb.flatten(values_XCP, packed_XC.rank - 1, packed_XC.rank)  # -> [..., C*P]


def per_block(tb: TorchBuilder, t: Tensor, N: int, Kb: int) -> Tensor:
    """[N*Kb] or [N,Kb] -> [N,Kb], as f32."""
    return tb.to_dtype(tb.unflatten(t, 0, [N, Kb]) if t.rank == 1 else t, "f32")


def dequantize_weight(tb, packed_NKbB, scales, zero_points: Optional[Tensor], K, N, bits, L) -> Tensor:
    """W [N,K] in f32 from B's blocks, scales and zero points."""
    Kb = -(-K // L)
    q_NKbL = tb.to_dtype(unpack_bits(tb, packed_NKbB, bits), "f32")  # [N,Kb,L*bits/8] -> [N,Kb,L]
    scale_NKb1 = tb.unsqueeze(per_block(tb, scales, N, Kb), 2)
    if zero_points is None:
        centered_NKbL = tb.add_float(q_NKbL, -float(1 << (bits - 1)))  # q - 2^(bits-1)
    else:
        centered_NKbL = tb.sub(q_NKbL, tb.unsqueeze(zero_points_f32(tb, zero_points, N, Kb, bits), 2))  # - [N,Kb,1]
    w_NKbL = tb.mul(centered_NKbL, scale_NKb1)
    w_NKp = tb.flatten(w_NKbL, 1, 2)  # [N,Kb,L] -> [N,Kb*L]
    return w_NKp if Kb * L == K else tb.slice(w_NKp, 1, 0, K)  # -> [N,K]


def int8_block_quantized(tb: TorchBuilder, a_MK: Tensor, K: int, L: int) -> Tensor:
    """A as onnxruntime's int8 path sees it: per block of L along K, q = round(a * 127/max|a|), a' = q * max|a|/127.

    The last block is zero-padded to L (zeros do not change max|a|);
    an all-zero block stays zero.
    """
    last = a_MK.rank - 1
    q_MKbL, scale_MKb1 = int8_blocks(tb, a_MK, K, L)
    a_MKp = tb.flatten(tb.mul(q_MKbL, scale_MKb1), last, last + 1)  # -> [M..,Kb*L]
    return a_MKp if a_MKp.shape[last] == K else tb.slice(a_MKp, last, 0, K)  # -> [M..,K]


def int8_blocks(tb: TorchBuilder, a_MK: Tensor, K: int, L: int):
    """(q [M..,Kb,L], scale [M..,Kb,1]): A's int8 values per block (f32, in [-127, 127]) and their scales."""
    Kb, last = -(-K // L), a_MK.rank - 1
    a_MKp = a_MK if Kb * L == K else tb.pad_dim_end(a_MK, last, Kb * L - K)  # [M..,K] -> [M..,Kb*L]
    a_MKbL = tb.unflatten(a_MKp, last, [Kb, L])  # -> [M..,Kb,L]
    amax_MKb1 = tb.amax(tb.abs(a_MKbL), last + 1)  # -> [M..,Kb,1]
    scale_MKb1 = tb.div_scalar(amax_MKb1, 127.0)
    inverse_MKb1 = tb.div(tb.full_like(amax_MKb1, 127.0), amax_MKb1)  # 127 / max|a|, as onnxruntime divides
    inverse_MKb1 = tb.where_scalar_else(tb.eq_scalar(amax_MKb1, 0.0), 0.0, inverse_MKb1)
    return tb.round(tb.mul(a_MKbL, inverse_MKb1)), scale_MKb1  # half to even, as _mm256_round_ps
