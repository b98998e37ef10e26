"""Constant tensor data in every storage form onnxruntime reads, and uint8 constants as graph outputs.

Each model here runs on onnxruntime and through InferenceSession, and the
results must be equal bit for bit: initializers and Constant values of every
element type onnxruntime supports, stored in ``raw_data`` or in the typed
field ``onnx.helper.make_tensor`` writes (f16 in ``int32_data``...), or as
external data; uint8 constants returned as graph outputs (on both backends:
torch-mlir's backend conversion fails on them unguarded).  4-bit tensors are
refused by name: torch-mlir's importer reads their packed bytes as elements.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gqa_torch_mlir
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.testing.gqa_onnx import run_onnxruntime

V = helper.make_tensor_value_info
U8, F32 = TensorProto.UINT8, TensorProto.FLOAT
#: Element types onnxruntime's CPU provider casts to float (4-bit ones are refused: below).
NUMERIC = ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32",
           "INT64", "UINT64", "BOOL", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")
VALUES = np.array([[1.5, -0.0, 3.0], [2.0, 1.0, 0.0]], np.float32)


def model_of(nodes, inputs, outputs, initializers=(), opset=21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def run_both(model: onnx.ModelProto, feeds: dict, backend: str = "refbackend"):
    """(ours, onnxruntime's) outputs in graph-output order; onnxruntime run as the suite's oracle."""
    want = list(run_onnxruntime(model, feeds).values())
    got = InferenceSession(model, backend=backend).run(None, feeds)
    return got, want


def assert_identical(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def values_of(type_name: str) -> np.ndarray:
    np_type = helper.tensor_dtype_to_np_dtype(getattr(TensorProto, type_name))
    data = VALUES if np.issubdtype(np_type, np.floating) or type_name.startswith("FLOAT") else np.abs(VALUES)
    return data.astype(np_type)


def cast_model(tensor: TensorProto, as_constant: bool) -> onnx.ModelProto:
    """Cast(tensor) to float + x: the tensor as an initializer or as a Constant node's value."""
    nodes = [helper.make_node("Cast", ["c"], ["y"], to=F32), helper.make_node("Add", ["y", "x"], ["z"])]
    inits = [tensor]
    if as_constant:
        nodes.insert(0, helper.make_node("Constant", [], ["c"], value=tensor))
        inits = []
    return model_of(nodes, [V("x", F32, [2, 3])], [V("z", F32, [2, 3])], inits)


@pytest.mark.parametrize("as_constant", [False, True], ids=["initializer", "constant"])
@pytest.mark.parametrize("raw", [False, True], ids=["typed_field", "raw_data"])
@pytest.mark.parametrize("type_name", NUMERIC)
def test_tensor_storage_forms(type_name: str, raw: bool, as_constant: bool):
    tensor = helper.make_tensor("c", getattr(TensorProto, type_name), [2, 3], values_of(type_name), raw=raw)
    got, want = run_both(cast_model(tensor, as_constant), {"x": np.zeros((2, 3), np.float32)})
    assert_identical(got, want)
    assert np.any(want[0] != 0)


def test_external_data(tmp_path):
    """An initializer stored in a file next to the model is read from there."""
    weights = numpy_helper.from_array(np.arange(24, dtype=np.float16).reshape(4, 6), "w")
    model = model_of([helper.make_node("Cast", ["w"], ["y"], to=F32), helper.make_node("Add", ["y", "x"], ["z"])],
                     [V("x", F32, [4, 6])], [V("z", F32, [4, 6])], [weights])
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    assert onnx.load(str(path), load_external_data=False).graph.initializer[0].data_location == TensorProto.EXTERNAL
    feeds = {"x": np.ones((4, 6), np.float32)}
    import onnxruntime as ort

    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert_identical(InferenceSession(str(path)).run(None, feeds), want)


@pytest.mark.parametrize("type_name", ["INT4", "UINT4"])
def test_four_bit_tensors_are_refused_by_name(type_name: str):
    tensor = helper.make_tensor("c", getattr(TensorProto, type_name), [2, 3], np.abs(VALUES).astype(np.int8), raw=False)
    with pytest.raises(GqaTorchMlirError, match=f"initializer 'c' has element type {type_name}; supported: 8-bit and wider"):
        gqa_torch_mlir.compile(cast_model(tensor, as_constant=False), "torch")
    with pytest.raises(GqaTorchMlirError, match=f"attribute 'value' of node 'Constant' has element type {type_name}"):
        gqa_torch_mlir.compile(cast_model(tensor, as_constant=True), "torch")


def _packed_weights() -> TensorProto:
    return numpy_helper.from_array((np.arange(24, dtype=np.uint8) * 11).reshape(6, 4), "w")


UINT8_OUTPUTS = {
    # uint8 weights reshaped (a constant) and used by Add, both also graph outputs
    "reshape_and_add": (
        [helper.make_node("Reshape", ["w", "shape"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])],
        [V("y", U8, [4, 6]), V("r", U8, [4, 6]), V("w", U8, [6, 4])],
    ),
    # the initializer itself as the only constant output
    "initializer_output": ([helper.make_node("Identity", ["x"], ["y"])], [V("y", U8, [4, 6]), V("w", U8, [6, 4])]),
    # a uint8 value computed from x is left as it is
    "computed_output": (
        [helper.make_node("Reshape", ["w", "shape"], ["r"]), helper.make_node("Sub", ["r", "x"], ["y"])],
        [V("y", U8, [4, 6])],
    ),
}


@pytest.mark.parametrize("case", sorted(UINT8_OUTPUTS))
def test_uint8_constants_as_graph_outputs(case: str, backend: str):
    nodes, outputs = UINT8_OUTPUTS[case]
    shape = numpy_helper.from_array(np.array([4, 6], np.int64), "shape")
    model = model_of(nodes, [V("x", U8, [4, 6])], outputs, [_packed_weights(), shape])
    x = (np.arange(24, dtype=np.uint8) * 13).reshape(4, 6)  # wraps around in Add and Sub
    got, want = run_both(model, {"x": x}, backend)
    assert_identical(got, want)


@pytest.mark.parametrize("type_name", ["FLOAT16", "BFLOAT16", "FLOAT"])
def test_empty_tensor_in_a_typed_field(type_name: str):
    """An empty tensor stored with no data at all (typed fields empty) imports and runs."""
    tensor = helper.make_tensor("c", getattr(TensorProto, type_name), [0, 3], [], raw=False)
    model = model_of([helper.make_node("Cast", ["c"], ["y"], to=F32), helper.make_node("Concat", ["y", "x"], ["z"], axis=0)],
                     [V("x", F32, [2, 3])], [V("z", F32, [2, 3])], [tensor])
    got, want = run_both(model, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    assert_identical(got, want)


def test_constant_whose_data_does_not_fit_is_refused_by_name():
    """A Constant's typed data of the wrong size: onnxruntime rejects the model, and so does the pipeline, naming it."""
    tensor = helper.make_tensor("v", TensorProto.FLOAT16, [2, 3], np.zeros(6, np.float16), raw=False)
    del tensor.int32_data[4:]
    with pytest.raises(GqaTorchMlirError, match=r"attribute 'value' of node 'Constant': its data does not fit dims \[2, 3\]"):
        gqa_torch_mlir.compile(cast_model(tensor, as_constant=True), "torch")
