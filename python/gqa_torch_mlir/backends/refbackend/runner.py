"""The refbackend's runner: a lowered module JIT-compiled by MLIR's ExecutionEngine, and called.

``RefBackend.compile`` (``__init__.py``) runs the stages in order; this module
holds what it runs them with, and what the compiled module is called through.

Calling convention: ``refback-munge-calling-conventions`` rewrites every
public function to take unranked memrefs and return nothing; each ``return``
becomes a call to a private declaration
``refbackend_consume_func_return_<tokens>``.  The tokens are one per result,
``mr`` + element type (``mrf32``, ``mri1``...) and the rank is not part of
the name, so functions with the same result element types share one
declaration.  After the munge stage the consume declarations are read back
from the IR (:func:`consume_declarations`) and, for each, a ctypes callback
with one unranked-memref pointer per result is registered with the
ExecutionEngine under that name.  Whatever the C++ pass names, the callback
therefore matches it, for any number and mix of results.  A callback copies
its memrefs into fresh numpy arrays and stores them in a slot owned by the
compiled module (never global state), from where ``invoke`` takes them after
the call.  A lock serialises calls on one compiled module.

Run-time checks report ``(ok, id)`` to one more callback,
``refbackend_runtime_check`` (passes.py says how the IR comes to call it);
``invoke`` raises :class:`RuntimeInvocationError`
``"@<function>: <message>; <message>..."`` with the messages of the ids that
failed.

The wheel's ``torch_mlir.runtime`` helpers handle f16 (through a 16-bit ctypes
struct viewed as float16), bool (``c_bool``, one byte, as LLVM stores i1 in
memory) and rank 0; inputs are passed in C order and kept referenced until the
call returns. The result buffers are malloc'ed by the compiled code and never
freed (as in torch-mlir's refbackend): a returned memref may alias an input or
a constant, so freeing it is not safe. This is a test runner; it leaks.

Failures of a lowering stage raise :class:`CompileStageError` with MLIR's
diagnostics and a command that reruns the stage on its saved input; argument
mismatches and failed checks at ``invoke`` raise :class:`RuntimeInvocationError`.
Sparse tensors are not supported.
"""
from __future__ import annotations

import ctypes
import importlib
import math
import shlex
import threading
from typing import Callable, NamedTuple, Sequence

import numpy as np
from torch_mlir import ir
from torch_mlir.execution_engine import ExecutionEngine
from torch_mlir.passmanager import PassManager
from torch_mlir.runtime import (
    UnrankedMemRefDescriptor,
    get_unranked_memref_descriptor,
    unranked_memref_to_numpy,
)

from ...errors import CompileStageError, RuntimeInvocationError
from ...repro import repro_command, save_stage_input
from .checks import CHECK_CALLBACK
from .symbols import function_type, module_body, public_functions, symbol_name

importlib.import_module("torch_mlir.dialects.torch")  # registers the refback-*/tm-tensor-* passes

__all__ = ["CompiledModule", "FunctionSignature", "Stage", "TensorSpec"]

_CONSUME_PREFIX = "refbackend_consume_func_return"

# Element types the refback calling convention accepts, as numpy dtypes.
_DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i1": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
}


def pipeline_text(passes: Sequence[str]) -> str:
    return "builtin.module(" + ",".join(passes) + ")"


class Stage(NamedTuple):
    """A stage of the lowering: MLIR passes run by one PassManager; on failure, its input is saved."""

    name: str
    passes: tuple[str, ...]

    @property
    def pipeline(self) -> str:
        return pipeline_text(self.passes)


