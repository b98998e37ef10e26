"""Every attribute and optional input the lowering accepts, end to end against onnxruntime.

Each case compiles a one-node model through InferenceSession and compares the
output and the valid cache rows (and output_qk) with onnxruntime on the same
feeds.  Each feature case also checks that the feature really changes
onnxruntime's result compared with the same model without it, so a lowering
that accepted and ignored it could not pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime

C = GQAConfig

# (config, extra attributes, config without the feature or None when the feature is the cache mode)
FEATURES = [
    ("fixed_capacity_decode", C(batch=2, seq=1, past=8, past_lens=(5, 2), fixed_capacity=True), {}),
    ("fixed_capacity_dynamic", C(batch=2, seq=1, past=8, past_lens=(5, 2), fixed_capacity=True, dynamic=True, rotary=True), {}),
    ("fixed_capacity_chunk", C(batch=1, seq=3, past=8, past_lens=(2,), fixed_capacity=True, rotary=True), {}),
    ("fixed_capacity_prefill", C(batch=2, seq=4, past=8, past_lens=(0, 0), fixed_capacity=True, rotary=True), {}),
    ("fixed_capacity_f16", C(batch=2, seq=1, past=6, past_lens=(4, 1), fixed_capacity=True, dtype="float16", dynamic=True), {}),
    ("rotary_interleaved", C(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True, rotary_interleaved=True), {}),
    ("partial_rotary", C(batch=1, seq=3, past=4, rotary=True, rotary_dim=16, head_size=32), {}),
    ("partial_rotary_interleaved_f16", C(batch=1, seq=1, past=5, rotary=True, rotary_dim=32, head_size=64, rotary_interleaved=True, dtype="float16"), {}),
    ("position_ids_decode", C(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True, position_ids=True), {}),
    ("position_ids_prefill", C(batch=1, seq=4, past=0, rotary=True, position_ids=True), {}),
    ("position_ids_dynamic", C(batch=1, seq=3, past=4, rotary=True, position_ids=True, dynamic=True), {}),
    ("local_window_decode", C(batch=2, seq=1, past=9, past_lens=(9, 4)), {"local_window_size": 3}),
    ("local_window_prefill", C(batch=1, seq=5, past=0), {"local_window_size": 2}),
    ("local_window_zero", C(batch=1, seq=1, past=4), {"local_window_size": 0}),
    ("softcap", C(batch=1, seq=1, past=6), {"softcap": 2.0}),
    ("smooth_softmax", C(batch=1, seq=3, past=4), {"smooth_softmax": 1}),
    ("head_sink", C(batch=2, seq=1, past=6, past_lens=(6, 3), head_sink=True), {}),
    ("bias_BH", C(batch=2, seq=1, past=6, past_lens=(6, 3), attention_bias="BH"), {}),
    ("bias_1H_chunk", C(batch=1, seq=3, past=4, attention_bias="1H"), {}),
    ("bias_B1_softcap", C(batch=2, seq=1, past=6, past_lens=(6, 3), attention_bias="B1"), {"softcap": 3.0}),
    ("bias_fixed_capacity", C(batch=2, seq=1, past=8, past_lens=(7, 3), fixed_capacity=True, attention_bias="BH", dynamic=True), {}),
    ("non_causal_prefill", C(batch=1, seq=4, past=0), {"causal": 0}),
    ("non_causal_chunk", C(batch=1, seq=3, past=4, rotary=True), {"causal": 0}),
    ("non_causal_decode_ragged", C(batch=2, seq=1, past=6, past_lens=(6, 3), attention_bias="BH"), {"causal": 0}),
    ("qk_output_scores", C(batch=2, seq=1, past=6, past_lens=(6, 3)), {"qk_output": 1}),
    ("qk_output_probs_softcap", C(batch=1, seq=3, past=4), {"qk_output": 2, "softcap": 1.5}),
    ("qk_output_fixed_capacity", C(batch=2, seq=1, past=8, past_lens=(7, 3), fixed_capacity=True, attention_bias="BH", dynamic=True), {"qk_output": 1}),
    ("scale", C(batch=1, seq=2, past=3), {"scale": 0.3}),
    ("negative_scale", C(batch=1, seq=1, past=3), {"scale": -0.2}),
    ("no_past", C(batch=1, seq=4, past=0, rotary=True), {}),
    ("gemma2_like_f16", C(batch=1, seq=3, past=4, dtype="float16", rotary=True), {"local_window_size": 2, "softcap": 5.0, "scale": 0.2}),
    ("gemma2_like_f32_dynamic", C(batch=2, seq=1, past=7, past_lens=(7, 2), rotary=True, dynamic=True), {"local_window_size": 4, "softcap": 30.0, "scale": 0.125}),
    ("sink_smooth_bias_f16", C(batch=1, seq=1, past=4, dtype="float16", dynamic=True, head_sink=True, attention_bias="11"), {"smooth_softmax": 1}),
    ("packed_window_sink", C(batch=1, seq=2, past=5, packed=True, head_sink=True, rotary=True), {"local_window_size": 3}),
    # onnxruntime writes 0 in output_qk's padding rows (s >= query_seqlens[b]); they are compared.
    ("query_seqlens_batched_chunks_scores", C(batch=2, seq=3, past=8, past_lens=(4, 2), query_lens=(3, 1)), {"qk_output": 1}),
    ("query_seqlens_idle_entry_probs", C(batch=2, seq=3, past=8, past_lens=(4, 2), query_lens=(2, 0), rotary=True), {"qk_output": 2}),
    ("query_seqlens_dynamic", C(batch=3, seq=4, past=10, past_lens=(0, 5, 3), query_lens=(4, 2, 1), rotary=True, dynamic=True), {}),
    ("query_seqlens_position_ids", C(batch=2, seq=3, past=8, past_lens=(4, 2), query_lens=(3, 1), rotary=True, position_ids=True), {}),
    ("query_seqlens_window_softcap_f16", C(batch=2, seq=2, past=6, past_lens=(3, 4), query_lens=(2, 1), dtype="float16"), {"local_window_size": 3, "softcap": 4.0}),
    ("int8_cache_per_tensor", C(batch=1, seq=1, past=4, kv_bits=8), {}),
    # onnxruntime upper-cases the quantization types: any letter case is the same type.
    ("int8_cache_per_channel_rotary_lower_case", C(batch=2, seq=1, past=6, past_lens=(6, 3), kv_bits=8, quant_type="PER_CHANNEL", rotary=True),
     {"k_quant_type": "per_channel", "v_quant_type": "Per_Channel"}),
    ("int8_cache_prefill", C(batch=1, seq=4, past=0, kv_bits=8, rotary=True), {}),
    ("int8_cache_fixed_capacity", C(batch=2, seq=1, past=8, past_lens=(5, 2), fixed_capacity=True, kv_bits=8, dynamic=True), {}),
    ("int4_cache_per_tensor", C(batch=1, seq=1, past=4, kv_bits=4), {}),
    ("int4_cache_per_channel_dynamic", C(batch=2, seq=1, past=6, past_lens=(6, 2), kv_bits=4, quant_type="PER_CHANNEL", dynamic=True), {}),
    ("int4_cache_f16_chunk", C(batch=1, seq=3, past=5, kv_bits=4, dtype="float16"), {}),
    ("qk_output_int8_cache", C(batch=2, seq=1, past=6, past_lens=(6, 3), kv_bits=8), {"qk_output": 1}),
    ("qk_output_probs_int4_cache_chunk", C(batch=1, seq=3, past=5, kv_bits=4, quant_type="PER_CHANNEL"), {"qk_output": 2}),
    ("window_cache_evicting", C(batch=1, seq=1, past=6, past_lens=(9,), window=4, window_cache=True), {}),
    ("window_cache_ragged_rotary", C(batch=2, seq=1, past=6, past_lens=(9, 3), window=4, window_cache=True, rotary=True), {}),
    ("window_cache_dynamic", C(batch=2, seq=1, past=4, past_lens=(11, 4), window=4, window_cache=True, dynamic=True), {}),
    ("window_cache_chunk", C(batch=1, seq=5, past=6, past_lens=(7,), window=3, window_cache=True, rotary=True), {}),
    ("window_cache_step_longer_than_capacity", C(batch=1, seq=9, past=6, past_lens=(0,), window=4, window_cache=True), {}),
    ("window_cache_query_seqlens", C(batch=2, seq=3, past=8, past_lens=(12, 5), query_lens=(3, 1), window=5, window_cache=True), {}),
    ("window_cache_int8_f16", C(batch=1, seq=1, past=6, past_lens=(13,), window=4, window_cache=True, kv_bits=8, dtype="float16"), {}),
    ("window_cache_packed_sink_softcap", C(batch=1, seq=2, past=5, past_lens=(8,), window=5, window_cache=True, packed=True, head_sink=True), {"softcap": 3.0}),
    ("window_cache_bias_absolute_columns", C(batch=1, seq=1, past=6, past_lens=(9,), window=4, window_cache=True, attention_bias="BH"), {}),
    ("window_cache_bias_dynamic_rotary", C(batch=2, seq=1, past=6, past_lens=(9, 3), window=4, window_cache=True, attention_bias="1H", rotary=True, dynamic=True), {}),
    ("window_cache_bias_chunk_softcap", C(batch=1, seq=5, past=6, past_lens=(7,), window=3, window_cache=True, attention_bias="B1"), {"softcap": 2.0}),
    ("window_cache_bias_query_seqlens_f16", C(batch=2, seq=3, past=8, past_lens=(12, 5), query_lens=(3, 1), window=5, window_cache=True, attention_bias="11", dtype="float16"), {}),
    # onnxruntime enables these flags only for the exact value 1: 2 means off.
    ("do_rotary_two_means_off", C(batch=1, seq=1, past=3), {"do_rotary": 2}),
    ("smooth_softmax_two_means_off", C(batch=1, seq=1, past=3), {"smooth_softmax": 2}),
    # onnxruntime reads v_quant_type only when k_quant_type turns quantization on.
    ("v_quant_type_without_k_quant_type_means_off", C(batch=1, seq=1, past=3), {"v_quant_type": "PER_TENSOR"}),
    ("softcap_nan_means_off", C(batch=1, seq=2, past=3), {"softcap": float("nan")}),  # NaN > 0 is false
    # Without q/k norm weights onnxruntime computes whatever the epsilons hold.
    ("norm_epsilons_without_weights_means_off", C(batch=1, seq=1, past=3), {"qk_norm_epsilon": -1.0, "q_norm_epsilon": 0.0, "k_norm_epsilon": float("nan")}),
]


def _run_ours(model, feeds):
    session = InferenceSession(model)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def _without_feature(cfg: GQAConfig, attrs: dict):
    """The same model with the feature removed (None when the feature is the cache mode)."""
    from dataclasses import replace

    if cfg.query_lens is not None or cfg.window_cache:
        return None  # no plain twin: batched chunks with a past / a window cache need their feature
    base = replace(cfg, rotary_interleaved=False, rotary_dim=None, position_ids=False, attention_bias="", head_sink=False, kv_bits=0)
    if set(attrs) == {"qk_output"} or (set(attrs) == {"causal"} and cfg.seq == 1):
        return None  # output_qk is itself compared; a single query sees every key either way
    if attrs:
        return base, {}
    return (base, {}) if base != cfg else None


def _differs(a: dict, b: dict) -> bool:
    """Some output onnxruntime gives differs (RoPE is relative: a shifted prompt
    changes the cached K, not the attention output)."""
    return any(
        a[n].shape != b[n].shape or not np.allclose(a[n].astype(np.float32), b[n].astype(np.float32), atol=1e-3)
        for n in ("output", "present_key")
    )


@pytest.mark.parametrize("name,cfg,attrs", FEATURES, ids=[f[0] for f in FEATURES])
def test_feature_matches_onnxruntime(name, cfg, attrs):
    model = make_model(cfg, attrs)
    feeds = make_inputs(cfg, seed=len(name))
    want = run_onnxruntime(model, feeds)
    problems = compare(cfg, _run_ours(model, feeds), want, feeds)
    assert not problems, f"{name} ({cfg.name}, {attrs}):\n" + "\n".join(problems)
    plain = _without_feature(cfg, attrs)
    if plain is not None and not name.endswith("means_off"):
        base_cfg, base_attrs = plain
        base_want = run_onnxruntime(make_model(base_cfg, base_attrs), make_inputs(base_cfg, seed=len(name)))
        assert _differs(base_want, want), f"{name}: onnxruntime's result does not depend on the feature here; the case proves nothing"


@pytest.mark.parametrize("name,cfg,attrs", [f for f in FEATURES if f[0].endswith("means_off")], ids=lambda x: x if isinstance(x, str) else "")
def test_flag_value_two_means_off_as_in_onnxruntime(name, cfg, attrs):
    """do_rotary=2 / smooth_softmax=2 give exactly the flag-off result in onnxruntime, and in ours."""
    feeds = make_inputs(cfg, seed=1)
    off = run_onnxruntime(make_model(cfg), feeds)
    two = run_onnxruntime(make_model(cfg, attrs), feeds)
    assert not _differs(off, two)
    assert not compare(cfg, _run_ours(make_model(cfg, attrs), feeds), off, feeds)


# Attributes onnxruntime reads as int64 and keeps as a C int: the value past 32 bits wraps.
NARROWED = [
    ("local_window_size", 2**32 + 2),  # a window of 2 there (it was no window here, silently)
    ("local_window_size", -(2**32) + 2),
    ("num_heads", 2**32 + 4),  # 4 heads (refused here before)
    ("qk_output", 2**32 + 1),
    ("kv_cache_bit_width", 2**32),  # 0: no quantization
]


@pytest.mark.parametrize("name,value", NARROWED, ids=[f"{n}={v}" for n, v in NARROWED])
def test_attributes_narrowed_to_int_as_in_onnxruntime(name, value):
    cfg = C(batch=1, seq=4, num_heads=4, kv_num_heads=2, head_size=16)
    model = make_model(cfg, {name: value})
    feeds = make_inputs(cfg, seed=3)
    problems = compare(cfg, _run_ours(model, feeds), run_onnxruntime(model, feeds), feeds)
    assert not problems, "\n".join(problems)


def _with_unused_scales(model, shape):
    """k_scale/v_scale (slots 12, 13) on a model whose cache is not quantized."""
    node = model.graph.node[0]
    names = list(node.input) + [""] * (12 - len(node.input))
    del node.input[:]
    node.input.extend(names[:12] + ["k_scale", "v_scale"])
    for name in ("k_scale", "v_scale"):
        model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    return model


@pytest.mark.parametrize("shape", [[1], [1, 2, 1, 16]], ids=["per_tensor_shape", "per_channel_shape"])
def test_scales_without_quantization_are_ignored_as_in_onnxruntime(shape):
    cfg = C(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True)
    model = _with_unused_scales(make_model(cfg), shape)
    feeds = dict(make_inputs(cfg, seed=3), k_scale=np.full(shape, 0.5, np.float32), v_scale=np.full(shape, 3.0, np.float32))
    want = run_onnxruntime(model, feeds)
    assert not _differs(want, run_onnxruntime(make_model(cfg), make_inputs(cfg, seed=3)))
    problems = compare(cfg, _run_ours(model, feeds), want, feeds)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_window_cache_generation_crosses_evictions(dtype):
    """Prefill 5 tokens, then 10 decode steps on a capacity-6, window-4 buffer
    (evicting every 3 steps), each side feeding its own present back."""
    from dataclasses import replace

    cfg = C(batch=1, seq=5, past=6, past_lens=(0,), window=4, window_cache=True, rotary=True, dynamic=True, dtype=dtype, rotary_cache_len=32)
    model = make_model(cfg)
    session = InferenceSession(model)
    names = [o.name for o in session.get_outputs()]
    feeds = make_inputs(cfg, seed=7)
    ours = theirs = (feeds["past_key"], feeds["past_value"])
    tokens = 0
    for step in range(11):
        S = 5 if step == 0 else 1
        step_cfg = replace(cfg, seq=S, past_lens=(tokens,))
        step_feeds = make_inputs(step_cfg, seed=step)
        step_feeds.update(seqlens_k=np.array([tokens + S - 1], np.int32), total_sequence_length=np.array(tokens + S, np.int32))
        got = dict(zip(names, session.run(None, dict(step_feeds, past_key=ours[0], past_value=ours[1]))))
        want = run_onnxruntime(model, dict(step_feeds, past_key=theirs[0], past_value=theirs[1]))
        problems = compare(step_cfg, got, want, step_feeds)
        assert not problems, f"step {step} (T={tokens + S}):\n" + "\n".join(problems)
        ours, theirs = (got["present_key"], got["present_value"]), (want["present_key"], want["present_value"])
        tokens += S


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
@pytest.mark.parametrize("softcap", [1e4, 1e30])
def test_large_softcap_keeps_the_scores(softcap, backend):
    """softcap * tanh(x / softcap) with x / softcap tiny: the refbackend's tanh
    loses small arguments' relative precision (1.05 off at softcap 1e30 before
    the series below 0.05), which the cap multiplies back."""
    cfg = C(batch=1, seq=3, past=0, packed=True)
    model, feeds = make_model(cfg, {"softcap": softcap}), make_inputs(cfg)
    session = InferenceSession(model, backend=backend, threads=1)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert not compare(cfg, got, run_onnxruntime(model, feeds), feeds)


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_infinite_softcap_gives_onnxruntimes_nan(backend):
    """onnxruntime accepts softcap = inf and computes inf * tanh(x / inf) = NaN scores: ours too, element for element."""
    cfg = C(batch=2, seq=1, past=6, past_lens=(6, 3))
    model, feeds = make_model(cfg, {"softcap": float("inf")}), make_inputs(cfg)
    want = run_onnxruntime(model, feeds)
    session = InferenceSession(model, backend=backend, threads=1)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert np.isnan(want["output"]).any()
    np.testing.assert_array_equal(np.isnan(got["output"]), np.isnan(want["output"]))
    np.testing.assert_allclose(got["output"], want["output"], rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("shape", [(2, 1, 1), (1, 2, 1), (1, 2)], ids=lambda s: "x".join(map(str, s)))
def test_seqlens_k_in_more_dims_of_one(shape):
    """onnxruntime counts seqlens_k's B entries whatever dims of 1 surround them: so does the lowering."""
    cfg = C(batch=2, seq=1, past=6, past_lens=(6, 3))
    model, feeds = make_model(cfg), make_inputs(cfg)
    declared = next(i for i in model.graph.input if i.name == "seqlens_k").type.tensor_type.shape
    del declared.dim[:]
    for n in shape:
        declared.dim.add().dim_value = n
    feeds["seqlens_k"] = feeds["seqlens_k"].reshape(shape)
    assert not compare(cfg, _run_ours(model, feeds), run_onnxruntime(model, feeds), dict(feeds, seqlens_k=feeds["seqlens_k"].reshape(-1)))


