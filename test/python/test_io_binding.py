"""onnxruntime's IO binding on InferenceSession (io_binding.py; on iree-cpu backends/iree/bound_call.py).

Bound runs match onnxruntime step after step, read each bound array's values
as they are at the run (changed in place, or rebound), return a resident cache
as the very array bound, never overwrite an array they handed out, and on
iree-cpu take the packed call (the general path made to fail); the refusals
name what is not supported.
"""

from __future__ import annotations

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.backends.iree import IreeCompiledModule
from gqa_torch_mlir.errors import GqaTorchMlirError, RuntimeInvocationError
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime

SHARED = GQAConfig(batch=1, seq=1, past=10, past_lens=(5,), fixed_capacity=True, num_heads=4, kv_num_heads=2, head_size=16)
GROWING = GQAConfig(batch=1, seq=1, past=6, num_heads=4, kv_num_heads=2, head_size=16)
OUTPUTS = ("output", "present_key", "present_value")


def bound(sess, feeds, outputs=OUTPUTS):
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    for name in outputs:
        binding.bind_output(name)
    return binding


def run(sess, binding) -> dict:
    sess.run_with_iobinding(binding)
    return dict(zip(binding._outputs, binding.get_outputs()))


@pytest.fixture
def general_path_off(monkeypatch):
    """After this fixture's ``arm()``, iree-cpu's general and lean call paths raise: a call that
    passes took the bound one."""
    armed = []
    general = IreeCompiledModule.invoke

    def invoke(self, function, *args):
        if armed:
            raise AssertionError("a bound run went through invoke")
        return general(self, function, *args)

    monkeypatch.setattr(IreeCompiledModule, "invoke", invoke)
    return lambda: armed.append(True)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_bound_shared_decode_loop_matches_onnxruntime(general_path_off, threads):
    """genai's loop: fixed-capacity caches bound once (resident), the step's inputs changed in place
    between runs; present is the very array bound as past, and each step matches onnxruntime."""
    model = make_model(SHARED)
    sess = InferenceSession(model, backend="iree-cpu", threads=threads, share_buffers=True)
    feeds = make_inputs(SHARED, seed=11)
    first, want = dict(zip(OUTPUTS, sess.run(None, feeds))), run_onnxruntime(model, feeds)
    ours = dict(feeds, past_key=first["present_key"], past_value=first["present_value"])
    ours = {k: (v if k.startswith("past_") else v.copy()) for k, v in ours.items()}  # bound arrays of our own
    theirs = dict(feeds, past_key=want["present_key"], past_value=want["present_value"])
    binding = bound(sess, ours)
    rng = np.random.default_rng(12)
    for step, past_len in enumerate((6, 7, 8)):
        for name in ("query", "key", "value"):
            ours[name][...] = theirs[name] = rng.standard_normal(ours[name].shape).astype(np.float32)
        ours["seqlens_k"][...] = theirs["seqlens_k"] = np.array([past_len], np.int32)
        ours["total_sequence_length"][...] = theirs["total_sequence_length"] = np.array(past_len + 1, np.int32)
        got = run(sess, binding)
        if step == 1:
            general_path_off()  # the first bound run packed the call: from here on only it may run
        assert got["present_key"] is ours["past_key"] and got["present_value"] is ours["past_value"]
        want = run_onnxruntime(model, theirs)
        problems = compare(SHARED, got, want, theirs)
        assert not problems, f"step {step}:\n" + "\n".join(problems)
        theirs = dict(theirs, past_key=want["present_key"], past_value=want["present_value"])
    assert sess.uploaded_bytes == sum(v.nbytes for k, v in ours.items() if not k.startswith("past_"))


def test_a_rebound_input_is_read_and_results_are_not_overwritten(general_path_off):
    """Numpy caches (not resident), a growing step: rebinding query replaces it, each run matches
    onnxruntime, and the arrays a run returned are unchanged by the next; the feeds too."""
    model = make_model(GROWING)
    sess = InferenceSession(model, backend="iree-cpu", threads=1)
    feeds = make_inputs(GROWING, seed=21)
    kept_feeds = {k: v.copy() for k, v in feeds.items()}
    binding = bound(sess, feeds)
    runs = []
    for seed in (22, 23, 24):
        query = make_inputs(GROWING, seed=seed)["query"]
        binding.bind_cpu_input("query", query)
        got = run(sess, binding)
        general_path_off()
        want = run_onnxruntime(model, dict(feeds, query=query))
        problems = compare(GROWING, got, want, dict(feeds, query=query))
        assert not problems, "\n".join(problems)
        runs.append((got, {k: np.array(v) for k, v in got.items()}))
    for got, kept in runs:
        for name in OUTPUTS:
            np.testing.assert_array_equal(got[name], kept[name], err_msg=name)
    for name, value in kept_feeds.items():
        np.testing.assert_array_equal(feeds[name], value, err_msg=name)


