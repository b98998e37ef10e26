"""The decode kernel's write variant (``KernelShape.writes``): a growing cache's present made
while the kernel reads the past, so the past is read once (kernels/decode_attention.py).

Each chunk of key rows is first written to present, row r being new row
r - start when that is in [0, S), else past row r when r < P, else 0, with
non-temporal stores (present is not read again in the step), and staged on
the stack ([C,Dh] for K and for V), from where the chunk's scores and P.V
read it.  A growing step copied the past into present, then read present:
on the AMD guest at past 4095 the write variant took 5.8 ms where the copy
and the read took 7.7 (benchmarks/README.md, "CPU, round 16").
"""

from __future__ import annotations

STACK_BYTES = 32768  # IREE's llvm-cpu stack limit for a dispatch function
NONTEMPORAL = True  # plain stores: 4-20% slower in round 16's runs


def fits(group: int, head_size: int, chunk_rows: int) -> bool:
    """Whether the variant's stack arrays fit: the accumulators [G,Dh], the chunk's scores [G,C]
    and its staged K and V rows [C,Dh] (G=16 with Dh=256 does not: its write stays a copy)."""
    return 4 * (group * head_size + group * chunk_rows + 2 * chunk_rows * head_size) <= STACK_BYTES - 1024


def bindings(s, m, chunk_rows: int) -> str:
    """The write's bindings (the new rows, the presents), the staged rows and the sizes P and S.
    ``s``: the KernelShape, ``m``: its memref types."""
    C, D = chunk_rows, s.head_size
    return f"""      %NK = stream.binding.subspan %nkb[%c0] : !stream.binding -> {m.new}{m.q_dims}
      %NV = stream.binding.subspan %nvb[%c0] : !stream.binding -> {m.new}{m.q_dims}
      %WK = stream.binding.subspan %wkb[%c0] : !stream.binding -> {m.present}{m.q_dims}
      %WV = stream.binding.subspan %wvb[%c0] : !stream.binding -> {m.present}{m.q_dims}
      %KS = memref.alloca() : memref<{C}x{D}xf32>
      %VS = memref.alloca() : memref<{C}x{D}xf32>
      %cP = arith.constant {s.past} : index
      %cS = arith.constant {s.seq} : index"""


def chunk_written(s, m, chunk_rows: int) -> str:
    """The chunk's ``%wlen`` present rows written and staged; then ``%len``, the count of its
    first rows below n (those attention reads)."""
    D, C = s.head_size, chunk_rows
    nt = "<{nontemporal = true}> " if NONTEMPORAL else ""  # (the generic form: the custom one has no place for it)

    def stored(k: str, v: str, pad: str) -> str:
        return "\n".join(f'{pad}"vector.store"({x}, %W{c}, %b, %h, %r, %c0) {nt}: (vector<{D}xf32>, {m.present}, index, index, index, index) -> ()\n'
                         f"{pad}vector.store {x}, %{c}S[%j, %c0] : memref<{C}x{D}xf32>, vector<{D}xf32>"
                         for x, c in ((k, "K"), (v, "V")))

    def loaded(source: str, memref: str, row: str, pad: str) -> str:  # source: "" (past) or "N" (new rows)
        return "\n".join(f"{pad}%{c.lower()}w = vector.load %{source}{c}[%b, %h, {row}, %c0] : {memref}, vector<{D}xf32>"
                         for c in ("K", "V"))

    p = " " * 12
    return f"""        scf.for %j = %c0 to %wlen step %c1 {{
          %r = arith.addi %c, %j : index
          %rn = arith.subi %r, %start : index
          %isnew = arith.cmpi ult, %rn, %cS : index
          scf.if %isnew {{
{loaded("N", m.new, "%rn", p)}
{stored("%kw", "%vw", p)}
          }} else {{
            %inpast = arith.cmpi ult, %r, %cP : index
            scf.if %inpast {{
{loaded("", m.kv, "%r", p + "  ")}
{stored("%kw", "%vw", p + "  ")}
            }} else {{
{stored("%zv", "%zv", p + "  ")}
            }}
          }}
        }}
        %cend = arith.addi %c, %wlen : index
        %rend = arith.minui %cend, %n : index
        %rmax = arith.maxui %rend, %c : index
        %len = arith.subi %rmax, %c : index"""
