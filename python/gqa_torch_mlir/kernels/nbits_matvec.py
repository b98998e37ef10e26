"""A few rows against a 4-bit block-quantized weight as one IREE CPU dispatch (``matmul_nbits=kernel``).

IREE 3.13 on llvm-cpu does not fuse MatMulNBits' dequantization into the matmul
that reads it: a weight over IREE's constant-expression limit (1 MiB of growth) is
dequantized to f32 by a dispatch of its own on every call, then read again by the
matmul.  A 4096x1024 weight took 2.0 ms a row on the AMD guest, where onnxruntime's
kernel took 0.19 ms (benchmarks/README.md, "CPU, round 28").  This kernel reads the
packed bytes once: each 16-byte chunk (32 values) is split into its low and high
nibbles, converted to f32 in registers, less its block's zero point, against A's 32
values of that chunk, and each block's sum is scaled.

``render(K, N, L, opset)`` returns ``(symbol, text)``: the function

    @symbol(a f32 [M, C, 2, 16], q i8 [N, C, 16], scales f32 [N, Kb], zero_points f32 [N, Kb])
        -> y f32 [M, N]

with C = K / 32 chunks of 32 values a row and Kb = K / L blocks.  ``a`` is A deinterleaved
per chunk (``a[m, c, 0, j] = A[m, 32c + 2j]``, ``a[m, c, 1, j] = A[m, 32c + 2j + 1]``), so that
the low nibbles of a chunk's bytes (the even values) meet the first half and the high
nibbles the second.  ``y[m, n] = sum_b scales[n, b] * sum_(k in b) A[m, k] * (q[n, k] -
zero_points[n, b])``: onnxruntime's f32 path, reassociated (the block's products are summed
before its scale is applied).  Each workgroup computes :func:`rows_per_workgroup` output columns
(32 as a rule) for every row of A; M is left to run time (a few rows: each row reads the
workgroup's weight bytes again, from cache).
"""

from __future__ import annotations

from .decode_attention import RESOURCES

CHUNK = 32  # values a chunk: 16 bytes, two nibbles each
MAX_ROWS = 16  # rows of A up to which the lowering calls the kernel (it reads the weight again per row)


def supported(bits: int, K: int, L: int) -> bool:
    """4-bit weights in blocks of whole chunks that tile K (no padded last block)."""
    return bits == 4 and L % CHUNK == 0 and K % L == 0


def rows_per_workgroup(N: int) -> int:
    """The output columns a workgroup computes: 32, or the largest power of 2 below it that divides N."""
    return next(r for r in (32, 16, 8, 4, 2, 1) if N % r == 0)


def symbol(K: int, N: int, L: int) -> str:
    return f"gqa_nbits_matvec_k{K}_n{N}_l{L}"


def render(K: int, N: int, L: int, opset: int) -> tuple:
    sym, C, Kb, R = symbol(K, N, L), K // CHUNK, K // L, rows_per_workgroup(N)
    a_t, q_t, s_t, y_t = f"?x{C}x2x16xf32", f"{N}x{C}x16xi8", f"{N}x{Kb}xf32", f"?x{N}xf32"
    text = f"""
stream.executable private @{sym}_executable attributes {RESOURCES} {{
  stream.executable.export public @{sym}_rows workgroups(%m: index) -> (index, index, index) {{
    %groups = arith.constant {N // R} : index
    %c1 = arith.constant 1 : index
    stream.return %groups, %c1, %c1 : index, index, index
  }}
  builtin.module {{
    func.func @{sym}_rows(%ab: !stream.binding, %qb: !stream.binding, %sb: !stream.binding, %zb: !stream.binding,
                          %yb: !stream.binding, %m: index) {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %rows = arith.constant {R} : index
      %blocks = arith.constant {Kb} : index
      %chunks = arith.constant {L // CHUNK} : index
      %zero = arith.constant dense<0.0> : vector<16xf32>
      %low = arith.constant dense<15> : vector<16xi8>
      %four = arith.constant dense<4> : vector<16xi8>
      %A = stream.binding.subspan %ab[%c0] : !stream.binding -> memref<{a_t}>{{%m}}
      %Q = stream.binding.subspan %qb[%c0] : !stream.binding -> memref<{q_t}>
      %S = stream.binding.subspan %sb[%c0] : !stream.binding -> memref<{s_t}>
      %Z = stream.binding.subspan %zb[%c0] : !stream.binding -> memref<{s_t}>
      %Y = stream.binding.subspan %yb[%c0] : !stream.binding -> memref<{y_t}>{{%m}}
      %wg = stream.dispatch.workgroup.id[0] : index
      %n0 = arith.muli %wg, %rows : index
      scf.for %r = %c0 to %m step %c1 {{
        scf.for %i = %c0 to %rows step %c1 {{
          %n = arith.addi %n0, %i : index
          %acc = scf.for %b = %c0 to %blocks step %c1 iter_args(%acc0 = %zero) -> (vector<16xf32>) {{
            %s = memref.load %S[%n, %b] : memref<{s_t}>
            %z = memref.load %Z[%n, %b] : memref<{s_t}>
            %sv = vector.broadcast %s : f32 to vector<16xf32>
            %zv = vector.broadcast %z : f32 to vector<16xf32>
            %first = arith.muli %b, %chunks : index
            %dot = scf.for %j = %c0 to %chunks step %c1 iter_args(%d0 = %zero) -> (vector<16xf32>) {{
              %c = arith.addi %first, %j : index
              %bytes = vector.load %Q[%n, %c, %c0] : memref<{q_t}>, vector<16xi8>
              %lo = arith.andi %bytes, %low : vector<16xi8>
              %hi = arith.shrui %bytes, %four : vector<16xi8>
              %lof = arith.uitofp %lo : vector<16xi8> to vector<16xf32>
              %hif = arith.uitofp %hi : vector<16xi8> to vector<16xf32>
              %we = arith.subf %lof, %zv : vector<16xf32>
              %wo = arith.subf %hif, %zv : vector<16xf32>
              %ae = vector.load %A[%r, %c, %c0, %c0] : memref<{a_t}>, vector<16xf32>
              %ao = vector.load %A[%r, %c, %c1, %c0] : memref<{a_t}>, vector<16xf32>
              %d1 = vector.fma %we, %ae, %d0 : vector<16xf32>
              %d2 = vector.fma %wo, %ao, %d1 : vector<16xf32>
              scf.yield %d2 : vector<16xf32>
            }}
            %acc1 = vector.fma %dot, %sv, %acc0 : vector<16xf32>
            scf.yield %acc1 : vector<16xf32>
          }}
          %y = vector.reduction <add>, %acc : vector<16xf32> into f32
          memref.store %y, %Y[%r, %n] : memref<{y_t}>
        }}
      }}
      return
    }}
  }}
}}
func.func private @{sym}(%a: tensor<{a_t}>, %q: tensor<{q_t}>, %s: tensor<{s_t}>, %z: tensor<{s_t}>) -> tensor<{y_t}>
    attributes {{torch.onnx_meta.opset_version = {opset} : si64}} {{
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<{a_t}>
  %y = flow.dispatch @{sym}_executable::@{sym}_rows[%m](%a, %q, %s, %z, %m)
      : (tensor<{a_t}>{{%m}}, tensor<{q_t}>, tensor<{s_t}>, tensor<{s_t}>, index) -> tensor<{y_t}>{{%m}}
  return %y : tensor<{y_t}>
}}
"""
    return sym, text
