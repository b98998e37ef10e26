"""End-to-end: GroupQueryAttention models compiled by InferenceSession against onnxruntime.

Every case builds an ONNX model with the harness (gqa_torch_mlir.testing.gqa_onnx),
compiles it through :class:`gqa_torch_mlir.InferenceSession` (import -> our
lowering -> torch-mlir -> linalg-on-tensors -> reference backend), runs it and
onnxruntime's CPU provider on the same feeds and asserts ``compare(...) == []``.

Compiling is the expensive part (~1-2 s per model on a 2-core machine, most of
it the first, JIT-ing call), so models whose dims are all symbolic share one
compiled session: the module-scoped ``sessions`` cache is keyed by the
serialized model with its graph name blanked (the only thing that differs
between, say, the dynamic prefill and decode models of one head layout).
Every case still runs and compares its own feeds.

Dimension letters as in the harness (B, S, P, T, H, Hkv, G, Dh, M).
"""

from __future__ import annotations

import copy
import dataclasses
import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing.gqa_onnx import (
    GQAConfig,
    compare,
    make_inputs,
    make_model,
    run_onnxruntime,
)
from gqa_torch_mlir.testing.gqa_matrix import (
    HELD_OUT_SEED,
    factor_pairs,
    held_out_configs,
    matrix_configs,
    pairwise_subset,
)
from gqa_torch_mlir.testing.tiers import full_matrix

# ---------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------


class SessionCache:
    """Compiled sessions keyed by model bytes (graph name blanked)."""

    def __init__(self) -> None:
        self._sessions: dict[bytes, InferenceSession] = {}
        self.compiles = 0

    @staticmethod
    def key(model: onnx.ModelProto) -> bytes:
        canonical = copy.deepcopy(model)
        canonical.graph.name = "gqa"
        return canonical.SerializeToString(deterministic=True)

    def get(self, model: onnx.ModelProto) -> InferenceSession:
        k = self.key(model)
        if k not in self._sessions:
            self._sessions[k] = InferenceSession(model)
            self.compiles += 1
        return self._sessions[k]


@pytest.fixture(scope="module")
def sessions() -> SessionCache:
    return SessionCache()


def run_session(sess: InferenceSession, feeds: dict) -> dict[str, np.ndarray]:
    """All outputs by name; feeds the graph does not take are dropped."""
    names = {i.name for i in sess.get_inputs()}
    results = sess.run(None, {k: v for k, v in feeds.items() if k in names})
    return dict(zip((o.name for o in sess.get_outputs()), results))


def seed_of(cfg: GQAConfig) -> int:
    """A per-case seed, stable across runs and processes (unlike hash())."""
    return zlib.crc32(cfg.name.encode())


def assert_matches(cfg: GQAConfig, got: dict, want: dict, feeds: dict, what: str = "") -> None:
    msgs = compare(cfg, got, want, feeds)
    assert msgs == [], f"{what or cfg.name}: {len(msgs)} mismatch(es) against onnxruntime:\n  " + "\n  ".join(msgs)


def check_against_onnxruntime(cfg: GQAConfig, sess: InferenceSession, model: onnx.ModelProto, seed: int) -> None:
    feeds = make_inputs(cfg, seed)
    got = run_session(sess, feeds)
    want = run_onnxruntime(model, feeds)
    assert set(got) == set(want), f"output names {sorted(got)} != onnxruntime's {sorted(want)}"
    assert_matches(cfg, got, want, feeds, f"{cfg.name} (seed {seed})")


# ---------------------------------------------------------------------------
# the matrix
# ---------------------------------------------------------------------------

FULL_MATRIX = matrix_configs()
# The fast tier runs the all-pairs subset; the extended tier (testing/tiers.py) every case of the product.
MATRIX = FULL_MATRIX if full_matrix() else pairwise_subset(FULL_MATRIX)


