"""The standard Attention (opsets 23, 24) against onnxruntime's CPU kernel, one node, through InferenceSession.

Each configuration onnxruntime runs must match it (f32 within 1e-4, f16 within
2e-2, f64 within 1e-6: onnxruntime's f64 function body takes sqrt(scale) in
f32); each it refuses, or that the spec and onnxruntime compute differently,
is refused by name.  Models are built by testing/standard_attention.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession, compile
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.options import LoweringOptions
from gqa_torch_mlir.testing import tiers
from gqa_torch_mlir.testing.standard_attention import AttentionConfig as C
from gqa_torch_mlir.testing.standard_attention import MaskSpec as M
from gqa_torch_mlir.testing.standard_attention import make_inputs, make_model, run_onnxruntime, with_symbolic_dims

TOLERANCE = {np.float32: 1e-4, np.float16: 2e-2, np.float64: 1e-6}

CONFIGS = [
    C(),  # GQA 4/2, 4-D, no mask
    C(rank3=True, B=2),
    C(Hkv=1, rank3=True),  # MQA
    C(Hkv=4),  # MHA
    C(H=6, Hkv=3, Dv=4, rank3=True),  # V head size != Q/K's
    C(S=2, L=6),  # cross attention, top-left
    C(is_causal=True),
    C(S=2, L=5, is_causal=True),
    C(S=5, L=2, is_causal=True),  # leading rows see no key: zero rows
    C(S=3, L=3, P=4, present=True, is_causal=True),  # a chunk after a past: bottom-right
    C(S=1, L=1, P=6, present=True, is_causal=True, B=2),  # decode
    C(L=2, P=3, present=True, rank3=True, S=2),
    C(present=True),  # present without past: K and V themselves
    C(scale=0.3),
    C(softcap=2.0, qk_matmul_output_mode=0),
    C(softcap=2.0, qk_matmul_output_mode=1, scale=0.9),
    C(qk_matmul_output_mode=2, mask=M("bool", "ST"), is_causal=True),
    C(qk_matmul_output_mode=3, mask=M("float", "B1ST"), B=2),
    C(mask=M("bool", "HST", full_rows=True), qk_matmul_output_mode=3),
    C(mask=M("bool", "1ST")),
    C(mask=M("bool", "11ST")),
    C(mask=M("float", "1HST", float_fill="neginf", full_rows=True), qk_matmul_output_mode=2),
    C(mask=M("float", "BHST", float_fill="lowest", full_rows=True), B=2),
    C(mask=M("float", "ST", float_fill="normal"), softcap=1.5, is_causal=True, P=2, present=True),
    C(softmax_precision=1),
    C(dtype=np.float16, mask=M("float", "1HST"), is_causal=True),
    C(dtype=np.float16, rank3=True, softcap=3.0, qk_matmul_output_mode=3, P=3, L=1, S=1, present=True),
    C(dtype=np.float16, mask=M("bool", "B1ST", full_rows=True), B=2, qk_matmul_output_mode=2),
    C(dtype=np.float64, is_causal=True, P=2, present=True),
    C(dtype=np.float64, mask=M("bool", "ST"), softmax_precision=11, rank3=True),
    # f64 runs onnxruntime's function body: any mask broadcast, a past without presents
    C(dtype=np.float64, mask=M("bool", "T")),
    C(dtype=np.float64, mask=M("float", "B11T", float_fill="neginf"), B=2, is_causal=True),
    C(dtype=np.float64, mask=M("bool", "BH1T", full_rows=True), B=2),
    C(dtype=np.float64, S=2, L=2, P=3, is_causal=True),
    C(dtype=np.float64, mask=M("bool", "B1ST", short=2), B=2, opset=24),  # shorter: padded with -inf
    C(dtype=np.float64, mask=M("float", "ST", short=1, float_fill="neginf"), opset=24, qk_matmul_output_mode=2),
    C(dtype=np.float64, scale=0.0),  # uniform
    C(dtype=np.float64, softmax_precision=1, is_causal=True),  # the softmax in float
    C(dtype=np.float64, S=1, L=3, P=2, present=True, is_causal=True),  # the body applies the spec's mask
    # f32 with a mask of another type: onnxruntime runs the function body, the mask added as f32
    C(mask=M("float", "B1ST", dtype=np.int64), B=2),
    C(mask=M("float", "1T", dtype=np.float16, float_fill="neginf"), is_causal=True, qk_matmul_output_mode=3),
    C(opset=24),
    C(opset=24, nonpad_kv_seqlen=True, B=3, L=6, S=4, is_causal=True),  # bottom-right at nonpad[b] - S
    C(opset=24, nonpad_kv_seqlen=True, B=3, S=1, L=8, nonpad_lens=(0, 3, 8)),  # 0: a zero row
    C(opset=24, nonpad_kv_seqlen=True, B=2, qk_matmul_output_mode=2, mask=M("bool", "B1ST")),
    C(opset=24, nonpad_kv_seqlen=True, B=2, present=True, mask=M("float", "ST"), qk_matmul_output_mode=3),
]
# iree-cpu compiles each model: a spread of the forms above.
IREE_CONFIGS = [CONFIGS[i] for i in (1, 4, 9, 10, 15, 17, 21, 25, 28, 31, 34, 39, 42)]


def _check(cfg: C, backend: str, attention=None) -> None:
    model, feeds = make_model(cfg), make_inputs(cfg, 0)
    expected = run_onnxruntime(model, feeds)
    session = InferenceSession(model, backend=backend, attention=attention)
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(names, feeds)))
    tolerance = TOLERANCE[cfg.np_dtype.type]
    for name, want in expected.items():
        have = got[name]
        assert have.dtype == want.dtype and have.shape == want.shape, (name, have.dtype, have.shape, want.dtype, want.shape)
        finite = np.isfinite(want)
        assert (np.isfinite(have) == finite).all(), f"{name}: non-finite entries differ"
        assert (have[~finite] == want[~finite]).all(), f"{name}: -inf/+inf entries differ"
        np.testing.assert_allclose(have[finite].astype(np.float64), want[finite].astype(np.float64), rtol=0, atol=tolerance, err_msg=name)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_matches_onnxruntime_refbackend(cfg):
    _check(cfg, "refbackend")


@pytest.mark.parametrize("cfg", IREE_CONFIGS, ids=lambda c: c.name)
def test_matches_onnxruntime_iree_cpu(cfg):
    _check(cfg, "iree-cpu")


@pytest.mark.parametrize("cfg", [CONFIGS[i] for i in (0, 9, 17, 22)], ids=lambda c: c.name)
def test_sdpa_form_matches_onnxruntime(cfg):
    _check(cfg, "iree-cpu", attention="sdpa")


# A long causal prefill in blocks of query rows (attention/query_blocks.py): S = 160 is blocks
# of 64, 64 and 32 rows; each case names how many P.V matmuls the torch IR has.
BLOCKED = [
    (C(S=160, L=160, is_causal=True), 3),
    (C(S=160, L=160, is_causal=True, rank3=True, B=2), 3),
    (C(S=130, L=130, P=24, present=True, is_causal=True), 3),  # after a past: keys [0, P + stop)
    (C(S=160, L=40, is_causal=True, mask=M("bool", "ST")), 3),  # fewer keys than queries
    (C(S=160, L=160, is_causal=True, mask=M("float", "1HST", float_fill="neginf", full_rows=True)), 3),
    (C(S=160, L=160, is_causal=True, dtype=np.float16, softcap=2.0, rank3=True), 3),
    (C(S=160, L=160, is_causal=True, dtype=np.float64), 3),  # onnxruntime's function body
    # not blocked: qk_matmul_output needs every score; nonpad_kv_seqlen's offset is read at run time
    (C(S=160, L=160, is_causal=True, qk_matmul_output_mode=0), 1),
    (C(S=160, L=160, is_causal=True, opset=24, nonpad_kv_seqlen=True, B=2), 1),
]
BLOCKED_ON = [(*case, backend) for case, backend in tiers.across(BLOCKED, ["refbackend", "iree-cpu"])]


@pytest.mark.parametrize("cfg,blocks,backend", BLOCKED_ON, ids=[f"{c[0].name}-{c[-1]}" for c in BLOCKED_ON])
def test_blocked_prefill_matches_onnxruntime(cfg, blocks, backend):
    assert str(compile(make_model(cfg), "torch")).count("torch.aten.matmul") // 2 == blocks
    _check(cfg, backend)


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_dynamic_batch_and_lengths(backend):
    """The exporter's form: batch, query, key and past lengths only known at run time."""
    cfg = C(B=2, S=3, L=3, P=5, present=True, is_causal=True, rank3=True, mask=M("bool", "B1ST"), H=4, Hkv=2, Dh=16)
    model = with_symbolic_dims(make_model(cfg), {2: "batch", 3: "seq", 5: "past", 8: "total"})
    feeds = make_inputs(cfg, 1)
    expected = run_onnxruntime(model, feeds)
    got = InferenceSession(model, backend=backend).run(None, feeds)
    for have, want in zip(got, expected.values()):
        np.testing.assert_allclose(have, want, rtol=0, atol=1e-4)


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_dynamic_decode_row_apart_matches_onnxruntime(backend):
    """A run-time query length: a decode step's one row takes the static-shape attention (a branch
    on S == 1: IREE's CPU matmuls with the query rows dynamic ran at a fraction of the speed;
    and on B == 1 inside it), other lengths the whole; one model fed all in turn."""
    probe = C(B=3, S=6, L=6, P=5, present=True, is_causal=True, rank3=True, mask=M("bool", "B1ST"), H=8, Hkv=2, Dh=16)
    model = with_symbolic_dims(make_model(probe), {3: "batch", 6: "seq", 5: "past", 11: "total"})
    torch_ir = str(compile(model, "torch"))
    assert "!torch.vtensor<[?,2,4,?],f32>" in torch_ir  # one row's grouped scores [B,Hkv,G*1,T]
    assert "!torch.vtensor<[1,2,4,?],f32>" in torch_ir  # a batch of one's
    session = InferenceSession(model, backend=backend)
    for B, S, P in [(3, 1, 5), (1, 1, 5), (3, 6, 5), (1, 1, 9), (1, 6, 2)]:
        cfg = dataclasses.replace(probe, B=B, S=S, L=S, P=P)
        feeds = make_inputs(cfg, S + P)
        for have, (name, want) in zip(session.run(None, feeds), run_onnxruntime(model, feeds).items()):
            np.testing.assert_allclose(have, want, rtol=0, atol=1e-4, err_msg=f"{name} B={B} S={S} P={P}")


