"""The growing cache and the fixed-capacity buffer: present rows, growth, and the scatter of the new rows."""

from __future__ import annotations

from typing import Optional

from ....binder import OpBinder
from ....builder import Dim, Tensor, TorchBuilder, parse_vtensor_type
from ....registry import Refusal
from ...common.fused_decode import grown_by_one_row, grows_by_kernel
from .checks import checked_cache_rows
from .inputs import CacheStep, CacheWrite, GqaInputs, Step
from .support import GqaAttributes


def kv_cache_step(tb, b, attrs, ins, step, key_BHkvSDc, value_BHkvSDc) -> CacheStep:
    """A growing cache or a fixed-capacity buffer: the new rows are written at their positions.

    A buffer that may be fixed-capacity is read on its rows [0, R) only,
    R = max(seqlens_k) + 1, unless attention_bias or output_qk keep its
    capacity as their key columns.  On the CPU, one batch row takes
    ``one_row_step``, or ``one_block_write`` when a growing cache gains
    several rows; several batch rows gaining several rows, the select.
    """
    past_key, past_value = past_caches(tb, ins, attrs)
    P = tb.size(past_key, 2)
    growth = declared_growth(tb, b, step, past_key)  # None: known at run time only
    if growth is None and ins.total_on_host is not None:  # the builder's total: the growth on the host, no read back
        growth = run_time_growth(tb, step, ins.total_on_host, P)
    one_row = b.options.device == "cpu" and key_BHkvSDc.shape[0] == 1 and not _fresh_buffer_of_many_rows(growth, step)
    lengths = None
    if growth is None and one_row:  # total_sequence_length read with the row lengths: one host read
        growth, lengths = one_row_lengths(tb, step, P, None)
    elif growth is None:
        growth = run_time_growth(tb, step, tb.item(step.total), P)
    write_row_BS = checked_cache_rows(tb, step, ins, P, growth)
    if one_row:  # a declared growth: the lengths after the checks, which IREE then runs before the read
        if lengths is None:
            _, lengths = one_row_lengths(tb, step, P, growth)
        return one_row_step(tb, attrs, ins, step, past_key, past_value, growth, lengths, key_BHkvSDc, value_BHkvSDc, _fused(b))
    if b.options.device == "cpu" and key_BHkvSDc.shape[0] == 1:  # a growing cache's prompt or chunk
        present_key_BHkvTDc, present_value_BHkvTDc = one_block_write(tb, step, past_key, past_value, growth, key_BHkvSDc, value_BHkvSDc)
    elif b.options.device == "gpu" or _fresh_buffer_of_many_rows(growth, step):
        grown_key, grown_value = grown(tb, past_key, growth), grown(tb, past_value, growth)  # GPU: no branch (not measured there)
        present_key_BHkvTDc = select_rows(tb, grown_key, key_BHkvSDc, step.past_len_B)
        present_value_BHkvTDc = select_rows(tb, grown_value, value_BHkvSDc, step.past_len_B)
    else:
        index_BHkvSDc = cache_index(tb, write_row_BS, attrs.kv_num_heads, key_BHkvSDc.shape[3])
        grown_key, grown_value = grown_pair(tb, past_key, past_value, growth, step.S, _fused(b))
        present_key_BHkvTDc = tb.scatter_src(grown_key, 2, index_BHkvSDc, key_BHkvSDc)  # rows position[b,s] <- new
        present_value_BHkvTDc = tb.scatter_src(grown_value, 2, index_BHkvSDc, value_BHkvSDc)
    read_key_BHkvRDc, read_value_BHkvRDc = present_key_BHkvTDc, present_value_BHkvTDc
    may_be_fixed = not (isinstance(growth, int) and growth > 0)  # a growing cache reads all rows
    sliced = may_be_fixed and ins.attention_bias is None and not attrs.qk_output and b.options.device == "cpu"
    if sliced:
        rows = used_rows(tb, step, tb.size(present_key_BHkvTDc, 2))
        read_key_BHkvRDc = tb.slice(present_key_BHkvTDc, 2, 0, rows)  # [B,Hkv,T,Dc] -> [B,Hkv,R,Dc]
        read_value_BHkvRDc = tb.slice(present_value_BHkvTDc, 2, 0, rows)
    key_pos_R = tb.arange(tb.size(read_key_BHkvRDc, 2))
    # An empty past (a first prompt): every row is a new row, which its batch row reads, or a zero
    # row the growth added, so no row needs zeroing against a NaN (a 4% select of a 1024-token prefill).
    no_past = isinstance(P, int) and P == 0
    return CacheStep(present_key_BHkvTDc, present_value_BHkvTDc, read_key_BHkvRDc, read_value_BHkvRDc, key_pos_R,
                     every_row_read=no_past)


