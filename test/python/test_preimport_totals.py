"""GroupQueryAttention's total_sequence_length computed from a shape, as onnxruntime-genai's builder
computes it (``Cast(Gather(Shape(attention_mask), 1))``), read by the op from
``Cast(Shape(attention_mask, start=1, end=2))`` after ``prepare_for_import`` (preimport/totals.py),
so that the lowering knows it on the host; every other form is left as it is.  The rewritten
models still agree with onnxruntime (the fast tier: the default index and -1).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import LoweringError
from gqa_torch_mlir.preimport import prepare_for_import
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime
from gqa_torch_mlir.testing.tiers import EXTENDED

CFG = GQAConfig(batch=1, seq=1, past=9, past_lens=(6,), fixed_capacity=True, dynamic=True, mask=True)


def total_source(proto: onnx.ModelProto):
    """The nodes that compute the GroupQueryAttention's total, from the op back to a graph value."""
    producers = {out: node for node in proto.graph.node for out in node.output}
    (gqa,) = [n for n in proto.graph.node if n.op_type == "GroupQueryAttention"]
    chain, name = [], gqa.input[6]
    while name in producers:
        node = producers[name]
        chain.append(node)
        name = node.input[0]
    return chain


def attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def with_width_index(model: onnx.ModelProto, index, as_input: bool = False) -> onnx.ModelProto:
    """``model`` with the Gather of the mask's shape at ``index`` (an initializer, or a graph input
    whose default it is)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    (gather,) = [n for n in graph.node if n.op_type == "Gather"]
    init = helper.make_tensor("width_index", TensorProto.INT64, np.shape(index), np.ravel(index).tolist())
    graph.initializer.append(init)
    if as_input:
        graph.input.append(helper.make_tensor_value_info("width_index", TensorProto.INT64, list(np.shape(index))))
    gather.input[1] = "width_index"
    return model


def test_the_builders_total_is_read_from_the_shape():
    prepared = prepare_for_import(make_model(CFG))
    cast, shape = total_source(prepared)
    assert (cast.op_type, attrs(cast)) == ("Cast", {"to": TensorProto.INT32})
    assert (shape.op_type, shape.input[0], attrs(shape)) == ("Shape", "attention_mask", {"start": 1, "end": 2})
    assert any(n.op_type == "Gather" for n in prepared.graph.node)  # kept for any other reader


@pytest.mark.parametrize("index,start", [(-1, -1), ([1], 1), (-2, -2)])
def test_other_constant_indices(index, start):
    """A negative index (the last dim as ``start=-1`` with no end) or a one-element one; the total
    as onnxruntime computes it (-2 is the batch size 1 here: a first prompt then)."""
    model = with_width_index(make_model(CFG), index)
    cast, shape = total_source(prepare_for_import(model))
    assert attrs(shape) == ({"start": -1} if start == -1 else {"start": start, "end": start + 1})
    if start == -1 or (EXTENDED and start != -2):  # numbers against onnxruntime (the fast tier: the last dim)
        feeds = make_inputs(CFG, seed=3)
        got = InferenceSession(model, backend="iree-cpu", threads=1).run(None, feeds)
        names = ["output", "present_key", "present_value"]
        assert not compare(CFG, dict(zip(names, got)), run_onnxruntime(model, feeds), feeds)


@pytest.mark.parametrize("index,as_input", [(1, True), ([[1]], False)], ids=["an_input_s_default", "two_dims"])
def test_forms_left_as_they_are(index, as_input):
    """An index a feed may replace, or one of more than one dim: the Gather stays the total's."""
    chain = total_source(prepare_for_import(with_width_index(make_model(CFG), index, as_input)))
    assert [n.op_type for n in chain] == ["Cast", "Gather", "Shape"]


@pytest.mark.parametrize("index", [2, -3])
def test_an_index_outside_the_rank_is_still_refused(index):
    """onnxruntime's Gather fails the step there (Shape would clamp it): refused by name, as before."""
    with pytest.raises(LoweringError, match="'mask_width' \\(Gather\\): input 1 'indices' holds"):
        prepare_for_import(with_width_index(make_model(CFG), index))


def test_a_total_fed_as_an_input_is_left_alone():
    assert total_source(prepare_for_import(make_model(GQAConfig(batch=1, seq=1, past=9, past_lens=(6,), fixed_capacity=True, dynamic=True)))) == []


def test_an_index_marked_as_external_data_is_left_alone():
    """An initializer marked as external data (its bytes in memory: check-loading lets it through)
    is not read back from a file that is not there: the Gather stays the total's."""
    model = with_width_index(make_model(CFG), 1)
    (init,) = [i for i in model.graph.initializer if i.name == "width_index"]
    init.raw_data = np.array(1, np.int64).tobytes()
    del init.int64_data[:]
    init.data_location = TensorProto.EXTERNAL
    init.external_data.add(key="location", value="not-there.bin")
    chain = total_source(prepare_for_import(model))
    assert [n.op_type for n in chain] == ["Cast", "Gather", "Shape"]
