"""Tests of the reference backend (gqa_torch_mlir.backends.refbackend).

Each test writes a small torch-dialect function, lowers it with torch-mlir's
torch-backend-to-linalg-on-tensors-backend-pipeline, JIT-compiles it with
RefBackend and compares the results against numpy.  The run-time check tests
(at the end) also write linalg-on-tensors directly: a failed ``cf.assert``
raises RuntimeInvocationError and stops the call, the process goes on.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from torch_mlir import ir
from torch_mlir.dialects import torch as torch_d
from torch_mlir.passmanager import PassManager

from gqa_torch_mlir.backends.refbackend import LOWERING_PIPELINE, OPT_LEVEL_VARIABLE, RefBackend
from gqa_torch_mlir.errors import CompileStageError, GqaTorchMlirError, RuntimeInvocationError

RNG = np.random.default_rng(0)
TORCH_DTYPE = {"float16": "f16", "float32": "f32", "float64": "f64", "bool": "i1",
               "int8": "si8", "int16": "si16", "int32": "si32", "int64": "si64"}


def vt(dims: str, dtype: str) -> str:
    return f"!torch.vtensor<[{dims}],{dtype}>"


def to_linalg(torch_src: str) -> ir.Module:
    """Parse torch-dialect IR in a fresh context and lower it to linalg-on-tensors."""
    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    module = ir.Module.parse(torch_src, context=ctx)
    pipeline = "builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)"
    PassManager.parse(pipeline, context=ctx).run(module.operation)
    return module


def compile_torch(torch_src: str):
    return RefBackend().compile(to_linalg(torch_src))


def rand(shape, dtype) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


ADD_F32 = f"""
func.func @add(%a: {vt('?,3', 'f32')}, %b: {vt('', 'f32')}) -> {vt('?,3', 'f32')} {{
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %a, %b, %int1 : {vt('?,3', 'f32')}, {vt('', 'f32')}, !torch.int -> {vt('?,3', 'f32')}
  return %0 : {vt('?,3', 'f32')}
}}
"""

# three results, mixed dtypes and ranks: f32[?,3], i64[] (rank 0), i1[?,3]
THREE_RESULTS = f"""
func.func @three(%a: {vt('?,3', 'f32')}, %n: {vt('', 'si64')}) -> ({vt('?,3', 'f32')}, {vt('', 'si64')}, {vt('?,3', 'i1')}) {{
  %int1 = torch.constant.int 1
  %f0 = torch.constant.float 0.0
  %0 = torch.aten.mul.Tensor %a, %a : {vt('?,3', 'f32')}, {vt('?,3', 'f32')} -> {vt('?,3', 'f32')}
  %1 = torch.aten.add.Tensor %n, %n, %int1 : {vt('', 'si64')}, {vt('', 'si64')}, !torch.int -> {vt('', 'si64')}
  %2 = torch.aten.gt.Scalar %a, %f0 : {vt('?,3', 'f32')}, !torch.float -> {vt('?,3', 'i1')}
  return %0, %1, %2 : {vt('?,3', 'f32')}, {vt('', 'si64')}, {vt('?,3', 'i1')}
}}
"""


# ---------------------------------------------------------------------------
# numerics
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [1, 4, 0])
def test_f32_dynamic_dims_and_rank0_input(rows):
    compiled = compile_torch(ADD_F32)
    a, b = rand((rows, 3), np.float32), np.array(1.5, np.float32)
    (out,) = compiled.invoke("add", a, b)
    assert out.dtype == np.float32 and out.shape == (rows, 3)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_f16():
    t = vt("2,?", "f16")
    compiled = compile_torch(f"""
func.func @mul(%a: {t}, %b: {t}) -> {t} {{
  %0 = torch.aten.mul.Tensor %a, %b : {t}, {t} -> {t}
  return %0 : {t}
}}""")
    a, b = rand((2, 5), np.float16), rand((2, 5), np.float16)
    (out,) = compiled.invoke("mul", a, b)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), (a * b).astype(np.float32), rtol=1e-3, atol=1e-3)
    assert np.abs(out).max() > 0


@pytest.mark.parametrize("torch_dtype,np_dtype", [("si64", np.int64), ("si32", np.int32)])
def test_integers(torch_dtype, np_dtype):
    t = vt("?", torch_dtype)
    compiled = compile_torch(f"""
