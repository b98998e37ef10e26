"""Rows of A by a 4-bit block-quantized weight as one IREE CPU dispatch (``matmul_nbits=kernel``).

The f32 products: every accuracy level, and accuracy_level 4 on a target without AVX-512
VNNI (there A is quantized to int8 and back first; with VNNI kernels/nbits_matmul_vnni.py
multiplies its int8 values).

IREE 3.13 on llvm-cpu does not fuse MatMulNBits' dequantization into the matmul
that reads it: a weight over IREE's constant-expression limit (1 MiB of growth) is
dequantized to f32 by a dispatch of its own on every call, then read again by the
matmul.  A 4096x1024 weight took 2.0 ms a row on the AMD guest, where onnxruntime's
kernel took 0.19 ms (benchmarks/README.md, "CPU, round 28").  This kernel reads the
packed bytes once: each 16-byte chunk (32 values) is split into its low and high
nibbles and converted to f32 in registers, less its block's zero point, against A's 32
values of that chunk.

``render(K, N, L, zero_points, opset)`` returns ``(symbol, text)``: the function

    @symbol(a f32 [M, C, 2, 16], q i8 [N, C, 16], scales f32 [N, Kb], zero_points [N, Kb])
        -> y f32 [M, N]

with C = K / 32 chunks of 32 values a row and Kb = K / L blocks; ``zero_points`` is a byte a
block (``"u8"``: the packed nibbles unpacked, a quarter of f32's bytes to read), f32 values
(``"f32"``), or absent (``"none"``: 8), ZERO_POINTS.  ``a`` is A deinterleaved
per chunk (``a[m, c, 0, j] = A[m, 32c + 2j]``, ``a[m, c, 1, j] = A[m, 32c + 2j + 1]``), so that
the low nibbles of a chunk's bytes (the even values) meet the first half and the high
nibbles the second.  M is left to run time.

Each workgroup takes :func:`columns_per_workgroup` output columns (32 as a rule) and
ROW_BLOCK rows, a tile of TILES at a time: 8 rows by 2 columns while 8 are left, then 4 by 2,
then one row a column.  In a tile each chunk is unpacked once for all its rows and each
row's values are loaded once for all its columns; sums are kept as 16-lane vectors, one per
row and column, and added across lanes at the end.

- Several rows: ``y[m, n] = sum_k A[m, k] * ((q[n, k] - z[n, b]) * s[n, b])``, the dequantized
  value onnxruntime's f32 path computes, a multiply-add a value per row.  The unpacking is
  then a small part of a tile's work (on the AMD guest 256 rows of 4096x1024 went from
  1.86x onnxruntime with groups of 4 rows a column to 1.08x; benchmarks/README.md, "CPU, round 29").
- One row: ``y[m, n] = sum_b s[n, b] * sum_(k in b) A[m, k] * (q[n, k] - z[n, b])``, the same
  arithmetic reassociated: a block's products summed before its scale, a multiply a block
  instead of one a value (the dequantized values took 8% longer on one row).

A row's result can so differ in its last bits with the row count (the tile it falls in).
"""

from __future__ import annotations

from .decode_attention import RESOURCES

CHUNK = 32  # values a chunk: 16 bytes, two nibbles each
TILES = ((8, 2), (4, 2), (1, 1))  # (rows of A, output columns) a pass: 8 rows at a time, then 4, then one by one
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


def _zero_point(zero_points: str, z_t: str, c: int) -> str:
    """%z{c}, the block's zero point of column %col{c} as f32."""
    if zero_points == "none":
        return f"%z{c} = arith.constant 8.0 : f32"
    if zero_points == "u8":
        return f"""%zq{c} = memref.load %Z[%col{c}, %b] : memref<{z_t}>
  %z{c} = arith.uitofp %zq{c} : i8 to f32"""
    return f"%z{c} = memref.load %Z[%col{c}, %b] : memref<{z_t}>"


def _dequantized(c: int, block_sums: bool, zero_points: str, z_t: str, q_t: str, s_t: str) -> tuple:
    """(per block, per chunk): column %col{c}'s block zero point (and scale) as vectors; its chunk %c
    unpacked, %we{c} the even values and %wo{c} the odd: q - z, times s unless ``block_sums``."""
    v = "vector<16xf32>"
    block = f"""%s{c} = memref.load %S[%col{c}, %b] : memref<{s_t}>
  {_zero_point(zero_points, z_t, c)}
  %sv{c} = vector.broadcast %s{c} : f32 to {v}
  %zv{c} = vector.broadcast %z{c} : f32 to {v}"""
    chunk = f"""%bytes{c} = vector.load %Q[%col{c}, %c, %c0] : memref<{q_t}>, vector<16xi8>
    %lo{c} = arith.andi %bytes{c}, %low : vector<16xi8>
    %hi{c} = arith.shrui %bytes{c}, %four : vector<16xi8>
    %lof{c} = arith.uitofp %lo{c} : vector<16xi8> to {v}
    %hif{c} = arith.uitofp %hi{c} : vector<16xi8> to {v}"""
    even, odd = ("we", "wo") if block_sums else ("wez", "woz")  # q - z, the result unless scaled after
    chunk += f"""
    %{even}{c} = arith.subf %lof{c}, %zv{c} : {v}
    %{odd}{c} = arith.subf %hif{c}, %zv{c} : {v}"""
    if not block_sums:
        chunk += f"""
    %we{c} = arith.mulf %wez{c}, %sv{c} : {v}
    %wo{c} = arith.mulf %woz{c}, %sv{c} : {v}"""
    return block, chunk


