"""A cache grown by one row on the CPU (``attention=fused``): the past's rows copied into a new
present of one more row, that row zeroed, as one IREE dispatch of ours.

A growing cache whose rows are known only at run time (the builder's and the exporters' models)
cannot take the decode kernel's write variant (kernels/present_write.py), so its decode step
copies the past into present before the kernel puts the new row in and reads present.  IREE
3.13 compiled that copy (a concatenation of past and one zero row) as a strided-copy dispatch
that moved 16 MiB a cache at past 4095 in 2.15 ms on the AMD guest, where numpy's copy of as
many bytes took 0.9-1.2 ms (benchmarks/README.md, "CPU, round 24").  Here each workgroup (a
block of ROWS rows, a KV head, a batch row) copies its rows a whole head row (Dh floats) at a
time, with non-temporal stores: present goes to memory without being read first.  Although
the decode kernel reads present right after, plain stores were slower even at past 1023 (4
MiB a cache, AMD guest: the whole step 1.58 against 1.00 ms on 1 thread; IREE's copy 1.47).

``render(kv_heads, head_size, opset)`` returns ``(symbol, text)``: the function
``@symbol(past f32 [B,Hkv,P,Dh]) -> present f32 [B,Hkv,P+1,Dh]`` and its executable.  The
executable takes bindings aligned to 16 bytes as the decode kernel's does (a numpy past read in
place: backends/iree/feed_alignment.py); present is IREE's own allocation (64).
"""

from __future__ import annotations

from .decode_attention import RESOURCES

ROWS = 256  # past rows a workgroup copies (128 KiB at Dh=128)


def symbol(kv_heads: int, head_size: int) -> str:
    return f"gqa_cache_grow_hkv{kv_heads}_dh{head_size}"


def render(kv_heads: int, head_size: int, opset: int) -> tuple:
    sym, Hkv, D = symbol(kv_heads, head_size), kv_heads, head_size
    cache = f"{Hkv}x?x{D}xf32"
    text = f"""
stream.executable private @{sym}_executable attributes {RESOURCES} {{
  stream.executable.export public @{sym}_copy workgroups(%p: index, %bsz: index) -> (index, index, index) {{
    %hkv = arith.constant {Hkv} : index
    %c1 = arith.constant 1 : index
    %blocks = affine.apply affine_map<()[s0] -> (s0 ceildiv {ROWS})>()[%p]
    %nb = arith.maxui %blocks, %c1 : index
    stream.return %nb, %hkv, %bsz : index, index, index
  }}
  builtin.module {{
    func.func @{sym}_copy(%pb: !stream.binding, %wb: !stream.binding, %p: index, %bsz: index) {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %rows = arith.constant {ROWS} : index
      %zv = arith.constant dense<0.0> : vector<{D}xf32>
      %t = arith.addi %p, %c1 : index
      %blk = stream.dispatch.workgroup.id[0] : index
      %h = stream.dispatch.workgroup.id[1] : index
      %b = stream.dispatch.workgroup.id[2] : index
      %P = stream.binding.subspan %pb[%c0] : !stream.binding -> memref<?x{cache}>{{%bsz, %p}}
      %Wb = stream.binding.subspan %wb[%c0] : !stream.binding -> memref<?x{cache}>{{%bsz, %t}}
      %W = memref.assume_alignment %Wb, 64 : memref<?x{cache}>
      %lo = arith.muli %blk, %rows : index
      %lorows = arith.addi %lo, %rows : index
      %hi = arith.minui %lorows, %p : index
      scf.for %r = %lo to %hi step %c1 {{
        %x = vector.load %P[%b, %h, %r, %c0] : memref<?x{cache}>, vector<{D}xf32>
        "vector.store"(%x, %W, %b, %h, %r, %c0) <{{nontemporal = true}}> : (vector<{D}xf32>, memref<?x{cache}>, index, index, index, index) -> ()
      }}
      %last = arith.cmpi eq, %hi, %p : index
      scf.if %last {{
        vector.store %zv, %W[%b, %h, %p, %c0] : memref<?x{cache}>, vector<{D}xf32>
      }}
      return
    }}
  }}
}}
func.func private @{sym}(%past: tensor<?x{cache}>) -> tensor<?x{cache}> attributes {{torch.onnx_meta.opset_version = {opset} : si64}} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %bsz = tensor.dim %past, %c0 : tensor<?x{cache}>
  %p = tensor.dim %past, %c2 : tensor<?x{cache}>
  %t = arith.addi %p, %c1 : index
  %present = flow.dispatch @{sym}_executable::@{sym}_copy[%p, %bsz](%past, %p, %bsz)
      : (tensor<?x{cache}>{{%bsz, %p}}, index, index) -> tensor<?x{cache}>{{%bsz, %t}}
  return %present : tensor<?x{cache}>
}}
"""
    return sym, text
