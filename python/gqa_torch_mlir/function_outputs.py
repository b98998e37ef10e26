"""uint8 constants a function returns, kept away from a torch-mlir fold that cannot type them.

A uint8 graph output known at compile time (a uint8 initializer, or an op of
constants such as a Reshape of packed 4-bit weights) fails both backends'
torch -> linalg conversion in torch-mlir 20261001: the literal becomes a
signless ``arith.constant``, and ``torch_c.from_builtin_tensor`` of it folds
back into a ``torch.vtensor.literal`` whose signless value types it si8 while
its result says ui8 ("'torch.vtensor.literal' op inferred type(s) ... si8
... are incompatible with ... ui8").  Every other use converts to builtin
tensors; only the function's results stay torch-typed that long.

Each such returned value goes through two ``aten.bitwise_not`` (the same
bits, and neither folds away at the torch or the linalg level), so no constant
reaches the function's boundary.  Values computed from a function argument
never fold to a constant and are left alone.
"""

from __future__ import annotations

from .builder import TorchBuilder, TypeCache, parse_vtensor_type


def guard_constant_uint8_results(root, ir) -> int:
    """Rewrite every top-level function under ``root``; returns how many results were guarded."""
    types = TypeCache(ir, root.context)
    guarded = 0
    for op in root.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and len(op.regions[0].blocks):
            guarded += _guard_function(op.operation, ir, types)
    return guarded


def _guard_function(func, ir, types: TypeCache) -> int:
    ret = _terminator(func)
    if ret is None or ret.name != "func.return":
        return 0
    constant = _ConstantValues(ir)
    guarded = 0
    for i, value in enumerate(list(ret.operands)):
        parsed = parse_vtensor_type(str(value.type))  # None: not a ranked vtensor
        if parsed is not None and parsed[1] == "ui8" and constant(value):
            tb = TorchBuilder(ir, types, ir.InsertionPoint(ret), ret.location)
            once = tb.tensor_op("torch.aten.bitwise_not", [value], parsed[0], "ui8")
            ret.operands[i] = tb.tensor_op("torch.aten.bitwise_not", [once.value], once.shape, "ui8").value
            guarded += 1
    return guarded


def _terminator(func):
    blocks = list(func.regions[0].blocks)
    ops = list(blocks[-1].operations)
    return ops[-1].operation if ops else None


class _ConstantValues:
    """Whether a value depends on no block argument (memoized; an op with regions counts as not constant).

    Iterative: a decoder's values chain through thousands of ops.
    """

    def __init__(self, ir):
        self.ir = ir
        self.known = {}  # op -> bool

    def _argument(self, value) -> bool:
        return isinstance(value.owner, self.ir.Block)

    def __call__(self, value) -> bool:
        if self._argument(value):
            return False
        stack = [value.owner.operation]
        while stack:
            op = stack[-1]
            if op in self.known:
                stack.pop()
                continue
            if len(op.regions) or any(self._argument(v) or self.known.get(v.owner.operation) is False for v in op.operands):
                self.known[op] = False
                stack.pop()
                continue
            pending = [v.owner.operation for v in op.operands if v.owner.operation not in self.known]
            if pending:
                stack.extend(pending)
            else:
                self.known[op] = True
                stack.pop()
        return self.known[value.owner.operation]