def _fused(b: OpBinder) -> bool:
    """attention=fused on the CPU: our IREE kernels may make the step's pieces (kernels/)."""
    return b.options.device == "cpu" and b.options.attention == "fused"


def _fresh_buffer_of_many_rows(growth: Optional[int], step: Step) -> bool:
    """A growing cache (present a new buffer, every row written anyway) gaining several rows:
    the select over its rows writes present in one pass, where the scatter's index tensor
    alone ([B,Hkv,S,Dc] i64) costs more than the rows it writes (2 ms of a 19 ms prefill of
    256 tokens).  A fixed-capacity buffer keeps the scatter: the select would rewrite it whole."""
    return isinstance(growth, int) and growth > 0 and isinstance(step.S, int) and step.S > 1


def one_row_step(tb, attrs, ins, step, past_key, past_value, growth, lengths, key_BHkvSDc, value_BHkvSDc, fused=False) -> CacheStep:
    """One batch row on the CPU: its new rows copied in as one block at ``lengths``' start, and the
    cache read on its rows [0, seqlens_k + 1) (every one of them read: no zeroing, no count).

    The scatter's form built an index tensor and ran 6 small dispatches a cache; this is one
    copy, in place in a fixed-capacity buffer.  The block [past_len, past_len + S) is the
    scatter's rows whenever they pass their run-time check (checked_cache_rows).
    """
    start, rows = lengths
    end = tb.dim_add(start, step.S)
    grown_key, grown_value = grown_pair(tb, past_key, past_value, growth, step.S, fused)  # [B,Hkv,P,Dc] -> [B,Hkv,T,Dc]
    present_key, present_value = tb.slice_scatter(grown_key, key_BHkvSDc, 2, start, end), tb.slice_scatter(grown_value, value_BHkvSDc, 2, start, end)
    if ins.attention_bias is not None or attrs.qk_output:  # their key columns span the whole cache
        return CacheStep(present_key, present_value, present_key, present_value, tb.arange(tb.size(present_key, 2)))
    read_key, read_value = tb.slice(present_key, 2, 0, rows), tb.slice(present_value, 2, 0, rows)  # -> [1,Hkv,R,Dc]
    write = None
    if isinstance(growth, int):  # a declared growth (fused_decode.py decides who writes present, and how)
        write = CacheWrite(past_key, past_value, key_BHkvSDc, value_BHkvSDc, start, present_key,
                           device_lengths(tb, step, tb.size(past_key, 2), growth), in_place=growth == 0)
    elif ins.total_on_host is not None:  # a growth known on the host at run time: the new rows put into the grown caches
        write = CacheWrite(grown_key, grown_value, key_BHkvSDc, value_BHkvSDc, start, present_key,
                           device_lengths(tb, step, tb.size(grown_key, 2), 0), in_place=True)
    return CacheStep(present_key, present_value, read_key, read_value, tb.arange(rows), every_row_read=True, write=write)


def device_lengths(tb: TorchBuilder, step: Step, P: Dim, growth: int) -> Optional[Tensor]:
    """si64 [2], on the device: the first new row and the rows read (seqlens_k + 1 clamped to
    [1, T], as one_row_lengths computes them on the host), for T = P + growth (static, or a
    fixed-capacity buffer's P at run time) and a static S; None otherwise.  A kernel that reads them there needs no host read mid-step: on local-task
    each one stops the step until its workers have run what it needs, and wakes them again after
    (benchmarks/README.md, "CPU, round 18").

    The first new row is past_len when the new rows fit, [past_len, past_len + S) in [0, T), else
    T: the kernel then writes no new row.  The run-time checks are read at the end of the step
    (deferred_checks.py), so a step that fails them has run: where the host read clamped the row
    into the buffer, this one leaves a fixed-capacity buffer fed in place as it was."""
    if not isinstance(step.S, int) or not (isinstance(P, int) or growth == 0):
        return None
    T = tb.dim_add(P, growth)
    outside_1 = tb.logical_not(tb.in_range(step.past_len_B, 0, tb.dim_sub(T, step.S)))  # i1 [1]
    start_1 = tb.where_scalar_else(outside_1, T, step.past_len_B)  # si64 [1]
    rows_1 = tb.clamp_int(tb.add_scalar(tb.to_dtype(step.seqlens_fed_B, "si64"), 1), 1, T)  # si32 -> si64 [1]
    return tb.cat([start_1, rows_1], 0)  # -> [2]


