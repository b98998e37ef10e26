"""Whatever the length inputs hold, compiled code stays in its buffers, and the
values onnxruntime rejects fail with a clear run-time error instead.

The sessions here run with ``runtime_verification``: MLIR's
``generate-runtime-verification`` bounds-checks every load and store of the
compiled code and aborts on an out-of-bounds access, so one would fail this
test file loudly.  A negative control (in a child process) shows that this
detector does stop an unclamped scatter.

Run-time shapes that disagree (dynamic dims) fail a named check, as
onnxruntime rejects them.  An empty batch fed at run time to a dynamic model
computes an empty step and an empty sequence is refused, as onnxruntime
refuses it; these run in child processes so that a crash fails a test
instead of pytest.  A NaN in the inputs reaches exactly the output heads
that read it, as in onnxruntime, and never from a row a batch row does not
read.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import RuntimeInvocationError
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime, window_resident
from gqa_torch_mlir.testing.isolated import run_isolated, run_isolated_each

C = GQAConfig
I32_MAX = 2**31 - 1
WINDOW_DYNAMIC = C(batch=1, seq=1, past=6, past_lens=(9,), window=4, window_cache=True, dynamic=True)


def caches_cut_to(cfg, rows: int) -> dict:
    """past_key/past_value of make_inputs(cfg) with only their first ``rows`` rows (a smaller capacity)."""
    feeds = make_inputs(cfg)
    return {name: feeds[name][:, :, :rows] for name in ("past_key", "past_value")}


HOSTILE = [
    ("negative_seqlens", C(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True), {"seqlens_k": np.array([-5, 2], np.int32)}, "seqlens_k[b] must lie in [0, present length)"),
    ("huge_seqlens", C(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True), {"seqlens_k": np.array([I32_MAX, 2], np.int32)}, "seqlens_k[b] must lie in [0, present length)"),
    ("huge_total", C(batch=2, seq=1, past=6, past_lens=(6, 3), dynamic=True), {"total_sequence_length": np.array(I32_MAX, np.int32)}, "total_sequence_length must equal past length + S"),
    ("negative_total", C(batch=2, seq=1, past=6, past_lens=(6, 3), dynamic=True), {"total_sequence_length": np.array(-7, np.int32)}, "total_sequence_length must equal past length + S"),
    ("total_between_p_and_p_plus_s", C(batch=1, seq=3, past=4, dynamic=True), {"total_sequence_length": np.array(6, np.int32)}, "total_sequence_length must equal past length + S"),
    ("growing_declared_fed_fixed_capacity", C(batch=2, seq=1, past=6, rotary=True), {"seqlens_k": np.array([6, 6], np.int32), "total_sequence_length": np.array(5, np.int32)}, "the present is declared with past length + S rows"),
    ("window_cache_total_zero", C(batch=1, seq=1, past=6, past_lens=(9,), window=4, window_cache=True), {"total_sequence_length": np.array(0, np.int32)}, "total_sequence_length must be at least seqlens_k[b] + 1"),
    ("fixed_capacity_total_below_s", C(batch=1, seq=2, past=4, past_lens=(1,), fixed_capacity=True), {"seqlens_k": np.array([2], np.int32), "total_sequence_length": np.array(1, np.int32)}, "and at least S"),
    ("query_seqlens_rows_beyond_total", C(batch=2, seq=3, past=8, past_lens=(4, 2), query_lens=(3, 1), dynamic=True), {"total_sequence_length": np.array(3, np.int32)}, "total_sequence_length must be at least seqlens_k[b] + 1"),
    ("window_cache_rows_beyond_bias", C(batch=1, seq=1, past=6, past_lens=(9,), window=4, window_cache=True, attention_bias="BH"), {"seqlens_k": np.array([10], np.int32)}, "total_sequence_length must be at least seqlens_k[b] + 1"),
    ("fixed_capacity_overflow", C(batch=2, seq=1, past=8, past_lens=(5, 2), fixed_capacity=True, dynamic=True), {"seqlens_k": np.array([100, 2], np.int32)}, "seqlens_k[b] must lie in [0, present length)"),
    ("fixed_capacity_static_overflow", C(batch=1, seq=2, past=6, past_lens=(3,), fixed_capacity=True), {"seqlens_k": np.array([9], np.int32)}, "the new tokens must fit the cache"),
    ("seqlens_too_small_for_step", C(batch=1, seq=3, past=4), {"seqlens_k": np.array([1], np.int32)}, "the new tokens must fit the cache"),
    ("position_ids_out_of_cos_cache", C(batch=1, seq=3, past=4, rotary=True, position_ids=True), {"position_ids": np.array([[0, 10**9, -3]], np.int64)}, "rotary positions"),
    ("query_seqlens_out_of_range", C(batch=2, seq=3, past=8, past_lens=(4, 2), query_lens=(3, 1)), {"query_seqlens": np.array([7, -1], np.int32)}, "query_seqlens[b] must lie in"),
    ("window_cache_first_prompt_short_seqlens", C(batch=1, seq=3, past=4, past_lens=(0,), window=3, window_cache=True), {"seqlens_k": np.array([1], np.int32)}, "seqlens_k[b] + 1 >= the step's new tokens"),
    ("window_cache_negative_seqlens", C(batch=1, seq=1, past=6, past_lens=(9,), window=4, window_cache=True), {"seqlens_k": np.array([-3], np.int32)}, "seqlens_k[b] must be >= 0"),
    ("window_cache_capacity_below_window", WINDOW_DYNAMIC, caches_cut_to(WINDOW_DYNAMIC, 3), "the cache capacity (past_key dimension 2) must be at least local_window_size"),
    ("window_cache_huge_seqlens", C(batch=1, seq=1, past=6, past_lens=(9,), window=4, window_cache=True, rotary=True, rotary_cache_len=12), {"seqlens_k": np.array([10**6], np.int32)}, "rotary positions"),
]


@pytest.mark.parametrize("name,cfg,bad,message", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_lengths_fail_cleanly_and_stay_in_bounds(name, cfg, bad, message):
    model = make_model(cfg)
    session = InferenceSession(model, runtime_verification=True)
    feeds = dict(make_inputs(cfg), **bad)
    with pytest.raises(RuntimeInvocationError) as info:
        session.run(None, feeds)
    text = str(info.value)
    assert message in text, text
    # onnxruntime rejects the same feeds
    with pytest.raises(Exception):
        run_onnxruntime(model, feeds)
    # and the session still computes valid feeds right afterwards
    good = make_inputs(cfg)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, good)))
    assert not compare(cfg, got, run_onnxruntime(model, good), good)


@pytest.mark.parametrize(
    "cfg,seqlens_k,total,message",
    [(C(batch=2, seq=1, past=6, rotary=True), [5, 5], 5, "the present is declared with past length \\+ S rows"),
     (C(batch=2, seq=1, past=8, past_lens=(5, 2), fixed_capacity=True), [8, 8], 9, "the present is declared with the past's rows")],
    ids=["growing_declared_fed_fixed_capacity", "fixed_capacity_declared_fed_growing"],
)
def test_a_total_contradicting_the_declared_present_is_refused(cfg, seqlens_k, total, message):
    """Static present types fix the cache mode; a total_sequence_length giving the other
    mode makes onnxruntime return max(P, total) rows, against the declared type.
    Computing the declared rows would differ from it silently: the run-time check refuses."""
    model = make_model(cfg)
    feeds = dict(make_inputs(cfg), seqlens_k=np.array(seqlens_k, np.int32), total_sequence_length=np.array(total, np.int32))
    assert run_onnxruntime(model, feeds)["present_key"].shape[2] == max(cfg.past, total) != cfg.present_len
    with pytest.raises(RuntimeInvocationError, match=message):
        InferenceSession(model).run(None, feeds)


_UNCLAMPED_SCATTER = r'''
import sys
import numpy as np
from torch_mlir import ir
from torch_mlir.passmanager import PassManager
from gqa_torch_mlir.backends.refbackend import RefBackend
from gqa_torch_mlir.context import make_context

ASM = """
func.func @f(%cache: !torch.vtensor<[4,2],f32>, %index: !torch.vtensor<[1,2],si64>, %src: !torch.vtensor<[1,2],f32>) -> !torch.vtensor<[4,2],f32> {
  %int0 = torch.constant.int 0
  %0 = torch.aten.scatter.src %cache, %int0, %index, %src : !torch.vtensor<[4,2],f32>, !torch.int, !torch.vtensor<[1,2],si64>, !torch.vtensor<[1,2],f32> -> !torch.vtensor<[4,2],f32>
  return %0 : !torch.vtensor<[4,2],f32>
}"""
with make_context():
    module = ir.Module.parse(ASM)
    PassManager.parse("builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)").run(module.operation)
    compiled = RefBackend(runtime_verification=True).compile(module)
cache, src = np.zeros((4, 2), np.float32), np.ones((1, 2), np.float32)
(ok,) = compiled.invoke("f", cache, np.array([[1, 3]], np.int64), src)
print("in bounds ok:", bool(ok[1, 0] == 1 and ok[3, 1] == 1), flush=True)
compiled.invoke("f", cache, np.array([[1, int(sys.argv[1])]], np.int64), src)
print("returned", flush=True)
'''


def test_verification_stops_an_unclamped_scatter():
    """Negative control, in a child process: the detector stops a real
    out-of-bounds write (it aborts with MLIR's report before the store)."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _UNCLAMPED_SCATTER, "9"], capture_output=True, text=True, timeout=300)
    assert "in bounds ok: True" in run.stdout, run.stdout + run.stderr
    assert run.returncode != 0 and "returned" not in run.stdout
    assert "out-of-bounds access" in run.stdout + run.stderr, run.stdout + run.stderr


@pytest.mark.parametrize("cfg", [C(batch=1, seq=1, past=5, rotary=True, dynamic=True), C(batch=2, seq=1, past=6, past_lens=(4, 1), fixed_capacity=True, dynamic=True)], ids=lambda c: c.name)
def test_valid_inputs_pass_every_check(cfg):
    model = make_model(cfg)
    feeds = make_inputs(cfg)
    session = InferenceSession(model, runtime_verification=True)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert not compare(cfg, got, run_onnxruntime(model, feeds), feeds)


# ---------------------------------------------------------------------------
# Inputs whose run-time shapes disagree (dynamic dims): onnxruntime rejects each;
# ours fails a named run-time check before any access, never a signal.  torch-mlir's
# casts and broadcasts trust the types, so without these checks such feeds aborted
# the process (its own broadcast asserts) or read out of bounds.  In child processes,
# so that a regression fails its test instead of killing pytest.
# ---------------------------------------------------------------------------


def _rows(array: np.ndarray, axis: int, n: int) -> np.ndarray:
    """``array`` with ``n`` entries on ``axis`` (its own rows repeated or cut)."""
    return np.take(array, np.arange(n) % array.shape[axis], axis=axis)


def _resized(**changes) -> Callable[[dict], dict]:
    """A feed mutation: input name -> (axis, new size)."""
    return lambda feeds: {name: _rows(feeds[name], axis, n) for name, (axis, n) in changes.items()}


DYNAMIC = C(batch=2, seq=1, past=4, dynamic=True)
DYNAMIC_ROTARY = C(batch=2, seq=2, past=0, rotary=True, position_ids=True, dynamic=True)
DYNAMIC_BIAS = C(batch=2, seq=2, past=0, attention_bias="BH", dynamic=True)
SHAPE_MISMATCHES = [
    ("past_batch", DYNAMIC, _resized(past_key=(0, 3), past_value=(0, 3)), "past_key dimension 0 must equal the batch size"),
    ("key_batch", DYNAMIC, _resized(key=(0, 3), value=(0, 3)), "key dimension 0 must equal the batch size"),
    ("value_sequence", C(batch=1, seq=1, past=4, dynamic=True), _resized(value=(1, 2)), "value dimension 1 must equal the sequence size"),
    ("past_value_rows", DYNAMIC, _resized(past_value=(2, 5)), "past_value dimension 2 must equal past_key's"),
    ("seqlens_k_entries", DYNAMIC, _resized(seqlens_k=(0, 3)), "seqlens_k dimension 0 must equal the batch size"),
    ("position_ids_batch", DYNAMIC_ROTARY, _resized(position_ids=(0, 3)), "position_ids dimension 0 must equal the batch size"),
    ("position_ids_sequence", DYNAMIC_ROTARY, _resized(position_ids=(1, 1)), "position_ids dimension 1 must be at least the sequence length"),
    ("sin_cache_rows", DYNAMIC_ROTARY, _resized(sin_cache=(0, 5)), "sin_cache dimension 0 must equal cos_cache's"),
    ("bias_batch", DYNAMIC_BIAS, _resized(attention_bias=(0, 3)), "attention_bias dimension 0 must equal the batch size"),
    ("bias_sequence", DYNAMIC_BIAS, _resized(attention_bias=(2, 3)), "attention_bias dimension 2 must equal the sequence size"),
    ("query_seqlens_entries", C(batch=2, seq=3, past=8, past_lens=(4, 2), query_lens=(3, 1), dynamic=True), _resized(query_seqlens=(0, 3)), "query_seqlens dimension 0 must equal the batch size"),
    ("fixed_capacity_past_batch", C(batch=2, seq=1, past=6, fixed_capacity=True, dynamic=True), _resized(past_key=(0, 1), past_value=(0, 1)), "past_key dimension 0 must equal the batch size"),
    ("window_cache_past_batch", WINDOW_DYNAMIC, _resized(past_key=(0, 2), past_value=(0, 2)), "past_key dimension 0 must equal the batch size"),
    ("packed_seqlens_k_entries", C(batch=2, seq=1, past=4, packed=True, dynamic=True), _resized(seqlens_k=(0, 1)), "seqlens_k dimension 0 must equal the batch size"),
]


def mismatches_by_model() -> list:
    """SHAPE_MISMATCHES grouped by the model they feed (in order): one child process compiles each once."""
    groups: dict = {}
    for m in SHAPE_MISMATCHES:
        groups.setdefault(id(m[1]), []).append(m)  # the configs are shared objects (DYNAMIC, ...)
    return list(groups.values())


@pytest.mark.parametrize("group", mismatches_by_model(), ids=lambda g: "+".join(m[0] for m in g))
def test_run_time_shape_mismatch_fails_a_named_check(group, tmp_path):
    cfg = group[0][1]
    model = make_model(cfg)
    fed = []
    for name, _, mutate, _ in group:
        feeds = make_inputs(cfg)
        feeds.update(mutate(feeds))
        with pytest.raises(Exception):  # onnxruntime rejects the same feeds
            run_onnxruntime(model, feeds)
        fed.append(feeds)
    for (name, _, _, message), ours in zip(group, run_isolated_each(model, fed, tmp_path)):
        assert ours.error and ours.error[0] == "RuntimeInvocationError", f"{name}: {ours.describe()}"
        assert f"GroupQueryAttention: {message}" in ours.error[1], f"{name}: {ours.describe()}"


@pytest.mark.parametrize("name", ["past_batch", "past_value_rows", "sin_cache_rows"])
def test_run_time_shape_mismatch_on_iree(name):
    """IREE stops at a failed check (a host-side assert): the same error, and the session stays usable."""
    _, cfg, mutate, message = next(m for m in SHAPE_MISMATCHES if m[0] == name)
    model = make_model(cfg)
    session = InferenceSession(model, backend="iree-cpu", threads=1)
    feeds = make_inputs(cfg)
    feeds.update(mutate(feeds))
    with pytest.raises(RuntimeInvocationError, match=f"GroupQueryAttention: {message}"):
        session.run(None, feeds)
    good = make_inputs(cfg)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, good)))
    assert not compare(cfg, got, run_onnxruntime(model, good), good)


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_positions_of_padding_rows_are_not_read(backend):
    """Right-padded chunks: onnxruntime never reads a padding row's position_ids (s >= query_seqlens[b]),
    so -1 or a huge pad computes there; a valid row's out-of-range position is still refused."""
    cfg = C(batch=2, seq=3, past=8, past_lens=(4, 2), query_lens=(3, 1), rotary=True, position_ids=True, dynamic=True)
    model = make_model(cfg)
    session = InferenceSession(model, backend=backend, **({"runtime_verification": True} if backend == "refbackend" else {}))
    feeds = make_inputs(cfg)
    for pad in (-1, 2**63 - 1):
        positions = feeds["position_ids"].copy()
        positions[1, 1:] = pad  # batch row 1 has one valid row
        padded = dict(feeds, position_ids=positions)
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, padded)))
        assert not compare(cfg, got, run_onnxruntime(model, padded), padded), pad
    positions[1, 0] = -1
    with pytest.raises(RuntimeInvocationError, match="rotary positions"):
        session.run(None, dict(feeds, position_ids=positions))


