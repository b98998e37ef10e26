"""Where the step's tokens sit: past lengths, absolute positions and rotary rows (the rotation: patterns/common/rotary.py)."""

from __future__ import annotations

from typing import Optional

from ....binder import OpBinder
from ....builder import Dim, Tensor, TorchBuilder, parse_vtensor_type
from ...common.rotary import RotaryTables
from .inputs import OP, GqaInputs, Step


def step_positions(tb: TorchBuilder, ins: GqaInputs) -> Step:
    """past_len[b]: seqlens_k[b] + 1 - query_seqlens[b] for a right-padded chunk;
    else 0 on a first prompt (S == total_sequence_length), seqlens_k[b] + 1 - S otherwise."""
    S = tb.size(ins.query, 1)
    seqlens = ins.seqlens_k if ins.seqlens_k.rank == 1 else tb.flatten(ins.seqlens_k, 0, ins.seqlens_k.rank - 1)  # [B,1]|[1,B]|[1,B,1] -> [B]
    seqlens_B = tb.to_dtype(seqlens, "si64")  # si32 [B] -> si64 [B]
    # Before any position is computed from it (the rotary rows' check would name only positions):
    # the upper bound needs the present length, checked with the cache.  Checks and reductions
    # read the si32 values as fed: IREE 3.13's CUDA code generation fails on a reduction over a
    # dynamic dim whose input is computed in its dispatch (the widened copy, used elsewhere too).
    tb.runtime_check(tb.ge_scalar(seqlens, 0), f"{OP}: seqlens_k[b] must be >= 0 (onnxruntime rejects it otherwise)")
    total = ins.total_sequence_length
    if total.rank == 1 and total.shape[0] is None:  # one element, checked with the inputs
        # [?] -> [?+1] -> [1]: the pad keeps the read in bounds for an empty feed (whose check fails)
        total = tb.slice(tb.pad_dim_end(total, 0, 1), 0, 0, 1, in_bounds=True)
    total = tb.to_dtype(total, "si64")  # si32 [] -> si64 []
    if ins.query_seqlens is not None:  # total_sequence_length is only an upper bound then
        first_prompt = None
        past_len_B = tb.sub(tb.add_scalar(seqlens_B, 1), tb.to_dtype(ins.query_seqlens, "si64"))  # [B]
    else:
        first_prompt = tb.eq_scalar(total, S)
        check_chunk_batch(tb, first_prompt, tb.size(ins.query, 0), S)
        past_len_B = tb.where_scalar_else(first_prompt, 0, tb.add_scalar(seqlens_B, tb.dim_sub(1, S)))  # [B]
    position_BS = tb.add(tb.unsqueeze(past_len_B, 1), tb.arange(S))  # [B,1] + [S] -> [B,S]
    return Step(S, seqlens_B, seqlens, total, first_prompt, past_len_B, position_BS)


TOTAL_SLOT = 6
_INT32, _INT64 = 6, 7  # ONNX element types


def host_total(tb: TorchBuilder, b: OpBinder) -> Optional[Dim]:
    """total_sequence_length known on the host, without a read back: ``size(x, k)`` where the graph
    computes it as ``Cast(Shape(x, start=k, end=k+1))`` (the builder's attention-mask width, in the
    form preimport/totals.py gives it); None otherwise.  Only where the step is taken apart
    on it (__init__.py): its checks still read the input as fed."""
    cast = _onnx_producer(b, b.op.operands[TOTAL_SLOT], "onnx.Cast")
    if cast is None or _int_attr(b, cast, "torch.onnx.to") not in (_INT32, _INT64):
        return None
    shape = _onnx_producer(b, cast.operands[0], "onnx.Shape")
    parsed = parse_vtensor_type(str(shape.operands[0].type)) if shape is not None else None
    if parsed is None:
        return None
    rank = len(parsed[0])
    start, end = _int_attr(b, shape, "torch.onnx.start", 0), _int_attr(b, shape, "torch.onnx.end", rank)
    start, end = (max(0, min(rank, d + rank if d < 0 else d)) for d in (start, end))  # ONNX Shape's clamping
    if end - start != 1:
        return None
    return tb.size(Tensor(shape.operands[0], *parsed), start)


def _onnx_producer(b: OpBinder, value, name: str):
    owner = getattr(value.owner, "operation", None)  # None for a block argument
    if owner is None or owner.name != "torch.operator" or b.ir.StringAttr(owner.attributes["name"]).value != name:
        return None
    return owner


