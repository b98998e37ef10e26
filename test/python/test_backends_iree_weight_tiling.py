"""iree-cpu's data tiling of the weight matmuls (backends/iree/weight_tiling.py, patterns/ai_onnx/matmul.py).

The compile stops after IREE's global optimization, the matmuls whose right
operand is a constant are marked with IREE's data-tiling hint, and the rest of
the pipeline runs with data tiling on: only those are tiled, not the
attention's own contractions (which IREE fails to compile tiled).  A function
compiled with fixed dims (specialize.py) multiplies by the same weight
constants as the general one, so the module holds, and packs, each weight once.
The numbers of tiled modules are every other iree-cpu test's: the default.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gqa_torch_mlir import InferenceSession
from gqa_torch_mlir.backends.iree import IreeBackend, IreeCpuBackend, compiler, weight_tiling
from gqa_torch_mlir.errors import GqaTorchMlirError
from gqa_torch_mlir.specialize import function_name
from gqa_torch_mlir.testing.decoder import EMBEDDED_DECODER, Decoder
from gqa_torch_mlir.testing.matmul import K, weight_matmul_model

DECODE = {"batch_size": 1, "sequence_length": 1}
MATMULS = ("linalg.matmul", "linalg.batch_matmul")


@pytest.fixture(scope="module")
def decoder():
    return Decoder(EMBEDDED_DECODER)


@pytest.fixture(scope="module")
def split_module(decoder):
    """The embedded decoder with a decode copy, after IREE's pipeline to the end of global optimization."""
    lowered = IreeCpuBackend(threads=1).lower(str(decoder.path), [DECODE])
    lowered.session.context.enable_multithreading(False)
    module = compiler._execute(lowered.session, lowered.module, compiler._Captured(), [], phase=weight_tiling.stop_after_split)
    assert module is not None
    return lowered, module


def matmuls_by_function(module):
    """{function: [(matmul op, its right operand's defining op name or None)]}, for functions with matmuls."""
    found = {}
    for func in module.regions[0].blocks[0].operations:
        if func.operation.name != "util.func" or not func.regions[0].blocks:
            continue
        ops = found.setdefault(str(func.attributes["sym_name"]).strip('"'), [])

        def visit(op, ops=ops):
            if op.operation.name in MATMULS:
                owner = op.operation.operands[1].owner
                ops.append((op.operation, getattr(owner, "name", None)))
            return compiler.ir.WalkResult.ADVANCE

        func.operation.walk(visit)
    return {name: ops for name, ops in found.items() if ops}


