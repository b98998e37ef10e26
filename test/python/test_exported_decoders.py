"""Hugging Face decoders exported by PyTorch's ONNX exporter (opset 23: Attention, RotaryEmbedding,
RMSNormalization), run with a KV cache: prefill of a left-padded batch, then decode steps, each
step's greedy token and logits against onnxruntime's on the same model.

The models are tiny random-weight configs built and exported in code (testing/hf_decoders.py;
torch, transformers and onnxscript come with the ``fixtures`` extra).  The fast tier runs two
architectures and forms; GQA_EXTENDED=1 runs every architecture, form and opset on both backends.
"""

from __future__ import annotations

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.testing import hf_decoders, tiers

STEPS = 5
# (architecture, how grouped K/V reach Attention, opset); hf_decoders.export_decoder documents the forms
FAST = [("llama", "fused", 23, "refbackend"), ("qwen3", "repeat_kv", 23, "iree-cpu"), ("gemma2_sdpa", "enable_gqa", 23, "refbackend")]
EXTENDED = [
    (arch, form, opset, backend)
    for arch in hf_decoders.ARCHITECTURES if arch != "gemma2"
    for form in hf_decoders.GQA_FORMS
    for opset in (23, 24)
    for backend in ("refbackend", "iree-cpu")
] + [("gemma2", "repeat_kv", 23, backend) for backend in ("refbackend", "iree-cpu")]  # eager attention: no Attention op
CASES = EXTENDED if tiers.EXTENDED else FAST


def _prompt():
    """Two rows, the second left-padded by 2."""
    ids = np.array([[5, 17, 33, 8, 91, 12], [0, 0, 44, 7, 63, 20]], np.int64)
    mask = np.array([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]], np.int64)
    return ids, mask


@pytest.mark.parametrize("arch,form,opset,backend", CASES, ids=lambda v: str(v))
def test_greedy_tokens_match_onnxruntime(tmp_path, arch, form, opset, backend):
    path = tmp_path / f"{arch}.onnx"
    model = hf_decoders.export_decoder(arch, path, with_cache=True, opset=opset, gqa=form)
    ops = {n.op_type for n in model.graph.node}
    if opset == 23 and arch != "gemma2":  # the standard ops are what this test is for
        assert {"Attention", "RotaryEmbedding", "RMSNormalization"} <= ops, ops
    ids, mask = _prompt()
    want_tokens, want_logits = hf_decoders.greedy_generate_onnxruntime(path, ids, STEPS, attention_mask=mask)
    have_tokens, have_logits = hf_decoders.greedy_generate_onnxruntime(
        path, ids, STEPS, attention_mask=mask, session_factory=lambda p: InferenceSession(p, backend=backend))
    for step, (have, want) in enumerate(zip(have_logits, want_logits)):
        np.testing.assert_allclose(have, want, rtol=0, atol=1e-4, err_msg=f"step {step}")
    # The tokens must agree too; each step's top-2 margin is far above the logits' tolerance,
    # so an agreement is not luck and a disagreement is not a tie.
    margins = [np.diff(np.sort(w, axis=-1)[:, -2:], axis=-1).min() for w in want_logits]
    assert min(margins) > 1e-3, margins
    np.testing.assert_array_equal(have_tokens, want_tokens)


def test_generate_command_runs_an_exported_decoder(tmp_path):
    """`gqa-torch-mlir generate --model FILE.onnx`: no genai_config.json, the cache geometry and
    the vocabulary read from the graph, position_ids fed; as a user runs it."""
    import os
    import subprocess
    import sys

    path = tmp_path / "llama.onnx"
    hf_decoders.export_decoder("llama", path, with_cache=True)
    tool = os.path.join(os.path.dirname(sys.executable), "gqa-torch-mlir")
    run = subprocess.run([tool, "generate", "--model", str(path), "--steps", "3", "--prompt", "5", "17", "42"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "(2 layers, 2 kv heads, head size 16" in run.stdout
    assert "RESULT: identical greedy tokens" in run.stdout
    refused = subprocess.run([tool, "generate", "--model", str(path), "--prompt", "500"], capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "token ids [500] are outside the vocabulary [0, 128)" in refused.stderr
    assert "Traceback" not in run.stdout + run.stderr + refused.stdout + refused.stderr
