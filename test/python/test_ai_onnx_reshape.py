"""ONNX Reshape with a run-time shape (patterns/ai_onnx/reshape.py) against onnxruntime.

torch-mlir's own lowering divided the element count by the product of the
target dims at run time: an empty input or a 0 in the shape died of SIGFPE.
Every feed here runs in a child process (a crash fails the test, not
pytest), compiled once per model and backend; hostile shapes (huge, negative,
several -1, products that overflow int64) must be refused by a named check.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from gqa_torch_mlir.testing.isolated import run_isolated_each
from gqa_torch_mlir.testing.tiers import across

BIG = 2**40

# (data shape, target shape) per model: (allowzero, data rank, target rank).
FEEDS = {
    (0, 2, 2): [
        ((0, 64), [0, -1]), ((0, 64), [-1, 0]), ((2, 64), [0, -1]), ((0, 64), [4, -1]), ((2, 64), [-1, 0]),
        ((0, 64), [-1, 64]), ((3, 64), [-1, 2]), ((3, 64), [4, 48]), ((3, 64), [5, -1]), ((3, 64), [4, 47]),
        ((3, 64), [-1, -1]), ((3, 64), [-2, 96]), ((3, 64), [BIG, BIG]), ((3, 64), [2**62, -1]), ((0, 64), [BIG, BIG]),
        ((2**16, 64), [2**32, 2**32]),  # a product that wraps int64 to 0 must not pass for an element count
    ],
    (1, 2, 2): [
        ((0, 64), [0, 64]), ((0, 64), [0, BIG]), ((2, 64), [0, -1]), ((3, 64), [0, 192]), ((0, 64), [4, -1]),
        ((3, 64), [2, 96]),
    ],
    (0, 3, 3): [
        ((0, 3, 64), [0, 0, -1]), ((2, 0, 64), [0, 0, -1]), ((2, 3, 64), [0, 0, -1]), ((2, 3, 64), [0, -1, 8]),
        ((2, 3, 64), [3, 2, -1]),
    ],
    (0, 2, 3): [((2, 64), [0, 0, 0]), ((2, 64), [0, 8, 8]), ((0, 64), [0, 8, 8])],
    (0, 0, 2): [((), [1, 1]), ((), [2, 3]), ((), [-1, 1]), ((), [-1, -1]), ((), [0, -1])],  # a scalar: one element
    (1, 0, 2): [((), [1, 1]), ((), [1, 0]), ((), [-1, 1])],
}

# The ONNX spec forbids a 0 next to a -1 with allowzero = 1; onnxruntime's kernel still
# computes a shape for an empty input (its graph-level check refuses a constant one). Refused here.
SPEC_INVALID = {(1, 2, 2): [((0, 64), [0, -1]), ((0, 64), [-1, 0])]}


# Static data reshaped to a run-time shape of one dim: torch-mlir's unflatten of a static [n]
# to [?] segfaulted while compiling; the result is the flattened data, after the checks.
STATIC_FEEDS = {
    (2, 3): [[6], [-1], [5], [0], [-2], [BIG]],
    (): [[1], [-1], [2], [0]],
}


def reshape_model(allowzero: int, data_rank: int, target_rank: int, data_shape=None):
    data_dims = ["d%d" % i for i in range(data_rank)] if data_shape is None else list(data_shape)
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["X", "shape"], ["Y"], allowzero=allowzero)],
        "reshape",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, data_dims), helper.make_tensor_value_info("shape", TensorProto.INT64, [target_rank])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["y%d" % i for i in range(target_rank)])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


RESHAPE_CASES = across(sorted(FEEDS), ["refbackend", "iree-cpu"])  # fast tier: backends in turn


@pytest.mark.parametrize("key,backend", RESHAPE_CASES, ids=[f"allowzero{k[0]}-rank{k[1]}-to-{k[2]}-{b}" for k, b in RESHAPE_CASES])
def test_runtime_shape_reshape(key, backend, tmp_path):
    compare_with_onnxruntime(reshape_model(*key), FEEDS[key], SPEC_INVALID.get(key, []), backend, tmp_path)


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
@pytest.mark.parametrize("data_shape", sorted(STATIC_FEEDS), ids=lambda s: "static%s-to-1" % list(s))
def test_static_data_to_one_dim(data_shape, backend, tmp_path):
    cases = [(data_shape, shape) for shape in STATIC_FEEDS[data_shape]]
    compare_with_onnxruntime(reshape_model(0, len(data_shape), 1, data_shape), cases, [], backend, tmp_path)


def compare_with_onnxruntime(model, cases, spec_invalid, backend, tmp_path):
    cases = cases + spec_invalid
    rng = np.random.default_rng(0)
    feeds = [{"X": rng.standard_normal(x).astype(np.float32), "shape": np.array(shape, np.int64)} for x, shape in cases]
    ours = run_isolated_each(model, feeds, tmp_path / "ours", backend=backend)
    theirs = run_isolated_each(model, feeds, tmp_path / "ort", engine="onnxruntime")
    refusals = 0
    for (x, shape), got, want in zip(cases, ours, theirs):
        case = f"data {x}, shape {shape}"
        assert got.signal is None, f"{case}: {got.describe()}"
        if want.results is not None and (x, shape) not in spec_invalid:
            assert got.results is not None, f"{case}: onnxruntime computes it, ours: {got.describe()}"
            assert got.results["Y"].shape == want.results["Y"].shape, case
            np.testing.assert_array_equal(got.results["Y"], want.results["Y"], err_msg=case)
        else:
            assert got.results is None and got.error is not None, f"{case}: onnxruntime refuses it, ours: {got.describe()}"
            assert "gqa-torch-mlir: Reshape: " in got.error[1], f"{case}: {got.describe()}"
            refusals += 1
    assert 0 < refusals < len(cases)


def test_shape_of_dynamic_length_is_refused_by_name():
    """The output rank must be known: torch-mlir's lowering failed in a later stage (collapse_shape), naming nothing."""
    import gqa_torch_mlir
    from gqa_torch_mlir.errors import GqaTorchMlirError

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["X", "shape"], ["Y"])],
        "reshape",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3]), helper.make_tensor_value_info("shape", TensorProto.INT64, ["L"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(GqaTorchMlirError, match="input 1 'shape': has a dynamic length, so the output's rank is unknown"):
        gqa_torch_mlir.compile(model, "linalg-on-tensors")
