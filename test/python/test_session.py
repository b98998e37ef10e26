"""InferenceSession and compile(): onnxruntime-style API behaviour.

* get_inputs()/get_outputs() agree field by field with onnxruntime's;
* run() output selection and ordering, and the errors it raises for bad feeds;
* compile(model, output_type=...) at each level, checked with FileCheck;
* loading errors for paths that are missing or not ONNX models.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import gqa_torch_mlir
from gqa_torch_mlir.options import LoweringOptions
from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError, RuntimeInvocationError
from gqa_torch_mlir.testing.filecheck import filecheck
from gqa_torch_mlir.testing.gqa_onnx import (
    GQAConfig,
    compare,
    make_inputs,
    make_model,
    run_onnxruntime,
)



# The FileCheck tests of the torch level spell out the SDPA form (the
# decomposed one has its own lit test, gqa_attention_forms.mlir).
SDPA = LoweringOptions(attention="sdpa")

def ort_session(model: onnx.ModelProto):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------

DECODE = GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True)


def _reorder(values, order):
    by_name = {v.name: v for v in values}
    items = [by_name[n] for n in order]
    del values[:]
    values.extend(items)


def _model_rotary_initializers(cfg: GQAConfig) -> onnx.ModelProto:
    """cos/sin caches as initializers, not graph inputs."""
    model = make_model(cfg)
    feeds = make_inputs(cfg)
    for name in ("cos_cache", "sin_cache"):
        model.graph.input.remove(next(i for i in model.graph.input if i.name == name))
        model.graph.initializer.append(numpy_helper.from_array(feeds[name], name))
    return model


def _model_rotary_overridable(cfg: GQAConfig) -> onnx.ModelProto:
    """cos/sin caches as initializers that are also listed as graph inputs."""
    model = make_model(cfg)
    feeds = make_inputs(cfg)
    for name in ("cos_cache", "sin_cache"):
        model.graph.initializer.append(numpy_helper.from_array(feeds[name], name))
    return model


def _model_unknown_batch(cfg: GQAConfig) -> onnx.ModelProto:
    """Every batch dim cleared: neither dim_value nor dim_param (onnxruntime reports None)."""
    model = make_model(cfg)
    for vi in list(model.graph.input) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims and vi.name not in ("cos_cache", "sin_cache"):
            dims[0].Clear()
    return model


def _model_reordered_outputs(cfg: GQAConfig) -> onnx.ModelProto:
    model = make_model(cfg)
    _reorder(model.graph.output, ["present_value", "output", "present_key"])
    return model


def _model_reordered_inputs(cfg: GQAConfig) -> onnx.ModelProto:
    model = make_model(cfg)
    _reorder(model.graph.input, [i.name for i in model.graph.input][::-1])
    return model


SIGNATURE_MODELS = {
    "static-decode-rot": lambda: make_model(DECODE),
    "dynamic-rot": lambda: make_model(GQAConfig(batch=1, seq=3, past=4, rotary=True, dynamic=True)),
    "packed-f16-mqa": lambda: make_model(GQAConfig(batch=1, seq=5, past=0, packed=True, dtype="float16", num_heads=4, kv_num_heads=1)),
    "rotary-initializers": lambda: _model_rotary_initializers(DECODE),
    "rotary-overridable-initializers": lambda: _model_rotary_overridable(DECODE),
    "unknown-batch-dims": lambda: _model_unknown_batch(DECODE),
    "reordered-outputs": lambda: _model_reordered_outputs(DECODE),
    "reordered-inputs": lambda: _model_reordered_inputs(DECODE),
}


@pytest.fixture(scope="module")
def decode_session() -> InferenceSession:
    return InferenceSession(make_model(DECODE))


@pytest.fixture(scope="module")
def decode_feeds() -> dict:
    return make_inputs(DECODE, seed=3)


# ---------------------------------------------------------------------------
# get_inputs / get_outputs
# ---------------------------------------------------------------------------


def _fields(args) -> list[tuple]:
    return [(a.name, list(a.shape), a.type) for a in args]


@pytest.mark.parametrize("which", list(SIGNATURE_MODELS))
def test_signature_matches_onnxruntime(which: str):
    model = SIGNATURE_MODELS[which]()
    ours, theirs = InferenceSession(model), ort_session(model)
    for kind in ("get_inputs", "get_outputs"):
        got, want = _fields(getattr(ours, kind)()), _fields(getattr(theirs, kind)())
        assert [g[0] for g in got] == [w[0] for w in want], f"{kind} names"
        for g, w in zip(got, want):
            assert g[1] == w[1], f"{kind} {g[0]}: shape {g[1]} != onnxruntime's {w[1]}"
            assert g[2] == w[2], f"{kind} {g[0]}: type {g[2]} != onnxruntime's {w[2]}"


def test_signature_values_spelled_out():
    """The dynamic rotary model, written out: ints, symbolic names, [] for the scalar."""
    sess = InferenceSession(make_model(GQAConfig(batch=1, seq=3, past=4, rotary=True, dynamic=True)))
    assert _fields(sess.get_inputs()) == [
        ("query", ["batch", "seq", 64], "tensor(float)"),
        ("key", ["batch", "seq", 32], "tensor(float)"),
        ("value", ["batch", "seq", 32], "tensor(float)"),
        ("past_key", ["batch", 2, "past", 16], "tensor(float)"),
        ("past_value", ["batch", 2, "past", 16], "tensor(float)"),
        ("seqlens_k", ["batch"], "tensor(int32)"),
        ("total_sequence_length", [], "tensor(int32)"),
        ("cos_cache", ["max_seq", 8], "tensor(float)"),
        ("sin_cache", ["max_seq", 8], "tensor(float)"),
    ]
    assert _fields(sess.get_outputs()) == [
        ("output", ["batch", "seq", 64], "tensor(float)"),
        ("present_key", ["batch", 2, "total", 16], "tensor(float)"),
        ("present_value", ["batch", 2, "total", 16], "tensor(float)"),
    ]
    f16 = InferenceSession(make_model(GQAConfig(dtype="float16")))
    assert [a.type for a in f16.get_inputs()] == ["tensor(float16)"] * 5 + ["tensor(int32)"] * 2


# ---------------------------------------------------------------------------
# run: output selection and order
# ---------------------------------------------------------------------------


def test_run_options_are_refused_not_ignored(decode_session, decode_feeds):
    with pytest.raises(RuntimeInvocationError, match=r"run_options is not supported \(got dict\); pass None"):
        decode_session.run(None, decode_feeds, {"log_severity_level": 0})
    binding = decode_session.io_binding()
    with pytest.raises(RuntimeInvocationError, match="run_options is not supported"):
        decode_session.run_with_iobinding(binding, run_options=object())


def test_run_none_returns_all_outputs_in_graph_order(decode_session, decode_feeds):
    got = decode_session.run(None, decode_feeds)
    want = ort_session(make_model(DECODE)).run(None, decode_feeds)
    assert len(got) == len(want) == 3
    names = [o.name for o in decode_session.get_outputs()]
    assert names == ["output", "present_key", "present_value"]
    assert [g.shape for g in got] == [w.shape for w in want]
    assert compare(DECODE, dict(zip(names, got)), dict(zip(names, want)), decode_feeds) == []


def test_run_empty_list_means_all_outputs(decode_session, decode_feeds):
    # onnxruntime treats [] like None
    got = decode_session.run([], decode_feeds)
    assert len(got) == 3
    for a, b in zip(got, decode_session.run(None, decode_feeds)):
        np.testing.assert_array_equal(a, b)


def test_run_follows_graph_output_order_when_reordered():
    model = _model_reordered_outputs(DECODE)
    feeds = make_inputs(DECODE, seed=4)
    sess = InferenceSession(model)
    order = ["present_value", "output", "present_key"]
    assert [o.name for o in sess.get_outputs()] == order
    got, want = sess.run(None, feeds), ort_session(model).run(None, feeds)
    assert [g.shape for g in got] == [w.shape for w in want] == [(2, 2, 8, 16), (2, 1, 64), (2, 2, 8, 16)]
    # positional: result i is compared with onnxruntime's result i under the same name
    assert compare(DECODE, dict(zip(order, got)), dict(zip(order, want)), feeds) == []


def test_run_with_graph_inputs_reordered():
    model = _model_reordered_inputs(DECODE)
    feeds = make_inputs(DECODE, seed=5)
    sess = InferenceSession(model)
    assert [i.name for i in sess.get_inputs()][0] == "sin_cache"
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(None, feeds)))
    assert compare(DECODE, got, run_onnxruntime(model, feeds), feeds) == []


def test_run_selected_output_only(decode_session, decode_feeds):
    (present_key,) = decode_session.run(["present_key"], decode_feeds)
    full = dict(zip([o.name for o in decode_session.get_outputs()], decode_session.run(None, decode_feeds)))
    np.testing.assert_array_equal(present_key, full["present_key"])
    want = run_onnxruntime(make_model(DECODE), decode_feeds)
    assert compare(DECODE, {"present_key": present_key}, {"present_key": want["present_key"]}, decode_feeds) == []


def test_run_selected_outputs_in_requested_order(decode_session, decode_feeds):
    value, out = decode_session.run(["present_value", "output"], decode_feeds)
    assert value.shape == (2, 2, 8, 16) and out.shape == (2, 1, 64)
    want = run_onnxruntime(make_model(DECODE), decode_feeds)
    got = {"present_value": value, "output": out}
    assert compare(DECODE, got, {k: want[k] for k in got}, decode_feeds) == []


def test_run_overridable_initializer_not_fed():
    """cos/sin are initializers also listed as graph inputs: run without feeding them."""
    model = _model_rotary_overridable(DECODE)
    feeds = make_inputs(DECODE, seed=6)
    sess = InferenceSession(model)
    run_feeds = {k: v for k, v in feeds.items() if k not in ("cos_cache", "sin_cache")}
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, run_feeds)))
    assert compare(DECODE, got, run_onnxruntime(model, run_feeds), feeds) == []


# ---------------------------------------------------------------------------
# run: errors
# ---------------------------------------------------------------------------


def _raises_naming(sess, output_names, feed, *words):
    with pytest.raises(RuntimeInvocationError) as info:
        sess.run(output_names, feed)
    for word in words:
        assert word in str(info.value), f"{word!r} not in message: {info.value}"
    return info.value


def test_unknown_output_name(decode_session, decode_feeds):
    _raises_naming(decode_session, ["output", "no_such_output"], decode_feeds, "no_such_output")


def test_missing_input(decode_session, decode_feeds):
    feed = {k: v for k, v in decode_feeds.items() if k != "seqlens_k"}
    _raises_naming(decode_session, None, feed, "seqlens_k", "missing")


def test_unknown_input_name(decode_session, decode_feeds):
    _raises_naming(decode_session, None, {**decode_feeds, "bogus_input": decode_feeds["query"]}, "bogus_input")


@pytest.mark.parametrize(
    "name, dtype, type_name",
    [("query", np.float64, "tensor(float)"), ("past_value", np.float16, "tensor(float)"),
     ("seqlens_k", np.int64, "tensor(int32)"), ("total_sequence_length", np.int64, "tensor(int32)")],
)
def test_wrong_dtype(decode_session, decode_feeds, name, dtype, type_name):
    feed = {**decode_feeds, name: decode_feeds[name].astype(dtype)}
    _raises_naming(decode_session, None, feed, f"'{name}'", type_name, np.dtype(dtype).name)


@pytest.mark.parametrize(
    "name, reshape",
    [("query", lambda a: a[0]), ("past_key", lambda a: a[None]), ("total_sequence_length", lambda a: a.reshape(1)),
     ("seqlens_k", lambda a: a.reshape(2, 1))],
    ids=["query-rank2", "past_key-rank5", "total_sequence_length-rank1", "seqlens_k-rank2"],
)
def test_wrong_rank(decode_session, decode_feeds, name, reshape):
    feed = {**decode_feeds, name: reshape(decode_feeds[name])}
    _raises_naming(decode_session, None, feed, f"'{name}'", "rank")


def test_wrong_static_dimension(decode_session, decode_feeds):
    feed = {**decode_feeds, "key": np.zeros((2, 1, 48), np.float32)}
    _raises_naming(decode_session, None, feed, "'key'", "dimension 2", "32")


def test_unknown_backend():
    with pytest.raises(GqaTorchMlirError, match="nope"):
        InferenceSession(make_model(DECODE), backend="nope")


# ---------------------------------------------------------------------------
# compile(): output types, FileCheck'ed
# ---------------------------------------------------------------------------


# Static decode, rotary, ragged batch: B=2, S=1, P=7, T=8, H=4, Hkv=2, Dh=16, M=16. SDPA reads the
# present caches with the rows a batch row does not read zeroed (a NaN there must not reach it).
STATIC_TORCH_ARGS = (
    "%arg0: !torch.vtensor<[2,1,64],f32>, %arg1: !torch.vtensor<[2,1,32],f32>, %arg2: !torch.vtensor<[2,1,32],f32>, "
    "%arg3: !torch.vtensor<[2,2,7,16],f32>, %arg4: !torch.vtensor<[2,2,7,16],f32>, %arg5: !torch.vtensor<[2],si32>, "
    "%arg6: !torch.vtensor<[],si32>, %arg7: !torch.vtensor<[16,8],f32>, %arg8: !torch.vtensor<[16,8],f32>"
)
STATIC_TORCH_RESULTS = "!torch.vtensor<[2,1,64],f32>, !torch.vtensor<[2,2,8,16],f32>, !torch.vtensor<[2,2,8,16],f32>"

# No ONNX op is left, anywhere in the module (a file of NOT lines checks the whole input).
NO_ONNX_CHECKS = """
    NOONNX-NOT: torch.operator
    NOONNX-NOT: onnx.GroupQueryAttention