def test_matrix_is_complete():
    # 2 packed x 2 rotary x (prefill b1,b2 + decode b1,b2 + chunk b1) x 2 dtypes x 2 dims x 3 head layouts
    assert len(FULL_MATRIX) == 2 * 2 * 5 * 2 * 2 * 3
    assert len({c.name for c in FULL_MATRIX}) == len(FULL_MATRIX), "case ids must be unique"
    every_pair = set().union(*(factor_pairs(c) for c in FULL_MATRIX))
    assert set().union(*(factor_pairs(c) for c in MATRIX)) == every_pair, "the run cases cover every pair of factor values"


@pytest.mark.parametrize("cfg", MATRIX, ids=lambda c: c.name)
def test_matrix(cfg: GQAConfig, sessions: SessionCache):
    model = make_model(cfg)
    check_against_onnxruntime(cfg, sessions.get(model), model, seed_of(cfg))


# ---------------------------------------------------------------------------
# held-out-style random draws
# ---------------------------------------------------------------------------

HELD_OUT = held_out_configs()


def test_held_out_draw_is_deterministic():
    assert [c.name for c in held_out_configs()] == [c.name for c in HELD_OUT]


@pytest.mark.parametrize(
    "index, cfg", list(enumerate(HELD_OUT)), ids=[f"draw{i}-{c.name}" for i, c in enumerate(HELD_OUT)]
)
def test_held_out(index: int, cfg: GQAConfig, sessions: SessionCache):
    model = make_model(cfg)
    check_against_onnxruntime(cfg, sessions.get(model), model, HELD_OUT_SEED + index)


# ---------------------------------------------------------------------------
# node forms and attributes
# ---------------------------------------------------------------------------

NODE_FORM_CASES = [
    GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True),
    GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4), packed=True),
    GQAConfig(batch=1, seq=3, past=4, num_heads=4, kv_num_heads=1, rotary=True, packed=True, dynamic=True),
    GQAConfig(batch=2, seq=5, past=0, dtype="float16"),
]


@pytest.mark.parametrize("trailing_empty", [False, True], ids=["trailing-dropped", "12-slots"])
@pytest.mark.parametrize("base", NODE_FORM_CASES, ids=lambda c: c.name)
def test_node_input_forms(base: GQAConfig, trailing_empty: bool):
    cfg = dataclasses.replace(base, trailing_empty=trailing_empty)
    model = make_model(cfg)
    node_inputs = list(model.graph.node[0].input)
    if trailing_empty:
        assert len(node_inputs) == 12
    else:
        assert len(node_inputs) == (9 if cfg.rotary else 7) and node_inputs[-1] != ""
    check_against_onnxruntime(cfg, InferenceSession(model), model, seed_of(cfg))


ATTRIBUTE_CASES = [
    pytest.param(GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True), {"scale": 0.3}, id="scale0.3-decode-rot"),
    pytest.param(GQAConfig(batch=1, seq=3, past=4, packed=True, dtype="float16"), {"scale": 0.3}, id="scale0.3-chunk-packed-f16"),
    pytest.param(GQAConfig(batch=1, seq=5, past=0, num_heads=4, kv_num_heads=1, dynamic=True), {"scale": 1.0}, id="scale1.0-prefill-mqa-dyn"),
    pytest.param(GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4)), {"scale": 0.25}, id="scale0.25-equals-default"),
    pytest.param(GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4)), {"do_rotary": 0}, id="do_rotary0-decode"),
    pytest.param(GQAConfig(batch=1, seq=3, past=4, packed=True, dynamic=True), {"do_rotary": 0}, id="do_rotary0-chunk-packed-dyn"),
    pytest.param(GQAConfig(batch=1, seq=3, past=4, rotary=True), {"do_rotary": 1, "scale": 0.3}, id="do_rotary1-scale0.3"),
]


