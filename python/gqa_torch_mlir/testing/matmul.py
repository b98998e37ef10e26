"""One-node ONNX MatMul models: activations ``[.., K]`` by a constant ``[K, N]`` weight (an initializer)."""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import onnx
from onnx import helper, numpy_helper

K, N = 48, 40


def weight_matmul_model(x_dims: Sequence[Union[int, str]], dtype=np.float32, k: int = K, n: int = N) -> onnx.ModelProto:
    """``Y = X @ W``: X of leading dims ``x_dims`` (ints or symbolic names) then ``k``; W random, ``[k, n]``."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    weight = numpy_helper.from_array(np.random.default_rng(1).standard_normal((k, n)).astype(dtype), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "matmul",
        [helper.make_tensor_value_info("X", elem, list(x_dims) + [k])],
        [helper.make_tensor_value_info("Y", elem, None)],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
