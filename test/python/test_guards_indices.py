"""Gather, GatherElements, GatherND, ScatterElements and ScatterND with run-time indices
(patterns/ai_onnx/gather.py, gather_elements.py, gather_nd.py, scatter_elements.py, scatter_nd.py)
against onnxruntime.

torch-mlir's lowerings trusted the indices: out of range they read or wrote
outside the buffers (garbage with no error, SIGSEGV on iree-cpu, an
out-of-bounds store that runtime verification aborts on the refbackend).
Every feed runs in a child process under runtime verification, compiled once
per model and backend: in-range indices give onnxruntime's values, the rest
(and dynamic dims that disagree) fail a check naming the op.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from gqa_torch_mlir.testing.isolated import run_isolated_each
from gqa_torch_mlir.testing.tiers import across

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
HOSTILE = [5, -6, 10**6, -(10**9), 2**62]


def node_model(op, inputs, out_dims, **attrs):
    graph = helper.make_graph(
        [helper.make_node(op, [name for name, _, _ in inputs], ["Y"], **attrs)],
        op,
        [helper.make_tensor_value_info(name, elem, dims) for name, elem, dims in inputs],
        [helper.make_tensor_value_info("Y", F, out_dims)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def data(*shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1


def gather():
    model = node_model("Gather", [("X", F, ["a", 5]), ("idx", I64, ["n"])], ["n", 5], axis=0)
    feeds = [{"X": data(4, 5), "idx": np.array([3, v, -4], np.int64)} for v in [1, -1, 4, -5] + HOSTILE]
    return model, feeds


def gather_elements():
    model = node_model("GatherElements", [("X", F, ["a", 5]), ("idx", I64, ["a", "c"])], ["a", "c"], axis=1)
    feeds = [{"X": data(4, 5), "idx": np.full((4, 2), v, np.int64)} for v in [1, -2, 4, -5] + HOSTILE]
    feeds.append({"X": data(4, 5), "idx": np.zeros((5, 2), np.int64)})  # indices dim 0 past the data's
    return model, feeds


def gather_elements_i32_axis0():
    model = node_model("GatherElements", [("X", F, ["a", "b"]), ("idx", I32, ["c", "d"])], ["c", "d"], axis=0)
    feeds = [{"X": data(4, 5), "idx": np.array([[3, v, 0], [-1, 2, v]], np.int32)} for v in [1, -4, 4, -5, 2**31 - 1, -(2**31)]]
    return model, feeds


def gather_nd():
    model = node_model("GatherND", [("X", F, [4, 5, 3]), ("idx", I64, ["n", 2])], ["n", 3])
    feeds = [{"X": data(4, 5, 3), "idx": np.array([[0, 0], [3, v], [v % 4, 1]], np.int64)} for v in [1, -5, 4] + HOSTILE]
    return model, feeds


def gather_nd_batch_dims():
    model = node_model("GatherND", [("X", F, ["b", 4, 5]), ("idx", I64, ["c", 3, 1])], ["c", 3, 5], batch_dims=1)
    feeds = [{"X": data(2, 4, 5), "idx": np.array([[[0], [v], [3]], [[-1], [2], [v]]], np.int64)} for v in [1, -4] + HOSTILE]
    feeds.append({"X": data(2, 4, 5), "idx": np.zeros((3, 3, 1), np.int64)})  # batch dims 3 vs 2
    return model, feeds


def scatter_elements():
    model = node_model("ScatterElements", [("X", F, ["a", 5]), ("idx", I64, ["a", 2]), ("U", F, ["a", 2])], ["a", 5], axis=1, reduction="add")
    feeds = [{"X": data(4, 5), "idx": np.array([[0, v]] * 4, np.int64), "U": np.ones((4, 2), np.float32)} for v in [0, -1, 4, -5] + HOSTILE]
    feeds.append({"X": data(4, 5), "idx": np.zeros((4, 2), np.int64), "U": np.ones((3, 2), np.float32)})  # updates dim 0 differs
    return model, feeds


def scatter_nd():
    model = node_model("ScatterND", [("X", F, ["a", 5, 3]), ("idx", I64, ["n", 2]), ("U", F, ["m", 3])], ["a", 5, 3])
    feeds = [{"X": data(4, 5, 3), "idx": np.array([[0, 1], [3, v]], np.int64), "U": np.ones((2, 3), np.float32)} for v in [0, -5, 4] + HOSTILE]
    feeds.append({"X": data(4, 5, 3), "idx": np.zeros((2, 2), np.int64) + [[0, 1], [1, 0]], "U": np.ones((3, 3), np.float32)})  # 3 updates, 2 tuples
    return model, feeds


MODELS = {f.__name__: f for f in (gather, gather_elements, gather_elements_i32_axis0, gather_nd, gather_nd_batch_dims, scatter_elements, scatter_nd)}


INDEX_CASES = across(sorted(MODELS), ["refbackend", "iree-cpu"])


@pytest.mark.parametrize("name,backend", INDEX_CASES, ids=[f"{n}-{b}" for n, b in INDEX_CASES])  # fast tier: backends in turn
def test_runtime_indices_match_onnxruntime_or_fail_a_named_check(name, backend, tmp_path):
    model, feeds = MODELS[name]()
    op = model.graph.node[0].op_type
    ours = run_isolated_each(model, feeds, tmp_path / "ours", backend=backend)
    theirs = run_isolated_each(model, feeds, tmp_path / "ort", engine="onnxruntime")
    refusals = 0
    for i, (got, want) in enumerate(zip(ours, theirs)):
        case = f"feed {i}: " + ", ".join(f"{k}={v.tolist()}" for k, v in feeds[i].items() if k == "idx")
        assert got.signal is None, f"{case}: {got.describe()}"
        if want.results is not None:
            assert got.results is not None, f"{case}: onnxruntime computes it, ours: {got.describe()}"
            np.testing.assert_array_equal(got.results["Y"], want.results["Y"], err_msg=case)
        else:
            assert got.results is None and got.error is not None, f"{case}: onnxruntime refuses it, ours: {got.describe()}"
            assert f"gqa-torch-mlir: {op}: " in got.error[1], f"{case}: {got.describe()}"
            refusals += 1
    assert 0 < refusals < len(feeds)


def _constant_index_model(op, indices, data_shape=(4, 5), updates=None, shape_of_data=False, constant_node=False, **attrs):
    """``op`` on X (or on Shape(X)) with constant indices (an initializer or a Constant node)."""
    from onnx import numpy_helper

    idx = numpy_helper.from_array(np.asarray(indices, np.int64), "idx")
    nodes, inits, inputs = [], [], [helper.make_tensor_value_info("X", F, list(data_shape))]
    data = "X"
    if shape_of_data:
        nodes.append(helper.make_node("Shape", ["X"], ["shape"]))
        data = "shape"
    if constant_node:
        nodes.append(helper.make_node("Constant", [], ["idx"], value=idx))
    else:
        inits.append(idx)
    names = [data, "idx"]
    if updates is not None:
        inputs.append(helper.make_tensor_value_info("U", F, list(updates)))
        names.append("U")
    nodes.append(helper.make_node(op, names, ["Y"], **attrs))
    out_elem = I64 if shape_of_data else F
    graph = helper.make_graph(nodes, op, inputs, [helper.make_tensor_value_info("Y", out_elem, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


CONSTANT_INDICES = {
    "gather_of_shape": (dict(op="Gather", indices=7, shape_of_data=True, constant_node=True, axis=0), "holds 7, outside [-2, 2) for data dimension 0"),
    "gather_initializer": (dict(op="Gather", indices=[1, 10**6], axis=0), "holds 1000000, outside [-4, 4) for data dimension 0"),
    "gather_elements": (dict(op="GatherElements", indices=[[0], [-6], [1], [2]], axis=1), "holds -6, outside [-5, 5) for data dimension 1"),
    "scatter_elements": (dict(op="ScatterElements", indices=[[5 * 10**6]], updates=(1, 1), axis=1), "holds 5000000, outside [-5, 5)"),
    "gather_nd": (dict(op="GatherND", indices=[[0, 1], [3, 5]]), "holds 5, outside [-5, 5) for column 1 (data dimension 1)"),
    "scatter_nd": (dict(op="ScatterND", indices=[[100000]], updates=(1, 5)), "holds 100000, outside [-4, 4) for column 0"),
}


@pytest.mark.parametrize("name", sorted(CONSTANT_INDICES))
def test_constant_indices_out_of_range_are_refused_when_compiling(name, tmp_path):
    """Constant indices are checked on the ONNX model (the importer turns them into blobs the
    pass cannot read): out of a static dim, the node is refused by name; onnxruntime rejects
    the model when run (it crashed ours, or read garbage, before)."""
    import gqa_torch_mlir
    from gqa_torch_mlir.errors import LoweringError

    kwargs, message = CONSTANT_INDICES[name]
    model = _constant_index_model(**kwargs)
    with pytest.raises(LoweringError) as refused:
        gqa_torch_mlir.compile(model, "torch")
    assert f"a {kwargs['op']} node: input 1 'indices' {message}" in str(refused.value)
    feeds = {"X": data(4, 5)} | ({"U": np.ones(kwargs["updates"], np.float32)} if "updates" in kwargs else {})
    assert run_isolated_each(model, [feeds], tmp_path, engine="onnxruntime")[0].results is None


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_constant_indices_in_range_still_fold(backend, tmp_path):
    """In range, constant indices (into a Shape: shape arithmetic) give onnxruntime's values."""
    model = _constant_index_model("Gather", -1, data_shape=("a", 5), shape_of_data=True, constant_node=True, axis=0)
    feeds = [{"X": data(3, 5)}, {"X": data(0, 5)}]
    ours = run_isolated_each(model, feeds, tmp_path / "ours", backend=backend)
    theirs = run_isolated_each(model, feeds, tmp_path / "ort", engine="onnxruntime")
    for got, want in zip(ours, theirs):
        np.testing.assert_array_equal(got.results["Y"], want.results["Y"])


