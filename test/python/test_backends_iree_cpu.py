"""The iree-cpu backend: our pass inside IREE's MLIR Python bindings, IREE's llvm-cpu, iree.runtime.

* GroupQueryAttention configs (decode, prefill, packed, rotary, f16, dynamic
  dims, fixed-capacity cache, softcap / local window / sink in the decomposed
  form, output_qk, attention_bias, int8/int4 caches) match onnxruntime with 1
  thread, and the prefills and dynamic ones also with 2;
* a prefill + decode chain feeds IREE's present caches back;
* GQA between ordinary ONNX ops (which IREE's ONNX input conversion lowers);
* the pass really runs in IREE's bindings: the IR after it, printed from
  IREE's context, is checked with FileCheck;
* torch-mlir's and IREE's bindings in one process, used alternately;
* refusals raise LoweringError, IREE failures CompileStageError with an
  iree-compile command that reproduces them; the thread/device rules.

These tests need the ``iree`` extra (iree-base-compiler, iree-base-runtime).
"""

from __future__ import annotations

import gc
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.backends.iree import COMPILE_FLAGS, IreeCompiledModule, IreeCpuBackend
from gqa_torch_mlir.errors import CompileStageError, GqaTorchMlirError, LoweringError, RuntimeInvocationError
from gqa_torch_mlir.options import LoweringOptions
from gqa_torch_mlir.passes.convert_onnx_gqa_to_torch import apply_lowerings
from gqa_torch_mlir.pipeline import import_onnx
from gqa_torch_mlir.testing.filecheck import filecheck
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime
from gqa_torch_mlir.testing.tiers import EXTENDED

C = GQAConfig


def run_session(sess: InferenceSession, feeds: dict) -> dict:
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def fed_back(feeds: dict, ours, theirs):
    """A step's feeds twice: with our previous (present_key, present_value) and with onnxruntime's (as drawn at first)."""
    ours_feeds, theirs_feeds = dict(feeds), dict(feeds)
    if ours is not None:
        ours_feeds["past_key"], ours_feeds["past_value"] = ours
        theirs_feeds["past_key"], theirs_feeds["past_value"] = theirs
    return ours_feeds, theirs_feeds


def assert_matches(cfg, got, want, feeds, what=""):
    problems = compare(cfg, got, want, feeds)
    assert not problems, f"{what or cfg.name}:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------
# configs against onnxruntime
# ---------------------------------------------------------------------------

CASES = [
    ("decode_rotary", C(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True), {}),
    ("prefill", C(batch=2, seq=5, past=0), {}),
    ("chunk_rotary_interleaved", C(batch=1, seq=3, past=4, rotary=True, rotary_interleaved=True), {}),
    ("packed_decode", C(batch=2, seq=1, past=7, past_lens=(7, 4), packed=True), {}),
    ("prefill_f16", C(batch=2, seq=5, past=0, dtype="float16"), {}),
    ("decode_rotary_f16_packed", C(batch=1, seq=1, past=6, rotary=True, packed=True, dtype="float16"), {}),
    ("dynamic_mqa_packed_rotary", C(batch=1, seq=3, past=4, num_heads=4, kv_num_heads=1, rotary=True, packed=True, dynamic=True), {}),
    # iree-compile failed on the stride-2 slices of interleaved rotary with dynamic dims in f16
    ("interleaved_rotary_f16_dynamic", C(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True, rotary_interleaved=True, dtype="float16", dynamic=True), {}),
    ("dynamic_decode", C(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True, dynamic=True), {}),
    ("fixed_capacity_decode", C(batch=2, seq=1, past=8, past_lens=(5, 2), fixed_capacity=True), {}),
    ("fixed_capacity_dynamic_rotary", C(batch=2, seq=1, past=8, past_lens=(5, 2), fixed_capacity=True, dynamic=True, rotary=True), {}),
    ("softcap", C(batch=1, seq=1, past=6), {"softcap": 2.0}),
    ("local_window_decode", C(batch=2, seq=1, past=9, past_lens=(9, 4)), {"local_window_size": 3}),
    ("gemma2_like_dynamic", C(batch=2, seq=1, past=7, past_lens=(7, 2), rotary=True, dynamic=True), {"local_window_size": 4, "softcap": 30.0, "scale": 0.125}),
    ("gemma2_like_f16", C(batch=1, seq=3, past=4, dtype="float16", rotary=True), {"local_window_size": 2, "softcap": 5.0, "scale": 0.2}),
    ("packed_window_sink", C(batch=1, seq=2, past=5, packed=True, head_sink=True, rotary=True), {"local_window_size": 3}),
    ("qk_output_softcap", C(batch=1, seq=3, past=4), {"qk_output": 2, "softcap": 1.5}),
    ("bias_B1_softcap", C(batch=2, seq=1, past=6, past_lens=(6, 3), attention_bias="B1"), {"softcap": 3.0}),
    ("int8_cache_per_channel_rotary", C(batch=2, seq=1, past=6, past_lens=(6, 3), kv_bits=8, quant_type="PER_CHANNEL", rotary=True), {}),
    ("int4_cache_per_channel_dynamic", C(batch=2, seq=1, past=6, past_lens=(6, 2), kv_bits=4, quant_type="PER_CHANNEL", dynamic=True), {}),
]


# Cases also run on 2 worker threads: prefills and dynamic shapes, whose dispatches split
# into several workgroups (a decode step of batch 2 with static dims hardly splits).  The fast
# tier runs those on 2 threads only.
TWO_THREADS = {"prefill", "prefill_f16", "dynamic_mqa_packed_rotary", "gemma2_like_f16", "fixed_capacity_dynamic_rotary", "int4_cache_per_channel_dynamic"}
THREADED_CASES = [(c, 1) for c in CASES if EXTENDED or c[0] not in TWO_THREADS] + [(c, 2) for c in CASES if c[0] in TWO_THREADS]


