"""Runs of our checks: ``gqa-refbackend-report-checks`` evaluates the checks of a run together.

A run is a sequence of our checks (``cf.assert`` with the ``gqa-torch-mlir:``
prefix) in one block with only pure ops (arith, tensor, linalg...) between
them, none of which trusts a size (``tensor.cast``) to compute a later
check's condition: an earlier check may be what guards that size.  A run is
evaluated where its first check stood (the pure ops computing the later
conditions move up), each check reports its outcome by a call, and one
assert marked as a stop ends the run.  So a failing call reports every failed
check of its run (a hostile length usually breaks several).
"""

from __future__ import annotations

from torch_mlir import ir

from .checks import STOP_TAG, report_check

# Dialects whose ops (at tensor level, with what their regions hold) only compute
# values.  By name: MLIR's side-effect interfaces are not exposed to Python.
_PURE_DIALECTS = frozenset({"arith", "math", "index", "complex", "tensor", "linalg"})
# Pure ops that trust a size the types do not guarantee (a check may be what
# guards it): never evaluated ahead of a check.
_SIZE_TRUSTING = frozenset({"tensor.cast"})


def _is_pure(op: ir.Operation) -> bool:
    """Whether ``op`` and the ops in its regions only compute values (see ``_PURE_DIALECTS``)."""
    return op.name.partition(".")[0] in _PURE_DIALECTS and all(
        _is_pure(inner.operation) for region in op.regions for block in region.blocks for inner in block.operations
    )


def runs_of_checks(block: ir.Block, ours: dict[ir.Operation, int]) -> list[list[ir.Operation]]:
    """Our checks in ``block`` (``ours``: check -> id), in runs: only pure ops lie between
    two checks of a run, and none that trusts a size computes a later check's condition."""
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


def gather_run(run: list[ir.Operation], ours: dict[ir.Operation, int]) -> None:
    """Evaluate every check of ``run`` where its first one stood, report each, then stop if one failed.

    So a call that fails reports every check of the run it fails in (a
    negative length usually breaks several), and stops before anything but
    those checks' conditions was computed: the pure ops that compute the
    later conditions move up, before the first check.  Our lowerings clamp
    every data-dependent index, so evaluating a condition after a failed
    check stays in bounds; a size a check guards is trusted by a cast, and
    no run moves one (see :func:`runs_of_checks`).
    """
    head = run[0]
    for op in _condition_slice(head, run[1:]):
        op.move_before(head)
    ip, all_ok = ir.InsertionPoint(head), None
    for check in run:
        with check.location:
            ok = check.operands[0]
            report_check(ok, ours[check], ip)
            all_ok = ok if all_ok is None else ir.Operation.create("arith.andi", [ok.type], [all_ok, ok], ip=ip).result
    with head.location:
        ir.Operation.create("cf.assert", operands=[all_ok], attributes={"msg": ir.StringAttr.get(STOP_TAG)}, ip=ip)
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