def scatter_elements_min_max_model(reduction: str):
    return node_model("ScatterElements", [("X", F, ["a", 5]), ("idx", I64, ["a", 4]), ("U", F, ["a", 4])], ["a", 5], axis=-1, reduction=reduction)


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_scatter_elements_min_max(backend, tmp_path):
    """reduction max/min (torch-mlir's conversion has none: lowered here): duplicate and negative
    indices give onnxruntime's values; out of range, or with a NaN (whose fate in onnxruntime
    depends on the update order), a named check fails."""
    rng = np.random.default_rng(7)
    model = scatter_elements_min_max_model("max")
    duplicates = np.array([[1, 1, -1, 0], [2, -3, 2, 4], [0, 0, 0, 0]], np.int64)
    good = [{"X": rng.standard_normal((3, 5)).astype(np.float32), "idx": duplicates, "U": rng.standard_normal((3, 4)).astype(np.float32)} for _ in range(2)]
    hostile = [dict(good[0], idx=np.full((3, 4), v, np.int64)) for v in HOSTILE[:2]]
    nan_update = dict(good[0], U=np.where(np.arange(4) == 1, np.nan, good[0]["U"]).astype(np.float32))
    feeds = good + hostile + [nan_update]
    ours = run_isolated_each(model, feeds, tmp_path / "ours", backend=backend)
    theirs = run_isolated_each(model, feeds, tmp_path / "ort", engine="onnxruntime")
    for got, want in zip(ours[:2], theirs[:2]):
        np.testing.assert_array_equal(got.results["Y"], want.results["Y"])
    for got, want in zip(ours[2:4], theirs[2:4]):
        assert want.results is None and "gqa-torch-mlir: ScatterElements: indices must lie in" in got.error[1], got.describe()
    assert theirs[4].results is not None  # onnxruntime computes it; ours refuses it by name
    assert "ScatterElements: reduction 'max' with a NaN in the updates is not supported" in ours[4].error[1], ours[4].describe()