func.func @axpy(%a: {t}, %b: {t}) -> {t} {{
  %int3 = torch.constant.int 3
  %0 = torch.aten.add.Tensor %a, %b, %int3 : {t}, {t}, !torch.int -> {t}
  return %0 : {t}
}}""")
    a = np.array([1, -2, 3, 2**30], np_dtype)
    b = np.array([10, 20, -30, 1], np_dtype)
    (out,) = compiled.invoke("axpy", a, b)
    assert out.dtype == np_dtype
    np.testing.assert_array_equal(out, a + 3 * b)


def test_bool_input_and_output():
    tf, tb = vt("?,4", "f32"), vt("?,4", "i1")
    compiled = compile_torch(f"""
func.func @select(%c: {tb}, %a: {tf}, %b: {tf}) -> ({tf}, {tb}) {{
  %0 = torch.aten.where.self %c, %a, %b : {tb}, {tf}, {tf} -> {tf}
  %1 = torch.aten.gt.Tensor %a, %b : {tf}, {tf} -> {tb}
  return %0, %1 : {tf}, {tb}
}}""")
    a, b = rand((3, 4), np.float32), rand((3, 4), np.float32)
    cond = a > 0
    selected, greater = compiled.invoke("select", cond, a, b)
    assert greater.dtype == np.bool_
    np.testing.assert_array_equal(greater, a > b)
    np.testing.assert_array_equal(selected, np.where(cond, a, b))
    assert greater.any() and not greater.all()


def test_rank0_output():
    t = vt("?,?", "f32")
    compiled = compile_torch(f"""
func.func @total(%a: {t}) -> {vt('', 'f32')} {{
  %none = torch.constant.none
  %0 = torch.aten.sum %a, %none : {t}, !torch.none -> {vt('', 'f32')}
  return %0 : {vt('', 'f32')}
}}""")
    a = rand((3, 5), np.float32)
    (out,) = compiled.invoke("total", a)
    assert out.shape == () and out.dtype == np.float32
    np.testing.assert_allclose(out, a.sum(), rtol=1e-5)


def test_rank0_to_rank0():
    t = vt("", "f32")
    compiled = compile_torch(f"""
func.func @sq(%a: {t}) -> {t} {{
  %0 = torch.aten.mul.Tensor %a, %a : {t}, {t} -> {t}
  return %0 : {t}
}}""")
    (out,) = compiled.invoke("sq", np.array(-3.0, np.float32))
    assert out.shape == () and out == np.float32(9.0)
    (out,) = compiled.invoke("sq", np.float32(0.5))  # numpy scalars are rank-0 arrays
    assert out == np.float32(0.25)


@pytest.mark.parametrize("rank", range(7))
def test_ranks(rank):
    dims = ",".join("?" if i % 2 == 0 else "2" for i in range(rank))
    t = vt(dims, "f32")
    compiled = compile_torch(f"""
func.func @add(%a: {t}, %b: {t}) -> {t} {{
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %a, %b, %int1 : {t}, {t}, !torch.int -> {t}
  return %0 : {t}
}}""")
    shape = tuple(3 if i % 2 == 0 else 2 for i in range(rank))
    a, b = rand(shape, np.float32), rand(shape, np.float32)
    (out,) = compiled.invoke("add", a, b)
    assert out.shape == shape
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


@pytest.mark.parametrize("dtype", list(TORCH_DTYPE))
def test_every_dtype_roundtrips(dtype):
    t = vt("?,2", TORCH_DTYPE[dtype])
    compiled = compile_torch(f"""
func.func @flip(%a: {t}) -> {t} {{
  %int0 = torch.constant.int 0
  %dims = torch.prim.ListConstruct %int0 : (!torch.int) -> !torch.list<int>
  %0 = torch.aten.flip %a, %dims : {t}, !torch.list<int> -> {t}
  return %0 : {t}
}}""")
    a = (np.arange(6).reshape(3, 2) * 37 % 5 - 2).astype(dtype)
    (out,) = compiled.invoke("flip", a)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, a[::-1])


def test_two_results_mixed_dtypes():
    tf, ti = vt("?", "f32"), vt("?", "si32")
    compiled = compile_torch(f"""