# A query length known at run time only with prefill_loop=on: blocks of 64 rows in a loop from 128
# rows on, the whole step below (a branch). One model per form, fed each (S, L, P) in turn.
LOOPED = [
    (C(S=161, L=161, is_causal=True, mask=M("bool", "ST")), [(1, 1, 0), (127, 127, 0), (200, 200, 0), (130, 40, 0)]),
    (C(S=161, L=161, P=7, is_causal=True, rank3=True, present=True), [(200, 200, 9), (1, 1, 9)]),
    # one new key after a past: is_causal excludes nothing, and the mask's rows are shared ([B,1,1,T])
    (C(S=161, L=1, P=7, present=True, is_causal=True, dtype=np.float64, mask=M("float", "B11T")), [(200, 1, 7), (3, 1, 7)]),
]


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_prefill_loop_matches_onnxruntime(backend):
    for probe, steps in LOOPED:
        model = with_symbolic_dims(make_model(probe), {161: "seq", 7: "past", 168: "total"} if probe.L > 1 else {161: "seq"})
        assert "torch.prim.Loop" in str(compile(model, "torch", options=LoweringOptions(prefill_loop="on")))
        session = InferenceSession(model, backend=backend, prefill_loop="on")
        for S, L, P in steps:
            cfg = dataclasses.replace(probe, S=S, L=L, P=P)
            feeds = make_inputs(cfg, 0)
            got = session.run(None, feeds)
            for have, (name, want) in zip(got, run_onnxruntime(make_model(cfg), feeds).items()):
                np.testing.assert_allclose(have, want, rtol=0, atol=1e-4, err_msg=f"{name} S={S} L={L} P={P}")