def weight_matmul_count(decoder) -> int:
    graph = onnx.load(str(decoder.path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    return sum(1 for n in graph.node if n.op_type == "MatMul" and n.input[1] in initializers)


def test_only_the_weight_matmuls_are_marked(decoder, split_module):
    _, module = split_module
    with module.context:
        marked = weight_tiling.annotate(module)
    assert marked == 2 * weight_matmul_count(decoder) > 0  # the general function's and the copy's
    untiled = 0
    for name, ops in matmuls_by_function(module).items():
        hinted = [rhs for op, rhs in ops if weight_tiling.HINT in op.attributes]
        plain = [rhs for op, rhs in ops if weight_tiling.HINT not in op.attributes]
        assert len(hinted) == weight_matmul_count(decoder) and set(hinted) == {"arith.constant"}, name
        assert "arith.constant" not in plain, name
        untiled += len(plain)
    assert untiled > 0  # the general function's prompt attention (the copy's decode runs our kernel)


def test_both_functions_multiply_by_one_copy_of_each_weight(split_module):
    """torch-mlir's aten.matmul broadcast a weight to [1, K, N] where the batch is fixed, and IREE
    folded that into a second constant: each projection's weight was in the module twice."""
    _, module = split_module
    weights = {}
    for name, ops in matmuls_by_function(module).items():
        weights[name] = sorted(str(op.operands[1].type) for op, rhs in ops if rhs == "arith.constant")
    general = next(w for n, w in weights.items() if n.startswith("main_graph") and "fixed" not in n)
    fixed = next(w for n, w in weights.items() if n.startswith(function_name("main_graph", 0)))
    assert general and all(t.count("x") == 2 for t in general), general  # tensor<KxNxf32>
    assert fixed == general


def test_weight_tiling_off_compiles_without_encodings():
    """``weight_tiling=False``: one phase, no encoding executables; on: IREE's encode dispatches.
    Both sessions match onnxruntime."""
    model = weight_matmul_model(["batch", "seq"])
    x = np.random.default_rng(0).standard_normal((2, 3, K)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    for tiled in (False, True):
        backend = IreeCpuBackend(threads=1, weight_tiling=tiled)
        assert (b"_encode_" in backend.compile_lowered(backend.lower(model))) == tiled
        (got,) = InferenceSession(model, backend="iree-cpu", weight_tiling=tiled).run(None, {"X": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend,value", [("refbackend", False), ("iree-cuda", True), ("iree-cpu", 1)])
def test_the_sessions_weight_tiling_is_refused_by_name(backend, value):
    with pytest.raises(GqaTorchMlirError, match=f"weight_tiling is an iree-cpu setting, True or False; got {value!r} for backend '{backend}'"):
        InferenceSession(weight_matmul_model(["batch", "seq"]), backend=backend, weight_tiling=value)


def test_a_function_without_weights_is_left_untiled():
    """IREE's pass tiles every matmul of a function that has no hint: the function itself is marked."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["X", "W"], ["Y"])], "matmul",
        [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["b", 64, K]),
         onnx.helper.make_tensor_value_info("W", onnx.TensorProto.FLOAT, ["b", K, 64])],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    backend = IreeCpuBackend(threads=1)
    assert b"_encode_" not in backend.compile_lowered(backend.lower(model))


def test_weight_tiling_is_refused_on_cuda():
    for value in (True, False):  # off is refused too: iree-cuda has no tiling to turn off
        with pytest.raises(GqaTorchMlirError, match=f"weight_tiling is an iree-cpu setting; iree-cuda takes none \\(got {value}\\)"):
            IreeBackend(target="iree-cuda", weight_tiling=value)
    assert IreeBackend(target="iree-cuda").weight_tiling is False


@pytest.mark.parametrize("argv,message", [
    (["--weight-tiling", "on", "-o", "TMP"], "--weight-tiling is for an iree-cpu module: add --backend iree-cpu"),
    (["--backend", "iree-cuda", "--weight-tiling", "on", "-o", "TMP"], "weight_tiling is an iree-cpu setting; iree-cuda takes none"),
    (["--backend", "iree-cuda", "--weight-tiling", "off", "-o", "TMP"], "weight_tiling is an iree-cpu setting; iree-cuda takes none"),
])
def test_the_clis_weight_tiling_is_refused_by_name(argv, message, tmp_path, capsys):
    from gqa_torch_mlir.tools.cli import main

    model = tmp_path / "m.onnx"
    onnx.save(weight_matmul_model(["batch", "seq"]), str(model))
    assert main(["compile", str(model), *[str(tmp_path / "x.vmfb") if a == "TMP" else a for a in argv]]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.vmfb").exists()


def test_the_cli_compiles_without_weight_tiling(tmp_path):
    from gqa_torch_mlir.tools.cli import main

    model = tmp_path / "m.onnx"
    onnx.save(weight_matmul_model(["batch", "seq"]), str(model))
    for choice, encoded in (("off", False), ("on", True)):
        out = tmp_path / f"{choice}.vmfb"
        assert main(["compile", str(model), "--backend", "iree-cpu", "--weight-tiling", choice, "-o", str(out)]) == 0
        assert (b"_encode_" in out.read_bytes()) == encoded


def test_an_iree_without_the_phase_api_is_named(monkeypatch):
    """The phases are set through IREE's C API, which iree.compiler.api does not wrap: a
    compiler library without the entry point stops the compile by name, not with an AttributeError."""
    from iree.compiler.api import ctypes_dl

    real = ctypes_dl._dylib

    class WithoutPhases:
        def __getattr__(self, name):
            if "Phase" in name:
                raise AttributeError(name)
            return getattr(real, name)

    backend = IreeCpuBackend(threads=1)
    lowered = backend.lower(weight_matmul_model(["batch", "seq"]))
    monkeypatch.setattr(ctypes_dl, "_dylib", WithoutPhases())
    with pytest.raises(GqaTorchMlirError, match="this IREE compiler has no ireeCompilerInvocationSetCompileToPhase .*weight_tiling=False"):
        backend.compile_lowered(lowered)


def test_a_second_phase_failure_reproduces_from_the_marked_split(monkeypatch):
    """The repro of a failure after the split is the first phase's output, weights marked, compiled
    from the split with data tiling on; here the second phase is made to fail (an unknown phase)."""
    import shlex

    def bad_resume(invocation):
        weight_tiling._phase_setter("ireeCompilerInvocationSetCompileFromPhase")(invocation._inv_p, b"no-such-phase")

    monkeypatch.setattr(weight_tiling, "resume_after_split", bad_resume)
    backend = IreeCpuBackend(threads=1)
    with pytest.raises(compiler.CompileStageError) as info:
        backend.compile_lowered(backend.lower(weight_matmul_model(["batch", "seq"])))
    args = shlex.split(info.value.repro)
    assert args[-5:-3] == [f"--compile-from={weight_tiling.SPLIT_PHASE}", *weight_tiling.FLAGS], args
    with open(args[-3]) as saved:
        text = saved.read()
    assert text.count(weight_tiling.HINT) >= 2  # the weight matmul and its function
    import subprocess

    done = subprocess.run(args, capture_output=True, text=True, check=False)  # the real second phase, from the file
    assert done.returncode == 0, done.stderr[-2000:]
