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

    %ok3 = ...                                        the last check computed
    %all = aten.logical_and(%ok1, %ok2, %ok3)         [] i1, on the device, right there
    ...                                               the step
    torch.prim.If (Bool.Tensor %all) { } else { Bool.Tensor %ok1; assert ...; ... }
    return ...

The conjunction is computed where its last check is, not at the end: IREE
3.13 then fuses it into the step's first dispatches, where at the end it was
one more command buffer after the attention, and one more wait for it.  But
IREE then reads it as soon as those dispatches are done, before the rest of
the step is submitted: a wait mid-step, free only while the step read its
row lengths there anyway.  (Round 18's CPU form tied the read to the
function's first result, so that it came after the step's work; the CPU form
now returns the checks instead, below.)

With ``as_result`` (the iree-cpu backend) nothing is read in the module: a
public function returns its checks' i1s as one more result, ``[K] i1`` in
program order, with their messages in its ``iree.reflection``
(``gqa.checks``), and the caller raises the first failed one's message
(backends/iree/runtime.py).  Read inside, even at the end, the host woke
for them and then submitted one more queue operation to signal the call's
fence: on two local-task workers each such hand-over between threads cost
30-50 µs (benchmarks/README.md, "CPU, round 22").  Private functions keep
the branch (their callers expect their results).

