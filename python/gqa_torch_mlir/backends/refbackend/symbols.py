"""The module's ``func.func`` ops as the runner and the passes look them up.

Each helper takes an ``ir.Module`` or its ``builtin.module`` operation (what a
PassManager hands a Python pass).
"""

from __future__ import annotations

from torch_mlir import ir


def module_body(module) -> ir.Block:
    return module.operation.regions[0].blocks[0]


def function_type(func) -> ir.FunctionType:
    return ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)


def symbol_name(func) -> str:
    return ir.StringAttr(func.attributes["sym_name"]).value


def has_symbol(module, name: str) -> bool:
    return any("sym_name" in op.attributes and symbol_name(op) == name for op in module_body(module).operations)


def public_functions(module) -> list[ir.OpView]:
    """Defined, non-private ``func.func`` ops: those munge exposes."""
    return [
        op
        for op in module_body(module).operations
        if op.operation.name == "func.func"
        and "sym_visibility" not in op.attributes
        and len(op.regions[0].blocks) > 0
    ]
