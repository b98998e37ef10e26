"""MatMulNBits' CPU kernels (kernels/nbits_matmul.py, ``matmul_nbits=kernel``, and its int8 form for
accuracy_level 4, kernels/nbits_matmul_vnni.py, ``matmul_nbits=vnni``: iree-cpu's defaults) against
onnxruntime, and where the lowering calls them.

The kernel takes every row count, in workgroups of ROW_BLOCK rows, a tile of TILES at a
time: 8 rows by 2 columns, then 4 by 2, then one row a column.  Each model is
compiled once, in a child process (a crash fails the test), for all its feeds.

Letters as in the pattern: K, N, L (block_size), Kb = K / L; 4-bit values, two a byte.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from gqa_torch_mlir import GqaTorchMlirError, InferenceSession
from gqa_torch_mlir.kernels import nbits_matmul_vnni
from gqa_torch_mlir.kernels.nbits_matmul import ROW_BLOCK, TILES, columns_per_workgroup, render, symbol
from gqa_torch_mlir.options import LoweringOptions, host_has_avx512_vnni
from gqa_torch_mlir.passes.convert_onnx_gqa_to_torch import NBITS_KERNEL_OUTSIDE_IREE, apply_lowerings
from gqa_torch_mlir.pipeline import import_onnx
from gqa_torch_mlir.testing.gqa_onnx import run_onnxruntime
from gqa_torch_mlir.testing.isolated import run_isolated_each

pytest.importorskip("iree.compiler")
from gqa_torch_mlir.backends.iree import IreeCpuBackend  # noqa: E402

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
K, N = 128, 48  # N = 48: workgroups of 16 columns, not the usual 32


def quantized_weight(rng, L, n=N, dtype=np.float32, zero_points="packed"):
    """Initializers B [n,Kb,L/2], scales [n*Kb] and zero points (packed bytes [n*Z], values [n,Kb], or none)."""
    Kb = K // L
    inits = [numpy_helper.from_array(rng.integers(0, 256, (n, Kb, L // 2), dtype=np.uint8), "B"),
             numpy_helper.from_array((rng.random(n * Kb) * 0.1 + 0.01).astype(dtype), "scales")]
    if zero_points == "packed":
        inits.append(numpy_helper.from_array(rng.integers(0, 256, n * -(-Kb // 2), dtype=np.uint8), "zero_points"))
    elif zero_points == "values":
        inits.append(numpy_helper.from_array((rng.random((n, Kb)) * 15).astype(dtype), "zero_points"))
    return inits


def model(nodes, inputs, outputs, inits):
    info = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "nbits", [info(*i) for i in inputs], [info(*o) for o in outputs], inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def node(a, y, L, n=N, zero_points=True, bias=False, **attrs):
    inputs = [a, "B", "scales", "zero_points" if zero_points else ""] + (["", "bias"] if bias else [])
    return helper.make_node("MatMulNBits", inputs, [y], domain="com.microsoft", K=K, N=n, bits=4, block_size=L, **attrs)


def run_rows_model():
    """A of a run-time row count ([m,K]) and of run-time leading dims ([b,s,K]), packed zero points, a bias."""
    rng = np.random.default_rng(0)
    inits = quantized_weight(rng, 32) + [numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "bias")]
    nodes = [node("A", "Y", 32, bias=True), node("X", "Z", 32, bias=True)]
    return model(nodes, [("A", F32, ["m", K]), ("X", F32, ["b", "s", K])], [("Y", F32, ["m", N]), ("Z", F32, ["b", "s", N])], inits)


def assert_matches_onnxruntime(onnx_model, feeds_list, tmp_path, atol):
    for feeds, got in zip(feeds_list, run_isolated_each(onnx_model, feeds_list, tmp_path, backend="iree-cpu")):
        shapes = {k: v.shape for k, v in feeds.items()}
        assert got.results is not None, f"{shapes}: {got.describe()}"
        for name, want in run_onnxruntime(onnx_model, feeds).items():
            np.testing.assert_allclose(got.results[name], want, rtol=1e-5, atol=atol, err_msg=f"{shapes}: {name}")


def row_counts():
    """Every tile alone and after the larger ones, whole row blocks, blocks and a remainder, none."""
    (big, _), (mid, _), _ = TILES
    return (1, mid - 1, mid, mid + 1, big, big + mid + 1, ROW_BLOCK, 2 * ROW_BLOCK + big + mid + 3, 0)


def test_run_time_rows_in_tiles_and_blocks(tmp_path):
    """Each row count of row_counts() as A's rows and as rank-3 A's leading dims."""
    rng = np.random.default_rng(1)
    feeds = []
    for rows in row_counts():
        b, s = (2, rows // 2) if rows % 2 == 0 and rows else (1, rows) if rows else (0, 3)
        feeds.append({"A": rng.standard_normal((rows, K)).astype(np.float32), "X": rng.standard_normal((b, s, K)).astype(np.float32)})
    assert_matches_onnxruntime(run_rows_model(), feeds, tmp_path, atol=2e-5)


def test_an_odd_column_count_takes_one_column_a_pass(tmp_path):
    """N = 15: workgroups of one column, so every tile takes one column at a time."""
    rng = np.random.default_rng(4)
    n = 15
    assert columns_per_workgroup(n) == 1
    inits = quantized_weight(rng, 32, n=n)
    graph = model([node("A", "Y", 32, n=n)], [("A", F32, ["m", K])], [("Y", F32, ["m", n])], inits)
    feeds = [{"A": rng.standard_normal((rows, K)).astype(np.float32)} for rows in row_counts()[:6]]
    assert_matches_onnxruntime(graph, feeds, tmp_path, atol=2e-5)


def test_block_sizes_zero_point_forms_and_types(tmp_path):
    """Blocks of two chunks (L = 64) with zero points as values; no zero points (8); f16 A and scales;
    a rank-1 A; accuracy_level 4 (A quantized per block to int8 first, as onnxruntime's int8 path)."""
    rng = np.random.default_rng(2)
    graphs = [
        (node("A", "Y", 64), ("A", F32, [3, K]), ("Y", F32, [3, N]), quantized_weight(rng, 64, zero_points="values"), 2e-5),
        (node("A", "Y", 32, zero_points=False), ("A", F32, [2, K]), ("Y", F32, [2, N]), quantized_weight(rng, 32, zero_points=None), 2e-5),
        (node("A", "Y", 32), ("A", F16, [2, K]), ("Y", F16, [2, N]), quantized_weight(rng, 32, dtype=np.float16), 2e-2),
        (node("A", "Y", 32), ("A", F32, [K]), ("Y", F32, [N]), quantized_weight(rng, 32), 2e-5),
        (node("A", "Y", 32, accuracy_level=4), ("A", F32, [4, K]), ("Y", F32, [4, N]), quantized_weight(rng, 32), 2e-5),
    ]
    for i, (n, a, y, inits, atol) in enumerate(graphs):
        dtype = np.float16 if a[1] == F16 else np.float32
        feeds = {"A": rng.standard_normal(a[2]).astype(dtype)}
        assert_matches_onnxruntime(model([n], [a], [y], inits), [feeds], tmp_path / str(i), atol)


def lowered(onnx_model, options=None) -> str:
    return str(IreeCpuBackend(threads=1, options=options or LoweringOptions.for_backend("iree-cpu")).lower(onnx_model).module)


def test_where_the_lowering_calls_the_kernel():
    """Run-time and static rows take the kernel, in the form of their zero points; 8-bit weights,
    blocks of 16 values and matmul_nbits=dequantize do not."""
    kernel = f"flow.dispatch @{symbol(K, N, 32, 'u8')}_executable"  # its function is inlined by then
    text = lowered(run_rows_model())
    assert text.count(kernel) == 2 and "torch.aten.matmul" not in text.split("stream.executable")[0]
    assert columns_per_workgroup(N) == 16 and "%cols = arith.constant 16 : index" in render(K, N, 32, "u8", 21)[1]
    rng = np.random.default_rng(3)
    static = model([node("A", "Y", 32)], [("A", F32, [40, K])], [("Y", F32, [40, N])], quantized_weight(rng, 32))
    assert kernel in lowered(static)
    for zero_points, form in (("values", "f32"), (None, "none")):  # packed ones are read as a byte a block (u8, above)
        weight = quantized_weight(rng, 32, zero_points=zero_points)
        graph = model([node("A", "Y", 32, zero_points=zero_points is not None)], [("A", F32, [2, K])], [("Y", F32, [2, N])], weight)
        assert f"flow.dispatch @{symbol(K, N, 32, form)}_executable" in lowered(graph)
    dequantize = dataclasses.replace(LoweringOptions.for_backend("iree-cpu"), matmul_nbits="dequantize")
    assert "gqa_nbits_matmul" not in lowered(static, dequantize)
    eight = helper.make_node("MatMulNBits", ["A", "B8", "scales"], ["Y"], domain="com.microsoft", K=K, N=N, bits=8, block_size=32)
    b8 = numpy_helper.from_array(rng.integers(0, 256, (N, K // 32, 32), dtype=np.uint8), "B8")
    assert "gqa_nbits_matmul" not in lowered(model([eight], [("A", F32, [1, K])], [("Y", F32, [1, N])], [b8] + quantized_weight(rng, 32)[1:2]))
    sixteen = model([node("A", "Y", 16)], [("A", F32, [1, K])], [("Y", F32, [1, N])], quantized_weight(rng, 16))
    assert "gqa_nbits_matmul" not in lowered(sixteen)


@pytest.mark.parametrize("form", ["kernel", "vnni"])
def test_kernel_option_is_refused_where_it_cannot_run(form):
    """Outside IREE's compiler (torch-mlir's bindings: the refbackend, the opt driver) and on the gpu device."""
    module = import_onnx(run_rows_model())
    refused = apply_lowerings(module.operation, options=LoweringOptions(matmul_nbits=form))
    assert [r.message for r in refused] == [NBITS_KERNEL_OUTSIDE_IREE.format(form=form)]
    with pytest.raises(GqaTorchMlirError, match=f"matmul_nbits={form} is a CPU kernel; it needs device=cpu"):
        LoweringOptions(device="gpu", matmul_nbits=form)
    with pytest.raises(GqaTorchMlirError, match="option matmul_nbits='fast' is not one of dequantize, kernel, vnni"):
        LoweringOptions.parse("matmul_nbits=fast")


def int8_path_model(rng, L, zero_points="packed", k=256):
    """accuracy_level 4 (onnxruntime's int8 path), A [m,K] and [b,s,K] of run-time rows, K = ``k``."""
    Kb = k // L
    inits = [numpy_helper.from_array(rng.integers(0, 256, (N, Kb, L // 2), dtype=np.uint8), "B"),
             numpy_helper.from_array((rng.random(N * Kb) * 0.1 + 0.01).astype(np.float32), "scales")]
    if zero_points == "packed":
        inits.append(numpy_helper.from_array(rng.integers(0, 256, N * -(-Kb // 2), dtype=np.uint8), "zero_points"))
    nodes = [helper.make_node("MatMulNBits", [a, "B", "scales"] + (["zero_points"] if zero_points else []), [y], domain="com.microsoft",
                              K=k, N=N, bits=4, block_size=L, accuracy_level=4) for a, y in (("A", "Y"), ("X", "Z"))]
    return model(nodes, [("A", F32, ["m", k]), ("X", F32, ["b", "s", k])], [("Y", F32, ["m", N]), ("Z", F32, ["b", "s", N])], inits)


def run_form(onnx_model, feeds_list, form):
    """Ours on iree-cpu with ``matmul_nbits=form`` (in process: the other options iree-cpu's)."""
    options = dataclasses.replace(LoweringOptions.for_backend("iree-cpu"), matmul_nbits=form)
    backend = IreeCpuBackend(threads=1, options=options)
    session = InferenceSession.from_vmfb(onnx_model, backend.compile_lowered(backend.lower(onnx_model)), backend="iree-cpu", threads=1)
    return [session.run(None, feeds) for feeds in feeds_list]


NO_VNNI = pytest.mark.skipif(not host_has_avx512_vnni(), reason="this host's CPU has no AVX-512 VNNI to run the int8 kernel on "
                                                                 "(its IR is checked in test_where_the_lowering_calls_the_int8_kernel)")


@pytest.mark.parametrize("form", ["kernel", pytest.param("vnni", marks=NO_VNNI)])
@pytest.mark.parametrize("L, zero_points", [(32, "packed"), (64, None), (128, "packed"), (256, None)])
def test_accuracy_level_4_matches_onnxruntime(form, L, zero_points):
    """onnxruntime's int8 path through both kernels: every tile alone and after the larger ones, rank-3
    A; blocks of 32 (4 a 128-value group), 64 (2), 128 and 256 (a group in one block); packed zero
    points and none."""
    rng = np.random.default_rng(L)
    graph = int8_path_model(rng, L, zero_points)
    feeds_list = []
    for rows in row_counts():
        b, s = (1, rows) if rows else (0, 3)
        feeds_list.append({"A": rng.standard_normal((rows, 256)).astype(np.float32), "X": rng.standard_normal((b, s, 256)).astype(np.float32)})
    for feeds, got in zip(feeds_list, run_form(graph, feeds_list, form)):
        for name, want, value in zip(("Y", "Z"), run_onnxruntime(graph, feeds).values(), got):
            np.testing.assert_allclose(value, want, rtol=1e-5, atol=2e-5, err_msg=f"{form} L={L} rows={feeds['A'].shape[0]}: {name}")


def test_where_the_lowering_calls_the_int8_kernel():
    """matmul_nbits=vnni: accuracy_level 4 in whole 128-value groups takes the int8 kernel, in the form
    of its zero points; K = 96, another accuracy level, or zero points given as values (not
    onnxruntime's int8 path) take the f32 kernel."""
    vnni = dataclasses.replace(LoweringOptions.for_backend("iree-cpu"), matmul_nbits="vnni")
    rng = np.random.default_rng(5)
    text = lowered(int8_path_model(rng, 32), vnni)
    assert text.count(f"flow.dispatch @{nbits_matmul_vnni.symbol(256, N, 32, 'u8')}_executable") == 2
    assert "llvm.x86.avx512.vpdpbusd.512" in text and "gqa_nbits_matmul_k" not in text
    assert f"@{nbits_matmul_vnni.symbol(256, N, 64, 'none')}_executable" in lowered(int8_path_model(rng, 64, None), vnni)
    assert not nbits_matmul_vnni.supported(4, 96, 32)
    assert "gqa_nbits_matmul_vnni" not in lowered(int8_path_model(rng, 32, k=96), vnni)
    assert "gqa_nbits_matmul_k96" in lowered(int8_path_model(rng, 32, k=96), vnni)
    f32_kernel = f"flow.dispatch @{symbol(K, N, 32, 'u8')}_executable"
    assert f32_kernel in lowered(run_rows_model(), vnni)  # accuracy_level 0
    values = model([node("A", "Y", 32, accuracy_level=4)], [("A", F32, [2, K])], [("Y", F32, [2, N])],
                   quantized_weight(rng, 32, zero_points="values"))
    assert f"@{symbol(K, N, 32, 'f32')}_executable" in lowered(values, vnni)


def test_a_cpu_target_without_vnni_compiles_the_f32_kernel(monkeypatch):
    """An IreeCpuBackend whose extra_flags choose a CPU without AVX-512 VNNI (haswell) takes
    matmul_nbits=kernel for vnni (options.py); one with it (sapphirerapids) keeps vnni.  So does one
    for this host, by its /proc/cpuinfo: vnni asked for on a host without it went on to LLVM, which
    cannot select vpdpbusd there (the haswell probe's compile fails so)."""
    from gqa_torch_mlir.backends.iree import target_check

    vnni = dataclasses.replace(LoweringOptions.for_backend("iree-cpu"), matmul_nbits="vnni")
    assert IreeCpuBackend(extra_flags=["--iree-llvmcpu-target-cpu=haswell"], options=vnni).options.matmul_nbits == "kernel"
    assert IreeCpuBackend(extra_flags=["--iree-llvmcpu-target-cpu=sapphirerapids"], options=vnni).options.matmul_nbits == "vnni"
    for host_has_it, form in ((False, "kernel"), (True, "vnni")):
        monkeypatch.setattr(target_check, "host_has_avx512_vnni", lambda: host_has_it)
        assert IreeCpuBackend(options=vnni).options.matmul_nbits == form
