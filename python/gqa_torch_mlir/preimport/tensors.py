"""ONNX tensor data before import: every storage form onnxruntime reads, in the one the importer takes.

A TensorProto holds its data in ``raw_data`` or in a typed field
(``float_data``, ``int32_data``, ``int64_data``, ``double_data``,
``uint64_data``).  onnxruntime reads both for every element type;
torch-mlir's importer reads the typed field of some types only (float16,
bfloat16, uint16 and float8 data in ``int32_data``, which
``onnx.helper.make_tensor`` writes, fail with "Unhandled ONNX TensorProto
data").  Each such tensor -- an initializer, or a tensor attribute such as a
Constant's ``value`` -- is rewritten to ``raw_data`` by onnx's own
``numpy_helper``, with the same values.

4-bit element types (INT4, UINT4, FLOAT4E2M1) are refused by name: the
importer reads their packed bytes as whole elements, a silently wrong
constant.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from ..errors import LoweringError

FOUR_BIT_TYPES = {getattr(TensorProto, t) for t in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(TensorProto, t)}
_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")


def tensors_of(graph: onnx.GraphProto) -> Iterator[tuple]:
    """``(tensor, what)`` for the initializers and tensor attributes of ``graph``'s own nodes."""
    for init in graph.initializer:
        yield init, f"initializer '{init.name}'"
    for node in graph.node:
        for attr in node.attribute:
            label = f"attribute '{attr.name}' of node '{node.name or node.op_type}'"
            if attr.type == AttributeProto.TENSOR:
                yield attr.t, label
            for t in attr.tensors if attr.type == AttributeProto.TENSORS else ():
                yield t, label


def check_element_types(graphs: Iterable[onnx.GraphProto]) -> None:
    """4-bit tensors (graph inputs, outputs, initializers, tensor attributes) are refused by name."""
    for graph in graphs:
        values = [(vi.type.tensor_type.elem_type, f"graph value '{vi.name}'") for vi in [*graph.input, *graph.output]]
        values += [(t.data_type, what) for t, what in tensors_of(graph)]
        for elem, what in values:
            if elem in FOUR_BIT_TYPES:
                name = TensorProto.DataType.Name(elem)
                message = (f"{what} has element type {name}; supported: 8-bit and wider types (torch-mlir's importer "
                           "reads packed 4-bit data as whole elements; store 4-bit values unpacked or packed in uint8)")
                raise LoweringError(message, [message])


def needs_raw_data(tensor: TensorProto) -> bool:
    """Whether ``tensor`` keeps its data in a typed field, or none (an empty tensor): not raw, not external, not strings."""
    return (not tensor.HasField("raw_data") and tensor.data_location != TensorProto.EXTERNAL
            and tensor.data_type != TensorProto.STRING)


def to_raw_data(tensor: TensorProto) -> None:
    """``tensor`` rewritten in place to ``raw_data``, with the same name, type, dims and values."""
    raw = numpy_helper.from_array(numpy_helper.to_array(tensor), tensor.name)
    for field in _TYPED_FIELDS:
        tensor.ClearField(field)
    tensor.raw_data = raw.raw_data


def storage_normalized(graphs: Iterable[onnx.GraphProto]) -> int:
    """Every tensor kept in a typed field rewritten to ``raw_data``, in place; returns how many."""
    changed = 0
    for graph in graphs:
        for tensor, what in tensors_of(graph):
            if needs_raw_data(tensor):
                try:
                    to_raw_data(tensor)
                except Exception as e:  # data that does not fit its dims
                    message = f"{what}: its data does not fit dims {list(tensor.dims)} ({e}; onnxruntime rejects the model)"
                    raise LoweringError(message, [message]) from None
                changed += 1
    return changed