@pytest.mark.parametrize("case,threads", THREADED_CASES, ids=[f"{c[0]}-{t}thread{'s' * (t > 1)}" for c, t in THREADED_CASES])
def test_matches_onnxruntime(case, threads):
    name, cfg, attrs = case
    model = make_model(cfg, attrs)
    feeds = make_inputs(cfg, seed=len(name))
    sess = InferenceSession(model, backend="iree-cpu", threads=threads)
    assert_matches(cfg, run_session(sess, feeds), run_onnxruntime(model, feeds), feeds, f"{name} ({cfg.name}, {attrs})")


def test_output_selection_and_repeated_runs():
    """onnxruntime's run conventions: named outputs in the order asked, runs independent of each other."""
    cfg = C(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True, dynamic=True)
    model = make_model(cfg)
    sess = InferenceSession(model, backend="iree-cpu", threads=1)
    first = make_inputs(cfg, seed=1)
    want = run_onnxruntime(model, first)
    present_value, output = sess.run(["present_value", "output"], first)
    subset = {n: want[n] for n in ("present_value", "output")}
    assert_matches(cfg, {"present_value": present_value, "output": output}, subset, first)
    other_cfg = C(batch=1, seq=4, past=3, rotary=True, dynamic=True)  # other sizes, same dynamic model
    other = make_inputs(other_cfg, seed=2)
    assert_matches(other_cfg, run_session(sess, other), run_onnxruntime(model, other), other)
    assert_matches(cfg, run_session(sess, first), want, first, "first feeds again")
    # A view of a result (serving code's logits[:, -1]) outlives the result itself: the device
    # buffer must too (it was freed with the result, and later calls overwrote the view).
    last_row = sess.run(["output"], first)[0][:, -1]
    for seed in range(3, 13):
        sess.run(None, make_inputs(cfg, seed=seed))
        gc.collect()
    np.testing.assert_allclose(last_row, want["output"][:, -1], atol=1e-5)
    with pytest.raises(RuntimeInvocationError, match="missing"):
        sess.run(None, {k: v for k, v in first.items() if k != "seqlens_k"})


def test_prefill_then_decode_feeding_the_cache_back():
    steps_n, prompt = 3, 4
    common = dict(batch=1, num_heads=4, kv_num_heads=2, head_size=16, rotary=True, dynamic=True,
                  rotary_cache_len=prompt + steps_n + 2)
    steps = [C(seq=prompt, past=0, **common)] + [C(seq=1, past=prompt + i, **common) for i in range(steps_n)]
    model = make_model(steps[0])
    sess = InferenceSession(model, backend="iree-cpu", threads=2)
    ours = theirs = None
    for i, cfg in enumerate(steps):
        feeds = make_inputs(cfg, seed=100 + i)
        ours_feeds, theirs_feeds = fed_back(feeds, ours, theirs)
        got = run_session(sess, ours_feeds)
        want = run_onnxruntime(model, theirs_feeds)
        assert got["present_key"].shape == (1, 2, cfg.total, 16)
        assert_matches(cfg, got, want, theirs_feeds, f"step {i} ({cfg.name})")
        ours, theirs = (got["present_key"], got["present_value"]), (want["present_key"], want["present_value"])


def _fixed_capacity_steps(n: int):
    common = dict(batch=2, seq=1, past=12, num_heads=4, kv_num_heads=2, head_size=16, fixed_capacity=True, rotary=True)
    return [C(past_lens=(5 + i, 3 + i), **common) for i in range(n)]


def test_shared_buffers_update_the_fixed_capacity_cache_in_place():
    """genai's shared past/present mode: present comes back in past's buffer, and only the new rows are uploaded."""
    steps = _fixed_capacity_steps(4)
    model = make_model(steps[0])
    sess = InferenceSession(model, backend="iree-cpu", threads=1, share_buffers=True)
    ours = theirs = None
    for i, cfg in enumerate(steps):
        feeds = make_inputs(cfg, seed=200 + i)
        ours_feeds, theirs_feeds = fed_back(feeds, ours, theirs)
        if not i:  # the first past is put on the device once, as an OrtValue would be
            ours_feeds["past_key"], ours_feeds["past_value"] = (sess.resident(feeds[n]) for n in ("past_key", "past_value"))
        got = run_session(sess, ours_feeds)
        cache_bytes = ours_feeds["past_key"].nbytes + ours_feeds["past_value"].nbytes
        assert sess.uploaded_bytes < cache_bytes, (sess.uploaded_bytes, cache_bytes)
        # the caches stayed on the device and were written in place: present is the array fed as past
        # (no new mapping of the buffer per call)
        assert got["present_key"] is ours_feeds["past_key"] and got["present_value"] is ours_feeds["past_value"]
        want = run_onnxruntime(model, theirs_feeds)
        assert_matches(cfg, got, want, theirs_feeds, f"step {i}")
        ours, theirs = (got["present_key"], got["present_value"]), (want["present_key"], want["present_value"])
    # One buffer fed as both caches reads as fed: each in-place write needs its own buffer.
    feeds = make_inputs(_fixed_capacity_steps(5)[-1], seed=300)
    got = run_session(sess, dict(feeds, past_key=ours[0], past_value=ours[0]))
    theirs_feeds = dict(feeds, past_key=theirs[0], past_value=theirs[0].copy())
    assert_matches(steps[-1], got, run_onnxruntime(model, theirs_feeds), theirs_feeds, "one buffer as past_key and past_value")


