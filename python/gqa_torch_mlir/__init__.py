"""gqa-torch-mlir: Python rewrite patterns lowering onnxruntime's
``com.microsoft.GroupQueryAttention`` into torch-mlir's torch dialect.

Entry points:
  compile(model, output_type=...)   ONNX -> torch / torch-backend / linalg-on-tensors module
  InferenceSession(model)           compile and run on the reference backend, onnxruntime-style
  passes.add_guard_pass(pm), passes.add_pass(pm)
                                    ``guard-onnx-indices``, ``convert-onnx-gqa-to-torch`` for your own PassManager
  registry.onnx_op(...)             register another ONNX op lowering
"""

from .errors import CompileStageError, GqaTorchMlirError, LoweringError, RuntimeInvocationError
from .pipeline import OUTPUT_TYPES, compile, import_onnx
from .session import InferenceSession, NodeArg

__all__ = [
    "OUTPUT_TYPES",
    "CompileStageError",
    "GqaTorchMlirError",
    "InferenceSession",
    "LoweringError",
    "NodeArg",
    "RuntimeInvocationError",
    "compile",
    "import_onnx",
]
