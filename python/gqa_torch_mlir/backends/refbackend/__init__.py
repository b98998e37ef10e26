"""Reference backend: JIT-run linalg-on-tensors IR with MLIR's ExecutionEngine.

torch-mlir's own reference backend lives in its e2e test package, which the
PyPI wheel does not ship; the wheel does ship its ``refback-*`` passes, the
ExecutionEngine bindings and the memref/numpy helpers of ``torch_mlir.runtime``.
This package puts them together:

  __init__.py   RefBackend: the stages of the lowering, in order
  runner.py     stages, signatures, the ExecutionEngine, CompiledModule.invoke
  passes.py     our passes: a failed run-time check stops the call (runs.py, checks.py)
  symbols.py    func.func lookups shared by both

``RefBackend.compile`` never touches the caller's module: it reparses the
module's text (with locations) in the same context and lowers that copy in
stages, each a pass pipeline of its own (a failure raises
``CompileStageError`` with a command rerunning it) or one of our passes:

``gqa-refbackend-report-checks``
    numbers the input's ``cf.assert``s and makes ours report (passes.py).
``refbackend-bufferize``
    tensor -> memref (one-shot bufferization across function boundaries, with
    identity layouts at the boundaries), plus deallocation of temporaries
    (on the module: buffers yielded by an ``scf.if`` need the deallocation
    helper function it adds there).
``refbackend-munge-calling-conventions``
    public functions take unranked memrefs and pass their results to
    callbacks (runner.py).
``refbackend-lower-to-loops``
    linalg and tm_tensor ops to ``scf`` loops (then, with
    ``runtime_verification``, ``refbackend-runtime-verification``).
``gqa-refbackend-check-allocations``
    a check after every allocation that it got memory.
``refbackend-lower-to-cfg``
    ``scf`` to ``cf``: each function body is a flat control-flow graph.
``gqa-refbackend-stop-at-failed-checks``
    a failed check returns from the call, instead of aborting the process.
``refbackend-lower-to-llvm``
    the LLVM dialect.
"""

from __future__ import annotations

import os

from torch_mlir import ir

from ...errors import CompileStageError, GqaTorchMlirError, RuntimeInvocationError
from .passes import (
    CHECK_ALLOCATIONS,
    CHECK_PREFIX,
    REPORT_CHECKS,
    STOP_AT_FAILED_CHECKS,
    can_return_at,
    run_pass,
    take_check_messages,
)
from .runner import (
    CompiledModule,
    FunctionSignature,
    Stage,
    TensorSpec,
    asm,
    consume_declarations,
    create_engine,
    read_signatures,
    run_stage,
)

__all__ = [
    "CHECK_PREFIX", "LOWERING_PIPELINE", "OPT_LEVEL_VARIABLE", "CompileStageError", "CompiledModule", "FunctionSignature", "RefBackend",
    "RuntimeInvocationError", "TensorSpec",
]

_BUFFERIZE = Stage(
    "refbackend-bufferize",
    (
        "func.func(refback-generalize-tensor-pad)",
        "func.func(refback-generalize-tensor-concat)",
        "func.func(linalg-generalize-named-ops)",
        "func.func(linalg-fuse-elementwise-ops)",
        "convert-shape-to-std",
        "func.func(tm-tensor-bufferize)",
        "one-shot-bufferize{copy-before-write bufferize-function-boundaries "
        "function-boundary-type-conversion=identity-layout-map}",
        "refback-mlprogram-bufferize",
        "buffer-deallocation-pipeline",
    ),
)
_MUNGE = Stage("refbackend-munge-calling-conventions", ("refback-munge-calling-conventions",))
_VERIFY = Stage("refbackend-runtime-verification", ("generate-runtime-verification",))
_TO_LOOPS = Stage(
    "refbackend-lower-to-loops",
    (
        "func.func(tm-tensor-to-loops)",
        "func.func(refback-munge-memref-copy)",
        "func.func(convert-linalg-to-loops)",
    ),
)
_TO_CFG = Stage("refbackend-lower-to-cfg", ("func.func(lower-affine)", "convert-scf-to-cf"))
_TO_LLVM = Stage(
    "refbackend-lower-to-llvm",
    (
        "func.func(refback-expand-ops-for-llvm)",
        "func.func(arith-expand)",
        "func.func(convert-math-to-llvm)",
        "convert-math-to-libm",
        "expand-strided-metadata",
        "finalize-memref-to-llvm",
        "lower-affine",
        "convert-scf-to-cf",
        "convert-bufferization-to-memref",
        "finalize-memref-to-llvm",
        "func.func(convert-arith-to-llvm)",
        "convert-vector-to-llvm",
        "convert-index-to-llvm",  # generate-runtime-verification emits index ops
        "convert-func-to-llvm",
        "convert-cf-to-llvm",
        "convert-complex-to-llvm",
        "reconcile-unrealized-casts",
    ),
)

