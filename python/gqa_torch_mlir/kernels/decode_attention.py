"""A decode step's attention as one hand-scheduled IREE CPU dispatch (``attention=fused``).

IREE 3.13's CPU code for the decomposed form's two matmuls read the cache at
1.75x-2.0x numpy's time on an AMD Zen 4 guest, whatever their tiles
(benchmarks/README.md, "CPU, round 13"); this kernel reads K and V once, row
after row, at 1.1x-1.3x ("CPU, round 14").  It is written at the vector
level, in a ``stream.executable`` that IREE compiles for the target CPU like
its own dispatches (no object file, no C compiler), and called through a
``flow.dispatch`` from a private function the lowering calls on builtin
tensors.

``render(shape)`` returns ``(symbol, text)``: the executable and the function
``@symbol``, one per shape.  The function takes

    q_BHkvGDh  f32 [B,Hkv,G*S,Dh]  the query rows grouped by KV head (row g*S + s), already scaled
    key_BHkvTDh, value_BHkvTDh  f32 [B,Hkv,T,Dh]  the caches; rows [0, n) are read
    bias_BSN   f32 [B,S,n]  added to the score of query row s of batch row b on key row t;
               -inf: the key is not read by the batch row (for every s alike)
    n          index     the rows read (n <= T)
    sink_HkvG  f32 [Hkv,G*S]  (KernelShape.sinks only) each grouped row's sink logit z: the
               softmax's denominator gains e^(z - m), m the row's maximum with z

and returns the attention f32 [B,Hkv,G*S,Dh] (S: the step's query rows, 1 for a decode step).
With KernelShape.writes (a growing cache, kernels/present_write.py) it takes the past
[B,Hkv,P,Dh] as K and V, then the new rows [B,Hkv,S,Dh] after the bias and the first new
row's index after n, and also returns both presents [B,Hkv,T,Dh], T = P + S.  Each workgroup (block of SPLIT_ROWS key
rows, KV head, batch row) walks its rows in chunks of CHUNK_ROWS: the
chunk's scores (each K row loaded once for the G query rows, plus its bias), an online
softmax (running maximum and sum per query row, the accumulator rescaled when
the maximum grows) and P.V (each V row loaded once).  A key row whose bias is
-inf is skipped, so a NaN in an unread row never reaches the result (a NaN
bias is not skipped: it makes the row's output NaN, as onnxruntime's).  A
second dispatch combines the blocks' partial results (their maxima, sums and
accumulators); a cache of at most SPLIT_ROWS static rows is one block, which the first
dispatch normalises itself (KernelShape.single).  A row with no visible key gives zeros, as onnxruntime's.
With KernelShape.softcap c > 0 each score is c * tanh(score / c) before its bias.
The dot products and sums are reassociated per op (``fastmath<reassoc>``);
nothing else in the module is.

The executable is compiled for bindings aligned to FEED_ALIGNMENT (16) bytes where IREE
assumes 64 (``stream.resources``): its loads are unaligned ones, its non-temporal stores 16
bytes wide.  So a numpy feed (16 bytes past a 64-byte boundary as a rule) that reaches only this
kernel is read in place (backends/iree/feed_alignment.py),
where IREE's 64-byte loads faulted on it and a copy was staged every call.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

from . import present_write

CHUNK_ROWS = 8  # key rows per online-softmax step (8 read K/V fastest of 4-256: "CPU, round 14")
SPLIT_ROWS = 1024  # key rows per workgroup: a 4096-row cache is 4 blocks a KV head for the workers to share
# Workgroups (block, KV head, batch row), blocks first: IREE's local-task workers claim 8
# workgroups at a time once a dispatch has 16 or more for 2 workers, in workgroup order, so with
# KV heads first a cache of 1027 rows gave one worker every head's full block and the other the
# 3-row tails (a 4-token chunk at past 1023: no faster on 2 threads than on 1).
FEED_ALIGNMENT = 16  # bytes: what the executable's code assumes of its bindings (numpy's guarantee)
# The attributes of our executables (cache_grow.py's too): only min_buffer_offset_alignment is read at an
# executable (IREE's AnnotateDispatchArguments); the rest is IREE's CPU default.
RESOURCES = ("{stream.resources = #stream.resource_config<{max_allocation_size = 9223372036854775807, "
             f"min_buffer_offset_alignment = {FEED_ALIGNMENT}, max_buffer_range = 9223372036854775807, "
             f"min_buffer_range_alignment = {FEED_ALIGNMENT}, index_bits = 64, memory_model = Unified}}>}}")
MAX_GROUP = 16  # query rows per KV head the kernel is unrolled for
HEAD_SIZES = range(8, 257, 8)  # Dh: whole 8-lane vectors


@dataclass(frozen=True)
class KernelShape:
    batch: Optional[int]  # B (None: dynamic)
    kv_heads: int
    group: int  # the grouped query rows per KV head: G*S (G query heads per KV head, S query rows)
    head_size: int
    rows: Optional[int]  # T, the caches' row dimension (None: dynamic)
    seq: int = 1  # S: the query rows of the step (each group of S rows shares its bias rows)
    softcap: float = 0.0  # c > 0: each score c * tanh(score / c) (rounded to f32)
    sinks: bool = False  # a sink logit per grouped row (head_sink, or 0 for smooth_softmax)
    writes: bool = False  # a growing cache's write made while reading: present from past and new rows
    # The first new row and the rows read come from the device (an i64 [2] tensor, clamped there):
    # no host read of them mid-step.  The new rows [B,Hkv,S,Dh] are written at the first new row,
    # by the write variant (writes) or in place (``_put``, a fixed-capacity buffer), T static or
    # known at run time (P + S, P the past's rows, with writes).
    lengths: bool = False

    def __post_init__(self) -> None:
        if self.writes and not self.lengths and self.rows is None:
            raise ValueError("the write variant with the first new row from the host needs a static T")

    @property
    def single(self) -> bool:
        """One block of key rows a (KV head, batch row): T static, at most SPLIT_ROWS.  The attend
        dispatch then normalises its rows itself, with no combine dispatch after it (on local-task
        each dispatch of a step's chain costs its workers a wake-up: "CPU, round 18")."""
        return self.rows is not None and self.rows <= SPLIT_ROWS

    @property
    def past(self) -> Optional[int]:
        """P, the rows of the past (``writes``): present's T rows less the S new ones (None: at run time)."""
        return None if self.rows is None else self.rows - self.seq

    def symbol(self) -> str:
        d = lambda v: "d" if v is None else str(v)
        seq = f"_s{self.seq}" if self.seq > 1 else ""
        cap = f"_cap{_f32_hex(self.softcap)[2:]}" if self.softcap > 0 else ""
        sink = "_sink" if self.sinks else ""
        write = "_write" if self.writes else ""
        lengths = "_dl" if self.lengths else ""
        return (f"gqa_decode_attention_b{d(self.batch)}_hkv{self.kv_heads}_g{self.group}{seq}_dh{self.head_size}"
                f"_t{d(self.rows)}{cap}{sink}{write}{lengths}")


def _f32_hex(value: float) -> str:
    """``value`` rounded to f32, as MLIR's exact hexadecimal float literal (0x42480000 for 50.0)."""
    return "0x" + struct.pack(">f", value).hex().upper()


def supported(kv_heads: int, group: int, head_size: int) -> bool:
    """``group``: the grouped query rows per KV head (G*S)."""
    return kv_heads >= 1 and 1 <= group <= MAX_GROUP and head_size in HEAD_SIZES


def _braces(names) -> str:
    """The dynamic sizes of a shaped value: ``{%a, %b}``, or nothing."""
    return "{" + ", ".join(names) + "}" if names else ""


def _dims(shape):
    return "x".join("?" if s is None else str(s) for s in shape)


class _Memrefs:
    """The memref types of the kernel's bindings for one shape (a dynamic dim: ``?``, sized by the
    function's index operands)."""

    def __init__(self, s: KernelShape):
        G, D = s.group, s.head_size
        self.q = f"memref<{_dims([s.batch, s.kv_heads, G, D])}xf32>"  # [B,Hkv,G,Dh]
        self.kv = f"memref<{_dims([s.batch, s.kv_heads, s.rows, D])}xf32>"  # [B,Hkv,T,Dh]
        self.bias = f"memref<{_dims([s.batch, s.seq, None])}xf32>"  # [B,S,n]
        self.acc = f"memref<{_dims([s.batch, s.kv_heads, None, G, D])}xf32>"  # [B,Hkv,blocks,G,Dh]
        self.ml = f"memref<{_dims([s.batch, s.kv_heads, None, 2, G])}xf32>"  # [B,Hkv,blocks,(max, sum),G]
        self.out = self.q
        self.sink = f"memref<{s.kv_heads}x{G}xf32>"  # [Hkv,G*S]
        batch = ["%bsz"] if s.batch is None else []
        self.q_dims = _braces(batch)
        self.kv_dims = _braces(batch + (["%t"] if s.rows is None else []))
        self.bias_dims = _braces(batch + ["%ncols" if s.lengths else "%n"])
        self.block_dims = _braces(batch + ["%ns"])
        self.new = f"memref<{_dims([s.batch, s.kv_heads, s.seq, D])}xf32>"
        self.present = f"memref<{_dims([s.batch, s.kv_heads, s.rows, D])}xf32>"
        self.present_dims = self.kv_dims
        if s.writes:  # K/V read from the past [B,Hkv,P,Dh] and the new rows [B,Hkv,S,Dh]; present [B,Hkv,T,Dh] written
            self.kv = f"memref<{_dims([s.batch, s.kv_heads, s.past, D])}xf32>"
            self.kv_dims = _braces(batch + (["%p"] if s.rows is None else []))  # %p = T - S


def _attend_body(s: KernelShape) -> str:
    """The first export's function: one (KV head, block of keys, batch row) per workgroup, its
    block's keys in chunks of CHUNK_ROWS (scores, online softmax, P.V), its partial results out."""
    G, D, C, m = s.group, s.head_size, CHUNK_ROWS, _Memrefs(s)
    cap = (f"\n      %capv = arith.constant dense<{_f32_hex(s.softcap)}> : vector<{C}xf32>"
           f"\n      %zcv = arith.constant dense<0.0> : vector<{C}xf32>") if s.softcap > 0 else ""
    new = ", %nkb: !stream.binding, %nvb: !stream.binding" if s.writes else ""  # bindings: operands, then results
    written = ", %wkb: !stream.binding, %wvb: !stream.binding" if s.writes else ""
    start = ", %start: index" if s.writes and not s.lengths else ""
    sink = ", %sb: !stream.binding" if s.single and s.sinks else ""
    lengths = ", %nb: !stream.binding" if s.lengths else ""
    out = "%rb: !stream.binding" if s.single else "%ob: !stream.binding, %lb: !stream.binding"
    lines = [f"""    func.func @{s.symbol()}_attend(%qb: !stream.binding, %kb: !stream.binding, %vb: !stream.binding, %mb: !stream.binding{new}{sink}{lengths},
                      {out}{written}, {"%ncols" if s.lengths else "%n"}: index, %ns: index, %bsz: index, %t: index{start}) {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %cC = arith.constant {C} : index
      %ninf = arith.constant 0xFF800000 : f32
      %zero = arith.constant 0.0 : f32
      %zv = arith.constant dense<0.0> : vector<{D}xf32>
      %ninfv = arith.constant dense<0xFF800000> : vector<{C}xf32>{cap}{_run_time_past(s)}
      %y = stream.dispatch.workgroup.id[0] : index
      %h = stream.dispatch.workgroup.id[1] : index
      %b = stream.dispatch.workgroup.id[2] : index
      %Q = stream.binding.subspan %qb[%c0] : !stream.binding -> {m.q}{m.q_dims}
      %K = stream.binding.subspan %kb[%c0] : !stream.binding -> {m.kv}{m.kv_dims}
      %V = stream.binding.subspan %vb[%c0] : !stream.binding -> {m.kv}{m.kv_dims}
      %M = stream.binding.subspan %mb[%c0] : !stream.binding -> {m.bias}{m.bias_dims}
{_partial_bindings(s, m)}{_device_lengths(s)}
      %cR = arith.constant {SPLIT_ROWS} : index
      %lo = arith.muli %y, %cR : index
      %hi0 = arith.addi %lo, %cR : index
      %hi = arith.minui %hi0, {"%t" if s.writes else "%n"} : index
      %ACC = memref.alloca() : memref<{G}x{D}xf32>
      %S = memref.alloca() : memref<{G}x{C}xf32>"""]
    if s.writes:
        lines.append(present_write.bindings(s, m))
    for g in range(G):  # the G query rows of the KV head, and their accumulators
        lines.append(f"""      %g{g} = arith.constant {g} : index
      %q{g} = vector.load %Q[%b, %h, %g{g}, %c0] : {m.q}, vector<{D}xf32>
      vector.store %zv, %ACC[%g{g}, %c0] : memref<{G}x{D}xf32>, vector<{D}xf32>""")
    init = ", ".join([f"%m{g} = %ninf" for g in range(G)] + [f"%l{g} = %zero" for g in range(G)])
    f32s = ", ".join(["f32"] * (2 * G))
    chunks, first, end = "%fin", "%lo", "%hi"
    if s.writes:  # SUPER_ROWS rows of present written, then their chunks read (kernels/present_write.py)
        opened, init = present_write.blocks_opened(s, m, f32s)
        lines.append(opened)
        chunks, first, end = "%fins", "%w", "%rend"
    lines.append(f"""      {chunks}:{2 * G} = scf.for %c = {first} to {end} step %cC iter_args({init}) -> ({f32s}) {{
        %rem = arith.subi {end}, %c : index
        %len = arith.minui %rem, %cC : index""")
    lines += [_chunk_scores(s, m), _chunk_softmax(s, m), _chunk_values(s, m)]
    kept = ", ".join([f"%mn{g}" for g in range(G)] + [f"%ln{g}" for g in range(G)])
    lines.append(f"        scf.yield {kept} : {f32s}\n      }}")
    if s.writes:
        lines.append(present_write.blocks_closed(G, f32s))
    for g in range(G):  # the block's partial results (accumulator, maximum, sum), or (single) its rows normalised
        lines.append(f"      %fa{g} = vector.load %ACC[%g{g}, %c0] : memref<{G}x{D}xf32>, vector<{D}xf32>")
        lines.append(_normalised_row(s, m, g) if s.single else f"""      vector.store %fa{g}, %O[%b, %h, %y, %g{g}, %c0] : {m.acc}, vector<{D}xf32>
      memref.store %fin#{g}, %ML[%b, %h, %y, %c0, %g{g}] : {m.ml}
      memref.store %fin#{G + g}, %ML[%b, %h, %y, %c1, %g{g}] : {m.ml}""")
    lines.append("      return\n    }")
    return "\n".join(lines)


def _run_time_past(s: KernelShape) -> str:
    """(writes, T at run time) ``%p``, the past's rows: T - S."""
    if not (s.writes and s.rows is None):
        return ""
    return f"\n      %cseq = arith.constant {s.seq} : index\n      %p = arith.subi %t, %cseq : index"


def _device_lengths(s: KernelShape) -> str:
    """(lengths) ``%start`` and ``%n`` (at most T) from the lengths binding."""
    if not s.lengths:
        return ""
    return """
      %LN = stream.binding.subspan %nb[%c0] : !stream.binding -> memref<2xi64>
      %start64 = memref.load %LN[%c0] : memref<2xi64>
      %n64 = memref.load %LN[%c1] : memref<2xi64>
      %start = arith.index_cast %start64 : i64 to index
      %nfed = arith.index_cast %n64 : i64 to index
      %n = arith.minui %nfed, %t : index"""


def _put_body(s: KernelShape) -> str:
    """(lengths, no writes) The export ``_put``: the new rows [B,Hkv,S,Dh] of one (KV head, batch
    row) written in place at rows [start, start + S) of K and V (tied: their own bindings), the
    rows outside [0, T) skipped."""
    m, D = _Memrefs(s), s.head_size
    copies = "\n".join(f"""          %{c.lower()}r = vector.load %N{c}[%b, %h, %j, %c0] : {m.new}, vector<{D}xf32>
          vector.store %{c.lower()}r, %{c}[%b, %h, %r, %c0] : {m.present}, vector<{D}xf32>""" for c in ("K", "V"))
    rows = ", %t: index" if s.rows is None else ""  # T at run time: an operand
    return f"""    func.func @{s.symbol()}_put(%kb: !stream.binding, %vb: !stream.binding, %nkb: !stream.binding, %nvb: !stream.binding,
                      %nb: !stream.binding, %bsz: index{rows}) {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %cS = arith.constant {s.seq} : index{"" if s.rows is None else chr(10) + f"      %t = arith.constant {s.rows} : index"}
      %h = stream.dispatch.workgroup.id[0] : index
      %b = stream.dispatch.workgroup.id[2] : index
      %K = stream.binding.subspan %kb[%c0] : !stream.binding -> {m.present}{m.present_dims}
      %V = stream.binding.subspan %vb[%c0] : !stream.binding -> {m.present}{m.present_dims}
      %NK = stream.binding.subspan %nkb[%c0] : !stream.binding -> {m.new}{m.q_dims}
      %NV = stream.binding.subspan %nvb[%c0] : !stream.binding -> {m.new}{m.q_dims}{_device_lengths(s)}
      %inside = arith.cmpi ult, %start, %t : index
      scf.if %inside {{
        scf.for %j = %c0 to %cS step %c1 {{
          %r = arith.addi %start, %j : index
          %row = arith.cmpi ult, %r, %t : index
          scf.if %row {{
{copies}
          }}
        }}
      }}
      return
    }}"""


def _partial_bindings(s: KernelShape, m: _Memrefs) -> str:
    """The attend dispatch's results: the blocks' partial results, or (single) the attention rows
    (and the sink logits it reads)."""
    if not s.single:
        return f"""      %O = stream.binding.subspan %ob[%c0] : !stream.binding -> {m.acc}{m.block_dims}
      %ML = stream.binding.subspan %lb[%c0] : !stream.binding -> {m.ml}{m.block_dims}"""
    sink = f"\n      %SK = stream.binding.subspan %sb[%c0] : !stream.binding -> {m.sink}" if s.sinks else ""
    return f"""      %R = stream.binding.subspan %rb[%c0] : !stream.binding -> {m.out}{m.q_dims}
      %one = arith.constant 1.0 : f32{sink}"""


def _normalised_row(s: KernelShape, m: _Memrefs, g: int) -> str:
    """Grouped row g's result from the one block's accumulator ``%fa{g}``, maximum and sum: as
    _combined_row with one block (the sink's share weighed against the block's maximum)."""
    G, D = s.group, s.head_size
    if not s.sinks:  # the block's weight e^(max - max) is 1 (an empty row: accumulator 0, sum 0)
        den = f"%fin#{G + g}"
        scaled = f"%fa{g}"
        pre = ""
    else:
        den, scaled = f"%ndz{g}", f"%nfw{g}"
        pre = f"""
      %nsk{g} = memref.load %SK[%h, %g{g}] : {m.sink}
      %nmz{g} = arith.maximumf %fin#{g}, %nsk{g} : f32
      %nempty{g} = arith.cmpf oeq, %nmz{g}, %ninf : f32
      %nms{g} = arith.select %nempty{g}, %zero, %nmz{g} : f32
      %ndm{g} = arith.subf %fin#{g}, %nms{g} : f32
      %nw{g} = math.exp %ndm{g} : f32
      %nwb{g} = vector.broadcast %nw{g} : f32 to vector<{D}xf32>
      %nfw{g} = arith.mulf %nwb{g}, %fa{g} : vector<{D}xf32>
      %nwl{g} = arith.mulf %nw{g}, %fin#{G + g} : f32
      %nzd{g} = arith.subf %nsk{g}, %nms{g} : f32
      %nze{g} = math.exp %nzd{g} : f32
      %ndz{g} = arith.addf %nwl{g}, %nze{g} : f32"""
    return f"""{pre}
      %nnone{g} = arith.cmpf oeq, {den}, %zero : f32
      %nden{g} = arith.select %nnone{g}, %one, {den} : f32
      %ninv{g} = arith.divf %one, %nden{g} : f32
      %nib{g} = vector.broadcast %ninv{g} : f32 to vector<{D}xf32>
      %nres{g} = arith.mulf {scaled}, %nib{g} : vector<{D}xf32>
      vector.store %nres{g}, %R[%b, %h, %g{g}, %c0] : {m.out}, vector<{D}xf32>"""


def _row_load(s: KernelShape, m: _Memrefs, name: str, cache: str) -> str:
    """``name`` = the chunk's row ``%r`` of K or V: from the cache, or (``writes``) from where present's came."""
    D = s.head_size
    if s.writes:
        return present_write.row_read(s, m, name, cache)
    return f"{name} = vector.load %{cache}[%b, %h, %r, %c0] : {m.kv}, vector<{D}xf32>"


def _attended_rows(m: _Memrefs, load: str) -> str:
    """The loop over the chunk's key rows whose bias is not -inf, ``load`` (its row's value ``%row``) first."""
    return f"""        scf.for %j = %c0 to %len step %c1 {{
          %r = arith.addi %c, %j : index
          %bias = memref.load %M[%b, %c0, %r] : {m.bias}
          %seen = arith.cmpf une, %bias, %ninf : f32
          scf.if %seen {{
            {load}"""


def _chunk_scores(s: KernelShape, m: _Memrefs) -> str:
    """The chunk's scores [G,C] (-inf for a skipped or missing row): each K row loaded once for the
    G query rows, its dot products as reassociated vector sums, plus the key's bias.  With a
    softcap, the dot products alone (0 for a skipped row): _softcapped_scores caps and biases them."""
    G, D, C = s.group, s.head_size, CHUNK_ROWS
    start = "%zcv" if s.softcap > 0 else "%ninfv"
    lines = [f"        vector.store {start}, %S[%g{g}, %c0] : memref<{G}x{C}xf32>, vector<{C}xf32>" for g in range(G)]
    lines.append(_attended_rows(m, _row_load(s, m, "%kv", "K")))
    for g in range(G):
        if s.softcap > 0:
            lines.append(f"""            %p{g} = arith.mulf %q{g}, %kv : vector<{D}xf32>
            %d{g} = vector.reduction <add>, %p{g} fastmath<reassoc> : vector<{D}xf32> into f32
            memref.store %d{g}, %S[%g{g}, %j] : memref<{G}x{C}xf32>""")
            continue
        bias = "%bias"  # row g = h*S + s: the bias row s (0 for a decode step, already loaded)
        if s.seq > 1 and g % s.seq:
            bias = f"%bias{g}"
            lines.append(f"""            %srow{g} = arith.constant {g % s.seq} : index
            {bias} = memref.load %M[%b, %srow{g}, %r] : {m.bias}""")
        lines.append(f"""            %p{g} = arith.mulf %q{g}, %kv : vector<{D}xf32>
            %d{g} = vector.reduction <add>, %p{g} fastmath<reassoc> : vector<{D}xf32> into f32
            %s{g} = arith.addf %d{g}, {bias} : f32
            memref.store %s{g}, %S[%g{g}, %j] : memref<{G}x{C}xf32>""")
    lines.append("          }\n        }")
    return "\n".join(lines)


def _softcapped_scores(s: KernelShape, m: _Memrefs, g: int) -> str:
    """``%sv{g}``: row g's chunk of dot products [C] capped (c * tanh(x / c), as onnxruntime
    computes it) on whole vectors, plus its bias row's chunk (-inf past the n rows)."""
    C = CHUNK_ROWS
    return f"""        %rv{g} = vector.load %S[%g{g}, %c0] : memref<{s.group}x{C}xf32>, vector<{C}xf32>
        %sq{g} = arith.constant {g % s.seq} : index
        %bv{g} = vector.transfer_read %M[%b, %sq{g}, %c], %ninf : {m.bias}, vector<{C}xf32>
        %yv{g} = arith.divf %rv{g}, %capv : vector<{C}xf32>
        %tv{g} = math.tanh %yv{g} : vector<{C}xf32>
        %cv{g} = arith.mulf %tv{g}, %capv : vector<{C}xf32>
        %sv{g} = arith.addf %cv{g}, %bv{g} : vector<{C}xf32>"""


def _chunk_softmax(s: KernelShape, m: _Memrefs) -> str:
    """Per query row: the running maximum with the chunk's, the accumulator and sum rescaled by
    e^(old - new), the chunk's exponentials [C] (in place of its scores) added to the sum.  A
    maximum still -inf (no key seen yet) is taken as 0: e^(-inf) = 0, never NaN."""
    G, D, C = s.group, s.head_size, CHUNK_ROWS
    scores = lambda g: (_softcapped_scores(s, m, g) if s.softcap > 0 else  # noqa: E731
                        f"        %sv{g} = vector.load %S[%g{g}, %c0] : memref<{G}x{C}xf32>, vector<{C}xf32>")
    return "\n".join(f"""{scores(g)}
        %mx{g} = vector.reduction <maximumf>, %sv{g} : vector<{C}xf32> into f32
        %mn{g} = arith.maximumf %m{g}, %mx{g} : f32
        %empty{g} = arith.cmpf oeq, %mn{g}, %ninf : f32
        %ms{g} = arith.select %empty{g}, %zero, %mn{g} : f32
        %dm{g} = arith.subf %m{g}, %ms{g} : f32
        %al{g} = math.exp %dm{g} : f32
        %mb{g} = vector.broadcast %ms{g} : f32 to vector<{C}xf32>
        %ds{g} = arith.subf %sv{g}, %mb{g} : vector<{C}xf32>
        %pe{g} = math.exp %ds{g} : vector<{C}xf32>
        %ps{g} = vector.reduction <add>, %pe{g} fastmath<reassoc> : vector<{C}xf32> into f32
        %la{g} = arith.mulf %l{g}, %al{g} : f32
        %ln{g} = arith.addf %la{g}, %ps{g} : f32
        vector.store %pe{g}, %S[%g{g}, %c0] : memref<{G}x{C}xf32>, vector<{C}xf32>
        %ao{g} = vector.load %ACC[%g{g}, %c0] : memref<{G}x{D}xf32>, vector<{D}xf32>
        %ab{g} = vector.broadcast %al{g} : f32 to vector<{D}xf32>
        %as{g} = arith.mulf %ao{g}, %ab{g} : vector<{D}xf32>
        vector.store %as{g}, %ACC[%g{g}, %c0] : memref<{G}x{D}xf32>, vector<{D}xf32>""" for g in range(G))


def _chunk_values(s: KernelShape, m: _Memrefs) -> str:
    """The chunk's P.V: each attended V row loaded once, times each query row's exponential, into
    its accumulator."""
    G, D, C = s.group, s.head_size, CHUNK_ROWS
    lines = [_attended_rows(m, _row_load(s, m, "%vv", "V"))]
    for g in range(G):
        lines.append(f"""            %pg{g} = memref.load %S[%g{g}, %j] : memref<{G}x{C}xf32>
            %pb{g} = vector.broadcast %pg{g} : f32 to vector<{D}xf32>
            %a{g} = vector.load %ACC[%g{g}, %c0] : memref<{G}x{D}xf32>, vector<{D}xf32>
            %an{g} = vector.fma %pb{g}, %vv, %a{g} : vector<{D}xf32>
            vector.store %an{g}, %ACC[%g{g}, %c0] : memref<{G}x{D}xf32>, vector<{D}xf32>""")
    lines.append("          }\n        }")
    return "\n".join(lines)


def _combine_body(s: KernelShape) -> str:
    """The second export's function: the blocks' partial results of one (KV head, batch row) combined."""
    G, D, m = s.group, s.head_size, _Memrefs(s)
    oT, lT, rT = m.acc, m.ml, m.out
    sink = "%sb: !stream.binding, " if s.sinks else ""  # [Hkv,G*S] sink logits
    L = [f"""    func.func @{s.symbol()}_combine(%ob: !stream.binding, %lb: !stream.binding, {sink}%rb: !stream.binding, %ns: index, %bsz: index) {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %ninf = arith.constant 0xFF800000 : f32
      %zero = arith.constant 0.0 : f32
      %one = arith.constant 1.0 : f32
      %zv = arith.constant dense<0.0> : vector<{D}xf32>
      %h = stream.dispatch.workgroup.id[0] : index
      %b = stream.dispatch.workgroup.id[2] : index
      %O = stream.binding.subspan %ob[%c0] : !stream.binding -> {oT}{m.block_dims}
      %ML = stream.binding.subspan %lb[%c0] : !stream.binding -> {lT}{m.block_dims}
      %R = stream.binding.subspan %rb[%c0] : !stream.binding -> {rT}{m.q_dims}"""]
    if s.sinks:
        L.append(f"      %SK = stream.binding.subspan %sb[%c0] : !stream.binding -> {m.sink}")
    L += [_combined_row(s, m, g) for g in range(G)]
    L.append("      return\n    }")
    return "\n".join(L)


def _combined_row(s: KernelShape, m: _Memrefs, g: int) -> str:
    """Grouped row g's result: the blocks' maxima (and its sink logit) to one maximum, their
    accumulators and sums weighted by e^(block max - max), the sum divided out."""
    D, oT, lT, rT = s.head_size, m.acc, m.ml, m.out
    mx, den = (f"%mz{g}", f"%dz{g}") if s.sinks else (f"%mx{g}", f"%acc{g}#1")  # each with the sink's share, if any
    top = f"""
      %sk{g} = memref.load %SK[%h, %g{g}] : {m.sink}
      %mz{g} = arith.maximumf %mx{g}, %sk{g} : f32""" if s.sinks else ""
    sink_share = f"""
      %zd{g} = arith.subf %sk{g}, %ms{g} : f32
      %ze{g} = math.exp %zd{g} : f32
      %dz{g} = arith.addf %acc{g}#1, %ze{g} : f32""" if s.sinks else ""
    return f"""      %g{g} = arith.constant {g} : index
      %mx{g} = scf.for %y = %c0 to %ns step %c1 iter_args(%m = %ninf) -> (f32) {{
        %my = memref.load %ML[%b, %h, %y, %c0, %g{g}] : {lT}
        %mm = arith.maximumf %m, %my : f32
        scf.yield %mm : f32
      }}{top}
      %empty{g} = arith.cmpf oeq, {mx}, %ninf : f32
      %ms{g} = arith.select %empty{g}, %zero, {mx} : f32
      %acc{g}:2 = scf.for %y = %c0 to %ns step %c1 iter_args(%num = %zv, %den = %zero) -> (vector<{D}xf32>, f32) {{
        %my = memref.load %ML[%b, %h, %y, %c0, %g{g}] : {lT}
        %ly = memref.load %ML[%b, %h, %y, %c1, %g{g}] : {lT}
        %dm = arith.subf %my, %ms{g} : f32
        %w = math.exp %dm : f32
        %wb = vector.broadcast %w : f32 to vector<{D}xf32>
        %oy = vector.load %O[%b, %h, %y, %g{g}, %c0] : {oT}, vector<{D}xf32>
        %numy = vector.fma %wb, %oy, %num : vector<{D}xf32>
        %wl = arith.mulf %w, %ly : f32
        %deny = arith.addf %den, %wl : f32
        scf.yield %numy, %deny : vector<{D}xf32>, f32
      }}{sink_share}
      %none{g} = arith.cmpf oeq, {den}, %zero : f32
      %den{g} = arith.select %none{g}, %one, {den} : f32
      %inv{g} = arith.divf %one, %den{g} : f32
      %ib{g} = vector.broadcast %inv{g} : f32 to vector<{D}xf32>
      %res{g} = arith.mulf %acc{g}#0, %ib{g} : vector<{D}xf32>
      vector.store %res{g}, %R[%b, %h, %g{g}, %c0] : {rT}, vector<{D}xf32>"""

def render(s: KernelShape, opset: int) -> tuple:
    """``(symbol, text)``: the executable ``@symbol_executable`` and the function ``@symbol``
    (with ``torch.onnx_meta.opset_version = opset``, which IREE's ONNX input pipeline asks of
    every function)."""
    sym, G, D, Hkv = s.symbol(), s.group, s.head_size, s.kv_heads
    t_q = f"tensor<{_dims([s.batch, Hkv, G, D])}xf32>"
    t_k = f"tensor<{_dims([s.batch, Hkv, s.rows, D])}xf32>"  # the caches, or (writes) the presents
    t_p = f"tensor<{_dims([s.batch, Hkv, s.past if s.writes else s.rows, D])}xf32>"  # K/V as fed
    t_n = f"tensor<{_dims([s.batch, Hkv, s.seq, D])}xf32>"  # the new rows (writes, lengths)
    t_m = f"tensor<{_dims([s.batch, s.seq, None])}xf32>"
    t_s, t_len = f"tensor<{Hkv}x{G}xf32>", "tensor<2xi64>"
    dyn = lambda *names: _braces([n for n in names if n])  # noqa: E731
    bd = "%bsz" if s.batch is None else ""
    kd = dyn(bd, "" if s.rows is not None else "%p" if s.writes else "%t")  # K/V as fed (the past: P = T - S)
    td = dyn(bd, "%t" if s.rows is None else "")  # the presents
    ncols = "%t" if s.lengths else "%n"  # the bias's columns: the rows read, or (lengths) all T
    fed = [("%k", t_p, kd), ("%v", t_p, kd), ("%mask", t_m, dyn(bd, ncols))]
    fed += [("%nk", t_n, dyn(bd)), ("%nv", t_n, dyn(bd))] if s.writes or s.lengths else []
    fed += [("%sink", t_s, "")] if s.sinks else []
    fed += [("%lens", t_len, "")] if s.lengths else [("%n", "index", "")] + ([("%start", "index", "")] if s.writes else [])
    presents = s.writes or s.lengths  # the function also returns both presents
    results = f"({t_q}, {t_k}, {t_k})" if presents else t_q
    put, k, v = "", "%k", "%v"
    if s.lengths and not s.writes:  # the new rows written in place first
        t_op, t_ty = (", %t", ", index") if s.rows is None else ("", "")
        put = (f"  %kv:2 = flow.dispatch @{sym}_executable::@{sym}_put[%bsz](%k, %v, %nk, %nv, %lens, %bsz{t_op})\n"
               f"      : ({t_k}{kd}, {t_k}{kd}, {t_n}{dyn(bd)}, {t_n}{dyn(bd)}, {t_len}, index{t_ty}) -> (%k{kd}, %v{kd})\n")
        k, v = "%kv#0", "%kv#1"
    attend_in = [("%q", t_q, dyn(bd)), (k, t_p, kd), (v, t_p, kd), fed[2]] + (fed[3:5] if s.writes else [])
    attend_in += [("%sink", t_s, "")] if s.single and s.sinks else []
    attend_in += [("%lens", t_len, "")] if s.lengths else []
    indices = [ncols, "%ns", "%bsz", "%t"] + (["%start"] if s.writes and not s.lengths else [])
    written = [f"{t_k}{td}"] * 2 if s.writes else []
    parts = [f"{t_q}{dyn(bd)}"] if s.single else [f"{t}{dyn(bd, '%ns')}" for t in (f"tensor<{_dims([s.batch, Hkv, None, G, D])}xf32>",
                                                                                 f"tensor<{_dims([s.batch, Hkv, None, 2, G])}xf32>")]
    rows = "%t" if s.writes or s.lengths else "%n"  # the workgroups' rows: those read, or every present row
    grid = "[%bsz]" if s.single else f"[{rows}, %bsz]"
    call = (f"  %part:{len(parts) + len(written)} = flow.dispatch @{sym}_executable::@{sym}_attend{grid}"
            f"({', '.join(x for x, _, _ in attend_in + [(i, 0, 0) for i in indices])})\n"
            f"      : ({', '.join(t + d for _, t, d in attend_in)}, {', '.join(['index'] * len(indices))}) -> ({', '.join(parts + written)})\n")
    attn = "%part#0"
    if not s.single:
        call += (f"  %r = flow.dispatch @{sym}_executable::@{sym}_combine[%bsz](%part#0, %part#1{', %sink' if s.sinks else ''}, %ns, %bsz)\n"
                 f"      : ({parts[0]}, {parts[1]}{', ' + t_s if s.sinks else ''}, index, index) -> {t_q}{dyn(bd)}\n")
        attn = "%r"
    first = len(parts)
    returned = (f"{attn}, %part#{first}, %part#{first + 1}" if s.writes else f"{attn}, {k}, {v}" if s.lengths else attn)
    returned += " : " + (f"{t_q}, {t_k}, {t_k}" if presents else t_q)
    ns = "arith.constant 1 : index" if s.single else f"affine.apply affine_map<()[s0] -> (s0 ceildiv {SPLIT_ROWS})>()[{rows}]"
    params = ", ".join(f"{x}: {t}" for x, t, _ in [("%q", t_q, "")] + fed)
    text = f"""
stream.executable private @{sym}_executable attributes {RESOURCES} {{
{_exports(s)}
  builtin.module {{
{_attend_body(s)}{"" if s.single else chr(10) + _combine_body(s)}{chr(10) + _put_body(s) if s.lengths and not s.writes else ""}
  }}
}}
func.func private @{sym}({params}) -> {results} attributes {{torch.onnx_meta.opset_version = {opset} : si64}} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %bsz = {"tensor.dim %q, %c0 : " + t_q if s.batch is None else f"arith.constant {s.batch} : index"}
  {_rows_of_function(s, t_k, t_p)}
  %ns = {ns}
{put}{call}  return {returned}
}}
"""
    return sym, text


def _rows_of_function(s: KernelShape, t_k: str, t_p: str) -> str:
    """The function's ``%t`` (and, writes with T at run time, ``%p``): static, or from K's dim 2."""
    if s.rows is not None:
        return f"%t = arith.constant {s.rows} : index"
    if not s.writes:
        return f"%t = tensor.dim %k, %c2 : {t_k}"
    return f"%p = tensor.dim %k, %c2 : {t_p}\n  %cseq = arith.constant {s.seq} : index\n  %t = arith.addi %p, %cseq : index"


def _exports(s: KernelShape) -> str:
    """The executable's exports: attend (a workgroup a block of rows, KV head and batch row), and
    combine (a workgroup a KV head and batch row) unless single, put (the same) with lengths."""
    sym, Hkv = s.symbol(), s.kv_heads
    per_head = (f"%hkv = arith.constant {Hkv} : index\n    %c1 = arith.constant 1 : index\n"
                "    stream.return %hkv, %c1, %bsz : index, index, index")
    if s.single:
        attend = f"""  stream.executable.export public @{sym}_attend workgroups(%bsz: index) -> (index, index, index) {{
    %hkv = arith.constant {Hkv} : index
    %c1 = arith.constant 1 : index
    stream.return %c1, %hkv, %bsz : index, index, index
  }}"""
    else:
        attend = f"""  stream.executable.export public @{sym}_attend workgroups(%n: index, %bsz: index) -> (index, index, index) {{
    %hkv = arith.constant {Hkv} : index
    %ns = affine.apply affine_map<()[s0] -> (s0 ceildiv {SPLIT_ROWS})>()[%n]
    stream.return %ns, %hkv, %bsz : index, index, index
  }}"""
    others = ([] if s.single else ["combine"]) + (["put"] if s.lengths and not s.writes else [])
    return "\n".join([attend] + [f"""  stream.executable.export public @{sym}_{name} workgroups(%bsz: index) -> (index, index, index) {{
    {per_head}
  }}""" for name in others])
