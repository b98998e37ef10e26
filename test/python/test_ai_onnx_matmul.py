"""ONNX MatMul of activations by a constant 2-D weight (patterns/ai_onnx/matmul.py) against onnxruntime.

The lowering flattens the activations' leading dims and multiplies by the weight
as it is, so that a function compiled with fixed dims (specialize.py) reads the
same constant as the general one (test_backends_iree_weight_tiling.py checks the module); here the
numbers, for dynamic and static leading dims, an empty batch, and both backends.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing.matmul import K, weight_matmul_model
from gqa_torch_mlir.testing.tiers import across

# (the activations' leading dims as declared, the shapes fed)
FORMS = {
    "dynamic3": (["batch", "seq"], [(2, 5), (1, 1), (0, 3), (3, 0)]),
    "static3": ([1, 1], [(1, 1)]),
    "dynamic4": (["a", 3, "b"], [(2, 3, 4), (1, 3, 1)]),
}
CASES = across(sorted(FORMS), ["refbackend", "iree-cpu"])


@pytest.mark.parametrize("form,backend", CASES, ids=[f"{f}-{b}" for f, b in CASES])
def test_matmul_by_a_weight_matches_onnxruntime(form, backend):
    dims, shapes = FORMS[form]
    model = weight_matmul_model(dims)
    ours = InferenceSession(model, backend=backend)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for lead in shapes:
        x = rng.standard_normal(tuple(lead) + (K,)).astype(np.float32)
        (got,), (want,) = ours.run(None, {"X": x}), theirs.run(None, {"X": x})
        assert got.shape == want.shape, lead
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(lead))


def test_float16_weight_on_iree_cpu():
    model = weight_matmul_model(["batch", "seq"], np.float16)
    x = np.random.default_rng(0).standard_normal((2, 3, K)).astype(np.float16)
    (got,) = InferenceSession(model, backend="iree-cpu").run(None, {"X": x})
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-2)