def test_symbolic_scale_dims_are_checked_by_name():
    """PER_CHANNEL k_scale/v_scale declared with symbolic dims and fed the wrong size in
    each: a RuntimeInvocationError naming the input and dim.  The first check of the
    function once went unreported on the refbackend (LLVM passed its i1 condition to
    the C callback without extending it): a plain RuntimeError without a message."""
    cfg = C(batch=2, seq=1, past=6, past_lens=(6, 3), kv_bits=8, quant_type="PER_CHANNEL", dynamic=True)
    model = make_model(cfg)
    for value in model.graph.input:
        if value.name in ("k_scale", "v_scale"):
            for k, dim in enumerate(value.type.tensor_type.shape.dim):
                dim.Clear()
                dim.dim_param = f"{value.name}_d{k}"
    session, feeds = InferenceSession(model), make_inputs(cfg)
    for name in ("k_scale", "v_scale"):
        for axis, want in enumerate(feeds[name].shape):
            wrong = dict(feeds, **{name: np.repeat(feeds[name], 2, axis=axis)})
            with pytest.raises(RuntimeInvocationError, match=f"{name} dimension {axis} must be {want} "):
                session.run(None, wrong)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert not compare(cfg, got, run_onnxruntime(model, feeds), feeds)


def test_static_seqlens_k_length_fixes_a_dynamic_batch():
    """seqlens_k declared [2] beside a symbolic batch: the batch is 2 (it once failed in torch-mlir's
    linalg lowering, which met a static 2 and a dynamic batch in one op), checked at run time."""
    cfg = DYNAMIC
    model = make_model(cfg)
    seqlens = next(i for i in model.graph.input if i.name == "seqlens_k")
    seqlens.type.tensor_type.shape.dim[0].Clear()
    seqlens.type.tensor_type.shape.dim[0].dim_value = cfg.batch
    session = InferenceSession(model)
    feeds = make_inputs(cfg)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert not compare(cfg, got, run_onnxruntime(model, feeds), feeds)
    wider = dict(feeds, **{n: _rows(feeds[n], 0, 3) for n in ("query", "key", "value", "past_key", "past_value")})
    with pytest.raises(RuntimeInvocationError, match="dimension 0 must be 2"):
        session.run(None, wider)


