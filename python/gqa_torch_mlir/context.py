"""An MLIRContext of torch-mlir's bindings with the torch dialect registered."""

from __future__ import annotations


def make_context():
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d

    context = ir.Context()
    torch_d.register_dialect(context)
    return context
