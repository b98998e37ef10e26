"""ONNX ``Gather`` with run-time indices: checked, then left to torch-mlir.

torch-mlir's own lowering of ``Gather`` trusts its indices: a token id past
the vocabulary reads outside the embedding table (garbage logits, or a
segfault), where onnxruntime rejects it ("indices element out of data
bounds").  Here indices that are not graph constants are checked at run time
against ``[-n, n)``, n = data's size on ``axis``, and clamped into it; the op
is then rebuilt on the clamped indices for torch-mlir's conversion.
Constant indices against a static dim are checked at compile time and left
as they are (shape arithmetic that torch-mlir folds).
"""

from __future__ import annotations

from ...binder import OpBinder
from ...builder import TorchBuilder
from ...registry import NOT_LOWERED, onnx_op
from ._indices import checked_index_values, index_input, rebuild


@onnx_op("Gather", domain="", since=1)
def check_gather_indices(b: OpBinder, tb: TorchBuilder):
    if b.num_input_slots() != 2:
        return NOT_LOWERED
    data, indices = b.tensor(0, "data"), index_input(b, 1)
    axis = b.attr_int("axis", 0)
    if data is None or indices is None or not -data.rank <= axis < data.rank:
        return NOT_LOWERED  # torch-mlir's conversion says what is wrong
    checked = checked_index_values(tb, indices, tb.size(data, axis % data.rank), "Gather", f"data dimension {axis}")
    return NOT_LOWERED if checked is None else rebuild(b, tb, [data, checked])