# ---------------------------------------------------------------------------
# An empty batch or sequence at run time (dynamic dims): a result or a clean
# refusal, never a signal.  Each risky run is in a child process, so that a
# regression fails its test instead of killing pytest.
# ---------------------------------------------------------------------------

EMPTY_CASES = [
    # (name, config, attention form): one per cache mode, and SDPA
    ("growing_rotary_position_ids", C(batch=2, seq=1, past=4, rotary=True, position_ids=True, dynamic=True), "decomposed"),
    ("first_prompt", C(batch=2, seq=3, past=0, dynamic=True), "decomposed"),
    ("fixed_capacity", C(batch=2, seq=1, past=6, fixed_capacity=True, dynamic=True), "decomposed"),
    ("window_cache", WINDOW_DYNAMIC, "decomposed"),
    ("int4_cache", C(batch=2, seq=1, past=4, kv_bits=4, quant_type="PER_CHANNEL", dynamic=True), "decomposed"),
    ("packed", C(batch=2, seq=1, past=4, packed=True, dynamic=True), "decomposed"),
]
# onnxruntime rejects an empty sequence, with or without a past.
EMPTY_SEQUENCE_REFUSAL = "the sequence length (query dimension 1) must be at least 1"


def empty_feeds(cfg, model, empty: str) -> dict:
    """make_inputs' feeds with the batch (``empty="batch"``) or the new tokens (``"sequence"``) cut to 0.

    An empty step keeps each row's past: seqlens_k[b] = past_lens[b] - 1 and
    total_sequence_length their maximum.
    """
    cut = {"batch": {"batch"}, "sequence": {"seq"}}[empty]
    dims = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    feeds = {}
    for name, value in make_inputs(cfg).items():
        for axis, dim in enumerate(dims.get(name, [])):
            if dim in cut:
                value = np.take(value, np.arange(0), axis=axis)
        feeds[name] = value
    if empty == "sequence":
        lens = np.asarray(cfg.lens, np.int32)
        feeds["seqlens_k"] = lens - 1
        feeds["total_sequence_length"] = np.asarray(lens.max(), np.int32)
    return feeds