def _tile_body(group: int, width: int, tag: str, zero_points: str, z_t, q_t: str, a_t: str, s_t: str, y_t: str) -> str:
    """Columns %col0 .. %col{width-1} against rows %r .. %r + group - 1 of A, one vector sum per row
    and column.  Each chunk is unpacked once for all the rows and each row's values loaded once for
    all the columns.  Several rows take the dequantized values, (q - z) * s, as onnxruntime's f32 path
    does; one row sums each block's products before its scale (onnxruntime's arithmetic reassociated:
    a multiply a block instead of one a value, which measured faster there)."""
    v = "vector<16xf32>"
    block_sums = group == 1
    pairs = [(g, c) for g in range(group) for c in range(width)]
    rows = "\n".join(f"%{tag}r{g} = arith.addi %r, %c{g} : index" for g in range(group))
    types = ", ".join([v] * len(pairs))
    parts = [_dequantized(c, block_sums, zero_points, z_t, q_t, s_t) for c in range(width)]
    outer = ", ".join(f"%{tag}a{i} = %zero" for i in range(len(pairs)))
    inner = ", ".join(f"%{tag}k{i} = " + ("%zero" if block_sums else f"%{tag}a{i}") for i in range(len(pairs)))
    products = []
    for g in range(group):
        products.append(f"%ae{g} = vector.load %A[%{tag}r{g}, %c, %c0, %c0] : memref<{a_t}>, {v}")
        products += [f"%e{g}_{c} = vector.fma %we{c}, %ae{g}, %{tag}k{g * width + c} : {v}" for c in range(width)]
        products.append(f"%ao{g} = vector.load %A[%{tag}r{g}, %c, %c1, %c0] : memref<{a_t}>, {v}")
        products += [f"%o{g}_{c} = vector.fma %wo{c}, %ao{g}, %e{g}_{c} : {v}" for c in range(width)]
    if block_sums:
        scaled = "\n  ".join(f"%{tag}s{i} = vector.fma %d#{i}, %sv{c}, %{tag}a{i} : {v}" for i, (g, c) in enumerate(pairs))
        block_results = ", ".join(f"%{tag}s{i}" for i in range(len(pairs)))
    else:
        scaled, block_results = "", ", ".join(f"%d#{i}" for i in range(len(pairs)))
    stores = "\n".join(f"""%{tag}y{i} = vector.reduction <add>, %{tag}acc#{i} : {v} into f32
memref.store %{tag}y{i}, %Y[%{tag}r{g}, %col{c}] : memref<{y_t}>""" for i, (g, c) in enumerate(pairs))
    nl = "\n    "
    return f"""{rows}
%{tag}acc:{len(pairs)} = scf.for %b = %c0 to %blocks step %c1 iter_args({outer}) -> ({types}) {{
  {nl.join(block for block, _ in parts)}
  %first = arith.muli %b, %chunks : index
  %d:{len(pairs)} = scf.for %j = %c0 to %chunks step %c1 iter_args({inner}) -> ({types}) {{
    %c = arith.addi %first, %j : index
    {nl.join(chunk for _, chunk in parts)}
    {nl.join(products)}
    scf.yield {", ".join(f"%o{g}_{c}" for g, c in pairs)} : {types}
  }}
  {scaled}
  scf.yield {block_results} : {types}
}}
{stores}"""


def row_loops(R: int, tiles: tuple, body) -> str:
    """Rows %r0 .. %r1 against the workgroup's R columns, a tile of ``tiles`` at a time: the rows in
    groups of the first tile's rows, then of the next one's, ...; ``body(rows, columns, tag)``
    writes a tile (columns %col0 .., rows from %r)."""
    loops, start = [], "%r0"
    for i, (group, width) in enumerate(tiles):
        width = width if R % width == 0 else 1
        end = "%r1"
        if i < len(tiles) - 1:
            loops.append(f"""%left{i} = arith.subi %r1, {start} : index
      %over{i} = arith.remui %left{i}, %c{group} : index
      %end{i} = arith.subi %r1, %over{i} : index""")
            end = f"%end{i}"
        columns = "\n".join(f"%col{c} = arith.addi %n, %c{c} : index" for c in range(width))
        loops.append(f"""scf.for %r = {start} to {end} step %c{group} {{
        scf.for %i = %c0 to %cols step %c{width} {{
          %n = arith.addi %n0, %i : index
{columns}
{body(group, width, f"t{i}_")}
        }}
      }}""")
        start = end
    return "      " + "\n      ".join(loops)


