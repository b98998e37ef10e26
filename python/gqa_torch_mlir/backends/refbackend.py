"""Reference backend: JIT-run linalg-on-tensors IR with MLIR's ExecutionEngine.

torch-mlir's own reference backend lives in its e2e test package, which the
PyPI wheel does not ship; the wheel does ship its ``refback-*`` passes, the
ExecutionEngine bindings and the memref/numpy helpers of ``torch_mlir.runtime``.
This module puts them together.

Design
------
``RefBackend.compile`` never touches the caller's module: it reparses the
module's text (with locations) in the same context, tags its run-time checks
(below) and lowers that copy in stages, each a pass pipeline of its own:

``refbackend-bufferize``
    tensor -> memref (one-shot bufferization across function boundaries, with
    identity layouts at the boundaries), plus deallocation of temporaries
    (on the module: buffers yielded by an ``scf.if`` need the deallocation
    helper function it adds there).
``refbackend-munge-calling-conventions``
    ``refback-munge-calling-conventions`` rewrites every public function to
    take unranked memrefs and return nothing; each ``return`` becomes a call
    to a private declaration ``refbackend_consume_func_return_<tokens>``. The
    tokens are one per result, ``mr`` + element type (``mrf32``, ``mri1``...)
    and the rank is not part of the name, so functions with the same result
    element types share one declaration.
``refbackend-lower-to-loops``
    linalg and tm_tensor ops to ``scf`` loops (then, with
    ``runtime_verification``, ``refbackend-runtime-verification``).
``refbackend-lower-to-cfg``
    ``scf`` to ``cf``: each function body is a flat control-flow graph, on
    which failed checks are made to stop the call (below).
``refbackend-lower-to-llvm``
    the LLVM dialect.

After the munge stage the consume declarations are read back from the IR and,
for each, a ctypes callback with one unranked-memref pointer per result is
registered with the ExecutionEngine under that name. Whatever the C++ pass
names, the callback therefore matches it, for any number and mix of results.
A callback copies its memrefs into fresh numpy arrays and stores them in a
slot owned by the compiled module (never global state), from where ``invoke``
takes them after the call. A lock serialises calls on one compiled module.

The wheel's ``torch_mlir.runtime`` helpers handle f16 (through a 16-bit ctypes
struct viewed as float16), bool (``c_bool``, one byte, as LLVM stores i1 in
memory) and rank 0; inputs are passed in C order and kept referenced until the
call returns. The result buffers are malloc'ed by the compiled code and never
freed (as in torch-mlir's refbackend): a returned memref may alias an input or
a constant, so freeing it is not safe. This is a test runner; it leaks.

Run-time checks: a failing ``cf.assert`` would abort the process, so every
``cf.assert`` of the linalg-on-tensors input is reworked before lowering:

* torch-mlir's (such as its "mismatched size for broadcast") get a tag with
  their id as message;
* ours (message prefix ``gqa-torch-mlir:``) are gathered into runs: checks
  with only pure ops (arith, tensor, linalg...) between them, and no later
  condition computed through a ``tensor.cast`` (it trusts a size an earlier
  check may guard).  A run is evaluated where its first check stood (the
  pure ops computing the later conditions move up), each check reports its
  outcome by a call, and an assert tagged as a stop ends the run.  So a
  failing call reports every failed check of its run (a hostile length
  usually breaks several).

On the flat CFG (after ``convert-scf-to-cf``), each tagged assert in a public
function's body splits its block: the rest of the block runs if the condition
holds, otherwise a branch reports the id (if any) to the registered
``refbackend_runtime_check`` callback and returns.  ``invoke`` then raises
:class:`RuntimeInvocationError` ``"@<function>: <message>; <message>..."``;
nothing past the failed checks has run, and the compiled module stays
usable.  The buffers allocated before the check leak on that path (their
deallocations follow it): a test runner may.  A tagged assert that cannot be
split so (in a nested region, or in a function returning values) keeps the
old behaviour: a run of ours goes on after reporting (our lowerings clamp
every data-dependent index), torch-mlir's abort.  The asserts that
``generate-runtime-verification`` adds carry no tag: they abort (a sanitizer).
Each ``memref.alloc`` of a public function gets a tagged check that malloc
returned memory (:func:`_check_allocations`): an oversized feed fails a call
instead of writing through a null pointer.

Failures of a lowering stage raise :class:`CompileStageError` with MLIR's
diagnostics and a command that reruns the stage on its saved input; argument
mismatches and failed checks at ``invoke`` raise :class:`RuntimeInvocationError`.
Sparse tensors are not supported.
"""