def assert_empty_batch(cfg, feeds: dict, got: dict) -> None:
    """What an empty batch computes: empty outputs and caches of the step's shapes."""
    B, S = feeds["query"].shape[:2]
    assert got["output"].shape == (B, S, cfg.num_heads * cfg.head_size)
    for name in ("present_key", "present_value"):
        assert got[name].shape == (B, cfg.kv_num_heads, cfg.present_len, cfg.cache_width), name


def assert_same_as_onnxruntime(got: dict, want: dict, feeds: dict) -> None:
    """Same outputs and shapes; caches compared on the rows onnxruntime defines (< seqlens_k[b] + 1)."""
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
    np.testing.assert_allclose(got["output"], want["output"], rtol=1e-4, atol=1e-4)
    for b, last in enumerate(feeds["seqlens_k"]):
        for name in ("present_key", "present_value"):
            np.testing.assert_allclose(got[name][b, :, : last + 1], want[name][b, :, : last + 1], rtol=1e-4, atol=1e-4, err_msg=name)


EMPTY_KINDS = ("batch", "sequence")


def check_empty_steps(cfg, attention: str, directory, backend: str = "refbackend") -> None:
    """An empty batch, then an empty sequence, fed to one compiled model (one child process);
    onnxruntime runs each in a child of its own (an empty batch kills it today)."""
    model = make_model(cfg)
    feeds = {empty: empty_feeds(cfg, model, empty) for empty in EMPTY_KINDS}
    ours = dict(zip(EMPTY_KINDS, run_isolated_each(model, [feeds[e] for e in EMPTY_KINDS], directory, backend=backend, attention=attention)))
    for empty in EMPTY_KINDS:
        theirs = run_isolated(model, feeds[empty], directory / empty, engine="onnxruntime")
        check_empty_step(cfg, empty, feeds[empty], ours[empty], theirs)


