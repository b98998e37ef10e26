"""``InferenceSession(..., specialize=...)`` (specialize.py): the model compiled again with symbolic dims
fixed, in the same IREE module, and each call run on the function its feeds fit.

A generation on the embedded decoder matches onnxruntime step after step,
its prompt on the general function and its decode steps on the copy (through
``run`` and through IO binding); the copy's weights are the general
function's own constants; a choice is made on every fixed dim of every
input; bad specializations are refused by name before anything compiles.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.specialize import EntryPoints, function_name
from gqa_torch_mlir.testing.decoder import EMBEDDED_DECODER, Decoder

DECODE = {"batch_size": 1, "sequence_length": 1}
PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]  # longer than the window (8): the decode steps slide
STEPS = 5


@pytest.fixture(scope="module")
def decoder():
    return Decoder(EMBEDDED_DECODER)


@pytest.fixture(scope="module")
def session(decoder):
    return InferenceSession(str(decoder.path), backend="iree-cpu", threads=1, share_buffers=True, specialize=DECODE)


@pytest.fixture(scope="module")
def reference(decoder):
    sess = ort.InferenceSession(str(decoder.path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return decoder.generate(lambda f: dict(zip(names, sess.run(None, f))), PROMPT, STEPS)


def picks_of(sess, monkeypatch):
    """The functions ``sess`` runs from now on, in order."""
    picked, pick = [], sess._entries.pick
    monkeypatch.setattr(sess._entries, "pick", lambda args: picked.append(pick(args)) or picked[-1])
    return picked


def check_logits(logits, reference):
    ref_tokens, ref_logits, _ = reference
    assert len(logits) == len(ref_logits) == STEPS + 1
    for step, (ours, ref) in enumerate(zip(logits, ref_logits)):
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4, err_msg=f"step {step}")
        assert int(np.argmax(ours[0, -1])) == ref_tokens[step], f"step {step}: greedy token differs"


def test_decode_steps_run_the_specialized_function(session, decoder, reference, monkeypatch):
    """Through ``run``, then IO binding (a binding per step: the caches change shape as the
    prompt's become the step's); one test, so that one compile serves both."""
    assert session._compiled.functions() == ["main_graph", function_name("main_graph", 0)]
    picked = picks_of(session, monkeypatch)
    names = [o.name for o in session.get_outputs()]

    def bound(feeds):
        binding = session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        for name in names:
            binding.bind_output(name)
        session.run_with_iobinding(binding)
        return dict(zip(names, binding.copy_outputs_to_cpu()))

    for run in (lambda f: dict(zip(names, session.run(None, f))), bound):
        _, logits, _ = decoder.generate(run, PROMPT, STEPS, tokens=reference[0])
        check_logits(logits, reference)
        assert picked == ["main_graph"] + [function_name("main_graph", 0)] * STEPS
        picked.clear()


def test_the_specialized_function_uses_the_general_functions_constants(decoder):
    """One weight, one attribute: the importer's second copy of each initializer is dropped."""
    from iree.compiler import ir

    from gqa_torch_mlir.backends.iree import IreeCpuBackend

    lowered = IreeCpuBackend(threads=1).lower(str(decoder.path), [DECODE])
    assert lowered.specialized == [(function_name("main_graph", 0), DECODE)]
    values = {}
    for func in lowered.module.body.operations:
        found = values.setdefault(ir.StringAttr(func.attributes["sym_name"]).value, [])

        def visit(op, found=found):
            if "torch.onnx.value" in op.attributes and "dense_resource" in str(op.attributes["torch.onnx.value"]):
                found.append(str(op.attributes["torch.onnx.value"]))
            return ir.WalkResult.ADVANCE

        func.operation.walk(visit)
    general, fixed = values["main_graph"], values[function_name("main_graph", 0)]
    initializers = onnx.load(str(decoder.path), load_external_data=False).graph.initializer
    assert len(general) >= len(initializers) > 0
    assert sorted(fixed) == sorted(general)