func.func @two(%a: {tf}, %i: {ti}) -> ({ti}, {tf}) {{
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %i, %i, %int1 : {ti}, {ti}, !torch.int -> {ti}
  %1 = torch.aten.neg %a : {tf} -> {tf}
  return %0, %1 : {ti}, {tf}
}}""")
    a, i = rand(5, np.float32), np.arange(5, dtype=np.int32)
    doubled, negated = compiled.invoke("two", a, i)
    assert doubled.dtype == np.int32 and negated.dtype == np.float32
    np.testing.assert_array_equal(doubled, 2 * i)
    np.testing.assert_array_equal(negated, -a)


def test_three_results_mixed_dtypes():
    compiled = compile_torch(THREE_RESULTS)
    a, n = rand((4, 3), np.float32), np.array(21, np.int64)
    squared, doubled, positive = compiled.invoke("three", a, n)
    np.testing.assert_allclose(squared, a * a, rtol=1e-6)
    assert doubled.shape == () and doubled.dtype == np.int64 and doubled == 42
    np.testing.assert_array_equal(positive, a > 0)


def test_functions_sharing_a_result_callback():
    t = vt("?", "f32")
    compiled = compile_torch(f"""
func.func @neg(%a: {t}) -> {t} {{
  %0 = torch.aten.neg %a : {t} -> {t}
  return %0 : {t}
}}
func.func @twice(%a: {t}) -> {t} {{
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %a, %a, %int1 : {t}, {t}, !torch.int -> {t}
  return %0 : {t}
}}""")
    a = rand(4, np.float32)
    np.testing.assert_array_equal(compiled.invoke("neg", a)[0], -a)
    np.testing.assert_array_equal(compiled.invoke("twice", a)[0], a + a)


def test_scaled_dot_product_attention_via_tm_tensor():
    t = vt("1,2,4,8", "f32")
    compiled = compile_torch(f"""