def test_a_cache_written_in_place_but_not_resident_is_handed_out_once():
    """With share_buffers, numpy caches that are not the session's (past 520 rows: a result large
    enough to be mapped, not copied): the module writes the new row into our copy of past and
    returns it as present.  A bound run copies such a result out and uploads that past afresh
    from then on, so no present handed out changes with the next run's new key, and past stays."""
    cfg = GQAConfig(batch=1, seq=1, past=520, past_lens=(500,), fixed_capacity=True, num_heads=4, kv_num_heads=2, head_size=16)
    model = make_model(cfg)
    sess = InferenceSession(model, backend="iree-cpu", threads=1, share_buffers=True)
    feeds = make_inputs(cfg, seed=31)
    sess.run(None, feeds)  # the lean path learns the function: the binding packs its call
    kept_past = feeds["past_key"].copy()
    step = dict(feeds, key=feeds["key"].copy())
    binding = bound(sess, step)
    presents = []
    for seed in (32, 33, 34):
        step["key"][...] = make_inputs(cfg, seed=seed)["key"]  # changed in place: the same packed call
        got = run(sess, binding)
        problems = compare(cfg, got, run_onnxruntime(model, step), step)
        assert not problems, "\n".join(problems)
        presents.append((got["present_key"], got["present_key"].copy()))
    assert binding.call._fresh == {3, 4}  # past_key, past_value: uploaded afresh after the first bound run
    for present, kept in presents:
        np.testing.assert_array_equal(present, kept)
    np.testing.assert_array_equal(feeds["past_key"], kept_past)


def test_bound_runs_on_the_refbackend_match_run():
    model = make_model(GROWING)
    sess = InferenceSession(model)
    feeds = make_inputs(GROWING, seed=41)
    binding = bound(sess, feeds, outputs=("present_value", "output"))
    sess.run_with_iobinding(binding)
    got = binding.get_outputs()
    want = dict(zip(OUTPUTS, sess.run(None, feeds)))
    assert [g.shape for g in got] == [want["present_value"].shape, want["output"].shape]  # in the order bound
    np.testing.assert_array_equal(got[0], want["present_value"])
    np.testing.assert_array_equal(got[1], want["output"])
    copies = binding.copy_outputs_to_cpu()
    assert all(not np.shares_memory(c, g) for c, g in zip(copies, got))


@pytest.fixture(scope="module")
def refbackend_session():
    return InferenceSession(make_model(GROWING))


@pytest.mark.parametrize("act, error, message", [
    (lambda s, b: b.bind_cpu_input("qury", np.zeros(1)), RuntimeInvocationError, "unknown input name 'qury'; the inputs are: query"),
    (lambda s, b: b.bind_cpu_input("query", np.zeros((1, 1, 64), np.float64)), RuntimeInvocationError,
     "input 'query': expected tensor(float), got numpy float64"),
    (lambda s, b: b.bind_output("presnt_key"), RuntimeInvocationError, "unknown output name 'presnt_key'"),
    (lambda s, b: b.bind_output("output", buffer_ptr=1234), GqaTorchMlirError, "bind_output('output'): buffer_ptr=1234 is not supported"),
    (lambda s, b: b.bind_output("output", device_type="cuda"), GqaTorchMlirError, "device_type='cuda' is not supported"),
    (lambda s, b: b.bind_input("query", "cpu", 0, np.float32, [1, 1, 64], 1234), GqaTorchMlirError, "bind_input('query', ...) (a device pointer) is not supported"),
    (lambda s, b: b.bind_ortvalue_output("present_key", None), GqaTorchMlirError, "bind_ortvalue_output('present_key', ...) is not supported"),
    (lambda s, b: s.run_with_iobinding(b), RuntimeInvocationError, "input(s) not bound: query, key, value, past_key, past_value"),
    (lambda s, b: s.run_with_iobinding(object()), RuntimeInvocationError, "needs an IOBinding made by this session's io_binding()"),
])
def test_bindings_refuse_by_name(refbackend_session, act, error, message):
    with pytest.raises(error, match=None) as raised:
        act(refbackend_session, refbackend_session.io_binding())
    assert message in str(raised.value)


def test_a_run_with_no_output_bound_is_refused(refbackend_session):
    binding = refbackend_session.io_binding()
    for name, value in make_inputs(GROWING, seed=51).items():
        binding.bind_cpu_input(name, value)
    with pytest.raises(RuntimeInvocationError, match="no output bound"):
        refbackend_session.run_with_iobinding(binding)
