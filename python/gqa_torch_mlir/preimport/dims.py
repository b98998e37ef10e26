"""A model's symbolic dims (``dim_param``) and a copy of it with some of them fixed.

A decode step of a builder's decoder runs with ``batch_size`` and
``sequence_length`` of 1; a copy of the model with those dims fixed compiles
to code without the run-time branches every layer otherwise takes on them
(specialize.py).  The copy is what onnxruntime's free-dimension overrides
make: every value info that names the dim (graph inputs and outputs, value
infos, in subgraphs too) gets the size instead; shape inference does the rest.
"""

from __future__ import annotations

from typing import Iterator, Mapping, Set

import onnx

from .graph import all_graphs, copy_model


def _shapes(proto: onnx.ModelProto) -> Iterator[onnx.TensorShapeProto]:
    for graph in all_graphs(proto.graph):
        for info in [*graph.input, *graph.output, *graph.value_info]:
            if info.type.HasField("tensor_type") and info.type.tensor_type.HasField("shape"):
                yield info.type.tensor_type.shape


def input_dims(proto: onnx.ModelProto) -> Set[str]:
    """The symbolic dims of the main graph's inputs (initializers aside)."""
    initializers = {i.name for i in proto.graph.initializer}
    return {dim.dim_param for info in proto.graph.input if info.name not in initializers
            for dim in info.type.tensor_type.shape.dim if dim.dim_param}


def with_dims_fixed(proto: onnx.ModelProto, sizes: Mapping[str, int]) -> onnx.ModelProto:
    """A copy of ``proto`` whose dims named in ``sizes`` have those sizes (checked by the caller)."""
    fixed = copy_model(proto)
    for shape in _shapes(fixed):
        for dim in shape.dim:
            if dim.dim_param in sizes:
                dim.dim_value = sizes[dim.dim_param]  # (clears dim_param: one of the two)
    return fixed
