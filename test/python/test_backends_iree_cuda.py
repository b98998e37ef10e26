"""The iree-cuda backend on a host without a GPU: everything compiles for CUDA, and the run path is checked on the CPU.

* The GroupQueryAttention matrix (all-pairs subset; every case in the extended
  tier) and every model builder decoder compile for
  ``--iree-hal-target-device=cuda``: a lowering change that breaks IREE's GPU
  code generation fails here.
* The GPU form of the lowering (device=gpu) matches onnxruntime, run on iree-cpu.
* ``InferenceSession.from_vmfb`` and ``run_with_device_values`` (the GPU's run
  path: a vmfb compiled elsewhere, caches kept on the device) match
  onnxruntime on iree-cpu, and testing/gpu_check.py's two steps run there.
* Unsupported combinations are refused by name.

The run on a real GPU: ``python -m gqa_torch_mlir.testing.gpu_check`` (docs/gpu.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from gqa_torch_mlir import GqaTorchMlirError, InferenceSession, RuntimeInvocationError
from gqa_torch_mlir.backends.iree import IreeBackend
from gqa_torch_mlir.options import LoweringOptions
from gqa_torch_mlir.testing import gpu_check
from gqa_torch_mlir.testing.gqa_matrix import matrix_configs, pairwise_subset
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime
from gqa_torch_mlir.testing.tiers import EXTENDED, full_matrix, one_per_family

CLI = str(Path(sys.executable).parent / "gqa-torch-mlir")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "decoders"
MATRIX = matrix_configs() if full_matrix() else pairwise_subset(matrix_configs())
DECODERS = sorted(p.name for p in FIXTURES.iterdir() if (p / "model.onnx").is_file() and p.name != "qwen3-fp16")


def cuda_vmfb(model) -> bytes:
    backend = IreeBackend(target="iree-cuda")
    vmfb = backend.compile_lowered(backend.lower(model))
    assert b"cuda-nvptx-fb" in vmfb, "the module holds no CUDA executable"
    return vmfb


# The fast tier: each matrix case either compiled for CUDA or its GPU form run on the CPU, in turn;
# the extended tier: both for every case.
CUDA_MATRIX = MATRIX if EXTENDED else MATRIX[0::2]
GPU_FORM_MATRIX = MATRIX if EXTENDED else MATRIX[1::2]


@pytest.mark.parametrize("cfg", CUDA_MATRIX, ids=lambda c: c.name)
def test_gqa_matrix_compiles_for_cuda(cfg: GQAConfig):
    cuda_vmfb(make_model(cfg))


@pytest.mark.parametrize("cfg", GPU_FORM_MATRIX, ids=lambda c: c.name)
def test_gpu_form_matches_onnxruntime_on_the_cpu(cfg: GQAConfig):
    model, feeds = make_model(cfg), make_inputs(cfg, seed=11)
    backend = IreeBackend(target="iree-cpu", threads=1, options=LoweringOptions(attention="sdpa", device="gpu"))
    compiled = backend.compile(model)
    initializers = {i.name for i in model.graph.initializer}
    args = [feeds[i.name] for i in model.graph.input if i.name not in initializers]
    got = dict(zip([o.name for o in model.graph.output], compiled.invoke(compiled.function, *args)))
    assert compare(cfg, got, run_onnxruntime(model, feeds), feeds) == []


def test_gpu_form_still_names_a_failing_check():
    """The GPU form reads its checks once, at the end; a failing one still fails the call with its own message."""
    cfg = GQAConfig(batch=2, seq=1, past=8, past_lens=(5, 3), fixed_capacity=True, rotary=True, dynamic=True)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=2)
    compiled = IreeBackend(target="iree-cpu", threads=1, options=LoweringOptions(attention="sdpa", device="gpu")).compile(model)
    names = [i.name for i in model.graph.input]
    bad = dict(feeds, seqlens_k=np.array([-1, 3], np.int32))
    with pytest.raises(RuntimeInvocationError, match=r"seqlens_k\[b\] must be >= 0"):
        compiled.invoke(compiled.function, *[bad[n] for n in names])


# The fast tier (CI's 20 minutes): the families whose graphs differ most (softcap and a sliding window;
# packed QKV; q/k norms; a fixed-capacity cache), one fixture each; the extended tier: every fixture.
CUDA_FAST_FAMILIES = ("gemma2", "phi3", "qwen3-qknorm", "mistral-fullcache")


@pytest.mark.parametrize("name", [n for n in one_per_family(DECODERS) if EXTENDED or n.rsplit("-", 1)[0] in CUDA_FAST_FAMILIES])
def test_decoder_compiles_for_cuda(name: str):
    cuda_vmfb(str(FIXTURES / name / "model.onnx"))


def test_the_cli_writes_a_cuda_vmfb(tmp_path):
    model = tmp_path / "step.onnx"
    onnx.save(make_model(GQAConfig(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True, dynamic=True)), str(model))
    proc = subprocess.run([CLI, "compile", str(model), "--backend", "iree-cuda", "-o", str(tmp_path / "step.vmfb")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert b"cuda-nvptx-fb" in (tmp_path / "step.vmfb").read_bytes()
    assert "for iree-cuda" in proc.stderr


def test_a_vmfb_compiled_by_the_cli_runs_with_the_runtime_alone(tmp_path):
    cfg = GQAConfig(batch=2, seq=1, past=6, past_lens=(6, 3), rotary=True, dynamic=True)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=3)
    onnx.save(model, str(tmp_path / "m.onnx"))
    proc = subprocess.run([CLI, "compile", str(tmp_path / "m.onnx"), "--backend", "iree-cpu", "-o", str(tmp_path / "m.vmfb")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    sess = InferenceSession.from_vmfb(str(tmp_path / "m.onnx"), (tmp_path / "m.vmfb").read_bytes(), backend="iree-cpu")
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    assert compare(cfg, got, run_onnxruntime(model, feeds), feeds) == []


def test_device_values_fed_back_as_a_shared_cache():
    """Two decode steps with present fed back as past without leaving the device, as on a GPU."""
    cfg = GQAConfig(batch=1, seq=1, past=12, past_lens=(7,), fixed_capacity=True, rotary=True)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=5)
    sess = InferenceSession(model, backend="iree-cpu", share_buffers=True)
    ref_feeds = dict(feeds)
    step = dict(feeds, past_key=sess.device_value(feeds["past_key"]), past_value=sess.device_value(feeds["past_value"]))
    for n in range(2):
        out = sess.run_with_device_values(None, step)
        want = run_onnxruntime(model, ref_feeds)
        got = {"output": out[0].numpy(), "present_key": out[1].numpy(), "present_value": out[2].numpy()}
        assert compare(cfg, got, want, ref_feeds) == [], f"step {n}"
        host_bytes = sum(np.asarray(v).nbytes for k, v in step.items() if k not in ("past_key", "past_value"))
        assert sess.uploaded_bytes == host_bytes, "the caches were uploaded"
        step.update(past_key=out[1], past_value=out[2], seqlens_k=step["seqlens_k"] + 1,
                    total_sequence_length=step["total_sequence_length"] + 1)
        ref_feeds = dict(ref_feeds, past_key=want["present_key"], past_value=want["present_value"],
                         seqlens_k=step["seqlens_k"], total_sequence_length=step["total_sequence_length"])


def test_gpu_check_runs_its_two_steps_on_the_cpu(tmp_path):
    cases = gpu_check.prepare(tmp_path, quick=True, backend="iree-cpu", limit=1)
    assert [c.kind for c in cases] == ["gqa", "gqa", "decoder"]
    results = gpu_check.run(tmp_path, FIXTURES.parents[2])
    assert [r["ok"] for r in results] == [True, True, True], results


@pytest.mark.parametrize("kwargs, message", [
    (dict(backend="iree-cuda", threads=2), "threads is a CPU setting"),
    (dict(backend="iree-cuda", attention="decomposed"), "attention='decomposed' is refused on iree-cuda"),
    (dict(backend="refbackend", share_buffers=True), "share_buffers needs backend 'iree-cpu' or 'iree-cuda'"),
])
def test_refused_by_name(kwargs, message):
    with pytest.raises(GqaTorchMlirError, match=message):
        InferenceSession(make_model(GQAConfig(batch=1, seq=1, past=4)), **kwargs)


def test_cuda_without_a_driver_says_so():
    """Here (no GPU), the compiled module cannot be loaded: the error names the driver; on a GPU host it runs."""
    cfg = GQAConfig(batch=1, seq=1, past=4)
    model, feeds = make_model(cfg), make_inputs(cfg, seed=1)
    try:
        sess = InferenceSession(model, backend="iree-cuda")
    except GqaTorchMlirError as e:
        assert "IREE's cuda driver has no device here" in str(e)
        return
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    assert compare(cfg, got, run_onnxruntime(model, feeds), feeds) == []


@pytest.mark.parametrize("args, message", [
    (["--backend", "iree-cuda"], "writes a binary .vmfb: name the file with -o"),
    (["--backend", "iree-cuda", "--output-type", "torch", "-o", "x.vmfb"], "--output-type is for the MLIR output"),
    (["--backend", "iree-cuda", "--attention", "decomposed", "-o", "x.vmfb"], "refused on iree-cuda"),
])
def test_cli_refusals(args, message, tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(make_model(GQAConfig(batch=1, seq=1, past=4)), str(model))
    proc = subprocess.run([CLI, "compile", str(model), *args], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_from_vmfb_needs_an_iree_backend():
    with pytest.raises(GqaTorchMlirError, match="from_vmfb needs an IREE backend"):
        InferenceSession.from_vmfb(make_model(GQAConfig(batch=1, seq=1, past=4)), b"", backend="refbackend")


def test_the_cpu_kernel_for_matmul_nbits_is_refused_on_cuda():
    """Options given to the backend directly (the session builds them from the target): LoweringOptions
    refuses kernel with device=gpu; with the default device=cpu, the CUDA backend refuses it."""
    with pytest.raises(GqaTorchMlirError, match="matmul_nbits='kernel' is refused on iree-cuda"):
        IreeBackend(target="iree-cuda", options=LoweringOptions(attention="sdpa", matmul_nbits="kernel"))


def test_the_default_options_on_cuda_are_the_sdpa_form():
    assert IreeBackend(target="iree-cuda").options == LoweringOptions(attention="sdpa", device="gpu")