from __future__ import annotations

import ctypes
import math
import os
import shlex
import threading
from typing import Callable, NamedTuple, Sequence

import numpy as np
from torch_mlir import ir
from torch_mlir.dialects import torch as _torch_dialect  # noqa: F401  registers the refback-*/tm-tensor-* passes
from torch_mlir.execution_engine import ExecutionEngine
from torch_mlir.passmanager import PassManager
from torch_mlir.runtime import (
    UnrankedMemRefDescriptor,
    get_unranked_memref_descriptor,
    unranked_memref_to_numpy,
)

from gqa_torch_mlir.errors import CompileStageError, RuntimeInvocationError
from gqa_torch_mlir.repro import repro_command, save_stage_input

__all__ = ["LOWERING_PIPELINE", "CompiledModule", "FunctionSignature", "RefBackend", "TensorSpec"]

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


def _pipeline(passes: Sequence[str]) -> str:
    return "builtin.module(" + ",".join(passes) + ")"


class _Stage(NamedTuple):
    name: str
    passes: tuple[str, ...]

    @property
    def pipeline(self) -> str:
        return _pipeline(self.passes)


_BUFFERIZE = _Stage(
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
_MUNGE = _Stage("refbackend-munge-calling-conventions", ("refback-munge-calling-conventions",))
_VERIFY = _Stage("refbackend-runtime-verification", ("generate-runtime-verification",))
_TO_LOOPS = _Stage(
    "refbackend-lower-to-loops",
    (
        "func.func(tm-tensor-to-loops)",
        "func.func(refback-munge-memref-copy)",
        "func.func(convert-linalg-to-loops)",
    ),
)
_TO_CFG = _Stage("refbackend-lower-to-cfg", ("func.func(lower-affine)", "convert-scf-to-cf"))
_TO_LLVM = _Stage(
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

LOWERING_PIPELINE = _pipeline(_BUFFERIZE.passes + _MUNGE.passes + _TO_LOOPS.passes + _TO_CFG.passes + _TO_LLVM.passes)
"""The whole lowering, linalg-on-tensors to LLVM dialect, as one pipeline.

Without the Python steps of :meth:`RefBackend.compile`: there a failed
``cf.assert`` stops the call instead of aborting the process."""


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


# ---------------------------------------------------------------------------
# compile side
# ---------------------------------------------------------------------------


def _tensor_spec(type_: ir.Type) -> TensorSpec | None:
    """The spec of a dense ranked tensor of a supported dtype, else None."""
    if not isinstance(type_, ir.RankedTensorType) or type_.encoding is not None:
        return None
    dtype = _DTYPES.get(str(type_.element_type))
    if dtype is None:
        return None
    dynamic = ir.ShapedType.get_dynamic_size()
    return TensorSpec(tuple(-1 if d == dynamic else d for d in type_.shape), dtype)


def _public_functions(module: ir.Module) -> list[ir.OpView]:
    """Defined, non-private ``func.func`` ops: those munge exposes."""
    return [
        op
        for op in module.body.operations
        if op.operation.name == "func.func"
        and "sym_visibility" not in op.attributes
        and len(op.regions[0].blocks) > 0
    ]


def _function_type(func: ir.OpView) -> ir.FunctionType:
    return ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)


def _symbol_name(func: ir.OpView) -> str:
    return ir.StringAttr(func.attributes["sym_name"]).value


def _read_signatures(module: ir.Module) -> dict[str, FunctionSignature]:
    """Signatures of the public functions; unsupported types are a stage error."""
    signatures, problems = {}, []
    for func in _public_functions(module):
        name, ftype = _symbol_name(func), _function_type(func)
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


def _asm(module: ir.Module) -> str:
    return module.operation.get_asm(enable_debug_info=True)


def _run_stage(module: ir.Module, stage: _Stage) -> None:
    """Run one stage in place; on failure save its input and raise."""
    stage_input = _asm(module)
    try:
        PassManager.parse(stage.pipeline, context=module.context).run(module.operation)
    except ir.MLIRError as exc:
        repro = repro_command(stage.name, stage_input, stage.pipeline)
        raise CompileStageError(stage.name, str(exc), repro) from exc


def _consume_declarations(module: ir.Module) -> dict[str, list[np.dtype]]:
    """Result-consuming callbacks that munge declared: name -> result dtypes."""
    declarations = {}
    for op in module.body.operations:
        if op.operation.name == "func.func" and _symbol_name(op).startswith(_CONSUME_PREFIX):
            inputs = _function_type(op).inputs
            declarations[_symbol_name(op)] = [_DTYPES[str(t.element_type)] for t in inputs]
    return declarations


def _create_engine(module: ir.Module, opt_level: int) -> ExecutionEngine:
    try:
        return ExecutionEngine(module, opt_level=opt_level)
    except RuntimeError as exc:
        path = save_stage_input("refbackend-jit", _asm(module))
        raise CompileStageError(
            "refbackend-jit", str(exc), f"mlir-translate --mlir-to-llvmir {shlex.quote(path)}"
        ) from exc


# ---------------------------------------------------------------------------
# run-time checks
# ---------------------------------------------------------------------------

CHECK_PREFIX = "gqa-torch-mlir:"
_CHECK_CALLBACK = "refbackend_runtime_check"
_TAG_PREFIX = "gqa-refbackend-check:"  # + id: a foreign assert; its failure path reports the id
_STOP_TAG = "gqa-refbackend-stop"  # ends a run of our checks, each already reported
# Dialects whose ops (at tensor level, with what their regions hold) only compute
# values.  By name: MLIR's side-effect interfaces are not exposed to Python.
_PURE_DIALECTS = frozenset({"arith", "math", "index", "complex", "tensor", "linalg"})
# Pure ops that trust a size the types do not guarantee (a check may be what
# guards it): never evaluated ahead of a check.
_SIZE_TRUSTING = frozenset({"tensor.cast"})


def _message(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["msg"]).value


def _asserts(module: ir.Module, keep: Callable[[str], bool]) -> list[ir.Operation]:
    """The ``cf.assert`` ops whose message passes ``keep``, in walk order."""
    found = []

    def collect(op):
        if op.name == "cf.assert" and keep(_message(op)):
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    return found


def _prepare_checks(module: ir.Module) -> list[str]:
    """Mark the input's ``cf.assert``s for :func:`_stop_at_failed_checks`; return their messages by id.

    Runs on the linalg-on-tensors input, so exactly the asserts the module
    had are marked: those ``generate-runtime-verification`` adds later are
    not, and keep aborting (the sanitizer).  A foreign assert (torch-mlir's)
    gets the tag ``gqa-refbackend-check:<id>`` as its message.  Ours are
    gathered into runs (:func:`_gather_run`), each reported by a call and
    ended by an assert tagged ``gqa-refbackend-stop``.
    """
    messages, ours = [], {}
    with module.context:
        for op in _asserts(module, lambda _: True):
            messages.append(_message(op))
            if messages[-1].startswith(CHECK_PREFIX):
                ours[op] = len(messages) - 1
            else:
                op.attributes["msg"] = ir.StringAttr.get(f"{_TAG_PREFIX}{len(messages) - 1}")
        if messages:
            _declare_check_callback(module)
        for block in dict.fromkeys(op.block for op in ours):
            for run in _runs_of_checks(block, ours):
                _gather_run(run, ours)
    return messages


def _is_pure(op: ir.Operation) -> bool:
    """Whether ``op`` and the ops in its regions only compute values (see ``_PURE_DIALECTS``)."""
    return op.name.partition(".")[0] in _PURE_DIALECTS and all(
        _is_pure(inner.operation) for region in op.regions for block in region.blocks for inner in block.operations
    )


def _runs_of_checks(block: ir.Block, ours: dict[ir.Operation, int]) -> list[list[ir.Operation]]:
    """Our checks in ``block``, in runs: only pure ops lie between two checks of a
    run, and none that trusts a size computes a later check's condition."""
    runs, run = [], []
    for op in (o.operation for o in block.operations):
        if op in ours:
            if run and any(s.name in _SIZE_TRUSTING for s in _condition_slice(run[0], [op])):
                runs.append(run)
                run = []
            run.append(op)
        elif run and not _is_pure(op):
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    return runs


def _gather_run(run: list[ir.Operation], ours: dict[ir.Operation, int]) -> None:
    """Evaluate every check of ``run`` where its first one stood, report each, then stop if one failed.

    So a call that fails reports every check of the run it fails in (a
    negative length usually breaks several), and stops before anything but
    those checks' conditions was computed: the pure ops that compute the
    later conditions move up, before the first check.  Our lowerings clamp
    every data-dependent index, so evaluating a condition after a failed
    check stays in bounds; a size a check guards is trusted by a cast, and
    no run moves one (see :func:`_runs_of_checks`).
    """
    head = run[0]
    for op in _condition_slice(head, run[1:]):
        op.move_before(head)
    ip, all_ok = ir.InsertionPoint(head), None
    for check in run:
        with check.location:
            ok = check.operands[0]
            _report_check(ok, ours[check], ip)
            all_ok = ok if all_ok is None else ir.Operation.create("arith.andi", [ok.type], [all_ok, ok], ip=ip).result
    with head.location:
        ir.Operation.create("cf.assert", operands=[all_ok], attributes={"msg": ir.StringAttr.get(_STOP_TAG)}, ip=ip)
    for check in run:
        check.erase()


def _condition_slice(head: ir.Operation, checks: list[ir.Operation]) -> list[ir.Operation]:
    """The ops of ``head``'s block after ``head`` that compute the conditions of ``checks``, in block order.

    With the values their regions capture (a ``linalg.generic`` payload
    reads values of the enclosing block).
    """
    block, found, pending = head.block, set(), [check.operands[0] for check in checks]

    def operands(op):
        pending.extend(op.operands)
        return ir.WalkResult.ADVANCE

    while pending:
        owner = pending.pop().owner
        if isinstance(owner, ir.Block):
            continue
        op = owner.operation
        if op.block == block and head.is_before_in_block(op) and op not in found:
            found.add(op)
            op.walk(operands)
    return [op.operation for op in block.operations if op.operation in found]


def _declare_check_callback(module: ir.Module) -> None:
    """``func.func private @refbackend_runtime_check(i64, i64)``: ``CompiledModule`` registers it.

    The condition crosses as an i64 (0 or 1), not an i1: LLVM passes an i1
    argument without extending it, and the C side read garbage upper bits of
    a false condition as true (a failed check went unreported)."""
    i64 = ir.IntegerType.get_signless(64)
    ir.Operation.create(
        "func.func",
        attributes={
            "sym_name": ir.StringAttr.get(_CHECK_CALLBACK),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get([i64, i64], [])),
            "sym_visibility": ir.StringAttr.get("private"),
            "llvm.emit_c_interface": ir.UnitAttr.get(),  # register_runtime binds _mlir_ciface_<name>
        },
        regions=1,
        loc=ir.Location.unknown(),
        ip=ir.InsertionPoint(module.body),
    )