"""

TORCH_CHECKS = f"""
    TORCH-LABEL: func.func @{{{{.+}}}}({STATIC_TORCH_ARGS}) -> ({STATIC_TORCH_RESULTS})
    TORCH:       torch.aten.index.Tensor %arg7, {{{{.+}}}} -> !torch.vtensor<[2,1,8],f32>
    TORCH:       torch.aten.index.Tensor %arg8, {{{{.+}}}} -> !torch.vtensor<[2,1,8],f32>
    TORCH:       torch.aten.slice.Tensor %arg3, {{{{.+}}}} -> !torch.vtensor<[2,2,0,16],f32>
    TORCH:       torch.aten.cat {{{{.+}}}} -> !torch.vtensor<[2,2,8,16],f32>
    TORCH:       torch.aten.slice.Tensor %arg4, {{{{.+}}}} -> !torch.vtensor<[2,2,0,16],f32>
    TORCH:       torch.aten.cat {{{{.+}}}} -> !torch.vtensor<[2,2,8,16],f32>
    TORCH:       %[[PK:.+]] = torch.aten.scatter.src {{{{.+}}}} -> !torch.vtensor<[2,2,8,16],f32>
    TORCH:       %[[PV:.+]] = torch.aten.scatter.src {{{{.+}}}} -> !torch.vtensor<[2,2,8,16],f32>
    TORCH:       %[[READ_K:.+]] = torch.aten.where.ScalarOther %{{{{[^,]+}}}}, %[[PK]], {{{{.+}}}} -> !torch.vtensor<[2,2,8,16],f32>
    TORCH:       %[[READ_V:.+]] = torch.aten.where.ScalarOther %{{{{[^,]+}}}}, %[[PV]], {{{{.+}}}} -> !torch.vtensor<[2,2,8,16],f32>
    TORCH:       %[[ATTN:.+]] = torch.aten.scaled_dot_product_attention %{{{{[^,]+}}}}, %[[READ_K]], %[[READ_V]], %{{{{[^,]+}}}}, %{{{{[^,]+}}}}, %false{{{{[_0-9]*}}}}, %none{{{{[_0-9]*}}}}, %true{{{{[_0-9]*}}}} : !torch.vtensor<[2,4,1,16],f32>, !torch.vtensor<[2,2,8,16],f32>, !torch.vtensor<[2,2,8,16],f32>, !torch.vtensor<[2,1,1,8],f32>, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[2,4,1,16],f32>
    TORCH:       torch.aten.transpose.int %[[ATTN]], {{{{.+}}}} -> !torch.vtensor<[2,1,4,16],f32>
    TORCH:       return %{{{{.+}}}}, %[[PK]], %[[PV]] : {STATIC_TORCH_RESULTS}