@pytest.mark.parametrize("cfg, attrs", ATTRIBUTE_CASES)
def test_explicit_attributes(cfg: GQAConfig, attrs: dict):
    model = make_model(cfg, extra_attrs=attrs)
    node_attrs = {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}
    for name, value in attrs.items():
        assert node_attrs[name] == pytest.approx(value)
    check_against_onnxruntime(cfg, InferenceSession(model), model, seed_of(cfg))


def test_do_rotary_absent_defaults_to_zero():
    cfg = GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4))
    model = make_model(cfg)
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name != "do_rotary"]
    del node.attribute[:]
    node.attribute.extend(kept)
    check_against_onnxruntime(cfg, InferenceSession(model), model, seed_of(cfg))


# ---------------------------------------------------------------------------
# multi-step decoding with a growing cache
# ---------------------------------------------------------------------------

DECODE_STEPS = 3
PROMPT_LEN = 4


@pytest.mark.parametrize(
    "dynamic, packed, dtype",
    [(True, False, "float32"), (False, True, "float16")],
    ids=["dyn-one-session-f32", "static-model-per-step-packed-f16"],
)
def test_multi_step_decode(dynamic: bool, packed: bool, dtype: str):
    """Prefill, then decode steps feeding each side's present_key/value back as its past.

    Our chain and onnxruntime's chain each carry their own cache, so an error in
    a cache row shows up in later steps' outputs too.
    """
    common = dict(batch=1, num_heads=4, kv_num_heads=2, head_size=16, rotary=True, packed=packed,
                  dtype=dtype, dynamic=dynamic, rotary_cache_len=PROMPT_LEN + DECODE_STEPS + 2)
    steps = [GQAConfig(seq=PROMPT_LEN, past=0, **common)]
    steps += [GQAConfig(seq=1, past=PROMPT_LEN + i, **common) for i in range(DECODE_STEPS)]
    one_session = InferenceSession(make_model(steps[0])) if dynamic else None
    ours_cache = theirs_cache = None
    for i, cfg in enumerate(steps):
        model = make_model(cfg)
        sess = one_session or InferenceSession(model)
        feeds = make_inputs(cfg, seed=100 + i)
        ours_feeds, theirs_feeds = dict(feeds), dict(feeds)
        if i:
            ours_feeds["past_key"], ours_feeds["past_value"] = ours_cache
            theirs_feeds["past_key"], theirs_feeds["past_value"] = theirs_cache
        got = run_session(sess, ours_feeds)
        want = run_onnxruntime(model, theirs_feeds)
        assert got["present_key"].shape == want["present_key"].shape == (1, 2, cfg.total, 16)
        assert_matches(cfg, got, want, theirs_feeds, f"step {i} ({cfg.name})")
        ours_cache = (got["present_key"], got["present_value"])
        theirs_cache = (want["present_key"], want["present_value"])


# ---------------------------------------------------------------------------
# composition with torch-mlir's own ONNX lowering
# ---------------------------------------------------------------------------

PROJ = 8  # output features of the MatMul after attention
EMBED = 24  # features of the graph input the query is projected from


def _value_info(cfg: GQAConfig, name: str, dims: list) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(cfg.np_dtype))
    return helper.make_tensor_value_info(name, elem, dims)


