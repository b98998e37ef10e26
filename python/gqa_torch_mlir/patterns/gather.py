"""ONNX ``Gather`` with run-time indices: checked, then left to torch-mlir.

torch-mlir's own lowering of ``Gather`` trusts its indices: a token id past
the vocabulary reads outside the embedding table (garbage logits, or a
segfault), where onnxruntime rejects it ("indices element out of data
bounds").  Here indices that are not graph constants are checked at run time
against ``[-n, n)``, n = data's size on ``axis``, and clamped into it; the op
is then rebuilt on the clamped indices for torch-mlir's conversion.
Constant indices (shape arithmetic that torch-mlir folds) are left as they are.
"""

from __future__ import annotations

from ..binder import OpBinder
from ..builder import TorchBuilder
from ..registry import NOT_LOWERED, onnx_op
from ._indices import checked_in_range, rebuild, runtime_indices


@onnx_op("Gather", domain="", since=1)
def check_gather_indices(b: OpBinder, tb: TorchBuilder):
    if b.num_input_slots() != 2:
        return NOT_LOWERED
    data, indices = b.tensor(0, "data"), runtime_indices(b, 1)
    axis = b.attr_int("axis", 0)
    if data is None or indices is None or not -data.rank <= axis < data.rank:
        return NOT_LOWERED  # torch-mlir's conversion says what is wrong
    n = tb.size(data, axis % data.rank)
    message = f"Gather: indices must lie in [-n, n), n = data dimension {axis} (onnxruntime rejects them otherwise)"
    return rebuild(b, tb, [data, checked_in_range(tb, indices, n, message)])
