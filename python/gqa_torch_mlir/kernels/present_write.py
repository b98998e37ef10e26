"""The decode kernel's write variant (``KernelShape.writes``): a growing cache's present made
while the kernel reads the past, so the past is read once (kernels/decode_attention.py).

Each chunk of key rows is first written to present, row r being new row
r - start when that is in [0, S), else past row r when r < P, else 0, and
staged on the stack ([C,Dh] for K and for V), from where the chunk's scores
and P.V read it.  A growing step copied the past into present, then read
present: on the AMD guest at past 4095 the write variant took 5.8 ms where
the copy and the read took 7.7 (benchmarks/README.md, "CPU, round 16").
Present is not read again in the step: a batch row's present of more than
NONTEMPORAL_FROM bytes (K and V), which the last-level cache would not keep,
is written with non-temporal stores, a smaller one with plain stores (T at
run time: the kernel picks, per call).  On the AMD guest the two took the
same time at 8 MiB with T static and plain stores were 7-13% faster with T at
run time; at 32 MiB non-temporal ones were 11-16% faster ("CPU, round 20").
"""

from __future__ import annotations

STACK_BYTES = 32768  # IREE's llvm-cpu stack limit for a dispatch function
NONTEMPORAL_FROM = 16 << 20  # bytes of a batch row's present (K and V) from which its stores bypass the caches


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
      %WK = stream.binding.subspan %wkb[%c0] : !stream.binding -> {m.present}{m.present_dims}
      %WV = stream.binding.subspan %wvb[%c0] : !stream.binding -> {m.present}{m.present_dims}
      %KS = memref.alloca() : memref<{C}x{D}xf32>
      %VS = memref.alloca() : memref<{C}x{D}xf32>
      %cS = arith.constant {s.seq} : index
      %cP = {"arith.subi %t, %cS : index" if s.past is None else f"arith.constant {s.past} : index"}{_nontemporal_at_run_time(s)}"""


def _row_bytes(s) -> int:
    """A present row's bytes in one batch row, K and V: 2 x Hkv x Dh f32."""
    return 2 * s.kv_heads * s.head_size * 4


def _nontemporal_at_run_time(s) -> str:
    """(T at run time) ``%nt``: whether the present's stores bypass the caches."""
    if s.rows is not None:
        return ""
    rows = -(-NONTEMPORAL_FROM // _row_bytes(s))
    return f"\n      %ntrows = arith.constant {rows} : index\n      %nt = arith.cmpi uge, %t, %ntrows : index"


def chunk_written(s, m, chunk_rows: int) -> str:
    """The chunk's ``%wlen`` present rows written and staged; then ``%len``, the count of its
    first rows below n (those attention reads)."""
    D, C = s.head_size, chunk_rows

    def written(x: str, c: str, nontemporal: bool, pad: str) -> str:  # (the generic form: the custom one has no place for the attribute)
        nt = "<{nontemporal = true}> " if nontemporal else ""
        return f'{pad}"vector.store"({x}, %W{c}, %b, %h, %r, %c0) {nt}: (vector<{D}xf32>, {m.present}, index, index, index, index) -> ()'

    def stored(k: str, v: str, pad: str) -> str:
        lines = []
        for x, c in ((k, "K"), (v, "V")):
            if s.rows is None:  # picked per call
                lines += [f"{pad}scf.if %nt {{", written(x, c, True, pad + "  "), f"{pad}}} else {{", written(x, c, False, pad + "  "), f"{pad}}}"]
            else:
                lines.append(written(x, c, s.rows * _row_bytes(s) >= NONTEMPORAL_FROM, pad))
            lines.append(f"{pad}vector.store {x}, %{c}S[%j, %c0] : memref<{C}x{D}xf32>, vector<{D}xf32>")
        return "\n".join(lines)

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
