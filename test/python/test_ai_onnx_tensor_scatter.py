"""TensorScatter (opset 24) against onnxruntime, one node, through InferenceSession: bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.testing.standard_attention import TensorScatterConfig as T
from gqa_torch_mlir.testing.standard_attention import make_tensorscatter_inputs, make_tensorscatter_model, run_onnxruntime

CONFIGS = [
    T(),  # [B,H,M,D], axis -2, linear
    T(write_indices=None),  # absent: row 0
    T(write_indices=(6, 0)),  # filling to the end
    T(mode="circular", write_indices=(7, 13)),  # wraps; an index >= M is taken modulo M
    T(mode="circular", update_len=8, write_indices=(3, 0)),  # S == M
    T(cache_shape=(2, 8, 3, 4), axis=1, write_indices=(1, 5)),  # [B,M,H,D]
    T(cache_shape=(2, 8), axis=-1, write_indices=(2, 4)),
    T(dtype=np.float16),
    T(dtype=np.int64),
    T(dtype=np.bool_, mode="circular", write_indices=(5, 7)),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_matches_onnxruntime(cfg, backend):
    model, feeds = make_tensorscatter_model(cfg), make_tensorscatter_inputs(cfg, 0)
    want = run_onnxruntime(model, feeds)["present_cache"]
    have = InferenceSession(model, backend=backend).run(None, feeds)[0]
    assert have.dtype == want.dtype and have.shape == want.shape
    np.testing.assert_array_equal(have, want)


REFUSALS = [
    (T(mode="Circular"), "attribute 'mode': value 'Circular' is not supported"),
    (T(axis=0), "attribute 'axis': value 0 is not supported for rank 4"),
    (T(update_len=9), "input 1 'update': sequence length 9 exceeds past_cache's 8"),
]


@pytest.mark.parametrize("cfg,message", REFUSALS, ids=[str(c) for c, _ in REFUSALS])
def test_refused_by_name(cfg, message):
    with pytest.raises(GqaTorchMlirError, match="ai.onnx.TensorScatter") as info:
        InferenceSession(make_tensorscatter_model(cfg), backend="refbackend")
    assert message in str(info.value)


@pytest.mark.parametrize("cfg,message", [
    (T(write_indices=(7, 0)), "write_indices\\[b\\] \\+ the update's sequence length must not exceed"),
    (T(mode="circular", write_indices=(-1, 0)), "write_indices must be >= 0"),
], ids=["linear-overflow", "negative"])
def test_bad_indices_are_run_time_errors(cfg, message, backend):
    session = InferenceSession(make_tensorscatter_model(cfg), backend=backend)
    with pytest.raises(Exception, match=message):
        session.run(None, make_tensorscatter_inputs(cfg, 0))
