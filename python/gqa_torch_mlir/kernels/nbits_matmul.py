"""Rows of A by a 4-bit block-quantized weight as one IREE CPU dispatch (``matmul_nbits=kernel``).

IREE 3.13 on llvm-cpu does not fuse MatMulNBits' dequantization into the matmul
that reads it: a weight over IREE's constant-expression limit (1 MiB of growth) is
dequantized to f32 by a dispatch of its own on every call, then read again by the
matmul.  A 4096x1024 weight took 2.0 ms a row on the AMD guest, where onnxruntime's
kernel took 0.19 ms (benchmarks/README.md, "CPU, round 28").  This kernel reads the
packed bytes once: each 16-byte chunk (32 values) is split into its low and high
nibbles, converted to f32 in registers, less its block's zero point, against A's 32
values of that chunk, and each block's sum is scaled.

``render(K, N, L, zero_points, opset)`` returns ``(symbol, text)``: the function

    @symbol(a f32 [M, C, 2, 16], q i8 [N, C, 16], scales f32 [N, Kb], zero_points [N, Kb])
        -> y f32 [M, N]

with C = K / 32 chunks of 32 values a row and Kb = K / L blocks; ``zero_points`` is a byte a
block (``"u8"``: the packed nibbles unpacked, a quarter of f32's bytes to read), f32 values
(``"f32"``), or absent (``"none"``: 8), ZERO_POINTS.  ``a`` is A deinterleaved
per chunk (``a[m, c, 0, j] = A[m, 32c + 2j]``, ``a[m, c, 1, j] = A[m, 32c + 2j + 1]``), so that
the low nibbles of a chunk's bytes (the even values) meet the first half and the high
nibbles the second.  ``y[m, n] = sum_b scales[n, b] * sum_(k in b) A[m, k] * (q[n, k] -
zero_points[n, b])``: onnxruntime's f32 path, reassociated (the block's products are summed
before its scale is applied).  M is left to run time.  Each workgroup takes
:func:`columns_per_workgroup` output columns (32 as a rule) and ROW_BLOCK rows; it unpacks
each chunk once for ROW_GROUP rows (the last rows of its block one at a time).  The
dequantized weight's dispatches were slower at every row count measured, 1 to 256
(2.3-3.2x onnxruntime at 64 and 256 rows, this kernel 1.5-2.2x).
"""

from __future__ import annotations

from .decode_attention import RESOURCES

CHUNK = 32  # values a chunk: 16 bytes, two nibbles each
ROW_GROUP = 4  # rows of A that share each chunk's unpacked nibbles (8 was slower at 4 rows, no faster at 256)
ROW_BLOCK = 16  # rows of A a workgroup takes (the workgroups: column blocks x row blocks)


def supported(bits: int, K: int, L: int) -> bool:
    """4-bit weights in blocks of whole chunks that tile K (no padded last block)."""
    return bits == 4 and L % CHUNK == 0 and K % L == 0


def columns_per_workgroup(N: int) -> int:
    """The output columns a workgroup takes: 32, or the largest power of 2 below it that divides N."""
    return next(r for r in (32, 16, 8, 4, 2, 1) if N % r == 0)


#: How a block's zero point reaches the kernel: a byte per block (the packed nibbles unpacked), f32
#: values (zero points given in A's type), or none (2^(bits-1) = 8, onnxruntime's default)
ZERO_POINTS = {"u8": "i8", "f32": "f32", "none": None}


def symbol(K: int, N: int, L: int, zero_points: str) -> str:
    return f"gqa_nbits_matmul_k{K}_n{N}_l{L}_z{zero_points}"


def _zero_point(zero_points: str, z_t: str) -> str:
    """%z, the block's zero point as f32."""
    if zero_points == "none":
        return "%z = arith.constant 8.0 : f32"
    if zero_points == "u8":
        return f"""%zq = memref.load %Z[%n, %b] : memref<{z_t}>
  %z = arith.uitofp %zq : i8 to f32"""
    return f"%z = memref.load %Z[%n, %b] : memref<{z_t}>"


def _rows_body(group: int, tag: str, zero: str, q_t: str, a_t: str, s_t: str, y_t: str) -> str:
    """Column %n against rows %r .. %r + group - 1 of A: the chunk's nibbles unpacked once for them all."""
    v = "vector<16xf32>"
    rows = "\n".join(f"%{tag}r{g} = arith.addi %r, %c{g} : index" for g in range(group))
    zeros = ", ".join(f"%{tag}a{g} = %zero" for g in range(group))
    dzeros = ", ".join(f"%{tag}d{g} = %zero" for g in range(group))
    types = ", ".join([v] * group)
    products = "\n".join(
        f"""%{tag}ae{g} = vector.load %A[%{tag}r{g}, %c, %c0, %c0] : memref<{a_t}>, {v}
%{tag}ao{g} = vector.load %A[%{tag}r{g}, %c, %c1, %c0] : memref<{a_t}>, {v}
%{tag}e{g} = vector.fma %we, %{tag}ae{g}, %{tag}d{g} : {v}
%{tag}o{g} = vector.fma %wo, %{tag}ao{g}, %{tag}e{g} : {v}""" for g in range(group))
    scaled = "\n".join(f"%{tag}s{g} = vector.fma %{tag}dot#{g}, %sv, %{tag}a{g} : {v}" for g in range(group))
    stores = "\n".join(f"""%{tag}y{g} = vector.reduction <add>, %{tag}acc#{g} : {v} into f32
memref.store %{tag}y{g}, %Y[%{tag}r{g}, %n] : memref<{y_t}>""" for g in range(group))
    return f"""{rows}
%{tag}acc:{group} = scf.for %b = %c0 to %blocks step %c1 iter_args({zeros}) -> ({types}) {{
  %s = memref.load %S[%n, %b] : memref<{s_t}>
  {zero}
  %sv = vector.broadcast %s : f32 to {v}
  %zv = vector.broadcast %z : f32 to {v}
  %first = arith.muli %b, %chunks : index
  %{tag}dot:{group} = scf.for %j = %c0 to %chunks step %c1 iter_args({dzeros}) -> ({types}) {{
    %c = arith.addi %first, %j : index
    %bytes = vector.load %Q[%n, %c, %c0] : memref<{q_t}>, vector<16xi8>
    %lo = arith.andi %bytes, %low : vector<16xi8>
    %hi = arith.shrui %bytes, %four : vector<16xi8>
    %lof = arith.uitofp %lo : vector<16xi8> to {v}
    %hif = arith.uitofp %hi : vector<16xi8> to {v}
    %we = arith.subf %lof, %zv : {v}
    %wo = arith.subf %hif, %zv : {v}
    {products}
    scf.yield {", ".join(f"%{tag}o{g}" for g in range(group))} : {types}
  }}
  {scaled}
  scf.yield {", ".join(f"%{tag}s{g}" for g in range(group))} : {types}
}}
{stores}"""