def check_empty_step(cfg, empty: str, feeds: dict, ours, theirs) -> None:
    assert ours.returncode == 0, f"empty {empty}: {ours.describe()}"
    if empty == "sequence":  # onnxruntime refuses it too
        assert theirs.error, theirs.describe()
        assert ours.error and ours.error[0] == "RuntimeInvocationError" and EMPTY_SEQUENCE_REFUSAL in ours.error[1], ours.describe()
    elif theirs.results is not None:  # onnxruntime computes it: ours must agree
        assert ours.results is not None, ours.describe()
        assert_same_as_onnxruntime(ours.results, theirs.results, feeds)
    else:  # onnxruntime crashes or refuses: ours computes the empty step
        assert ours.results is not None, ours.describe()
        assert_empty_batch(cfg, feeds, ours.results)


@pytest.mark.parametrize("name,cfg,attention", EMPTY_CASES, ids=[c[0] for c in EMPTY_CASES])
def test_empty_batch_or_sequence_at_run_time(name, cfg, attention, tmp_path):
    """Runs with runtime_verification: an out-of-bounds access of the empty buffers fails too."""
    check_empty_steps(cfg, attention, tmp_path)


@pytest.mark.parametrize("attention", ["decomposed", "sdpa"])
def test_empty_batch_or_sequence_on_iree(attention, tmp_path):
    check_empty_steps(C(batch=2, seq=1, past=4, packed=True, dynamic=True), attention, tmp_path, backend="iree-cpu")


def test_isolated_runs_report_a_crash(tmp_path):
    """Negative control of the helper above: onnxruntime's own SIGFPE on an empty batch is a result, not the end of pytest."""
    cfg = C(batch=2, seq=1, past=4, dynamic=True)
    model = make_model(cfg)
    good = make_inputs(cfg)
    before, run, after = run_isolated_each(model, [good, empty_feeds(cfg, model, "batch"), good], tmp_path, engine="onnxruntime")
    if run.signal is None:
        pytest.skip(f"onnxruntime no longer crashes on an empty batch ({run.describe()})")
    assert run.signal == "SIGFPE" and run.results is None
    assert before.results is not None and before.signal is None, before.describe()  # finished before the crash
    assert after.signal == "SIGFPE" and after.results is None and after.error is None  # never ran


# ---------------------------------------------------------------------------
# NaN in the inputs: it reaches exactly the output heads that read it
# ---------------------------------------------------------------------------

NAN_CFG = C(batch=2, seq=1, past=6, past_lens=(6, 3))  # H=4, Hkv=2 (G=2), Dh=16


def _nan_query_head(feeds):
    feeds["query"][0, :, 16:32] = np.nan  # batch row 0, query head 1
    return {(0, 1)}  # (batch row, output head) that read it


def _nan_key_row(feeds):
    feeds["past_key"][1, 0, 1, 5] = np.nan  # batch row 1, KV head 0, a valid past row
    return {(1, 0), (1, 1)}  # the query heads of KV head 0