def _declare_input(model, name: str, dims) -> None:
    """Set graph input ``name``'s declared dims (ints, or dim_param strings)."""
    shape = next(i for i in model.graph.input if i.name == name).type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        (setattr(shape.dim.add(), "dim_param", d) if isinstance(d, str) else setattr(shape.dim.add(), "dim_value", d))


@pytest.mark.parametrize(
    "declared,fed,backend",
    [([2, 3], (2, 3), "refbackend"), ([2, 1, 3], (2, 1, 3), "refbackend"), (["batch", "width"], (2, 4), "refbackend"),
     (["batch", "width"], (2, 4), "iree-cpu")],
    ids=["wider", "rank3", "dynamic_width", "dynamic_width_iree"],
)
def test_position_ids_wider_than_the_sequence_are_read_flat(declared, fed, backend):
    """onnxruntime reads position_ids [B,W>=S,...] at flat index b*S+s, not [b, s]: so does the lowering."""
    cfg = C(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True, position_ids=True, dynamic=isinstance(declared[0], str))
    model, feeds = make_model(cfg), make_inputs(cfg)
    _declare_input(model, "position_ids", declared)
    wide = np.full(fed, 11, np.int64)
    wide.reshape(-1)[: cfg.batch * cfg.seq] = feeds["position_ids"].reshape(-1)  # row b=1 of `wide` starts with 11
    want = run_onnxruntime(model, dict(feeds, position_ids=wide))
    row_wise = wide.reshape(cfg.batch, -1)[:, : cfg.seq]
    assert _differs(want, run_onnxruntime(make_model(cfg), dict(feeds, position_ids=row_wise))), "the case cannot tell flat from row-wise"
    session = InferenceSession(model, backend=backend, threads=1)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, dict(feeds, position_ids=wide))))
    assert not compare(cfg, got, want, feeds)


