"""Whatever the length inputs hold, compiled code stays in its buffers, and the
values onnxruntime rejects fail with a clear run-time error instead.

The sessions here run with ``runtime_verification``: MLIR's
``generate-runtime-verification`` bounds-checks every load and store of the
compiled code and aborts on an out-of-bounds access, so one would fail this
test file loudly.  A negative control (in a child process) shows that this
detector does stop an unclamped scatter.
"""

from __future__ import annotations

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import RuntimeInvocationError
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime

C = GQAConfig
I32_MAX = 2**31 - 1

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
