"""ONNX ``MatMul`` of activations ``[.., K]`` by a constant ``[K, N]`` weight: one 2-D matmul on the weight as it is.

torch-mlir lowers it to ``aten.matmul``, whose linalg code broadcasts the weight
to ``[B, K, N]`` and multiplies batch by batch.  Where the batch is static (a
decode step compiled with its batch and sequence fixed, specialize.py), IREE
folds that broadcast of the constant into a new ``[1, K, N]`` constant: the
module then carries every projection's weight twice, once for the general
function and once for the fixed one.  Here the leading dims are flattened
instead, ``aten.mm`` multiplies ``[M, K]`` by the weight, and the result is
unflattened: every function reads the one ``[K, N]`` constant (and IREE's data
tiling packs it once, weight_tiling.py).

Letters: K the reduced dim, N the weight's columns, M the product of the
activations' leading dims.
"""

from __future__ import annotations

from ...binder import OpBinder
from ...builder import TorchBuilder
from ...registry import NOT_LOWERED, onnx_op

_FLOATS = ("f16", "bf16", "f32", "f64")


@onnx_op("MatMul", domain="", since=1)
def lower_matmul_by_weight(b: OpBinder, tb: TorchBuilder):
    if b.num_input_slots() != 2 or not b.input_is_constant(1):
        return NOT_LOWERED
    x, weight_KN = b.tensor(0, "A"), b.tensor(1, "B")
    if x is None or weight_KN is None or x.rank < 3 or weight_KN.rank != 2 or x.dtype != weight_KN.dtype:
        return NOT_LOWERED  # torch-mlir's conversion handles (or reports) these
    if x.dtype not in _FLOATS or x.shape[-1] is None or x.shape[-1] != weight_KN.shape[0]:
        return NOT_LOWERED
    leading = [tb.size(x, d) for d in range(x.rank - 1)]
    x_MK = tb.flatten(x, 0, x.rank - 2)  # [.., K] -> [M, K]
    y_MN = tb.tensor_op("torch.aten.mm", [x_MK.value, weight_KN.value], (x_MK.shape[0], weight_KN.shape[1]), x.dtype)
    y = tb.unflatten(y_MN, 0, leading)  # [M, N] -> [.., N]
    return [b.declared_result(tb, 0, y, "Y")]
