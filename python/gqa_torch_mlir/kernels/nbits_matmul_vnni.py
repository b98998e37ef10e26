"""MatMulNBits at ``accuracy_level`` 4 by AVX-512 VNNI: A's int8 values times the 4-bit weight in i32.

onnxruntime's int8 path (``accuracy_level`` 4, the builder's int4 models) quantizes A per block
of L values to int8 (patterns/com_microsoft/matmul_nbits.py reproduces it) and multiplies bytes:
``y[m, n] = sum_b as[m, b] * s[n, b] * sum_(k in b) aq[m, k] * (q[n, k] - z[n, b])``, the inner
sum exact in integers.  kernels/nbits_matmul.py computes the same in f32, converting every
nibble; on the AMD guest onnxruntime's kernel was 1.3-2.7x faster there ("CPU, round 29").

This kernel takes 64 packed bytes (128 values, 4 chunks) a step: their low and high nibbles
masked out as bytes, each multiplied against A's int8 values by ``vpdpbusd`` (unsigned bytes
by signed, 4 products summed into each of 16 i32 lanes), reached through
``llvm.call_intrinsic`` (IREE passes it to LLVM).  Each lane's sum lies within one block: less
z times its A values' sum (``vpdpbusd`` of ones), converted to f32, times its block's two
scales, added to a 16-lane f32 sum per row and column.  The target CPU must have
``avx512vnni`` (options.py: ``matmul_nbits=vnni``).

``render(K, N, L, zero_points, opset)`` returns ``(symbol, text)``: the function

    @symbol(aq i8 [M, G, 2, 64], as f32 [M, Kb], q i8 [N, K/2], s f32 [N, Kb], z [N, Kb]) -> y f32 [M, N]

with G = K / 128 groups: ``aq[m, g, 0, 16i + j] = Aq[m, 128g + 32i + 2j]`` (the even values of
chunk 4g + i, which meet its bytes' low nibbles) and ``aq[m, g, 1, 16i + j]`` the odd ones.
Zero points are a byte a block (``"u8"``) or absent (``"none"``: 8); f32 zero points never take
onnxruntime's int8 path.  Workgroups are kernels/nbits_matmul.py's; TILES its own.
"""

from __future__ import annotations

from .nbits_matmul import columns_per_workgroup, index_constants, row_loops, rows_executable

GROUP = 128  # values a step: 64 bytes, 4 chunks of 32
# (rows, columns) a pass, as kernels/nbits_matmul.py's TILES; 4 rows by 2 columns took 1.3x the time of
# 4 by 1 on 4 rows of 1024x32000 (AMD guest), and 8 by 1 was slower than 8 by 2 from 16 rows
TILES = ((8, 2), (4, 1), (1, 1))
_DOT = '"llvm.x86.avx512.vpdpbusd.512"'
_V, _I, _B = "vector<16xf32>", "vector<16xi32>", "vector<64xi8>"


def supported(bits: int, K: int, L: int) -> bool:
    """4-bit weights in blocks of whole chunks that tile K, in whole 128-value groups."""
    return bits == 4 and L % 32 == 0 and K % L == 0 and K % GROUP == 0


def symbol(K: int, N: int, L: int, zero_points: str) -> str:
    return f"gqa_nbits_matmul_vnni_k{K}_n{N}_l{L}_z{zero_points}"