LOWERING_PIPELINE = Stage(
    "refbackend", _BUFFERIZE.passes + _MUNGE.passes + _TO_LOOPS.passes + _TO_CFG.passes + _TO_LLVM.passes
).pipeline
"""The whole lowering, linalg-on-tensors to LLVM dialect, as one pipeline.

Without our passes of :meth:`RefBackend.compile`: there a failed
``cf.assert`` stops the call instead of aborting the process."""

# Where the stop pass may put a return, looked up at each compile: a name of
# this package so that test_backends_refbackend.py's negative control can replace it.
_can_return_at = can_return_at


OPT_LEVEL_VARIABLE = "GQA_REFBACKEND_OPT_LEVEL"


def _default_opt_level() -> int:
    text = os.environ.get(OPT_LEVEL_VARIABLE, "2")
    if text not in ("0", "1", "2", "3"):
        raise GqaTorchMlirError(f"environment variable {OPT_LEVEL_VARIABLE} must be 0, 1, 2 or 3 (LLVM's optimisation level), got '{text}'")
    return int(text)


class RefBackend:
    """Compiles linalg-on-tensors modules for the in-process ExecutionEngine.

    ``opt_level`` is LLVM's optimisation level (0-3; by default 2, or the
    environment's ``GQA_REFBACKEND_OPT_LEVEL``: 0 JIT-compiles a decoder's
    dynamic-shape module about 4x faster and runs it slower, as the fast test
    tier does). ``threads`` is accepted
    for interface parity with other backends and only recorded: the generated
    code is single-threaded.  ``runtime_verification`` adds MLIR's
    ``generate-runtime-verification`` after lowering to loops: every load and
    store is bounds-checked, and a violation aborts the process with MLIR's
    "out-of-bounds access" report before the access happens (a sanitizer for
    tests; it slows the code down).
    """

    def __init__(self, opt_level: int | None = None, threads: int | None = None, runtime_verification: bool = False) -> None:
        if opt_level is None:
            opt_level = _default_opt_level()
        if opt_level not in (0, 1, 2, 3):
            raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {opt_level}")
        self.opt_level = opt_level
        self.threads = threads
        self.runtime_verification = runtime_verification

    def compile(self, module: ir.Module) -> CompiledModule:
        """Lower a copy of ``module`` (the caller's module is left as it was) and JIT it."""
        signatures = read_signatures(module)
        lowered = ir.Module.parse(asm(module), context=module.context)
        run_pass(lowered, REPORT_CHECKS)
        run_stage(lowered, _BUFFERIZE)
        run_stage(lowered, _MUNGE)
        consumers = consume_declarations(lowered)
        run_stage(lowered, _TO_LOOPS)
        if self.runtime_verification:  # bounds checks on every load and store; a violation aborts before the access
            run_stage(lowered, _VERIFY)
        run_pass(lowered, CHECK_ALLOCATIONS)
        run_stage(lowered, _TO_CFG)
        run_pass(lowered, STOP_AT_FAILED_CHECKS, can_return_at=_can_return_at)
        checks = take_check_messages(lowered)  # the messages by id, which the passes kept in the IR
        run_stage(lowered, _TO_LLVM)
        return CompiledModule(create_engine(lowered, self.opt_level), signatures, consumers, checks)
