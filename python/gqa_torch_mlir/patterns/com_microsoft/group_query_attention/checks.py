"""Run-time checks of the lengths onnxruntime checks (total_sequence_length, seqlens_k, rotary rows, window lengths).

Whatever seqlens_k, total_sequence_length, query_seqlens or position_ids
hold, every data-dependent index is clamped into its buffer, so compiled code
never reads or writes out of bounds; the inputs onnxruntime rejects also fail
a run-time check with onnxruntime's rule in the message.
"""

from __future__ import annotations


from ....builder import Dim, Tensor, TorchBuilder
from .inputs import GqaInputs, Step
from .positions import rotary_positions, valid_query_rows


def check_total(tb: TorchBuilder, ins: GqaInputs, step: Step, window_cache: bool) -> None:
    """total_sequence_length covers every row's tokens (seqlens_k[b] + 1), is >= 1 and, but for
    a window cache, >= S: onnxruntime's rules (a first prompt's rows then never exceed S)."""
    covers = tb.le(step.seqlens_fed_B, tb.add_scalar(step.total, -1))  # seqlens_k[b] + 1 <= total: [B] vs [] (or [1])
    least = 1 if window_cache else step.S
    tb.runtime_check(
        tb.logical_and(covers, tb.ge_scalar(step.total, least)),
        f"GroupQueryAttention: total_sequence_length must be at least seqlens_k[b] + 1 for every row and at least "
        f"{'1' if window_cache else 'S (query dimension 1)'} (onnxruntime rejects it otherwise)",
    )


def checked_cache_rows(tb: TorchBuilder, step: Step, ins: GqaInputs, P: Dim, growth: Dim) -> Tensor:
    """Cache rows of the new tokens (their positions), clamped into [0, T), T = P + growth.

    total_sequence_length decides the cache mode: P + S grows it, <= P keeps
    its capacity.  When the declared types fix the growth, total must give
    that mode, or the present would not have onnxruntime's max(P, total) rows.
    """
    last = tb.dim_sub(tb.dim_add(P, growth), 1)
    tb.runtime_check(
        tb.in_range(step.seqlens_fed_B, 0, last),
        "GroupQueryAttention: seqlens_k[b] must lie in [0, present length) (onnxruntime rejects it otherwise)",
    )
    tb.runtime_check(
        tb.in_range(step.position_BS, 0, last),
        "GroupQueryAttention: the new tokens must fit the cache: 0 <= seqlens_k[b] + 1 - S (or - query_seqlens[b]) "
        "and seqlens_k[b] + 1 - S + S <= present length",
    )
    growing, fixed = tb.eq_scalar(step.total, tb.dim_add(P, step.S)), tb.le_scalar(step.total, P)
    if isinstance(growth, int) and growth > 0:  # present declared with P + S rows
        total_ok, rule = growing, "equal past length + S: the present is declared with past length + S rows (a growing cache)"
    elif growth == 0 and isinstance(P, int):  # present declared with P rows
        total_ok, rule = fixed, "be at most the past length: the present is declared with the past's rows (fixed capacity)"
    elif ins.query_seqlens is not None:  # an upper bound: present has max(P, total) rows
        total_ok, rule = tb.le_scalar(step.total, tb.dim_add(P, step.S)), "be at most past length + S (with query_seqlens)"
    else:
        total_ok, rule = tb.logical_or(growing, fixed), "equal past length + S (growing cache) or be at most the past length (fixed capacity)"
    tb.runtime_check(tb.logical_and(total_ok, tb.ge_scalar(step.total, 1)), f"GroupQueryAttention: total_sequence_length must {rule}, and be >= 1")
    if ins.query_seqlens is not None:
        qlens_B = ins.query_seqlens  # si32 [B], as fed (see positions.py); qlens - 1 <= seqlens_k: no overflow
        tb.runtime_check(
            tb.logical_and(tb.in_range(qlens_B, 0, step.S), tb.le(tb.add_scalar(qlens_B, -1), step.seqlens_fed_B)),
            "GroupQueryAttention: query_seqlens[b] must lie in [0, min(S, seqlens_k[b] + 1)]",
        )
    return tb.clamp_int(step.position_BS, 0, last)


def check_window_lengths(tb: TorchBuilder, step: Step, past_BHkvCDc: Tensor, W: int, query_seqlens: bool) -> None:
    """Lengths a window-sized buffer needs, as onnxruntime checks them: also on a first prompt
    (whose past length is 0 whatever seqlens_k says), seqlens_k[b] + 1 >= S without query_seqlens."""
    enough_B = tb.ge_scalar(step.past_len_B, 0)
    if not query_seqlens:
        enough_B = tb.logical_and(enough_B, tb.ge_scalar(step.seqlens_fed_B, tb.dim_sub(step.S, 1)))
    tb.runtime_check(
        tb.logical_and(tb.ge_scalar(step.seqlens_fed_B, 0), enough_B),
        "GroupQueryAttention: seqlens_k[b] must be >= 0 and seqlens_k[b] + 1 >= the step's new tokens",
    )
    if past_BHkvCDc.shape[2] is None:  # a static capacity below W is refused at compile time
        tb.runtime_check(
            tb.ge_scalar(tb.dim_tensor(tb.size(past_BHkvCDc, 2)), W),
            "GroupQueryAttention: sliding_window_cache: the cache capacity (past_key dimension 2) must be at least "
            "local_window_size (onnxruntime rejects it otherwise)",
        )


def check_rotary_rows(tb: TorchBuilder, ins: GqaInputs, step: Step) -> None:
    """cos_cache rows >= total_sequence_length: onnxruntime's rule whenever the caches are given."""
    tb.runtime_check(
        tb.le_scalar(step.total, tb.size(ins.cos_cache, 0)),
        "GroupQueryAttention: cos_cache dimension 0 must not be less than total_sequence_length (onnxruntime rejects it otherwise)",
    )


def checked_rotary_positions(tb: TorchBuilder, ins: GqaInputs, step: Step) -> Tensor:
    """Rotary rows, clamped into the cos/sin caches [0, M)."""
    positions_BS = rotary_positions(tb, ins, step)
    last = tb.dim_sub(tb.size(ins.cos_cache, 0), 1)
    ok_BS = tb.in_range(positions_BS, 0, last)
    if ins.query_seqlens is not None:  # onnxruntime never reads a padding row's position (-1 is a common pad)
        ok_BS = tb.logical_or(ok_BS, tb.logical_not(valid_query_rows(tb, step)))
    tb.runtime_check(
        ok_BS,
        "GroupQueryAttention: rotary positions (position_ids, or the tokens' positions) must lie in [0, cos_cache rows)",
    )
    return tb.clamp_int(positions_BS, 0, last)