def _report_check(ok: ir.Value, check_id: int, ip: ir.InsertionPoint) -> None:
    """Call the check callback with ``ok`` (zero-extended to i64) and the check's id."""
    i64 = ir.IntegerType.get_signless(64)
    id_value = ir.Operation.create(
        "arith.constant", results=[i64], attributes={"value": ir.IntegerAttr.get(i64, check_id)}, ip=ip
    ).result
    ok_i64 = ir.Operation.create("arith.extui", results=[i64], operands=[ok], ip=ip).result
    ir.Operation.create(
        "func.call", operands=[ok_i64, id_value], attributes={"callee": ir.FlatSymbolRefAttr.get(_CHECK_CALLBACK)}, ip=ip
    )


def _can_return_at(op: ir.Operation) -> bool:
    """Whether a ``return`` in place of ``op`` ends the call: ``op`` sits in the
    body of a public function, which munge made return nothing."""
    func = op.parent
    return (
        func is not None
        and func.operation.name == "func.func"
        and "sym_visibility" not in func.attributes
        and not _function_type(func).results
    )


def _return_on_failure(op: ir.Operation, check_id: int | None) -> None:
    """Split ``op``'s block after ``op``; branch to the rest if its condition holds,
    else report the check (unless ``check_id`` is None) and return.  Then erase ``op``."""
    block, following = op.block, []
    for other in block.operations:
        if following or other.operation == op:
            following.append(other.operation)
    rest = block.create_after()
    for other in following[1:]:
        other.detach_from_parent()
        ir.InsertionPoint(rest).insert(other)
    fail = rest.create_after()
    ip = ir.InsertionPoint(fail)
    if check_id is not None:
        i1 = ir.IntegerType.get_signless(1)
        false = ir.Operation.create("arith.constant", results=[i1], attributes={"value": ir.IntegerAttr.get(i1, 0)}, ip=ip)
        _report_check(false.result, check_id, ip)
    ir.Operation.create("func.return", ip=ip)
    ir.Operation.create(
        "cf.cond_br",
        operands=[op.operands[0]],
        successors=[rest, fail],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0])},
        ip=ir.InsertionPoint(block),
    )
    op.erase()