@pytest.mark.parametrize("attention,backend", [("decomposed", "refbackend"), ("sdpa", "iree-cpu")])
@pytest.mark.parametrize("poison", [_nan_query_head, _nan_key_row], ids=["query_head", "kv_head_key"])
def test_nan_reaches_only_the_heads_that_read_it(poison, attention, backend):
    cfg, Dh = NAN_CFG, NAN_CFG.head_size
    model, feeds = make_model(cfg), make_inputs(cfg)
    readers = poison(feeds)
    want = run_onnxruntime(model, feeds)
    session = InferenceSession(model, backend=backend, threads=1, attention=attention)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    nan_BH = np.isnan(got["output"].reshape(cfg.batch, cfg.seq, cfg.num_heads, Dh)).any(axis=(1, 3))
    assert {tuple(int(i) for i in bh) for bh in np.argwhere(nan_BH)} == readers
    np.testing.assert_array_equal(np.isnan(got["output"]), np.isnan(want["output"]))
    np.testing.assert_allclose(got["output"], want["output"], rtol=1e-4, atol=1e-4, equal_nan=True)
    for b, last in enumerate(feeds["seqlens_k"]):
        for name in ("present_key", "present_value"):
            rows = slice(0, last + 1)
            np.testing.assert_allclose(got[name][b, :, rows], want[name][b, :, rows], rtol=1e-4, atol=1e-4, equal_nan=True, err_msg=name)


# Rows a batch row does not read (past seqlens_k[b]) may hold anything: onnxruntime
# never reads them.  Ours span the rows of the longest batch row (or a capacity kept
# for attention_bias / output_qk), so such rows are zeroed before P.V.
UNREAD_ROWS = [
    ("fixed_capacity", C(batch=2, seq=1, past=16, past_lens=(5, 2), fixed_capacity=True, rotary=True), {}),
    ("fixed_capacity_dynamic", C(batch=2, seq=1, past=16, past_lens=(5, 2), fixed_capacity=True, rotary=True, dynamic=True), {}),
    ("ragged_growing", C(batch=2, seq=1, past=6, past_lens=(6, 3)), {}),
    ("fixed_capacity_bias", C(batch=2, seq=1, past=16, past_lens=(5, 2), fixed_capacity=True, attention_bias="BH"), {}),
    ("fixed_capacity_qk_output", C(batch=2, seq=1, past=16, past_lens=(5, 2), fixed_capacity=True), {"qk_output": 1}),
    ("window_cache", C(batch=2, seq=1, past=6, past_lens=(9, 3), window=4, window_cache=True, dynamic=True), {}),
]


def poison_unread_rows(cfg, feeds: dict) -> None:
    """NaN in every past row batch row b holds no token in (its resident rows, for a window cache)."""
    for b in range(cfg.batch):
        if cfg.window_cache:
            kept = window_resident(cfg.past_lens[b], cfg.past, cfg.window)
        else:
            kept = int(feeds["seqlens_k"][b]) + 1 - cfg.seq
        for name in ("past_key", "past_value"):
            feeds[name][b, :, kept:] = np.nan


@pytest.mark.parametrize("attention,backend", [("decomposed", "refbackend"), ("sdpa", "iree-cpu")])
@pytest.mark.parametrize("name,cfg,attrs", UNREAD_ROWS, ids=[u[0] for u in UNREAD_ROWS])
def test_rows_a_batch_row_does_not_read_may_hold_nan(name, cfg, attrs, attention, backend):
    model, feeds = make_model(cfg, attrs), make_inputs(cfg)
    poison_unread_rows(cfg, feeds)
    want = run_onnxruntime(model, feeds)
    assert np.isfinite(want["output"]).all()
    session = InferenceSession(model, backend=backend, threads=1, attention=attention)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert not compare(cfg, got, want, feeds)


# A window-sized buffer (capacity C, window W, Tp tokens before a step of S): when the new
# buffer holds every key the step's queries see, onnxruntime's P.V spans the new buffer's rows,
# else every staged row; either may start before the windows (then a NaN value there reaches
# every query of the step, 0 * NaN), and rows before it are never read.
WINDOW_SPANS = [
    ("full_decode_window_start", C(batch=1, seq=1, past=4, past_lens=(8,), window=3, window_cache=True)),
    ("filling_decode_reads_behind", C(batch=1, seq=1, past=4, past_lens=(5,), window=2, window_cache=True)),
    ("full_chunk_covered", C(batch=1, seq=2, past=4, past_lens=(4,), window=3, window_cache=True)),
    ("full_chunk_reads_all_staged", C(batch=1, seq=3, past=4, past_lens=(8,), window=3, window_cache=True)),
    ("filling_chunk_evicts", C(batch=1, seq=2, past=5, past_lens=(5,), window=4, window_cache=True)),
    ("ragged_batch_decode", C(batch=2, seq=1, past=6, past_lens=(9, 3), window=4, window_cache=True, dynamic=True)),
]


def window_first_key(cfg, b: int) -> int:
    """The lowest absolute position any query of batch row b's step sees."""
    return cfg.past_lens[b] + 1 - cfg.window


WINDOW_SPAN_RUNS = [(name, cfg, attention, backend) for name, cfg in WINDOW_SPANS for attention, backend in
                    [("decomposed", "refbackend"), ("sdpa", "iree-cpu")]]