def composed_model(cfg: GQAConfig, *, project_query: bool, attn_value_info: bool = True):
    """GQA between ONNX ops: ``output = MatMul(Add(gqa.output, bias), W_out)``,
    optionally with ``query = MatMul(x, W_q)`` in front. Returns (model, extra feeds)."""
    model = make_model(cfg)
    g = model.graph
    rng = np.random.default_rng(7)
    B, S = ("batch", "seq") if cfg.dynamic else (cfg.batch, cfg.seq)
    D = cfg.num_heads * cfg.head_size
    extra = {"bias": rng.standard_normal((cfg.batch, cfg.seq, D)).astype(cfg.np_dtype)}
    g.node[0].output[0] = "attn"
    g.input.append(_value_info(cfg, "bias", [B, S, D]))
    g.node.append(helper.make_node("Add", ["attn", "bias"], ["attn_plus_bias"], name="add"))
    w_out = (rng.standard_normal((D, PROJ)) / np.sqrt(D)).astype(cfg.np_dtype)
    g.initializer.append(numpy_helper.from_array(w_out, "w_out"))
    g.node.append(helper.make_node("MatMul", ["attn_plus_bias", "w_out"], ["output"], name="proj"))
    g.output[0].CopyFrom(_value_info(cfg, "output", [B, S, PROJ]))
    if attn_value_info:
        g.value_info.append(_value_info(cfg, "attn", [B, S, D]))
    if project_query:
        assert not cfg.packed
        query_in = next(i for i in g.input if i.name == "query")
        g.input.remove(query_in)
        g.input.insert(0, _value_info(cfg, "x", [B, S, EMBED]))
        w_q = (rng.standard_normal((EMBED, D)) / np.sqrt(EMBED)).astype(cfg.np_dtype)
        g.initializer.append(numpy_helper.from_array(w_q, "w_q"))
        g.node.insert(0, helper.make_node("MatMul", ["x", "w_q"], ["query"], name="q_proj"))
        extra["x"] = rng.standard_normal((cfg.batch, cfg.seq, EMBED)).astype(cfg.np_dtype)
    onnx.checker.check_model(model)
    return model, extra


COMPOSE_CASES = [
    GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True),
    GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True, dynamic=True),
    GQAConfig(batch=1, seq=3, past=4, num_heads=4, kv_num_heads=1, dtype="float16"),
]


@pytest.mark.parametrize("project_query", [False, True], ids=["out-ops", "in-and-out-ops"])
@pytest.mark.parametrize("cfg", COMPOSE_CASES, ids=lambda c: c.name)
def test_composes_with_onnx_ops(cfg: GQAConfig, project_query: bool):
    model, extra = composed_model(cfg, project_query=project_query)
    feeds = {**make_inputs(cfg, seed_of(cfg)), **extra}
    if project_query:
        del feeds["query"]
    got = run_session(InferenceSession(model), feeds)
    want = run_onnxruntime(model, feeds)
    assert sorted(want) == ["output", "present_key", "present_value"]
    assert got["output"].shape == (cfg.batch, cfg.seq, PROJ)
    assert_matches(cfg, got, want, feeds)


def test_composes_without_value_info_for_gqa_output():
    """The usual shape of a real model: nothing declares the type of the GQA
    output consumed by the next op (onnx shape inference does not know
    com.microsoft ops). onnxruntime runs it; so should we."""
    cfg = GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True)
    model, extra = composed_model(cfg, project_query=False, attn_value_info=False)
    feeds = {**make_inputs(cfg, seed_of(cfg)), **extra}
    got = run_session(InferenceSession(model), feeds)
    assert_matches(cfg, got, run_onnxruntime(model, feeds), feeds)


# ---------------------------------------------------------------------------
# a model on disk with external data
# ---------------------------------------------------------------------------


def _with_rotary_initializers(cfg: GQAConfig, feeds: dict) -> onnx.ModelProto:
    """cos/sin caches as initializers (not graph inputs)."""
    model = make_model(cfg)
    g = model.graph
    for name in ("cos_cache", "sin_cache"):
        g.input.remove(next(i for i in g.input if i.name == name))
        g.initializer.append(numpy_helper.from_array(feeds[name], name))
    return model


