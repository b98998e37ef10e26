"""Long causal prefills attended in blocks of query rows (group_query_attention/query_blocks.py),
and the decode step of one batch row without the rows-read split (kv_cache.py's every_row_read).

Each case runs on the refbackend and iree-cpu against onnxruntime, and the IR
shows the form was taken (or, where it must not be, was not): the blocks are
one P.V matmul each, and a one-row decode reads back one length, not two.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession, compile
from gqa_torch_mlir.options import LoweringOptions
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime
from gqa_torch_mlir.testing.tiers import EXTENDED, across, count

C = GQAConfig

# S = 160: blocks of 64, 64 and 32 query rows
BLOCKED = [
    ("prefill", C(seq=160), {}, 3),
    ("prefill_rotary_f16", C(seq=160, rotary=True, dtype="float16"), {}, 3),
    ("chunk_after_a_past", C(seq=160, past=24, rotary=True), {}, 3),
    ("batch_of_two", C(batch=2, seq=160), {}, 3),
    ("local_window_softcap", C(seq=160), {"local_window_size": 40, "softcap": 20.0}, 3),
    ("head_sink", C(seq=160, head_sink=True), {}, 3),
    ("smooth_softmax", C(seq=160), {"smooth_softmax": 1}, 3),
    ("int8_cache", C(seq=160, kv_bits=8), {}, 3),
    # not blocked: output_qk needs every score, attention_bias is not sliced, a fixed-capacity
    # buffer is read on a length known at run time only
    ("qk_output", C(seq=160), {"qk_output": 1}, 1),
    ("attention_bias", C(seq=160, attention_bias="B1"), {}, 1),
    ("fixed_capacity", C(batch=2, seq=130, past=200, past_lens=(0, 0), fixed_capacity=True), {}, 1),
]


def pv_matmuls(model) -> int:
    """P.V matmuls in the torch IR: each block has one Q.K^T and one P.V."""
    return str(compile(model, "torch")).count("torch.aten.matmul") // 2


BLOCKED_ON = [(*case, backend) for case, backend in across(BLOCKED, ["refbackend", "iree-cpu"])]  # fast tier: backends in turn


@pytest.mark.parametrize("name,cfg,attrs,blocks,backend", BLOCKED_ON, ids=[f"{c[0]}-{c[-1]}" for c in BLOCKED_ON])
def test_blocked_prefill_matches_onnxruntime(name, cfg, attrs, blocks, backend):
    model, feeds = make_model(cfg, attrs), make_inputs(cfg, seed=17)
    if backend == "refbackend":
        assert pv_matmuls(model) == blocks, name
    session = InferenceSession(model, backend=backend, **({"threads": 1} if backend == "iree-cpu" else {}))
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    problems = compare(cfg, got, run_onnxruntime(model, feeds), feeds)
    assert not problems, f"{name} on {backend}:\n" + "\n".join(problems)


def readbacks(model) -> int:
    return str(compile(model, "torch")).count("torch.aten.item")


@pytest.mark.parametrize("cfg,want", [
    (C(seq=1, past=64, past_lens=(40,), fixed_capacity=True), 1),  # the read rows' length only
    (C(batch=2, seq=1, past=64, past_lens=(40, 7), fixed_capacity=True), 2),  # and the rows every batch row reads
], ids=["one_row", "two_rows"])
def test_one_row_decode_reads_back_one_length(cfg, want):
    model, feeds = make_model(cfg), make_inputs(cfg, seed=5)
    assert readbacks(model) == want
    session = InferenceSession(model, backend="iree-cpu", threads=1)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    problems = compare(cfg, got, run_onnxruntime(model, feeds), feeds)
    assert not problems, "\n".join(problems)


# A query length known at run time only (the exporters' dynamic axes) with prefill_loop=on: blocks
# of 64 rows in a loop from 128 rows on, the whole step below (a branch). One model, fed each
# (S, past) in turn: below, at and past the branch, a partial last block, a chunk after a past,
# decode steps of one and two batch rows.
LOOP_COMMON = dict(num_heads=8, kv_num_heads=2, head_size=16, rotary=True, rotary_cache_len=400, dynamic=True)
LOOP_STEPS = [(1, 0, 1), (5, 0, 1), (127, 0, 1), (128, 0, 1), (300, 0, 1), (130, 24, 1), (1, 50, 1), (200, 0, 2), (1, 40, 2)]


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_prefill_loop_matches_onnxruntime(backend):
    model = make_model(C(seq=200, **LOOP_COMMON))
    assert "torch.prim.Loop" in str(compile(model, "torch", options=LoweringOptions(prefill_loop="on")))
    assert "torch.prim.Loop" in str(compile(model, "torch"))  # on by default
    assert "torch.prim.Loop" not in str(compile(model, "torch", options=LoweringOptions(prefill_loop="off")))
    session = InferenceSession(model, backend=backend, prefill_loop="on", **({"threads": 2} if backend == "iree-cpu" else {}))
    for seq, past, batch in LOOP_STEPS:
        cfg = C(seq=seq, past=past, batch=batch, **LOOP_COMMON)
        feeds = make_inputs(cfg, seed=seq + past)
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        problems = compare(cfg, got, run_onnxruntime(make_model(cfg), feeds), feeds)
        assert not problems, f"S={seq} past={past} batch={batch} on {backend}:\n" + "\n".join(problems)


# The same loop on the CPU takes each block's keys in chunks of 64, the softmax carried across them
# online (common/key_chunks.py): what else the softmax does must come out as the whole softmax's.
# A window of 40 leaves a late block's first chunks with no visible key for some rows (their running
# maximum stays -inf until a later chunk); a sink joins after the chunks; int8 codes are scaled per
# chunk and f16 rows read in f32. Each model fed a first prompt and a chunk after a past.
LOOP_FEATURES = [
    ("window_softcap", {}, {"local_window_size": 40, "softcap": 20.0}),
    ("head_sink", {"head_sink": True}, {}),
    ("smooth_softmax", {}, {"smooth_softmax": 1}),
    ("int8_cache", {"kv_bits": 8}, {}),
    ("f16", {"dtype": "float16"}, {}),
]
LOOP_FEATURES_ON = [(*case, backend) for case, backend in across(LOOP_FEATURES, ["iree-cpu", "refbackend"])]


@pytest.mark.parametrize("name,extra,attrs,backend", LOOP_FEATURES_ON, ids=[f"{c[0]}-{c[-1]}" for c in LOOP_FEATURES_ON])
def test_prefill_loop_key_chunks_match_onnxruntime(name, extra, attrs, backend):
    model = make_model(C(seq=200, **LOOP_COMMON, **extra), attrs)
    torch_ir = str(compile(model, "torch"))
    assert "!torch.vtensor<[1,2,256,64],f32>" in torch_ir, name  # a chunk's scores: [B,Hkv,G*64,64]
    session = InferenceSession(model, backend=backend, **({"threads": 2} if backend == "iree-cpu" else {}))
    for seq, past in [(200, 0), (150, 90)]:
        cfg = C(seq=seq, past=past, **LOOP_COMMON, **extra)
        feeds = make_inputs(cfg, seed=seq + past)
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        problems = compare(cfg, got, run_onnxruntime(make_model(cfg, attrs), feeds), feeds)
        assert not problems, f"{name} S={seq} past={past} on {backend}:\n" + "\n".join(problems)


# A query length known at run time only, decoding: the one row with static shapes (a branch on
# S == 1, and on B == 1 inside it; IREE's CPU matmuls with the query rows dynamic ran at a third
# of the speed, and it kept K's transpose apart with the batch dynamic), and a
# fixed-capacity buffer whose present rows are declared dynamic written in place (a branch on
# growth == 0; padded always, IREE copied both caches whole every step). One dynamic model fed
# its presents back, step after step, with a chunk of three rows and a fresh batch in between;
# every result kept alive, as a generation loop keeps them.
SHARED_COMMON = dict(num_heads=8, kv_num_heads=2, head_size=16, rotary=True, rotary_cache_len=64, dynamic=True,
                     past=40, fixed_capacity=True)
SHARED_STEPS = [(1, (9, 3)), (1, (10, 4)), (1, (11, 5)), (3, (20,)), (1, (21,)), (1, (22,)), (1, (30, 0)), (1, (31, 1))]


def test_dynamic_decode_static_row_in_place_buffer():
    model = make_model(C(batch=2, seq=1, past_lens=(9, 3), **SHARED_COMMON))
    torch_ir = str(compile(model, "torch"))
    assert "!torch.vtensor<[?,2,4,?],f32>" in torch_ir  # one row's grouped scores: [B,Hkv,G*1,R]
    assert "!torch.vtensor<[1,2,4,?],f32>" in torch_ir  # and a batch of one's: [1,Hkv,G*1,R]
    session = InferenceSession(model, backend="iree-cpu", threads=2, share_buffers=True)
    kept, ours, theirs, prev = [], None, None, None
    for seq, past_lens in SHARED_STEPS:
        cfg = C(batch=len(past_lens), seq=seq, past_lens=past_lens, **SHARED_COMMON)
        feeds = make_inputs(cfg, seed=seq + sum(past_lens))
        decoding = ours is not None and seq == 1 and ours[0].shape[0] == len(past_lens) and past_lens[0] == prev[0] + 1
        ours_feeds = dict(feeds, past_key=ours[0], past_value=ours[1]) if decoding else feeds
        theirs_feeds = dict(feeds, past_key=theirs[0], past_value=theirs[1]) if decoding else feeds
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, ours_feeds)))
        want = run_onnxruntime(model, theirs_feeds)
        problems = compare(cfg, got, want, theirs_feeds)
        assert not problems, f"S={seq} past_lens={past_lens}:\n" + "\n".join(problems)
        if decoding:  # the buffers fed back came back, written in place
            assert np.shares_memory(got["present_key"], ours[0]) and np.shares_memory(got["present_value"], ours[1])
        kept.append(got)
        ours, theirs, prev = (got["present_key"], got["present_value"]), (want["present_key"], want["present_value"]), past_lens


# The same branches call after call (IREE 3.13 has miscompiled data-dependent cache rows yielded by
# a branch before: wrong rows now and then, backends/iree/compiler.py): a dynamic fixed-capacity
# model fed back (growth 0: present is the past, in place) and a dynamic growing one (growth S:
# padded), S of 1, 2 and 130, batch 1 and 2, every result kept alive.
BRANCH_COMMON = dict(num_heads=4, kv_num_heads=2, head_size=16, rotary=True, rotary_cache_len=300, dynamic=True)


def _growing_step(rng) -> GQAConfig:
    seq, past = int(rng.choice([1, 1, 2, 130])), int(rng.integers(0, 60))
    if seq == 1 and rng.random() < 0.5:
        return C(batch=2, seq=1, past=past, past_lens=(past, int(rng.integers(0, past + 1))), **BRANCH_COMMON)
    return C(seq=seq, past=past, **BRANCH_COMMON)


@pytest.mark.parametrize("threads", [1, 2] if EXTENDED else [2])  # the fast tier: local-task's workers (round 26: CI time)
def test_cache_branches_match_onnxruntime_call_after_call(threads):
    calls, cap, rng, kept = count("GQA_BRANCH_CALLS", 8, 40), 40, np.random.default_rng(threads), []
    fixed = make_model(C(batch=2, seq=1, past=cap, past_lens=(9, 3), fixed_capacity=True, **BRANCH_COMMON))
    growing = make_model(C(seq=1, past=5, **BRANCH_COMMON))
    sessions = [InferenceSession(m, backend="iree-cpu", threads=threads, share_buffers=True) for m in (fixed, growing)]
    lens, ours, theirs = (9, 3), None, None
    for i in range(calls):
        cfg = C(batch=2, seq=1, past=cap, past_lens=lens, fixed_capacity=True, **BRANCH_COMMON)
        feeds = make_inputs(cfg, seed=i)
        ours_feeds = feeds if ours is None else dict(feeds, past_key=ours[0], past_value=ours[1])
        theirs_feeds = feeds if ours is None else dict(feeds, past_key=theirs[0], past_value=theirs[1])
        got = dict(zip([o.name for o in sessions[0].get_outputs()], sessions[0].run(None, ours_feeds)))
        want = run_onnxruntime(fixed, theirs_feeds)
        problems = compare(cfg, got, want, theirs_feeds)
        assert not problems, f"fixed capacity, call {i}, past_lens {lens}:\n" + "\n".join(problems)
        ours, theirs, lens = (got["present_key"], got["present_value"]), (want["present_key"], want["present_value"]), tuple(n + 1 for n in lens)
        if lens[0] == cap:  # full: a new generation in fresh buffers
            lens, ours, theirs = (9, 3), None, None
        cfg = _growing_step(rng)
        feeds = make_inputs(cfg, seed=100 + i)
        got = dict(zip([o.name for o in sessions[1].get_outputs()], sessions[1].run(None, feeds)))
        problems = compare(cfg, got, run_onnxruntime(growing, feeds), feeds)
        assert not problems, f"growing, call {i}, {cfg.name}:\n" + "\n".join(problems)
        kept.append(got)


def zeroed_value_blocks(model) -> int:
    """Selects that zero V's rows a batch row does not read ([1,Hkv,K,Dh] <- 0), in the torch IR."""
    return len(re.findall(r"torch\.aten\.where\.ScalarOther .* -> !torch\.vtensor<\[1,2,\d+,16\],f32>", str(compile(model, "torch"))))


@pytest.mark.parametrize("past", [0, 4])
def test_a_first_prompt_zeroes_no_rows(past):
    """An empty past holds no row a batch row does not read but the growth's zeros: no select zeroes
    V before each block's P.V (kv_cache.py); a past of 4 rows keeps one a block (2 blocks of 64)."""
    model = make_model(C(batch=1, seq=128, past=past, num_heads=4, kv_num_heads=2, head_size=16))
    assert zeroed_value_blocks(model) == (0 if past == 0 else 2)
