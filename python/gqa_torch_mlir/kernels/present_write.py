"""The decode kernel's write variant (``KernelShape.writes``): a growing cache's present made
while the kernel reads the past, so the past is read from memory once (kernels/decode_attention.py).

A block's key rows are taken SUPER_ROWS at a time.  Those rows of present are written first, row
r being new row r - start when that is in [0, S), else past row r when r < P, else 0, with
non-temporal stores: present is not read again in the step.  The chunks of those rows then read
each row again from where present's came (:func:`row_read`): the past's rows, just read, are
still in the core's L2 (SUPER_ROWS rows of K and V: 256 KiB at Dh=128).  On the AMD guest this
took the kernel alone from 1.60-1.75 to 1.15-1.19 ms at past 1023 and from 5.7-6.2 to 3.8 ms at
4095 (1 thread; alike on 2), where round 16's form staged each chunk of 8 rows on the stack
between its write and its reads (benchmarks/README.md, "CPU, round 21").  Writing present with
plain stores and reading it back was slower (1.24-1.32 ms at 1023), and reading the past again
after plain stores slower still (1.43).
"""

from __future__ import annotations

SUPER_ROWS = 256  # key rows written to present before their chunks are read (32-512 measured: 256 and 512 fastest)


def bindings(s, m) -> str:
    """The write's bindings (the new rows, the presents) and the sizes P and S.
    ``s``: the KernelShape, ``m``: its memref types."""
    return f"""      %NK = stream.binding.subspan %nkb[%c0] : !stream.binding -> {m.new}{m.q_dims}
      %NV = stream.binding.subspan %nvb[%c0] : !stream.binding -> {m.new}{m.q_dims}
      %WKb = stream.binding.subspan %wkb[%c0] : !stream.binding -> {m.present}{m.present_dims}
      %WVb = stream.binding.subspan %wvb[%c0] : !stream.binding -> {m.present}{m.present_dims}
      %WK = memref.assume_alignment %WKb, 64 : {m.present}
      %WV = memref.assume_alignment %WVb, 64 : {m.present}
      %cS = arith.constant {s.seq} : index
      %cP = {"arith.subi %t, %cS : index" if s.past is None else f"arith.constant {s.past} : index"}"""


def blocks_opened(s, m, f32s: str) -> tuple:
    """The loop over the workgroup's rows [%lo, %hi), SUPER_ROWS at a time, opened: the online
    softmax's running maxima and sums carried across it (``%om``/``%ol``), present's rows
    written, then ``%w``..``%rend`` the rows of them attention reads.  Returns (its text, the
    chunk loop's iter_args)."""
    G = s.group
    outer = ", ".join([f"%om{g} = %ninf" for g in range(G)] + [f"%ol{g} = %zero" for g in range(G)])
    inner = ", ".join([f"%m{g} = %om{g}" for g in range(G)] + [f"%l{g} = %ol{g}" for g in range(G)])
    return f"""      %cW = arith.constant {SUPER_ROWS} : index
      %fin:{2 * G} = scf.for %w = %lo to %hi step %cW iter_args({outer}) -> ({f32s}) {{
      %wend0 = arith.addi %w, %cW : index
      %wend = arith.minui %wend0, %hi : index
{rows_written(s, m, "%w", "%wend")}
      %rend = arith.minui %wend, %n : index""", inner


def blocks_closed(group: int, f32s: str) -> str:
    """The loop blocks_opened opened, closed on the chunk loop's results (``%fins``)."""
    return "      scf.yield " + ", ".join(f"%fins#{i}" for i in range(2 * group)) + f" : {f32s}\n      }}"


def rows_written(s, m, first: str, end: str) -> str:
    """Present's rows [first, end) of the workgroup's (KV head, batch row), K and V."""
    D = s.head_size

    def stored(x: str, c: str, pad: str) -> str:  # (the generic form: the custom one has no place for the attribute)
        return (f'{pad}"vector.store"({x}, %W{c}, %b, %h, %r, %c0) <{{nontemporal = true}}> : '
                f'(vector<{D}xf32>, {m.present}, index, index, index, index) -> ()')

    def copied(source: str, memref: str, row: str, pad: str) -> str:  # source: "" (past) or "N" (new rows)
        return "\n".join(f"{pad}%{c.lower()}w = vector.load %{source}{c}[%b, %h, {row}, %c0] : {memref}, vector<{D}xf32>\n"
                         + stored(f"%{c.lower()}w", c, pad) for c in ("K", "V"))

    p = " " * 12
    return f"""      scf.for %r = {first} to {end} step %c1 {{
          %rn = arith.subi %r, %start : index
          %isnew = arith.cmpi ult, %rn, %cS : index
          scf.if %isnew {{
{copied("N", m.new, "%rn", p)}
          }} else {{
            %inpast = arith.cmpi ult, %r, %cP : index
            scf.if %inpast {{
{copied("", m.kv, "%r", p + "  ")}
            }} else {{
{stored("%zv", "K", p + "  ")}
{stored("%zv", "V", p + "  ")}
            }}
          }}
      }}"""


def row_read(s, m, name: str, cache: str) -> str:
    """``name`` = present's row ``%r`` of K or V (``cache``), read where it came from: the new
    rows, the past (just read: in cache), or zeros."""
    D, v = s.head_size, name[1:]
    return f"""%{v}rn = arith.subi %r, %start : index
            %{v}new = arith.cmpi ult, %{v}rn, %cS : index
            {name} = scf.if %{v}new -> (vector<{D}xf32>) {{
              %{v}n = vector.load %N{cache}[%b, %h, %{v}rn, %c0] : {m.new}, vector<{D}xf32>
              scf.yield %{v}n : vector<{D}xf32>
            }} else {{
              %{v}old = arith.cmpi ult, %r, %cP : index
              %{v}o = scf.if %{v}old -> (vector<{D}xf32>) {{
                %{v}p = vector.load %{cache}[%b, %h, %r, %c0] : {m.kv}, vector<{D}xf32>
                scf.yield %{v}p : vector<{D}xf32>
              }} else {{
                scf.yield %zv : vector<{D}xf32>
              }}
              scf.yield %{v}o : vector<{D}xf32>
            }}"""
