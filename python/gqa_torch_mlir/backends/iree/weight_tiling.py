"""Data tiling for the weight matmuls on iree-cpu: the projections read their weights packed.

A decoder's projections are one-row matmuls against constant ``[K, N]`` weights
at decode.  IREE's default llvm-cpu code reads such a weight 64 columns a
workgroup, 16 a vector, at a fraction of the memory's bandwidth (benchmarks/README.md,
"CPU, round 26"); data tiling packs the weight once, when the module loads, into
the tiles IREE's ``mmt4d`` kernels read in order.

IREE's data tiling (``--iree-dispatch-creation-data-tiling``) marks every matmul
it supports, among them the attention's own contractions, which it then fails
to compile (an ``i1`` mask packed with an ``i8`` padding, vectors larger than the
stack).  Its annotation pass leaves a function alone when one of its ops (or the
function itself) already carries the hint.  So the compile runs in two phases:
IREE's pipeline up to the end of global optimization, then :func:`annotate`
marks the matmuls whose right operand is a constant (the weights) and every
function, then the rest of the pipeline with data tiling on.  Only those
matmuls are tiled.

The cost: the packed weights are a second copy in memory beside the module's
constants (docs/limits.md).
"""

from __future__ import annotations

import ctypes
from typing import Tuple

from iree.compiler import ir

from ...errors import GqaTorchMlirError

#: IREE's per-op data-tiling hint (Dialect/Encoding/Utils/Utils.h: kDataTilingHint).
HINT = "iree.opt.data_tiling"
#: The phase the first invocation stops after and the second resumes from.
SPLIT_PHASE = "global-optimization"
#: What the second phase adds to the target's flags.
FLAGS: Tuple[str, ...] = ("--iree-dispatch-creation-data-tiling",)

_MATMULS = ("linalg.matmul", "linalg.batch_matmul")
_CONSTANTS = ("arith.constant", "util.global.load")
_FUNCTIONS = ("util.func", "func.func")


def _is_constant(value) -> bool:
    owner = value.owner
    return not isinstance(owner, ir.Block) and owner.operation.name in _CONSTANTS


def annotate(module) -> int:
    """Mark each matmul of ``module`` whose right operand is a constant with :data:`HINT`, and every
    function too: how many matmuls.

    IREE's annotation pass skips a function in which it finds a hint (the function's own
    op included), and otherwise marks every matmul it supports, the attention's too: so a
    function without a weight matmul is marked itself, and nothing in it is tiled."""
    marked = []

    def visit(op):
        op = op.operation
        if op.name in _FUNCTIONS or (op.name in _MATMULS and _is_constant(op.operands[1])):
            op.attributes[HINT] = ir.UnitAttr.get(op.context)
            marked.append(op.name)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return sum(1 for name in marked if name in _MATMULS)


def _phase_setter(name: str):
    """IREE's C API sets an invocation's phases (embedding_api.h); iree.compiler.api 3.13 wraps neither."""
    from iree.compiler.api import ctypes_dl

    function = getattr(ctypes_dl._dylib, name, None)
    if function is None:
        raise GqaTorchMlirError(f"this IREE compiler has no {name} (IREE 3.13 has): compile with weight_tiling=False")
    function.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    function.restype = None
    return function


def stop_after_split(invocation) -> None:
    """``invocation`` runs IREE's pipeline to the end of :data:`SPLIT_PHASE`."""
    _phase_setter("ireeCompilerInvocationSetCompileToPhase")(invocation._inv_p, SPLIT_PHASE.encode())


def resume_after_split(invocation) -> None:
    """``invocation`` runs IREE's pipeline from the end of :data:`SPLIT_PHASE` to a VM module."""
    _phase_setter("ireeCompilerInvocationSetCompileFromPhase")(invocation._inv_p, SPLIT_PHASE.encode())