def test_shared_buffers_with_a_4bit_cache():
    """A 4-bit cache (uint8 bytes, int8 in the compiled code) stays on the device and is updated in place too."""
    steps = [C(batch=1, seq=1, past=8, past_lens=(n,), fixed_capacity=True, kv_bits=4, quant_type="PER_CHANNEL") for n in (3, 4)]
    model = make_model(steps[0])
    sess = InferenceSession(model, backend="iree-cpu", threads=1, share_buffers=True)
    first_feeds = make_inputs(steps[0], seed=7)
    first, want = run_session(sess, first_feeds), run_onnxruntime(model, first_feeds)
    feeds = make_inputs(steps[1], seed=8)
    ours_feeds, theirs_feeds = fed_back(feeds, (first["present_key"], first["present_value"]), (want["present_key"], want["present_value"]))
    second = run_session(sess, ours_feeds)
    assert np.shares_memory(second["present_key"], first["present_key"])
    assert sess.uploaded_bytes == sum(np.asarray(v).nbytes for k, v in feeds.items() if not k.startswith("past_"))  # no cache upload
    assert_matches(steps[1], second, run_onnxruntime(model, theirs_feeds), theirs_feeds, "the 4-bit cache fed back")


def test_without_shared_buffers_a_fed_cache_is_never_changed():
    steps = _fixed_capacity_steps(2)
    model = make_model(steps[0])
    sess = InferenceSession(model, backend="iree-cpu", threads=1)
    first = run_session(sess, make_inputs(steps[0], seed=1))
    fed = first["present_key"].copy()
    feeds = dict(make_inputs(steps[1], seed=2), past_key=first["present_key"], past_value=first["present_value"])
    second = run_session(sess, feeds)
    np.testing.assert_array_equal(first["present_key"], fed)
    assert not np.shares_memory(second["present_key"], first["present_key"])
    assert sess.uploaded_bytes > first["present_key"].nbytes


_SHARED_BUFFERS_THEN_EXIT = textwrap.dedent(
    """
    from gqa_torch_mlir import InferenceSession
    from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, make_inputs, make_model

    cfg = GQAConfig(batch=1, seq=1, past=8, past_lens=(3,), fixed_capacity=True)
    session = InferenceSession(make_model(cfg), backend="iree-cpu", share_buffers=True, threads=1)
    feeds = make_inputs(cfg, seed=5)
    outputs = session.run(None, feeds)  # kept until the interpreter exits
    again = session.run(None, dict(feeds, past_key=outputs[1], past_value=outputs[2]))
    print("ran", flush=True)
    """
)


def test_shared_buffers_survive_interpreter_exit():
    """The arrays share_buffers hands out (and their device buffers) are freed before the
    IREE device: a reference cycle left them to the cyclic GC at exit, which freed them
    after it (a segfault in 7 of 8 runs)."""
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", _SHARED_BUFFERS_THEN_EXIT], capture_output=True, text=True, timeout=600)
        assert run.returncode == 0 and "ran" in run.stdout, f"exit {run.returncode}:\n{run.stdout}{run.stderr[-2000:]}"


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_sdpa_masks_a_bias_column_the_query_does_not_see(value):
    """attention_bias NaN or +inf in a causally masked column: onnxruntime never reads it;
    SDPA's additive mask made it -inf + NaN = NaN in every head of that query (now a select)."""
    cfg = GQAConfig(batch=1, seq=3, past=0, attention_bias="11")
    model, feeds = make_model(cfg), make_inputs(cfg)
    feeds["attention_bias"][0, 0, 0, 2] = value  # query 0 sees column 0 only
    want = run_onnxruntime(model, feeds)
    assert np.isfinite(want["output"]).all()
    session = InferenceSession(model, backend="iree-cpu", attention="sdpa", threads=1)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert not compare(cfg, got, want, feeds)


def test_shared_buffers_need_iree():
    model = make_model(_fixed_capacity_steps(1)[0])
    with pytest.raises(GqaTorchMlirError, match="share_buffers needs backend 'iree-cpu'"):
        InferenceSession(model, share_buffers=True)
    with pytest.raises(GqaTorchMlirError, match="resident\\(\\) needs"):
        InferenceSession(model, backend="iree-cpu", threads=1).resident(np.zeros(3, np.float32))


def test_growing_cache_fed_back_stays_on_the_device():
    """share_buffers with a growing cache: the past is read from the device, present is a new buffer."""
    steps = [C(batch=1, seq=1, past=4 + i, num_heads=4, kv_num_heads=2, head_size=16, rotary=True, dynamic=True,
               rotary_cache_len=12) for i in range(3)]
    model = make_model(steps[0])
    sess = InferenceSession(model, backend="iree-cpu", threads=1, share_buffers=True)
    ours = theirs = None
    for i, cfg in enumerate(steps):
        feeds = make_inputs(cfg, seed=300 + i)
        ours_feeds, theirs_feeds = fed_back(feeds, ours, theirs)
        before = np.array(ours_feeds["past_key"])
        got = run_session(sess, ours_feeds)
        np.testing.assert_array_equal(ours_feeds["past_key"], before)  # a growing step only reads its past
        if i:  # everything but the caches was uploaded
            assert sess.uploaded_bytes == sum(v.nbytes for k, v in feeds.items() if not k.startswith("past_"))
        want = run_onnxruntime(model, theirs_feeds)
        assert_matches(cfg, got, want, theirs_feeds, f"step {i}")
        ours, theirs = (got["present_key"], got["present_value"]), (want["present_key"], want["present_value"])