def rows_executable(sym: str, N: int, inputs: list, body: str, opset: int) -> str:
    """The stream.executable and its caller for y f32 [M, N] from ``inputs`` (memref name, element
    type string, rows dynamic: the first is A's, M rows), in workgroups of columns_per_workgroup(N)
    columns by ROW_BLOCK rows; ``body`` the workgroup's code after its constants and %n0, %r0, %r1."""
    R, y_t = columns_per_workgroup(N), f"?x{N}xf32"
    rows = lambda dynamic: "{%m}" if dynamic else ""
    bindings = "".join(f"%{name.lower()}b: !stream.binding, " for name, _, _ in inputs)
    spans = "\n      ".join(f"%{name} = stream.binding.subspan %{name.lower()}b[%c0] : !stream.binding -> memref<{t}>{rows(d)}"
                            for name, t, d in inputs)
    args = ", ".join(f"%{name.lower()}: tensor<{t}>" for name, t, _ in inputs)
    operands = ", ".join(f"%{name.lower()}" for name, _, _ in inputs)
    types = ", ".join(f"tensor<{t}>{rows(d)}" for _, t, d in inputs)
    first, first_t, _ = inputs[0]
    return f"""
stream.executable private @{sym}_executable attributes {RESOURCES} {{
  stream.executable.export public @{sym}_rows workgroups(%m: index) -> (index, index, index) {{
    %column_groups = arith.constant {N // R} : index
    %c1 = arith.constant 1 : index
    %blocks = affine.apply affine_map<()[s0] -> (s0 ceildiv {ROW_BLOCK})>()[%m]
    %row_blocks = arith.maxui %blocks, %c1 : index
    stream.return %column_groups, %row_blocks, %c1 : index, index, index
  }}
  builtin.module {{
    func.func @{sym}_rows({bindings}%yb: !stream.binding, %m: index) {{
      %c0 = arith.constant 0 : index
      %cols = arith.constant {R} : index
      %row_block = arith.constant {ROW_BLOCK} : index
      {spans}
      %Y = stream.binding.subspan %yb[%c0] : !stream.binding -> memref<{y_t}>{{%m}}
      %wg = stream.dispatch.workgroup.id[0] : index
      %wr = stream.dispatch.workgroup.id[1] : index
      %n0 = arith.muli %wg, %cols : index
      %r0 = arith.muli %wr, %row_block : index
      %r0_end = arith.addi %r0, %row_block : index
      %r1 = arith.minui %r0_end, %m : index
{body}
      return
    }}
  }}
}}
func.func private @{sym}({args}) -> tensor<{y_t}>
    attributes {{torch.onnx_meta.opset_version = {opset} : si64}} {{
  %c0 = arith.constant 0 : index
  %m = tensor.dim %{first.lower()}, %c0 : tensor<{first_t}>
  %y = flow.dispatch @{sym}_executable::@{sym}_rows[%m]({operands}, %m) : ({types}, index) -> tensor<{y_t}>{{%m}}
  return %y : tensor<{y_t}>
}}
"""


def index_constants(*values: int) -> str:
    """%c{v} = arith.constant v : index for each value (and 1 .. the largest tile's size: the row offsets)."""
    return "\n      ".join(f"%c{v} = arith.constant {v} : index" for v in sorted(set(values)) if v != 0)


def render(K: int, N: int, L: int, zero_points: str, opset: int) -> tuple:
    sym, C, Kb, R = symbol(K, N, L, zero_points), K // CHUNK, K // L, columns_per_workgroup(N)
    a_t, q_t, s_t, y_t = f"?x{C}x2x16xf32", f"{N}x{C}x16xi8", f"{N}x{Kb}xf32", f"?x{N}xf32"
    z_t = f"{N}x{Kb}x{ZERO_POINTS[zero_points]}" if ZERO_POINTS[zero_points] else None
    ts = (zero_points, z_t, q_t, a_t, s_t, y_t)
    inputs = [("A", a_t, True), ("Q", q_t, False), ("S", s_t, False)] + ([("Z", z_t, False)] if z_t else [])
    body = f"""      {index_constants(*range(max(max(t) for t in TILES) + 1))}
      %blocks = arith.constant {Kb} : index
      %chunks = arith.constant {L // CHUNK} : index
      %zero = arith.constant dense<0.0> : vector<16xf32>
      %low = arith.constant dense<15> : vector<16xi8>
      %four = arith.constant dense<4> : vector<16xi8>
{row_loops(R, TILES, lambda group, width, tag: _tile_body(group, width, tag, *ts))}"""
    return sym, rows_executable(sym, N, inputs, body, opset)