"""

BACKEND_CHECKS = f"""
    BACKEND-LABEL: func.func @{{{{.+}}}}({STATIC_TORCH_ARGS}) -> ({STATIC_TORCH_RESULTS})
    BACKEND-NOT:   torch.aten.view
    BACKEND:       %[[PK:.+]] = torch.aten.scatter.src {{{{.+}}}} -> !torch.vtensor<[2,2,8,16],f32>
    BACKEND:       %[[PV:.+]] = torch.aten.scatter.src {{{{.+}}}} -> !torch.vtensor<[2,2,8,16],f32>
    BACKEND:       %[[READ_K:.+]] = torch.aten.where.self %{{{{[^,]+}}}}, %[[PK]], {{{{.+}}}} -> !torch.vtensor<[2,2,8,16],f32>
    BACKEND:       %[[READ_V:.+]] = torch.aten.where.self %{{{{[^,]+}}}}, %[[PV]], {{{{.+}}}} -> !torch.vtensor<[2,2,8,16],f32>
    BACKEND:       torch.aten.scaled_dot_product_attention %{{{{[^,]+}}}}, %[[READ_K]], %[[READ_V]], {{{{.+}}}} -> !torch.vtensor<[2,4,1,16],f32>
    BACKEND:       return %{{{{.+}}}}, %[[PK]], %[[PV]] : {STATIC_TORCH_RESULTS}
