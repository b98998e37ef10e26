"""Graph-level forms around GroupQueryAttention that must WORK, checked against onnxruntime.

Two GQA nodes sharing their inputs, a GQA whose present outputs are not graph
outputs (test_gqa_outputs.py: not produced at all), a GQA in both branches of
an ``If`` or in an ONNX local function, models without an opset import for
com.microsoft or the default domain, and other graph forms onnxruntime runs
that the importer once took otherwise.  (The models that must be REFUSED are
the corpus of test_malformed.py.)
"""

from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gqa_torch_mlir
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime
from gqa_torch_mlir.testing.malformed_corpus import LEAKED
from gqa_torch_mlir.testing.malformed_models import BOOL, into_local_function


DECODE = GQAConfig(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True)
_NAMES = ("output", "present_key", "present_value")


def _ours(model: onnx.ModelProto, feeds: dict) -> Dict[str, np.ndarray]:
    sess = InferenceSession(model)
    wanted = {i.name for i in sess.get_inputs()}
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {k: v for k, v in feeds.items() if k in wanted})))


def _assert_node_matches(cfg: GQAConfig, got: dict, want: dict, feeds: dict, names: Sequence[str], what: str) -> None:
    """Compare one node's outputs, renamed to the harness's names (valid cache rows only)."""
    rename = lambda d: {std: d[n] for std, n in zip(_NAMES, names) if n in d}
    msgs = compare(cfg, rename(got), rename(want), feeds)
    assert msgs == [], f"{what}: mismatches against onnxruntime:\n  " + "\n  ".join(msgs)


def _typed_outputs(cfg: GQAConfig, names: Sequence[str]) -> List[onnx.ValueInfoProto]:
    base = {o.name: o for o in make_model(cfg).graph.output}
    outs = []
    for std, name in zip(_NAMES, names):
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(base[std])
        vi.name = name
        outs.append(vi)
    return outs


def test_two_nodes_share_query_and_past():
    """Two GQA nodes read the same query/key/value/past/rotary inputs with different attributes."""
    cfg = DECODE
    model = make_model(cfg)
    g = model.graph
    first = g.node[0]
    second = onnx.NodeProto()
    second.CopyFrom(first)
    second.name = "gqa_window"
    del second.output[:]
    second.output.extend(["output_w", "present_key_w", "present_value_w"])
    second.attribute.extend([helper.make_attribute("local_window_size", 2), helper.make_attribute("softcap", 3.0)])
    g.node.append(second)
    g.output.extend(_typed_outputs(cfg, second.output))
    feeds = make_inputs(cfg, seed=11)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    _assert_node_matches(cfg, got, want, feeds, _NAMES, "first node")
    _assert_node_matches(cfg, got, want, feeds, list(second.output), "second node (window 2, softcap 3)")
    assert not np.allclose(want["output"], want["output_w"]), "the two nodes should differ"


def test_present_outputs_not_graph_outputs():
    """The node has its three outputs but only ``output`` is a graph output."""
    cfg = DECODE
    model = make_model(cfg)
    del model.graph.output[1:]
    feeds = make_inputs(cfg, seed=12)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert sorted(got) == sorted(want) == ["output"]
    assert compare(cfg, got, want, feeds) == []


def _branch(cfg: GQAConfig, node: onnx.NodeProto, suffix: str, attrs: dict) -> onnx.GraphProto:
    """A subgraph with one GQA node reading the outer graph's inputs."""
    n = onnx.NodeProto()
    n.CopyFrom(node)
    n.name = f"gqa_{suffix}"
    del n.output[:]
    names = [f"{x}_{suffix}" for x in _NAMES]
    n.output.extend(names)
    for k, v in attrs.items():
        n.attribute.append(helper.make_attribute(k, v))
    return helper.make_graph([n], f"branch_{suffix}", [], _typed_outputs(cfg, names))