# The builder's form: seqlens_k and total_sequence_length from an attention mask (the total its
# width, known on the host), every size dynamic, one model.  A fixed-capacity buffer's decode step
# takes the in-place branch (the kernel reads the lengths on the device); a prompt, a chunk, two
# batch rows or a growing cache take the others.
MASKED = dict(num_heads=4, kv_num_heads=2, head_size=16, rotary=True, rotary_cache_len=24, dynamic=True, mask=True)


MASKED_GENERATIONS = {
    "fixed_buffer": [C(batch=1, seq=5, past=16, past_lens=(0,), fixed_capacity=True, **MASKED)]
    + [C(batch=1, seq=1, past=16, past_lens=(5 + i,), fixed_capacity=True, **MASKED) for i in range(3)],
    "growing": [C(batch=1, seq=5, past=0, **MASKED)] + [C(batch=1, seq=1, past=5 + i, **MASKED) for i in range(3)],
}


@pytest.mark.parametrize("steps", MASKED_GENERATIONS.values(), ids=MASKED_GENERATIONS.keys())
def test_masked_generation(steps):
    """A prompt of 5 tokens then 3 decode steps, the presents fed back (a 16-row buffer written in
    place, or a growing cache), against onnxruntime fed its own presents."""
    model = make_model(steps[0])
    sess = InferenceSession(model, backend="iree-cpu", threads=1, share_buffers=True)
    ours = theirs = None
    for i, cfg in enumerate(steps):
        ours_feeds, theirs_feeds = fed_back(make_inputs(cfg, seed=600 + i), ours, theirs)
        got = run_session(sess, ours_feeds)
        want = run_onnxruntime(model, theirs_feeds)
        assert_matches(cfg, got, want, theirs_feeds, f"step {i}")
        ours, theirs = (got["present_key"], got["present_value"]), (want["present_key"], want["present_value"])


def with_static_dims(model: onnx.ModelProto, sizes: dict) -> onnx.ModelProto:
    """``model`` with the named dims of its graph inputs and outputs declared static."""
    for vi in list(model.graph.input) + list(model.graph.output):
        for dim in vi.type.tensor_type.shape.dim:
            if dim.dim_param in sizes:
                dim.dim_value = sizes[dim.dim_param]
    return model


@pytest.mark.parametrize("static", [{}, {"batch": 1}] + ([{"past": 9}] if EXTENDED else []),
                         ids=["dynamic", "batch_of_1"] + (["declared_rows"] if EXTENDED else []))
def test_masked_decode_writes_the_buffer_in_place(static):
    """Fed back (share_buffers), the decode branch's presents are the pasts' memory: IREE did not
    copy the caches first (it did where they reached the kernel as the function's arguments: with
    the cache's rows declared, no branch on its growth passes them on)."""
    cfg = C(batch=1, seq=1, past=9, past_lens=(6,), fixed_capacity=True, **MASKED)
    model, feeds = with_static_dims(make_model(cfg), static), make_inputs(cfg, seed=8)
    sess = InferenceSession(model, backend="iree-cpu", threads=1, share_buffers=True)
    _, key, value = sess.run(None, feeds)
    _, key_after, value_after = sess.run(None, dict(feeds, past_key=key, past_value=value))
    address = lambda a: np.asarray(a).__array_interface__["data"][0]  # noqa: E731
    assert (address(key_after), address(value_after)) == (address(key), address(value))


@pytest.mark.parametrize("attention", ["fused", "decomposed"])
def test_a_masked_growing_step_grows_its_caches_by_one_row(attention):
    """A growing decode step grows each cache by one row (kv_cache._grown_by_some): by our copy
    kernel (kernels/cache_grow.py) in the decode branch; without the kernel, where S is declared 1,
    as a concatenation.  Padded by a run-time row count, IREE filled the whole grown buffer before
    it copied the past in."""
    cfg = C(batch=1, seq=1, past=7, **MASKED)
    model = make_model(cfg) if attention == "fused" else with_static_dims(make_model(cfg), {"seq": 1})
    ir = IreeCpuBackend(threads=1, options=LoweringOptions.for_backend("iree-cpu", attention=attention)).lower(model).asm()
    copied = ir.count("flow.dispatch @gqa_cache_grow_hkv2_dh16_executable::")
    concatenated = re.findall(r"torch\.aten\.cat .* -> !torch\.vtensor<\[(?:1|\?),2,\?,16\],f32>", ir)
    if attention == "fused":
        assert (copied, len(concatenated)) == (2, 0)  # past_key's and past_value's
    else:
        assert copied == 0 and len(concatenated) == 4  # both caches in the branches of one batch row and of several
        feeds = make_inputs(cfg, seed=9)
        got = run_session(InferenceSession(model, backend="iree-cpu", threads=1, attention="decomposed"), feeds)
        assert_matches(cfg, got, run_onnxruntime(model, feeds), feeds)


MASKED_STEPS = [
    C(batch=1, seq=1, past=9, past_lens=(6,), fixed_capacity=True, **MASKED),  # the in-place branch
    C(batch=1, seq=1, past=7, **MASKED),  # growing: total > P
    C(batch=1, seq=1, past=0, **MASKED),  # a one-token prompt: growing from an empty past
    C(batch=2, seq=1, past=7, **MASKED),  # growing, two batch rows: the new rows scattered into the kernel's copies
] + ([  # the extended tier: two batch rows in place, the copy's last block whole (cache_grow.ROWS),
    # a buffer's last row in two blocks, a chunk (the masked generations' prompt is one)
    C(batch=2, seq=1, past=9, past_lens=(6, 3), fixed_capacity=True, **MASKED),
    C(batch=1, seq=1, past=256, **dict(MASKED, rotary_cache_len=264)),
    C(batch=1, seq=1, past=1030, past_lens=(1029,), fixed_capacity=True, **dict(MASKED, rotary_cache_len=1040)),
    C(batch=1, seq=3, past=12, past_lens=(4,), fixed_capacity=True, **MASKED),
] if EXTENDED else [])