func.func @sdpa(%q: {t}, %k: {t}, %v: {t}) -> {t} {{
  %none = torch.constant.none
  %f0 = torch.constant.float 0.0
  %false = torch.constant.bool false
  %0 = torch.aten.scaled_dot_product_attention %q, %k, %v, %none, %f0, %false, %none, %false : {t}, {t}, {t}, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> {t}
  return %0 : {t}
}}""")
    q, k, v = (rand((1, 2, 4, 8), np.float32) for _ in range(3))
    (out,) = compiled.invoke("sdpa", q, k, v)
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(8.0)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, weights @ v, rtol=1e-5, atol=1e-5)


def test_non_contiguous_input():
    compiled = compile_torch(ADD_F32)
    a = rand((3, 5), np.float32).T  # shape (5, 3), Fortran order
    (out,) = compiled.invoke("add", a, np.array(2.0, np.float32))
    np.testing.assert_allclose(out, a + 2.0, rtol=1e-6)


def test_two_compiled_modules_alternately():
    add, three = compile_torch(ADD_F32), compile_torch(THREE_RESULTS)
    a = rand((2, 3), np.float32)
    for step in range(3):
        (summed,) = add.invoke("add", a, np.array(step, np.float32))
        np.testing.assert_allclose(summed, a + step, rtol=1e-6)
        squared, doubled, _ = three.invoke("three", a, np.array(step, np.int64))
        np.testing.assert_allclose(squared, a * a, rtol=1e-6)
        assert doubled == 2 * step


def test_results_are_independent_copies():
    compiled = compile_torch(ADD_F32)
    a = rand((2, 3), np.float32)
    (first,) = compiled.invoke("add", a, np.array(1.0, np.float32))
    expected = first.copy()
    compiled.invoke("add", a, np.array(5.0, np.float32))
    np.testing.assert_array_equal(first, expected)
    assert first.flags.owndata


# ---------------------------------------------------------------------------
# signature, module hygiene, options
# ---------------------------------------------------------------------------


def test_signature():
    compiled = compile_torch(THREE_RESULTS)
    args, results = compiled.signature("three")
    assert args == [((-1, 3), np.dtype(np.float32)), ((), np.dtype(np.int64))]
    assert results == [((-1, 3), np.dtype(np.float32)), ((), np.dtype(np.int64)), ((-1, 3), np.dtype(np.bool_))]


def test_compile_does_not_mutate_module():
    module = to_linalg(ADD_F32)
    before = str(module)
    RefBackend().compile(module)
    assert str(module) == before


def test_options_and_pipeline():
    backend = RefBackend(opt_level=0, threads=4)
    assert (backend.opt_level, backend.threads) == (0, 4)
    (out,) = backend.compile(to_linalg(ADD_F32)).invoke("add", np.ones((1, 3), np.float32), np.array(1.0, np.float32))
    np.testing.assert_array_equal(out, np.full((1, 3), 2.0, np.float32))
    assert LOWERING_PIPELINE.startswith("builtin.module(")
    assert "refback-munge-calling-conventions" in LOWERING_PIPELINE
    with pytest.raises(ValueError):
        RefBackend(opt_level=7)


def test_default_opt_level_from_the_environment(monkeypatch):
    """GQA_REFBACKEND_OPT_LEVEL sets the default (conftest.py: 0 in the fast tier); a value
    that is not a level is refused by name, never ignored."""
    monkeypatch.setenv(OPT_LEVEL_VARIABLE, "3")
    assert RefBackend().opt_level == 3 and RefBackend(opt_level=1).opt_level == 1
    monkeypatch.delenv(OPT_LEVEL_VARIABLE)
    assert RefBackend().opt_level == 2
    monkeypatch.setenv(OPT_LEVEL_VARIABLE, "fast")
    with pytest.raises(GqaTorchMlirError, match="GQA_REFBACKEND_OPT_LEVEL must be 0, 1, 2 or 3.*got 'fast'"):
        RefBackend()


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,pattern",
    [
        ((np.ones((2, 3), np.float32),), r"@add: expected 2 arguments .* got 1"),
        ((np.ones((2, 3), np.float64), np.array(1.0, np.float32)), r"@add argument 0: expected float32\[\?,3\], got float64\[2,3\]"),
        ((np.ones((2, 3), np.float32), np.ones(1, np.float32)), r"@add argument 1: expected float32\[\], got float32\[1\]"),
        ((np.ones((2, 4), np.float32), np.array(1.0, np.float32)), r"@add argument 0: expected float32\[\?,3\], got float32\[2,4\]"),
        (([[1.0, 2.0, 3.0]], np.array(1.0, np.float32)), r"@add argument 0: expected a numpy array float32\[\?,3\], got list"),
    ],
)
def test_invocation_errors(args, pattern):
    compiled = compile_torch(ADD_F32)
    with pytest.raises(RuntimeInvocationError, match=pattern):
        compiled.invoke("add", *args)


def test_unknown_function():
    with pytest.raises(RuntimeInvocationError, match=r"no public function @nope.*add"):
        compile_torch(ADD_F32).invoke("nope")


def test_compile_stage_error_has_diagnostics_and_repro():
    ctx = ir.Context()
    module = ir.Module.parse("""