@pytest.mark.parametrize("cond", [True, False])
def test_gqa_inside_if_branches(cond: bool):
    """An If on a bool graph input, with a GQA in each branch (different attributes)."""
    cfg = DECODE
    model = make_model(cfg)
    g = model.graph
    gqa = g.node[0]
    then_g = _branch(cfg, gqa, "then", {})
    else_g = _branch(cfg, gqa, "else", {"local_window_size": 2, "softcap": 3.0})
    if_node = helper.make_node("If", ["cond"], list(_NAMES), name="if", then_branch=then_g, else_branch=else_g)
    del g.node[:]
    g.node.append(if_node)
    g.input.append(helper.make_tensor_value_info("cond", BOOL, []))
    feeds = {**make_inputs(cfg, seed=13), "cond": np.asarray(cond)}
    want = run_onnxruntime(model, feeds)
    got = _ours(model, feeds)
    assert compare(cfg, got, want, feeds) == []


def test_model_without_com_microsoft_opset_import():
    """onnxruntime runs a model whose opset_import lacks com.microsoft (it takes the
    domain's latest version).  The pipeline should run it too, or refuse it with a
    message naming the missing domain -- not leak an importer exception."""
    cfg = DECODE
    model = make_model(cfg)
    kept = [o for o in model.opset_import if o.domain != "com.microsoft"]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    feeds = make_inputs(cfg, seed=14)
    want = run_onnxruntime(model, feeds)
    try:
        got = _ours(model, feeds)
    except GqaTorchMlirError as e:
        message = str(e)
        leaked = [w for w in LEAKED if w in message]
        assert "com.microsoft" in message and not leaked, f"unclear refusal of a model onnxruntime runs: {message}"
        return
    assert compare(cfg, got, want, feeds) == []


def test_unnamed_output_qk_is_not_requested():
    """Outputs [output, present_key, present_value, ""] with qk_output 0: the empty name asks for nothing."""
    cfg = DECODE
    model = make_model(cfg)
    model.graph.node[0].output.append("")
    feeds = make_inputs(cfg, seed=15)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert sorted(got) == sorted(want)
    assert compare(cfg, got, want, feeds) == []


def test_gqa_inside_a_local_function():
    """A GQA in an ONNX local function's body is inlined, lowered and checked like any other."""
    cfg = DECODE
    model = make_model(cfg)
    into_local_function(model)
    feeds = make_inputs(cfg, seed=16)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert compare(cfg, got, want, feeds) == []
    model.functions[0].node[0].attribute.append(helper.make_attribute("causal", 2))
    with pytest.raises(GqaTorchMlirError, match="attribute 'causal': value 2 is not supported"):
        gqa_torch_mlir.compile(model, "torch")


def test_if_branches_without_com_microsoft_opset_import():
    """The domain of a GQA that only occurs in If branches gets its opset import too."""
    cfg = DECODE
    model = make_model(cfg)
    g = model.graph
    gqa = g.node[0]
    if_node = helper.make_node("If", ["cond"], list(_NAMES), name="if", then_branch=_branch(cfg, gqa, "then", {}),
                               else_branch=_branch(cfg, gqa, "else", {"softcap": 3.0}))
    del g.node[:]
    g.node.append(if_node)
    g.input.append(helper.make_tensor_value_info("cond", BOOL, []))
    kept = [o for o in model.opset_import if o.domain != "com.microsoft"]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    feeds = {**make_inputs(cfg, seed=17), "cond": np.asarray(False)}
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert compare(cfg, got, want, feeds) == []


def test_default_domain_declared_as_ai_onnx():
    """An opset import for "ai.onnx" (the default domain's alias, as onnxruntime reads it)."""
    cfg = DECODE
    model = make_model(cfg)
    for o in model.opset_import:
        if o.domain == "":
            o.domain = "ai.onnx"
    feeds = make_inputs(cfg, seed=18)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert compare(cfg, got, want, feeds) == []


def test_graph_output_declared_without_a_type():
    """onnxruntime infers a graph output's type when the model gives none; so does the pipeline."""
    cfg = DECODE
    model = make_model(cfg)
    model.graph.output[0].ClearField("type")
    feeds = make_inputs(cfg, seed=19)
    got, want = _ours(model, feeds), run_onnxruntime(model, feeds)
    assert compare(cfg, got, want, feeds) == []