def test_scatter_elements_min_with_constant_indices(tmp_path):
    """Constant in-range indices (checked when compiling) with reduction min."""
    model = _constant_index_model("ScatterElements", [[1, -1, 3], [1, 0, 0]], updates=(2, 3), axis=1, reduction="min")
    feeds = [{"X": data(4, 5) - 10, "U": np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32) * 20}]
    got = run_isolated_each(model, feeds, tmp_path / "ours")[0]
    want = run_isolated_each(model, feeds, tmp_path / "ort", engine="onnxruntime")[0]
    np.testing.assert_array_equal(got.results["Y"], want.results["Y"])


@pytest.mark.parametrize("opset,reduction,message", [
    (18, "bogus", "attribute 'reduction': value 'bogus' is not supported; supported: none, add, mul, min, max"),
    (13, "add", "attribute 'reduction' is not an attribute of ScatterElements at opset 13"),
    (18, "max", "input 0 'data': reduction 'max' of bool data is not supported"),
], ids=["unknown_value", "before_opset_16", "max_of_bool"])
def test_scatter_elements_reduction_refused_by_name(opset, reduction, message):
    """torch-mlir's conversion multiplied for an unknown reduction, and computed one the model's
    opset does not have (onnxruntime rejects that model)."""
    import gqa_torch_mlir
    from gqa_torch_mlir.errors import GqaTorchMlirError

    model = scatter_elements_min_max_model(reduction)
    model.opset_import[0].version = opset
    if "bool" in message:
        for vi in (model.graph.input[0], model.graph.input[2], model.graph.output[0]):
            vi.type.tensor_type.elem_type = TensorProto.BOOL
    with pytest.raises(GqaTorchMlirError, match=message.replace("(", r"\(").replace(")", r"\)")):
        gqa_torch_mlir.compile(model, "torch")
