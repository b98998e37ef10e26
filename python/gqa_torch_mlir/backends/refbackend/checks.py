"""How the refbackend's passes and runner name run-time checks in the IR.

* ``cf.assert`` messages: ours start with :data:`CHECK_PREFIX`; a marked
  assert's message is ``gqa-refbackend-check:<id>`` (:data:`TAG_PREFIX`; its
  failure reports the id) or :data:`STOP_TAG` (ends a run of checks that each
  reported already).
* The messages by id: the module attribute ``gqa_refbackend.checks``, an
  array of strings (:func:`check_messages`, :func:`set_check_messages`).
* The callback: ``func.func private @refbackend_runtime_check(i64, i64)``,
  called with ``(ok, id)`` (:func:`declare_check_callback`, :func:`report_check`).
"""

from __future__ import annotations

from typing import Callable

from torch_mlir import ir

from .symbols import module_body

CHECK_PREFIX = "gqa-torch-mlir:"
CHECK_CALLBACK = "refbackend_runtime_check"
TAG_PREFIX = "gqa-refbackend-check:"
STOP_TAG = "gqa-refbackend-stop"
MESSAGES_ATTRIBUTE = "gqa_refbackend.checks"


def message(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["msg"]).value


def asserts(root: ir.Operation, keep: Callable[[str], bool]) -> list[ir.Operation]:
    """The ``cf.assert`` ops under ``root`` whose message passes ``keep``, in walk order."""
    found = []

    def collect(op):
        if op.name == "cf.assert" and keep(message(op)):
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    root.walk(collect)
    return found


def check_messages(root: ir.Operation) -> list[str]:
    """The messages by id; empty when the module has none."""
    if MESSAGES_ATTRIBUTE not in root.attributes:
        return []
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(root.attributes[MESSAGES_ATTRIBUTE])]


def set_check_messages(root: ir.Operation, messages: list[str]) -> None:
    """Record ``messages`` on the module; none removes the attribute."""
    if messages:
        with root.context:
            root.attributes[MESSAGES_ATTRIBUTE] = ir.ArrayAttr.get([ir.StringAttr.get(m) for m in messages])
    elif MESSAGES_ATTRIBUTE in root.attributes:
        del root.attributes[MESSAGES_ATTRIBUTE]


def declare_check_callback(root: ir.Operation) -> None:
    """``func.func private @refbackend_runtime_check(i64, i64)``: the runner registers it.

    The condition crosses as an i64 (0 or 1), not an i1: LLVM passes an i1
    argument without extending it, and the C side read garbage upper bits of
    a false condition as true (a failed check went unreported)."""
    i64 = ir.IntegerType.get_signless(64)
    ir.Operation.create(
        "func.func",
        attributes={
            "sym_name": ir.StringAttr.get(CHECK_CALLBACK),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get([i64, i64], [])),
            "sym_visibility": ir.StringAttr.get("private"),
            "llvm.emit_c_interface": ir.UnitAttr.get(),  # register_runtime binds _mlir_ciface_<name>
        },
        regions=1,
        loc=ir.Location.unknown(),
        ip=ir.InsertionPoint(module_body(root)),
    )


def report_check(ok: ir.Value, check_id: int, ip: ir.InsertionPoint) -> None:
    """Call the check callback with ``ok`` (zero-extended to i64) and the check's id."""
    i64 = ir.IntegerType.get_signless(64)
    id_value = ir.Operation.create(
        "arith.constant", results=[i64], attributes={"value": ir.IntegerAttr.get(i64, check_id)}, ip=ip
    ).result
    ok_i64 = ir.Operation.create("arith.extui", results=[i64], operands=[ok], ip=ip).result
    ir.Operation.create(
        "func.call", operands=[ok_i64, id_value], attributes={"callee": ir.FlatSymbolRefAttr.get(CHECK_CALLBACK)}, ip=ip
    )
