"""Our Python passes, each added to a PassManager by a function (a Python pass has no textual name).

  guard-onnx-indices          guard_onnx_indices.py: index guards (guards/indices.py)
  convert-onnx-gqa-to-torch   convert_onnx_gqa_to_torch.py: the registered ONNX lowerings (patterns/)

Both run before torch-mlir's ``convert-torch-onnx-to-torch``, in this order
(``PYTHON_PASSES``); the pipeline (pipeline.py), the iree backends and
``gqa-torch-mlir-opt`` take them from here.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

from ..options import LoweringOptions
from .convert_onnx_gqa_to_torch import (
    NEWEST_OPSET,
    PASS_ARGUMENT,
    PASS_DESCRIPTION,
    PASS_NAME,
    RefusedOp,
    add_pass,
    apply_lowerings,
    bindings_of,
    lower_module,
    run_pass,
)
from .guard_onnx_indices import GUARD_ARGUMENT, add_guard_pass, apply_guards

__all__ = [
    "GUARD_ARGUMENT", "NEWEST_OPSET", "PASS_ARGUMENT", "PASS_DESCRIPTION", "PASS_NAME", "PYTHON_PASSES", "RefusedOp",
    "add_guard_pass", "add_pass", "apply_guards", "apply_lowerings", "bindings_of", "lower_module", "run_pass",
]


def _add_guard(pm, options: Optional[LoweringOptions]) -> None:
    add_guard_pass(pm)


#: ``argument -> add(pm, options)``, in the order the pipeline runs them.
PYTHON_PASSES: Dict[str, Callable] = {
    GUARD_ARGUMENT: _add_guard,
    PASS_ARGUMENT: add_pass,
}
