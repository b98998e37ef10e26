"""Which arguments of a compiled function may be read in place at numpy's 16-byte alignment.

IREE's CPU dispatches assume 64-byte aligned bindings, and fault on an
array 16 bytes past a boundary (numpy's large arrays as a rule): such a
feed is copied (host_import.py).  The fused decode kernel's executable is
compiled for 16 (kernels/decode_attention.py, ``FEED_ALIGNMENT``: its
``stream.resources``).  After our pass, :func:`annotate` names, in each
public function's ``iree.reflection`` (``gqa.feeds_at_16``: a JSON list of
positions), the arguments whose every use is an operand of a ``flow.dispatch``
into such an executable, through ops that neither read nor copy data
(torch_c's conversion, tensor casts, size queries) or that nothing live uses
(the decomposed form's leftovers, which IREE's canonicalisation drops).  Any
other use, a return included, leaves the argument at 64: IREE may hand it to
a dispatch of its own.  The runtime imports those arguments when they are
16-byte aligned (:func:`feeds_at_16`, host_import.py).
"""

from __future__ import annotations

import json
import re
from typing import FrozenSet, Set

from ...deferred_checks import set_reflection

__all__ = ["FEEDS_KEY", "annotate", "feeds_at_16"]

FEEDS_KEY = "gqa.feeds_at_16"
LENIENT = 16  # bytes: the most an executable may assume for its bindings to be named (numpy's alignment)
_PASS_THROUGH = ("torch_c.to_builtin_tensor", "tensor.cast")
_SHAPE_ONLY = ("torch.aten.size.int", "torch.aten.dim", "tensor.dim")
_OFFSET_ALIGNMENT = re.compile(r"min_buffer_offset_alignment = (\d+)")


def annotate(ir, module) -> None:
    """Each public ``func.func`` of ``module`` (a ``builtin.module`` operation) with an argument
    only read by code compiled for 16-byte bindings: its positions in its reflection."""
    body = module.regions[0].blocks[0]
    lenient = {_name(ir, op) for op in body.operations if _lenient_executable(op.operation)}
    if not lenient:
        return
    for func in body.operations:
        if func.operation.name != "func.func" or _visibility(ir, func) != "public" or not func.regions[0].blocks:
            continue
        arguments = func.regions[0].blocks[0].arguments
        positions = [i for i, a in enumerate(arguments) if _read_at_16(ir, a, lenient)]
        if positions:
            set_reflection(ir, func.operation, FEEDS_KEY, json.dumps(positions))


def _lenient_executable(op) -> bool:
    """A ``stream.executable`` whose ``stream.resources`` assume bindings aligned to 16 bytes or less."""
    if op.name != "stream.executable" or "stream.resources" not in op.attributes:
        return False
    found = _OFFSET_ALIGNMENT.search(str(op.attributes["stream.resources"]))
    return found is not None and int(found.group(1)) <= LENIENT


def _read_at_16(ir, value, lenient: Set[str]) -> bool:
    """Every use of ``value`` (at least one live) a dispatch's operand into a lenient executable."""
    read = False
    for use in value.uses:
        op = use.owner
        name = op.name
        if name in _SHAPE_ONLY or _dead(op):
            continue
        if name in _PASS_THROUGH:
            if not _read_at_16(ir, op.results[0], lenient):
                return False
        elif name != "flow.dispatch" or not _reads_at_16(ir, op, use.operand_number, lenient):
            return False
        read = True
    return read


def _reads_at_16(ir, dispatch, operand: int, lenient: Set[str]) -> bool:
    """``dispatch`` (a ``flow.dispatch``) into lenient executables only, reading its operand
    ``operand`` without writing it (no result tied to it: a written feed is never imported)."""
    if not all(ir.SymbolRefAttr(e).value[0] in lenient for e in ir.ArrayAttr(dispatch.attributes["entry_points"])):
        return False
    workload = ir.DenseI32ArrayAttr(dispatch.attributes["operandSegmentSizes"])[0]
    tied = [ir.IntegerAttr(t).value for t in ir.ArrayAttr(dispatch.attributes["tied_operands"])] \
        if "tied_operands" in dispatch.attributes else []
    return operand >= workload and operand - workload not in tied


_DEAD_SEARCH = 64  # ops looked at before a use counts as live (the leftovers are short chains)


def _dead(op) -> bool:
    """A pure torch op whose results no live op uses, found within _DEAD_SEARCH ops (our lowering
    leaves the decomposed form's unused ops to IREE's canonicalisation: a growing cache's cat of
    past and new rows when the kernel writes present)."""
    pending, seen = [op], 0
    while pending:
        op = pending.pop()
        seen += 1
        if seen > _DEAD_SEARCH or not _pure(op):
            return False
        pending.extend(use.owner for result in op.results for use in result.uses)
    return True


def _pure(op) -> bool:
    return (op.name.startswith("torch.aten.") or op.name == "torch.prim.ListConstruct") and len(op.results) > 0


def feeds_at_16(vm_function) -> FrozenSet[int]:
    """The argument positions of ``vm_function`` that may be read in place at 16-byte alignment."""
    text = vm_function.reflection.get(FEEDS_KEY)
    return frozenset() if text is None else frozenset(json.loads(text))


def _name(ir, op) -> str:
    return ir.StringAttr(op.operation.attributes["sym_name"]).value


def _visibility(ir, func) -> str:
    attributes = func.operation.attributes
    return ir.StringAttr(attributes["sym_visibility"]).value if "sym_visibility" in attributes else "public"