func.func @t(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = tosa.add %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}""", context=ctx)
    with pytest.raises(CompileStageError) as info:
        RefBackend().compile(module)
    err = info.value
    assert err.stage == "refbackend-bufferize"
    assert "refbackend-bufferize" in str(err) and "gqa-torch-mlir-opt" in str(err)
    assert "op was not bufferized" in err.diagnostics and "tosa.add" in err.diagnostics
    match = re.fullmatch(r"gqa-torch-mlir-opt --pass-pipeline='(builtin\.module\(.*\))' (\S+\.mlir)", err.repro)
    assert match and "one-shot-bufferize" in match.group(1)
    with open(match.group(2)) as f:
        saved = f.read()
    assert "tosa.add" in saved and "loc(" in saved
    # The repro command really reproduces the failure.
    tool = os.path.join(os.path.dirname(sys.executable), "gqa-torch-mlir-opt")
    rerun = subprocess.run([tool, f"--pass-pipeline={match.group(1)}", match.group(2)], capture_output=True, text=True)
    assert rerun.returncode == 1 and "op was not bufferized" in rerun.stderr, rerun.stderr
    os.remove(match.group(2))


def test_torch_level_module_is_rejected_by_signature_stage():
    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    module = ir.Module.parse(ADD_F32, context=ctx)  # not lowered
    with pytest.raises(CompileStageError) as info:
        RefBackend().compile(module)
    assert info.value.stage == "refbackend-signature"
    assert "@add argument 0 has type !torch.vtensor<[?,3],f32>" in info.value.diagnostics


# ---------------------------------------------------------------------------
# run-time checks: a failed cf.assert stops the call, the process goes on
# ---------------------------------------------------------------------------

BROADCAST = f"""
func.func @add(%a: {vt('?', 'f32')}, %b: {vt('?', 'f32')}) -> {vt('?', 'f32')} {{
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %a, %b, %int1 : {vt('?', 'f32')}, {vt('?', 'f32')}, !torch.int -> {vt('?', 'f32')}
  return %0 : {vt('?', 'f32')}
}}"""


@pytest.mark.parametrize("runtime_verification", [False, True], ids=["plain", "verified"])
def test_torch_mlir_assert_stops_the_call(runtime_verification):
    """torch-mlir's own "mismatched size for broadcast" assert once aborted the process."""
    module = to_linalg(BROADCAST)
    assert '"mismatched size for broadcast"' in str(module)
    compiled = RefBackend(runtime_verification=runtime_verification).compile(module)
    with pytest.raises(RuntimeInvocationError, match=r"^@add: mismatched size for broadcast$"):
        compiled.invoke("add", rand(3, np.float32), rand(4, np.float32))
    a, b = rand(5, np.float32), rand(5, np.float32)
    np.testing.assert_allclose(compiled.invoke("add", a, b)[0], a + b, rtol=1e-6)


# Two of our checks on n; {between} goes between them.
TWO_CHECKS = """
func.func {visibility} @checks(%a: tensor<?xf32>, %nt: tensor<i64>) -> tensor<?xf32> {{
  %c0 = arith.constant 0 : index
  %e = tensor.extract %nt[] : tensor<i64>
  %n = arith.index_cast %e : i64 to index
  %len = tensor.dim %a, %c0 : tensor<?xf32>
  %fits = arith.cmpi sle, %n, %len : index
  cf.assert %fits, "gqa-torch-mlir: n must be at most the length"
  {between}
  %negative = arith.cmpi slt, %n, %c0 : index
  cf.assert %negative, "gqa-torch-mlir: n must be negative"
  return %a : tensor<?xf32>
}}
"""
CALL_CHECKS = """
func.func @f(%a: tensor<?xf32>, %n: tensor<i64>) -> tensor<?xf32> {
  %r = call @checks(%a, %n) : (tensor<?xf32>, tensor<i64>) -> tensor<?xf32>
  return %r : tensor<?xf32>
}
"""
BOTH = "@checks: gqa-torch-mlir: n must be at most the length; gqa-torch-mlir: n must be negative"


def compile_two_checks(between: str = "", visibility: str = ""):
    return RefBackend().compile(ir.Module.parse(TWO_CHECKS.format(between=between, visibility=visibility), context=ir.Context()))


def test_a_run_of_checks_reports_every_failure():
    """Checks with only pure ops between them are evaluated together: the call reports each that failed."""
    compiled = compile_two_checks("%twice = arith.addi %n, %n : index")
    a = rand(3, np.float32)
    with pytest.raises(RuntimeInvocationError, match=f"^{re.escape(BOTH)}$"):
        compiled.invoke("checks", a, np.array(5, np.int64))
    with pytest.raises(RuntimeInvocationError, match=r"^@checks: gqa-torch-mlir: n must be negative$"):
        compiled.invoke("checks", a, np.array(2, np.int64))
    np.testing.assert_array_equal(compiled.invoke("checks", a, np.array(-1, np.int64))[0], a)


def test_a_foreign_assert_ends_a_run_of_checks():
    """The code after torch-mlir's assert may rely on it: nothing after it is evaluated once a check failed."""
    compiled = compile_two_checks('%ok = arith.cmpi sge, %len, %c0 : index\n  cf.assert %ok, "length must be >= 0"')
    with pytest.raises(RuntimeInvocationError, match=r"^@checks: gqa-torch-mlir: n must be at most the length$"):
        compiled.invoke("checks", rand(3, np.float32), np.array(5, np.int64))