Safe because no check guards memory: every data-dependent index a check
covers is clamped into its buffer whatever the check says (safety.md).
Checks on host scalars (dims) move too and stay as they are.  A check on a
tensor directly inside a branch of a top-level ``torch.prim.If`` (a lowering
specialised on a size: GroupQueryAttention's B == 1) leaves it first: its i1
becomes one more result of the If (``true`` from the other branch), read
after it, with one more for the conjunction of that branch's own checks,
computed in the branch where they are.  A branch in a branch (GroupQueryAttention's
B == 1, inside the other side of its decode-step branch) gives its checks up to
the branch around it first, one level at a time; asserts in loop bodies stay
where they are.
"""

from __future__ import annotations

import json

from .builder import Tensor, TorchBuilder, TypeCache

ASSERT = "torch.runtime.assert"
CHECKS_KEY = "gqa.checks"  # the reflection entry naming a returned checks result's messages
READ = "torch.aten.Bool.Tensor"


def defer_runtime_checks(root, ir, as_result: bool = False) -> int:
    """Move the checks of every top-level function under ``root`` to its end; returns how many.
    ``as_result``: a public function returns its checks instead (:func:`_returned`)."""
    types = TypeCache(ir, root.context)
    moved = 0
    for op in root.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and len(op.regions[0].blocks) == 1:
            public = "sym_visibility" not in op.operation.attributes
            returned = as_result and public
            moved += _defer(op.operation, ir, types, returned)
    return moved


def _defer(func, ir, types: TypeCache, as_result: bool = False) -> int:
    block = func.regions[0].blocks[0]
    joined_by_branch = []  # (the hoisted checks' If results, their conjunction's If result)
    for op in [op.operation for op in block.operations]:
        if op.name == "torch.prim.If":
            joined_by_branch += _hoist_branch_checks(op, ir, types)
    ops = [op.operation for op in block.operations]
    if not ops or ops[-1].name != "func.return":
        return 0
    ret = ops[-1]
    on_tensors = []  # (read, assert) pairs: the read is the assert's only input from the device
    for check in (op for op in ops if op.name == ASSERT):
        read = _tensor_read(check)
        if read is not None:
            on_tensors.append((read, check))
        else:
            check.move_before(ret)
    if as_result and on_tensors:
        return _returned(func, on_tensors, ir, types)
    if len(on_tensors) < 2:
        for read, check in on_tensors:
            read.move_before(ret)
            check.move_before(ret)
        return len(on_tensors)
    joined = _conjunction(ops, _conjuncts([read.operands[0] for read, _ in on_tensors], joined_by_branch), ir, types, ret.location)
    at_end = TorchBuilder(ir, types, ir.InsertionPoint(ret), ret.location)
    all_ok = at_end.op(READ, [joined.value], ["!torch.bool"])[0]
    branch = ir.Operation.create("torch.prim.If", results=[], operands=[all_ok], regions=2, loc=ret.location, ip=ir.InsertionPoint(ret))
    ir.Operation.create("torch.prim.If.yield", loc=ret.location, ip=ir.InsertionPoint(branch.regions[0].blocks.append()))
    end = ir.Operation.create("torch.prim.If.yield", loc=ret.location, ip=ir.InsertionPoint(branch.regions[1].blocks.append()))
    for read, check in on_tensors:
        read.move_before(end)
        check.move_before(end)
    return len(on_tensors)


def _returned(func, on_tensors, ir, types: TypeCache) -> int:
    """The checks' i1s returned as one more result, ``checks_K`` i1 [K] in program order, their
    messages in the function's ``iree.reflection`` (``gqa.checks``: a JSON list); the reads and
    asserts dropped.  The caller reads the result and raises the first failed check's message
    (backends/iree/runtime.py).  IREE then waits for the device once a call, for the results: no
    read mid-step, no branch, and no second submission to signal the call's fence (on two
    local-task workers each such hand-over between threads cost 30-50 us: benchmarks/README.md,
    "CPU, round 22")."""
    block = func.regions[0].blocks[0]
    ret = [op.operation for op in block.operations][-1]
    tb = TorchBuilder(ir, types, ir.InsertionPoint(ret), ret.location)
    oks = [tb.unsqueeze(Tensor(read.operands[0], (), "i1"), 0) for read, _ in on_tensors]  # [] -> [1] each
    checks_K = tb.cat(oks, 0) if len(oks) > 1 else oks[0]  # -> [K]
    messages = [ir.StringAttr(check.attributes["message"]).value for _, check in on_tensors]
    for read, check in on_tensors:
        check.erase()
        read.erase()
    ir.Operation.create("func.return", operands=list(ret.operands) + [checks_K.value], loc=ret.location, ip=ir.InsertionPoint(ret))
    ret.erase()
    signature = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    context = types.context
    results = signature.results + [checks_K.value.type]
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(signature.inputs, results, context), context)
    set_reflection(ir, func, CHECKS_KEY, json.dumps(messages))
    return len(on_tensors)


def set_reflection(ir, func, key: str, text: str) -> None:
    """``key: text`` added to ``func``'s ``iree.reflection`` (IREE's per-function metadata in the
    VM module), the entries already there kept."""
    context = func.context
    entries = {}
    if "iree.reflection" in func.attributes:
        for named in ir.DictAttr(func.attributes["iree.reflection"]):
            entries[named.name] = named.attr
    entries[key] = ir.StringAttr.get(text, context)
    func.attributes["iree.reflection"] = ir.DictAttr.get(entries, context)


def _conjuncts(values, joined_by_branch) -> list:
    """The [] i1 tensors whose conjunction is every check's: ``values``, where a branch's checks
    are replaced by the conjunction that branch computed (:func:`_hoist_branch_checks`)."""
    out = []
    for value in values:
        joined = next((j for checks, j in joined_by_branch if any(value == c for c in checks)), value)
        if not any(joined == o.value for o in out):
            out.append(Tensor(joined, (), "i1"))
    return out


def _conjunction(ops, oks, ir, types: TypeCache, loc) -> Tensor:
    """The [] i1 conjunction of ``oks`` (one or more), built right after the last of ``ops`` (a
    block's, in order) that defines one of them.  Joined there rather than at the end of the
    block, it is computed as soon as its checks are: IREE runs it with the dispatches that compute
    them and the read at the end finds it done; joined at the end, it was one more submission after
    the attention and one more wait for it (benchmarks/README.md, "CPU, round 10")."""
    owners = [getattr(ok.value.owner, "operation", None) for ok in oks]  # None: a block argument
    last = max((i for i, op in enumerate(ops) if any(op == owner for owner in owners if owner is not None)), default=-1)
    tb = TorchBuilder(ir, types, ir.InsertionPoint(ops[last + 1]), loc)
    joined = oks[0]
    for ok in oks[1:]:
        joined = tb.logical_and(joined, ok)  # [] i1, on the device
    return joined


def _tensor_read(check):
    """The ``aten.Bool.Tensor`` read of an i1 [] tensor beside ``check`` that feeds only it, else None."""
    read = getattr(check.operands[0].owner, "operation", None)  # None: a block argument
    if read is not None and read.name == READ and read.parent == check.parent and len(list(read.results[0].uses)) == 1:
        return read
    return None


def _branch_checks(block) -> list:
    """(read, assert) pairs directly in ``block`` (:func:`_tensor_read`)."""
    checks = [op.operation for op in block.operations if op.operation.name == ASSERT]
    pairs = [(_tensor_read(check), check) for check in checks]
    return [(read, check) for read, check in pairs if read is not None]


def _hoist_branch_checks(if_op, ir, types: TypeCache) -> list:
    """The checks on tensors in ``if_op``'s branches moved after it (see above): the If rebuilt with
    one more result, ``checks_K1`` i1 [K+1]: each branch yields its own checks' i1s (``true`` for
    the other branch's) and the conjunction of its own, joined where they are computed
    (:func:`_conjunction`), packed into one tensor; the reads after the If take its elements.
    One result, not one per check: IREE 3.13's VM passed a buffer given to two block arguments
    of one branch (the same ``true``, or two checks IREE packed into one allocation) to the first
    and a null buffer to the second, and the call failed in a copy (OUT_OF_RANGE, "indirect buffer
    reference slot 0") on builder decoders of three layers or more (docs/limits.md).
    Returns [(the checks' elements, their conjunction's)], or []."""
    blocks = [region.blocks[0] for region in if_op.regions]
    for block in blocks:  # a branch in a branch: its checks into this one's block first
        for nested in [op.operation for op in block.operations if op.operation.name == "torch.prim.If"]:
            _hoist_branch_checks(nested, ir, types)
    pairs = [(side, read, check) for side, block in enumerate(blocks) for read, check in _branch_checks(block)]
    if not pairs:
        return []
    packed_type = types.get(f"!torch.vtensor<[{len(pairs) + 1}],i1>")
    new_if = ir.Operation.create("torch.prim.If", results=[r.type for r in if_op.results] + [packed_type],
                                 operands=[if_op.operands[0]], regions=2, loc=if_op.location, ip=ir.InsertionPoint(if_op))
    for side, (block, region) in enumerate(zip(blocks, new_if.regions)):
        block.append_to(region)
        ops = [op.operation for op in block.operations]
        terminator = ops[-1]
        tb = TorchBuilder(ir, types, ir.InsertionPoint(terminator), if_op.location)
        true = None
        oks, own = [], []
        for where, read, _ in pairs:
            if where == side:
                oks.append(Tensor(read.operands[0], (), "i1"))
                own.append(oks[-1])
            else:
                true = true or tb.eq_scalar(tb.dim_tensor(0), 0)  # [] i1 true
                oks.append(true)
        joined = _conjunction(ops, own, ir, types, if_op.location) if own else true
        checks_K1 = tb.cat([tb.unsqueeze(ok, 0) for ok in oks + [joined]], 0)  # K+1 x [] -> [K+1]
        ir.Operation.create("torch.prim.If.yield", operands=list(terminator.operands) + [checks_K1.value], loc=terminator.location,
                            ip=ir.InsertionPoint(terminator))
        terminator.erase()
    for old, new in zip(if_op.results, new_if.results):
        old.replace_all_uses_with(new)
    after = TorchBuilder(ir, types, ir.InsertionPoint(if_op), if_op.location)  # right after the new If
    checks_K1 = Tensor(new_if.results[len(if_op.results)], (len(pairs) + 1,), "i1")
    elements = [after.tensor_op("torch.aten.select.int", [checks_K1.value, after.int(0), after.int(k)], (), "i1").value
                for k in range(len(pairs) + 1)]  # [K+1] -> [] each
    last = elements[-1].owner
    for k, (_, read, check) in enumerate(pairs):  # in program order, after the If
        read.operands[0] = elements[k]
        read.move_after(last)
        check.move_after(read)
        last = check
    if_op.erase()
    return [(elements[:-1], elements[-1])]