class TensorSpec(NamedTuple):
    """One argument or result: shape (-1 for a dynamic dim) and numpy dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def __str__(self) -> str:
        dims = ",".join("?" if d == -1 else str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"


class FunctionSignature(NamedTuple):
    args: list[TensorSpec]
    results: list[TensorSpec]


def _tensor_spec(type_: ir.Type) -> TensorSpec | None:
    """The spec of a dense ranked tensor of a supported dtype, else None."""
    if not isinstance(type_, ir.RankedTensorType) or type_.encoding is not None:
        return None
    dtype = _DTYPES.get(str(type_.element_type))
    if dtype is None:
        return None
    dynamic = ir.ShapedType.get_dynamic_size()
    return TensorSpec(tuple(-1 if d == dynamic else d for d in type_.shape), dtype)


def read_signatures(module: ir.Module) -> dict[str, FunctionSignature]:
    """Signatures of the public functions; unsupported types are a stage error."""
    signatures, problems = {}, []
    for func in public_functions(module):
        name, ftype = symbol_name(func), function_type(func)
        specs = {}
        for kind, types in (("argument", ftype.inputs), ("result", ftype.results)):
            specs[kind] = [_tensor_spec(t) for t in types]
            problems += [
                f"{func.location}: @{name} {kind} {i} has type {t}"
                for i, (t, spec) in enumerate(zip(types, specs[kind]))
                if spec is None
            ]
        signatures[name] = FunctionSignature(specs["argument"], specs["result"])
    if problems:
        expected = "expected dense ranked tensors of " + ", ".join(_DTYPES)
        raise CompileStageError(
            "refbackend-signature",
            "\n".join(problems + [f"{expected} (is the module at linalg-on-tensors level?)"]),
        )
    return signatures


def asm(module: ir.Module) -> str:
    return module.operation.get_asm(enable_debug_info=True)


def run_stage(module: ir.Module, stage: Stage) -> None:
    """Run one stage in place; on failure save its input and raise."""
    stage_input = asm(module)
    try:
        PassManager.parse(stage.pipeline, context=module.context).run(module.operation)
    except ir.MLIRError as exc:
        repro = repro_command(stage.name, stage_input, stage.pipeline)
        raise CompileStageError(stage.name, str(exc), repro) from exc


def consume_declarations(module: ir.Module) -> dict[str, list[np.dtype]]:
    """Result-consuming callbacks that munge declared: name -> result dtypes."""
    declarations = {}
    for op in module_body(module).operations:
        if op.operation.name == "func.func" and symbol_name(op).startswith(_CONSUME_PREFIX):
            inputs = function_type(op).inputs
            declarations[symbol_name(op)] = [_DTYPES[str(t.element_type)] for t in inputs]
    return declarations


def create_engine(module: ir.Module, opt_level: int) -> ExecutionEngine:
    try:
        return ExecutionEngine(module, opt_level=opt_level)
    except RuntimeError as exc:
        path = save_stage_input("refbackend-jit", asm(module))
        raise CompileStageError(
            "refbackend-jit", str(exc), f"mlir-translate --mlir-to-llvmir {shlex.quote(path)}"
        ) from exc


class _ResultSlot:
    """Where a consume callback leaves the results of the running call."""

    def __init__(self) -> None:
        self.values: tuple[np.ndarray, ...] | None = None
        self.error: Exception | None = None
        self.failed_checks: list[int] = []

    def take(self, function: str, checks: list[str]) -> tuple[np.ndarray, ...]:
        """The call's results, and the slot emptied for the next call.

        Failed checks come first: a check that stops the call returns before
        the results are consumed, so ``values`` is then None.
        """
        values, error, failed = self.values, self.error, self.failed_checks
        self.values = self.error = None
        self.failed_checks = []
        if failed:
            raise RuntimeInvocationError(f"@{function}: " + "; ".join(dict.fromkeys(checks[i] for i in failed)))
        if values is None:
            raise RuntimeError(f"@{function} returned without passing its results") from error
        return values


_MemRefPtr = ctypes.POINTER(UnrankedMemRefDescriptor)


def _make_consumer(dtypes: Sequence[np.dtype], slot: _ResultSlot) -> Callable:
    """A C callback taking one unranked memref per result; copies them into ``slot``."""

    def consume(*memrefs: _MemRefPtr) -> None:
        try:
            slot.values = tuple(
                np.array(unranked_memref_to_numpy(m, dt), copy=True) for m, dt in zip(memrefs, dtypes)
            )
        except Exception as exc:  # noqa: BLE001  ctypes would swallow it; invoke re-raises
            slot.error = exc

    return ctypes.CFUNCTYPE(None, *[_MemRefPtr] * len(dtypes))(consume)


def _make_check_callback(slot: _ResultSlot) -> Callable:
    def check(ok: int, check_id: int) -> None:
        if ok != 1:
            slot.failed_checks.append(check_id)

    return ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(check)


def _check_argument(function: str, index: int, spec: TensorSpec, arg: object) -> np.ndarray:
    """``arg`` as a C-ordered array, if it fits ``spec``."""
    if not isinstance(arg, (np.ndarray, np.generic)):
        raise RuntimeInvocationError(
            f"@{function} argument {index}: expected a numpy array {spec}, got {type(arg).__name__}"
        )
    array = np.asarray(arg, order="C")  # not ascontiguousarray: it turns rank 0 into rank 1
    fits = (
        array.dtype == spec.dtype
        and array.ndim == len(spec.shape)
        and all(want in (-1, got) for want, got in zip(spec.shape, array.shape))
    )
    if not fits:
        got = TensorSpec(array.shape, array.dtype)
        raise RuntimeInvocationError(f"@{function} argument {index}: expected {spec}, got {got}")
    return _with_row_major_strides(array)


def _with_row_major_strides(array: np.ndarray) -> np.ndarray:
    """A C-contiguous array with the strides of a row-major layout.

    numpy calls an array C-contiguous whatever the strides of its dims of size
    1 (``np.array([n, 0])[::2]`` keeps a stride of 8 bytes) and any empty array
    whatever its strides (zero, or a sliced parent's); the descriptor passes
    them on, and runtime verification rejects strides that contradict the
    identity layout.  Those strides never step to another element.
    """
    strides = tuple(array.itemsize * math.prod(array.shape[i + 1 :]) for i in range(array.ndim))
    return array if array.strides == strides else np.lib.stride_tricks.as_strided(array, strides=strides)


def _check_arguments(function: str, specs: list[TensorSpec], args: tuple) -> list[np.ndarray]:
    if len(args) != len(specs):
        expected = ", ".join(map(str, specs))
        raise RuntimeInvocationError(
            f"@{function}: expected {len(specs)} arguments ({expected}), got {len(args)}"
        )
    return [_check_argument(function, i, spec, arg) for i, (spec, arg) in enumerate(zip(specs, args))]


class CompiledModule:
    """A module JIT-compiled by :class:`RefBackend`; call its public functions."""

    def __init__(
        self,
        engine: ExecutionEngine,
        signatures: dict[str, FunctionSignature],
        consumers: dict[str, list[np.dtype]],
        checks: list[str],
    ) -> None:
        self._engine = engine
        self._signatures = signatures
        self._checks = checks
        self._slot = _ResultSlot()
        self._lock = threading.Lock()
        # Registered before the first lookup; kept referenced as long as the engine.
        self._callbacks = {name: _make_consumer(dtypes, self._slot) for name, dtypes in consumers.items()}
        if checks:
            self._callbacks[CHECK_CALLBACK] = _make_check_callback(self._slot)
        for name, callback in self._callbacks.items():
            engine.register_runtime(name, callback)
        for name in signatures:  # JIT now: the first lookup compiles the whole module
            engine.lookup(name)

    def signature(self, function: str) -> FunctionSignature:
        """``(args, results)``: lists of ``(shape, dtype)``, -1 for a dynamic dim."""
        if function not in self._signatures:
            raise RuntimeInvocationError(
                f"no public function @{function}; the module has: {', '.join(self._signatures)}"
            )
        return self._signatures[function]

    def invoke(self, function: str, *args: np.ndarray) -> tuple[np.ndarray, ...]:
        """Call ``function``; the results are always a tuple of fresh arrays."""
        arrays = _check_arguments(function, self.signature(function).args, args)
        # The descriptors point into ``arrays``, which stays referenced until the call returns.
        pointers = [ctypes.pointer(ctypes.pointer(get_unranked_memref_descriptor(a))) for a in arrays]
        with self._lock:
            self._engine.invoke(function, *pointers)
            return self._slot.take(function, self._checks)
