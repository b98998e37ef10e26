"""iree-cpu reads large, 64-byte-aligned numpy feeds in place, others through staging copies
(backends/iree/host_import.py), and 16-byte-aligned ones in place where only the fused decode
kernel reads them (backends/iree/feed_alignment.py).

Each test checks the numbers against onnxruntime, that no feed ever changes,
and what was uploaded (``uploaded_bytes``): the caches are read in place
after a function's first call unless the function writes or returns them.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.backends.iree import IreeCpuBackend
from gqa_torch_mlir.backends.iree.host_import import ALIGNMENT, MIN_BYTES, aligned_empty, copy_split, readable_in_place, stageable
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime

# 2 KV heads x 256 rows x 64 x 4 bytes = 128 KiB per cache: large enough to be read in place
HEADS = dict(batch=1, seq=1, num_heads=4, kv_num_heads=2, head_size=64)


def aligned(a: np.ndarray) -> np.ndarray:
    copy = aligned_empty(a.shape, a.dtype)
    copy[...] = a
    return copy


def unaligned(a: np.ndarray, offset: int = 16) -> np.ndarray:
    """A copy of ``a`` whose data starts ``offset`` bytes past a 64-byte boundary (16: where numpy's large arrays usually start)."""
    raw = np.empty(a.nbytes + 2 * ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data % ALIGNMENT) + offset
    copy = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    copy[...] = a
    return copy


def off_by_8(a: np.ndarray) -> np.ndarray:
    return unaligned(a, 8)


def run(sess, feeds):
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def check_steps(cfg: GQAConfig, place, calls: int = 3, threads: int = 1, attention=None):
    """``calls`` runs of one model on the same feeds (the caches passed through ``place``):
    each matches onnxruntime and leaves every feed as it was; returns the bytes each call uploaded."""
    model, feeds = make_model(cfg), make_inputs(cfg, seed=11)
    assert feeds["past_key"].nbytes >= MIN_BYTES
    ours = dict(feeds, past_key=place(feeds["past_key"]), past_value=place(feeds["past_value"]))
    before = {k: np.array(v) for k, v in ours.items() if isinstance(v, np.ndarray)}
    want = run_onnxruntime(model, feeds)
    sess = InferenceSession(model, backend="iree-cpu", threads=threads, attention=attention)
    uploaded = []
    for i in range(calls):
        got = run(sess, ours)
        problems = compare(cfg, got, want, feeds)
        assert not problems, f"call {i}:\n" + "\n".join(problems)
        for k, v in before.items():
            np.testing.assert_array_equal(ours[k], v, err_msg=f"call {i} changed the feed {k}")
        uploaded.append(sess.uploaded_bytes)
    return ours, uploaded


def test_aligned_arrays_are_aligned():
    for shape, dtype in [((3, 5), np.float32), ((1, 8, 1023, 128), np.float16), ((0,), np.float64)]:
        a = aligned_empty(shape, dtype)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous
        assert a.ctypes.data % ALIGNMENT == 0 or a.size == 0


def test_a_growing_cache_is_read_in_place_after_the_first_call():
    cfg = GQAConfig(past=255, rotary=True, **HEADS)
    ours, uploaded = check_steps(cfg, aligned)
    caches = ours["past_key"].nbytes + ours["past_value"].nbytes
    assert uploaded[0] >= caches  # the first call runs on checked copies
    assert uploaded[1] == uploaded[2] < caches, uploaded  # then only the small feeds are copied


@pytest.mark.parametrize("threads", [1, 2])
def test_numpys_caches_only_the_fused_kernel_reads_are_read_in_place(threads):
    """A growing cache 16 bytes past a 64-byte boundary, read only by the fused kernel's write
    variant (compiled for 16-byte bindings): read in place, neither uploaded nor staged."""
    cfg = GQAConfig(past=255, rotary=True, **HEADS)
    ours, uploaded = check_steps(cfg, unaligned, threads=threads)
    caches = ours["past_key"].nbytes + ours["past_value"].nbytes
    assert not readable_in_place(ours["past_key"])  # not at IREE's 64 bytes
    assert uploaded[1] == uploaded[2] < caches, uploaded


@pytest.mark.parametrize("place, attention", [(off_by_8, None), (unaligned, "decomposed")], ids=["off_by_8", "decomposed"])
def test_unaligned_caches_are_copied(place, attention):
    """Not read in place: a cache 8 bytes past a boundary (the kernel's code assumes 16), and one
    that IREE's own dispatches read (the decomposed attention's, compiled for 64)."""
    cfg = GQAConfig(past=255, **HEADS)
    ours, uploaded = check_steps(cfg, place, attention=attention)
    assert not readable_in_place(ours["past_key"])
    assert all(u >= ours["past_key"].nbytes + ours["past_value"].nbytes for u in uploaded), uploaded


def test_unaligned_and_read_only_caches_are_read_from_staging_copies():
    """numpy's own (unaligned) and read-only caches go through staging arrays, copied on 2 threads:
    a growing cache of new values each step (the staging array regrown, reused, never stale)
    matches onnxruntime, and no feed changes."""
    steps = [GQAConfig(past=255 + i, dynamic=True, **HEADS) for i in range(4)]
    model = make_model(steps[0])
    sess = InferenceSession(model, backend="iree-cpu", threads=2)
    for i, cfg in enumerate(steps):
        feeds = make_inputs(cfg, seed=60 + i)
        ours = dict(feeds, past_key=unaligned(feeds["past_key"]), past_value=aligned(feeds["past_value"]))
        ours["past_value"].flags.writeable = False
        assert not readable_in_place(ours["past_key"]) and not readable_in_place(ours["past_value"])
        assert stageable(ours["past_key"]) and stageable(ours["past_value"])
        kept = {k: np.array(ours[k]) for k in ("past_key", "past_value")}
        problems = compare(cfg, run(sess, ours), run_onnxruntime(model, feeds), feeds)
        assert not problems, f"step {i}:\n" + "\n".join(problems)
        for k, v in kept.items():
            np.testing.assert_array_equal(ours[k], v, err_msg=f"step {i} changed the feed {k}")
        assert sess.uploaded_bytes >= kept["past_key"].nbytes + kept["past_value"].nbytes  # staged: still copied


def test_copy_split_copies_every_element():
    src = np.arange(1000003, dtype=np.float32).reshape(1, 1000003)
    with ThreadPoolExecutor(2) as pool:
        for parts, p in [(1, None), (2, pool), (3, pool)]:
            dst = np.zeros_like(src)
            copy_split(dst, src, p, parts)
            np.testing.assert_array_equal(dst, src, err_msg=f"{parts} parts")


def test_a_fixed_capacity_cache_written_in_place_is_still_copied():
    """The compiled function writes the new row into the past buffer and returns it as present: a
    feed read in place would change, so the first call finds that out and the caches stay copies."""
    cfg = GQAConfig(past=256, past_lens=(200,), fixed_capacity=True, **HEADS)
    ours, uploaded = check_steps(cfg, aligned)
    caches = ours["past_key"].nbytes + ours["past_value"].nbytes
    assert all(u >= caches for u in uploaded), uploaded


def test_an_f16_cache_is_read_in_place():
    cfg = GQAConfig(past=511, dtype="float16", **HEADS)
    ours, uploaded = check_steps(cfg, aligned, calls=2)
    assert ours["past_key"].dtype == np.float16
    assert uploaded[1] < ours["past_key"].nbytes, uploaded


def test_our_outputs_fed_back_as_numpy_are_read_in_place():
    """A generation loop without share_buffers: present (an IREE buffer, so aligned) fed back as the next past."""
    steps = [GQAConfig(past=255 + i, dynamic=True, **HEADS) for i in range(3)]
    model = make_model(steps[0])
    sess = InferenceSession(model, backend="iree-cpu", threads=1)
    ours = theirs = None
    for i, cfg in enumerate(steps):
        feeds = make_inputs(cfg, seed=40 + i)
        ours_feeds, theirs_feeds = dict(feeds), dict(feeds)
        if ours is not None:
            ours_feeds["past_key"], ours_feeds["past_value"] = ours
            theirs_feeds["past_key"], theirs_feeds["past_value"] = theirs
        kept = np.array(ours_feeds["past_key"])
        got, want = run(sess, ours_feeds), run_onnxruntime(model, theirs_feeds)
        problems = compare(cfg, got, want, theirs_feeds)
        assert not problems, f"step {i}:\n" + "\n".join(problems)
        np.testing.assert_array_equal(ours_feeds["past_key"], kept)
        if i:
            assert readable_in_place(ours_feeds["past_key"])
            assert sess.uploaded_bytes < ours_feeds["past_key"].nbytes, (i, sess.uploaded_bytes)
        ours = got["present_key"], got["present_value"]
        theirs = want["present_key"], want["present_value"]


@pytest.mark.parametrize("cfg, named", [
    (GQAConfig(past=255, rotary=True, **HEADS), True),  # the write variant reads the past, writes present
    (GQAConfig(past=256, past_lens=(200,), fixed_capacity=True, **HEADS), False),  # the buffer written in place
    (GQAConfig(past=255, dynamic=True, **HEADS), False),  # IREE's own copy of the past into present
], ids=["growing", "written_in_place", "dynamic"])
def test_only_feeds_the_kernel_alone_reads_are_named(cfg, named):
    """The fused kernel's executable is compiled for 16-byte bindings, and the function's
    reflection names the caches (as ``json.dumps`` writes it) only where that executable alone
    reads them and writes none of them (backends/iree/feed_alignment.py)."""
    model = make_model(cfg)
    text = IreeCpuBackend(threads=1).lower(model).asm()
    assert "min_buffer_offset_alignment = 16" in text
    names = [i.name for i in model.graph.input]
    positions = json.dumps([names.index("past_key"), names.index("past_value")])
    assert (f'gqa.feeds_at_16 = "{positions}"' in text) == named, re.findall(r"gqa.feeds_at_16 = [^,}]*", text)
