"""The standard RotaryEmbedding (opset 23) against onnxruntime, one node, through InferenceSession."""

from __future__ import annotations

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.testing import tiers
from gqa_torch_mlir.testing.standard_attention import RotaryConfig as R
from gqa_torch_mlir.testing.standard_attention import make_rotary_inputs, make_rotary_model, run_onnxruntime

CONFIGS = [
    R(),
    R(rank3=True, num_heads_attr=True),
    R(interleaved=True),
    R(rotary_embedding_dim=4, rank3=True, num_heads_attr=True),  # partial: dims 4.. pass through
    R(rotary_embedding_dim=4, interleaved=True, Dh=12),
    R(position_ids=False),  # per-token caches [B,S,R/2]
    R(position_ids=False, rank3=True, num_heads_attr=True, interleaved=True),
    R(dtype=np.float16),  # onnxruntime rotates f16 in f32, rounding once
    R(dtype=np.float16, rank3=True, num_heads_attr=True, rotary_embedding_dim=6, Dh=10),
    R(num_heads_attr=True, attrs={"num_heads": 7}),  # 4-D: num_heads unused, as onnxruntime
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c}")
def test_matches_onnxruntime(cfg, backend):
    model, feeds = make_rotary_model(cfg), make_rotary_inputs(cfg, 0)
    want = run_onnxruntime(model, feeds)["Y"]
    have = InferenceSession(model, backend=backend).run(None, feeds)[0]
    assert have.dtype == want.dtype and have.shape == want.shape
    np.testing.assert_allclose(have.astype(np.float64), want.astype(np.float64), rtol=0, atol=1e-5 if cfg.dtype == np.float32 else 0)


REFUSALS = [
    (R(rank3=True, num_heads_attr=False), "attribute 'num_heads': value 0 is not supported for a 3-D X"),
    (R(rotary_embedding_dim=5), "attribute 'rotary_embedding_dim': value 5 is not supported"),  # onnxruntime: garbage
    (R(Dh=7), "attribute 'rotary_embedding_dim': value 7 is not supported"),
    (R(rotary_embedding_dim=10), "attribute 'rotary_embedding_dim': value 10 is not supported"),
    (R(M=2, S=3), "input 1 'cos_cache': has 2 rows, fewer than the sequence length 3"),
    (R(dtype=np.float64), "input 0 'X': type f64 is not supported"),
]


@pytest.mark.parametrize("cfg,message", REFUSALS, ids=[str(c) for c, _ in REFUSALS])
def test_refused_by_name(cfg, message):
    with pytest.raises(GqaTorchMlirError, match="ai.onnx.RotaryEmbedding") as info:
        InferenceSession(make_rotary_model(cfg), backend="refbackend")
    assert message in str(info.value)


def test_position_out_of_range_is_a_run_time_error(backend):
    cfg = R()
    feeds = make_rotary_inputs(cfg, 0)
    feeds["position_ids"][1, 2] = cfg.M
    session = InferenceSession(make_rotary_model(cfg), backend=backend)
    with pytest.raises(Exception, match="position_ids must lie in"):
        session.run(None, feeds)


def _random_config(rng: np.random.Generator) -> R:
    """A configuration onnxruntime runs, drawn over every form the lowering branches on."""
    Dh = int(rng.choice([4, 6, 8, 16]))
    rank3 = bool(rng.random() < 0.5)
    return R(
        B=int(rng.integers(1, 4)), S=int(rng.integers(1, 6)), H=int(rng.integers(1, 4)), Dh=Dh, rank3=rank3,
        num_heads_attr=True if rank3 else bool(rng.random() < 0.3), position_ids=bool(rng.random() < 0.7),
        interleaved=bool(rng.random() < 0.5), rotary_embedding_dim=int(rng.choice([0, 2 * int(rng.integers(1, Dh // 2 + 1))])),
        dtype=rng.choice([np.float32, np.float16]), M=int(rng.integers(6, 20)),
    )


@pytest.mark.parametrize("seed", range(tiers.count("GQA_PROPERTY_EXAMPLES", 8, 80)))
def test_random_configurations(seed):
    cfg = _random_config(np.random.default_rng(2000 + seed))
    model, feeds = make_rotary_model(cfg), make_rotary_inputs(cfg, seed)
    want = run_onnxruntime(model, feeds)["Y"]
    have = InferenceSession(model, backend="refbackend").run(None, feeds)[0]
    np.testing.assert_allclose(have.astype(np.float64), want.astype(np.float64), rtol=0, atol=1e-5 if cfg.dtype == np.float32 else 0)