def test_rotary_caches_of_width_0_rotate_nothing():
    """cos/sin [M,0] with do_rotary=1: onnxruntime accepts them and rotates no dim; so does the lowering."""
    cfg = C(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True)
    model, feeds = make_model(cfg), make_inputs(cfg)
    for name in ("cos_cache", "sin_cache"):
        _declare_input(model, name, [cfg.max_seq, 0])
        feeds[name] = np.zeros((cfg.max_seq, 0), np.float32)
    want = run_onnxruntime(model, feeds)
    plain = C(batch=2, seq=1, past=6, past_lens=(6, 3))
    assert not _differs(want, run_onnxruntime(make_model(plain), make_inputs(plain)))
    assert not compare(cfg, _run_ours(model, feeds), want, feeds)


@pytest.mark.parametrize("batch", [1, 2])
def test_absent_past_with_static_shapes(batch):
    """past_key/past_value given as empty names (a first prompt): torch-mlir's linalg lowering
    refused the empty cache's broadcast before (a size-0 dim expanded to head_size)."""
    cfg = C(batch=batch, seq=3, past=0, rotary=True)
    model, feeds = make_model(cfg), make_inputs(cfg)
    node = model.graph.node[0]
    node.input[3], node.input[4] = "", ""
    kept = [i for i in model.graph.input if i.name not in ("past_key", "past_value")]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    feeds = {k: v for k, v in feeds.items() if k not in ("past_key", "past_value")}
    want = run_onnxruntime(model, feeds)
    assert not compare(cfg, _run_ours(model, feeds), want, dict(feeds, past_key=np.zeros((batch, 2, 0, 16), np.float32)))


