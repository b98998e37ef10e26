"""GroupQueryAttention with a subset of its outputs declared, in every cache mode, on both backends.

present_key/present_value and output_qk are optional outputs.  What a node
declares must never change what the rest computes: ``output`` (and
``output_qk``) of a node that omits some outputs equal onnxruntime's outputs
of the same node with all of them.

That reference is onnxruntime on the full node, not on the subset node, because
onnxruntime 1.32's CPU kernel (``GQAAttentionBase::ApplyAttention``) reads the
keys and values of a step with a past from its present buffers: without them it
reads ``seqlens_k + 1`` rows from the step's new K/V instead -- the next heads'
rows and then past the buffer's end.  ``test_onnxruntime_without_presents_reads_other_heads``
pins that down, so that the day onnxruntime computes the op there, this file
says so.  Where onnxruntime reads in bounds (no past), the subset node itself
is compared too.  Where onnxruntime refuses a subset (one present output
without the other; a window or quantized cache without both), the lowering
refuses it by name.  Between them the tests cover all 8 subsets of the three
optional outputs: no presents (with and without output_qk) computed, one present
refused, both presents (the rest of the suite).
"""

from __future__ import annotations

import numpy as np
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.testing.gqa_onnx import GQAConfig, compare, make_inputs, make_model, run_onnxruntime

C = GQAConfig
OUTPUTS = ("output", "present_key", "present_value", "output_qk")

#: Cache modes whose node may omit both present outputs (onnxruntime runs them).
COMPUTED_MODES = {
    "growing_decode_ragged": C(batch=2, seq=1, past=4, past_lens=(4, 2)),
    "growing_chunk": C(batch=1, seq=3, past=4, rotary=True),
    "first_prompt": C(batch=2, seq=3, past=0, rotary=True),
    "fixed_capacity_decode": C(batch=2, seq=1, past=8, past_lens=(5, 3), fixed_capacity=True),
    "fixed_capacity_dynamic": C(batch=2, seq=1, past=8, past_lens=(6, 1), fixed_capacity=True, dynamic=True),
}

#: Cache modes onnxruntime runs only with both present outputs.
PRESENTS_REQUIRED = {
    "window_cache": (C(batch=1, seq=1, past=4, window=3, window_cache=True, past_lens=(6,)), "sliding_window_cache"),
    "int8_per_tensor": (C(batch=1, seq=1, past=4, kv_bits=8), "kv_cache_bit_width"),
    "int4_per_channel": (C(batch=1, seq=1, past=4, kv_bits=4, quant_type="PER_CHANNEL"), "kv_cache_bit_width"),
}


def subset_model(cfg: GQAConfig, kept: tuple, qk_output: int = 0):
    """The one-node model whose node names only ``kept`` of its four outputs (the others empty or dropped)."""
    names = [n if n in kept else "" for n in OUTPUTS]
    while names[-1] == "":
        names.pop()
    model = make_model(cfg, {"qk_output": qk_output} if "output_qk" in kept else {})
    node = model.graph.node[0]
    del node.output[:]
    node.output.extend(names)
    graph_outputs = [o for o in model.graph.output if o.name in kept]
    del model.graph.output[:]
    model.graph.output.extend(graph_outputs)
    return model


def without_presents(with_qk: bool) -> tuple:
    return ("output", "output_qk") if with_qk else ("output",)


@pytest.mark.parametrize("with_qk", [False, True], ids=["output", "output+qk"])
@pytest.mark.parametrize("mode", sorted(COMPUTED_MODES))
def test_omitted_presents_compute_the_same_output(mode: str, with_qk: bool, backend: str, run_ours):
    cfg = COMPUTED_MODES[mode]
    kept = without_presents(with_qk)
    feeds = make_inputs(cfg, seed=21)
    full = run_onnxruntime(make_model(cfg, {"qk_output": 1}), feeds)
    want = {name: full[name] for name in kept}
    got = run_ours(subset_model(cfg, kept, qk_output=1), feeds, backend)
    assert sorted(got) == sorted(kept)
    assert compare(cfg, got, want, feeds) == []
    if cfg.past == 0:  # onnxruntime reads in bounds here: the subset node itself agrees
        assert compare(cfg, got, run_onnxruntime(subset_model(cfg, kept, qk_output=1), feeds), feeds) == []


@pytest.mark.parametrize("mode", sorted(PRESENTS_REQUIRED))
def test_cache_modes_that_need_both_presents_are_refused(mode: str, backend: str):
    cfg, attribute = PRESENTS_REQUIRED[mode]
    model = subset_model(cfg, ("output",))
    feeds = make_inputs(cfg, seed=22)
    with pytest.raises(Exception, match="must be provided|requires the present_key and present_value"):
        run_onnxruntime(model, feeds)
    with pytest.raises(GqaTorchMlirError, match=f"attribute '{attribute}': .* needs outputs 1 'present_key' and 2 'present_value'"):
        InferenceSession(model, backend=backend)


#: The four subsets naming one present output without the other (with and without output_qk).
ONE_PRESENT = [("output", present) + qk for present in ("present_key", "present_value") for qk in ((), ("output_qk",))]


@pytest.mark.parametrize("kept", ONE_PRESENT, ids=lambda kept: "+".join(kept[1:]))
@pytest.mark.parametrize("mode", ["growing_decode_ragged", "fixed_capacity_decode"])
def test_one_present_without_the_other_is_refused(mode: str, kept: tuple, backend: str):
    cfg = COMPUTED_MODES[mode]
    model = subset_model(cfg, kept, qk_output=1)
    with pytest.raises(Exception, match="present_key and present_value must both be provided"):
        run_onnxruntime(model, make_inputs(cfg, seed=23))
    with pytest.raises(GqaTorchMlirError, match="onnxruntime requires both present outputs or neither"):
        InferenceSession(model, backend=backend)


def test_onnxruntime_without_presents_reads_other_heads():
    """onnxruntime 1.32 without present outputs, after a past: head h attends the new K/V rows of
    kv heads h .. h + T - 1 (T = seqlens_k + 1), not its cache.  With 8 kv heads and T = 3 those
    reads stay in bounds, so the result is deterministic and shows the defect."""
    cfg = C(batch=1, seq=1, past=2, num_heads=8, kv_num_heads=8, head_size=16)
    feeds = make_inputs(cfg, seed=24)
    got_BSD = run_onnxruntime(subset_model(cfg, ("output",)), feeds)["output"]
    T, Dh = cfg.past + 1, cfg.head_size
    q_HDh = feeds["query"].reshape(cfg.num_heads, Dh)
    k_HDh, v_HDh = feeds["key"].reshape(-1, Dh), feeds["value"].reshape(-1, Dh)
    for h in range(cfg.kv_num_heads - T + 1):
        scores_T = k_HDh[h : h + T] @ q_HDh[h] / np.sqrt(Dh)
        probs_T = np.exp(scores_T - scores_T.max())
        probs_T /= probs_T.sum()
        np.testing.assert_allclose(got_BSD.reshape(-1, Dh)[h], probs_T @ v_HDh[h : h + T], rtol=1e-5, atol=1e-5)
    full = run_onnxruntime(make_model(cfg), feeds)["output"]
    assert not np.allclose(got_BSD, full, atol=1e-2), "onnxruntime now computes the op without present outputs: compare against it"