def _int_attr(b: OpBinder, op, name: str, default=None):
    return b.ir.IntegerAttr(op.attributes[name]).value if name in op.attributes else default


def check_chunk_batch(tb: TorchBuilder, first_prompt: Tensor, B: Dim, S: Dim) -> None:
    """S > 1 tokens after a past need batch 1 (onnxruntime's rule without query_seqlens)."""
    if B == 1 or S == 1:
        return
    ok = first_prompt
    for d in (B, S):
        if not isinstance(d, int):
            ok = tb.logical_or(ok, tb.eq_scalar(tb.dim_tensor(d), 1))
    tb.runtime_check(
        ok,
        "GroupQueryAttention: a step of S > 1 tokens after a past needs batch size 1, or query_seqlens "
        "(onnxruntime rejects it otherwise)",
    )


def rotary_positions(tb: TorchBuilder, ins: GqaInputs, step: Step) -> Tensor:
    """Rotary angle index per token [B,S].

    Without position_ids: the token's position.  With them: position_ids[b, s],
    except on a first prompt, where onnxruntime reads only position_ids[0, 0]
    and uses position_ids[0, 0] + s for every row.
    """
    if ins.position_ids is None:
        return step.position_BS
    position_ids_BS = flat_position_ids(tb, ins.position_ids, tb.size(ins.query, 0), step.S)
    if step.first_prompt is None:  # right-padded chunks: every row reads its own ids
        return position_ids_BS
    base_11 = first_position(tb, position_ids_BS)  # [B,S] -> [1,1]
    first_prompt_1S = tb.add(base_11, tb.arange(step.S))  # [1,1] + [S] -> [1,S]
    return tb.where(step.first_prompt, first_prompt_1S, position_ids_BS)  # -> [B,S]


def flat_position_ids(tb: TorchBuilder, position_ids: Tensor, B: Dim, S: Dim) -> Tensor:
    """position_ids [B,W,...] (W >= S) as [B,S]: onnxruntime reads entry b*S + s of the flattened tensor.

    The common [B,S] is itself; a wider one gives its first B*S entries in
    row-major order, not the first S columns of each row.
    """
    if position_ids.rank == 2 and isinstance(S, int) and position_ids.shape[1] == S:
        return position_ids
    flat_N = tb.flatten(position_ids, 0, position_ids.rank - 1)  # [B,W,...] -> [N]
    index_BS = tb.add(tb.unsqueeze(tb.mul_int_scalar(tb.arange(B), S), 1), tb.arange(S))  # b*S + s: [B,1] + [S] -> [B,S]
    index_BS = tb.clamp_int(index_BS, 0, tb.dim_sub(tb.size(flat_N, 0), 1))  # < B*S <= N once W >= S is checked
    return tb.gather_rows(flat_N, index_BS)  # [N] at [B,S] -> [B,S]


def first_position(tb: TorchBuilder, position_ids_BS: Tensor) -> Tensor:
    """position_ids[0:1, 0:1], in bounds even for an empty batch or sequence.

    A dynamic B or S may be 0 at run time: a zero row and column are appended
    first, so the slice reads the padding then (its value is never used: the
    result has no element).
    """
    first_BS = position_ids_BS
    for dim in (0, 1):
        if first_BS.shape[dim] is None:
            first_BS = tb.pad_dim_end(first_BS, dim, 1)  # [B,S] -> [B+1,S] -> [B+1,S+1]
    first_1S = tb.slice(first_BS, 0, 0, 1, in_bounds=True)  # -> [1,S]
    return tb.slice(first_1S, 1, 0, 1, in_bounds=True)  # -> [1,1]


def rotary_tables(tb: TorchBuilder, ins: GqaInputs, position_BS: Tensor, interleaved: bool) -> RotaryTables:
    """The cos/sin caches' rows at each token's position: [M,R/2] at [B,S] -> [B,1,S,R/2]."""

    def rows(cache_MR2):
        return tb.unsqueeze(tb.gather_rows(cache_MR2, position_BS), 1)  # [M,R/2] at [B,S] -> [B,S,R/2] -> [B,1,S,R/2]

    return RotaryTables(rows(ins.cos_cache), rows(ins.sin_cache), interleaved)


def valid_query_rows(tb: TorchBuilder, step: Step) -> Tensor:
    """i1 [B,S]: the rows s < query_seqlens[b] of a right-padded chunk, i = past_len[b] + s <= seqlens_k[b]."""
    return tb.le(step.position_BS, tb.unsqueeze(step.seqlens_B, 1))