WINDOW_SPAN_RUNS += [(name, cfg, "decomposed", "iree-cpu") for name, cfg in WINDOW_SPANS if name in ("filling_decode_reads_behind", "full_chunk_reads_all_staged")]


@pytest.mark.parametrize("name,cfg,attention,backend", WINDOW_SPAN_RUNS, ids=[f"{r[0]}-{r[2]}-{r[3]}" for r in WINDOW_SPAN_RUNS])
def test_window_cache_nan_reaches_what_onnxruntime_reads(name, cfg, attention, backend):
    """One resident row at a time holds a NaN value (every row) or key (rows before every
    window): the output's NaN pattern and its finite values are onnxruntime's."""
    model, base = make_model(cfg), make_inputs(cfg)
    poisoned = []
    for b in range(cfg.batch):
        resident = window_resident(cfg.past_lens[b], cfg.past, cfg.window)
        behind = window_first_key(cfg, b) - (cfg.past_lens[b] - resident)  # rows before every window
        poisoned += [(b, "past_value", r) for r in range(resident)] + [(b, "past_key", r) for r in range(behind)]
    session = InferenceSession(model, backend=backend, threads=1, attention=attention)
    names = [o.name for o in session.get_outputs()]
    reached = 0
    for b, which, r in poisoned:
        feeds = {k: v.copy() for k, v in base.items()}
        feeds[which][b, 1, r, 3] = np.nan
        want = run_onnxruntime(model, feeds)
        got = dict(zip(names, session.run(None, feeds)))
        np.testing.assert_array_equal(np.isnan(got["output"]), np.isnan(want["output"]), err_msg=f"{which} row {r} of batch row {b}")
        np.testing.assert_allclose(got["output"], want["output"], rtol=1e-4, atol=1e-4, equal_nan=True)
        reached += bool(np.isnan(want["output"]).any())
    assert 0 < reached < len(poisoned)  # some poisoned rows are read, some are not


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
@pytest.mark.parametrize("seq,past_len", [(1, 100_000_001), (3, 10**9 - 3)])
def test_window_cache_far_past_2_to_the_24(seq, past_len, backend):
    """A window cache's eviction arithmetic on lengths far past 2^24: IREE lowers an integer
    division through f32, which put the wrong rows in the present with no error."""
    cfg = C(batch=1, seq=seq, past=6, past_lens=(past_len,), window=4, window_cache=True)
    model, feeds = make_model(cfg), make_inputs(cfg)
    want = run_onnxruntime(model, feeds)
    session = InferenceSession(model, backend=backend, threads=1)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert not compare(cfg, got, want, feeds)


def test_token_ids_outside_the_vocabulary_fail_a_named_check():
    """The embedded decoder's embedding Gather: torch-mlir's lowering trusts its indices (a
    token id past the vocabulary read garbage, or segfaulted); onnxruntime rejects them.
    Out-of-range ids now fail a run-time check, in-range ones (negative too) agree.
    (test_guards_indices runs Gather on both backends under runtime verification.)"""
    import onnx

    from gqa_torch_mlir.testing.decoder import EMBEDDED_DECODER, Decoder

    decoder = Decoder(EMBEDDED_DECODER)
    proto = onnx.load(str(decoder.path), load_external_data=True)
    vocab = next(i for i in proto.graph.initializer if i.name == "model.embed_tokens.weight").dims[0]
    session = InferenceSession(proto)
    names = [o.name for o in session.get_outputs()]

    def feeds(ids):
        return {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64), **decoder.empty_cache()}

    for ids in ([vocab], [3, -vocab - 1], [10**12]):
        with pytest.raises(Exception):
            run_onnxruntime(proto, feeds(ids))
        with pytest.raises(RuntimeInvocationError, match="Gather: indices must lie in"):
            session.run(None, feeds(ids))
    for ids in ([vocab - 1, -vocab, -1],):
        got = dict(zip(names, session.run(None, feeds(ids))))["logits"]
        np.testing.assert_allclose(got, run_onnxruntime(proto, feeds(ids))["logits"], atol=1e-4, rtol=1e-4)


def test_several_tokens_after_a_past_need_batch_1():
    """onnxruntime: 'batch_size must be 1 when sequence_length > 1 and past context is given'
    (without query_seqlens); the lowering computed it.  Batch 1, or S == total, still runs."""
    cfg = C(batch=1, seq=2, past=4, dynamic=True)
    model = make_model(cfg)
    feeds = make_inputs(cfg)
    batch2 = {k: np.concatenate([v, v]) if k != "total_sequence_length" else v for k, v in feeds.items()}
    with pytest.raises(Exception, match="batch_size must be 1"):
        run_onnxruntime(model, batch2)
    session = InferenceSession(model)
    with pytest.raises(RuntimeInvocationError, match="a step of S > 1 tokens after a past needs batch size 1"):
        session.run(None, batch2)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert not compare(cfg, got, run_onnxruntime(model, feeds), feeds)


QUANT_SMALL = dict(batch=1, seq=1, past=3, num_heads=2, kv_num_heads=1, head_size=8)


