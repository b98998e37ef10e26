"""ONNX ``ScatterND``: an unknown ``reduction`` refused by name, the rest left to torch-mlir.

Its indices and shapes are checked by the ``guard-onnx-indices`` pass
(guards/indices.py), which runs first.
"""

from __future__ import annotations

from ...binder import OpBinder
from ...builder import TorchBuilder
from ...registry import NOT_LOWERED, onnx_op
from .scatter_elements import check_reduction


@onnx_op("ScatterND", domain="", since=11)
def refuse_unknown_scatter_nd_reduction(b: OpBinder, tb: TorchBuilder):
    check_reduction(b)
    return NOT_LOWERED
