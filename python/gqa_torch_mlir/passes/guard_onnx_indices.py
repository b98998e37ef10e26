"""The ``guard-onnx-indices`` pass: index guards (guards/indices.py) on ONNX ops before torch-mlir's conversion.

Every ``torch.operator`` named in the guard table gets its indices checked at
run time against ``[-n, n)`` and clamped, and its dims checked as onnxruntime
checks them; constant indices held inline against static dims are checked
here, and an out-of-range one is reported at the op and fails the pass.  It
runs before ``convert-onnx-gqa-to-torch`` (whose ScatterElements min/max
lowering then reads the clamped indices) in every pipeline of this package;
a plugin user running torch-mlir's own pipeline adds both flags.
"""

from __future__ import annotations

from typing import List

from ..guards.indices import GUARDS
from .convert_onnx_gqa_to_torch import RefusedOp, apply_lowerings, run_pass

GUARD_ARGUMENT = "guard-onnx-indices"
GUARD_NAME = "GuardOnnxIndices"
GUARD_DESCRIPTION = "Check and clamp the indices of ONNX Gather/GatherElements/GatherND/ScatterElements/ScatterND at run time"


def apply_guards(root) -> List[RefusedOp]:
    """Guard every indexed op under ``root``; return the refusals (constant indices out of range)."""
    return apply_lowerings(root, GUARDS, route_uint8_results=False)


def add_guard_pass(pm) -> None:
    """Append ``guard-onnx-indices`` to a (module-anchored) PassManager."""

    def run(op, pass_):
        run_pass(op, pass_, apply=apply_guards, argument=GUARD_ARGUMENT)

    pm.add(run, name=GUARD_NAME, argument=GUARD_ARGUMENT, description=GUARD_DESCRIPTION)