@pytest.mark.parametrize(
    "cfg",
    [
        GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True),
        GQAConfig(batch=1, seq=3, past=4, rotary=True, packed=True, dtype="float16", dynamic=True),
    ],
    ids=lambda c: c.name,
)
def test_external_data_model_by_path(cfg: GQAConfig, tmp_path):
    import onnxruntime as ort

    feeds = make_inputs(cfg, seed_of(cfg))
    model = _with_rotary_initializers(cfg, feeds)
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="w.bin", size_threshold=0)
    weights = tmp_path / "w.bin"
    assert weights.is_file() and weights.stat().st_size == 2 * feeds["cos_cache"].nbytes
    on_disk = onnx.load(str(path), load_external_data=False)
    assert all(i.data_location == TensorProto.EXTERNAL for i in on_disk.graph.initializer)

    run_feeds = {k: v for k, v in feeds.items() if k not in ("cos_cache", "sin_cache")}
    sess = InferenceSession(str(path))
    assert [i.name for i in sess.get_inputs()] == list(run_feeds)
    got = run_session(sess, run_feeds)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ort_sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in ort_sess.get_outputs()]
    want = dict(zip(names, ort_sess.run(names, run_feeds)))
    assert_matches(cfg, got, want, feeds)
    # a pathlib.Path works as well
    assert_matches(cfg, run_session(InferenceSession(path), run_feeds), want, feeds, f"{cfg.name} via Path")


# ---------------------------------------------------------------------------
# partly dynamic signatures
# ---------------------------------------------------------------------------


def _edit_dims(model: onnx.ModelProto, edits: list[tuple[str, int, str | None]]) -> onnx.ModelProto:
    """Set dims of graph inputs/outputs: a name makes it symbolic, None clears it (unknown)."""
    values = {v.name: v for v in list(model.graph.input) + list(model.graph.output)}
    for name, axis, value in edits:
        dim = values[name].type.tensor_type.shape.dim[axis]
        dim.Clear()
        if value is not None:
            dim.dim_param = value
    return model


_DECODE = GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4))
_DECODE_ROT = GQAConfig(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True)
_PREFILL = GQAConfig(batch=1, seq=5, past=0)
_CACHES = ("past_key", "past_value", "present_key", "present_value")

PARTLY_DYNAMIC_CASES = [
    pytest.param(_DECODE, [(n, 2, "P") for n in _CACHES[:2]] + [(n, 2, "T") for n in _CACHES[2:]], id="decode-cache-len-symbolic"),
    pytest.param(_DECODE, [("query", 1, "S"), ("key", 1, "S"), ("value", 1, "S"), ("output", 1, "S")], id="decode-seq-symbolic"),
    pytest.param(_DECODE_ROT, [("cos_cache", 0, "M"), ("sin_cache", 0, "M")], id="decode-rot-cache-rows-symbolic"),
    pytest.param(_DECODE_ROT, [("query", 0, "B")], id="decode-rot-query-batch-symbolic"),
    pytest.param(_DECODE, [("query", 0, "B")], id="decode-query-batch-symbolic"),
    pytest.param(_DECODE, [("query", 0, None)], id="decode-query-batch-unknown"),
    pytest.param(_DECODE, [("past_key", 0, "B")], id="decode-past_key-batch-symbolic"),
    pytest.param(_PREFILL, [("query", 0, "B")], id="prefill-query-batch-symbolic"),
]


@pytest.mark.parametrize("cfg, edits", PARTLY_DYNAMIC_CASES)
def test_partly_dynamic_dims(cfg: GQAConfig, edits):
    """Some dims static, some symbolic or unknown, as exporters sometimes leave them."""
    model = _edit_dims(make_model(cfg), edits)
    check_against_onnxruntime(cfg, InferenceSession(model), model, seed_of(cfg))


def test_sdpa_with_only_the_present_length_dynamic():
    """SDPA behind its empty-shape guard (an scf.if yielding buffers), which the refbackend must deallocate."""
    model = _edit_dims(make_model(_DECODE), [(n, 2, "T") for n in _CACHES[2:]])
    check_against_onnxruntime(_DECODE, InferenceSession(model, backend="iree-cpu", threads=1, attention="sdpa"), model, seed_of(_DECODE))
