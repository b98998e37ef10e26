"""The GroupQueryAttention case lists the end-to-end tests run on every backend (test_gqa_e2e.py,
testing/gpu_check.py): the factor matrix, its all-pairs subset, and a fixed random draw.

Dimension letters as in the harness (gqa_onnx.py).
"""

from __future__ import annotations

import itertools
import random

from .gqa_onnx import GQAConfig

HEAD_LAYOUTS = {"mqa": (4, 1), "gqa": (4, 2), "mha": (2, 2)}  # (H, Hkv)
STEP_KINDS = {"prefill": dict(seq=5, past=0), "decode": dict(seq=1, past=7), "chunk": dict(seq=3, past=4)}
RAGGED_DECODE_PAST_LENS = (7, 4)


def matrix_configs() -> list[GQAConfig]:
    cfgs = []
    for packed, rotary, step, batch, dtype, dynamic, heads in itertools.product(
        (False, True),
        (False, True),
        STEP_KINDS,
        (1, 2),
        ("float32", "float16"),
        (False, True),
        HEAD_LAYOUTS,
    ):
        if step == "chunk" and batch == 2:
            # Not a valid onnxruntime configuration: without query_seqlens it
            # treats S > 1 with past context as a "subsequent prompt" and
            # requires batch_size == 1 (GQAConfig rejects it too), so there
            # is no oracle for it.
            continue
        num_heads, kv_num_heads = HEAD_LAYOUTS[heads]
        past_lens = RAGGED_DECODE_PAST_LENS if (step == "decode" and batch == 2) else None
        cfgs.append(
            GQAConfig(
                batch=batch,
                num_heads=num_heads,
                kv_num_heads=kv_num_heads,
                head_size=16,
                packed=packed,
                rotary=rotary,
                dtype=dtype,
                dynamic=dynamic,
                past_lens=past_lens,
                **STEP_KINDS[step],
            )
        )
    return cfgs


def matrix_factors(cfg: GQAConfig) -> tuple:
    """The matrix's factor values of one case: packed, rotary, step and batch, dtype, dims, heads."""
    step = next(k for k, v in STEP_KINDS.items() if (cfg.seq, cfg.past) == (v["seq"], v["past"]))
    return (cfg.packed, cfg.rotary, (step, cfg.batch), cfg.dtype, cfg.dynamic, (cfg.num_heads, cfg.kv_num_heads))


def factor_pairs(cfg: GQAConfig) -> set:
    f = matrix_factors(cfg)
    return {(i, f[i], j, f[j]) for i, j in itertools.combinations(range(len(f)), 2)}


def pairwise_subset(cfgs: list) -> list:
    """A subset in which every pair of factor values of ``cfgs`` appears (greedy all-pairs,
    deterministic): the failures of two interacting features show there, at a fraction of the cost."""
    uncovered = set().union(*(factor_pairs(c) for c in cfgs))
    chosen = []
    while uncovered:
        best = max(cfgs, key=lambda c: len(factor_pairs(c) & uncovered))
        chosen.append(best)
        uncovered -= factor_pairs(best)
    return chosen



HELD_OUT_SEED = 20240918  # picked once so the draw covers every head size, B=3, ragged rows, f16 and f32
HELD_OUT_COUNT = 12


def held_out_configs(n: int = HELD_OUT_COUNT, seed: int = HELD_OUT_SEED) -> list[GQAConfig]:
    """A fixed pseudo-random draw of valid onnxruntime configurations.

    onnxruntime's CPU kernel needs head_size % 8 == 0, head_size % 16 == 0 with
    rotary, and batch 1 for multi-token steps with past context; draws outside
    those are redrawn.
    """
    rng = random.Random(seed)
    cfgs: list[GQAConfig] = []
    while len(cfgs) < n:
        batch, seq, past = rng.randint(1, 3), rng.randint(1, 6), rng.randint(0, 9)
        if seq > 1 and past > 0 and batch > 1:
            continue  # onnxruntime rejects it (see matrix_configs)
        kv_num_heads = rng.choice((1, 2, 3))
        num_heads = kv_num_heads * rng.choice((1, 2, 3, 4))
        rotary = rng.random() < 0.5
        head_size = rng.choice((16, 32, 64) if rotary else (8, 16, 32, 64))
        past_lens = None
        if past > 0 and batch > 1:
            lens = [rng.randint(0, past) for _ in range(batch)]
            lens[rng.randrange(batch)] = past  # one row must fill the past buffer
            past_lens = tuple(lens)
        rotary_cache_len = rng.choice((None, past + seq)) if rotary else None  # None: T + 8 rows
        cfgs.append(
            GQAConfig(
                batch=batch,
                seq=seq,
                past=past,
                num_heads=num_heads,
                kv_num_heads=kv_num_heads,
                head_size=head_size,
                packed=rng.random() < 0.5,
                rotary=rotary,
                rotary_cache_len=rotary_cache_len,
                dtype=rng.choice(("float32", "float16")),
                dynamic=rng.random() < 0.5,
                past_lens=past_lens,
            )
        )
    return cfgs