def _check_allocations(module: ir.Module, messages: list[str]) -> None:
    """After each ``memref.alloc`` of a public function, a tagged check that it got memory.

    The compiled code calls ``malloc`` and writes through whatever it returns:
    a buffer too large for the machine (a feed of 200000 tokens makes a
    scores buffer of hundreds of GiB) was a SIGSEGV.  A null pointer now
    fails a check that :func:`_stop_at_failed_checks` turns into a return,
    reported like any other.  Runs on the loops, before ``convert-scf-to-cf``:
    every allocation there is one the code will write to.
    """
    def add_check(alloc: ir.Operation) -> None:
        ip, index = ir.InsertionPoint.after(alloc), ir.IndexType.get()
        with alloc.location:
            pointer = ir.Operation.create(
                "memref.extract_aligned_pointer_as_index", results=[index], operands=[alloc.result], ip=ip
            ).result
            zero = ir.Operation.create(
                "arith.constant", results=[index], attributes={"value": ir.IntegerAttr.get(index, 0)}, ip=ip
            ).result
            ok = ir.Operation.create(
                "arith.cmpi", results=[ir.IntegerType.get_signless(1)], operands=[pointer, zero],
                attributes={"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 1)}, ip=ip,  # ne
            ).result
            size_ok = _size_fits(alloc, ip)
            if size_ok is not None:
                ok = ir.Operation.create("arith.andi", results=[ok.type], operands=[ok, size_ok], ip=ip).result
            messages.append(
                f"{CHECK_PREFIX} out of memory: the feeds' sizes need a buffer {alloc.result.type} "
                "larger than this machine can allocate"
            )
            tag = ir.StringAttr.get(f"{_TAG_PREFIX}{len(messages) - 1}")
            ir.Operation.create("cf.assert", operands=[ok], attributes={"msg": tag}, ip=ip)

    allocs = []

    def collect(op):
        if op.name == "memref.alloc":
            allocs.append(op.operation)
        return ir.WalkResult.ADVANCE

    with module.context:
        for func in _public_functions(module):
            func.operation.walk(collect)
        if allocs and not _has_symbol(module, _CHECK_CALLBACK):
            _declare_check_callback(module)
        for alloc in allocs:
            add_check(alloc)


_ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "index": 8}


