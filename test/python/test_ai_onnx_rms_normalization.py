"""The standard RMSNormalization (opset 23) against onnxruntime, one node: bit for bit where the
backend keeps onnxruntime's rounding order (iree-cpu; the refbackend is off in the last bit at times)."""

from __future__ import annotations

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.backends.iree import tuning
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.testing.standard_attention import RMSNormConfig as N
from gqa_torch_mlir.testing.standard_attention import make_rmsnorm_inputs, make_rmsnorm_model, run_onnxruntime

CONFIGS = [
    N(),
    N(x_shape=(3, 67), epsilon=1e-6),  # lanes plus a tail of 3
    N(x_shape=(2, 3, 8), axis=1),  # two normalized dims
    N(x_shape=(2, 3, 16), axis=-2, scale_shape=(16,)),  # scale broadcast over the normalized dims
    N(x_shape=(2, 3, 16), scale_shape=(1,)),  # a broadcast scale: onnxruntime computes the row in double
    N(x_shape=(2, 3, 67), scale_shape=(1, 67)),
    N(x_shape=(2, 3, 16), axis=0, scale_shape=(3, 1)),
    N(x_shape=(2, 3, 16), scale_shape=(1,), dtype=np.float16),
    N(dtype=np.float16, x_shape=(4, 64)),
    N(dtype=np.float64, x_shape=(4, 64)),  # f64 statistics, as onnxruntime
    N(stash_type=1),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu", "iree-cpu tuned"])
def test_matches_onnxruntime(cfg, backend, monkeypatch):
    """Bit for bit on iree-cpu without its tuning spec; with it (iree-cpu's default) IREE reassociates
    every floating-point reduction of the module (docs/limits.md): within 4 ulp (2 measured, f64);
    the refbackend rounds otherwise at times: within an ulp."""
    if backend.startswith("iree-cpu"):  # both ways whatever the tier's default
        monkeypatch.setenv(tuning.ENABLED_VARIABLE, "1" if backend.endswith("tuned") else "0")
    model, feeds = make_rmsnorm_model(cfg), make_rmsnorm_inputs(cfg, 0)
    want = run_onnxruntime(model, feeds)["Y"]
    have = InferenceSession(model, backend=backend.split()[0]).run(None, feeds)[0]
    assert have.dtype == want.dtype and have.shape == want.shape
    ulp = np.finfo(want.dtype).eps * np.maximum(np.abs(want.astype(np.float64)), 1.0)
    allowed = {"iree-cpu": 0, "iree-cpu tuned": 4 * ulp, "refbackend": ulp}[backend]
    assert (np.abs(have.astype(np.float64) - want) <= allowed).all()


REFUSALS = [
    (N(stash_type=10), "attribute 'stash_type': value 10 is not supported"),
    (N(scale_dtype=np.float16), "input 1 'scale': type f16 differs from X's f32"),
    (N(x_shape=(2, 3, 16), scale_shape=(8,)), "input 1 'scale': shape [8] is not supported"),
]


@pytest.mark.parametrize("cfg,message", REFUSALS, ids=[str(c) for c, _ in REFUSALS])
def test_refused_by_name(cfg, message):
    with pytest.raises(GqaTorchMlirError, match="ai.onnx.RMSNormalization") as info:
        InferenceSession(make_rmsnorm_model(cfg), backend="refbackend")
    assert message in str(info.value)