# The second condition reads a[1] through a cast that the first check guards.
_GUARDED_CAST = r'''
import numpy as np
from torch_mlir import ir
from gqa_torch_mlir.backends.refbackend import RefBackend
from gqa_torch_mlir.errors import RuntimeInvocationError

ASM = """
func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %len = tensor.dim %a, %c0 : tensor<?xf32>
  %two = arith.cmpi eq, %len, %c2 : index
  cf.assert %two, "gqa-torch-mlir: a must hold 2 elements"
  %pair = tensor.cast %a : tensor<?xf32> to tensor<2xf32>
  %second = tensor.extract %pair[%c1] : tensor<2xf32>
  %positive = arith.cmpf ogt, %second, %zero : f32
  cf.assert %positive, "gqa-torch-mlir: a[1] must be positive"
  return %a : tensor<?xf32>
}"""
compiled = RefBackend(runtime_verification=True).compile(ir.Module.parse(ASM, context=ir.Context()))
try:
    compiled.invoke("f", np.ones(1, np.float32))
except RuntimeInvocationError as e:
    print("raised:", e, flush=True)
try:
    compiled.invoke("f", -np.ones(2, np.float32))
except RuntimeInvocationError as e:
    print("raised:", e, flush=True)
try:  # numpy calls it C-contiguous, but its one element has a stride of 2 (runtime verification aborted)
    compiled.invoke("f", np.array([1.0, 2.0], np.float32)[::2])
except RuntimeInvocationError as e:
    print("raised:", e, flush=True)
'''


def test_a_run_never_evaluates_a_cast_ahead_of_its_check():
    """In a child process: evaluated ahead, the cast would abort with MLIR's runtime verification
    report.  A size-1 feed with a stray stride is passed with row-major strides (not reported)."""
    run = subprocess.run([sys.executable, "-c", _GUARDED_CAST], capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    two, positive = "raised: @f: gqa-torch-mlir: a must hold 2 elements\n", "raised: @f: gqa-torch-mlir: a[1] must be positive\n"
    assert run.stdout == two + positive + two, out


def test_checks_in_a_function_returning_values_report_and_go_on():
    """A return there would not end the call: our checks report, the call goes on (as before)."""
    module = ir.Module.parse(TWO_CHECKS.format(between="", visibility="private") + CALL_CHECKS, context=ir.Context())
    compiled = RefBackend().compile(module)
    a = rand(3, np.float32)
    with pytest.raises(RuntimeInvocationError, match=f"^{re.escape(BOTH.replace('@checks', '@f'))}$"):
        compiled.invoke("f", a, np.array(5, np.int64))
    np.testing.assert_array_equal(compiled.invoke("f", a, np.array(-1, np.int64))[0], a)


# Our check guards a scatter that torch-mlir does not clamp: index 9 of 4 rows
# writes out of bounds, which runtime verification reports by aborting.
_CHECKED_SCATTER = r'''
import sys
import numpy as np
from torch_mlir import ir
from torch_mlir.passmanager import PassManager
from gqa_torch_mlir.backends import refbackend
from gqa_torch_mlir.context import make_context

ASM = """
func.func @f(%cache: !torch.vtensor<[4,2],f32>, %index: !torch.vtensor<[1,2],si64>, %src: !torch.vtensor<[1,2],f32>) -> !torch.vtensor<[4,2],f32> {
  %int0 = torch.constant.int 0
  %int4 = torch.constant.int 4
  %lt = torch.aten.lt.Scalar %index, %int4 : !torch.vtensor<[1,2],si64>, !torch.int -> !torch.vtensor<[1,2],i1>
  %all = torch.aten.all %lt : !torch.vtensor<[1,2],i1> -> !torch.vtensor<[],i1>
  %ok = torch.aten.Bool.Tensor %all : !torch.vtensor<[],i1> -> !torch.bool
  torch.runtime.assert %ok, "gqa-torch-mlir: index must be < 4"
  %0 = torch.aten.scatter.src %cache, %int0, %index, %src : !torch.vtensor<[4,2],f32>, !torch.int, !torch.vtensor<[1,2],si64>, !torch.vtensor<[1,2],f32> -> !torch.vtensor<[4,2],f32>
  return %0 : !torch.vtensor<[4,2],f32>
}"""
if sys.argv[1] == "no-stop":  # the negative control: checks report and the call goes on
    refbackend._can_return_at = lambda op: False
with make_context():
    module = ir.Module.parse(ASM)
    PassManager.parse("builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)").run(module.operation)
    compiled = refbackend.RefBackend(runtime_verification=True).compile(module)
cache, src = np.zeros((4, 2), np.float32), np.ones((1, 2), np.float32)
try:
    compiled.invoke("f", cache, np.array([[1, 9]], np.int64), src)
except refbackend.RuntimeInvocationError as e:
    print("raised:", e, flush=True)
(ok,) = compiled.invoke("f", cache, np.array([[1, 3]], np.int64), src)
print("in bounds ok:", bool(ok[1, 0] == 1 and ok[3, 1] == 1), flush=True)
'''


def _run_checked_scatter(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _CHECKED_SCATTER, mode], capture_output=True, text=True, timeout=300)