@pytest.mark.parametrize(
    "cfg",
    [C(batch=2, seq=1, past=6, past_lens=(6, 3)), C(batch=1, seq=3, past=4, rotary=True, dynamic=True), C(batch=1, seq=1, past=4, kv_bits=8),
     C(batch=1, seq=1, past=4, kv_bits=4)],
    ids=["static", "dynamic", "int8_cache", "int4_cache"],
)
def test_graph_outputs_declared_without_a_shape(cfg):
    """Graph outputs with an element type but no shape: onnxruntime runs them; the importer would
    type them rank 0, so the plugin's shape inference fills them in (present_* in the cache's type)."""
    model, feeds = make_model(cfg), make_inputs(cfg)
    for output in model.graph.output:
        output.type.tensor_type.ClearField("shape")
    assert not compare(cfg, _run_ours(model, feeds), run_onnxruntime(model, feeds), feeds)


def test_graph_output_listed_twice():
    """A value listed twice as a graph output, once without a shape: onnxruntime returns it twice;
    the importer typed the bare listing rank 0 and the module failed to verify, naming nothing."""
    cfg = C(batch=1, seq=1, past=4)
    model, feeds = make_model(cfg), make_inputs(cfg)
    model.graph.output.append(helper.make_tensor_value_info("output", TensorProto.FLOAT, None))
    session = InferenceSession(model)
    got, want = session.run(None, feeds), ort_session_run(model, feeds)
    assert [o.name for o in session.get_outputs()] == [o.name for o in model.graph.output]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5)