def _size_fits(alloc: ir.Operation, ip: ir.InsertionPoint):
    """Whether the bytes of ``alloc``'s buffer (static dims x dynamic sizes x element size, in
    f64) stay below 2^62: an i64 size that wraps (dims of 2^31 x 2^31 floats) is a small malloc
    that succeeds and is then written past.  None when every size is static."""
    memref = ir.MemRefType(alloc.result.type)
    layout = memref.layout
    identity = isinstance(layout, ir.AffineMapAttr) and layout.value == ir.AffineMap.get_identity(memref.rank)
    if not alloc.operands or not identity:  # otherwise the operands are not all sizes
        return None
    f64 = ir.F64Type.get()
    static = math.prod(d for d in memref.shape if d != ir.ShapedType.get_dynamic_size())
    total = ir.Operation.create(
        "arith.constant", results=[f64],
        attributes={"value": ir.FloatAttr.get(f64, float(static * _ELEMENT_BYTES.get(str(memref.element_type), 8)))}, ip=ip,
    ).result
    i64 = ir.IntegerType.get_signless(64)
    for size in alloc.operands:
        as_i64 = ir.Operation.create("arith.index_castui", results=[i64], operands=[size], ip=ip).result
        as_f64 = ir.Operation.create("arith.uitofp", results=[f64], operands=[as_i64], ip=ip).result
        total = ir.Operation.create("arith.mulf", results=[f64], operands=[total, as_f64], ip=ip).result
    limit = ir.Operation.create("arith.constant", results=[f64], attributes={"value": ir.FloatAttr.get(f64, 2.0**62)}, ip=ip).result
    return ir.Operation.create(
        "arith.cmpf", results=[ir.IntegerType.get_signless(1)], operands=[total, limit],
        attributes={"predicate": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 4)}, ip=ip,  # olt
    ).result