def _lanes(name: str, memref: str, row: str, t: str, elem: str, L: int) -> str:
    """%{name}: the blocks of group %g spread over its 16 lanes, from ``memref`` [rows, Kb] of ``elem``."""
    chunks = L // 32  # chunks a block
    if chunks >= 4:  # the group lies in one block
        return f"""%{name}b = arith.divui %g, %c{chunks // 4} : index
    %{name}s = memref.load %{memref}[{row}, %{name}b] : memref<{t}>
    %{name} = vector.broadcast %{name}s : {elem} to vector<16x{elem}>"""
    blocks = 4 // chunks
    mask = ", ".join(str(lane * blocks // 16) for lane in range(16))
    return f"""%{name}b = arith.muli %g, %c{blocks} : index
    %{name}v = vector.load %{memref}[{row}, %{name}b] : memref<{t}>, vector<{blocks}x{elem}>
    %{name} = vector.shuffle %{name}v, %{name}v [{mask}] : vector<{blocks}x{elem}>, vector<{blocks}x{elem}>"""


def _column(c: int, zero_points: str, L: int, q_t: str, s_t: str, z_t: str) -> str:
    """Column %col{c}'s bytes of group %g as low (%lo{c}) and high (%hi{c}) nibbles, its scales' and
    zero points' lanes (%bs{c}, %z{c})."""
    zero = f"%z{c} = arith.constant dense<8> : {_I}"
    if zero_points == "u8":
        zero = _lanes(f"zb{c}", "Z", f"%col{c}", z_t, "i8", L) + f"\n    %z{c} = arith.extui %zb{c} : vector<16xi8> to {_I}"
    return f"""%off{c} = arith.muli %g, %c64 : index
    %bytes{c} = vector.load %Q[%col{c}, %off{c}] : memref<{q_t}>, {_B}
    %lo{c} = arith.andi %bytes{c}, %low : {_B}
    %hi{c} = arith.shrui %bytes{c}, %four : {_B}
    {_lanes(f"bs{c}", "S", f"%col{c}", s_t, "f32", L)}
    {zero}"""


def _row(g: int, tag: str, a_t: str, as_t: str, L: int) -> str:
    """Row %{tag}r{g}'s int8 values of group %g (%ae, %ao), their sums per lane (%sa) and scales' lanes (%as)."""
    return f"""%ae{g} = vector.load %AQ[%{tag}r{g}, %g, %c0, %c0] : memref<{a_t}>, {_B}
    %ao{g} = vector.load %AQ[%{tag}r{g}, %g, %c1, %c0] : memref<{a_t}>, {_B}
    %sae{g} = llvm.call_intrinsic {_DOT}(%izero, %ones, %ae{g}) : ({_I}, {_B}, {_B}) -> {_I}
    %sa{g} = llvm.call_intrinsic {_DOT}(%sae{g}, %ones, %ao{g}) : ({_I}, {_B}, {_B}) -> {_I}
    {_lanes(f"as{g}", "AS", f"%{tag}r{g}", as_t, "f32", L)}"""


def _product(g: int, c: int, k: str) -> str:
    """Row g by column c in group %g, added to %{k}: -> %p{g}_{c}."""
    return f"""%de{g}_{c} = llvm.call_intrinsic {_DOT}(%izero, %lo{c}, %ae{g}) : ({_I}, {_B}, {_B}) -> {_I}
    %d{g}_{c} = llvm.call_intrinsic {_DOT}(%de{g}_{c}, %hi{c}, %ao{g}) : ({_I}, {_B}, {_B}) -> {_I}
    %zs{g}_{c} = arith.muli %z{c}, %sa{g} : {_I}
    %dz{g}_{c} = arith.subi %d{g}_{c}, %zs{g}_{c} : {_I}
    %f{g}_{c} = arith.sitofp %dz{g}_{c} : {_I} to {_V}
    %sc{g}_{c} = arith.mulf %bs{c}, %as{g} : {_V}
    %p{g}_{c} = vector.fma %f{g}_{c}, %sc{g}_{c}, {k} : {_V}"""


def _tile_body(group: int, width: int, tag: str, zero_points: str, L: int, types: tuple) -> str:
    """Columns %col0 .. %col{width-1} against rows %r .. %r + group - 1, one 16-lane sum each."""
    a_t, as_t, q_t, s_t, z_t, y_t = types
    pairs = [(g, c) for g in range(group) for c in range(width)]
    rows = "\n".join(f"%{tag}r{g} = arith.addi %r, %c{g} : index" for g in range(group))
    vs = ", ".join([_V] * len(pairs))
    outer = ", ".join(f"%{tag}a{i} = %zero" for i in range(len(pairs)))
    columns = "\n    ".join(_column(c, zero_points, L, q_t, s_t, z_t) for c in range(width))
    row_parts = "\n    ".join(_row(g, tag, a_t, as_t, L) for g in range(group))
    products = "\n    ".join(_product(g, c, f"%{tag}a{i}") for i, (g, c) in enumerate(pairs))
    stores = "\n".join(f"""%{tag}y{i} = vector.reduction <add>, %{tag}acc#{i} : {_V} into f32
memref.store %{tag}y{i}, %Y[%{tag}r{g}, %col{c}] : memref<{y_t}>""" for i, (g, c) in enumerate(pairs))
    return f"""{rows}
%{tag}acc:{len(pairs)} = scf.for %g = %c0 to %groups step %c1 iter_args({outer}) -> ({vs}) {{
    {columns}
    {row_parts}
    {products}
    scf.yield {", ".join(f"%p{g}_{c}" for g, c in pairs)} : {vs}
}}
{stores}"""


def render(K: int, N: int, L: int, zero_points: str, opset: int) -> tuple:
    sym, G, Kb, R = symbol(K, N, L, zero_points), K // GROUP, K // L, columns_per_workgroup(N)
    a_t, as_t, q_t, s_t, y_t = f"?x{G}x2x64xi8", f"?x{Kb}xf32", f"{N}x{K // 2}xi8", f"{N}x{Kb}xf32", f"?x{N}xf32"
    z_t = f"{N}x{Kb}xi8" if zero_points == "u8" else None
    types = (a_t, as_t, q_t, s_t, z_t, y_t)
    inputs = [("AQ", a_t, True), ("AS", as_t, True), ("Q", q_t, False), ("S", s_t, False)] + ([("Z", z_t, False)] if z_t else [])
    body = f"""      {index_constants(*range(max(max(t) for t in TILES) + 1), 64)}
      %groups = arith.constant {G} : index
      %zero = arith.constant dense<0.0> : {_V}
      %izero = arith.constant dense<0> : {_I}
      %ones = arith.constant dense<1> : {_B}
      %low = arith.constant dense<15> : {_B}
      %four = arith.constant dense<4> : {_B}
{row_loops(R, TILES, lambda group, width, tag: _tile_body(group, width, tag, zero_points, L, types))}"""
    return sym, rows_executable(sym, N, inputs, body, opset)