def test_our_failed_check_stops_before_an_out_of_bounds_access():
    """In a child process, so that a regression fails the test instead of killing pytest."""
    run = _run_checked_scatter("stop")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "raised: @f: gqa-torch-mlir: index must be < 4\n" in run.stdout, out
    assert "in bounds ok: True" in run.stdout and "out-of-bounds access" not in out, out


def test_a_check_that_does_not_stop_lets_the_out_of_bounds_access_run():
    """Negative control of the test above: past the check, the scatter really writes out of bounds."""
    run = _run_checked_scatter("no-stop")
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "raised" not in run.stdout, out
    assert "out-of-bounds access" in out, out


# An outer product: n input elements, an n x n result buffer.
_OUTER_PRODUCT = '''
import sys
import numpy as np
from torch_mlir import ir
from gqa_torch_mlir.backends.refbackend import RefBackend, RuntimeInvocationError

ASM = """
#id = affine_map<(i, j) -> (i)>
#jd = affine_map<(i, j) -> (j)>
#ij = affine_map<(i, j) -> (i, j)>
func.func @outer(%a: tensor<?xf32>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf32>
  %init = tensor.empty(%n, %n) : tensor<?x?xf32>
  %r = linalg.generic {indexing_maps = [#id, #jd, #ij], iterator_types = ["parallel", "parallel"]}
      ins(%a, %a : tensor<?xf32>, tensor<?xf32>) outs(%init : tensor<?x?xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    linalg.yield %m : f32
  } -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
func.func @ones(%nt: tensor<i64>) -> tensor<?x?xf32> {
  %e = tensor.extract %nt[] : tensor<i64>
  %n = arith.index_cast %e : i64 to index
  %one = arith.constant 1.0 : f32
  %init = tensor.empty(%n, %n) : tensor<?x?xf32>
  %r = linalg.fill ins(%one : f32) outs(%init : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}"""
compiled = RefBackend().compile(ir.Module.parse(ASM, context=ir.Context()))
for function, arg in (("outer", np.ones(1 << 22, np.float32)),  # a 64 TiB result: malloc fails
                      ("ones", np.array(1 << 31, np.int64))):  # 2^62 floats: the byte size wraps to 0
    try:
        compiled.invoke(function, arg)
    except RuntimeInvocationError as e:
        print("raised:", e, flush=True)
a = np.arange(3, dtype=np.float32)
print("after:", bool((compiled.invoke("outer", a)[0] == np.outer(a, a)).all()), flush=True)
'''


def test_a_failed_allocation_stops_the_call():
    """malloc's null result, or a buffer whose byte size wrapped, was written through (SIGSEGV); in a
    child process, as a regression would crash."""
    run = subprocess.run([sys.executable, "-c", _OUTER_PRODUCT], capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    for function in ("outer", "ones"):
        assert re.search(f"raised: @{function}: gqa-torch-mlir: out of memory: .* memref<\\?x\\?xf32> larger than", run.stdout), out
    assert "after: True" in run.stdout, out
