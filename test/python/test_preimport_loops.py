"""GroupQueryAttention inside an ONNX Loop body, next to onnxruntime.

A decode loop: each iteration runs one GQA step on the loop-carried caches
(``past_key``/``past_value`` grow by one row, ``[B,Hkv,P+i,Dh]``) and feeds
its attention output, through Tanh, back as the next query.  torch-mlir's
Loop conversion gives loop-carried values their initial values' types, so
declarations that differ (a static initial cache, a body declaring it
symbolic, a stale declared result) failed its conversion; ``preimport/loops.py``
gives each carried value one type.  What it cannot convert (scan outputs,
ranks that disagree) is refused by name.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import gqa_torch_mlir
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing.gqa_onnx import run_onnxruntime

B, S, H, HKV, DH = 1, 1, 4, 2, 16
PAST, STEPS = 2, 4


def _vi(name, dtype, dims):
    return h.make_tensor_value_info(name, dtype, dims)


def decode_loop(initial_rows, result_rows, body_rows="P", cond="cond", scan_output=False) -> onnx.ModelProto:
    """``Loop(M, cond, past_key, past_value, x)``: STEPS GQA decode steps over carried caches."""
    body_nodes = [
        h.make_node("Identity", ["cond_in"], ["cond_out"]),
        h.make_node("Shape", ["pk_in"], ["pk_shape"]),
        h.make_node("Gather", ["pk_shape", "two"], ["past_len64"], axis=0),
        h.make_node("Cast", ["past_len64"], ["past_len"], to=T.INT32),
        h.make_node("Add", ["past_len", "one"], ["total"]),
        h.make_node("Reshape", ["past_len", "shape_b"], ["seqlens_k"]),
        h.make_node("GroupQueryAttention", ["x_in", "key", "value", "pk_in", "pv_in", "seqlens_k", "total"],
                    ["attn", "pk_out", "pv_out"], domain="com.microsoft", num_heads=H, kv_num_heads=HKV, name="gqa_in_loop"),
        h.make_node("Tanh", ["attn"], ["x_out"]),
    ]
    constants = [h.make_tensor("two", T.INT64, [], [2]), h.make_tensor("one", T.INT32, [], [1]),
                 h.make_tensor("shape_b", T.INT64, [1], [B])]
    cache = lambda name, rows: _vi(name, T.FLOAT, [B, HKV, rows, DH])  # noqa: E731
    body_outputs = [_vi("cond_out", T.BOOL, []), cache("pk_out", body_rows), cache("pv_out", body_rows),
                    _vi("x_out", T.FLOAT, [B, S, H * DH])]
    if scan_output:
        body_nodes.append(h.make_node("Identity", ["attn"], ["attn_scan"]))
        body_outputs.append(_vi("attn_scan", T.FLOAT, [B, S, H * DH]))
    body = h.make_graph(body_nodes, "decode_step",
                        [_vi("i", T.INT64, []), _vi("cond_in", T.BOOL, []), cache("pk_in", body_rows),
                         cache("pv_in", body_rows), _vi("x_in", T.FLOAT, [B, S, H * DH])],
                        body_outputs, initializer=constants)
    outputs = ["present_key", "present_value", "x"] + (["attns"] if scan_output else [])
    loop = h.make_node("Loop", ["M", cond, "past_key", "past_value", "x0"], outputs, body=body, name="decode_loop")
    inputs = [_vi("M", T.INT64, []), cache("past_key", initial_rows), cache("past_value", initial_rows),
              _vi("x0", T.FLOAT, [B, S, H * DH]), _vi("key", T.FLOAT, [B, S, HKV * DH]),
              _vi("value", T.FLOAT, [B, S, HKV * DH])] + ([_vi("cond", T.BOOL, [])] if cond else [])
    graph = h.make_graph([loop], "decode", inputs,
                         [cache("present_key", result_rows), cache("present_value", result_rows),
                          _vi("x", T.FLOAT, [B, S, H * DH])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 21), h.make_opsetid("com.microsoft", 1)], ir_version=10)


def feeds(cond: bool = True) -> dict:
    rng = np.random.default_rng(7)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    out = dict(M=np.array(STEPS, np.int64), past_key=f(B, HKV, PAST, DH), past_value=f(B, HKV, PAST, DH),
               x0=f(B, S, H * DH), key=f(B, S, HKV * DH), value=f(B, S, HKV * DH))
    return {**out, "cond": np.array(True)} if cond else out


@pytest.mark.parametrize(
    "initial_rows,result_rows,cond",
    [("P0", "T", "cond"), (PAST, PAST + STEPS, "")],
    ids=["symbolic", "static_initial_and_result_empty_cond"],
)
def test_gqa_decode_loop(initial_rows, result_rows, cond):
    """Every output of the loop next to onnxruntime's (caches of PAST + STEPS rows)."""
    model = decode_loop(initial_rows, result_rows, cond=cond)
    inputs = feeds(cond=bool(cond))
    want = run_onnxruntime(model, inputs)
    got = dict(zip(want, InferenceSession(model).run(None, inputs)))
    assert got["present_key"].shape == (B, HKV, PAST + STEPS, DH)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_scan_outputs_are_refused_by_name():
    with pytest.raises(gqa_torch_mlir.LoweringError, match=r"node 'decode_loop' \(Loop\): 1 scan output\(s\) are not supported"):
        gqa_torch_mlir.compile(decode_loop("P0", "T", scan_output=True), "torch")