"""

LINALG_CHECKS = """
    LINALG-LABEL: func.func @{{.+}}(%arg0: tensor<2x1x64xf32>, %arg1: tensor<2x1x32xf32>, %arg2: tensor<2x1x32xf32>, %arg3: tensor<2x2x7x16xf32>, %arg4: tensor<2x2x7x16xf32>, %arg5: tensor<2xi32>, %arg6: tensor<i32>, %arg7: tensor<16x8xf32>, %arg8: tensor<16x8xf32>) -> (tensor<2x1x64xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
    LINALG:       linalg.transpose
    LINALG:       linalg.generic
    LINALG:       tm_tensor.scatter
    LINALG:       tm_tensor.scatter
    LINALG:       tm_tensor.attention
    LINALG:       return {{.+}} : tensor<2x1x64xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
"""

# At linalg-on-tensors nothing of the torch dialect remains: no ops, no types.
NO_TORCH_CHECKS = """
    NOTORCH-NOT: torch.aten
    NOTORCH-NOT: torch.prim
    NOTORCH-NOT: torch.constant
    NOTORCH-NOT: !torch.
"""

LEVEL_CHECKS = {
    "torch": [("TORCH", TORCH_CHECKS), ("NOONNX", NO_ONNX_CHECKS)],
    "torch-backend": [("BACKEND", BACKEND_CHECKS), ("NOONNX", NO_ONNX_CHECKS)],
    "linalg-on-tensors": [("LINALG", LINALG_CHECKS), ("NOONNX", NO_ONNX_CHECKS), ("NOTORCH", NO_TORCH_CHECKS)],
}


@pytest.mark.parametrize("output_type", list(LEVEL_CHECKS))
def test_compile_output_types(output_type: str, tmp_path):
    assert output_type in gqa_torch_mlir.OUTPUT_TYPES
    module = gqa_torch_mlir.compile(make_model(DECODE), output_type=output_type, options=SDPA)
    text = str(module)
    for prefix, checks in LEVEL_CHECKS[output_type]:
        filecheck(text, checks, tmp_path, prefix)


DYNAMIC_PACKED = GQAConfig(batch=1, seq=3, past=4, packed=True, dtype="float16", dynamic=True)

DYNAMIC_PACKED_TORCH_CHECKS = """
    DYN-LABEL: func.func @{{.+}}(%arg0: !torch.vtensor<[?,?,128],f16>, %arg1: !torch.vtensor<[?,2,?,16],f16>, %arg2: !torch.vtensor<[?,2,?,16],f16>, %arg3: !torch.vtensor<[?],si32>, %arg4: !torch.vtensor<[],si32>) -> (!torch.vtensor<[?,?,64],f16>, !torch.vtensor<[?,2,?,16],f16>, !torch.vtensor<[?,2,?,16],f16>)
    DYN:       %[[HEADS:.+]] = torch.aten.unflatten.int %arg0, %int2, {{.+}} -> !torch.vtensor<[?,?,8,16],f16>
    DYN:       %[[QKV:.+]] = torch.aten.transpose.int %[[HEADS]], %int1, %int2 : {{.+}} -> !torch.vtensor<[?,8,?,16],f16>
    DYN-DAG:   torch.aten.slice.Tensor %[[QKV]], %int1, %int0, %int4, %int1 : {{.+}} -> !torch.vtensor<[?,4,?,16],f16>
    DYN-DAG:   torch.aten.slice.Tensor %[[QKV]], %int1, %int4, %int6, %int1 : {{.+}} -> !torch.vtensor<[?,2,?,16],f16>
    DYN-DAG:   torch.aten.slice.Tensor %[[QKV]], %int1, %int6, %int8, %int1 : {{.+}} -> !torch.vtensor<[?,2,?,16],f16>
    DYN:       torch.aten.scaled_dot_product_attention {{.+}} : !torch.vtensor<[?,4,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,2,?,16],f32>, !torch.vtensor<[?,1,?,?],f32>, {{.+}} -> !torch.vtensor<[?,4,?,16],f32>
    DYN:       return {{.+}} : !torch.vtensor<[?,?,64],f16>, !torch.vtensor<[?,2,?,16],f16>, !torch.vtensor<[?,2,?,16],f16>
"""

DYNAMIC_PACKED_LINALG_CHECKS = """
    DYNL-LABEL: func.func @{{.+}}(%arg0: tensor<?x?x128xf16>, %arg1: tensor<?x2x?x16xf16>, %arg2: tensor<?x2x?x16xf16>, %arg3: tensor<?xi32>, %arg4: tensor<i32>) -> (tensor<?x?x64xf16>, tensor<?x2x?x16xf16>, tensor<?x2x?x16xf16>)
    DYNL:       tm_tensor.attention
    DYNL:       return {{.+}} : tensor<?x?x64xf16>, tensor<?x2x?x16xf16>, tensor<?x2x?x16xf16>
"""


def test_compile_dynamic_packed_f16(tmp_path):
    model = make_model(DYNAMIC_PACKED)
    torch_text = str(gqa_torch_mlir.compile(model, output_type="torch", options=SDPA))
    filecheck(torch_text, DYNAMIC_PACKED_TORCH_CHECKS, tmp_path, "DYN")
    filecheck(torch_text, NO_ONNX_CHECKS, tmp_path, "NOONNX")
    linalg_text = str(gqa_torch_mlir.compile(model, output_type="linalg-on-tensors", options=SDPA))
    filecheck(linalg_text, DYNAMIC_PACKED_LINALG_CHECKS, tmp_path, "DYNL")
    filecheck(linalg_text, NO_TORCH_CHECKS, tmp_path, "NOTORCH")


def test_compile_default_output_type_is_linalg(tmp_path):
    text = str(gqa_torch_mlir.compile(make_model(DECODE), options=SDPA))
    filecheck(text, LINALG_CHECKS, tmp_path, "LINALG")


def test_compile_accepts_a_path(tmp_path):
    path = tmp_path / "decode.onnx"
    onnx.save(make_model(DECODE), str(path))
    for model in (str(path), path):
        text = str(gqa_torch_mlir.compile(model, output_type="torch", options=SDPA))
        filecheck(text, TORCH_CHECKS, tmp_path, "TORCH")


def test_filecheck_catches_a_leftover_onnx_op(tmp_path):
    """The NOT-only check files do fail on their subject (guards against a vacuous FileCheck)."""
    imported = str(gqa_torch_mlir.import_onnx(make_model(DECODE)))
    assert 'torch.operator "onnx.GroupQueryAttention"' in imported
    with pytest.raises(AssertionError, match="FileCheck --check-prefix NOONNX failed"):
        filecheck(imported, NO_ONNX_CHECKS, tmp_path, "NOONNX")


@pytest.mark.parametrize("bad", ["linalg", "tosa", "stablehlo", "", "TORCH"])
def test_compile_unknown_output_type(bad: str):
    with pytest.raises(GqaTorchMlirError) as info:
        gqa_torch_mlir.compile(make_model(DECODE), output_type=bad)
    message = str(info.value)
    assert f"'{bad}'" in message
    for known in ("torch", "torch-backend", "linalg-on-tensors"):
        assert known in message


# ---------------------------------------------------------------------------
# loading errors
# ---------------------------------------------------------------------------

LOADERS = {
    "InferenceSession": InferenceSession,
    "compile": lambda p: gqa_torch_mlir.compile(p, output_type="torch"),
}


def _bad_file(kind: str, tmp_path):
    if kind == "missing":
        return tmp_path / "does_not_exist.onnx"
    if kind == "directory":
        (tmp_path / "model_dir").mkdir()
        return tmp_path / "model_dir"
    path = tmp_path / f"{kind}.onnx"
    if kind == "text":
        path.write_text("this is not an ONNX model\n")
    elif kind == "binary-junk":
        path.write_bytes(bytes(range(7, 256)) * 3)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "missing-external-data":
        model = make_model(DECODE)
        feeds = make_inputs(DECODE)
        model.graph.input.remove(next(i for i in model.graph.input if i.name == "cos_cache"))
        model.graph.initializer.append(numpy_helper.from_array(feeds["cos_cache"], "cos_cache"))
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location="gone.bin", size_threshold=0)
        (tmp_path / "gone.bin").unlink()
    return path


@pytest.mark.parametrize("kind", ["missing", "directory", "text", "binary-junk", "empty", "missing-external-data"])
@pytest.mark.parametrize("loader", list(LOADERS))
def test_bad_path_raises_with_path(loader: str, kind: str, tmp_path):
    path = _bad_file(kind, tmp_path)
    for arg in (str(path), path):
        with pytest.raises(GqaTorchMlirError) as info:
            LOADERS[loader](arg)
        assert str(path) in str(info.value), f"path not in message: {info.value}"


def test_sdpa_is_refused_on_the_refbackend():
    """torch-mlir's loop lowering of SDPA normalizes with one maximum over the whole batch: wrong rows, no error."""
    with pytest.raises(GqaTorchMlirError, match="attention='sdpa' is refused on the refbackend"):
        InferenceSession(make_model(DECODE), attention="sdpa")