def one_block_write(tb, step, past_key, past_value, growth, key_BHkvSDc, value_BHkvSDc):
    """A growing cache of one batch row gaining several rows: (present_key, present_value), the new
    rows copied in as one block at a row read back, every present row then read (the sizes stay
    static for query_blocks.py).  The select's gather of the new rows cost 3-6% of a prefill
    (benchmarks/README.md, "CPU, round 4")."""
    T = tb.dim_add(tb.size(past_key, 2), growth)
    start = tb.item(_first_new_row(tb, step, T))  # [1] -> int
    end = tb.dim_add(start, step.S)
    grown_key, grown_value = grown_pair(tb, past_key, past_value, growth, step.S)  # [B,Hkv,P,Dc] -> [B,Hkv,T,Dc]
    return tb.slice_scatter(grown_key, key_BHkvSDc, 2, start, end), tb.slice_scatter(grown_value, value_BHkvSDc, 2, start, end)


def _first_new_row(tb: TorchBuilder, step: Step, T: Dim) -> Tensor:
    """si64 [1]: past_len clamped to [0, T - S] (the rows' run-time check fails the step otherwise)."""
    return tb.clamp_int(step.past_len_B, 0, tb.dim_max(tb.dim_sub(T, step.S), 0))


def one_row_lengths(tb: TorchBuilder, step: Step, P: Dim, growth: Optional[int]):
    """(growth, (start, R)) of the one batch row, T = P + growth rows: start = past_len clamped to
    [0, T - S] and R = seqlens_k + 1 clamped to [1, T].

    One host read: past_len and seqlens_k + 1 packed in an int64 (each first clamped to [0, 2^31)),
    beside total_sequence_length when the growth is known at run time only (``TorchBuilder.items``); the
    growth and the clamps to T are then computed on the host.  Two reads (the growth's, then
    the lengths') cost a decode step on 2 threads 0.1 ms: each makes the host wait for the device
    (benchmarks/README.md, "CPU, round 9").  (A growth computed on the device and read back made
    IREE 3.13 write out of bounds with output_qk: test_gqa_outputs.py's omitted presents.)"""
    past_len_1 = tb.clamp_int(step.past_len_B, 0, _LENGTH_MAX)  # si64 [1]
    rows_1 = tb.clamp_int(tb.add_scalar(tb.to_dtype(step.seqlens_fed_B, "si64"), 1), 0, _LENGTH_MAX)  # si32 -> si64 [1]
    packed_1 = tb.add(tb.mul_int_scalar(past_len_1, _HALF), rows_1)
    if growth is None:
        packed, total = tb.items([packed_1, step.total])
        growth = run_time_growth(tb, step, total, P)
    else:
        packed = tb.item(packed_1)
    T = tb.dim_add(P, growth)
    start = tb.dim_max(tb.dim_min(tb.dim_floordiv(packed, _HALF), tb.dim_max(tb.dim_sub(T, step.S), 0)), 0)
    rows = tb.dim_max(tb.dim_min(tb.dim_remainder(packed, _HALF), T), 1)
    return growth, (start, rows)


_HALF = 1 << 32  # packed = a * _HALF + b, both in [0, _LENGTH_MAX]: below 2^63
_LENGTH_MAX = (1 << 31) - 1


def past_caches(tb: TorchBuilder, ins: GqaInputs, attrs: GqaAttributes):
    """past_key/past_value, or empty [B,Hkv,0,Dh] caches when absent."""
    if ins.past_key is not None:
        return ins.past_key, ins.past_value
    empty_B0D = tb.slice(ins.query, 1, 0, 0, in_bounds=True)  # [B,S,D] -> [B,0,D]
    empty_B10Dh = tb.slice(tb.unsqueeze(empty_B0D, 1), 3, 0, ins.head_size)  # -> [B,1,0,D] -> [B,1,0,Dh] (D >= Dh)
    empty = tb.expand(empty_B10Dh, [-1, attrs.kv_num_heads, 0, ins.head_size])  # -> [B,Hkv,0,Dh]: only the 1 broadcasts
    return empty, empty


