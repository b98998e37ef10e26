"""com.microsoft.RotaryEmbedding against onnxruntime (torch-mlir's own conversion of it is wrong or fails)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing.standard_attention import run_onnxruntime

B, S, N, Dh, M = 2, 3, 2, 8, 16
_TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def _model(rank4=False, offset=False, dtype=np.float32, R=0, **attrs):
    x_shape = [B, N, S, Dh] if rank4 else [B, S, N * Dh]
    pos_shape = [1] if offset else [B, S]
    half = (R or Dh) // 2
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft",
                            **({"rotary_embedding_dim": R} if R else {}), **attrs)
    t = _TYPES[dtype]
    graph = helper.make_graph(
        [node], "rotary",
        [helper.make_tensor_value_info("x", t, x_shape), helper.make_tensor_value_info("pos", TensorProto.INT64, pos_shape),
         helper.make_tensor_value_info("cos", t, [M, half]), helper.make_tensor_value_info("sin", t, [M, half])],
        [helper.make_tensor_value_info("y", t, x_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(x_shape).astype(dtype),
             "pos": np.array([5]) if offset else rng.integers(0, M, pos_shape).astype(np.int64),
             "cos": rng.standard_normal([M, half]).astype(dtype), "sin": rng.standard_normal([M, half]).astype(dtype)}
    return model, feeds


CASES = {
    "3d-num_heads": dict(num_heads=N),
    "3d-heads-from-cache": dict(),
    "4d": dict(rank4=True),
    "interleaved": dict(num_heads=N, interleaved=1),
    "offset": dict(num_heads=N, offset=True),
    "partial": dict(num_heads=N, R=4),
    "partial-interleaved-4d": dict(rank4=True, num_heads=N, R=4, interleaved=1),
}


@pytest.mark.parametrize("case", CASES)
def test_matches_onnxruntime(case, backend):
    model, feeds = _model(**CASES[case])
    want = run_onnxruntime(model, feeds)["y"]
    have = InferenceSession(model, backend=backend).run(None, feeds)[0]
    np.testing.assert_allclose(have, want, rtol=0, atol=1e-5)