@pytest.mark.parametrize("cfg", MASKED_STEPS, ids=lambda c: c.name)
def test_masked_steps(cfg):
    model, feeds = make_model(cfg), make_inputs(cfg, seed=7)
    assert_matches(cfg, run_session(InferenceSession(model, backend="iree-cpu", threads=1), feeds), run_onnxruntime(model, feeds), feeds)


@pytest.mark.parametrize("seq", [12, 1] if EXTENDED else [12], ids=["prompt", "decode"] if EXTENDED else ["prompt"])
def test_a_norm_of_the_masked_output_alone(seq):
    """SimplifiedLayerNormalization of the attention output alone (gemma2's post-attention norm):
    its sizes are the decode branch's join's.  A branch yielding B and S as the constants 1 let IREE
    3.13's integer-range folding size the norm's 8-lane partial sums as if B*S were at most 2:
    rows from the third on were normalized wrongly, and the heap overran (benchmarks/README.md,
    "CPU, round 21")."""
    cfg = C(batch=1, seq=seq, past=0 if seq > 1 else 7, **MASKED)
    model = make_model(cfg)
    width = cfg.num_heads * cfg.head_size
    scale = np.random.default_rng(21).standard_normal(width).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(scale, "norm_scale"))
    model.graph.node.append(helper.make_node("SimplifiedLayerNormalization", ["output", "norm_scale"], ["normed"], axis=-1, epsilon=1e-6))
    model.graph.output.append(helper.make_tensor_value_info("normed", TensorProto.FLOAT, None))
    feeds = make_inputs(cfg, seed=21)
    got, want = run_session(InferenceSession(model, backend="iree-cpu", threads=1), feeds), run_onnxruntime(model, feeds)
    np.testing.assert_allclose(got["normed"], want["normed"], rtol=0, atol=1e-4)
    assert_matches(cfg, {k: v for k, v in got.items() if k != "normed"}, {k: v for k, v in want.items() if k != "normed"}, feeds)


def test_gqa_between_onnx_ops():
    """MatMul -> GQA -> Add: the ordinary ONNX ops go through IREE's own ONNX input conversion."""
    cfg = C(batch=2, seq=1, past=5, past_lens=(5, 2), rotary=True)
    model = make_model(cfg)
    g = model.graph
    rng = np.random.default_rng(3)
    width = cfg.num_heads * cfg.head_size
    g.node[0].input[0] = "q_proj"
    g.node[0].output[0] = "attn"
    w_q = (rng.standard_normal((12, width)) / 4).astype(np.float32)
    g.initializer.append(numpy_helper.from_array(w_q, "w_q"))
    g.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, [cfg.batch, cfg.seq, 12]))
    g.node.insert(0, helper.make_node("MatMul", ["x", "w_q"], ["q_proj"], name="proj_q"))
    g.input.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, [cfg.batch, cfg.seq, width]))
    g.node.append(helper.make_node("Add", ["attn", "bias"], ["output"], name="add"))
    feeds = make_inputs(cfg, seed=5)
    feeds["x"] = rng.standard_normal((cfg.batch, cfg.seq, 12)).astype(np.float32)
    feeds["bias"] = rng.standard_normal((cfg.batch, cfg.seq, width)).astype(np.float32)
    del feeds["query"]
    want = run_onnxruntime(model, feeds)
    assert_matches(cfg, run_session(InferenceSession(model, backend="iree-cpu", threads=1), feeds), want, feeds)


# ---------------------------------------------------------------------------
# the pass inside IREE's bindings
# ---------------------------------------------------------------------------


def test_pass_runs_in_iree_bindings(tmp_path):
    from iree.compiler import ir as iree_ir

    cfg = C(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True)
    lowered = IreeCpuBackend(threads=1).lower(make_model(cfg))
    assert isinstance(lowered.module, iree_ir.Module)
    assert type(lowered.module.operation).__module__.startswith("iree.compiler.")
    context = lowered.module.context
    assert context is lowered.session.context
    assert context.is_registered_operation("torch.aten.scatter.src")
    # Registered ops print in their custom form, unregistered ones generically ("torch.aten...."(...)).
    # The run-time checks come after the attention (iree-cpu's fused decode kernel: one block of
    # 8 rows, one dispatch): no read or assert of them, returned as one more result, [K] i1
    # (deferred_checks.py's as_result), their messages in the function's reflection.
    filecheck(
        lowered.asm(),
        f"""\
        CHECK-LABEL: func.func @"{lowered.function}"(
        CHECK-NOT: onnx.GroupQueryAttention
        CHECK: = torch.aten.scatter.src %
        CHECK: = torch.aten.scatter.src %
        CHECK: flow.dispatch @gqa_decode_attention_b2_hkv2_g2_dh16_t8_executable::
        CHECK-NOT: flow.dispatch @gqa_decode_attention
        CHECK-NOT: torch.aten.Bool.Tensor
        CHECK-NOT: torch.runtime.assert
        CHECK: %[[CHECKS:.+]] = torch.aten.cat
        CHECK-NOT: onnx.GroupQueryAttention
        CHECK: return {{{{.*}}}}, %[[CHECKS]] : {{{{.*}}}}, !torch.vtensor<[{{{{[0-9]+}}}}],i1>
        """,
        tmp_path,
    )
    # ... and that very module is what IREE compiles.
    compiled = IreeCompiledModule(IreeCpuBackend(threads=1).compile_lowered(lowered), lowered.function, lowered.output_dtypes, 1)
    assert any("seqlens_k[b] must be >= 0" in m for m in compiled.checks(lowered.function))  # the reflection's
    feeds = make_inputs(cfg)
    model = make_model(cfg)
    got = dict(zip([o.name for o in model.graph.output], compiled.invoke(lowered.function, *[feeds[i.name] for i in model.graph.input])))
    assert_matches(cfg, got, run_onnxruntime(model, feeds), feeds)