def declared_growth(tb: TorchBuilder, b: OpBinder, step: Step, past: Tensor) -> Optional[int]:
    """Rows the cache gains, max(0, total_sequence_length - P) (onnxruntime's present has max(P,
    total) rows), when the op's declared present type and P fix it: S for a growing cache, 0 for a
    fixed-capacity buffer.  None otherwise: :func:`run_time_growth`, at run time."""
    P = past.shape[2]
    declared = _declared_present_rows(b)
    if declared is not None and P is not None:
        growth = declared - P
        if growth == 0:
            return 0
        if growth < 0 or (isinstance(step.S, int) and growth != step.S):
            S = step.S if isinstance(step.S, int) else "S"
            raise Refusal(
                f"is declared with {declared} rows, but onnxruntime's present has max(past length, total_sequence_length) rows: "
                f"{P} (fixed capacity) or {P} + {S} (a growing cache) with a past of {P} rows",
                "output 1 'present_key'",
            )
        if not isinstance(step.S, int):
            tb.runtime_assert(
                tb.dim_eq(step.S, growth),
                f"GroupQueryAttention: the present is declared with {declared} rows, past length {P} + S: S (query dimension 1) must be {growth}",
            )
        return growth
    return None


def run_time_growth(tb: TorchBuilder, step: Step, total: Dim, P: Dim) -> Dim:
    """Rows a cache whose growth is not declared gains: total_sequence_length - P clamped to [0, S],
    so no value can make the buffer grow past what a valid input needs."""
    return tb.dim_max(tb.dim_min(tb.dim_sub(total, P), step.S), 0)


def _declared_present_rows(b: OpBinder) -> Optional[int]:
    for i in (1, 2):
        if b.num_results > i:
            parsed = parse_vtensor_type(b.result_type_text(i))
            if parsed and len(parsed[0]) == 4 and parsed[0][2] is not None:
                return parsed[0][2]
    return None


def cache_index(tb: TorchBuilder, position_BS: Tensor, Hkv: int, Dc: int) -> Tensor:
    """Scatter index for the new K/V rows: position[b,s] broadcast to [B,Hkv,S,Dc] (Dc: stored row width)."""
    index_B1S1 = tb.unsqueeze(tb.unsqueeze(position_BS, 1), 3)  # [B,S] -> [B,1,S] -> [B,1,S,1]
    return tb.expand(index_B1S1, [-1, Hkv, -1, Dc])  # -> [B,Hkv,S,Dc]


def grown(tb: TorchBuilder, past_BHkvPDh: Tensor, growth: Dim) -> Tensor:
    """The cache with ``growth`` zero rows after the past's: [B,Hkv,P,Dh] -> [B,Hkv,T,Dh]."""
    if growth == 0:
        return past_BHkvPDh
    if isinstance(growth, int) and None not in past_BHkvPDh.shape and past_BHkvPDh.shape[2] > 0:
        return grow_rows(tb, past_BHkvPDh, growth)
    return tb.pad_dim_end(past_BHkvPDh, 2, growth)  # an empty past is all new rows; IREE fails on a concatenation with dynamic dims


def grown_pair(tb: TorchBuilder, past_key: Tensor, past_value: Tensor, growth: Dim, S: Dim, fused: bool = False):
    """Both caches :func:`grown`.  A run-time ``growth`` (present's rows declared dynamic, as the
    exporters declare them) takes one branch on growth == 0, where the pasts themselves are
    present (a fixed-capacity buffer, then written in place), else both grown (new buffers).
    Grown always, IREE copied both caches whole every step: 2 x 0.4 ms of a 2.9 ms shared step
    at past 1023 (benchmarks/README.md, "CPU, round 7").  Float caches only: IREE 3.13 computes
    an integer (quantized) cache's padded branch wrong (every row of present, found by
    test_backends_iree_cpu's int4/int8 dynamic cases), so those stay padded always.  ``S``: the
    step's new rows (the growth is at most S); ``fused``: attention=fused on the CPU (_grown_by_some).
    [B,Hkv,P,Dc] -> [B,Hkv,P+growth,Dc]"""
    if isinstance(growth, int) or not past_key.dtype.startswith(("f", "bf")):
        return grown(tb, past_key, growth), grown(tb, past_value, growth)
    types = [(p.shape[:2] + (None,) + p.shape[3:], p.dtype) for p in (past_key, past_value)]
    return tb.if_else_each(tb.dim_eq(growth, 0), types, lambda inner: [past_key, past_value],
                           lambda inner: [_grown_by_some(inner, p, growth, S, fused) for p in (past_key, past_value)])