def ort_session_run(model, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _symbolic(model, name: str, dims=None) -> None:
    """Make dims ``dims`` (all when None) of graph input ``name`` symbolic."""
    shape = next(i for i in model.graph.input if i.name == name).type.tensor_type.shape
    for i, d in enumerate(shape.dim):
        if dims is None or i in dims:
            d.Clear()
            d.dim_param = f"{name}_{i}"


def _unshaped(model, name: str) -> None:
    next(i for i in model.graph.input if i.name == name).type.tensor_type.ClearField("shape")


# Declarations onnxruntime runs that the lowering refused (found by a declaration fuzzer against onnxruntime).
DECLARATIONS = [
    ("past_value_rows_symbolic_empty_past", C(batch=1, seq=2, past=0, packed=True), lambda m: _symbolic(m, "past_value")),
    ("cos_rows_symbolic_sin_static", C(batch=1, seq=3, past=0, rotary=True), lambda m: _symbolic(m, "cos_cache", {0})),
    ("per_tensor_scales_symbolic", C(batch=1, seq=1, past=4, kv_bits=8), lambda m: (_symbolic(m, "k_scale"), _symbolic(m, "v_scale"))),
    ("per_channel_scales_symbolic", C(batch=1, seq=1, past=4, kv_bits=4, quant_type="PER_CHANNEL"), lambda m: (_symbolic(m, "k_scale"), _symbolic(m, "v_scale"))),
    ("key_value_past_without_shapes", C(batch=2, seq=1, past=6, past_lens=(6, 3)), lambda m: [_unshaped(m, n) for n in ("key", "value", "past_key", "past_value", "seqlens_k")]),
    ("rotary_inputs_without_shapes", C(batch=1, seq=3, past=4, rotary=True, position_ids=True), lambda m: [_unshaped(m, n) for n in ("key", "position_ids")]),
    ("per_channel_scales_without_shapes", C(batch=1, seq=1, past=4, kv_bits=8, quant_type="PER_CHANNEL"), lambda m: [_unshaped(m, n) for n in ("k_scale", "v_scale")]),
]


@pytest.mark.parametrize("name,cfg,declare", DECLARATIONS, ids=[d[0] for d in DECLARATIONS])
def test_declarations_onnxruntime_runs_agree_with_it(name, cfg, declare):
    model, feeds = make_model(cfg), make_inputs(cfg, seed=len(name))
    declare(model)
    assert not compare(cfg, _run_ours(model, feeds), run_onnxruntime(model, feeds), feeds)


def test_per_channel_scales_of_another_shape_are_read_flat():
    """onnxruntime checks only a PER_CHANNEL scale's element count (Hkv*Dh) and reads it flat."""
    cfg = C(batch=2, seq=1, past=6, past_lens=(6, 3), kv_bits=8, quant_type="PER_CHANNEL", rotary=True)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=11)
    for name, shape in (("k_scale", [cfg.kv_num_heads * cfg.head_size]), ("v_scale", [cfg.kv_num_heads, cfg.head_size])):
        dims = next(i for i in model.graph.input if i.name == name).type.tensor_type.shape.dim
        del dims[:]
        for n in shape:
            dims.add().dim_value = n
        feeds[name] = feeds[name].reshape(shape)
    assert not compare(cfg, _run_ours(model, feeds), run_onnxruntime(model, feeds), feeds)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("what", ["nan_key", "nan_value", "zero_scale", "nan_scale", "inf_v_scale"])
