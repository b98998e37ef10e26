"""Run-time checks read back once per call, at the end (pass option device=gpu, and the IREE backends).

A ``torch.runtime.assert`` on a tensor's value (``aten.Bool.Tensor`` of a
reduction) makes the host wait for the device there: IREE loads the i1 back
before the assert can run, so a decode step with seven checks synchronised
seven times (measured on an H200: 140 us of a 0.39 ms step; on the CPU with
two local-task workers, a shared decode step at past 1023 ran 1.3x faster
with its five checks deferred, benchmarks/README.md "CPU, round 3").  Here each such
check, with the ``aten.Bool.Tensor`` read that feeds only it, moves to the
end of its function, and the checks on tensors are joined: one read of their
conjunction, then, only when it is false, the reads and asserts themselves
inside a ``torch.prim.If`` (so a failing call still names its check, the
first one in program order)::

    %all = aten.logical_and(%ok1, %ok2, ...)          [] i1, on the device
    torch.prim.If (Bool.Tensor %all) { } else { Bool.Tensor %ok1; assert ...; ... }
    return ...

Safe because no check guards memory: every data-dependent index a check
covers is clamped into its buffer whatever the check says (safety.md).
Checks on host scalars (dims) move too and stay as they are; asserts inside
nested regions (loop bodies, branches) stay where they are.
"""

from __future__ import annotations

from .builder import Tensor, TorchBuilder, TypeCache

ASSERT = "torch.runtime.assert"
READ = "torch.aten.Bool.Tensor"


def defer_runtime_checks(root, ir) -> int:
    """Move the checks of every top-level function under ``root`` to its end; returns how many."""
    types = TypeCache(ir, root.context)
    moved = 0
    for op in root.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and len(op.regions[0].blocks) == 1:
            moved += _defer(op.operation.regions[0].blocks[0], ir, types)
    return moved


def _defer(block, ir, types: TypeCache) -> int:
    ops = [op.operation for op in block.operations]
    if not ops or ops[-1].name != "func.return":
        return 0
    ret = ops[-1]
    on_tensors = []  # (read, assert) pairs: the read is the assert's only input from the device
    for check in (op for op in ops if op.name == ASSERT):
        read = getattr(check.operands[0].owner, "operation", None)  # None: a block argument
        if read is not None and read.name == READ and read.parent == check.parent and len(list(read.results[0].uses)) == 1:
            on_tensors.append((read, check))
        else:
            check.move_before(ret)
    if len(on_tensors) < 2:
        for read, check in on_tensors:
            read.move_before(ret)
            check.move_before(ret)
        return len(on_tensors)
    tb = TorchBuilder(ir, types, ir.InsertionPoint(ret), ret.location)
    oks = [Tensor(read.operands[0], (), "i1") for read, _ in on_tensors]
    joined = oks[0]
    for ok in oks[1:]:
        joined = tb.logical_and(joined, ok)  # [] i1, computed on the device
    all_ok = tb.op(READ, [joined.value], ["!torch.bool"])[0]
    branch = ir.Operation.create("torch.prim.If", results=[], operands=[all_ok], regions=2, loc=ret.location, ip=ir.InsertionPoint(ret))
    ir.Operation.create("torch.prim.If.yield", loc=ret.location, ip=ir.InsertionPoint(branch.regions[0].blocks.append()))
    end = ir.Operation.create("torch.prim.If.yield", loc=ret.location, ip=ir.InsertionPoint(branch.regions[1].blocks.append()))
    for read, check in on_tensors:
        read.move_before(end)
        check.move_before(end)
    return len(on_tensors)