def _grown_by_some(tb: TorchBuilder, past_BHkvPDh: Tensor, growth: Dim, S: Dim, fused: bool) -> Tensor:
    """:func:`grown` where ``growth`` is known to be in [1, S].  By one row where a decode step's S
    is 1: ``fused`` (attention=fused on the CPU), our copy kernel (kernels/cache_grow.py: IREE's
    copy of the concatenation below ran at half numpy's copy rate at past 4095), else a
    concatenation (only the new row filled).  Else padded (IREE 3.13 compiles no concatenation of
    a run-time row count, and fills the whole padded buffer before it copies the past in: 8 MiB
    more written a growing step at past 1023, benchmarks/README.md "CPU, round 24").
    [B,Hkv,P,Dh] -> [B,Hkv,P+growth,Dh]"""
    if S == 1 and grows_by_kernel(fused, past_BHkvPDh):
        return grown_by_one_row(tb, past_BHkvPDh)
    if S == 1:
        return grow_rows(tb, past_BHkvPDh, 1)
    return tb.pad_dim_end(past_BHkvPDh, 2, growth)


def select_rows(tb: TorchBuilder, cache_BHkvTDh: Tensor, new_BHkvSDh: Tensor, past_len_B: Tensor) -> Tensor:
    """The GPU form of the write: row t of batch row b takes new token t - past_len[b] when that is
    in [0, S), else keeps the cache's (one elementwise pass over the cache, which IREE's GPU code
    generation spreads over the whole chip; its scatter runs on one thread).  The rows written
    are the scatter's whenever the positions pass their run-time check (checks.py)."""
    T, S = tb.size(cache_BHkvTDh, 2), tb.size(new_BHkvSDh, 2)
    rel_BT = tb.sub(tb.unsqueeze(tb.arange(T), 0), tb.unsqueeze(past_len_B, 1))  # [1,T] - [B,1] -> [B,T]
    new_row_B1T1 = tb.unsqueeze(tb.unsqueeze(tb.in_range(rel_BT, 0, tb.dim_sub(S, 1)), 1), 3)  # -> [B,1,T,1]
    if S == 1:  # one new row: broadcast along T
        return tb.where(new_row_B1T1, tb.expand(new_BHkvSDh, [-1, -1, T, -1]), cache_BHkvTDh)
    index_B1T1 = tb.unsqueeze(tb.unsqueeze(tb.clamp_int(rel_BT, 0, tb.dim_sub(S, 1)), 1), 3)  # in bounds: [B,1,T,1]
    index_BHkvTDh = tb.expand(index_B1T1, [-1, new_BHkvSDh.shape[1], -1, new_BHkvSDh.shape[3]])
    return tb.where(new_row_B1T1, tb.gather(new_BHkvSDh, 2, index_BHkvTDh), cache_BHkvTDh)


def used_rows(tb: TorchBuilder, step: Step, T: Dim) -> Dim:
    """R = max_b(seqlens_k[b]) + 1 clamped to [1, T]: the fixed-capacity rows attention can see.

    onnxruntime's kernel reads only rows [0, seqlens_k[b]]; a shared buffer's
    capacity (max_length) is usually far larger, and the rows past the valid
    ones may hold anything (a NaN there would reach P.V as 0 * NaN).
    """
    last = tb.item(tb.amax(step.seqlens_fed_B, 0))  # [B] -> [1] -> int (the si32 values: positions.py says why)
    return tb.dim_max(tb.dim_min(tb.dim_add(last, 1), T), 1)


def grow_rows(tb: TorchBuilder, past_BHkvPDh: Tensor, growth: Dim) -> Tensor:
    """past followed by ``growth`` zero rows, as a concatenation: backends then fill the new rows only.

    (``constant_pad_nd`` of the whole cache is lowered by IREE to a fill of
    the whole present buffer before the past is copied in: twice the writes.)
    """
    empty_BHkv0Dh = tb.slice(past_BHkvPDh, 2, 0, 0, in_bounds=True)  # [B,Hkv,P,Dh] -> [B,Hkv,0,Dh]
    zeros_BHkvGDh = tb.pad_dim_end(empty_BHkv0Dh, 2, growth)  # -> [B,Hkv,G,Dh]
    return tb.cat([past_BHkvPDh, zeros_BHkvGDh], 2)  # -> [B,Hkv,P+G,Dh]
