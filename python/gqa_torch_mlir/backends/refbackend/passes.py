"""The refbackend's own passes: a failed run-time check stops the call instead of aborting the process.

A failing ``cf.assert`` aborts the process.  Three passes rework the asserts
so that a failed check returns from the call and reports its id to a callback
the runner registers; ``invoke`` then raises ``RuntimeInvocationError``
``"@<function>: <message>; <message>..."``.  In the runner's order:

``gqa-refbackend-report-checks``  (linalg-on-tensors, before bufferization)
    numbers every ``cf.assert`` of the input and makes ours report
    (:func:`report_checks`; runs.py groups ours into runs).
``gqa-refbackend-check-allocations``  (memref loops, after munge)
    adds a check after every ``memref.alloc`` that it got memory
    (:func:`check_allocations`).
``gqa-refbackend-stop-at-failed-checks``  (the flat CFG of ``convert-scf-to-cf``)
    turns each marked assert into a branch: the rest of the block if it
    holds, else report and return (:func:`stop_at_failed_checks`).

What the passes hand on, to each other and to the runner, is in the IR, so
that each pass is a function of the module alone and runs in
``gqa-torch-mlir-opt`` as in the runner (test/lit/backends/refbackend/):

* the check messages by id: the module attribute ``gqa_refbackend.checks``
  (an array of strings), written by the first pass, extended by the second
  and taken back by the runner (:func:`take_check_messages`) before lowering
  to LLVM, whose module then is the one it always was;
* the marks: an assert whose message is ``gqa-refbackend-check:<id>``
  reports that id when it fails; one whose message is ``gqa-refbackend-stop``
  ends a run of checks that each reported already;
* ``func.func private @refbackend_runtime_check(i64, i64)``, called with
  ``(ok, id)``, and bound by the runner to its callback.

The asserts that ``generate-runtime-verification`` adds (after the first
pass) carry no mark: they abort, as a sanitizer should.
"""

from __future__ import annotations

import math
from typing import Callable, Dict

from torch_mlir import ir

from .checks import (
    CHECK_CALLBACK,
    CHECK_PREFIX,
    STOP_TAG,
    TAG_PREFIX,
    asserts,
    check_messages,
    declare_check_callback,
    message,
    report_check,
    set_check_messages,
)
from .runs import gather_run, runs_of_checks
from .symbols import function_type, has_symbol, public_functions

__all__ = [
    "CHECK_ALLOCATIONS", "CHECK_CALLBACK", "CHECK_PREFIX", "PASSES", "REFBACKEND_PASSES", "REPORT_CHECKS",
    "STOP_AT_FAILED_CHECKS", "can_return_at", "check_allocations", "report_checks", "run_pass",
    "stop_at_failed_checks", "take_check_messages",
]

REPORT_CHECKS = "gqa-refbackend-report-checks"
CHECK_ALLOCATIONS = "gqa-refbackend-check-allocations"
STOP_AT_FAILED_CHECKS = "gqa-refbackend-stop-at-failed-checks"


def report_checks(module) -> None:
    """Number the input's ``cf.assert``s and mark them for ``gqa-refbackend-stop-at-failed-checks``.

    Takes linalg-on-tensors (the runner's input), so exactly the asserts the
    module had are marked.  Leaves: the messages by id (walk order) in
    ``gqa_refbackend.checks``; each foreign assert (torch-mlir's) with the
    message ``gqa-refbackend-check:<id>``; ours (message prefix
    ``gqa-torch-mlir:``) gathered into runs, each check reporting
    ``(ok, id)`` by a call and the run ended by one assert of all their
    conditions, ``gqa-refbackend-stop`` (runs.py says what a run is).  The
    callback is declared when the module has any assert.
    """
    root, messages, ours = module.operation, [], {}
    with root.context:
        for op in asserts(root, lambda _: True):
            messages.append(message(op))
            if messages[-1].startswith(CHECK_PREFIX):
                ours[op] = len(messages) - 1
            else:
                op.attributes["msg"] = ir.StringAttr.get(f"{TAG_PREFIX}{len(messages) - 1}")
        if messages:
            declare_check_callback(root)
            set_check_messages(root, messages)
        for block in dict.fromkeys(op.block for op in ours):
            for run in runs_of_checks(block, ours):
                gather_run(run, ours)


