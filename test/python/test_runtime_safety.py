"""Whatever the length inputs hold, compiled code stays in its buffers, and the
values onnxruntime rejects fail with a clear run-time error instead.

The sessions here run with ``runtime_verification``: MLIR's
``generate-runtime-verification`` bounds-checks every load and store of the
compiled code and aborts on an out-of-bounds access, so one would fail this
test file loudly.  A negative control (in a child process) shows that this
detector does stop an unclamped scatter.

An empty batch or sequence fed at run time to a dynamic model computes an
empty step (or is refused where onnxruntime refuses it), in child processes
so that a crash fails a test instead of pytest; and a NaN in the inputs
reaches exactly the output heads that read it, as in onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import RuntimeInvocationError
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime
from gqa_torch_mlir.testing.isolated import run_isolated

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
    ("fixed_capacity_overflow", C(batch=2, seq=1, past=8, past_lens=(5, 2), fixed_capacity=True, dynamic=True), {"seqlens_k": np.array([100, 2], np.int32)}, "seqlens_k[b] must lie in [0, present length)"),
    ("fixed_capacity_static_overflow", C(batch=1, seq=2, past=6, past_lens=(3,), fixed_capacity=True), {"seqlens_k": np.array([9], np.int32)}, "the new tokens must fit the cache"),
    ("seqlens_too_small_for_step", C(batch=1, seq=3, past=4), {"seqlens_k": np.array([1], np.int32)}, "the new tokens must fit the cache"),
    ("position_ids_out_of_cos_cache", C(batch=1, seq=3, past=4, rotary=True, position_ids=True), {"position_ids": np.array([[0, 10**9, -3]], np.int64)}, "rotary positions"),
    ("query_seqlens_out_of_range", C(batch=2, seq=3, past=8, past_lens=(4, 2), query_lens=(3, 1)), {"query_seqlens": np.array([7, -1], np.int32)}, "query_seqlens[b] must lie in"),
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
# An empty sequence with no past is an empty first prompt: total_sequence_length 0.
EMPTY_PROMPT_REFUSAL = "total_sequence_length must equal past length + S (growing cache) or be at most the past length (fixed capacity), and be >= 1"


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


def assert_empty_step(cfg, feeds: dict, got: dict, empty: str) -> None:
    """What an empty step computes: empty outputs; an empty sequence leaves the caches as they were."""
    B, S = feeds["query"].shape[:2]
    assert got["output"].shape == (B, S, cfg.num_heads * cfg.head_size)
    for name in ("present_key", "present_value"):
        assert got[name].shape == (B, cfg.kv_num_heads, cfg.present_len if empty == "batch" else cfg.past, cfg.cache_width), name
        if empty == "sequence":
            np.testing.assert_array_equal(got[name], feeds[name.replace("present", "past")], err_msg=name)


def assert_same_as_onnxruntime(got: dict, want: dict, feeds: dict) -> None:
    """Same outputs and shapes; caches compared on the rows onnxruntime defines (< seqlens_k[b] + 1)."""
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
    np.testing.assert_allclose(got["output"], want["output"], rtol=1e-4, atol=1e-4)
    for b, last in enumerate(feeds["seqlens_k"]):
        for name in ("present_key", "present_value"):
            np.testing.assert_allclose(got[name][b, :, : last + 1], want[name][b, :, : last + 1], rtol=1e-4, atol=1e-4, err_msg=name)


def check_empty_step(cfg, attention: str, empty: str, directory, backend: str = "refbackend") -> None:
    model = make_model(cfg)
    feeds = empty_feeds(cfg, model, empty)
    ours = run_isolated(model, feeds, directory, backend=backend, attention=attention)
    assert ours.returncode == 0, ours.describe()
    theirs = run_isolated(model, feeds, directory, engine="onnxruntime")  # dies of SIGFPE on an empty batch today
    if empty == "sequence" and cfg.past == 0:  # onnxruntime refuses it too
        assert ours.error and ours.error[0] == "RuntimeInvocationError" and EMPTY_PROMPT_REFUSAL in ours.error[1], ours.describe()
    elif theirs.results is not None:  # onnxruntime computes it: ours must agree
        assert ours.results is not None, ours.describe()
        assert_same_as_onnxruntime(ours.results, theirs.results, feeds)
    else:  # onnxruntime crashes or refuses: ours computes the empty step
        assert ours.results is not None, ours.describe()
        assert_empty_step(cfg, feeds, ours.results, empty)


@pytest.mark.parametrize("empty", ["batch", "sequence"])
@pytest.mark.parametrize("name,cfg,attention", EMPTY_CASES, ids=[c[0] for c in EMPTY_CASES])
def test_empty_batch_or_sequence_at_run_time(name, cfg, attention, empty, tmp_path):
    """Runs with runtime_verification: an out-of-bounds access of the empty buffers fails too."""
    check_empty_step(cfg, attention, empty, tmp_path)


@pytest.mark.parametrize("empty", ["batch", "sequence"])
@pytest.mark.parametrize("attention", ["decomposed", "sdpa"])
def test_empty_batch_or_sequence_on_iree(empty, attention, tmp_path):
    check_empty_step(C(batch=2, seq=1, past=4, packed=True, dynamic=True), attention, empty, tmp_path, backend="iree-cpu")


def test_isolated_runs_report_a_crash(tmp_path):
    """Negative control of the helper above: onnxruntime's own SIGFPE on an empty batch is a result, not the end of pytest."""
    cfg = C(batch=2, seq=1, past=4, dynamic=True)
    model = make_model(cfg)
    run = run_isolated(model, empty_feeds(cfg, model, "batch"), tmp_path, engine="onnxruntime")
    if run.signal is None:
        pytest.skip(f"onnxruntime no longer crashes on an empty batch ({run.describe()})")
    assert run.signal == "SIGFPE" and run.results is None


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


@pytest.mark.parametrize("backend", ["refbackend", "iree-cpu"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_fixed_capacity_rows_past_every_seqlens_are_never_read(backend, dynamic):
    """A shared buffer's rows past max(seqlens_k) + 1 may hold anything (NaN here): onnxruntime never reads them, nor do we."""
    cfg = C(batch=2, seq=1, past=16, past_lens=(5, 2), fixed_capacity=True, rotary=True, dynamic=dynamic)
    model, feeds = make_model(cfg), make_inputs(cfg)
    for name in ("past_key", "past_value"):
        feeds[name][:, :, 8:] = np.nan
    want = run_onnxruntime(model, feeds)
    assert np.isfinite(want["output"]).all()
    session = InferenceSession(model, backend=backend, threads=1)
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    assert not compare(cfg, got, want, feeds)