FORMS = GQAConfig(batch=1, seq=1, past=4, rotary=True)  # every present row specified


def _first_of_two_initializers(model):
    past = make_inputs(FORMS, seed=20)["past_key"]
    model.graph.initializer.extend([onnx.numpy_helper.from_array(past, "past_key"), onnx.numpy_helper.from_array(past * 3, "past_key")])
    kept = [i for i in model.graph.input if i.name != "past_key"]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return {"past_key"}


def _reversed_nodes(model):
    model.graph.node.append(helper.make_node("Identity", ["q"], ["query_id"], name="later"))  # after its reader
    model.graph.node[0].input[0] = "query_id"
    next(i for i in model.graph.input if i.name == "query").name = "q"
    return set()


def _negative_dims(model):
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = -3
    return set()


def _no_graph_name(model):
    model.graph.name = ""
    return set()


def _no_default_opset(model):
    kept = [o for o in model.opset_import if o.domain != ""]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    return set()


@pytest.mark.parametrize("edit", [_first_of_two_initializers, _reversed_nodes, _negative_dims, _no_graph_name, _no_default_opset],
                         ids=lambda f: f.__name__.strip("_"))
def test_graph_forms_onnxruntime_reads(edit):
    """Forms onnxruntime runs and the importer took otherwise: an initializer given twice (the first
    counts; ours used the last, silently), nodes out of order, a dim_value of -3, an empty graph name,
    no default-domain opset import (each failed in the importer or torch-mlir before)."""
    model = make_model(FORMS)
    fed_by_initializers = edit(model)
    feeds = {k: v for k, v in make_inputs(FORMS, seed=20).items() if k not in fed_by_initializers}
    if "q" in {i.name for i in model.graph.input}:
        feeds["q"] = feeds.pop("query")
    want = run_onnxruntime(model, feeds)
    got = _ours(model, feeds)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_stale_static_dims_of_graph_outputs_are_ignored_as_onnxruntime_does(backend, tmp_path):
    """Outputs of ordinary ops declared with static dims the run contradicts (a [batch, 1, N]
    logits fed a 3-token step, a batch of 2 fed 1): onnxruntime computes them (it warns).
    The importer trusted the declarations: row 0 only on iree-cpu, a read past the buffer,
    a double free on the refbackend.  In a child process, under runtime verification."""
    from onnx import numpy_helper

    from gqa_torch_mlir.testing.isolated import run_isolated

    cfg = GQAConfig(batch=1, seq=3, past=4, rotary=True, dynamic=True)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=21)
    width = cfg.num_heads * cfg.head_size
    weight = np.random.default_rng(0).standard_normal((width, 5)).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(weight, "w"))
    model.graph.node.append(helper.make_node("MatMul", ["output", "w"], ["logits"], name="lm_head"))
    model.graph.node.append(helper.make_node("Relu", ["logits"], ["relu"], name="relu"))
    model.graph.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1, 5]))
    model.graph.output.append(helper.make_tensor_value_info("relu", TensorProto.FLOAT, [2, "seq", 5]))
    want = run_onnxruntime(model, feeds)
    got = run_isolated(model, feeds, tmp_path, backend=backend)
    assert got.results is not None, got.describe()
    for name in ("logits", "relu", "output"):
        np.testing.assert_allclose(got.results[name], want[name], atol=1e-4, err_msg=name)


def test_graph_attributes_of_ops_we_do_not_lower_are_left_to_the_importer():
    """BeamSearch, If and friends take graphs: only ops we lower are checked for a graph attribute."""
    from gqa_torch_mlir.preimport import prepare_for_import

    model = make_model(DECODE)
    body = helper.make_graph([], "decoder", [], [])
    model.graph.node.append(helper.make_node("BeamSearch", ["query"], ["beams"], domain="com.microsoft", decoder=body))
    prepare_for_import(model)  # no refusal
    model.graph.node[0].attribute.append(helper.make_attribute("decoder", body))
    with pytest.raises(GqaTorchMlirError, match="attribute 'decoder' is a graph, which GroupQueryAttention does not take"):
        prepare_for_import(model)