def check_allocations(module) -> None:
    """After each ``memref.alloc`` of a public function, a marked check that it got memory.

    The compiled code calls ``malloc`` and writes through whatever it returns:
    a buffer too large for the machine (a feed of 200000 tokens makes a
    scores buffer of hundreds of GiB) was a SIGSEGV.  Takes the memref loops
    (before ``convert-scf-to-cf``: every allocation there is one the code
    will write to).  Leaves after each allocation the check that its pointer
    is not null and, with dynamic sizes, that its byte size did not wrap,
    as a ``cf.assert`` marked ``gqa-refbackend-check:<id>``, its message
    (``gqa-torch-mlir: out of memory: ...``) appended to
    ``gqa_refbackend.checks``; the callback declared if it was not.
    """
    root = module.operation
    messages = check_messages(root)
    allocs = []

    def collect(op):
        if op.name == "memref.alloc":
            allocs.append(op.operation)
        return ir.WalkResult.ADVANCE

    with root.context:
        for func in public_functions(root):
            func.operation.walk(collect)
        if allocs and not has_symbol(root, CHECK_CALLBACK):
            declare_check_callback(root)
        for alloc in allocs:
            _check_allocation(alloc, messages)
        if allocs:
            set_check_messages(root, messages)


def _check_allocation(alloc: ir.Operation, messages: list[str]) -> None:
    """After ``alloc``: a check that its pointer is not null (and its size did not wrap), its message appended."""
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
        tag = ir.StringAttr.get(f"{TAG_PREFIX}{len(messages) - 1}")
        ir.Operation.create("cf.assert", operands=[ok], attributes={"msg": tag}, ip=ip)


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


def can_return_at(op: ir.Operation) -> bool:
    """Whether a ``return`` in place of ``op`` ends the call: ``op`` sits in the
    body of a public function, which munge made return nothing."""
    func = op.parent
    return (
        func is not None
        and func.operation.name == "func.func"
        and "sym_visibility" not in func.attributes
        and not function_type(func).results
    )


def stop_at_failed_checks(module, can_return_at: Callable[[ir.Operation], bool] = can_return_at) -> None:
    """Make each marked ``cf.assert`` end the call when it fails.

    Takes the flat CFG of ``convert-scf-to-cf`` and munge's calling
    convention.  Leaves, for each marked assert where :func:`can_return_at`
    holds, its block split after it: ``cf.cond_br`` to the rest of the block
    if the condition holds, else to a block that reports ``(false, id)``
    (a ``gqa-refbackend-stop`` has nothing to report) and returns.  The
    failure path skips the deallocations that follow (the buffers allocated
    so far leak).  An assert elsewhere (a nested region, a function that
    returns values) cannot end the call: a stop is erased, so a run of ours
    goes on after reporting (our lowerings clamp every data-dependent
    index), and a foreign assert gets its message back from
    ``gqa_refbackend.checks`` and aborts, as the code after it relies on.
    """
    root = module.operation
    messages = check_messages(root)
    marked = asserts(root, lambda text: text == STOP_TAG or text.startswith(TAG_PREFIX))
    with root.context:
        for op in marked:
            tag = message(op)
            check_id = None if tag == STOP_TAG else int(tag[len(TAG_PREFIX) :])
            with op.location:
                if can_return_at(op):
                    _return_on_failure(op, check_id)
                elif check_id is None:
                    op.erase()
                else:
                    op.attributes["msg"] = ir.StringAttr.get(messages[check_id])


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
        report_check(false.result, check_id, ip)
    ir.Operation.create("func.return", ip=ip)
    ir.Operation.create(
        "cf.cond_br",
        operands=[op.operands[0]],
        successors=[rest, fail],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0])},
        ip=ir.InsertionPoint(block),
    )
    op.erase()


def take_check_messages(module) -> list[str]:
    """The check messages by id (``gqa_refbackend.checks``), the attribute removed from the module."""
    messages = check_messages(module.operation)
    set_check_messages(module.operation, [])
    return messages


#: ``argument -> pass``: a function of an ``ir.Module`` or its operation, in the runner's order.
PASSES: Dict[str, Callable] = {
    REPORT_CHECKS: report_checks,
    CHECK_ALLOCATIONS: check_allocations,
    STOP_AT_FAILED_CHECKS: stop_at_failed_checks,
}


def run_pass(module, argument: str, **options) -> None:
    """Run our pass ``argument`` on ``module`` in place (the runner's call)."""
    PASSES[argument](module, **options)


def _adder(argument: str, run: Callable) -> Callable:
    """``add(pm, options)`` appending ``run`` to a module-anchored PassManager as ``argument``."""
    name = "".join(word.capitalize() for word in argument.split("-"))
    description = run.__doc__.strip().splitlines()[0]

    def add(pm, options=None) -> None:
        def body(op, pass_):
            try:
                run(op)
            except Exception as e:  # never let a Python error escape into the pass manager
                op.location.emit_error(f"{argument}: internal error: {type(e).__name__}: {e}")
                pass_.signal_pass_failure()

        pm.add(body, name=name, argument=argument, description=description)

    return add


#: ``argument -> add(pm, options)``, as ``passes.PYTHON_PASSES``: what gqa-torch-mlir-opt adds to those.
REFBACKEND_PASSES: Dict[str, Callable] = {argument: _adder(argument, run) for argument, run in PASSES.items()}