def test_a_call_runs_the_first_specialization_whose_every_fixed_dim_it_has():
    shapes = [["batch", "seq"], ["batch", "total"], [None, 4], None]
    entries = EntryPoints("g", [("f0", {"batch": 1, "seq": 1}), ("f1", {"batch": 1})], shapes)
    arrays = lambda *s: [np.zeros(x) for x in s]  # noqa: E731
    assert entries.pick(arrays((1, 1), (1, 9), (2, 4), (3,))) == "f0"
    assert entries.pick(arrays((1, 5), (1, 9), (2, 4), (3,))) == "f1"
    assert entries.pick(arrays((1, 1), (2, 9), (2, 4), (3,))) == "g"  # batch 1 in one input only
    assert entries.pick(arrays((2, 1), (2, 9), (2, 4), (3,))) == "g"


@pytest.mark.parametrize("specialize, message", [
    ({"batch": 1}, r"'batch' is not a symbolic dim of the model's inputs \(they have: .*batch_size"),
    ({"batch_size": 0}, r"dim 'batch_size' must be fixed to a positive integer, got 0"),
    ({"batch_size": True}, r"dim 'batch_size' must be fixed to a positive integer, got True"),
    ({"batch_size": "1"}, r"dim 'batch_size' must be fixed to a positive integer, got '1'"),
    ({}, r"each entry must be a non-empty dict"),
    ([DECODE, dict(DECODE)], r"is given twice"),
    ("batch_size=1", r"specialize must be a dict of dim name -> size, or a list of them"),
])
def test_bad_specializations_are_refused_by_name(decoder, specialize, message):
    with pytest.raises(GqaTorchMlirError, match=message):
        InferenceSession(str(decoder.path), backend="iree-cpu", threads=1, specialize=specialize)


def test_the_refbackend_refuses_specialize(decoder):
    with pytest.raises(GqaTorchMlirError, match="specialize needs backend 'iree-cpu' or 'iree-cuda'"):
        InferenceSession(str(decoder.path), specialize=DECODE)


def test_a_specialized_vmfb_from_the_cli_runs_with_the_runtime_alone(decoder, reference, tmp_path):
    """``compile --specialize``, then ``from_vmfb(..., specialize=)``: the decode steps on the copy;
    without the specialization (or with another count) from_vmfb refuses the module by name."""
    import subprocess
    import sys

    vmfb = tmp_path / "m.vmfb"
    proc = subprocess.run([sys.executable, "-m", "gqa_torch_mlir.tools.cli", "compile", str(decoder.path), "--backend", "iree-cpu",
                           "--specialize", "batch_size=1,sequence_length=1", "-o", str(vmfb)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "entry points @main_graph, @main_graph_fixed_0 (batch_size=1, sequence_length=1)" in proc.stderr
    sess = InferenceSession.from_vmfb(str(decoder.path), vmfb.read_bytes(), backend="iree-cpu", threads=1, specialize=DECODE)
    picked = []
    pick = sess._entries.pick
    sess._entries.pick = lambda args: picked.append(pick(args)) or picked[-1]
    names = [o.name for o in sess.get_outputs()]
    _, logits, _ = decoder.generate(lambda f: dict(zip(names, sess.run(None, f))), PROMPT, STEPS, tokens=reference[0])
    check_logits(logits, reference)
    assert picked == ["main_graph"] + [function_name("main_graph", 0)] * STEPS
    for wrong in (None, [DECODE, {"batch_size": 1}]):
        with pytest.raises(GqaTorchMlirError, match=r"the vmfb has 2 entry points \(.*\); expected .*pass specialize="):
            InferenceSession.from_vmfb(str(decoder.path), vmfb.read_bytes(), backend="iree-cpu", threads=1, specialize=wrong)


@pytest.mark.parametrize("argv, message", [
    (["--specialize", "batch_size", "--backend", "iree-cpu", "-o", "TMP"], r"--specialize takes NAME=SIZE\[,NAME=SIZE...\]"),
    (["--specialize", "batch=1", "--backend", "iree-cpu", "-o", "TMP"], r"'batch' is not a symbolic dim"),
    (["--specialize", "batch_size=1"], r"--specialize is for an IREE module: add --backend"),
])
def test_the_clis_bad_specializations_are_refused_by_name(decoder, argv, message, tmp_path, capsys):
    from gqa_torch_mlir.tools.cli import main

    assert main(["compile", str(decoder.path), *[str(tmp_path / "x.vmfb") if a == "TMP" else a for a in argv]]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(message, err), err