def _session_outputs(model, feeds, backend):
    session = InferenceSession(model, backend=backend, threads=1)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_codes_round_as_onnxruntime(bits, backend):
    """Codes are rint(x * (1 / scale)), as onnxruntime computes them: rint(x / scale) differs by
    one code for values within an ulp of a tie (found by searching such values)."""
    scale = np.float32(0.7) if bits == 8 else np.float32(0.0110)
    limit = 127 if bits == 8 else 7
    ties = [np.float32((k + 0.5) * scale) for k in range(-limit, limit)]
    ties = [x for x in ties if np.rint(x / scale) != np.rint(x * (np.float32(1) / scale))]
    assert len(ties) >= 2, "no value whose two roundings differ"
    cfg = C(kv_bits=bits, **QUANT_SMALL)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=1)
    for name in ("key", "value"):
        feeds[name][0, 0, : len(ties[:8])] = ties[:8]
    feeds["k_scale"], feeds["v_scale"] = np.array([scale], np.float32), np.array([scale], np.float32)
    want, got = run_onnxruntime(model, feeds), _session_outputs(model, feeds, backend)
    for name in ("present_key", "present_value"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
def test_int8_per_tensor_huge_scale_gives_onnxruntime_infinities(backend):
    """With qk_output, onnxruntime multiplies the int8 PER_TENSOR scale into Q.K^T and P.V of
    the codes: an infinite scale next to a stored code of 0 gives +-inf there, not 0 * inf = NaN
    (without qk_output it dequantizes V first: test_gqa_features' inf_v_scale)."""
    cfg = C(kv_bits=8, **QUANT_SMALL)
    model, base = make_model(cfg, {"qk_output": 1}), make_inputs(cfg, seed=11)
    base["past_key"][0, 0, 0, 0] = base["past_value"][0, 0, 0, 0] = 0
    session = InferenceSession(model, backend=backend, threads=1)
    names = [o.name for o in session.get_outputs()]
    for which in ("k_scale", "v_scale"):
        for scale in (np.inf, -np.inf, 3e38):
            feeds = {**base, which: np.full_like(base[which], scale)}
            want, got = run_onnxruntime(model, feeds), dict(zip(names, session.run(None, feeds)))
            for name in ("output", "output_qk"):
                for test in (np.isnan, np.isposinf, np.isneginf):
                    np.testing.assert_array_equal(test(got[name]), test(want[name]), err_msg=f"{which}={scale}: {name} {test.__name__}")


@pytest.mark.parametrize("attention,backend", [("decomposed", "refbackend"), ("decomposed", "iree-cpu")])
@pytest.mark.parametrize("cfg,attrs", [(C(batch=1, seq=1, past=5, num_heads=2, kv_num_heads=1, head_size=8), {"local_window_size": 2}),
                                       (C(batch=1, seq=3, past=2, num_heads=2, kv_num_heads=1, head_size=8), {})],
                         ids=["window_decode", "causal_chunk"])
def test_output_qk_probabilities_keep_zeros_in_masked_columns(cfg, attrs, attention, backend):
    """qk_output=2 after a NaN query row: onnxruntime's probabilities are NaN where the row
    looks and 0 in the columns its mask hides; ours too (they were NaN everywhere)."""
    model, feeds = make_model(cfg, {"qk_output": 2, **attrs}), make_inputs(cfg, seed=3)
    feeds["query"][0, :, 0:8] = np.nan  # query head 0
    want = run_onnxruntime(model, feeds)
    session = InferenceSession(model, backend=backend, threads=1, attention=attention)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert (want["output_qk"] == 0).any() and np.isnan(want["output_qk"]).any()
    np.testing.assert_array_equal(np.isnan(got["output_qk"]), np.isnan(want["output_qk"]))
    np.testing.assert_array_equal(got["output_qk"] == 0, want["output_qk"] == 0)
    np.testing.assert_allclose(got["output_qk"], want["output_qk"], rtol=1e-5, atol=1e-6, equal_nan=True)


def test_total_sequence_length_declared_symbolic_rank_1(tmp_path):
    """``total_sequence_length`` declared ``["tn"]``: onnxruntime computes a one-element feed (it failed
    our compile, a torch.aten.item of [?]) and rejects others; an empty feed must not be read (under
    runtime verification, in a child process)."""
    cfg = C(batch=2, seq=1, past=5, rotary=True)
    model = make_model(cfg)
    declared = next(vi for vi in model.graph.input if vi.name == "total_sequence_length")
    declared.CopyFrom(onnx.helper.make_tensor_value_info("total_sequence_length", onnx.TensorProto.INT32, ["tn"]))
    valid = make_inputs(cfg)
    valid["total_sequence_length"] = valid["total_sequence_length"].reshape(1)
    bad = [np.zeros(0, np.int32), np.array([6, 6], np.int32)]
    runs = run_isolated_each(model, [valid] + [dict(valid, total_sequence_length=t) for t in bad], tmp_path)
    assert runs[0].results is not None, runs[0].describe()
    assert compare(cfg, runs[0].results, run_onnxruntime(model, valid), valid) == []
    for total, run in zip(bad, runs[1:]):
        with pytest.raises(Exception):  # onnxruntime rejects it too
            run_onnxruntime(model, dict(valid, total_sequence_length=total))
        assert run.error and "total_sequence_length must hold one element" in run.error[1], f"{total}: {run.describe()}"