def test_torch_mlir_and_iree_bindings_in_one_process():
    """Both MLIR Python bindings, their contexts and the two backends, used alternately."""
    import torch_mlir.ir as torch_ir
    from iree.compiler import ir as iree_ir

    import gqa_torch_mlir

    cfg = C(batch=2, seq=1, past=7, past_lens=(7, 4), rotary=True, dynamic=True)
    model = make_model(cfg)
    feeds = make_inputs(cfg, seed=9)
    want = run_onnxruntime(model, feeds)
    sessions = []
    for round_ in range(2):
        for backend in ("refbackend", "iree-cpu") if round_ == 0 else ():  # compiled once: the second round lowers only
            sess = InferenceSession(model, backend=backend, threads=1)
            sessions.append(sess)
            assert_matches(cfg, run_session(sess, feeds), want, feeds, f"round {round_} {backend}")
        torch_module = gqa_torch_mlir.compile(model, output_type="torch")
        iree_lowered = IreeCpuBackend(threads=1).lower(model)
        assert isinstance(torch_module, torch_ir.Module) and isinstance(iree_lowered.module, iree_ir.Module)
        torch_text, iree_text = str(torch_module), iree_lowered.asm()
        for text in (torch_text, iree_text):
            assert "torch.aten.scatter.src" in text and "onnx.GroupQueryAttention" not in text
    for sess in sessions:  # every compiled module still runs
        assert_matches(cfg, run_session(sess, feeds), want, feeds)


# ---------------------------------------------------------------------------
# failures
# ---------------------------------------------------------------------------