def test_carried_ranks_that_disagree_are_refused_by_name():
    model = decode_loop("P0", "T")
    del model.graph.input[1].type.tensor_type.shape.dim[0]  # past_key of rank 3
    with pytest.raises(gqa_torch_mlir.LoweringError, match=r"node 'decode_loop' \(Loop\): loop-carried value 0 \('past_key'\) "
                                                           r"is declared with different element types or ranks"):
        gqa_torch_mlir.compile(model, "torch")


def test_a_false_initial_condition_runs_no_iteration():
    """torch-mlir's conversion takes a for-like loop's condition as true: a cond fed false
    ran the M iterations (it is folded into M now)."""
    model = decode_loop("P0", "T")
    inputs = {**feeds(), "cond": np.array(False)}
    want = run_onnxruntime(model, inputs)
    got = dict(zip(want, InferenceSession(model).run(None, inputs)))
    np.testing.assert_array_equal(got["present_key"], inputs["past_key"])  # no step ran
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_a_condition_the_body_computes_is_refused_by_name():
    """torch-mlir's conversion ran M iterations whatever it held (a while loop ran on past its end)."""
    model = decode_loop("P0", "T")
    body = model.graph.node[0].attribute[0].g
    body.node[0].CopyFrom(h.make_node("Not", ["cond_in"], ["cond_out"]))
    with pytest.raises(gqa_torch_mlir.LoweringError, match=r"node 'decode_loop' \(Loop\): the body computes its condition "
                                                           r"\('cond_out'\), which is not supported"):
        gqa_torch_mlir.compile(model, "torch")


def _plain_loop(body_nodes, carried_in, carried_out, result, after=(), name_in="x_in") -> onnx.ModelProto:
    """``Loop(M=2, cond=true, x[2,3])`` over ``body_nodes`` (carried ``name_in`` -> ``x_out``), then ``after``."""
    body = h.make_graph(body_nodes + [h.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                        [_vi("i", T.INT64, []), _vi("cond_in", T.BOOL, []), h.make_tensor_value_info(name_in, T.FLOAT, carried_in)],
                        [_vi("cond_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, carried_out)])
    loop = h.make_node("Loop", ["M", "cond", "x"], ["y"], body=body, name="loop")
    constants = [h.make_tensor("M", T.INT64, [], [2]), h.make_tensor("cond", T.BOOL, [], [True])]
    graph = h.make_graph([loop, *after], "g", [_vi("x", T.FLOAT, [2, 3])], [result], constants)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("case", ["grows_undeclared", "body_name_shadows_a_later_value"])
def test_plain_loops_match_onnxruntime(case):
    """A carried value the body grows without declaring its shape got the initial [2,3] forced on it
    (a concat failed to lower); a body input named like a later outer value was taken for a cycle."""
    if case == "grows_undeclared":
        model = _plain_loop([h.make_node("Concat", ["x_in", "x_in"], ["x_out"], axis=0)], None, None,
                            h.make_tensor_value_info("y", T.FLOAT, None))
    else:
        model = _plain_loop([h.make_node("Neg", ["z"], ["x_out"])], [2, 3], [2, 3], _vi("z", T.FLOAT, [2, 3]),
                            after=[h.make_node("Relu", ["y"], ["z"], name="relu")], name_in="z")
    inputs = {"x": np.arange(-3, 3, dtype=np.float32).reshape(2, 3)}
    want = run_onnxruntime(model, inputs)
    got = InferenceSession(model).run(None, inputs)
    for g, w in zip(got, want.values()):
        np.testing.assert_array_equal(g, w)