def _has_symbol(module: ir.Module, name: str) -> bool:
    return any(
        "sym_name" in op.attributes and _symbol_name(op) == name for op in module.body.operations
    )


def _stop_at_failed_checks(module: ir.Module, messages: list[str]) -> None:
    """Make each marked ``cf.assert`` (see :func:`_prepare_checks`) end the call when it fails.

    Needs the flat CFG of ``convert-scf-to-cf`` and munge's calling
    convention: see :func:`_return_on_failure`.  The failure path skips the
    deallocations that follow the assert (the buffers allocated so far
    leak).  An assert elsewhere (a nested region, a function that returns
    values) keeps the old behaviour: a run of ours goes on after reporting
    (our lowerings clamp every data-dependent index), and a foreign assert
    gets its message back and aborts, as the code after it relies on.
    """
    marked = _asserts(module, lambda message: message == _STOP_TAG or message.startswith(_TAG_PREFIX))
    with module.context:
        for op in marked:
            tag = _message(op)
            check_id = None if tag == _STOP_TAG else int(tag[len(_TAG_PREFIX) :])
            with op.location:
                if _can_return_at(op):
                    _return_on_failure(op, check_id)
                elif check_id is None:
                    op.erase()
                else:
                    op.attributes["msg"] = ir.StringAttr.get(messages[check_id])


# ---------------------------------------------------------------------------
# run side
# ---------------------------------------------------------------------------


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
            self._callbacks[_CHECK_CALLBACK] = _make_check_callback(self._slot)
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


class RefBackend:
    """Compiles linalg-on-tensors modules for the in-process ExecutionEngine.

    ``opt_level`` is LLVM's optimisation level (0-3). ``threads`` is accepted
    for interface parity with other backends and only recorded: the generated
    code is single-threaded.  ``runtime_verification`` adds MLIR's
    ``generate-runtime-verification`` after lowering to loops: every load and
    store is bounds-checked, and a violation aborts the process with MLIR's
    "out-of-bounds access" report before the access happens (a sanitizer for
    tests; it slows the code down).
    """

    def __init__(self, opt_level: int = 2, threads: int | None = None, runtime_verification: bool = False) -> None:
        if opt_level not in (0, 1, 2, 3):
            raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {opt_level}")
        self.opt_level = opt_level
        self.threads = threads
        self.runtime_verification = runtime_verification

    def compile(self, module: ir.Module) -> CompiledModule:
        """Lower a copy of ``module`` (the caller's module is left as it was) and JIT it."""
        signatures = _read_signatures(module)
        lowered = ir.Module.parse(_asm(module), context=module.context)
        checks = _prepare_checks(lowered)
        _run_stage(lowered, _BUFFERIZE)
        _run_stage(lowered, _MUNGE)
        consumers = _consume_declarations(lowered)
        _run_stage(lowered, _TO_LOOPS)
        if self.runtime_verification:  # bounds checks on every load and store; a violation aborts before the access
            _run_stage(lowered, _VERIFY)
        _check_allocations(lowered, checks)
        _run_stage(lowered, _TO_CFG)
        _stop_at_failed_checks(lowered, checks)
        _run_stage(lowered, _TO_LLVM)
        return CompiledModule(_create_engine(lowered, self.opt_level), signatures, consumers, checks)