def test_refusal_raises_lowering_error_with_repro():
    cfg = C(batch=1, seq=1, past=4)
    with pytest.raises(LoweringError) as info:
        InferenceSession(make_model(cfg, {"scale": float("inf")}), backend="iree-cpu", threads=1)
    err = info.value
    assert len(err.diagnostics) == 1
    assert "attribute 'scale': value inf is not supported" in err.diagnostics[0]
    command = str(err).rsplit("\n", 1)[-1].strip()
    assert command.startswith("gqa-torch-mlir-opt --pass-pipeline='builtin.module(guard-onnx-indices,convert-onnx-gqa-to-torch)' ")
    tool = os.path.join(os.path.dirname(sys.executable), "gqa-torch-mlir-opt")
    proc = subprocess.run([tool, *shlex.split(command)[1:]], capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "value inf is not supported" in proc.stderr


def _unknown_op_model() -> onnx.ModelProto:
    node = helper.make_node("FancyOp", ["x"], ["y"], name="fancy", domain="com.example")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.example", 1)])
    model.ir_version = 10
    return model


def test_iree_failure_raises_compile_stage_error_with_iree_compile_repro():
    with pytest.raises(CompileStageError) as info:
        InferenceSession(_unknown_op_model(), backend="iree-cpu", threads=1)
    err = info.value
    assert err.stage == "iree-compile"
    assert 'failed to legalize operation \'torch.operator\'' in err.diagnostics and "onnx.FancyOp" in err.diagnostics
    args = shlex.split(err.repro)
    assert os.path.basename(args[0]) == "iree-compile" and args[1 : 1 + len(COMPILE_FLAGS)] == list(COMPILE_FLAGS)
    assert os.path.exists(args[0]) or args[0] == "iree-compile"
    if args[0] == "iree-compile":
        args[0] = os.path.join(os.path.dirname(sys.executable), "iree-compile")
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "onnx.FancyOp" in proc.stderr


def test_failed_run_time_check_raises_its_message():
    """The step returns its checks (deferred_checks.py's as_result); one that failed raises its
    message, with no VM stack listing."""
    cfg = C(batch=1, seq=1, past=4, attention_bias="BH", dynamic=True)
    good = make_inputs(cfg)
    bias = good["attention_bias"]
    bad = dict(good, attention_bias=np.pad(bias, [(0, 0)] * 3 + [(0, 7 - bias.shape[3])]))
    sess = InferenceSession(make_model(cfg), backend="iree-cpu", threads=1)
    with pytest.raises(RuntimeInvocationError) as info:
        sess.run(None, bad)
    text = str(info.value)
    assert "attention_bias's last dimension must equal total_sequence_length" in text, text
    assert "bytecode module" not in text and "FAILED_PRECONDITION" not in text, text
    assert_matches(cfg, run_session(sess, good), run_onnxruntime(make_model(cfg), good), good, "after the failure")
    with pytest.raises(RuntimeInvocationError, match="attention_bias's last dimension"):  # the lean path's read too
        sess.run(None, bad)


def test_a_decode_step_waits_once(tmp_path):
    """A decode step of declared sizes reads nothing back mid-call: its checks are returned
    (deferred_checks.py's as_result), so IREE's stream IR of the step has one execution and no
    host wait inside it (read in the module, they made the host wait and then submit one more
    queue operation: benchmarks/README.md, "CPU, round 22")."""
    cfg = C(batch=1, seq=1, past=9, past_lens=(6,), fixed_capacity=True)
    backend = IreeCpuBackend(threads=2)
    src, out = tmp_path / "step.mlir", tmp_path / "step.stream.mlir"
    src.write_text(backend.lower(make_model(cfg)).asm())
    tool = os.path.join(os.path.dirname(sys.executable), "iree-compile")
    subprocess.run([tool, *backend.flags, "--compile-to=stream", str(src), "-o", str(out)], check=True)
    text = out.read_text()
    assert text.count("stream.cmd.execute") == 1, text
    assert "stream.timepoint.await" not in text and "stream.resource.load" not in text and "cf.cond_br" not in text, text


@pytest.mark.parametrize("threads, dynamic", [(1, False), (2, False), (2, True)])
def test_deferred_checks_name_the_failing_one(threads, dynamic):
    """The checks run after the step, one read of their conjunction; a failing one still names
    itself, on local-sync and local-task alike, and the session runs on afterwards (dynamic: the
    checks of the step's branch on a batch of one, hoisted out of it)."""
    cfg = C(batch=1, seq=1, past=9, past_lens=(6,), fixed_capacity=True, dynamic=dynamic)
    model, good = make_model(cfg), make_inputs(cfg)
    sess = InferenceSession(model, backend="iree-cpu", threads=threads)
    cases = [
        ("seqlens_k", np.array([-7], np.int32), "seqlens_k[b] must be >= 0"),
        ("seqlens_k", np.array([5000], np.int32), "total_sequence_length must be at least seqlens_k[b]"),
        ("total_sequence_length", np.array(9999, np.int32), "be at most the past length"),  # the rule as declared (dynamic: or past + S)
    ]
    for name, value, message in cases:
        with pytest.raises(RuntimeInvocationError, match=re.escape(message)):
            sess.run(None, dict(good, **{name: value.reshape(good[name].shape)}))
    assert_matches(cfg, run_session(sess, good), run_onnxruntime(model, good), good, "after the failures")


def test_checks_leave_the_batch_branch():
    """A run-time batch size puts GroupQueryAttention's step behind a branch on B == 1; deferred
    (as the IREE backends lower), its checks on tensors leave that branch and are returned with
    the others (iree-cpu: deferred_checks.py's as_result): none is read or asserted in the
    function, where each read would make the host wait for the device mid-step."""
    model = make_model(C(batch=1, seq=1, past=9, past_lens=(6,), fixed_capacity=True, dynamic=True))
    module = IreeCpuBackend(threads=1, options=LoweringOptions.for_backend("iree-cpu")).lower(model).module  # checks deferred
    (func,) = [op for op in module.body.operations if op.operation.name == "func.func"]
    top = [op.operation for op in func.regions[0].blocks[0].operations]
    branches = [op for op in top if op.name == "torch.prim.If"]
    in_branch = [[op.operation.name for op in region.blocks[0].operations] for op in branches for region in op.regions]
    batch_of_one = [names for names in in_branch if "torch.tensor_static_info_cast" in names and "torch.aten.slice_scatter" in names]
    assert batch_of_one, "no branch on a batch of one"
    assert not any("torch.runtime.assert" in names for names in in_branch)
    assert not [op for op in top if op.name == "torch.aten.Bool.Tensor"]  # (the dims' asserts stay: host values)
    batch_if = next(op for op in branches if any("torch.aten.slice_scatter" in [o.operation.name for o in r.blocks[0].operations]
                                                 for r in op.regions))
    checks_K = top[-1].operands[len(top[-1].operands) - 1]  # the return's last: the checks, [K] i1
    assert str(checks_K.type).endswith("],i1>"), checks_K.type
    joined = checks_K.owner.operands[0].owner  # aten.cat of the checks' [1] views
    oks = [v.owner.operands[0] for v in joined.operands]  # each [] -> [1]
    yielded = [op.operands[0] for op in (ok.owner.operation for ok in oks) if op.name == "torch.aten.select.int"]
    assert any(v.owner == batch_if for v in yielded)  # the branch's checks, yielded by it as one [K+1] i1 ...
    assert [str(r.type) for r in batch_if.results if str(r.type).endswith("],i1>")] == [str(yielded[0].type)]  # ... alone
    from iree.compiler import ir as iree_ir

    messages = json.loads(iree_ir.StringAttr(func.operation.attributes["iree.reflection"]["gqa.checks"]).value)
    assert len(messages) == len(oks) >= 4 and any("seqlens_k[b] must be >= 0" in m for m in messages), messages


def test_checks_leave_nested_branches():
    """The builder's form (a total known on the host) puts a decode step of one batch row behind a
    branch of its own, and the branch on B == 1 into the other one: the checks on tensors leave
    every branch, the nested ones too (none is asserted inside any branch; all are returned),
    and the decode branch dispatches the kernel's put, which writes the row in place at lengths
    read on the device (T at run time: ``_td_dl``)."""
    model = make_model(C(batch=1, seq=1, past=9, past_lens=(6,), fixed_capacity=True, **MASKED))
    module = IreeCpuBackend(threads=1, options=LoweringOptions.for_backend("iree-cpu")).lower(model).module
    (func,) = [op for op in module.body.operations if op.operation.name == "func.func" and "gqa_decode" not in str(op.operation.attributes["sym_name"])]
    top = [op.operation for op in func.regions[0].blocks[0].operations]

    def nested(op, depth=0):
        for region in op.regions:
            for inner in region.blocks[0].operations:
                yield inner.operation, depth
                yield from nested(inner.operation, depth + 1)

    inside = [(o, d) for op in top if op.name == "torch.prim.If" for o, d in nested(op)]
    assert not [o for o, _ in inside if o.name == "torch.runtime.assert" and "Bool.Tensor" in str(o.operands[0].owner)]
    assert not [op for op in top if op.name == "torch.aten.Bool.Tensor"]  # returned (deferred_checks.py's as_result)
    puts = [d for o, d in inside if o.name == "flow.dispatch" and "_td_dl_executable::" in str(o) and "_put" in str(o)]
    assert puts == [0], puts  # in a top-level If
    assert any(o.name == "torch.prim.If" and d == 0 and "torch.tensor_static_info_cast" in str(o) for o, d in inside)  # B == 1, nested


def test_bad_flag_is_a_stage_error():
    with pytest.raises(CompileStageError) as info:
        IreeCpuBackend(threads=1, extra_flags=["--iree-no-such-flag"]).compile(make_model(C()))
    assert info.value.stage == "iree-flags"


def test_bad_threads():
    with pytest.raises(GqaTorchMlirError, match="threads"):
        InferenceSession(make_model(C()), backend="iree-cpu", threads=0)


def test_thread_counts_in_a_fresh_process():
    """threads=1 starts no IREE worker; threads=2 starts two; one local-task count per process."""
    script = textwrap.dedent(
        """
        import os
        from gqa_torch_mlir import InferenceSession
        from gqa_torch_mlir.errors import GqaTorchMlirError
        from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, make_inputs, make_model

        import time

        def workers(expected):
            # Worker threads name themselves once started: wait a little for them.
            deadline, count = time.monotonic() + 10, 0
            while True:
                names = []
                for t in os.listdir("/proc/self/task"):
                    try:
                        names.append(open(f"/proc/self/task/{t}/comm").read())
                    except OSError:
                        pass  # a thread that just ended
                count = sum(n.startswith("iree-worker") for n in names)
                if count >= expected or time.monotonic() > deadline:
                    return count
                time.sleep(0.05)

        cfg = GQAConfig(batch=1, seq=1, past=3)
        model, feeds = make_model(cfg), make_inputs(cfg)
        InferenceSession(model, backend="iree-cpu", threads=1).run(None, feeds)
        print("after threads=1:", workers(0))
        InferenceSession(model, backend="iree-cpu", threads=2).run(None, feeds)
        time.sleep(0.5)
        print("after threads=2:", workers(2))
        try:
            InferenceSession(model, backend="iree-cpu", threads=3)
        except GqaTorchMlirError as e:
            print("threads=3:", e)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "after threads=1: 0\n" in proc.stdout
    assert "after threads=2: 2\n" in proc.stdout
    assert "threads=3: iree-cpu: threads=3 was asked for, but this process's local-task device already has 2 workers" in proc.stdout
    assert "leaked" not in proc.stderr


def _gqa_in_if(cfg: GQAConfig) -> onnx.ModelProto:
    """``If(cond)`` with the model's GQA node in both branches (the else branch with a window)."""
    model = make_model(cfg)
    g, gqa = model.graph, model.graph.node[0]
    branches = []
    for name, attrs in (("then", {}), ("else", {"local_window_size": 2})):
        node = onnx.NodeProto()
        node.CopyFrom(gqa)
        node.name = f"gqa_{name}"
        del node.output[:]
        node.output.extend(f"{o}_{name}" for o in gqa.output)
        node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
        outputs = [helper.make_value_info(f"{o.name}_{name}", o.type) for o in g.output]
        branches.append(helper.make_graph([node], f"branch_{name}", [], outputs))
    del g.node[:]
    g.node.append(helper.make_node("If", ["cond"], [o.name for o in g.output], name="if", then_branch=branches[0], else_branch=branches[1]))
    g.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    return model


def test_dynamic_gqa_in_an_if_is_refused_by_name():
    """IREE 3.13 miscompiles it (wrong present rows now and then, or SIGSEGV); refused before compiling."""
    model = _gqa_in_if(GQAConfig(batch=2, seq=1, past=5, dynamic=True))
    with pytest.raises(LoweringError, match=r"node 'gqa_(then|else)' \(GroupQueryAttention\) in a branch of node 'if' \(If\): "
                                            r"a GroupQueryAttention with dynamic shapes inside an If is refused on iree-cpu"):
        IreeCpuBackend().lower(model)


def test_static_gqa_in_an_if_matches_onnxruntime_call_after_call():
    cfg = GQAConfig(batch=2, seq=1, past=5, rotary=True, attention_bias="BH", head_sink=True)
    model = _gqa_in_if(cfg)
    session = InferenceSession(model, backend="iree-cpu")
    kept = []  # results kept alive across calls, as a caller does
    for seed in range(6):
        feeds = {**make_inputs(cfg, seed=seed), "cond": np.array(seed % 2 == 0)}
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        kept.append(got)
        assert compare(cfg, got, run_onnxruntime(model, feeds), feeds) == [], f"call {seed}"


def test_a_target_cpu_llvm_aborts_on_is_refused_by_name():
    """``extra_flags`` naming a CPU LLVM does not know ended the Python process with exit code 1 and no
    message (LLVM's fatal error inside IREE's in-process compile; backends/iree/target_check.py).
    Run in a child process, so that the old behaviour fails this test instead of ending the run."""
    code = textwrap.dedent("""
        from gqa_torch_mlir.backends.iree import IreeCpuBackend
        from gqa_torch_mlir.errors import GqaTorchMlirError
        from gqa_torch_mlir.testing.matmul import weight_matmul_model
        try:
            IreeCpuBackend(extra_flags=["--iree-llvmcpu-target-cpu=bogus"]).compile(weight_matmul_model([2]))
        except GqaTorchMlirError as e:
            print("refused:", e)
        IreeCpuBackend(extra_flags=["--iree-llvmcpu-target-cpu=x86-64-v3"]).compile(weight_matmul_model([2]))
        print("x86-64-v3 compiled")
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "refused: iree-cpu: IREE's compiler fails with --iree-llvmcpu-target-cpu=bogus" in child.stdout
    assert "'bogus' is not a recognized processor" in child.stdout and "x86-64-v3 compiled" in child.stdout