def render(K: int, N: int, L: int, zero_points: str, opset: int) -> tuple:
    sym, C, Kb, R = symbol(K, N, L, zero_points), K // CHUNK, K // L, columns_per_workgroup(N)
    a_t, q_t, s_t, y_t = f"?x{C}x2x16xf32", f"{N}x{C}x16xi8", f"{N}x{Kb}xf32", f"?x{N}xf32"
    z_t = f"{N}x{Kb}x{ZERO_POINTS[zero_points]}" if ZERO_POINTS[zero_points] else None
    ts = (_zero_point(zero_points, z_t), q_t, a_t, s_t, y_t)
    z_binding = "" if z_t is None else "%zb: !stream.binding, "
    z_span = "" if z_t is None else f"%Z = stream.binding.subspan %zb[%c0] : !stream.binding -> memref<{z_t}>"
    z_arg, z_operand, z_type = ("", "", "") if z_t is None else (f", %z: tensor<{z_t}>", ", %z", f", tensor<{z_t}>")
    text = f"""
stream.executable private @{sym}_executable attributes {RESOURCES} {{
  stream.executable.export public @{sym}_rows workgroups(%m: index) -> (index, index, index) {{
    %groups = arith.constant {N // R} : index
    %c1 = arith.constant 1 : index
    %blocks = affine.apply affine_map<()[s0] -> (s0 ceildiv {ROW_BLOCK})>()[%m]
    %row_blocks = arith.maxui %blocks, %c1 : index
    stream.return %groups, %row_blocks, %c1 : index, index, index
  }}
  builtin.module {{
    func.func @{sym}_rows(%ab: !stream.binding, %qb: !stream.binding, %sb: !stream.binding, {z_binding}
                          %yb: !stream.binding, %m: index) {{
      {chr(10).join(f"%c{g} = arith.constant {g} : index" for g in range(max(ROW_GROUP, 2)))}
      %group = arith.constant {ROW_GROUP} : index
      %cols = arith.constant {R} : index
      %row_block = arith.constant {ROW_BLOCK} : index
      %blocks = arith.constant {Kb} : index
      %chunks = arith.constant {L // CHUNK} : index
      %zero = arith.constant dense<0.0> : vector<16xf32>
      %low = arith.constant dense<15> : vector<16xi8>
      %four = arith.constant dense<4> : vector<16xi8>
      %A = stream.binding.subspan %ab[%c0] : !stream.binding -> memref<{a_t}>{{%m}}
      %Q = stream.binding.subspan %qb[%c0] : !stream.binding -> memref<{q_t}>
      %S = stream.binding.subspan %sb[%c0] : !stream.binding -> memref<{s_t}>
      {z_span}
      %Y = stream.binding.subspan %yb[%c0] : !stream.binding -> memref<{y_t}>{{%m}}
      %wg = stream.dispatch.workgroup.id[0] : index
      %wr = stream.dispatch.workgroup.id[1] : index
      %n0 = arith.muli %wg, %cols : index
      %r0 = arith.muli %wr, %row_block : index
      %r0_end = arith.addi %r0, %row_block : index
      %r1 = arith.minui %r0_end, %m : index
      %r_span = arith.subi %r1, %r0 : index
      %r_whole = arith.remui %r_span, %group : index
      %r_grouped = arith.subi %r1, %r_whole : index
      scf.for %r = %r0 to %r_grouped step %group {{
        scf.for %i = %c0 to %cols step %c1 {{
          %n = arith.addi %n0, %i : index
{_rows_body(ROW_GROUP, "g", *ts)}
        }}
      }}
      scf.for %r = %r_grouped to %r1 step %c1 {{
        scf.for %i = %c0 to %cols step %c1 {{
          %n = arith.addi %n0, %i : index
{_rows_body(1, "u", *ts)}
        }}
      }}
      return
    }}
  }}
}}
func.func private @{sym}(%a: tensor<{a_t}>, %q: tensor<{q_t}>, %s: tensor<{s_t}>{z_arg}) -> tensor<{y_t}>
    attributes {{torch.onnx_meta.opset_version = {opset} : si64}} {{
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<{a_t}>
  %y = flow.dispatch @{sym}_executable::@{sym}_rows[%m](%a, %q, %s{z_operand}, %m)
      : (tensor<{a_t}>{{%m}}, tensor<{q_t}>, tensor<{s_t}>{z_type}, index) -> tensor<{y_t}>{{%m}}
  return %y : tensor<{y_t}>
}}
"""
    return sym, text
