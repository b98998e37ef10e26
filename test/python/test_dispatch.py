"""Ops two domains define under one name reach their own lowering (dispatch.py).

torch-mlir's importer writes ``onnx.RotaryEmbedding`` for both the standard op
and com.microsoft's; one model holding both must compute each as onnxruntime
does.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.testing.standard_attention import run_onnxruntime

B, S, H, Dh, M = 2, 3, 2, 8, 16


def _both_rotaries(opsets=(("", 23), ("com.microsoft", 1))):
    """x [B,S,H*Dh] rotated by com.microsoft.RotaryEmbedding, then by the standard one (4-D)."""
    f32 = TensorProto.FLOAT
    nodes = [
        helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["contrib_BSD"], domain="com.microsoft", num_heads=H),
        helper.make_node("Reshape", ["contrib_BSD", "shape_BSHDh"], ["contrib_BSHDh"]),
        helper.make_node("Transpose", ["contrib_BSHDh"], ["contrib_BHSDh"], perm=[0, 2, 1, 3]),
        helper.make_node("RotaryEmbedding", ["contrib_BHSDh", "cos", "sin", "pos"], ["y"], interleaved=1),
    ]
    graph = helper.make_graph(
        nodes, "both",
        [helper.make_tensor_value_info("x", f32, [B, S, H * Dh]), helper.make_tensor_value_info("pos", TensorProto.INT64, [B, S]),
         helper.make_tensor_value_info("cos", f32, [M, Dh // 2]), helper.make_tensor_value_info("sin", f32, [M, Dh // 2])],
        [helper.make_tensor_value_info("y", f32, [B, H, S, Dh])],
        [helper.make_tensor("shape_BSHDh", TensorProto.INT64, [4], [B, S, H, Dh])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 10
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal([B, S, H * Dh]).astype(np.float32), "pos": rng.integers(0, M, [B, S]).astype(np.int64),
             "cos": rng.standard_normal([M, Dh // 2]).astype(np.float32), "sin": rng.standard_normal([M, Dh // 2]).astype(np.float32)}
    return model, feeds


def test_contrib_and_standard_rotary_in_one_model(backend):
    model, feeds = _both_rotaries()
    want = run_onnxruntime(model, feeds)["y"]
    have = InferenceSession(model, backend=backend).run(None, feeds)[0]
    np.testing.assert_allclose(have, want, rtol=0, atol=1e-5)


def test_standard_operands_below_opset_23_refused():
    model, _ = _both_rotaries(opsets=(("", 22), ("com.microsoft", 1)))
    with pytest.raises(GqaTorchMlirError, match="the operands are those of ai.onnx.RotaryEmbedding .since opset 23., but the model imports ai.onnx 22"):
        InferenceSession(model, backend="refbackend")