# On the CPU in f32 the loop's blocks take their keys in chunks of 64, the softmax carried across them
# online (common/key_chunks.py); what the mask does must come out as the whole softmax's. The masks
# let a row see keys from LATE on only: a block's first chunk then holds no key its rows see (their
# running maximum the lowest value, or -inf, until a later chunk), and the rows with no key at all
# before LATE are onnxruntime's zero rows. MQA with another V head size and a softcap, a float mask
# per head, a batch of two and a past ride along. Each model fed a prompt and a chunk after a past.
LATE = 70
CHUNKED = [
    C(S=161, L=161, is_causal=True, H=8, Hkv=2, Dh=16, mask=M("bool", "ST")),
    C(S=161, L=161, P=7, present=True, is_causal=True, H=8, Hkv=1, Dh=16, Dv=8, softcap=2.0,
      mask=M("float", "1HST", float_fill="lowest")),
    C(S=161, L=161, P=7, present=True, is_causal=True, H=8, Hkv=2, Dh=16, B=2, rank3=True, scale=0.3,
      mask=M("float", "B1ST", float_fill="neginf")),
    C(S=161, L=161, P=7, present=True, is_causal=True, H=8, Hkv=2, Dh=16, mask=M("float", "ST", float_fill="mixed")),
]
CHUNKED_ON = tiers.across(CHUNKED, ["iree-cpu", "refbackend"])


