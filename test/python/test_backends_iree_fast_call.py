"""iree-cpu's lean call path once a function has run (backends/iree/fast_call.py) and
``InferenceSession.run``'s quick check of plain numpy feeds.

Each test makes the general path fail after the first call, so that a later
call that passes can only have taken the lean one, and checks its numbers
against onnxruntime, its uploads and the buffers of its results; the cases
the lean path must leave to the general one still run there.
"""

from __future__ import annotations

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.backends.iree import IreeCompiledModule
from gqa_torch_mlir.errors import RuntimeInvocationError
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime

SHARED = GQAConfig(batch=1, seq=1, past=8, past_lens=(5,), fixed_capacity=True, num_heads=4, kv_num_heads=2, head_size=16)
GROWING = GQAConfig(batch=1, seq=1, past=6, num_heads=4, kv_num_heads=2, head_size=16)


def outputs(sess, feeds):
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


@pytest.fixture
def general_path_off(monkeypatch):
    """After this fixture's ``arm()``, the general call path raises."""
    armed = []
    general = IreeCompiledModule._call

    def call(self, function, args):
        if armed:
            raise AssertionError("the general path ran")
        return general(self, function, args)

    monkeypatch.setattr(IreeCompiledModule, "_call", call)
    return lambda: armed.append(True)


def test_shared_steps_take_the_lean_path(general_path_off):
    """Fixed-capacity caches fed back: later steps pass them without an upload, come back as the
    very arrays fed, and match onnxruntime, with the general path off."""
    model = make_model(SHARED)
    sess = InferenceSession(model, backend="iree-cpu", threads=1, share_buffers=True)
    feeds = make_inputs(SHARED, seed=3)
    first, want = outputs(sess, feeds), run_onnxruntime(model, feeds)
    general_path_off()
    theirs = dict(feeds, past_key=want["present_key"], past_value=want["present_value"])
    ours = dict(feeds, past_key=first["present_key"], past_value=first["present_value"])
    for step, past_len in enumerate((6, 7)):
        ours["seqlens_k"] = theirs["seqlens_k"] = np.array([past_len], np.int32)
        ours["total_sequence_length"] = theirs["total_sequence_length"] = np.array(past_len + 1, np.int32)
        want = run_onnxruntime(model, theirs)
        got = outputs(sess, ours)
        assert got["present_key"] is ours["past_key"] and got["present_value"] is ours["past_value"]
        assert sess.uploaded_bytes == sum(v.nbytes for k, v in ours.items() if not k.startswith("past_"))
        problems = compare(SHARED, got, want, theirs)
        assert not problems, f"step {step}:\n" + "\n".join(problems)
        theirs = dict(theirs, past_key=want["present_key"], past_value=want["present_value"])


def test_small_results_are_copies_without_shared_buffers(general_path_off):
    """Without share_buffers a small result is copied out: it owns its memory, and the next call
    does not change it."""
    model = make_model(GROWING)
    sess = InferenceSession(model, backend="iree-cpu", threads=1)
    feeds = make_inputs(GROWING, seed=4)
    outputs(sess, feeds)
    general_path_off()
    got = outputs(sess, feeds)
    kept = {k: np.array(v) for k, v in got.items()}
    assert all(v.flags.owndata for v in got.values())
    outputs(sess, make_inputs(GROWING, seed=5))
    for k, v in kept.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    problems = compare(GROWING, got, run_onnxruntime(model, feeds), feeds)
    assert not problems, "\n".join(problems)


def shared_first_call(cfg, seed, general_path_off):
    """(model, session, feeds, the first call's outputs, the feeds with its caches fed back): a
    share_buffers session's first call, on the general path, which is then switched off."""
    model = make_model(cfg)
    sess = InferenceSession(model, backend="iree-cpu", threads=1, share_buffers=True)
    feeds = make_inputs(cfg, seed=seed)
    first = outputs(sess, feeds)
    general_path_off()
    return model, sess, feeds, first, dict(feeds, past_key=first["present_key"], past_value=first["present_value"])


def test_shared_results_not_fed_back_are_copies(general_path_off):
    """With share_buffers a small result the next call did not feed back (the attention output)
    is copied out from then on: it owns its memory, and later calls leave it as it was; the
    caches fed back are still the very arrays fed, and the numbers onnxruntime's."""
    model, sess, feeds, first, ours = shared_first_call(SHARED, 11, general_path_off)
    got = [outputs(sess, ours) for _ in range(3)]
    assert not got[0]["output"].flags.owndata  # the lean path's first call: a mapping, as any result may be fed back
    assert got[1]["output"].flags.owndata and got[2]["output"].flags.owndata
    kept = np.array(got[1]["output"])
    later = outputs(sess, dict(ours, query=feeds["query"] * 2))
    np.testing.assert_array_equal(got[1]["output"], kept)
    assert later["present_key"] is ours["past_key"] and later["present_value"] is ours["past_value"]
    theirs = dict(feeds, query=feeds["query"] * 2, past_key=np.array(later["present_key"]), past_value=np.array(later["present_value"]))
    problems = compare(SHARED, later, run_onnxruntime(model, theirs), theirs)
    assert not problems, "\n".join(problems)


