"""ONNX op lowerings, grouped by ONNX domain, one module (or package) per op.

  com_microsoft/   onnxruntime's contrib ops (GroupQueryAttention is a package of its own)
  ai_onnx/         default-domain ops: replacements for torch-mlir's lowerings, and run-time
                   index and shape guards around them

Every module below this package is imported here, so adding a lowering is one
new file whose function carries one ``@onnx_op(...)`` registration line.
"""

import importlib
import pkgutil

for _info in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
    if not _info.name.rsplit(".", 1)[1].startswith("_"):
        importlib.import_module(_info.name)