def _late_keys(mask: np.ndarray, cfg: C) -> np.ndarray:
    """``mask`` with every key before LATE excluded (False, or the mask's own fill)."""
    late = np.arange(mask.shape[-1]) >= LATE
    if mask.dtype == np.bool_:
        return mask & late
    fill = np.finfo(mask.dtype).min if cfg.mask.float_fill == "lowest" else -np.inf
    return np.where(late, mask, fill).astype(mask.dtype)


@pytest.mark.parametrize("probe,backend", CHUNKED_ON, ids=[f"{c.name}-{b}" for c, b in CHUNKED_ON])
def test_prefill_loop_key_chunks_match_onnxruntime(probe, backend):
    model = with_symbolic_dims(make_model(probe), {161: "seq", 7: "past", 168: "total"} if probe.P else {161: "seq"})
    G = probe.H // probe.Hkv
    assert f"!torch.vtensor<[{probe.B},{probe.Hkv},{G * 64},64],f32>" in str(compile(model, "torch"))  # a chunk's scores
    session = InferenceSession(model, backend=backend)
    for S, P in [(200, 5 if probe.P else 0), (150, 90 if probe.P else 0)]:
        cfg = dataclasses.replace(probe, S=S, L=S, P=P)
        feeds = make_inputs(cfg, S + P)
        feeds["attn_mask"] = _late_keys(feeds["attn_mask"], cfg)
        want = run_onnxruntime(make_model(cfg), feeds)
        if P < LATE:  # rows s + P < LATE see no key
            assert (want["Y"] == 0).all(axis=-1).any(), "no zero row: the case does not probe them"
        for have, (name, want_) in zip(session.run(None, feeds), want.items()):
            np.testing.assert_allclose(have, want_, rtol=0, atol=1e-4, err_msg=f"{name} S={S} P={P} on {backend}")


def test_prefill_loop_key_chunks_only_in_f32():
    """An f16 step rounds each stage to f16 (onnxruntime's kernel), which a softmax carried across
    chunks cannot: its loop's blocks take their keys whole."""
    probe = C(S=161, L=161, is_causal=True, H=8, Hkv=2, Dh=16, mask=M("bool", "ST"), dtype=np.float16)
    torch_ir = str(compile(with_symbolic_dims(make_model(probe), {161: "seq"}), "torch"))
    assert "torch.prim.Loop" in torch_ir and ",64],f32>" not in torch_ir

REFUSALS = [
    (C(H=4, Hkv=3), "q_num_heads (4) must be a multiple of kv_num_heads (3)"),
    (C(scale=-0.5), "attribute 'scale': value -0.5 is not supported"),
    (C(softcap=-1.0), "attribute 'softcap': value -1.0 is not supported"),
    (C(softmax_precision=10), "attribute 'softmax_precision': value 10 is not supported for f32 inputs"),
    (C(qk_matmul_output_mode=4), "attribute 'qk_matmul_output_mode': value 4 is not supported"),
    (C(P=2), "past_key/past_value are given but present_key/present_value are not requested"),
    (C(mask=M("bool", "B11T"), B=2), "input 3 'attn_mask': dimension -2 (the query length) 1 differs from 4"),
    (C(mask=M("bool", "T")), "input 3 'attn_mask': rank 1 is not supported"),
    (C(mask=M("bool", "BHST", short=1), opset=24), "dimension -1 (3) is not supported; supported: exactly the total sequence length (4)"),
    (C(dtype=np.float16, mask=M("float", "ST", dtype=np.float32)), "input 3 'attn_mask': type f32 with f16 inputs is not supported"),
    (C(opset=24, nonpad_kv_seqlen=True, B=2, mask=M("float", "ST", dtype=np.int64)), "input 3 'attn_mask': type si64 with is_causal or nonpad_kv_seqlen is not supported"),
    (C(mask=M("float", "ST", dtype=np.int64), is_causal=True), "input 3 'attn_mask': type si64 with is_causal or nonpad_kv_seqlen"),
    (C(dtype=np.float64, attrs={"q_num_heads": 4, "kv_num_heads": 2}), "attribute 'q_num_heads': is given with 4-D inputs where onnxruntime runs the function body"),
    (C(dtype=np.float64, scale=-0.5), "attribute 'scale': value -0.5 is not supported; supported: a finite value >= 0"),
    (C(S=1, L=3, P=2, present=True, is_causal=True), "onnxruntime skips the causal mask there, the spec applies it"),
    (C(opset=24, nonpad_kv_seqlen=True, P=2, present=True), "input 6 'nonpad_kv_seqlen': is given with past_key/past_value"),
    (C(attrs={"is_causal": 2}), "attribute 'is_causal': value 2 is not supported"),
    (C(rank3=True, attrs={"kv_num_heads": 0}), "attribute 'kv_num_heads': is required with 3-D inputs"),
    (C(attrs={"q_num_heads": 2}), "attribute 'q_num_heads': value 2 differs from Q's dimension 1 (4)"),
]