def test_a_4bit_cache_stays_in_place_on_the_lean_path(general_path_off):
    """A 4-bit cache (uint8 bytes, int8 in the compiled code: the arrays fed are not those the
    call sees) written in place stays the caller's buffer call after call, where the attention
    output is copied."""
    cfg = GQAConfig(batch=1, seq=1, past=8, past_lens=(3,), fixed_capacity=True, kv_bits=4, quant_type="PER_CHANNEL",
                    num_heads=4, kv_num_heads=2, head_size=16)
    model, sess, feeds, first, ours = shared_first_call(cfg, 17, general_path_off)
    for past_len in (4, 5, 6):
        ours.update(seqlens_k=np.array([past_len], np.int32), total_sequence_length=np.array(past_len + 1, np.int32))
        theirs = dict(ours, past_key=np.array(ours["past_key"]), past_value=np.array(ours["past_value"]))
        got = outputs(sess, ours)
        assert np.shares_memory(got["present_key"], first["present_key"]), past_len
        assert np.shares_memory(got["present_value"], first["present_value"]), past_len
        problems = compare(cfg, got, run_onnxruntime(model, theirs), theirs)
        assert not problems, f"past {past_len}:\n" + "\n".join(problems)
    assert got["output"].flags.owndata


def test_a_failed_check_is_named_on_the_lean_path(general_path_off):
    model = make_model(SHARED)
    sess = InferenceSession(model, backend="iree-cpu", threads=1)
    feeds = make_inputs(SHARED, seed=6)
    outputs(sess, feeds)
    general_path_off()
    bad = dict(feeds, seqlens_k=np.array([SHARED.past + 5], np.int32))
    with pytest.raises(RuntimeInvocationError, match="seqlens_k"):
        sess.run(None, bad)


@pytest.mark.parametrize("case", ["one buffer as both caches", "a feed not contiguous"])
def test_other_feeds_take_the_general_path(case, monkeypatch):
    """Feeds the lean path leaves to the general one run there and match onnxruntime."""
    general_calls = []
    general = IreeCompiledModule._call
    monkeypatch.setattr(IreeCompiledModule, "_call", lambda self, f, args: general_calls.append(f) or general(self, f, args))
    model = make_model(SHARED)
    sess = InferenceSession(model, backend="iree-cpu", threads=1, share_buffers=True)
    feeds = make_inputs(SHARED, seed=7)
    first = outputs(sess, feeds)
    ours, theirs = dict(feeds), dict(feeds)
    if case == "one buffer as both caches":  # a resident buffer is passed once: the general path copies the other
        ours["past_key"] = ours["past_value"] = first["present_key"]
        theirs.update(past_key=np.array(first["present_key"]), past_value=np.array(first["present_key"]))
    else:
        ours["query"] = np.repeat(feeds["query"], 2, axis=2)[:, :, ::2]  # the same values, every other element
        assert not ours["query"].flags.c_contiguous
    got = outputs(sess, ours)
    assert len(general_calls) == 2, "the second call should have taken the general path"
    problems = compare(SHARED, got, run_onnxruntime(model, theirs), theirs)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("raised", [IndexError, KeyError, OSError])
def test_a_vm_failure_of_any_status_is_a_runtime_invocation_error(raised):
    """IREE's runtime raises IndexError for an OUT_OF_RANGE status (a command buffer's validation),
    KeyError for NOT_FOUND: the lean path reports each as RuntimeInvocationError with IREE's first
    line, as a RuntimeError was (the general path catches the same vm_results.VM_ERRORS); in
    round 26 an IndexError reached the user of a three-layer decoder."""
    sess = InferenceSession(make_model(GROWING), backend="iree-cpu", threads=1)
    feeds = make_inputs(GROWING, seed=1)
    outputs(sess, feeds)  # the lean path learns the function
    compiled = sess._compiled

    class Failing:
        def invoke(self, *args):
            raise raised("Error invoking function: c/runtime/x.c:1: OUT_OF_RANGE; a status of IREE's\n[ 0] bytecode")

    real, compiled._context = compiled._context, Failing()
    try:
        with pytest.raises(RuntimeInvocationError, match=r"@\w+: .*OUT_OF_RANGE; a status of IREE's"):
            outputs(sess, feeds)
    finally:
        compiled._context = real