def test_quantized_cache_stores_nan_and_zero_scale_as_onnxruntime(bits, what):
    """onnxruntime stores a NaN as the top code (int8 127, int4 +7) and quantizes with a
    scale of 0 as with 1; the lowering cast NaN to an undefined code and divided by 0.
    A NaN scale failed torch-mlir's reciprocal assert on the refbackend."""
    cfg = C(batch=1, seq=1, past=4, kv_bits=bits)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=3)
    if what in ("zero_scale", "nan_scale"):
        feeds["k_scale"] = np.full_like(feeds["k_scale"], 0.0 if what == "zero_scale" else np.nan)
    elif what == "inf_v_scale":  # without qk_output onnxruntime dequantizes V before P.V: 0 * inf is NaN (ours gave +-inf)
        feeds["v_scale"] = np.full_like(feeds["v_scale"], np.inf)
    else:
        feeds["key" if what == "nan_key" else "value"][0, 0, 3] = np.nan
    want, got = run_onnxruntime(model, feeds), _run_ours(model, feeds)
    for name in ("present_key", "present_value"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_allclose(got["output"], want["output"], atol=1e-4, rtol=1e-4, equal_nan=True)


@pytest.mark.parametrize("total", [5, 6])
def test_query_seqlens_total_between_past_and_past_plus_s(total):
    """With query_seqlens, total_sequence_length is an upper bound: onnxruntime's present has
    max(P, total) rows for a total between P and P + S too (it was refused)."""
    cfg = C(batch=1, seq=4, past=3, past_lens=(1,), query_lens=(4,), dynamic=True)
    model = make_model(cfg)
    feeds = dict(make_inputs(cfg), total_sequence_length=np.array(total, np.int32))
    want = run_onnxruntime(model, feeds)
    assert want["present_key"].shape[2] == total
    assert not compare(cfg, _run_ours(model, feeds), want, feeds)