@pytest.mark.parametrize("cfg,message", REFUSALS, ids=[c.name for c, _ in REFUSALS])
def test_refused_by_name(cfg, message):
    with pytest.raises(GqaTorchMlirError, match="ai.onnx.Attention") as info:
        InferenceSession(make_model(cfg), backend="refbackend")
    assert message in str(info.value)


def test_nonpad_out_of_range_is_a_run_time_error():
    cfg = C(opset=24, nonpad_kv_seqlen=True, B=2, nonpad_lens=(2, 9))
    session = InferenceSession(make_model(cfg), backend="refbackend")
    with pytest.raises(Exception, match="nonpad_kv_seqlen values must lie in"):
        session.run(None, make_inputs(cfg, 0))


def _random_config(rng: np.random.Generator) -> C:
    """A configuration onnxruntime runs (its kernel, or the function body for f64 and other mask types),
    drawn over every axis the lowering branches on."""
    Hkv = int(rng.integers(1, 4))
    P = int(rng.choice([0, 0, 2, 5]))
    S = 1 if P and rng.random() < 0.4 else int(rng.integers(1, 6))
    L = 1 if (S == 1 and P) else int(rng.integers(1, 7))
    opset = int(rng.choice([23, 24]))
    nonpad = opset == 24 and not P and rng.random() < 0.5
    dtype = rng.choice([np.float32, np.float32, np.float16, np.float64])
    is_causal = bool(rng.random() < 0.5)
    mask = None
    if rng.random() < 0.6:
        kind = str(rng.choice(["bool", "float"]))
        # an int64 mask runs the function body (refused with is_causal or nonpad: onnxruntime's differs from the spec)
        other_type = kind == "float" and dtype == np.float32 and rng.random() < 0.3 and not nonpad and not is_causal
        body = dtype == np.float64 or other_type
        shapes = ["ST", "1ST", "HST", "BHST", "B1ST", "11ST", "1HST"] + (["T", "B11T", "BH1T", "1T"] if body else [])
        fill = str(rng.choice(["mixed", "normal", "neginf", "lowest"]))
        short = int(rng.integers(0, P + L)) if body and opset == 24 and rng.random() < 0.3 else 0
        mask = M(kind, str(rng.choice(shapes)), short=short, full_rows=bool(rng.random() < 0.3), float_fill=fill,
                 dtype=np.int64 if other_type else None)
    return C(
        B=int(rng.integers(1, 4)), S=S, L=L, P=P, H=Hkv * int(rng.choice([1, 2, 4])), Hkv=Hkv,
        Dh=int(rng.choice([4, 8, 16])), Dv=int(rng.choice([4, 8])) if rng.random() < 0.3 else None,
        rank3=bool(rng.random() < 0.5), dtype=dtype,
        scale=float(rng.uniform(0.1, 1.0)) if rng.random() < 0.3 else None, is_causal=is_causal,
        softcap=float(rng.uniform(0.5, 5.0)) if rng.random() < 0.3 else 0.0,
        qk_matmul_output_mode=int(rng.integers(0, 4)) if rng.random() < 0.4 else None, mask=mask,
        present=bool(P) or rng.random() < 0.3, opset=opset, nonpad_kv_seqlen=nonpad,
    )


@pytest.mark.parametrize("seed", range(tiers.count("GQA_PROPERTY_EXAMPLES", 12, 120)))
def test_random_configurations(seed):
    cfg = _random_config(np.random.default_rng(1000 + seed))
    if cfg.mask is not None and cfg.mask.kind == "bool":
        cfg = dataclasses.replace(cfg, mask=dataclasses.replace(cfg.mask, float_fill="mixed"))
    _check(cfg, "refbackend")
